"""End-to-end fixtures: the real router (in-process or as a process) in front of the emulator.

Tests synchronise on state (GET /admin/state), never on sleeps. The emulator runs with a
speedup so a 64-stream ramp takes seconds; switching thresholds are the defaults' shape.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from specswitch.loadtest.emulator import start_group
from specswitch.router import GroupConfig, HealthConfig, PolicyConfig, RouterConfig, start_router
from specswitch.router.app import Router

SPEEDUP = 10.0


@pytest.fixture
async def emu() -> AsyncIterator[Any]:
    group = await start_group("seed-glm5-rtxpro6000", speedup=SPEEDUP)
    yield group
    await group.close()


@pytest.fixture
async def make_router() -> AsyncIterator[Callable[..., Awaitable[Router]]]:
    routers: list[Router] = []

    async def make(*groups: Any, token: str | None = None, **policy: Any) -> Router:
        cfg = RouterConfig(
            groups=tuple(
                GroupConfig(f"g{i}", g.spec_url, g.baseline_url) for i, g in enumerate(groups)
            ),
            listen="127.0.0.1:0",
            admin_listen="127.0.0.1:0",
            admin_token=token,
            policy=dataclasses.replace(PolicyConfig(min_dwell_s=1.0, tick_s=0.05), **policy),
            health=HealthConfig(interval_s=0.1, timeout_s=1.0, unhealthy_after=1),
        )
        router = await start_router(cfg)
        routers.append(router)
        return router

    yield make
    for r in routers:
        await r.close()


async def admin_get(session: aiohttp.ClientSession, router: Router, path: str) -> Any:
    async with session.get(router.admin_url + path) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def wait_state(
    session: aiohttp.ClientSession,
    router: Router,
    cond: Callable[[dict[str, Any]], bool],
    limit_s: float = 20.0,
    what: str = "",
) -> dict[str, Any]:
    """Poll GET /admin/state until cond(state) holds; return that state."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        state = await admin_get(session, router, "/admin/state")
        if cond(state):
            return state
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {orjson.dumps(state)[:2000]}")
        await asyncio.sleep(0.02)


@dataclasses.dataclass
class Result:
    pool: str = ""
    group: str = ""
    status: int = 0
    finish_reason: str | None = None
    done: bool = False
    words: int = 0
    completion_tokens: int | None = None
    error: str = ""
    t_start: float = 0.0
    t_end: float = 0.0

    @property
    def complete(self) -> bool:
        return (
            self.status == 200
            and self.done
            and self.finish_reason is not None
            and self.completion_tokens == self.words
            and not self.error
        )


async def chat_stream(
    session: aiohttp.ClientSession,
    url: str,
    max_tokens: int = 16,
    prompt: str = "hello",
    **extra: Any,
) -> Result:
    """One streamed chat completion, checked event by event."""
    res = Result(t_start=time.monotonic())
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as r:
            res.status = r.status
            res.pool = r.headers.get("X-Specswitch-Pool", "")
            res.group = r.headers.get("X-Specswitch-Group", "")
            text = []
            async for line in r.content:
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    res.done = True
                    continue
                event = orjson.loads(line[6:])
                if "error" in event:
                    res.error = str(event["error"])
                for choice in event.get("choices") or []:
                    text.append(choice.get("delta", {}).get("content") or "")
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
                if event.get("usage"):
                    res.completion_tokens = event["usage"]["completion_tokens"]
            res.words = len("".join(text).split())
    except aiohttp.ClientError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.t_end = time.monotonic()
    return res


class Driver:
    """Closed-loop load: `target` workers each send one stream after another."""

    def __init__(self, session: aiohttp.ClientSession, url: str, max_tokens: int = 16) -> None:
        self.session = session
        self.url = url
        self.max_tokens = max_tokens
        self.target = 0
        self.results: list[Result] = []
        self._workers: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self._stop = False

    def set(self, concurrency: int) -> None:
        self.target = concurrency
        while len(self._workers) < concurrency:
            idx = len(self._workers)
            self._workers.append(asyncio.create_task(self._work(idx)))
        self._changed.set()

    async def _work(self, idx: int) -> None:
        while not self._stop:
            if idx >= self.target:
                self._changed.clear()
                await self._changed.wait()
                continue
            self.results.append(await chat_stream(self.session, self.url, self.max_tokens))

    async def stop(self) -> None:
        """Let every worker finish its current request, then end."""
        self._stop = True
        self._changed.set()
        await asyncio.gather(*self._workers)
