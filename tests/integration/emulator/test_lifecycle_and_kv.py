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
    # SGLang: used tokens (two running requests, >= 101 each) + the queued one's 101 tokens
    assert 3 * 101 <= load["num_tokens"] <= 2000 + 101
    for t in tasks:
        out = await (await t).json()
        assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert engine.stats.num_requests_total == 3


async def _gauges(http, url: str) -> tuple[dict, list, str, dict]:
    async with http.get(url + "/v1/loads") as r:
        loads = (await r.json())["loads"][0]
    async with http.get(url + "/get_load") as r:
        load = await r.json()
    async with http.get(url + "/metrics") as r:
        metrics = await r.text()
    async with http.get(url + "/get_server_info") as r:
        emulator = (await r.json())["emulator"]
    return loads, load, metrics, emulator


async def test_a_warm_idle_server_reports_no_token_usage_yet_serves_its_cache(
    make_group, http
) -> None:
    group = await make_group(enable_metrics=True)
    url = group.baseline_url
    prompt = list(range(5000, 7000))  # 2000 tokens
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 1}}
    async with http.post(url + "/generate", json=body) as r:
        assert (await r.json())["meta_info"]["cached_tokens"] == 0
    await group.baseline.engine.wait_until(lambda e: not e.has_work())
    loads, load, metrics, emulator = await _gauges(http, url)
    # as SGLang: used = max_total_num_tokens - (available + evictable): the cache is not "used"
    assert loads["token_usage"] == 0.0 and loads["num_used_tokens"] == 0
    assert load[0]["num_tokens"] == 0
    assert "sglang:token_usage{" in metrics and "sglang:num_used_tokens{" in metrics
    for line in metrics.splitlines():
        if line.startswith(("sglang:token_usage{", "sglang:num_used_tokens{")):
            assert float(line.rsplit(" ", 1)[1]) == 0.0, line
    assert emulator["evictable_tokens"] == emulator["prefix_cache_tokens"] == 2000
    # ... and the cached prefix is still served
    async with http.post(url + "/generate", json=body) as r:
        assert (await r.json())["meta_info"]["cached_tokens"] == 1984  # whole 16-token blocks
    await group.baseline.engine.wait_until(lambda e: not e.has_work())
    loads, load, _, emulator = await _gauges(http, url)
    assert loads["token_usage"] == 0.0 and load[0]["num_tokens"] == 0
    assert loads["cache_hit_rate"] == pytest.approx(1984 / 2000, abs=1e-4)  # last prefill batch
    assert emulator["prompt_cache_hit_rate"] == pytest.approx(1984 / 4000)
