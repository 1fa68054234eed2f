"""Handlers behind `specswitch layout ...` (argparse namespace in, exit code out)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from specswitch.errors import UserError

from .catalog import (
    DraftSpec,
    GpuSpec,
    ModelSpec,
    custom_gpu,
    eagle_draft_from_hf_config,
    get_gpu,
    get_model,
    load_gpus,
    load_models,
    model_from_hf_config,
)
from .memory import Overheads
from .planner import DEFAULT_IMAGE, PlanRequest, plan
from .render import render_args, render_env, render_json, render_table


def _finite(name: str, value: float | None) -> None:
    if value is not None and (math.isnan(value) or math.isinf(value)):
        raise UserError(f"{name} must be a finite number, not {value}")


def _gpu(gpu_id: str | None, mem_gib: float | None) -> GpuSpec:
    _finite("--gpu-mem-gib", mem_gib)
    if gpu_id and gpu_id in load_gpus():
        base = get_gpu(gpu_id)
        return custom_gpu(mem_gib, base) if mem_gib is not None else base
    if mem_gib is not None:
        return custom_gpu(mem_gib)
    return get_gpu(gpu_id or "")


def _model_and_draft(args: argparse.Namespace) -> tuple[ModelSpec, bool, DraftSpec | None]:
    _finite("--checkpoint-gib", args.checkpoint_gib)
    _finite("--draft-gib", args.draft_gib)
    if args.model and args.model_config:
        raise UserError("give --model or --model-config, not both")
    if args.model_config:
        model = model_from_hf_config(args.model_config, args.checkpoint_gib, args.draft_gib)
    elif args.model:
        model = get_model(args.model)
        if args.checkpoint_gib is not None:
            if not (0 < args.checkpoint_gib < 100_000):
                raise UserError(f"--checkpoint-gib {args.checkpoint_gib} must be > 0 and < 100000")
            model = replace(model, checkpoint_gb=args.checkpoint_gib * (1 << 30) / 1e9)
    else:
        raise UserError("give --model ID (see `specswitch layout models`) or --model-config PATH")
    use_draft = args.draft != "none"
    draft: DraftSpec | None = None
    if args.draft_config:
        name = "" if args.draft in ("catalog", "none") else args.draft
        draft = eagle_draft_from_hf_config(args.draft_config, name, args.draft_gib)
        use_draft = True
    elif args.draft not in ("catalog", "none"):
        if model.draft is None or model.draft.algorithm != "EAGLE3":
            raise UserError(
                f"--draft {args.draft}: pass --draft-config PATH (its config.json) so its KV "
                "geometry and size are known"
            )
        draft = replace(model.draft, model_id=args.draft)
        if args.draft_gib:
            draft = replace(draft, size_gb=args.draft_gib * (1 << 30) / 1e9)
    if use_draft and draft is None and model.draft is None:
        use_draft = False  # the model has no known draft: spec server runs without one
    return model, use_draft, draft


def build_request(args: argparse.Namespace) -> PlanRequest:
    free_gib, free_each = _parse_free(args.free_gib)
    for name in ("mem_fraction_static", "spec_mem_fraction", "baseline_mem_fraction",
                 "cuda_context_gib", "comm_gib", "meta_gib", "activation_mib_per_token",
                 "graph_mib_per_bs", "spec_extra_gib", "split"):  # fmt: skip
        _finite(f"--{name.replace('_', '-')}", getattr(args, name, None))
    model, use_draft, draft = _model_and_draft(args)
    given = {
        "meta_gib": args.meta_gib,
        "activation_mib_per_token": args.activation_mib_per_token,
        "graph_mib_per_bs": args.graph_mib_per_bs,
        "spec_extra_gib": args.spec_extra_gib,
        "chunked_prefill_size": args.chunked_prefill_size,
        "cuda_graph_max_bs": args.cuda_graph_max_bs,
        "context_gib": args.cuda_context_gib,
        "comm_gib": args.comm_gib,
    }
    overheads = Overheads(**{k: v for k, v in given.items() if v is not None})
    if args.layout == "single" and (args.spec_mem_fraction or args.baseline_mem_fraction):
        raise UserError("--layout single takes --mem-fraction-static, not spec/baseline fractions")
    if args.layout != "single" and args.mem_fraction_static is not None:
        raise UserError(
            "--mem-fraction-static evaluates --layout single; for two servers give "
            "--spec-mem-fraction and --baseline-mem-fraction"
        )
    for name in ("spec_num_steps", "spec_eagle_topk", "spec_num_draft_tokens"):
        if not (1 <= getattr(args, name) <= 64):
            raise UserError(f"--{name.replace('_', '-')} must be between 1 and 64")
    return PlanRequest(
        gpu=_gpu(args.gpu, args.gpu_mem_gib),
        gpus=args.gpus,
        model=model,
        layout=args.layout,
        use_draft=use_draft,
        draft=draft,
        context_len=args.context_len,
        kv_dtype=args.kv_dtype,
        split=args.split,
        spec_kv_tokens=args.spec_kv_tokens,
        spec_requests=args.spec_requests,
        draft_accounting=args.draft_accounting,
        mem_fraction_static=args.mem_fraction_static,
        spec_mem_fraction=args.spec_mem_fraction,
        baseline_mem_fraction=args.baseline_mem_fraction,
        free_gib=free_gib,
        free_gib_each=free_each,
        spec_gpus=args.spec_gpus,
        page_size=args.page_size,
        overheads=overheads,
        spec_num_steps=args.spec_num_steps,
        spec_eagle_topk=args.spec_eagle_topk,
        spec_num_draft_tokens=args.spec_num_draft_tokens,
        sglang_image=args.sglang_image or DEFAULT_IMAGE,
    )


def _parse_free(text: str | None) -> tuple[float | None, tuple[float, ...] | None]:
    if text is None:
        return None, None
    try:
        values = tuple(float(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise UserError(f"--free-gib {text!r}: give GiB as a number or a comma list") from None
    for v in values:
        _finite("--free-gib", v)
    if not values:
        raise UserError("--free-gib is empty")
    if len(values) == 1:
        return values[0], None
    return None, values


def run_table(args: argparse.Namespace) -> int:
    from .report import catalog_table

    if not args.model and not args.model_config:
        args.model = next(iter(load_models()))
    print(catalog_table(build_request(args)), end="")
    return 0


def write_atomic(path: str, text: str) -> None:
    """Write via a temp file + rename (nothing half-written); UserError when it cannot."""
    target = Path(path)
    if target.is_dir():
        raise UserError(f"--output {path} is a directory; give a file path such as {path}/plan.env")
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise UserError(
            f"cannot write --output {path}: {exc.strerror or exc} (does {target.parent} exist?)"
        ) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise UserError(f"cannot write --output {path}: {exc.strerror or exc}") from exc
        raise


def run_plan(args: argparse.Namespace) -> int:
    req = build_request(args)
    result = plan(req)
    if args.format in ("env", "args") and not result.fits:
        print(render_table(result), end="", file=sys.stderr)
        return 1
    text = {"table": render_table, "json": render_json, "env": render_env, "args": render_args}[
        args.format
    ](result)
    if args.format == "json":
        text += "\n"
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.output} ({'fits' if result.fits else 'REFUSED'})", file=sys.stderr)
    else:
        print(text, end="")
    return 0 if result.fits else 1


# ---------------------------------------------------------------------------- check


def _read_plan_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read plan {path}: {exc}") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"{path} is not valid JSON: {exc}") from None
        servers = {s["role"]: s for s in data.get("servers", [])}
        spec = servers.get("spec") or servers.get("single") or {}
        base = servers.get("baseline") or {}
        return {
            "layout": data.get("layout"),
            "gpu": data.get("gpu"),
            "gpu_memory_gib": data.get("gpu_memory_gib"),
            "gpus": data.get("gpus"),
            "model": data.get("model"),
            "context_len": data.get("context_len"),
            "kv_dtype": data.get("kv_cache_dtype", "auto"),
            "draft_accounting": data.get("draft_accounting", "separate"),
            "free_gib": data.get("free_gib"),
            "free_gib_each": tuple(data["free_gib_each"]) if data.get("free_gib_each") else None,
            "page_size": data.get("page_size", 1),
            "spec_fraction": spec.get("mem_fraction_static"),
            "baseline_fraction": base.get("mem_fraction_static"),
            "spec_tokens": spec.get("kv_tokens"),
            "baseline_tokens": base.get("kv_tokens"),
            "spec_requests": spec.get("max_running_requests", 48),
            "spec_gpus": spec.get("tp") if data.get("layout") == "disjoint" else None,
            "speculative": spec.get("speculative", True),
        }
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip().strip('"')
    if "SPEC_MEM_FRACTION" not in env:
        raise UserError(f"{path} is neither a plan JSON nor a plan .env (no SPEC_MEM_FRACTION)")
    try:
        return {
            "layout": env.get("LAYOUT", "shared"),
            "gpu": env.get("LAYOUT_GPU"),
            "gpu_memory_gib": float(env["LAYOUT_GPU_MEM_GIB"])
            if env.get("LAYOUT_GPU_MEM_GIB")
            else None,
            "gpus": int(env.get("LAYOUT_GPUS") or env["TP_SIZE"]),
            "model": env.get("LAYOUT_MODEL") or env.get("SERVED_MODEL_NAME"),
            "context_len": int(env["CONTEXT_LENGTH"]),
            "kv_dtype": env.get("KV_CACHE_DTYPE", "auto"),
            "draft_accounting": env.get("LAYOUT_DRAFT_ACCOUNTING", "separate"),
            "free_gib": _parse_free(env.get("LAYOUT_FREE_GIB") or None)[0],
            "free_gib_each": _parse_free(env.get("LAYOUT_FREE_GIB") or None)[1],
            "page_size": 1,
            "spec_fraction": float(env["SPEC_MEM_FRACTION"]),
            "baseline_fraction": float(env["BASELINE_MEM_FRACTION"]),
            "spec_tokens": int(env.get("SPEC_KV_TOKENS") or 0),
            "baseline_tokens": int(env.get("BASELINE_KV_TOKENS") or 0),
            "spec_requests": int(env.get("SPEC_MAX_RUNNING_REQUESTS") or 48),
            "spec_gpus": int(env["SPEC_TP_SIZE"]) if env.get("LAYOUT") == "disjoint" else None,
            "speculative": bool(env.get("SPEC_ALGORITHM")),
        }
    except (KeyError, ValueError) as exc:
        raise UserError(f"{path}: missing or bad value for {exc}") from None


def run_check(args: argparse.Namespace) -> int:
    saved = _read_plan_file(Path(args.plan_file))
    if not args.model and not args.model_config:
        args.model = saved["model"]
    model, use_draft, draft = _model_and_draft(args)
    gpu_id = str(saved["gpu"] or "").split("@")[0]
    mem = args.gpu_mem_gib
    if mem is None and saved["gpu_memory_gib"] is not None:
        known = load_gpus().get(gpu_id)
        if known is None or abs(known.memory_gib - saved["gpu_memory_gib"]) > 1e-3:
            mem = saved["gpu_memory_gib"]
    gpu = _gpu(gpu_id, mem)
    layout = saved["layout"] or "shared"
    fractions: dict[str, Any] = {}
    if layout == "single":
        fractions["mem_fraction_static"] = saved["spec_fraction"]
    else:
        fractions["spec_mem_fraction"] = saved["spec_fraction"]
        fractions["baseline_mem_fraction"] = saved["baseline_fraction"]
    req = PlanRequest(
        gpu=gpu,
        gpus=int(saved["gpus"]),
        model=model,
        layout=layout,
        use_draft=use_draft and saved["speculative"],
        draft=draft,
        context_len=int(saved["context_len"]),
        kv_dtype=saved["kv_dtype"],
        draft_accounting=saved["draft_accounting"],
        free_gib=saved["free_gib"],
        free_gib_each=saved["free_gib_each"],
        spec_gpus=saved["spec_gpus"],
        page_size=int(saved["page_size"]),
        spec_requests=int(saved["spec_requests"]),
        **fractions,
    )
    result = plan(req, alternatives=False)
    print(render_table(result), end="")
    problems = list(result.reasons) + [q for s in result.servers for q in s.problems]
    expected = {"spec": saved["spec_tokens"], "single": saved["spec_tokens"],
                "baseline": saved["baseline_tokens"]}  # fmt: skip
    for s in result.servers:
        want = expected.get(s.role)
        if want and s.kv_tokens != want:
            problems.append(
                f"{s.role}: the plan expects {want:,} KV tokens, this model gives {s.kv_tokens:,} "
                f"with --mem-fraction-static {s.mem_fraction_static}"
            )
    if problems:
        print("CHECK FAILED:")
        print("\n".join(f"  - {p}" for p in problems))
        return 1
    print(f"CHECK OK: {args.plan_file} holds for {model.id}")
    return 0


# ---------------------------------------------------------------------- probe / lists


def run_probe(args: argparse.Namespace) -> int:
    from .probe import ProbeUnavailable, read_gpus, summarize

    try:
        readings = read_gpus()
    except ProbeUnavailable as exc:
        print(f"probe: {exc}")
        return 1
    if args.format == "json":
        print(json.dumps([r.__dict__ for r in readings], indent=2))
    else:
        print("\n".join(summarize(readings)))
    return 0


def _print_rows(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def run_models(args: argparse.Namespace) -> int:
    models = load_models()
    if args.format == "json":
        print(json.dumps({k: _model_json(m) for k, m in models.items()}, indent=2))
        return 0
    rows = [["id", "hf_id", "layers", "attention", "checkpoint", "draft"]]
    for m in models.values():
        att = (
            f"MLA {m.kv_lora_rank}+{m.qk_rope_head_dim}{' +DSA' if m.dsa_index_head_dim else ''}"
            if m.attention == "mla"
            else f"GQA {m.kv_heads}x{m.head_dim}{f' ({m.swa_layers} SWA)' if m.swa_layers else ''}"
        )
        d = m.draft
        draft = f"{d.algorithm} {d.model_id or '(MTP layer)'} {d.size_gb:g} GB" if d else "-"
        rows.append([m.id, m.hf_id, str(m.layers), att, f"{m.checkpoint_gb:g} GB", draft])
    _print_rows(rows)
    return 0


def _model_json(m: ModelSpec) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(m)


def run_gpus(args: argparse.Namespace) -> int:
    gpus = load_gpus()
    if args.format == "json":
        print(json.dumps({k: g.__dict__ for k, g in gpus.items()}, indent=2))
        return 0
    rows = [["id", "memory", "context GiB", "NCCL GiB @TP8", "name"]]
    for g in gpus.values():
        rows.append([g.id, f"{g.memory_gib:.2f} GiB", f"{g.cuda_context_gib:g}",
                     f"{g.comm_gib(8):.2f}", g.name])  # fmt: skip
    _print_rows(rows)
    print("custom GPU: --gpu-mem-gib N (with --gpu ID to keep that GPU's overhead figures)")
    return 0
