"""Fixtures: in-process emulated groups on free loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from specswitch.loadtest.emulator import EmulatorGroup, start_group

GroupFactory = Callable[..., Awaitable[EmulatorGroup]]


@pytest.fixture
async def make_group() -> AsyncIterator[GroupFactory]:
    groups: list[EmulatorGroup] = []

    async def factory(profile: str = "seed-glm5-rtxpro6000", **kwargs: Any) -> EmulatorGroup:
        kwargs.setdefault("speedup", 50.0)
        group = await start_group(profile, **kwargs)
        groups.append(group)
        return group

    yield factory
    for g in groups:
        await g.close()


@pytest.fixture
async def group(make_group: GroupFactory) -> EmulatorGroup:
    return await make_group()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        yield session


async def _sse_events(resp: aiohttp.ClientResponse) -> list[Any]:
    """Every `data:` payload in order: parsed JSON, or the string "[DONE]"."""
    out: list[Any] = []
    buf = b""
    async for chunk in resp.content.iter_any():
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            assert event.startswith(b"data: "), event
            data = event[6:]
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    assert buf == b""
    return out


@pytest.fixture
def sse() -> Callable[[aiohttp.ClientResponse], Awaitable[list[Any]]]:
    return _sse_events
