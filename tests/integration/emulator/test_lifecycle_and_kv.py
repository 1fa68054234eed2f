"""Server stop/start on the same port, and KV-pool waiting seen through the API."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest


async def test_stop_and_start_server_on_the_same_port(group, http) -> None:
    url = group.spec_url
    body = {"text": "x", "rid": "inflight", "sampling_params": {"max_new_tokens": 100000}}
    task = asyncio.create_task(http.post(url + "/generate", json=body))
    await group.spec.engine.wait_until(lambda e: e.num_running == 1)
    await group.stop_server("spec")
    resp = await task
    assert (await resp.json())["meta_info"]["finish_reason"]["type"] == "abort"
    with pytest.raises(aiohttp.ClientConnectionError):
        async with http.get(url + "/health") as r:
            await r.read()
    async with http.get(group.baseline_url + "/health") as r:  # the other server is unaffected
        assert r.status == 200
    await group.start_server("spec")
    assert group.spec_url == url
    async with http.get(url + "/health") as r:
        assert r.status == 200
    async with http.get(url + "/v1/loads") as r:
        assert (await r.json())["loads"][0]["num_running_reqs"] == 0


async def test_requests_wait_when_the_kv_pool_is_full(make_group, http) -> None:
    group = await make_group(overrides={"spec_kv_tokens": 2000})
    url = group.spec_url
    prompt = list(range(100))

    def body(i: int) -> dict:
        return {
            "input_ids": [i + 10_000, *prompt],
            "rid": f"kv{i}",
            "sampling_params": {"max_new_tokens": 899},
        }

    tasks = [asyncio.create_task(http.post(url + "/generate", json=body(i))) for i in range(3)]
    engine = group.spec.engine
    await engine.wait_until(lambda e: e.num_running == 2 and e.num_waiting == 1)
    async with http.get(url + "/get_load") as r:
        load = (await r.json())[0]
    assert load["num_reqs"] == 3 and load["num_waiting_reqs"] == 1
    assert load["num_tokens"] <= 2000
    for t in tasks:
        out = await (await t).json()
        assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert engine.stats.num_requests_total == 3
