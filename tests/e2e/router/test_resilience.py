"""Must-show: failover, client disconnect, admin drain/resume across groups, the openai SDK."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import openai
from specswitch.loadtest.emulator import start_group

from .conftest import SPEEDUP, Driver, admin_get, wait_state


def _pool(state: dict, pool: str) -> dict:
    return state["groups"][0]["pools"][pool]


async def test_failover_to_baseline_and_back(emu, make_router) -> None:
    router = await make_router(emu)
    async with aiohttp.ClientSession() as s:
        drv = Driver(s, router.url, max_tokens=24)
        drv.set(3)
        await wait_state(s, router, lambda st: len(drv.results) >= 6, what="running on spec")
        assert {r.pool for r in drv.results} == {"spec"}
        await emu.stop_server("spec")  # mid-run
        st = await wait_state(s, router, lambda st: not _pool(st, "spec")["healthy"], what="down")
        t_down = time.monotonic()
        assert _pool(st, "baseline")["healthy"] and st["groups"][0]["mode"] == "spec"
        async with s.get(router.url + "/health") as r:
            assert r.status == 200
        n = len(drv.results)
        await wait_state(s, router, lambda st: len(drv.results) >= n + 9, what="on baseline")
        after_down = [r for r in drv.results if r.t_start > t_down]
        assert after_down and all(r.complete and r.pool == "baseline" for r in after_down)
        await emu.start_server("spec")
        await wait_state(s, router, lambda st: _pool(st, "spec")["healthy"], what="spec back")
        t_up = time.monotonic()
        n = len(drv.results)
        await wait_state(s, router, lambda st: len(drv.results) >= n + 6, what="spec again")
        await drv.stop()
        back = [r for r in drv.results if r.t_start > t_up]
        assert back and all(r.complete and r.pool == "spec" for r in back)


async def test_client_disconnect_frees_the_upstream_slot(emu, make_router) -> None:
    router = await make_router(emu)
    async with aiohttp.ClientSession() as s:
        body = {"model": "m", "messages": [{"role": "user", "content": "long one"}],
                "max_tokens": 100000, "ignore_eos": True, "stream": True}  # fmt: skip
        resp = await s.post(router.url + "/v1/chat/completions", json=body)
        await resp.content.readline()  # the stream is flowing
        async with s.get(emu.spec_url + "/get_load") as r:
            assert (await r.json())[0]["num_reqs"] == 1
        resp.close()  # the client goes away mid-stream
        for _ in range(500):
            async with s.get(emu.spec_url + "/get_load") as r:
                if (await r.json())[0]["num_reqs"] == 0:
                    break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the emulator still runs the abandoned request")
        st = await admin_get(s, router, "/admin/state")
        assert st["groups"][0]["inflight"] == 0


async def test_admin_drain_moves_traffic_and_resume_brings_it_back(emu, make_router) -> None:
    other = await start_group("seed-glm5-rtxpro6000", speedup=SPEEDUP)
    try:
        router = await make_router(emu, other)
        async with aiohttp.ClientSession() as s:
            drv = Driver(s, router.url)
            drv.set(4)
            await wait_state(s, router, lambda st: len(drv.results) >= 8, what="both groups")
            assert {r.group for r in drv.results} == {"g0", "g1"}
            async with s.post(router.admin_url + "/admin/groups/g0/drain") as r:
                assert r.status == 200
            await wait_state(
                s, router, lambda st: st["groups"][0]["inflight"] == 0, what="g0 empty"
            )
            n = len(drv.results)
            await wait_state(s, router, lambda st: len(drv.results) >= n + 8, what="on g1")
            assert {r.group for r in drv.results[n:]} == {"g1"}
            async with s.post(router.admin_url + "/admin/groups/g0/resume") as r:
                assert r.status == 200
            n = len(drv.results)
            await wait_state(s, router, lambda st: len(drv.results) >= n + 12, what="resumed")
            assert "g0" in {r.group for r in drv.results[n:]}
            await drv.stop()
        assert all(r.complete for r in drv.results)
    finally:
        await other.close()


async def test_openai_sdk_through_the_router(emu, make_router) -> None:
    router = await make_router(emu)
    client = openai.AsyncOpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0)
    try:
        models = await client.models.list()
        assert models.data and models.data[0].id
        done = await client.chat.completions.create(
            model=models.data[0].id, messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
        assert done.choices[0].finish_reason in ("stop", "length")
        assert done.usage is not None and done.usage.completion_tokens > 0
        stream = await client.chat.completions.create(
            model=models.data[0].id,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, finish, usage = [], None, None
        async for chunk in stream:
            for c in chunk.choices:
                text.append(c.delta.content or "")
                finish = c.finish_reason or finish
            usage = chunk.usage or usage
        assert finish in ("stop", "length") and usage is not None
        assert len("".join(text).split()) == usage.completion_tokens
        comp = await client.completions.create(model=models.data[0].id, prompt="a", max_tokens=4)
        assert comp.choices[0].text
        raw = await client.chat.completions.with_raw_response.create(
            model=models.data[0].id, messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
        assert raw.headers["x-specswitch-pool"] == "spec"
    finally:
        await client.close()
