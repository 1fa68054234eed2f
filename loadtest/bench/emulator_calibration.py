"""Benchmark: the emulator's calibration sweep, measured beside the profiles' source figures.

For each built-in profile and each server (spec, baseline): steady closed-loop load at
concurrency 1, 2, 4, 8, 16, 32, 64 (plus 250 on the seed baseline, where its saturation
figure is quoted, and 24, 48, 56 on the paper profile, the rest of its speedup table),
non-streaming /generate over HTTP, output tok/s read in SIMULATED time.
Prints per profile: the sweep (measured vs the profile's model) and the source table
(source vs measured, error), and exits 1 if a source figure is missed by more than 15%.

    .venv/bin/python loadtest/bench/emulator_calibration.py [--profile NAME] [--window-scale 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from specswitch.loadtest.emulator import load_profile
from specswitch.loadtest.emulator.calibrate import (
    CONCURRENCIES,
    compare_rows,
    format_rows,
    sweep,
)

# speedup and window (simulated seconds) per profile: steps of a few ms of wall time, and
# windows long enough for several hundred steps.
SETTINGS = {
    "seed-glm5-rtxpro6000": {"speedup": 50.0, "window_s": 40.0, "extra": {"baseline": (250,)}},
    "paper-h100-llama31-8b": {  # plus the paper table's other batch sizes
        "speedup": 5.0,
        "window_s": 10.0,
        "extra": {"spec": (24, 48, 56), "baseline": (24, 48, 56)},
    },
}


async def run_profile(name: str, scale: float) -> bool:
    prof = load_profile(name)
    cfg = SETTINGS[name]
    points = []
    for pool in ("spec", "baseline"):
        cs = tuple(sorted({*CONCURRENCIES, *cfg["extra"].get(pool, ())}))
        points += await sweep(
            prof,
            concurrencies=cs,
            pools=(pool,),
            speedup=cfg["speedup"],
            window_s=cfg["window_s"] * scale,
            progress=True,
        )
    print(f"\n### {name} (speedup {cfg['speedup']:g})\n")
    print("| pool | concurrency | measured tok/s | model tok/s | measured/model |")
    print("|---|---:|---:|---:|---:|")
    for p in points:
        print(
            f"| {p.pool} | {p.concurrency} | {p.output_tok_s:.1f} | {p.model_tok_s:.1f} | "
            f"{p.output_tok_s / p.model_tok_s:.3f} |"
        )
    rows = compare_rows(prof, points)
    print("\nSource figures vs measured:\n")
    print(format_rows(rows))
    worst = max(abs(float(r["error"])) for r in rows)
    print(f"\nworst error vs source: {worst:.1%} ({'within' if worst <= 0.15 else 'OUTSIDE'} 15%)")
    return worst <= 0.15


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=sorted(SETTINGS), action="append")
    ap.add_argument(
        "--window-scale",
        type=float,
        default=1.0,
        help="multiply every measurement window (longer = less noise)",
    )
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    t0 = time.perf_counter()
    ok = True
    for name in args.profile or sorted(SETTINGS):
        ok &= await run_profile(name, args.window_scale)
    print(
        f"\nsweep took {time.perf_counter() - t0:.0f} s wall; load average "
        f"{os.getloadavg()[0]:.2f} at end"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        import uvloop

        sys.exit(uvloop.run(main()))
    except ImportError:
        sys.exit(asyncio.run(main()))
