"""Benchmark: shared-GPU contention between the two servers of one emulated group.

Baseline server throughput at concurrency C alone, then while the spec server also serves C
clients (their steps interleave on the one simulated GPU), then alone again; and the same
for the spec server. Simulated tok/s.

    .venv/bin/python loadtest/bench/emulator_contention.py [--profile NAME] [--speedup 50]
"""

from __future__ import annotations

import argparse
import asyncio

from specswitch.loadtest.emulator import start_group
from specswitch.loadtest.emulator.calibrate import closed_loop, measure_window


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="seed-glm5-rtxpro6000")
    ap.add_argument("--speedup", type=float, default=50.0)
    ap.add_argument("--window", type=float, default=20.0, help="simulated seconds")
    args = ap.parse_args()
    group = await start_group(args.profile, speedup=args.speedup, enable_metrics=False)
    print(f"profile {args.profile}, speedup {args.speedup:g}, window {args.window:g} s simulated\n")
    print("| measured pool | C | alone tok/s | other pool busy (C clients) | ratio |")
    print("|---|---:|---:|---:|---:|")
    try:
        for pool, other in (("baseline", "spec"), ("spec", "baseline")):
            for c in (1, 8, 32):
                async with closed_loop(group, pool, c, max_new_tokens=8192):
                    alone = await measure_window(group, pool, args.window)
                    async with closed_loop(group, other, c, max_new_tokens=8192):
                        shared = await measure_window(group, pool, args.window)
                print(
                    f"| {pool} | {c} | {alone:.1f} | {shared:.1f} | {shared / alone:.2f} |",
                    flush=True,
                )
    finally:
        await group.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
