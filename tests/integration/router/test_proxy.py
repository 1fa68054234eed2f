"""Proxy behaviours against a tiny scriptable upstream: headers, relay, retries, errors."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
from specswitch.router import GroupConfig, PolicyConfig, Selector
from specswitch.router.config import ProxyConfig

from .conftest import Upstream, wait_for


def _g(spec: Upstream, base: Upstream, name: str = "g0") -> tuple[GroupConfig, ...]:
    return (GroupConfig(name, spec.url, base.url),)


async def test_body_unchanged_headers_and_request_id(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base))
    raw = b'{"model": "m",   "messages": [{"role":"user","content":"hi \\u00e9"}], "x": 1}'
    async with aiohttp.ClientSession() as s:
        async with s.post(
            router.url + "/v1/chat/completions",
            data=raw,
            headers={"Content-Type": "application/json", "X-Request-Id": "req-42"},
        ) as r:
            assert r.status == 200
            assert r.headers["X-Request-Id"] == "req-42"
            assert r.headers["X-Specswitch-Group"] == "g0"
            assert r.headers["X-Specswitch-Pool"] == "spec"
            assert (await r.json())["server"] == "spec"
        async with s.post(router.url + "/v1/chat/completions", json={}) as r:
            generated = r.headers["X-Request-Id"]
            assert len(generated) >= 16
    # forwarded byte for byte, but for the request id spliced in as SGLang's rid
    assert spec.bodies[0] == b'{"rid":"req-42","model": "m"' + raw[len(b'{"model": "m"') :]
    assert orjson.loads(spec.bodies[1]) == {"rid": generated}
    assert spec.headers[0]["X-Request-Id"] == "req-42"
    assert spec.headers[1]["X-Request-Id"] == generated


async def test_body_rid_is_kept_and_becomes_the_request_id(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base))
    raw = b'{"rid": "mine", "messages": []}'
    async with aiohttp.ClientSession() as s:
        async with s.post(router.url + "/v1/chat/completions", data=raw) as r:
            assert r.headers["X-Request-Id"] == "mine"
    assert spec.bodies[0] == raw


async def test_bodies_untouched_when_rid_injection_is_off(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base), proxy=ProxyConfig(request_id_to_rid=False))
    raw = b'{"model": "m", "messages": []}'
    async with aiohttp.ClientSession() as s:
        async with s.post(
            router.url + "/v1/chat/completions", data=raw, headers={"X-Request-Id": "q"}
        ) as r:
            assert r.headers["X-Request-Id"] == "q"
    assert spec.bodies[0] == raw


async def test_stream_relayed_whole_and_usage_hook(upstreams, make_router) -> None:
    spec, base = upstreams
    seen: list = []

    class Recording(Selector):
        def on_complete(self, route, info, usage, ok):  # type: ignore[override]
            seen.append((route.pool.pool, info.request_id, usage, ok))

    router = await make_router(_g(spec, base))
    router.ctx.selector = Recording(router.ctx.get_policy)
    spec.chunks, spec.delay_s = 5, 0.005
    async with aiohttp.ClientSession() as s:
        async with s.post(
            router.url + "/v1/chat/completions", json={"stream": True},
            headers={"X-Request-Id": "s1"},
        ) as r:  # fmt: skip
            assert r.headers["Content-Type"].startswith("text/event-stream")
            text = (await r.read()).decode()
    assert text.count("data: ") == 7 and text.endswith("data: [DONE]\n\n")
    assert seen[0][0:2] == ("spec", "s1") and seen[0][3] is True
    assert seen[0][2].completion_tokens == 5 and seen[0][2].prompt_tokens == 5


async def test_midstream_failure_gives_sse_error_then_done(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base))
    spec.chunks, spec.break_after = 5, 2
    async with aiohttp.ClientSession() as s:
        async with s.post(router.url + "/v1/chat/completions", json={"stream": True}) as r:
            assert r.status == 200
            text = (await r.read()).decode()
    events = [e for e in text.split("\n\n") if e]
    assert events[0].startswith('data: {"choices"') and len(events) == 4
    assert orjson.loads(events[2][6:])["error"]["type"] == "upstream_error"
    assert events[3] == "data: [DONE]"


async def test_connect_failure_retries_on_partner_and_marks_unhealthy(
    upstreams, make_router
) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base))
    await spec.stop()  # refused connections from now on
    async with aiohttp.ClientSession() as s:
        async with s.post(router.url + "/v1/chat/completions", json={}) as r:
            assert r.status == 200
            assert r.headers["X-Specswitch-Pool"] == "baseline"
        async with s.get(router.admin_url + "/admin/state") as r:
            pools = (await r.json())["groups"][0]["pools"]
            assert pools["spec"]["healthy"] is False and pools["baseline"]["healthy"] is True
        async with s.get(router.url + "/health") as r:
            assert r.status == 200
        await base.stop()
        async with s.post(router.url + "/v1/chat/completions", json={}) as r:
            assert r.status in (502, 503)
            assert "error" in await r.json()


async def test_all_groups_drained_gives_503_with_retry_after(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base))
    async with aiohttp.ClientSession() as s:
        async with s.post(router.admin_url + "/admin/groups/g0/drain") as r:
            assert r.status == 200 and (await r.json())["admin_drained"] is True
        async with s.post(router.url + "/v1/chat/completions", json={}) as r:
            assert r.status == 503 and r.headers["Retry-After"] == "5"
            err = (await r.json())["error"]
            assert set(err) >= {"message", "type", "code"}
        async with s.get(router.url + "/health") as r:
            assert r.status == 503
        async with s.post(router.admin_url + "/admin/groups/g0/resume") as r:
            assert r.status == 200
        async with s.post(router.url + "/v1/chat/completions", json={}) as r:
            assert r.status == 200
        async with s.post(router.admin_url + "/admin/groups/nope/drain") as r:
            assert r.status == 404


async def test_client_disconnect_cancels_upstream(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base))
    spec.release.clear()  # the upstream holds the request before its first byte
    async with aiohttp.ClientSession() as s:
        task = asyncio.ensure_future(
            s.post(router.url + "/v1/chat/completions", json={"stream": True})
        )
        await wait_for(lambda: spec.active == 1, what="upstream got the request")
        assert router.registry.groups[0].spec.inflight == 1
        task.cancel()
        await wait_for(
            lambda: spec.active == 0 and router.registry.groups[0].spec.inflight == 0,
            what="upstream request cancelled",
        )


async def test_bad_json_and_models(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base))
    async with aiohttp.ClientSession() as s:
        async with s.post(router.url + "/v1/chat/completions", data=b"{nope") as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "bad_json"
        async with s.get(router.url + "/v1/models") as r:
            assert r.status == 200 and (await r.json())["data"][0]["id"] == "m"


async def test_add_and_remove_group_live(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(())
    async with aiohttp.ClientSession() as s:
        async with s.get(router.url + "/health") as r:
            assert r.status == 503
        body = {"name": "g9", "spec_url": spec.url, "baseline_url": base.url}
        async with s.post(router.admin_url + "/admin/groups", json=body) as r:
            assert r.status == 201
        async with s.post(router.admin_url + "/admin/groups", json=body) as r:
            assert r.status == 409
        async with s.post(router.url + "/v1/chat/completions", json={}) as r:
            assert r.headers["X-Specswitch-Group"] == "g9"
        async with s.delete(router.admin_url + "/admin/groups/g9") as r:
            assert r.status == 200
        assert router.registry.names() == []


async def test_hundreds_of_concurrent_streams_are_not_capped(upstreams, make_router) -> None:
    """No connection cap on the way upstream (aiohttp's default 100 is the classic trap)."""
    spec, base = upstreams
    router = await make_router(_g(spec, base), policy=PolicyConfig(mode="spec"))
    spec.release.clear()  # hold every request upstream until all of them are there
    n = 300
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

        async def one() -> str:
            async with s.post(router.url + "/v1/chat/completions", json={"stream": True}) as r:
                return (await r.read()).decode()

        tasks = [asyncio.ensure_future(one()) for _ in range(n)]
        await wait_for(lambda: spec.active == n, 30, f"{n} requests upstream at once")
        assert router.registry.groups[0].spec.inflight == n
        spec.release.set()
        bodies = await asyncio.gather(*tasks)
    assert all(b.endswith("data: [DONE]\n\n") for b in bodies)


async def test_unknown_route_and_wrong_method_are_openai_errors(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router(_g(spec, base))
    async with aiohttp.ClientSession() as s:
        async with s.get(router.url + "/v1/chat/completions") as r:
            assert r.status == 405 and "error" in await r.json()
        async with s.post(router.url + "/nope") as r:
            assert r.status == 404 and (await r.json())["error"]["type"] == "not_found_error"
