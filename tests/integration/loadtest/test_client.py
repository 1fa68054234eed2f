"""The streaming client against a scripted SSE server (real HTTP on a loopback port)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web
from specswitch.loadtest.client import ClientConfig, StreamClient
from specswitch.loadtest.datasets import Message

from specswitch.errors import UserError


async def _sse(
    request: web.Request,
    events: list[bytes],
    done: bool = True,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", **(headers or {})})
    await resp.prepare(request)
    for ev in events:
        await resp.write(b"data: " + ev + b"\n\n")
    if done:
        await resp.write(b"data: [DONE]\n\n")
    return resp


def _chat_chunk(content: str | None = None, finish: str | None = None, role: bool = False) -> bytes:
    delta: dict = {}
    if role:
        delta = {"role": "assistant", "content": ""}
    if content is not None:
        delta["content"] = content
    return orjson.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    mode = body["messages"][-1]["content"]
    if mode == "http-error":
        return web.json_response(
            {"error": {"message": "bad things", "type": "x", "code": 400}}, status=400
        )
    if mode == "mid-stream-error":
        return await _sse(
            request,
            [
                _chat_chunk(role=True),
                _chat_chunk("a"),
                orjson.dumps({"error": {"message": "engine died"}}),
            ],
        )
    if mode == "no-done":
        return await _sse(request, [_chat_chunk(role=True), _chat_chunk("a")], done=False)
    usage = orjson.dumps(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 7,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        }
    )
    return await _sse(
        request,
        [
            _chat_chunk(role=True),
            _chat_chunk(" one"),
            _chat_chunk(" two three"),
            _chat_chunk(" four five"),
            _chat_chunk(finish="length"),
            usage,
        ],
        headers={"X-Specswitch-Pool": "baseline", "X-Specswitch-Group": "g7"},
    )


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    assert "<|user|>" in body["prompt"]
    events = [orjson.dumps({"choices": [{"text": t, "finish_reason": None}]}) for t in ("x", "yz")]
    events.append(
        orjson.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}})
    )
    return await _sse(request, events)


async def generate(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    assert body["sampling_params"]["max_new_tokens"] == 9 and body["stream"] is True
    events = []
    text, ids = "", []
    for piece in (" a", " b c", " d"):
        text += piece
        ids += [1] * len(piece.split())
        events.append(
            orjson.dumps(
                {
                    "text": text,
                    "output_ids": ids,
                    "meta_info": {
                        "completion_tokens": len(ids),
                        "prompt_tokens": 11,
                        "cached_tokens": 0,
                        "finish_reason": None if len(ids) < 4 else {"type": "length", "length": 4},
                    },
                }
            )
        )
    return await _sse(request, events)


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "served-model"}]})


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/generate", generate)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_chat_stream_records_timings_usage_and_headers(server: str) -> None:
    async with StreamClient(ClientConfig(target=server)) as client:
        await client.probe()
        assert client.model == "served-model"
        res, text = await client.send([Message("user", "hi")], conv_id="c1")
    assert res.ok and res.error is None and res.status == 200
    assert text == " one two three four five"
    assert res.output_tokens == 5 and res.prompt_tokens == 7 and res.cached_tokens == 4
    assert res.pool == "baseline" and res.group == "g7" and res.finish_reason == "length"
    assert len(res.chunk_times) == 3 and list(res.chunk_chars) == [4, 10, 10]
    assert res.ttft is not None and 0 < res.ttft <= res.e2e
    assert res.tpot is not None and len(res.itl()) == 2


async def test_completions_and_generate(server: str) -> None:
    async with StreamClient(ClientConfig(target=server, api="completions")) as client:
        res, text = await client.send([Message("user", "hi")])
    assert res.ok and text == "xyz" and res.output_tokens == 3
    async with StreamClient(ClientConfig(target=server, api="generate", max_tokens=9)) as client:
        res, text = await client.send([Message("user", "hi")])
    assert res.ok and text == " a b c d"  # cumulative text turned into deltas
    assert res.output_tokens == 4 and res.prompt_tokens == 11 and res.finish_reason == "length"
    assert len(res.chunk_times) == 3


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("http-error", "HTTP 400: bad things"),
        ("mid-stream-error", "stream error: engine died"),
        ("no-done", "stream ended without [DONE]"),
    ],
)
async def test_errors_are_recorded_not_raised(server: str, mode: str, error: str) -> None:
    async with StreamClient(ClientConfig(target=server)) as client:
        res, _ = await client.send([Message("user", mode)])
    assert not res.ok and res.error == error


async def test_unreachable_target_is_a_user_error() -> None:
    from specswitch.loadtest.stack import free_port

    async with StreamClient(ClientConfig(target=f"http://127.0.0.1:{free_port()}")) as client:
        with pytest.raises(UserError, match="cannot reach target"):
            await client.probe()
        res, _ = await client.send([Message("user", "x")])
    assert not res.ok and res.error and "Connect" in res.error
