"""Closed-loop throughput measurement of an emulated server, and the calibration tables.

``measure_point`` runs ``concurrency`` clients against one server of an in-process group,
each sending the next /generate as soon as the previous one returns, and reads the output
token rate from the server's own counter over a window, in SIMULATED seconds (wall time x
speedup). ``calibration_table`` compares the measured figures with a profile's sources.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

from .group import EmulatorGroup, start_group
from .profile import Profile, load_profile

CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)

# The figures each built-in profile must reproduce (from shared/calibration/profiles.md).
PAPER_SPEEDUP = {
    1: 2.36,
    2: 1.81,
    4: 1.82,
    8: 1.62,
    16: 1.48,
    24: 1.39,
    32: 1.32,
    48: 1.38,
    56: 1.34,
    64: 1.38,
}
PAPER_BATCH1 = {"baseline": 158.3, "spec": 373.3}
SEED_ONE_STREAM = {"baseline": 40.0, "spec": 96.1}
SEED_SATURATION = {"baseline": (250, 773.0), "spec": (64, 354.0)}


@dataclass(frozen=True)
class Point:
    pool: str
    concurrency: int
    output_tok_s: float  # simulated seconds
    model_tok_s: float  # what the profile's formula predicts
    wall_s: float


async def _client(
    session: aiohttp.ClientSession, url: str, max_new_tokens: int, idx: int, stop: asyncio.Event
) -> None:
    n = 0
    while not stop.is_set():
        body = {
            "text": f"calibration client {idx} request {n} says hello",
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
        }
        async with session.post(url + "/generate", json=body) as resp:
            await resp.read()
        n += 1


@contextlib.asynccontextmanager
async def closed_loop(
    group: EmulatorGroup, pool: str, concurrency: int, max_new_tokens: int = 1024
) -> AsyncIterator[None]:
    """Run ``concurrency`` closed-loop clients against ``pool`` while the block runs; on exit
    stop them and abort what is still in flight."""
    server = group.servers[pool]
    stop = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [
            asyncio.create_task(_client(session, server.url, max_new_tokens, i, stop))
            for i in range(concurrency)
        ]
        try:
            engine = server.engine
            target = min(concurrency, engine.max_running)
            await engine.wait_until(lambda e: len(e.running) >= target)
            yield
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await t
            server.engine.abort_all()


async def measure_window(
    group: EmulatorGroup, pool: str, window_s: float, clock: str = "wall"
) -> float:
    """Output tok/s of ``pool`` over the next ``window_s`` simulated seconds.

    ``clock="wall"``: simulated time = wall time x speedup (what a client sees; a loaded host
    shows up as lost throughput). ``clock="gpu"``: the shared GPU's own simulated clock (steps
    applied + idle), which pauses when the host stalls: robust figures for tests.
    """
    stats = group.servers[pool].engine.stats
    gpu = group.gpu
    tokens0 = stats.generation_tokens_total
    t0, s0 = time.perf_counter(), gpu.sim_now()
    if clock == "gpu":
        await gpu.wait_sim(window_s)
        return (stats.generation_tokens_total - tokens0) / (gpu.sim_now() - s0)
    await asyncio.sleep(window_s / group.speedup)
    tokens1 = stats.generation_tokens_total
    return (tokens1 - tokens0) / ((time.perf_counter() - t0) * group.speedup)


async def measure_point(
    group: EmulatorGroup,
    pool: str,
    concurrency: int,
    *,
    window_s: float,
    max_new_tokens: int = 1024,
    warmup_s: float | None = None,
    clock: str = "wall",
) -> Point:
    """Closed-loop output tok/s (simulated time) of ``pool`` at ``concurrency`` clients."""
    server = group.servers[pool]
    t0 = time.perf_counter()
    async with closed_loop(group, pool, concurrency, max_new_tokens):
        # every client admitted and past its prefill; a few steps more
        target = min(concurrency, server.engine.max_running)
        warm = warmup_s if warmup_s is not None else 3 * server.pool.step_seconds(target)
        if clock == "gpu":  # the warm-up too, so a stalled host cannot shorten it
            await group.gpu.wait_sim(warm)
        else:
            await asyncio.sleep(warm / group.speedup)
        tok_s = await measure_window(group, pool, window_s, clock)
    wall = time.perf_counter() - t0
    return Point(pool, concurrency, tok_s, server.pool.throughput(concurrency), wall)


def source_figures(profile: Profile) -> dict[tuple[str, int], float]:
    """Absolute source figures (pool, concurrency) -> tok/s that a profile must reproduce.

    The paper profile's other figures are spec/baseline ratios (see ``compare_rows``).
    """
    if profile.name == "paper-h100-llama31-8b":
        return {("baseline", 1): PAPER_BATCH1["baseline"], ("spec", 1): PAPER_BATCH1["spec"]}
    if profile.name == "seed-glm5-rtxpro6000":
        return {
            ("baseline", 1): SEED_ONE_STREAM["baseline"],
            ("spec", 1): SEED_ONE_STREAM["spec"],
            ("baseline", SEED_SATURATION["baseline"][0]): SEED_SATURATION["baseline"][1],
            ("spec", SEED_SATURATION["spec"][0]): SEED_SATURATION["spec"][1],
        }
    return {}


async def sweep(
    profile: str | Profile,
    *,
    concurrencies: tuple[int, ...] = CONCURRENCIES,
    pools: tuple[str, ...] = ("spec", "baseline"),
    speedup: float,
    window_s: float,
    max_new_tokens: int = 1024,
    progress: bool = False,
    clock: str = "wall",
) -> list[Point]:
    prof = load_profile(profile)
    points: list[Point] = []
    group = await start_group(prof, speedup=speedup, enable_metrics=False)
    try:
        for pool in pools:
            for c in concurrencies:
                p = await measure_point(
                    group, pool, c, window_s=window_s, max_new_tokens=max_new_tokens, clock=clock
                )
                points.append(p)
                if progress:
                    print(
                        f"  {prof.name} {pool:<8} c={c:<4} {p.output_tok_s:8.1f} tok/s "
                        f"(model {p.model_tok_s:8.1f}, {p.wall_s:.1f}s wall)",
                        flush=True,
                    )
    finally:
        await group.close()
    return points


def compare_rows(profile: Profile, points: list[Point]) -> list[dict[str, object]]:
    """Rows of the measured-vs-source table (one per source figure that was measured)."""
    measured = {(p.pool, p.concurrency): p.output_tok_s for p in points}
    rows: list[dict[str, object]] = []
    for (pool, c), source in sorted(source_figures(profile).items()):
        if (pool, c) in measured:
            m = measured[(pool, c)]
            rows.append(
                {
                    "figure": f"{pool} tok/s @ {c}",
                    "source": source,
                    "measured": m,
                    "error": m / source - 1,
                }
            )
    if profile.name == "paper-h100-llama31-8b":
        for c in sorted({p.concurrency for p in points}):
            if ("spec", c) in measured and ("baseline", c) in measured and c in PAPER_SPEEDUP:
                ratio = measured[("spec", c)] / measured[("baseline", c)]
                rows.append(
                    {
                        "figure": f"speedup @ {c}",
                        "source": PAPER_SPEEDUP[c],
                        "measured": ratio,
                        "error": ratio / PAPER_SPEEDUP[c] - 1,
                    }
                )
    return rows


def format_rows(rows: list[dict[str, object]]) -> str:
    lines = ["| figure | source | measured | error |", "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['figure']} | {r['source']:.2f} | {r['measured']:.2f} | {r['error']:+.1%} |"
        )
    return "\n".join(lines)
