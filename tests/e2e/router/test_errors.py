"""Errors reach clients in the OpenAI shape, whoever raised them (SGLang or the router)."""

from __future__ import annotations

import aiohttp
import openai
import pytest


async def test_sglang_validation_error_is_reshaped(emu, make_router) -> None:
    router = await make_router(emu)
    async with aiohttp.ClientSession() as s:
        # straight to the emulated SGLang server: its own shape
        async with s.post(emu.spec_url + "/v1/chat/completions", json={"model": "m"}) as r:
            direct = await r.json()
            assert r.status == 400 and direct.get("object") == "error"
        async with s.post(router.url + "/v1/chat/completions", json={"model": "m"}) as r:
            body = await r.json()
            assert r.status == 400
            assert r.headers["Content-Type"].startswith("application/json")
            assert r.headers["X-Specswitch-Pool"] == "spec"
    err = body["error"]
    assert err["message"] == direct["message"]
    assert err["type"] == "invalid_request_error" and err["code"] == "upstream_400"


async def test_openai_sdk_sees_a_bad_request_error(emu, make_router) -> None:
    router = await make_router(emu)
    client = openai.AsyncOpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model="m", messages=[], max_tokens=-1)
    assert info.value.status_code == 400
    await client.close()


async def test_body_over_the_limit_is_a_json_413(emu, make_router) -> None:
    router = await make_router(emu)
    big = b'{"text": "' + b"x" * (300 * 1024 * 1024) + b'"}'
    async with aiohttp.ClientSession() as s:
        async with s.post(router.url + "/generate", data=big) as r:
            assert r.status == 413
            assert "error" in await r.json()
