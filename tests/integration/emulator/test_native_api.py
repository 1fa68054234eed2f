"""SGLang's native API (raw HTTP): /generate streaming, abort, info, load, flush, metrics."""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest

GEN = {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}


async def test_generate_non_stream_meta_info(group, http) -> None:
    async with http.post(group.spec_url + "/generate", json={**GEN, "rid": "r-1"}) as r:
        assert r.status == 200
        body = await r.json()
    meta = body["meta_info"]
    assert meta["id"] == "r-1"
    assert meta["finish_reason"] == {"type": "length", "length": 16}
    assert meta["completion_tokens"] == 16 == len(body["output_ids"])
    assert meta["prompt_tokens"] > 0 and meta["cached_tokens"] == 0 and meta["e2e_latency"] > 0
    assert meta["spec_verify_ct"] >= 1
    assert meta["spec_accept_length"] == pytest.approx(16 / meta["spec_verify_ct"])
    assert 0 <= meta["spec_accept_rate"] <= 1
    async with http.post(group.baseline_url + "/generate", json=GEN) as r:
        meta = (await r.json())["meta_info"]
    assert "spec_verify_ct" not in meta


async def test_generate_stream_is_cumulative_by_default(group, http, sse) -> None:
    async with http.post(group.spec_url + "/generate", json={**GEN, "stream": True}) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = await sse(r)
    assert events[-1] == "[DONE]"
    events = events[:-1]
    for a, b in itertools.pairwise(events):
        assert b["text"].startswith(a["text"])
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
    last = events[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "length"
    assert len(last["output_ids"]) == 16
    assert any(len(e["output_ids"]) > 1 for e in events[:-1])  # spec steps add several tokens


async def test_generate_stream_incremental_output(make_group, http, sse) -> None:
    group = await make_group(incremental_streaming_output=True)
    async with http.post(group.baseline_url + "/generate", json={**GEN, "stream": True}) as r:
        events = (await sse(r))[:-1]
    async with http.post(group.baseline_url + "/generate", json=GEN) as r:
        whole = await r.json()
    assert "".join(e["text"] for e in events) == whole["text"]
    assert [t for e in events for t in e["output_ids"]] == whole["output_ids"]


async def test_abort_running_request_returns_partial_output(group, http) -> None:
    body = {
        "text": "long one",
        "rid": "run-1",
        "sampling_params": {"max_new_tokens": 100000, "temperature": 0},
    }
    task = asyncio.create_task(http.post(group.baseline_url + "/generate", json=body))
    engine = group.baseline.engine
    await engine.wait_until(lambda e: any(r.rid == "run-1" and r.out_ids for r in e.running))
    async with http.post(group.baseline_url + "/abort_request", json={"rid": "run-1"}) as r:
        assert r.status == 200
    resp = await task
    out = await resp.json()
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert out["meta_info"]["finish_reason"]["message"] == "Aborted"
    assert 0 < out["meta_info"]["completion_tokens"] < 100000
    assert engine.num_running == 0 and engine.reserved == 0


async def test_abort_queued_request_and_abort_all(make_group, http) -> None:
    group = await make_group(overrides={"baseline_max_running_requests": 1})
    url = group.baseline_url
    long = {"sampling_params": {"max_new_tokens": 100000}}
    first = asyncio.create_task(
        http.post(url + "/generate", json={"text": "a", "rid": "q0", **long})
    )
    second = asyncio.create_task(
        http.post(url + "/generate", json={"text": "b", "rid": "q1", **long})
    )
    engine = group.baseline.engine
    await engine.wait_until(lambda e: e.num_waiting == 1 and e.num_running == 1)
    async with http.get(url + "/get_load") as r:
        load = (await r.json())[0]
    assert load["num_reqs"] == 2 and load["num_waiting_reqs"] == 1
    await http.post(url + "/abort_request", json={"rid": "q1"})
    queued = await (await second).json()
    assert queued["meta_info"]["finish_reason"] == {
        "type": "abort",
        "message": "Abort before prefill",
    }
    assert queued["output_ids"] == []
    await http.post(url + "/abort_request", json={"abort_all": True})
    running = await (await first).json()
    assert running["meta_info"]["finish_reason"]["type"] == "abort"


async def test_client_disconnect_aborts_and_frees_kv(group) -> None:
    engine = group.spec.engine
    body = {
        "text": "bye",
        "rid": "gone",
        "stream": True,
        "sampling_params": {"max_new_tokens": 100000},
    }
    async with aiohttp.ClientSession() as s:
        async with s.post(group.spec_url + "/generate", json=body) as r:
            await r.content.readline()  # first event arrived: the request is running
            assert engine.num_running == 1
    async with asyncio.timeout(10):
        await engine.wait_until(lambda e: e.num_running == 0)
    assert engine.num_running == 0 and engine.reserved == 0
    assert engine.own_tokens == 0
    assert engine.stats.num_aborted_requests_total == 1


async def test_flush_cache_refused_while_busy(group, http) -> None:
    url = group.baseline_url
    task = asyncio.create_task(
        http.post(
            url + "/generate",
            json={"text": "x", "rid": "busy", "sampling_params": {"max_new_tokens": 100000}},
        )
    )
    await group.baseline.engine.wait_until(lambda e: e.num_running > 0)
    async with http.post(url + "/flush_cache") as r:
        assert r.status == 400
    await http.post(url + "/abort_request", json={"rid": "busy"})
    await (await task).read()
    async with http.get(url + "/flush_cache") as r:
        assert r.status == 200 and (await r.text()).startswith("Cache flushed")


async def test_server_info_model_info_and_loads(group, http) -> None:
    for path in ("/get_server_info", "/server_info"):
        async with http.get(group.spec_url + path) as r:
            info = await r.json()
        assert info["status"] == "ready"
        assert info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_num_draft_tokens"] == 4
        assert info["max_running_requests"] == 48
        assert info["max_total_num_tokens"] == group.profile.spec.kv_tokens
        assert info["max_req_input_len"] > 0
        state = info["internal_states"][0]
        assert {"last_gen_throughput", "memory_usage", "avg_spec_accept_length"} <= set(state)
    async with http.get(group.baseline_url + "/get_server_info") as r:
        info = await r.json()
    assert info["speculative_algorithm"] is None
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    for path in ("/get_model_info", "/model_info"):
        async with http.get(group.spec_url + path) as r:
            assert (await r.json())["model_path"] == group.profile.model_path
    async with http.get(group.spec_url + "/v1/loads") as r:
        load = (await r.json())["loads"][0]
    assert load["max_running_requests"] == 48 and "accept_length" in load["speculative"]
    for path in ("/health", "/health_generate"):
        async with http.get(group.spec_url + path) as r:
            assert r.status == 200


async def test_metrics_only_with_enable_metrics(make_group, http) -> None:
    on = await make_group(enable_metrics=True)
    off = await make_group(enable_metrics=False)
    async with http.get(off.spec_url + "/metrics") as r:
        assert r.status == 404
    async with http.post(on.spec_url + "/generate", json=GEN) as r:
        await r.read()
    async with http.get(on.spec_url + "/metrics") as r:
        text = await r.text()
    labels = 'model_name="glm-5",engine_type="unified",tp_rank="0",pp_rank="0"'
    for gauge in (
        "num_running_reqs",
        "num_queue_reqs",
        "num_used_tokens",
        "token_usage",
        "gen_throughput",
        "cache_hit_rate",
        "spec_accept_length",
        "spec_accept_rate",
    ):
        assert f"# TYPE sglang:{gauge} gauge" in text
    assert f"sglang:generation_tokens_total{{{labels}}} 16.0" in text
    assert f"sglang:num_requests_total{{{labels}}} 1.0" in text
    assert "# TYPE sglang:prompt_tokens_total counter" in text
    assert "# TYPE sglang:cached_tokens_total counter" in text
    assert "# TYPE sglang:num_aborted_requests_total counter" in text
    for hist in (
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
    ):
        assert f"# TYPE sglang:{hist} histogram" in text
        assert f'sglang:{hist}_bucket{{{labels},le="+Inf"}}' in text
    assert f"sglang:e2e_request_latency_seconds_count{{{labels}}} 1.0" in text


@pytest.mark.parametrize(
    ("body", "shape"),
    [
        (b"{not json", "validation"),
        (b'{"sampling_params": {}}', "native"),
        (b'{"text": "hi", "sampling_params": {"max_new_tokens": -1}}', "native"),
        (b'{"text": "' + b"word " * 200_000 + b'"}', "native"),
    ],
)
async def test_generate_bad_input_gets_sglang_400(group, http, body, shape) -> None:
    async with http.post(
        group.baseline_url + "/generate", data=body, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 400
        err = await r.json()
    if shape == "validation":
        assert err["object"] == "error" and err["code"] == 400 and err["type"] == "Bad Request"
    else:
        assert set(err) == {"error"} and err["error"]["message"]


async def test_openai_bad_input_shapes(group, http) -> None:
    async with http.post(group.spec_url + "/v1/chat/completions", data=b"nope") as r:
        assert r.status == 400
        assert (await r.json())["type"] == "Bad Request"
    async with http.post(group.spec_url + "/v1/chat/completions", json={"model": "m"}) as r:
        err = await r.json()
        assert r.status == 400 and err["object"] == "error" and "messages" in err["message"]
    async with http.get(group.spec_url + "/nope") as r:
        assert r.status == 404


async def test_non_stream_client_disconnect_aborts(group) -> None:
    engine = group.baseline.engine
    body = {"text": "bye", "rid": "gone2", "sampling_params": {"max_new_tokens": 100000}}
    async with aiohttp.ClientSession() as s:
        task = asyncio.create_task(s.post(group.baseline_url + "/generate", json=body))
        await engine.wait_until(lambda e: e.num_running == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    async with asyncio.timeout(10):
        await engine.wait_until(lambda e: e.num_running == 0)
    assert engine.stats.num_aborted_requests_total == 1 and engine.own_tokens == 0


async def test_streaming_request_failing_in_the_engine_gets_an_sse_error(group, http, sse) -> None:
    # SGLang validates the prompt inside the stream generator: 200, an error event, [DONE]
    too_long = {"text": "word " * 200_000, "stream": True}
    async with http.post(group.baseline_url + "/generate", json=too_long) as r:
        assert r.status == 200
        events = await sse(r)
    assert events[-1] == "[DONE]" and "context length" in events[0]["error"]["message"]
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": -1,
        "stream": True,
    }
    async with http.post(group.spec_url + "/v1/chat/completions", json=chat) as r:
        assert r.status == 200
        events = await sse(r)
    assert events[0]["error"]["code"] == 400 and events[-1] == "[DONE]"
    # checks made before generation still answer 400 when streaming
    empty = {"model": "m", "messages": [], "stream": True}
    async with http.post(group.spec_url + "/v1/chat/completions", json=empty) as r:
        assert r.status == 400


async def test_prompt_longer_than_max_req_input_len_is_refused(make_group, http) -> None:
    group = await make_group(overrides={"baseline_kv_tokens": 1000})
    async with http.get(group.baseline_url + "/get_server_info") as r:
        assert (await r.json())["max_req_input_len"] == 999
    body = {"input_ids": list(range(1500)), "sampling_params": {"max_new_tokens": 1}}
    async with http.post(group.baseline_url + "/generate", json=body) as r:
        assert r.status == 400
        assert "maximum allowed length (999 tokens)" in (await r.json())["error"]["message"]
