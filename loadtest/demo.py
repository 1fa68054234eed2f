"""`specswitch demo`: an emulated group, the router, a load ramp, a live view, a summary, a plot.

No GPU and no network: the emulator and the router run as local processes on loopback ports.
The router's thresholds come from the crossover of the profile's two throughput curves.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import datasets
from .client import ClientConfig
from .report import SWEEP_COLUMNS, TIMELINE_COLUMNS, sweep_row, write_csv, write_json
from .runs import open_client, trace
from .schedules import ramp
from .stack import ProcessStack, StackConfig
from .stats import Slo
from .thresholds import profile_thresholds


@dataclass(frozen=True)
class DemoConfig:
    profile: str = "seed-glm5-rtxpro6000"
    speedup: float = 2.0
    peak: int = 48
    duration_s: float = 120.0  # simulated
    max_tokens: int = 96
    out_dir: Path = Path("specswitch-demo")
    min_dwell_s: float = 2.0  # simulated


async def run_demo(cfg: DemoConfig) -> int:
    high, low, cross = profile_thresholds(cfg.profile, 128)
    schedule = ramp(1, cfg.peak, cfg.duration_s, "linear")
    out = sys.stdout
    out.write(
        f"specswitch demo: emulated group '{cfg.profile}' (speedup {cfg.speedup:g}) + router\n"
        f"  policy auto: baseline at load >= {high}, spec at load <= {low} "
        f"(model crossover {cross or 0:.1f})\n"
        f"  load: ramp 1 -> {cfg.peak} -> 1 concurrent requests over {cfg.duration_s:g} s "
        f"(simulated; {cfg.duration_s / cfg.speedup:.0f} s wall)\n"
    )
    out.flush()
    log_dir = Path(tempfile.mkdtemp(prefix="specswitch-demo-"))
    stack_cfg = StackConfig(
        profile=cfg.profile,
        speedup=cfg.speedup,
        high=high,
        low=low,
        min_dwell_s=cfg.min_dwell_s / cfg.speedup,
        mode="auto",
        log_dir=log_dir,
    )
    ds = datasets.load("coding", min_items=cfg.peak * 8 + 64)
    t0 = time.monotonic()
    async with ProcessStack(stack_cfg) as stack:
        out.write(
            f"  router {stack.url} (admin {stack.admin_url}); servers {stack.spec_url} "
            f"(spec), {stack.baseline_url} (baseline); logs in {log_dir}\n\n"
        )
        out.flush()
        client = await open_client(
            ClientConfig(
                target=stack.url, max_tokens=cfg.max_tokens, ignore_eos=True, output_spread=0.5
            )
        )
        try:
            result = await trace(
                client,
                ds,
                schedule,
                label="auto",
                slo=Slo(),
                time_scale=cfg.speedup,
                admin_url=stack.admin_url,
                live=True,
            )
        finally:
            await client.close()
    s = result["summary"]
    files = [
        write_json(
            cfg.out_dir / "demo.json",
            {
                "kind": "trace",
                "label": "auto",
                "profile": cfg.profile,
                "speedup": cfg.speedup,
                "policy": {"high": high, "low": low},
                **result,
            },
        ),
        write_csv(
            cfg.out_dir / "demo-timeline.csv",
            [{"run": "auto", **r} for r in result["timeline"]],
            TIMELINE_COLUMNS,
        ),
        write_csv(cfg.out_dir / "demo-summary.csv", [sweep_row("auto", s)], SWEEP_COLUMNS),
    ]
    plot = None
    try:
        from .plots import plot_timeline

        plot = plot_timeline(
            {"auto": result},
            cfg.out_dir / "demo-timeline.png",
            f"specswitch demo: {cfg.profile}, ramp 1 -> {cfg.peak} -> 1",
        )
    except Exception as exc:  # matplotlib missing: the summary still stands
        out.write(f"(no plot: {exc})\n")
    pools = s.get("pools") or {}
    out.write(
        "\nsummary (simulated time)\n"
        f"  requests {s['ok']} ok, {s['failed']} failed; served by spec {pools.get('spec', 0)}, "
        f"baseline {pools.get('baseline', 0)}\n"
        f"  mode switches {s.get('switches', '?')}; output {s['output_tok_s']:.0f} tok/s; "
        f"TTFT p50 {(s['ttft_s_p50'] or 0) * 1000:.0f} ms; "
        f"TPOT p50 {(s['tpot_s_p50'] or 0) * 1000:.1f} ms, p99 "
        f"{(s['tpot_s_p99'] or 0) * 1000:.1f} ms\n"
        f"  wall time {time.monotonic() - t0:.0f} s\n"
    )
    for f in files:
        out.write(f"  wrote {f}\n")
    if plot is not None:
        out.write(f"  plot: {plot}\n")
    out.flush()
    return 0 if s["failed"] == 0 else 1
