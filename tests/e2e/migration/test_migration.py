"""Migration of native /generate streams off a draining pool (docs/kv-aware.md, "Migration").

The emulator is deterministic (same token prefix -> same continuation on both servers), so a
migrated greedy stream must reassemble to exactly what an unmigrated run gives on either
server.
"""

from __future__ import annotations

import random
from typing import Any

import aiohttp
import pytest

from .conftest import (
    content_bytes,
    metric,
    patch_policy,
    reassemble,
    stream_generate,
)

MAX_NEW = 500
SWITCH_AT = 5  # events read before the forced switch
MIGRATIONS = 'specswitch_migrations_total{from_pool="spec",group="g0",to_pool="baseline"}'
ABORTED = "sglang:num_aborted_requests_total"


def _body(rid: str, greedy: bool = True, max_new: int = MAX_NEW) -> dict[str, Any]:
    rng = random.Random(7)
    sp: dict[str, Any] = {"max_new_tokens": max_new, "ignore_eos": True}
    sp.update({"temperature": 0} if greedy else {"temperature": 0.8, "sampling_seed": 3})
    ids = [rng.randrange(1000, 60000) for _ in range(300)]
    return {"input_ids": ids, "sampling_params": sp, "stream": True, "rid": rid}


async def _run_switching(
    http: aiohttp.ClientSession, router: Any, body: dict[str, Any]
) -> tuple[dict[str, str], list[bytes], list[dict[str, Any]]]:
    """Stream through the router; after SWITCH_AT events force baseline; snapshot the pools."""
    seen: list[dict[str, Any]] = []

    async def on_event(i: int) -> None:
        if i == SWITCH_AT:
            await patch_policy(http, router.admin_url, mode="baseline")
        if i >= SWITCH_AT and len(seen) < 40 and i % 5 == 0:
            async with http.get(router.admin_url + "/admin/state") as resp:
                seen.append((await resp.json())["groups"][0]["pools"])

    headers, events = await stream_generate(http, router.url, body, on_event)
    return headers, events, seen


@pytest.mark.timeout(60)
@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
async def test_migrated_stream_is_identical_to_unmigrated_runs(
    make_stack: Any, http: aiohttp.ClientSession, incremental: bool
) -> None:
    router, group = await make_stack({"migrate": True}, incremental=incremental)
    # Unmigrated greedy runs, straight to each server.
    refs = {}
    for pool, url in (("spec", group.spec_url), ("baseline", group.baseline_url)):
        _, events = await stream_generate(http, url, _body("mig-1"))
        refs[pool] = reassemble(events, incremental)
    assert content_bytes(refs["spec"]) == content_bytes(refs["baseline"])

    headers, events, seen = await _run_switching(http, router, _body("mig-1"))
    got = reassemble(events, incremental)

    assert headers["X-Specswitch-Pool"] == "spec"
    assert await metric(http, router.admin_url + "/metrics", MIGRATIONS) == 1.0
    assert await metric(http, group.spec_url + "/metrics", ABORTED) == 1.0  # old one aborted
    # Byte-identical content, event by event as the client reassembles it.
    assert content_bytes(got) == content_bytes(refs["spec"])
    assert got["finish_reason"] == {"type": "length", "length": MAX_NEW}
    ref = refs["spec"]
    for text, ids in got["history"]:  # every event is a prefix of the unmigrated output
        assert ref["output_ids"][: len(ids)] == ids and ref["text"].startswith(text)
    last, ref_last = got["metas"][-1], ref["metas"][-1]
    for key in ("id", "prompt_tokens", "completion_tokens"):
        assert last[key] == ref_last[key], key
    # cached_tokens: what the old pool reported at admission, as an unmigrated run reports it.
    assert last["cached_tokens"] == got["metas"][0]["cached_tokens"]
    # The in-flight count moved: the old pool went idle while the stream still ran.
    moved = [p for p in seen if p["spec"]["inflight"] == 0 and p["baseline"]["inflight"] == 1]
    assert moved, seen
    assert moved[0]["spec"]["state"] == "idle"
    async with http.get(router.admin_url + "/admin/state") as resp:
        pools = (await resp.json())["groups"][0]["pools"]
    assert pools["spec"]["inflight"] == pools["baseline"]["inflight"] == 0


@pytest.mark.timeout(60)
async def test_sampled_stream_is_not_migrated(make_stack: Any, http: aiohttp.ClientSession) -> None:
    router, group = await make_stack({"migrate": True})
    headers, events, seen = await _run_switching(http, router, _body("mig-2", greedy=False))
    got = reassemble(events, False)
    assert headers["X-Specswitch-Pool"] == "spec"
    assert got["finish_reason"] == {"type": "length", "length": MAX_NEW}
    assert await metric(http, router.admin_url + "/metrics", MIGRATIONS) == 0.0
    assert await metric(http, group.spec_url + "/metrics", ABORTED) == 0.0
    assert any(p["spec"]["state"] == "draining" and p["spec"]["inflight"] == 1 for p in seen)


@pytest.mark.timeout(60)
async def test_migrate_off_leaves_streams_alone(
    make_stack: Any, http: aiohttp.ClientSession
) -> None:
    router, group = await make_stack({})  # migrate defaults to false
    _, ref_events = await stream_generate(http, group.baseline_url, _body("mig-3"))
    _, events, seen = await _run_switching(http, router, _body("mig-3"))
    got = reassemble(events, False)
    assert content_bytes(got) == content_bytes(reassemble(ref_events, False))
    assert await metric(http, router.admin_url + "/metrics", MIGRATIONS) == 0.0
    assert await metric(http, group.spec_url + "/metrics", ABORTED) == 0.0
    assert any(p["spec"]["state"] == "draining" and p["spec"]["inflight"] == 1 for p in seen)


@pytest.mark.timeout(60)
async def test_unreachable_active_pool_leaves_the_stream_where_it_was(
    make_stack: Any, http: aiohttp.ClientSession
) -> None:
    router, group = await make_stack({"migrate": True})
    _, ref_events = await stream_generate(http, group.spec_url, _body("mig-4", max_new=600))
    await group.stop_server("baseline")  # the router still believes it healthy for a moment
    _, events, _ = await _run_switching(http, router, _body("mig-4", max_new=600))
    got = reassemble(events, False)
    assert content_bytes(got) == content_bytes(reassemble(ref_events, False))
    assert await metric(http, router.admin_url + "/metrics", MIGRATIONS) == 0.0
    assert await metric(http, group.spec_url + "/metrics", ABORTED) == 0.0


async def test_slow_active_pool_times_out_and_the_stream_stays(
    make_stack: Any, http: aiohttp.ClientSession, monkeypatch: Any
) -> None:
    from specswitch.router import migration

    monkeypatch.setattr(migration, "FIRST_EVENT_TIMEOUT_S", 1e-6)  # no first event in time
    router, group = await make_stack({"migrate": True})
    _, ref_events = await stream_generate(http, group.spec_url, _body("mig-5", max_new=600))
    _, events, _ = await _run_switching(http, router, _body("mig-5", max_new=600))
    got = reassemble(events, False)
    assert content_bytes(got) == content_bytes(reassemble(ref_events, False))
    assert await metric(http, router.admin_url + "/metrics", MIGRATIONS) == 0.0
