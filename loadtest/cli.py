"""`specswitch loadtest sweep|trace|compare|plot` and `specswitch demo` (argparse only here;
handlers import the heavy parts lazily)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, NoReturn

PROFILES = ("seed-glm5-rtxpro6000", "paper-h100-llama31-8b")


def _user_error(msg: str) -> Exception:
    from specswitch.errors import UserError

    return UserError(msg)


def parse_duration(text: str, flag: str) -> float:
    """'250ms', '2s', '0.5' (seconds) -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", text)
    if not m:
        raise _user_error(f"{flag} {text!r}: write a duration like 2s, 0.5 or 250ms")
    value = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
    if value <= 0:
        raise _user_error(f"{flag} must be > 0")
    return value


def parse_concurrencies(text: str) -> tuple[int, ...]:
    """'1,2,4' or '1..128' (powers of two) or a mix: '1..16,24,32'."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if ".." in part:
                a, b = (int(x) for x in part.split(".."))
                if a < 1 or b < a:
                    raise ValueError
                c = a
                while c <= b:
                    out.append(c)
                    c *= 2
                if out[-1] != b:
                    out.append(b)
            else:
                out.append(int(part))
        except ValueError:
            raise _user_error(
                f"--concurrency {text!r}: write integers >= 1 like 1,2,4,8 or 1..128"
            ) from None
    if not out or min(out) < 1:
        raise _user_error("--concurrency values must be >= 1")
    return tuple(sorted(set(out)))


def _one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Bad flags: one line `specswitch: error: ...` and exit 2 (no usage dump)."""

    def error(message: str) -> NoReturn:
        parser.exit(2, f"specswitch: error: {parser.prog}: {message} (see --help)\n")

    parser.error = error  # type: ignore[method-assign]
    return parser


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise _user_error(f"{name} must be > 0, got {value:g}")


def _common(p: argparse.ArgumentParser, target: bool = True) -> None:
    if target:
        p.add_argument(
            "--target",
            required=True,
            help="base URL of the router, an SGLang server or the emulator",
        )
        p.add_argument("--api", choices=("chat", "completions", "generate"), default="chat")
        p.add_argument("--model", default=None, help="model name (default: GET /v1/models)")
        p.add_argument(
            "--ignore-eos",
            action="store_true",
            help="send ignore_eos (SGLang extra) so every request runs to max tokens",
        )
        p.add_argument(
            "--speedup",
            type=float,
            default=1.0,
            help="the emulator's --speedup: figures are reported in simulated time",
        )
        p.add_argument(
            "--label",
            default="run",
            help="name of this run (the 'pool' column of the CSV, e.g. spec|baseline)",
        )
        p.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    p.add_argument(
        "--dataset",
        default="coding",
        help="coding | agentic | mixed | PATH to JSONL or ShareGPT JSON",
    )
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument(
        "--output-spread",
        type=float,
        default=0.5 if not target else 0.0,
        help="per-request max tokens drawn in [(1-S) x max, max] (0 = all equal)",
    )
    p.add_argument("--slo-ttft", default=None, help="goodput SLO on time to first token (2s)")
    p.add_argument("--slo-tpot", default=None, help="goodput SLO on time per output token (100ms)")
    p.add_argument("--out", type=Path, default=None, help="folder for JSON, CSV and PNGs")
    p.add_argument("--no-progress", action="store_true", help="no progress bars / live view")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plots")


def _schedule_args(p: argparse.ArgumentParser, peak: float, duration: float) -> None:
    p.add_argument(
        "--shape", choices=("ramp", "step", "bursts", "constant", "custom"), default="ramp"
    )
    p.add_argument("--base", type=float, default=1.0, help="load at the start/end")
    p.add_argument("--peak", type=float, default=peak, help="load at the peak")
    p.add_argument("--duration", type=float, default=duration, help="seconds (simulated)")
    p.add_argument(
        "--interp",
        choices=("linear", "log", "step"),
        default="linear",
        help="ramp between points linearly or geometrically (equal time per doubling)",
    )
    p.add_argument("--points", default=None, help="custom shape: TIME:VALUE,... (0:1,60:128,120:1)")
    p.add_argument("--burst-period", type=float, default=30.0)
    p.add_argument("--burst-width", type=float, default=5.0)
    p.add_argument(
        "--arrivals",
        choices=("closed", "poisson"),
        default="closed",
        help="closed: the load is a concurrency; poisson: the load is an arrival "
        "rate (conversations per second)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    lt = subparsers.add_parser(
        "loadtest",
        help="load generator: sweeps, traces, auto-vs-forced comparisons",
        description="Streaming load against any OpenAI/SGLang endpoint (router, SGLang, emulator).",
    )
    sub = lt.add_subparsers(dest="loadtest_command", metavar="ACTION")
    lt.set_defaults(func=lambda a: (lt.print_help(), 2)[1])

    sw = sub.add_parser("sweep", help="closed loop at each concurrency of a list")
    _common(sw)
    sw.add_argument("--concurrency", default="1..64", help="1,2,4 or 1..128 (powers of two)")
    sw.add_argument(
        "--rounds",
        type=float,
        default=4.0,
        help="requests per level = max(--min-requests, rounds x concurrency)",
    )
    sw.add_argument("--min-requests", type=int, default=8)
    sw.add_argument(
        "--warmup-rounds", type=float, default=1.0, help="leading rounds left out of the figures"
    )
    sw.add_argument("--requests", type=int, default=None, help="fixed requests per level")
    sw.add_argument("--csv", type=Path, default=None, help="also write the CSV here")
    sw.set_defaults(func=_cmd_sweep)

    tr = sub.add_parser("trace", help="load that changes over time (ramp, step, bursts, Poisson)")
    _common(tr)
    _schedule_args(tr, peak=64, duration=120)
    tr.add_argument(
        "--admin", default=None, help="router admin URL: record mode, load and per-pool in-flight"
    )
    tr.add_argument("--seed", type=int, default=0)
    tr.set_defaults(func=_cmd_trace)

    cp = sub.add_parser("compare", help="start an emulated group + router; auto vs forced pools")
    _common(cp, target=False)
    cp.add_argument("--profile", default=PROFILES[0], help="emulator profile name")
    cp.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="emulator time scale (< 1 = slow motion to spare the CPU)",
    )
    cp.add_argument("--api", choices=("chat", "completions", "generate"), default="chat")
    cp.add_argument("--concurrency", default="1..128")
    cp.add_argument("--rounds", type=float, default=5.0)
    cp.add_argument("--min-requests", type=int, default=12)
    cp.add_argument(
        "--warmup-rounds",
        type=float,
        default=2.0,
        help="leading rounds left out (auto switches and drains at the start of each level)",
    )
    cp.add_argument("--high", type=int, default=None, help="auto: switch to baseline at load >=")
    cp.add_argument("--low", type=int, default=None, help="auto: back to spec at load <=")
    cp.add_argument("--min-dwell", type=float, default=2.0, help="seconds (simulated)")
    cp.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another router policy key for the auto run (repeatable), e.g. spec_queue_max=8",
    )
    cp.add_argument(
        "--trace",
        action="store_true",
        help="compare on a trace (see --shape ...) instead of a sweep",
    )
    _schedule_args(cp, peak=128, duration=240)
    cp.add_argument("--name", default=None, help="trace name in file names (default: the shape)")
    cp.add_argument("--log-dir", type=Path, default=None, help="child process logs")
    cp.set_defaults(func=_cmd_compare)

    pl = sub.add_parser("plot", help="redraw the PNGs of a compare report")
    pl.add_argument("report", type=Path)
    pl.set_defaults(func=_cmd_plot)
    for parser in (lt, sw, tr, cp, pl):
        _one_line_errors(parser)

    demo = subparsers.add_parser(
        "demo",
        help="emulated group + router + a load ramp, live view, summary and plot",
        description="The embedded default end to end: no GPU, no network, under two minutes.",
    )
    demo.add_argument("--profile", default=PROFILES[0])
    demo.add_argument("--speedup", type=float, default=2.0)
    demo.add_argument("--peak", type=int, default=48)
    demo.add_argument("--duration", type=float, default=120.0, help="seconds (simulated)")
    demo.add_argument("--max-tokens", type=int, default=96)
    demo.add_argument("--out", type=Path, default=Path("specswitch-demo"))
    demo.set_defaults(func=_cmd_demo)
    _one_line_errors(demo)


# ----------------------------------------------------------------------------- handlers


def _slo(args: argparse.Namespace) -> Any:
    from .stats import Slo

    return Slo(
        ttft_s=parse_duration(args.slo_ttft, "--slo-ttft") if args.slo_ttft else None,
        tpot_s=parse_duration(args.slo_tpot, "--slo-tpot") if args.slo_tpot else None,
    )


def _client_config(args: argparse.Namespace) -> Any:
    from .client import ClientConfig

    _positive("--speedup", args.speedup)
    _positive("--timeout", args.timeout)
    if args.max_tokens < 1:
        raise _user_error("--max-tokens must be >= 1")
    try:
        return ClientConfig(
            target=args.target,
            api=args.api,
            model=args.model,
            max_tokens=args.max_tokens,
            ignore_eos=args.ignore_eos,
            timeout_s=args.timeout,
            output_spread=args.output_spread,
        )
    except ValueError as exc:
        raise _user_error(f"bad option: {exc}") from None


def _run(coro: Any) -> Any:
    """Run a handler's coroutine on uvloop; SIGTERM and SIGINT cancel it, so child
    processes and open streams are closed on the way out (no orphans)."""
    import asyncio
    import signal

    async def guarded() -> Any:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        return await coro

    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        return runner(guarded())
    except asyncio.CancelledError:
        raise _user_error("interrupted; child processes were stopped") from None


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .runs import SweepPlan

    cfg = _client_config(args)
    try:
        plan = SweepPlan(
            parse_concurrencies(args.concurrency),
            args.rounds,
            args.min_requests,
            args.requests,
            args.warmup_rounds,
        )
    except ValueError as exc:
        raise _user_error(str(exc)) from None
    slo = _slo(args)
    from . import datasets

    need = sum(plan.requests_for(c) for c in plan.concurrencies)
    ds = datasets.load(args.dataset, min_items=need)

    async def main() -> list[dict[str, Any]]:
        from .runs import open_client, sweep

        client = await open_client(cfg)
        try:
            return await sweep(
                client,
                ds,
                plan,
                label=args.label,
                slo=slo,
                time_scale=args.speedup,
                show_progress=not args.no_progress,
            )
        finally:
            await client.close()

    levels = _run(main())
    from .report import SWEEP_COLUMNS, SWEEP_TABLE, sweep_row, table, write_csv, write_json

    rows = [sweep_row(args.label, lv) for lv in levels]
    print(table(rows, SWEEP_TABLE))
    report = {
        "kind": "sweep",
        "target": args.target,
        "label": args.label,
        "api": args.api,
        "dataset": args.dataset,
        "max_tokens": args.max_tokens,
        "speedup": args.speedup,
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s},
        "levels": levels,
    }
    written = []
    if args.csv:
        written.append(write_csv(args.csv, rows, SWEEP_COLUMNS))
    if args.out:
        written.append(write_json(args.out / "sweep.json", report))
        written.append(write_csv(args.out / "sweep.csv", rows, SWEEP_COLUMNS))
        if not args.no_plot:
            from .plots import plot_latency, plot_throughput

            written.append(
                plot_throughput(
                    {args.label: levels}, args.out / "throughput.png", f"sweep of {args.target}"
                )
            )
            written.append(
                plot_latency(
                    {args.label: levels}, args.out / "latency.png", f"latency of {args.target}"
                )
            )
    for path in written:
        print(f"wrote {path}")
    return 0 if all(lv["failed"] == 0 for lv in levels) else 1


def _schedule(args: argparse.Namespace) -> Any:
    from .schedules import build

    return build(
        args.shape,
        base=args.base,
        peak=args.peak,
        duration=args.duration,
        interp=args.interp,
        points=args.points,
        burst_period=args.burst_period,
        burst_width=args.burst_width,
    )


def _cmd_trace(args: argparse.Namespace) -> int:
    cfg = _client_config(args)
    schedule = _schedule(args)
    slo = _slo(args)
    from . import datasets

    ds = datasets.load(args.dataset, min_items=int(schedule.peak * 8) + 64)

    async def main() -> dict[str, Any]:
        from .runs import open_client, trace

        client = await open_client(cfg)
        try:
            return await trace(
                client,
                ds,
                schedule,
                label=args.label,
                slo=slo,
                time_scale=args.speedup,
                arrivals=args.arrivals,
                admin_url=args.admin,
                live=not args.no_progress,
                seed=args.seed,
            )
        finally:
            await client.close()

    result = _run(main())
    from .report import (
        SWEEP_COLUMNS,
        SWEEP_TABLE,
        TIMELINE_COLUMNS,
        sweep_row,
        table,
        write_csv,
        write_json,
    )

    s = result["summary"]
    print(table([sweep_row(args.label, s)], SWEEP_TABLE))
    print(
        f"goodput {s['goodput_tok_s']:.0f} tok/s, {s['goodput_req_s']:.2f} req/s "
        f"(SLO {slo.describe()}); switches {s.get('switches', '-')}"
    )
    if args.out:
        report = {
            "kind": "trace",
            "target": args.target,
            "label": args.label,
            "speedup": args.speedup,
            **result,
        }
        paths = [
            write_json(args.out / "trace.json", report),
            write_csv(
                args.out / "trace-timeline.csv",
                [{"run": args.label, **r} for r in result["timeline"]],
                TIMELINE_COLUMNS,
            ),
            write_csv(args.out / "trace-summary.csv", [sweep_row(args.label, s)], SWEEP_COLUMNS),
        ]
        if not args.no_plot:
            from .plots import plot_timeline

            paths.append(
                plot_timeline(
                    {args.label: result},
                    args.out / "timeline.png",
                    f"trace of {args.target}",
                    focus=args.label,
                )
            )
        for p in paths:
            print(f"wrote {p}")
    return 0 if s["failed"] == 0 else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    from .compare import CompareConfig, run_compare, sweep_summary_text, trace_summary_text
    from .runs import SweepPlan

    _positive("--speedup", args.speedup)
    _positive("--min-dwell", args.min_dwell)
    if args.max_tokens < 1:
        raise _user_error("--max-tokens must be >= 1")
    if not 0 <= args.output_spread < 1:
        raise _user_error("--output-spread must be in [0, 1)")
    if (args.high is None) != (args.low is None):
        raise _user_error("give both --high and --low, or neither (thresholds from the sweep)")
    if args.high is not None and not 0 <= args.low < args.high:
        raise _user_error("--low must be >= 0 and below --high")
    from specswitch.loadtest.emulator.profile import builtin_profile_names

    if args.profile not in builtin_profile_names():
        raise _user_error(
            f"unknown profile {args.profile!r}; built in: {', '.join(builtin_profile_names())}"
        )
    try:
        plan = SweepPlan(
            parse_concurrencies(args.concurrency),
            args.rounds,
            args.min_requests,
            warmup_rounds=args.warmup_rounds,
        )
    except ValueError as exc:
        raise _user_error(str(exc)) from None
    schedule = _schedule(args) if args.trace else None
    out = args.out or Path("results") / args.profile
    cfg = CompareConfig(
        profile=args.profile,
        out_dir=out,
        speedup=args.speedup,
        plan=plan,
        dataset=args.dataset,
        api=args.api,
        max_tokens=args.max_tokens,
        output_spread=args.output_spread,
        slo=_slo(args),
        high=args.high,
        low=args.low,
        min_dwell_s=args.min_dwell,
        extra=_policy_pairs(args.policy),
        schedule=schedule,
        trace_name=args.name or args.shape,
        arrivals=args.arrivals,
        show_progress=not args.no_progress,
        plots=not args.no_plot,
        log_dir=args.log_dir,
    )
    report = _run(run_compare(cfg))
    print(trace_summary_text(report) if schedule else sweep_summary_text(report))
    for f in report["files"]:
        print(f"wrote {f}")
    return 0


def _policy_pairs(pairs: list[str]) -> dict[str, Any]:
    """KEY=VALUE -> {key: JSON value or string}; the router validates keys and values."""
    import json

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _user_error(f"--policy {pair!r}: write KEY=VALUE, e.g. spec_queue_max=8")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _cmd_plot(args: argparse.Namespace) -> int:
    from .report import read_json

    try:
        report = read_json(args.report)
    except (OSError, ValueError) as exc:
        raise _user_error(f"cannot read report {args.report}: {exc}") from None
    from .replot import replot

    for f in replot(report, args.report.parent):
        print(f"wrote {f}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import DemoConfig, run_demo

    _positive("--speedup", args.speedup)
    _positive("--duration", args.duration)
    if args.peak < 2:
        raise _user_error("--peak must be >= 2")
    return _run(
        run_demo(
            DemoConfig(
                profile=args.profile,
                speedup=args.speedup,
                peak=args.peak,
                duration_s=args.duration,
                max_tokens=args.max_tokens,
                out_dir=args.out,
            )
        )
    )
