"""A tiny scriptable upstream (a real HTTP server speaking a sliver of SGLang's API) for
proxy behaviours the emulator cannot be told to do (e.g. break a stream half way)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from specswitch.router import GroupConfig, HealthConfig, RouterConfig, start_router
from specswitch.router.app import Router


class Upstream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.bodies: list[bytes] = []
        self.headers: list[Any] = []
        self.health_status = 200
        self.chunks = 3
        self.delay_s = 0.0
        self.break_after: int | None = None  # close the connection after N chunks
        self.active = 0
        self.release = asyncio.Event()
        self.release.set()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.bodies.append(raw)
        self.headers.append(request.headers.copy())
        body = orjson.loads(raw)
        self.active += 1
        try:
            await self.release.wait()
            if not body.get("stream"):
                return web.json_response(
                    {"server": self.name, "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
                )
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(self.chunks):
                if self.break_after is not None and i == self.break_after:
                    assert request.transport is not None
                    request.transport.close()
                    return resp
                await resp.write(b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i)
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
            await resp.write(
                b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d}}\n\n'
                b"data: [DONE]\n\n" % self.chunks
            )
            await resp.write_eof()
            return resp
        finally:
            self.active -= 1

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=self.health_status)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/generate", self._chat)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@pytest.fixture
async def upstreams() -> AsyncIterator[tuple[Upstream, Upstream]]:
    spec, base = Upstream("spec"), Upstream("baseline")
    await spec.start()
    await base.start()
    yield spec, base
    spec.release.set()
    base.release.set()
    await spec.stop()
    await base.stop()


def router_config(groups: tuple[GroupConfig, ...], **changes: Any) -> RouterConfig:
    cfg = RouterConfig(
        groups=groups,
        listen="127.0.0.1:0",
        admin_listen="127.0.0.1:0",
        health=HealthConfig(interval_s=0.1, timeout_s=1.0, unhealthy_after=1),
    )
    return dataclasses.replace(cfg, **changes)


@pytest.fixture
async def make_router() -> AsyncIterator[Callable[..., Any]]:
    routers: list[Router] = []

    async def make(groups: tuple[GroupConfig, ...], **changes: Any) -> Router:
        router = await start_router(router_config(groups, **changes))
        routers.append(router)
        return router

    yield make
    for r in routers:
        await r.close()


async def wait_for(cond: Callable[[], bool], limit_s: float = 10.0, what: str = "") -> None:
    """Poll a state predicate (state, not time, is what tests wait on)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.01)
