"""The load generator through the real router in front of the emulator (in process, sped up)."""

from __future__ import annotations

import asyncio
import csv
import sys
from pathlib import Path

from specswitch.loadtest import datasets
from specswitch.loadtest.client import ClientConfig
from specswitch.loadtest.live import AdminPoller
from specswitch.loadtest.runs import open_client
from specswitch.loadtest.schedules import ramp
from specswitch.loadtest.stack import flush_cache, set_policy, wait_idle, wait_mode
from specswitch.loadtest.stats import Slo, summarize, timeline
from specswitch.loadtest.workloads import closed_loop, trace_closed, trace_poisson

from .conftest import SPEEDUP, Stack


async def test_sweep_levels_follow_the_policy(stack: Stack) -> None:
    ds = datasets.load("coding", min_items=40)
    client = await open_client(ClientConfig(target=stack.url, max_tokens=16, ignore_eos=True))
    try:
        items = ds.cycle()
        low = await closed_loop(client, items, 1, 3)
        high = await closed_loop(client, items, 12, 24)
    finally:
        await client.close()
    s_low, s_high = summarize(low, time_scale=SPEEDUP), summarize(high, time_scale=SPEEDUP)
    assert s_low["failed"] == 0 and s_high["failed"] == 0
    assert s_low["pools"] == {"spec": 3}  # load 1 <= low: spec
    assert s_high["pools"].get("baseline", 0) >= 12  # load 12 >= high: baseline after a tick
    assert all(r.output_tokens == 16 for r in low.results + high.results)
    assert s_low["tpot_s_p50"] < s_high["tpot_s_p50"]  # one spec stream beats a loaded batch


async def test_forced_modes_and_flush(stack: Stack) -> None:
    await set_policy(stack.admin_url, {"mode": "baseline"})
    await wait_mode(stack.admin_url, "baseline")
    client = await open_client(ClientConfig(target=stack.url, max_tokens=8))
    try:
        rec = await closed_loop(client, datasets.load("coding").cycle(), 2, 4)
    finally:
        await client.close()
    assert {r.pool for r in rec.results} == {"baseline"}
    await wait_idle(stack.admin_url)
    await flush_cache([stack.spec_url, stack.baseline_url])


async def test_closed_trace_records_switches_and_timeline(stack: Stack) -> None:
    ds = datasets.load("agentic", min_items=32)
    schedule = ramp(1, 12, 40.0)  # 2 s wall at speedup 20
    client = await open_client(ClientConfig(target=stack.url, max_tokens=12, ignore_eos=True))
    try:
        async with AdminPoller(stack.admin_url) as poll:
            rec = await trace_closed(
                client, ds.cycle(), schedule, time_scale=SPEEDUP, sampler=poll, sample_interval=0.05
            )
    finally:
        await client.close()
    s = summarize(rec, Slo(ttft_s=30.0), time_scale=SPEEDUP, window=(rec.started, rec.ended))
    assert s["failed"] == 0 and s["ok"] > 12
    assert set(s["pools"]) == {"spec", "baseline"}
    modes = {x.get("mode") for x in rec.samples}
    assert {"spec", "baseline"} <= modes
    assert max(x["switches"] for x in rec.samples) >= 1
    assert max(x["target"] for x in rec.samples) >= 10
    # agentic sessions: later turns resend the conversation, so prompts grow
    turns = [r for r in rec.results if r.turn > 0]
    assert turns and max(r.prompt_tokens for r in turns) > max(
        r.prompt_tokens for r in rec.results if r.turn == 0
    )
    rows = timeline(rec, 4.0, SPEEDUP)
    assert sum(r["completed"] for r in rows) == s["ok"]
    assert any(r.get("mode") == "baseline" for r in rows)


async def test_poisson_trace(stack: Stack) -> None:
    ds = datasets.load("coding", min_items=64)
    client = await open_client(ClientConfig(target=stack.url, max_tokens=8))
    try:
        rec = await trace_poisson(client, ds.cycle(), ramp(2, 10, 20.0), time_scale=SPEEDUP, seed=1)
    finally:
        await client.close()
    assert rec.results and all(r.ok for r in rec.results)
    assert 40 <= len(rec.results) <= 200  # mean rate 6/s over 20 simulated s = 120


async def test_cli_sweep_writes_the_fitter_csv(stack: Stack, tmp_path: Path) -> None:
    out = tmp_path / "pts.csv"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specswitch",
        "loadtest",
        "sweep",
        "--target",
        stack.url,
        "--concurrency",
        "1,4",
        "--requests",
        "4",
        "--max-tokens",
        "8",
        "--label",
        "spec",
        "--speedup",
        str(SPEEDUP),
        "--csv",
        str(out),
        "--no-progress",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()
    assert b"tok/s" in stdout
    rows = list(csv.DictReader(out.open()))
    assert [(r["pool"], r["concurrency"]) for r in rows] == [("spec", "1"), ("spec", "4")]
    assert all(float(r["output_tok_s"]) > 0 for r in rows)
