"""Router relay capacity: many concurrent streams, output tok/s direct vs through the router.

The emulator and the router run as separate processes (router forced to baseline so every
stream reaches the same server); this process is the client. For each concurrency it runs
the same closed-loop streamed chat workload against the baseline server directly and then
through the router, and reports output tok/s, SSE events/s, and the router process's CPU use
(from /proc), i.e. how much relaying costs per token.

    .venv/bin/python loadtest/bench/router_streams.py --concurrency 64 256 --seconds 8

A benchmark, not a test: it reports figures (noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import aiohttp
from router_procs import emulated_router


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _load(url: str, concurrency: int, seconds: float, max_tokens: int) -> dict:
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Explain continuous batching."}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    tokens = events = errors = 0
    stop_at = time.monotonic() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal tokens, events, errors
        while time.monotonic() < stop_at:
            async with session.post(
                url + "/v1/chat/completions", data=body,
                headers={"Content-Type": "application/json"},
            ) as resp:  # fmt: skip
                if resp.status != 200:
                    errors += 1
                    await resp.read()
                    continue
                async for line in resp.content:
                    if line.startswith(b"data: {"):
                        events += 1
                        if b'"usage":{' in line:
                            tokens += json.loads(line[6:])["usage"]["completion_tokens"]

    t0 = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    wall = time.monotonic() - t0
    return {"tok_s": tokens / wall, "events_s": events / wall, "errors": errors, "wall_s": wall}


async def run(args: argparse.Namespace) -> list[dict]:
    rows = []
    async with emulated_router(args.profile, args.speedup, "baseline") as stack:
        router, base_url = stack.router, stack.baseline_url
        for c in args.concurrency:
            direct = await _load(base_url, c, args.seconds, args.max_tokens)
            cpu0 = _cpu_s(router.pid)
            routed = await _load(stack.router_url, c, args.seconds, args.max_tokens)
            cpu = _cpu_s(router.pid) - cpu0
            row = {
                "concurrency": c,
                "direct_tok_s": round(direct["tok_s"]),
                "router_tok_s": round(routed["tok_s"]),
                "router_events_s": round(routed["events_s"]),
                "router_cpu_core_share": round(cpu / routed["wall_s"], 3),
                "router_cpu_us_per_event": round(
                    cpu / max(1, routed["events_s"] * routed["wall_s"]) * 1e6, 1
                ),
                "errors": direct["errors"] + routed["errors"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--speedup", type=float, default=5.0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--profile", default="seed-glm5-rtxpro6000")
    asyncio.run(run(p.parse_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
