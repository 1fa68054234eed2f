"""Benchmark: can the load generator hold N concurrent streams at R tok/s on ONE core?

A minimal SSE server runs in a separate process (pinned to another core when there is one):
raw asyncio, every stream gets one OpenAI chat chunk (one token) per tick, plus a usage chunk
and [DONE] at the end. The generator (this process, pinned to one core) runs the real client
and closed-loop driver at ``--streams`` concurrency. If the generator kept up, the delivered
rate equals the offered rate (streams x tokens per second per stream) and the inter-chunk
gaps it measures equal the server's tick; its CPU use shows the headroom.

    .venv/bin/python loadtest/bench/loadgen_capacity.py --streams 256 --rate 5000
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import time

import orjson

CHUNK = orjson.dumps(
    {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}],
    }
)


def _frame(payload: bytes) -> bytes:
    data = b"data: " + payload + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def serve(sock: socket.socket, tick_s: float, tokens: int, cpu: int | None) -> None:
    """Server process: one ticker writes one token chunk to every open stream per tick."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    import uvloop

    token = _frame(CHUNK)
    finish = _frame(
        orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    )
    usage = _frame(
        orjson.dumps(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 8,
                    "completion_tokens": tokens,
                    "total_tokens": tokens + 8,
                },
            }
        )
    )
    tail = finish + usage + _frame(b"[DONE]") + b"0\r\n\r\n"
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nX-Specswitch-Pool: spec\r\n\r\n"
    )
    streams: dict[asyncio.Transport, int] = {}

    class Conn(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            headers = self.buf[:end].lower()
            length = 0
            for line in headers.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            if headers.startswith(b"get /v1/models"):
                body = b'{"data":[{"id":"bench"}]}'
                self.t.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                return
            self.t.write(head)
            streams[self.t] = tokens  # type: ignore[index]

        def connection_lost(self, exc: Exception | None) -> None:
            streams.pop(self.t, None)  # type: ignore[arg-type]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Conn, sock=sock)
        next_t = time.perf_counter()
        while True:
            next_t += tick_s
            for t, left in list(streams.items()):
                if left <= 1:
                    t.write(token + tail)
                    del streams[t]
                else:
                    t.write(token)
                    streams[t] = left - 1
            await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
        server.close()

    uvloop.run(main())


async def generate(url: str, streams: int, requests: int, tokens: int) -> dict:
    from specswitch.loadtest import datasets
    from specswitch.loadtest.client import ClientConfig
    from specswitch.loadtest.runs import open_client
    from specswitch.loadtest.stats import percentile, summarize
    from specswitch.loadtest.workloads import closed_loop

    ds = datasets.load("coding", min_items=64)
    client = await open_client(ClientConfig(target=url, max_tokens=tokens))
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        rec = await closed_loop(client, ds.cycle(), streams, requests)
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - wall0
    finally:
        await client.close()
    s = summarize(rec)
    gaps = [g for r in rec.results for g in r.itl()]
    return {
        "tok_s": s["output_tok_s"],
        "failed": s["failed"],
        "cpu_frac": cpu / wall,
        "itl_p50": percentile(gaps, 50),
        "itl_p99": percentile(gaps, 99),
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--rate", type=float, default=5000.0, help="offered tok/s over all streams")
    ap.add_argument("--tokens", type=int, default=100, help="tokens per request")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    gen_cpu, srv_cpu = cpus[0], (cpus[1] if len(cpus) > 1 else None)
    tick = args.streams / args.rate
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    proc = mp.get_context("fork").Process(
        target=serve, args=(sock, tick, args.tokens, srv_cpu), daemon=True
    )
    proc.start()
    os.sched_setaffinity(0, {gen_cpu})
    import uvloop

    try:
        res = uvloop.run(
            generate(
                f"http://127.0.0.1:{port}", args.streams, args.streams * args.rounds, args.tokens
            )
        )
    finally:
        proc.terminate()
        proc.join(5)
    print(
        f"streams {args.streams}, offered {args.rate:.0f} tok/s (one token per chunk, "
        f"tick {tick * 1000:.1f} ms), generator pinned to cpu {gen_cpu}"
    )
    print(
        f"delivered {res['tok_s']:.0f} tok/s ({res['tok_s'] / args.rate:.1%} of offered), "
        f"failed {res['failed']}, generator CPU {res['cpu_frac']:.0%} of one core, "
        f"inter-chunk gap p50 {res['itl_p50'] * 1000:.1f} ms p99 {res['itl_p99'] * 1000:.1f} ms "
        f"(server tick {tick * 1000:.1f} ms), wall {res['wall_s']:.1f} s"
    )


if __name__ == "__main__":
    main()
