"""Benchmark: agentic multi-turn sessions across a switch, kv-aware versus immediate drain.

For each scenario (a forced switch by PATCH /admin/policy, and a load-driven switch by a
concurrency step past `high`) and each drain policy, it starts a fresh emulated group and
router, runs agentic sessions (specswitch.loadtest datasets + client: every turn resends the
whole conversation), and measures in the switch window [switch, switch + window_s]:

- re-prefilled prompt tokens: prompt minus cached tokens, from the servers' own counters
  (sglang:prompt_tokens_total - sglang:cached_tokens_total on /metrics, both servers), and
  per request from the usage the servers report;
- p50/p90 TTFT of follow-up turns (turn > 0) started in the window;
- failed requests (any error, over the whole run).

    .venv/bin/python loadtest/bench/kv_switch.py [--speedup 4] [--json docs/kv-switch.json]
        [--plot-dir docs/img]

Writes a JSON of every figure and, with --plot-dir, kv-switch-<scenario>.png timelines.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from specswitch.loadtest.client import ClientConfig, RequestResult, StreamClient, build_messages
from specswitch.loadtest.datasets import Conversation, generate
from specswitch.loadtest.emulator import start_group
from specswitch.router import GroupConfig, PolicyConfig, RouterConfig, start_router
from specswitch.router.config import ScrapeConfig


@dataclass
class Args:
    profile: str = "seed-glm5-rtxpro6000"
    speedup: float = 4.0
    warm_s: float = 8.0
    window_s: float = 6.0
    tail_s: float = 2.0
    concurrency: int = 8  # forced scenario
    low_c: int = 5  # load scenario: before the step
    high_c: int = 16  # load scenario: after the ramp (>= high)
    ramp_s: float = 0.25  # load scenario: one more session every ramp_s (0: a step)
    high: int = 12
    low: int = 6
    max_tokens: int = 160
    deadline_s: float = 30.0
    sticky_min_tokens: int = 1024
    sticky_max_inflight: int = 0
    context_chars: int = 24000  # per-session repository context added to the first turn
    seed: int = 0


@dataclass
class Run:
    scenario: str
    drain: str
    t0: float = 0.0
    t_switch: float | None = None
    results: list[RequestResult] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    kv: dict[str, Any] = field(default_factory=dict)
    context_chars: int = 0
    switch_after: float = 0.0  # the load scenario's switch is the first one after the step


async def _metrics(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    prompt = cached = 0.0
    for line in text.splitlines():
        if line.startswith("sglang:prompt_tokens_total"):
            prompt += float(line.rsplit(" ", 1)[1])
        elif line.startswith("sglang:cached_tokens_total"):
            cached += float(line.rsplit(" ", 1)[1])
    return prompt, cached


async def _sampler(run: Run, admin: str, urls: dict[str, str], stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            try:
                async with session.get(admin + "/admin/state") as resp:
                    state = await resp.json()
                g = state["groups"][0]
                row: dict[str, float] = {
                    "t": time.perf_counter() - run.t0,
                    "mode": 0.0 if g["mode"] == "spec" else 1.0,
                    "spec_inflight": g["pools"]["spec"]["inflight"],
                    "baseline_inflight": g["pools"]["baseline"]["inflight"],
                }
                for pool, url in urls.items():
                    p, c = await _metrics(session, url)
                    row[f"{pool}_prompt"], row[f"{pool}_cached"] = p, c
                run.samples.append(row)
                run.state = state
                if (
                    run.t_switch is None
                    and g["mode"] == "baseline"
                    and row["t"] >= run.switch_after
                ):
                    run.t_switch = row["t"]
            except (aiohttp.ClientError, KeyError, ValueError):
                pass
            await asyncio.sleep(0.2)


def with_context(conv: Conversation, chars: int) -> Conversation:
    """The session with a unique repository dump (`chars` long) in its first turn: real coding
    agents carry tens of thousands of tokens of files and tool output."""
    if chars <= 0:
        return conv
    lines: list[str] = []
    size = i = 0
    while size < chars:
        line = f"# {conv.id} src/module_{i // 40}.py:{i % 40}: value_{i} = compute(value_{i - 1}, {i * 7 % 13})"
        lines.append(line)
        size += len(line) + 1
        i += 1
    first = conv.turns[0] + "\nRepository snapshot:\n" + "\n".join(lines)
    return dataclasses.replace(conv, turns=(first, *conv.turns[1:]))


async def _session_worker(
    idx: int,
    run: Run,
    client: StreamClient,
    items: Iterator[Conversation],
    target: list[int],
    end: float,
) -> None:
    while time.perf_counter() < end:
        if idx >= target[0]:
            await asyncio.sleep(0.05)
            continue
        conv = with_context(next(items), run.context_chars)
        replies: list[str] = []
        for turn in range(len(conv.turns)):
            if time.perf_counter() >= end:
                return
            msgs = build_messages(conv, turn, replies)
            res, text = await client.send(msgs, conv_id=conv.id, turn=turn)
            res.start -= run.t0
            res.end -= run.t0
            run.results.append(res)
            if res.error is not None:
                break
            replies.append(text)


async def run_one(scenario: str, drain: str, a: Args) -> Run:
    forced = scenario == "forced"
    group = await start_group(a.profile, speedup=a.speedup)
    policy = PolicyConfig(
        mode="spec" if forced else "auto",
        high=a.high,
        low=a.low,
        min_dwell_s=1.0,
        drain=drain,
        drain_deadline_s=a.deadline_s,
        sticky_min_tokens=a.sticky_min_tokens,
        sticky_max_inflight=a.sticky_max_inflight,
    )
    config = RouterConfig(
        groups=(GroupConfig("g0", group.spec_url, group.baseline_url),),
        listen="127.0.0.1:0",
        admin_listen="127.0.0.1:0",
        policy=policy,
        scrape=ScrapeConfig(interval_s=0.25),
    )
    router = await start_router(config)
    run = Run(scenario, drain, context_chars=a.context_chars, switch_after=a.warm_s - 0.5)
    stop = asyncio.Event()
    client = StreamClient(ClientConfig(target=router.url, api="chat", max_tokens=a.max_tokens))
    await client.open()
    try:
        items = iter(generate("agentic", 2000, a.seed))
        target = [a.concurrency if forced else a.low_c]
        run.t0 = time.perf_counter()
        ramp = 0.0 if forced else max(0, a.high_c - a.low_c) * max(0.0, a.ramp_s)
        end = run.t0 + a.warm_s + ramp + a.window_s + a.tail_s
        sampler = asyncio.create_task(
            _sampler(
                run,
                router.admin_url,
                {"spec": group.spec_url, "baseline": group.baseline_url},
                stop,
            )
        )
        n = max(a.concurrency, a.high_c)
        workers = [
            asyncio.create_task(_session_worker(i, run, client, items, target, end))
            for i in range(n)
        ]
        await asyncio.sleep(a.warm_s)
        if forced:
            async with aiohttp.ClientSession() as s:
                async with s.patch(
                    router.admin_url + "/admin/policy", json={"mode": "baseline"}
                ) as r:
                    r.raise_for_status()
            run.t_switch = time.perf_counter() - run.t0
        elif a.ramp_s <= 0:
            target[0] = a.high_c  # a step: every new session lands within one policy tick
        else:
            while target[0] < a.high_c:  # a ramp: one more session every ramp_s
                target[0] += 1
                await asyncio.sleep(a.ramp_s)
        await asyncio.gather(*workers)
        await asyncio.sleep(0.5)
        stop.set()
        await sampler
        tracker = getattr(router.ctx.selector, "tracker", None)
        if tracker is not None:
            run.kv = tracker.summary()
    finally:
        await client.close()
        await router.close()
        await group.close()
    return run


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _reprefill_at(samples: list[dict[str, float]], t: float) -> float:
    """Servers' re-prefilled tokens (prompt - cached, both pools) at time t (interpolated)."""

    def total(row: dict[str, float]) -> float:
        return sum(
            row.get(f"{p}_prompt", 0) - row.get(f"{p}_cached", 0) for p in ("spec", "baseline")
        )

    prev = samples[0]
    for row in samples:
        if row["t"] >= t:
            if row["t"] == prev["t"]:
                return total(row)
            w = (t - prev["t"]) / (row["t"] - prev["t"])
            return total(prev) + w * (total(row) - total(prev))
        prev = row
    return total(samples[-1])


def summarize(run: Run, a: Args) -> dict[str, Any]:
    ts = run.t_switch if run.t_switch is not None else float("nan")
    te = ts + a.window_s
    in_window = [r for r in run.results if ts <= r.start < te]
    follow = [r for r in in_window if r.turn > 0 and r.error is None and r.ttft is not None]
    by_turn = {(r.conv_id, r.turn): r for r in run.results if r.error is None}
    followups = [r for r in in_window if r.turn > 0 and r.error is None]
    uncached_follow = sum(max(0, r.prompt_tokens - (r.cached_tokens or 0)) for r in followups)
    reprefill = 0  # tokens of the previous turn (prompt + reply) the serving pool had to recompute
    for r in followups:
        prev = by_turn.get((r.conv_id, r.turn - 1))
        if prev is not None:
            reprefill += max(0, prev.prompt_tokens + prev.output_tokens - (r.cached_tokens or 0))
    failures = [r for r in run.results if r.error is not None]
    spec_after = sum(1 for r in in_window if r.pool == "spec")
    return {
        "scenario": run.scenario,
        "drain": run.drain,
        "switch_at_s": round(ts, 2),
        "requests": len(run.results),
        "requests_in_window": len(in_window),
        "served_by_spec_in_window": spec_after,
        "failed": len(failures),
        "failures": sorted({f.error or "" for f in failures})[:5],
        "reprefill_tokens_followups": reprefill,
        "uncached_tokens_followups": uncached_follow,
        "uncached_tokens_all_servers": int(
            _reprefill_at(run.samples, te) - _reprefill_at(run.samples, ts)
        ),
        "followup_ttft_p50_ms": _ms(_pct([r.ttft for r in follow], 50)),  # type: ignore[misc]
        "followup_ttft_p90_ms": _ms(_pct([r.ttft for r in follow], 90)),  # type: ignore[misc]
        "followups_in_window": len(follow),
        "router_kv": run.kv,
        "spec_kv_state": (run.state.get("groups") or [{}])[0]
        .get("pools", {})
        .get("spec", {})
        .get("kv"),
    }


def _ms(v: float | None) -> float | None:
    return None if v is None else round(1000 * v, 1)


def plot(runs: list[Run], a: Args, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    colors = {"kv-aware": "tab:blue", "immediate": "tab:red"}
    for run in runs:
        ts = run.t_switch or 0.0
        t = [s["t"] - ts for s in run.samples]
        c = colors[run.drain]
        ax1.plot(t, [s["spec_inflight"] for s in run.samples], color=c, ls="-",
                 label=f"{run.drain}: spec in flight")  # fmt: skip
        ax1.plot(t, [s["baseline_inflight"] for s in run.samples], color=c, ls="--",
                 label=f"{run.drain}: baseline in flight")  # fmt: skip
        follow = [r for r in run.results if r.turn > 0 and r.error is None and r.ttft is not None]
        ax2.scatter([r.start - ts for r in follow], [1000 * r.ttft for r in follow], s=12,  # type: ignore[operator]
                    color=c, alpha=0.7, label=run.drain)  # fmt: skip
        by_turn = {(r.conv_id, r.turn): r for r in run.results if r.error is None}
        points = []
        for r in sorted(follow, key=lambda r: r.start):
            prev = by_turn.get((r.conv_id, r.turn - 1))
            if prev is not None and r.start >= ts:
                points.append(
                    (
                        r.start - ts,
                        max(0, prev.prompt_tokens + prev.output_tokens - (r.cached_tokens or 0)),
                    )
                )
        xs, total = [0.0], [0]
        for x, v in points:
            xs.append(x)
            total.append(total[-1] + v)
        ax3.step(
            xs, total, where="post", color=c, label=f"{run.drain}: re-prefilled (follow-up turns)"
        )
        base = _reprefill_at(run.samples, ts)
        after = [x for x in run.samples if x["t"] >= ts]
        ax3.plot([0.0] + [x["t"] - ts for x in after],
                 [0.0] + [_reprefill_at(run.samples, x["t"]) - base for x in after],
                 color=c, ls=":", lw=1, label=f"{run.drain}: all uncached prompt tokens (servers)")  # fmt: skip
    for ax in (ax1, ax2, ax3):
        ax.axvline(0, color="grey", lw=1)
        ax.axvspan(0, a.window_s, color="grey", alpha=0.1)
        ax.grid(alpha=0.3)
    ax1.set_ylabel("requests in flight")
    ax1.legend(fontsize=7, ncol=2)
    ax2.set_ylabel("follow-up turn TTFT (ms)")
    ax2.set_yscale("log")
    ax2.legend(fontsize=7)
    ax3.set_ylabel("tokens since the switch")
    ax3.set_xlabel("seconds since the switch (shaded: measurement window)")
    ax3.legend(fontsize=7)
    title = (
        "forced switch (PATCH mode=baseline)"
        if runs[0].scenario == "forced"
        else "load-driven switch"
    )
    fig.suptitle(f"Agentic sessions across a {title}: kv-aware vs immediate drain")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=os.path.dirname(path) or ".")
    os.close(fd)
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    plt.close(fig)


async def main_async(a: Args, scenarios: list[str], json_path: str, plot_dir: str) -> int:
    out: list[dict[str, Any]] = []
    for scenario in scenarios:
        runs = []
        for drain in ("kv-aware", "immediate"):
            print(f"running {scenario} / {drain} ...", file=sys.stderr, flush=True)
            run = await run_one(scenario, drain, a)
            runs.append(run)
            summary = summarize(run, a)
            out.append(summary)
            print(json.dumps(summary), flush=True)
        kv, imm = out[-2], out[-1]
        for key in (
            "reprefill_tokens_followups",
            "uncached_tokens_followups",
            "uncached_tokens_all_servers",
        ):
            ratio = kv[key] / max(1, imm[key])
            print(f"{scenario}: {key} kv-aware/immediate = {ratio:.2f}", file=sys.stderr)
        if plot_dir:
            plot(runs, a, os.path.join(plot_dir, f"kv-switch-{scenario}.png"))
    if json_path:
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=os.path.dirname(json_path) or ".")
        with os.fdopen(fd, "w") as f:
            json.dump({"args": a.__dict__, "runs": out}, f, indent=2)
        os.replace(tmp, json_path)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Args()
    for name, value in defaults.__dict__.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    ap.add_argument("--scenario", choices=("forced", "load", "both"), default="both")
    ap.add_argument("--json", default="")
    ap.add_argument("--plot-dir", default="")
    ns = ap.parse_args()
    a = Args(**{k: getattr(ns, k) for k in defaults.__dict__})
    scenarios = ["forced", "load"] if ns.scenario == "both" else [ns.scenario]
    return asyncio.run(main_async(a, scenarios, ns.json, ns.plot_dir))


if __name__ == "__main__":
    raise SystemExit(main())
