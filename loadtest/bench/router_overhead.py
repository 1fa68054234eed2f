"""Router overhead: time-to-first-token through the router minus calling the emulator directly.

Runs the emulator (`specswitch emulate`) and the router (`specswitch serve`, forced to the
spec pool so both paths reach the same server) as separate processes; this process is the
client. For each concurrency it runs closed-loop streamed chat requests alternately against
the spec server directly and through the router, in interleaved blocks so slow phases of a
shared machine hit both paths alike, and reports TTFT p50/p99 for both and their difference.

    .venv/bin/python loadtest/bench/router_overhead.py                   # c = 1 and 64
    .venv/bin/python loadtest/bench/router_overhead.py --concurrency 1 --requests 2000 --json out.json

A benchmark, not a test: it reports figures. On a noisy shared machine, read p50 first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from pathlib import Path

import aiohttp
from router_procs import emulated_router


async def _ttft(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    async with session.post(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    ) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {await resp.text()}")
        first = 0.0
        async for line in resp.content:
            if not first and line.startswith(b"data: "):
                first = time.perf_counter() - t0
        return first


async def _block(
    session: aiohttp.ClientSession, url: str, body: bytes, concurrency: int, n: int
) -> list[float]:
    out: list[float] = []
    remaining = n

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            out.append(await _ttft(session, url, body))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def _q(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def run(args: argparse.Namespace) -> dict:
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Write a function that adds two numbers."}],
            "max_tokens": args.max_tokens,
            "stream": True,
        }
    ).encode()
    results: dict = {"speedup": args.speedup, "max_tokens": args.max_tokens, "runs": []}
    async with emulated_router(args.profile, args.speedup, "spec") as stack:
        spec_url, router_url = stack.spec_url, stack.router_url
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await _block(session, spec_url, body, 4, 40)  # warm-up both paths
            await _block(session, router_url, body, 4, 40)
            for c in args.concurrency:
                direct: list[float] = []
                routed: list[float] = []
                per_block = max(c * 4, 40)
                blocks = max(1, args.requests // per_block)
                for i in range(blocks):
                    order = (spec_url, router_url) if i % 2 == 0 else (router_url, spec_url)
                    for url in order:
                        ttfts = await _block(session, url, body, c, per_block)
                        (direct if url == spec_url else routed).extend(ttfts)
                row = {
                    "concurrency": c,
                    "requests_each": len(direct),
                    "direct_p50_ms": _q(direct, 0.5) * 1e3,
                    "direct_p99_ms": _q(direct, 0.99) * 1e3,
                    "router_p50_ms": _q(routed, 0.5) * 1e3,
                    "router_p99_ms": _q(routed, 0.99) * 1e3,
                    "direct_mean_ms": statistics.fmean(direct) * 1e3,
                    "router_mean_ms": statistics.fmean(routed) * 1e3,
                }
                row["added_p50_ms"] = row["router_p50_ms"] - row["direct_p50_ms"]
                row["added_p99_ms"] = row["router_p99_ms"] - row["direct_p99_ms"]
                results["runs"].append(row)
                print(
                    f"c={c:<3} n={len(direct):<5} direct p50 {row['direct_p50_ms']:7.3f} ms "
                    f"p99 {row['direct_p99_ms']:7.3f} | router p50 {row['router_p50_ms']:7.3f} "
                    f"p99 {row['router_p99_ms']:7.3f} | added p50 {row['added_p50_ms']:+.3f} ms "
                    f"p99 {row['added_p99_ms']:+.3f} ms",
                    flush=True,
                )
        async with aiohttp.ClientSession() as session:
            async with session.get(stack.admin_url + "/metrics") as resp:
                text = await resp.text()
        m = re.search(r"specswitch_router_overhead_seconds_sum ([0-9.e+-]+)", text)
        n = re.search(r"specswitch_router_overhead_seconds_count ([0-9.e+-]+)", text)
        if m and n and float(n.group(1)):
            results["router_self_reported_mean_ms"] = float(m.group(1)) / float(n.group(1)) * 1e3
            print(
                "router's own overhead histogram (parse+route+send, first relay write): "
                f"mean {results['router_self_reported_mean_ms']:.3f} ms",
                flush=True,
            )
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    p.add_argument("--requests", type=int, default=800, help="per path per concurrency")
    p.add_argument("--speedup", type=float, default=100.0, help="emulator time scale")
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--profile", default="seed-glm5-rtxpro6000")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args()
    results = asyncio.run(run(args))
    if args.json:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=2))
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
