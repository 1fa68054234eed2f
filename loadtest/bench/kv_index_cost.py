"""Benchmark: the KV layer's per-request cost and the prefix index's memory bound.

Per request (agentic chat turns of growing length): conversation hashing (identify), the
index lookups a routing decision makes (two pools), and the insert. Then a long random
workload against one index with a small max_entries, reporting entries and traced memory.

    .venv/bin/python loadtest/bench/kv_index_cost.py [--requests 3000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc

from specswitch.router.conversation import identify
from specswitch.router.kv_tracker import KvTracker
from specswitch.router.prefix_index import PrefixIndex


def agentic_turn(
    rng: random.Random, conv: int, turns: int, msg_chars: int, system: bool = True
) -> dict:
    msgs = (
        [{"role": "system", "content": f"agent {conv % 7} " + "tool spec " * 600}] if system else []
    )
    for t in range(turns):
        msgs.append({"role": "user", "content": f"c{conv} t{t} " + "x" * msg_chars})
        if t < turns - 1:
            msgs.append({"role": "assistant", "content": f"c{conv} r{t} " + "y" * (msg_chars // 2)})
    return {"model": "m", "messages": msgs, "max_tokens": 256, "stream": True}


def per_request_cost(n: int, turns_max: int, msg_chars: int) -> dict[str, float]:
    rng = random.Random(1)
    kv = KvTracker()
    kv.set_server_info("g0", "spec", max_total_num_tokens=200_000)
    kv.set_server_info("g0", "baseline", max_total_num_tokens=800_000)
    bodies = [
        agentic_turn(rng, rng.randrange(200), rng.randrange(1, turns_max), msg_chars)
        for _ in range(n)
    ]
    sizes = [sum(len(m["content"]) for m in b["messages"]) for b in bodies]
    hash_us: list[float] = []
    route_us: list[float] = []
    for body in bodies:
        t0 = time.perf_counter()
        conv = kv.describe("/v1/chat/completions", body, {})
        t1 = time.perf_counter()
        kv.cached("g0", "spec", conv)
        kv.cached("g0", "baseline", conv)
        ticket = kv.on_routed("g0", "spec", conv)
        kv.on_complete(ticket, conv.prompt_tokens, 0)
        t2 = time.perf_counter()
        hash_us.append((t1 - t0) * 1e6)
        route_us.append((t2 - t1) * 1e6)
    total = [a + b for a, b in zip(hash_us, route_us, strict=True)]
    q = statistics.quantiles(total, n=100)
    return {
        "requests": n,
        "mean_prompt_chars": statistics.fmean(sizes),
        "hash_us_p50": statistics.median(hash_us),
        "lookup_insert_us_p50": statistics.median(route_us),
        "total_us_p50": statistics.median(total),
        "total_us_p99": q[98],
        "hash_ns_per_char": 1e3 * sum(hash_us) / sum(sizes),
    }


def selector_cost(n: int, msg_chars: int, turns: int, system: bool = True) -> dict[str, float]:
    """The whole KV layer on the hot path: KvSelector.choose + on_complete versus the plain
    Selector, in-process on real GroupState objects (no network)."""
    import dataclasses

    from specswitch.router.config import GroupConfig, PolicyConfig
    from specswitch.router.kv_selector import KvSelector
    from specswitch.router.selection import RequestInfo, Selector, Usage
    from specswitch.router.state import GroupState

    policy = dataclasses.replace(PolicyConfig())
    rng = random.Random(3)
    bodies = [agentic_turn(rng, rng.randrange(100), turns, msg_chars, system) for _ in range(n)]
    out: dict[str, float] = {}
    for name, sel in (("plain", Selector(lambda: policy)), ("kv", KvSelector(lambda: policy))):
        groups = [GroupState(GroupConfig(f"g{i}", "http://a:1", "http://a:2")) for i in range(2)]
        times: list[float] = []
        for i, body in enumerate(bodies):
            info = RequestInfo("/v1/chat/completions", body, {}, str(i))
            t0 = time.perf_counter()
            route = sel.choose(groups, info)
            assert route is not None
            sel.on_complete(route, info, Usage(1000, 10, 900), True)
            times.append((time.perf_counter() - t0) * 1e6)
        out[f"{name}_us_p50"] = statistics.median(times)
        out[f"{name}_us_p99"] = statistics.quantiles(times, n=100)[98]
    out["added_us_p50"] = out["kv_us_p50"] - out["plain_us_p50"]
    out["prompt_chars"] = statistics.fmean(
        sum(len(m["content"]) for m in b["messages"]) for b in bodies
    )
    return out


def memory_bound(steps: int, max_entries: int) -> dict[str, float]:
    rng = random.Random(2)
    idx = PrefixIndex(capacity_tokens=None, max_entries=max_entries)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    peak_entries = 0
    for step in range(steps):
        depth = rng.randrange(1, 60)
        conv = rng.randrange(1_000_000)
        keys = identify("/generate", {"input_ids": list(range(conv, conv + 256 * depth))}).keys
        idx.insert(keys)
        peak_entries = max(peak_entries, len(idx))
        if step % 1000 == 0:
            print(f"  memory workload {step}/{steps}", file=sys.stderr)
    current, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "steps": steps,
        "max_entries": max_entries,
        "peak_entries": peak_entries,
        "index_bytes": current - base,
        "bytes_per_entry": (current - base) / max(1, len(idx)),
        "evictions": idx.evictions,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--turns-max", type=int, default=30)
    ap.add_argument("--msg-chars", type=int, default=2000)
    ap.add_argument("--mem-steps", type=int, default=5000)
    ap.add_argument("--max-entries", type=int, default=50_000)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    cost = per_request_cost(args.requests, args.turns_max, args.msg_chars)
    small = selector_cost(args.requests, 60, 1, system=False)
    large = selector_cost(args.requests // 4, args.msg_chars, args.turns_max)
    mem = memory_bound(args.mem_steps, args.max_entries)
    out = {
        "per_request": cost,
        "selector_small_chat": small,
        "selector_agentic_turn": large,
        "memory": mem,
    }
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
