"""`specswitch layout plan|check|probe|models|gpus` (argparse only; handlers import lazily)."""

from __future__ import annotations

import argparse


def _ratio_or_auto(text: str) -> float | None:
    if text == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not 'auto' or a ratio") from None


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="catalog model id (specswitch layout models)")
    p.add_argument("--model-config", metavar="PATH", help="local HF config.json (or its folder)")
    p.add_argument(
        "--checkpoint-gib",
        type=float,
        help="checkpoint size for --model-config (default: model.safetensors.index.json beside it)",
    )
    p.add_argument(
        "--draft",
        default="catalog",
        help="'catalog' (the model's EAGLE-3/MTP draft), 'none', or an EAGLE-3 draft id/path",
    )
    p.add_argument("--draft-config", metavar="PATH", help="EAGLE-3 draft config.json")
    p.add_argument("--draft-gib", type=float, help="draft weight size (GiB) when not known")


def _add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", default="rtx-pro-6000", help="catalog GPU id (specswitch layout gpus)")
    p.add_argument("--gpu-mem-gib", type=float, help="custom GPU memory in GiB (overrides --gpu's)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs in the node (default 8)")
    _add_model_args(p)
    p.add_argument("--layout", default="shared", choices=("shared", "disjoint", "single"))
    p.add_argument("--context-len", type=int, default=8192, help="input+output tokens per request")
    p.add_argument(
        "--split",
        type=_ratio_or_auto,
        default=None,
        help="share of the KV memory for spec (shared layout); auto = room for --spec-requests "
        "requests, at most half",
    )
    p.add_argument("--spec-kv-tokens", type=int, help="size the spec pool in tokens instead")
    p.add_argument("--spec-requests", type=int, default=48, help="spec --max-running-requests")
    p.add_argument("--kv-dtype", default="auto", help="auto|bf16|fp8_e4m3|fp8_e5m2")
    p.add_argument(
        "--draft-accounting",
        default="separate",
        choices=("separate", "scaled"),
        help="separate (default; read in SGLang 0.5.x source, and safe if the other holds) or scaled",
    )
    p.add_argument(
        "--mem-fraction-static",
        type=float,
        help="--layout single: evaluate one server launched with this fraction",
    )
    p.add_argument("--spec-mem-fraction", type=float, help="evaluate the spec server's fraction")
    p.add_argument(
        "--baseline-mem-fraction", type=float, help="evaluate the baseline server's fraction"
    )
    p.add_argument(
        "--free-gib",
        help="free GiB per GPU before the first server: one value, or one per GPU (comma list, "
        "as `layout probe` reads them)",
    )
    p.add_argument("--spec-gpus", type=int, help="disjoint: GPUs for spec (default half)")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--spec-num-steps", type=int, default=3)
    p.add_argument("--spec-eagle-topk", type=int, default=1)
    p.add_argument("--spec-num-draft-tokens", type=int, default=4)
    p.add_argument("--sglang-image", help="pinned SGLang image for the .env")
    g = p.add_argument_group("overheads outside SGLang's formula (per GPU)")
    g.add_argument("--cuda-context-gib", type=float, help="CUDA context before F0 (catalog)")
    g.add_argument("--comm-gib", type=float, help="NCCL/all-reduce buffers when tp>1 (catalog)")
    g.add_argument("--meta-gib", type=float, help="default 0.5")
    g.add_argument("--activation-mib-per-token", type=float, help="default 0.5")
    g.add_argument("--graph-mib-per-bs", type=float, help="default 2.0")
    g.add_argument("--spec-extra-gib", type=float, help="default 2.0")
    g.add_argument("--chunked-prefill-size", type=int)
    g.add_argument("--cuda-graph-max-bs", type=int)


def _cmd_plan(args: argparse.Namespace) -> int:
    from .commands import run_plan

    return run_plan(args)


def _cmd_check(args: argparse.Namespace) -> int:
    from .commands import run_check

    return run_check(args)


def _cmd_table(args: argparse.Namespace) -> int:
    from .commands import run_table

    return run_table(args)


def _cmd_probe(args: argparse.Namespace) -> int:
    from .commands import run_probe

    return run_probe(args)


def _cmd_models(args: argparse.Namespace) -> int:
    from .commands import run_models

    return run_models(args)


def _cmd_gpus(args: argparse.Namespace) -> int:
    from .commands import run_gpus

    return run_gpus(args)


def _layout_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def register(subparsers: argparse._SubParsersAction) -> None:
    layout = subparsers.add_parser(
        "layout",
        help="plan two SGLang servers on the same GPUs (memory planner)",
        description="Plan SGLang memory: weights, KV tokens and --mem-fraction-static per server.",
    )
    layout.set_defaults(func=lambda a: _layout_help(layout))
    sub = layout.add_subparsers(dest="layout_command", metavar="ACTION")

    plan = sub.add_parser("plan", help="plan a layout (table, json, env or launch args)")
    _add_plan_args(plan)
    plan.add_argument("--format", default="table", choices=("table", "json", "env", "args"))
    plan.add_argument("--output", "-o", metavar="PATH", help="write to PATH (atomically)")
    plan.set_defaults(func=_cmd_plan)

    check = sub.add_parser("check", help="re-validate a plan (.json or .env) against a model")
    check.add_argument("plan_file", metavar="PLAN", help="plan JSON or .env written by plan")
    _add_model_args(check)
    check.add_argument("--gpu-mem-gib", type=float, help="custom GPU memory in GiB")
    check.set_defaults(func=_cmd_check)

    table = sub.add_parser("table", help="Markdown table: every catalog model, both layouts")
    _add_plan_args(table)
    table.set_defaults(func=_cmd_table)

    probe = sub.add_parser("probe", help="read real free memory per GPU (needs torch and a GPU)")
    probe.add_argument("--format", default="table", choices=("table", "json"))
    probe.set_defaults(func=_cmd_probe)

    models = sub.add_parser("models", help="list catalog model ids")
    models.add_argument("--format", default="table", choices=("table", "json"))
    models.set_defaults(func=_cmd_models)

    gpus = sub.add_parser("gpus", help="list catalog GPU ids")
    gpus.add_argument("--format", default="table", choices=("table", "json"))
    gpus.set_defaults(func=_cmd_gpus)
