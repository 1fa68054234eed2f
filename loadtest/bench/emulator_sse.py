"""Benchmark: how many SSE-streamed tokens/s one emulator process delivers on one core.

Starts `specswitch emulate` as its own process (as the load tests run it), streams
/v1/chat/completions (and /generate) from N concurrent clients in this process, and
reports delivered tokens/s, SSE events/s and the emulator process's CPU use, so the
figure "tokens per emulator CPU-second" is independent of how loaded the machine is.

The baseline pool of paper-h100-llama31-8b at high speedup asks for far more tokens than
one core can stream, so the emulator runs CPU-bound and the figure is its ceiling.

    .venv/bin/python loadtest/bench/emulator_sse.py [--seconds 5] [--streams 64] [--speedup 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time

import aiohttp

URL = re.compile(r"emulate: (spec|baseline)\s+server listening on (http://\S+)")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def stream_client(
    session: aiohttp.ClientSession, url: str, path: str, stop: asyncio.Event, counts: list[int]
) -> None:
    while not stop.is_set():
        if path == "/v1/chat/completions":
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": "go"}],
                "max_tokens": 2000,
                "temperature": 0,
                "stream": True,
            }
        else:
            body = {
                "text": "go",
                "stream": True,
                "sampling_params": {"max_new_tokens": 2000, "temperature": 0},
            }
        async with session.post(url + path, json=body) as resp:
            async for line in resp.content:
                if line.startswith(b"data: {"):
                    counts[0] += 1
                if stop.is_set():
                    break


async def run(
    path: str, streams: int, seconds: float, url: str, pid: int, stats_url: str
) -> dict[str, float]:
    stop = asyncio.Event()
    counts = [0]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def tokens() -> int:
            async with session.get(stats_url + "/metrics") as r:
                text = await r.text()
            m = re.search(r"^sglang:generation_tokens_total\{[^}]*\} (\S+)$", text, re.M)
            return int(float(m.group(1))) if m else 0

        tasks = [
            asyncio.create_task(stream_client(session, url, path, stop, counts))
            for _ in range(streams)
        ]
        await asyncio.sleep(1.0)  # warm up
        tok0, ev0, cpu0, t0 = await tokens(), counts[0], cpu_seconds(pid), time.perf_counter()
        await asyncio.sleep(seconds)
        tok1, ev1, cpu1, t1 = await tokens(), counts[0], cpu_seconds(pid), time.perf_counter()
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    wall = t1 - t0
    cpu = cpu1 - cpu0
    return {
        "tok_s": (tok1 - tok0) / wall,
        "events_s": (ev1 - ev0) / wall,
        "cpu_frac": cpu / wall,
        "tok_per_cpu_s": (tok1 - tok0) / max(cpu, 1e-9),
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--speedup", type=float, default=20.0)
    args = ap.parse_args()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specswitch",
        "emulate",
        "--profile",
        "paper-h100-llama31-8b",
        "--spec-port",
        "0",
        "--baseline-port",
        "0",
        "--speedup",
        str(args.speedup),
        "--enable-metrics",
        "--log-level",
        "error",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        urls: dict[str, str] = {}
        while len(urls) < 2:
            line = (await proc.stdout.readline()).decode()
            if not line:
                print("emulator did not start", file=sys.stderr)
                return 1
            if m := URL.search(line):
                urls[m.group(1)] = m.group(2)
        print(
            f"emulator pid {proc.pid}, {args.streams} streams, speedup {args.speedup:g}, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
        )
        print("| endpoint | streamed tok/s | SSE events/s | emulator CPU | tok per CPU-second |")
        print("|---|---:|---:|---:|---:|")
        for path in ("/v1/chat/completions", "/generate"):
            r = await run(
                path, args.streams, args.seconds, urls["baseline"], proc.pid, urls["baseline"]
            )
            print(
                f"| {path} | {r['tok_s']:,.0f} | {r['events_s']:,.0f} | "
                f"{r['cpu_frac']:.0%} | {r['tok_per_cpu_s']:,.0f} |",
                flush=True,
            )
    finally:
        proc.terminate()
        await proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
