"""`specswitch loadtest compare`: the router's auto mode against both forced pools.

Starts an emulated group and the router as separate processes (stack.py), then runs the same
workload three times through the router: mode forced to ``spec``, forced to ``baseline``, and
``auto`` (PATCH /admin/policy between runs, caches flushed, the router idle). A sweep reports
auto's throughput per concurrency against the envelope (the better forced run at that
concurrency); a trace reports goodput under the SLO for the three runs.

Thresholds for auto, like an operator would set them: from the crossover of the two forced
throughput curves (the concurrency where baseline overtakes spec), high = ceil(crossover),
low = floor(0.7 * crossover). In a sweep they come from the forced runs just measured; a trace
takes them from a previous sweep report in the same output folder, else from the profile's
model curves.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import datasets
from .client import ClientConfig
from .report import (
    SWEEP_COLUMNS,
    SWEEP_TABLE,
    TIMELINE_COLUMNS,
    read_json,
    sweep_row,
    table,
    write_csv,
    write_json,
)
from .runs import SweepPlan, open_client, sweep, trace
from .schedules import Schedule
from .stack import ProcessStack, StackConfig, flush_cache, set_policy, wait_idle, wait_mode
from .stats import Slo, envelope
from .thresholds import crossover, profile_thresholds, thresholds

MODES = ("spec", "baseline", "auto")


@dataclass(frozen=True)
class CompareConfig:
    profile: str
    out_dir: Path
    speedup: float = 1.0
    plan: SweepPlan = field(default_factory=lambda: SweepPlan((1, 2, 4, 8, 16, 32, 64, 128)))
    dataset: str = "coding"
    api: str = "chat"
    max_tokens: int = 128
    output_spread: float = 0.5
    slo: Slo = field(default_factory=Slo)
    high: int | None = None
    low: int | None = None
    min_dwell_s: float = 2.0  # simulated seconds
    schedule: Schedule | None = None  # set: a trace compare instead of a sweep
    trace_name: str = "ramp"
    arrivals: str = "closed"
    show_progress: bool = True
    live: bool = False
    plots: bool = True
    log_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # more policy keys for auto runs


def analytic_check(
    profile_name: str, level: dict[str, Any], pool: str, max_tokens: int
) -> dict[str, Any]:
    """The profile's model at one measured point: decode steps plus the prefill of the
    uncached prompt tokens, both on the simulated GPU. A measured figure close to the model
    means the CPU (generator, router, emulator) was not the bottleneck."""
    from specswitch.loadtest.emulator.profile import load_profile

    p = load_profile(profile_name).pool(pool)
    c = level["concurrency"]
    b = min(c, p.max_running_requests)
    out_tokens = level["output_tokens"] / max(1, level["ok"])
    prompt = level.get("mean_prompt_tokens") or 0.0
    uncached = prompt * (1 - (level.get("cached_fraction") or 0.0))
    # per request: out_tokens/L decode steps shared by b requests, plus its own prefill step
    decode_s = (out_tokens / p.accept_length) * p.step_seconds(b) / b
    prefill_s = p.step_t0_ms / 1000 + uncached / p.prefill_tokens_per_s
    model = out_tokens / (decode_s + prefill_s)
    return {
        "pool": pool,
        "concurrency": c,
        "running_batch": b,
        "mean_output_tokens": out_tokens,
        "mean_uncached_prompt_tokens": uncached,
        "model_decode_only_tok_s": p.throughput(c),
        "model_tok_s": model,
        "measured_tok_s": level["output_tok_s"],
        "measured_over_model": level["output_tok_s"] / model,
    }


async def _prepare(stack: ProcessStack, mode: str, policy: dict[str, Any]) -> None:
    """Every run starts the same way: a fresh router process (no prefix index, drain or dwell
    state carried over from the previous run; it starts in spec), the run's policy set through
    PATCH /admin/policy, and both servers' prefix caches flushed."""
    await wait_idle(stack.admin_url)
    await stack.restart_router()
    await set_policy(stack.admin_url, {"mode": mode, **policy})
    await wait_mode(stack.admin_url, "spec" if mode == "auto" else mode)
    await flush_cache([stack.spec_url, stack.baseline_url])


async def run_compare(cfg: CompareConfig) -> dict[str, Any]:
    """Run the comparison; write JSON, CSV and PNGs into cfg.out_dir; return the report."""
    if cfg.schedule is not None:
        need = int(cfg.schedule.peak * 8) + 64
    else:
        need = sum(cfg.plan.requests_for(c) for c in cfg.plan.concurrencies)
    ds = datasets.load(cfg.dataset, min_items=need)
    x = cfg.speedup
    high, low = cfg.high, cfg.low
    source = "flags" if high is not None and low is not None else None
    if cfg.schedule is not None and source is None:
        high, low, source = _trace_thresholds(cfg)
    start_high, start_low = (high, low) if high is not None and low is not None else (10**6, 1)
    log_dir = cfg.log_dir or Path(tempfile.mkdtemp(prefix="specswitch-compare-"))
    stack_cfg = StackConfig(
        profile=cfg.profile,
        speedup=x,
        high=start_high,
        low=start_low,
        min_dwell_s=cfg.min_dwell_s / x,
        mode="spec",
        log_dir=log_dir,
    )
    t_start = time.time()
    async with ProcessStack(stack_cfg) as stack:
        client = await open_client(
            ClientConfig(
                target=stack.url,
                api=cfg.api,
                max_tokens=cfg.max_tokens,
                ignore_eos=True,
                output_spread=cfg.output_spread,
            )
        )
        try:
            if cfg.schedule is None:
                runs: dict[str, Any] = {}
                for mode in ("spec", "baseline"):
                    await _prepare(stack, mode, {})
                    runs[mode] = await sweep(
                        client,
                        ds,
                        cfg.plan,
                        label=mode,
                        slo=cfg.slo,
                        time_scale=x,
                        show_progress=cfg.show_progress,
                    )
                if source is None:
                    cross = crossover(runs["spec"], runs["baseline"])
                    high, low = thresholds(cross, max(cfg.plan.concurrencies))
                    source = (
                        f"crossover of the forced sweeps at concurrency {cross:.1f}"
                        if cross
                        else "forced sweeps (no crossover)"
                    )
                await _prepare(
                    stack,
                    "auto",
                    {"high": high, "low": low, "min_dwell_s": cfg.min_dwell_s / x, **cfg.extra},
                )
                runs["auto"] = await sweep(
                    client,
                    ds,
                    cfg.plan,
                    label="auto",
                    slo=cfg.slo,
                    time_scale=x,
                    show_progress=cfg.show_progress,
                )
            else:
                runs = {}
                for mode in ("spec", "baseline", "auto"):
                    policy = (
                        {"high": high, "low": low, "min_dwell_s": cfg.min_dwell_s / x, **cfg.extra}
                        if mode == "auto"
                        else {}
                    )
                    await _prepare(stack, mode, policy)
                    if cfg.show_progress:
                        print(f"trace {cfg.trace_name}: mode {mode}", flush=True)
                    runs[mode] = await trace(
                        client,
                        ds,
                        cfg.schedule,
                        label=mode,
                        slo=cfg.slo,
                        time_scale=x,
                        arrivals=cfg.arrivals,
                        admin_url=stack.admin_url,
                        live=cfg.live or cfg.show_progress,
                    )
        finally:
            await client.close()
    meta = {
        "profile": cfg.profile,
        "speedup": x,
        "units": "simulated time: wall durations x speedup, rates / speedup",
        "dataset": cfg.dataset,
        "dataset_items": len(ds.items),
        "api": cfg.api,
        "max_tokens": cfg.max_tokens,
        "output_spread": cfg.output_spread,
        "ignore_eos": True,
        "slo": _slo_dict(cfg.slo),
        "policy": {
            "high": high,
            "low": low,
            "min_dwell_s": cfg.min_dwell_s,
            "thresholds_from": source,
            **cfg.extra,
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        "wall_seconds": round(time.time() - t_start, 1),
    }
    if cfg.schedule is None:
        return _finish_sweep(cfg, meta, runs)
    return _finish_trace(cfg, meta, runs)


def _slo_dict(slo: Slo) -> dict[str, Any]:
    return {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "text": slo.describe()}


def _trace_thresholds(cfg: CompareConfig) -> tuple[int, int, str]:
    prior = cfg.out_dir / "compare.json"
    if prior.exists():
        data = read_json(prior)
        pol = data.get("policy") or {}
        if pol.get("high") and pol.get("low"):
            return (
                int(pol["high"]),
                int(pol["low"]),
                f"sweep report {prior.name} ({pol.get('thresholds_from')})",
            )
    high, low, cross = profile_thresholds(cfg.profile)
    return high, low, f"profile model curves (crossover {cross or 0:.1f})"


def _finish_sweep(cfg: CompareConfig, meta: dict[str, Any], runs: dict[str, Any]) -> dict:
    env = envelope(runs["spec"], runs["baseline"])
    auto_by_c = {lv["concurrency"]: lv for lv in runs["auto"]}
    spec_by_c = {lv["concurrency"]: lv for lv in runs["spec"]}
    per_c = []
    for c, e in sorted(env.items()):
        a = auto_by_c.get(c, {})
        ratio = (a.get("output_tok_s") or 0) / e["output_tok_s"] if e["output_tok_s"] else None
        per_c.append(
            {
                "concurrency": c,
                "envelope_tok_s": e["output_tok_s"],
                "best": e["from"],
                "auto_tok_s": a.get("output_tok_s"),
                "auto_over_envelope": ratio,
                "auto_served": a.get("pools"),
            }
        )
    ratios = [p["auto_over_envelope"] for p in per_c if p["auto_over_envelope"] is not None]
    c1 = min(cfg.plan.concurrencies)
    tpot_a = auto_by_c.get(c1, {}).get("tpot_s_p50")
    tpot_s = spec_by_c.get(c1, {}).get("tpot_s_p50")
    tpot_ratio = tpot_a / tpot_s if tpot_a and tpot_s else None
    failed = {m: sum(lv["failed"] for lv in runs[m]) for m in MODES}
    verdict = {
        "min_auto_over_envelope": min(ratios) if ratios else None,
        "auto_ge_95pct_envelope_everywhere": bool(ratios) and min(ratios) >= 0.95,
        "tpot_concurrency": c1,  # the lowest of the sweep (1 in the reference runs)
        "tpot_p50_c1_auto_over_spec": tpot_ratio,
        "tpot_c1_within_10pct": tpot_ratio is not None and abs(tpot_ratio - 1) <= 0.10,
        "failed_requests": failed,
    }
    checks = []
    try:
        top = max(runs["baseline"], key=lambda lv: lv["concurrency"])
        checks.append(analytic_check(cfg.profile, top, "baseline", cfg.max_tokens))
        one = min(runs["spec"], key=lambda lv: lv["concurrency"])
        checks.append(analytic_check(cfg.profile, one, "spec", cfg.max_tokens))
    except Exception as exc:  # the emulator's profile API is optional for the report
        checks.append({"error": f"{type(exc).__name__}: {exc}"})
    report = {
        "kind": "compare-sweep",
        **meta,
        "concurrencies": list(cfg.plan.concurrencies),
        "warmup_rounds": cfg.plan.warmup_rounds,
        "requests_per_level": {str(c): cfg.plan.requests_for(c) for c in cfg.plan.concurrencies},
        "runs": runs,
        "envelope": [env[c] for c in sorted(env)],
        "per_concurrency": per_c,
        "verdict": verdict,
        "analytic_check": checks,
    }
    out = cfg.out_dir
    files = [write_json(out / "compare.json", report)]
    rows = [sweep_row(m, lv) for m in MODES for lv in runs[m]]
    rows += [
        {"pool": "envelope", "concurrency": e["concurrency"], "output_tok_s": e["output_tok_s"]}
        for e in report["envelope"]
    ]
    files.append(write_csv(out / "compare.csv", rows, SWEEP_COLUMNS))
    if cfg.plots:
        from .plots import plot_latency, plot_throughput

        title = f"{cfg.profile}: auto vs forced pools ({cfg.dataset}, {cfg.max_tokens} tokens out)"
        files.append(
            plot_throughput(
                {m: runs[m] for m in MODES}, out / "throughput.png", title, report["envelope"]
            )
        )
        files.append(
            plot_latency(
                {m: runs[m] for m in MODES},
                out / "latency.png",
                f"{cfg.profile}: latency percentiles (p50 solid, p99 dotted)",
            )
        )
    report["files"] = [str(f) for f in files]
    return report


def _finish_trace(cfg: CompareConfig, meta: dict[str, Any], runs: dict[str, Any]) -> dict:
    summaries = {m: runs[m]["summary"] for m in MODES}
    good = {m: summaries[m]["goodput_tok_s"] for m in MODES}
    verdict = {
        "goodput_tok_s": good,
        "goodput_req_s": {m: summaries[m]["goodput_req_s"] for m in MODES},
        "auto_beats_both": good["auto"] > good["spec"] and good["auto"] > good["baseline"],
        "auto_over_best_forced": good["auto"] / max(good["spec"], good["baseline"], 1e-9),
        "failed_requests": {m: summaries[m]["failed"] for m in MODES},
        "zero_failed": all(summaries[m]["failed"] == 0 for m in MODES),
    }
    name = cfg.trace_name
    report = {
        "kind": "compare-trace",
        **meta,
        "trace": name,
        "arrivals": cfg.arrivals,
        "schedule": cfg.schedule.describe() if cfg.schedule else None,
        "runs": runs,
        "verdict": verdict,
    }
    out = cfg.out_dir
    files = [write_json(out / f"trace-{name}.json", report)]
    rows = [{"run": m, **r} for m in MODES for r in runs[m]["timeline"]]
    files.append(write_csv(out / f"trace-{name}-timeline.csv", rows, TIMELINE_COLUMNS))
    srows = [sweep_row(m, summaries[m]) for m in MODES]
    files.append(write_csv(out / f"trace-{name}-summary.csv", srows, SWEEP_COLUMNS))
    if cfg.plots:
        from .plots import plot_goodput, plot_timeline

        files.append(
            plot_timeline(
                runs,
                out / f"timeline-{name}.png",
                f"{cfg.profile}: {name} trace, auto vs forced pools",
            )
        )
        files.append(
            plot_goodput(
                summaries,
                out / f"goodput-{name}.png",
                f"{cfg.profile}: {name} trace, SLO {cfg.slo.describe()}",
            )
        )
    report["files"] = [str(f) for f in files]
    return report


def sweep_summary_text(report: dict[str, Any]) -> str:
    rows = [sweep_row(m, lv) for m in MODES for lv in report["runs"][m]]
    lines = [table(rows, SWEEP_TABLE), "", "auto vs envelope (better forced run):"]
    lines.append(
        table(
            report["per_concurrency"],
            (
                ("conc", "concurrency", "str"),
                ("envelope tok/s", "envelope_tok_s", "f0"),
                ("best", "best", "str"),
                ("auto tok/s", "auto_tok_s", "f0"),
                ("auto/envelope", "auto_over_envelope", "pct"),
            ),
        )
    )
    v = report["verdict"]
    lines.append(
        f"min auto/envelope {v['min_auto_over_envelope'] or 0:.1%} "
        f"({'PASS' if v['auto_ge_95pct_envelope_everywhere'] else 'MISS'} >= 95%); "
        f"TPOT p50 at c={v.get('tpot_concurrency', 1)} auto/spec "
        f"{v['tpot_p50_c1_auto_over_spec'] or 0:.3f} "
        f"({'PASS' if v['tpot_c1_within_10pct'] else 'MISS'} within 10%); "
        f"failed {v['failed_requests']}"
    )
    pol = report["policy"]
    lines.append(
        f"policy high={pol['high']} low={pol['low']} from {pol['thresholds_from']}; "
        f"figures in simulated time (speedup {report['speedup']:g})"
    )
    for chk in report.get("analytic_check", []):
        if "error" not in chk:
            lines.append(
                f"model check {chk['pool']} c={chk['concurrency']}: measured "
                f"{chk['measured_tok_s']:.0f} tok/s vs model {chk['model_tok_s']:.0f} "
                f"({chk['measured_over_model']:.1%})"
            )
    return "\n".join(lines)


def trace_summary_text(report: dict[str, Any]) -> str:
    rows = [sweep_row(m, report["runs"][m]["summary"]) for m in MODES]
    cols = (
        ("run", "pool", "str"),
        ("tok/s", "output_tok_s", "f0"),
        ("goodput tok/s", "goodput_tok_s", "f0"),
        ("goodput req/s", "goodput_req_s", "f1"),
        ("SLO met", "slo_attainment", "pct"),
        ("TTFT p50 ms", "ttft_s_p50", "ms"),
        ("TTFT p99 ms", "ttft_s_p99", "ms"),
        ("TPOT p50 ms", "tpot_s_p50", "ms"),
        ("ok", "ok", "str"),
        ("failed", "failed", "str"),
    )
    v = report["verdict"]
    auto = report["runs"]["auto"]["summary"]
    return "\n".join(
        [
            table(rows, cols),
            f"SLO: {report['slo']['text']}; auto/best forced goodput {v['auto_over_best_forced']:.2f}x "
            f"({'PASS' if v['auto_beats_both'] else 'MISS'}); failed {v['failed_requests']}; "
            f"auto switches {auto.get('switches', '?')}; policy high={report['policy']['high']} "
            f"low={report['policy']['low']} ({report['policy']['thresholds_from']})",
        ]
    )
