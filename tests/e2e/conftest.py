"""Shared end-to-end fixtures: an emulated group (in-process) behind the real router."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from specswitch.loadtest.emulator import start_group
from specswitch.router import GroupConfig, PolicyConfig, RouterConfig, start_router
from specswitch.router.config import HealthConfig, ScrapeConfig

Stack = tuple[Any, Any]  # (router, emulator group)
StackMaker = Callable[..., Awaitable[Stack]]


@pytest.fixture
async def emulated_stack() -> AsyncIterator[StackMaker]:
    """`await emulated_stack(policy, speedup=, tick_s=, scrape_s=, **group_kwargs)`: a fresh
    emulated group and a router in front of it; every stack made is closed after the test."""
    made: list[Stack] = []

    async def make(
        policy: dict[str, Any],
        *,
        speedup: float,
        tick_s: float,
        scrape_s: float,
        **group_kwargs: Any,
    ) -> Stack:
        group = await start_group(speedup=speedup, **group_kwargs)
        config = RouterConfig(
            groups=(GroupConfig("g0", group.spec_url, group.baseline_url),),
            listen="127.0.0.1:0",
            admin_listen="127.0.0.1:0",
            policy=dataclasses.replace(PolicyConfig(tick_s=tick_s), **policy),
            scrape=ScrapeConfig(interval_s=scrape_s, info_interval_s=5.0),
            health=HealthConfig(interval_s=0.5),
        )
        router = await start_router(config)
        made.append((router, group))
        return router, group

    yield make
    for router, group in made:
        await router.close()
        await group.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


async def patch_policy(http: aiohttp.ClientSession, admin_url: str, **changes: Any) -> None:
    async with http.patch(admin_url + "/admin/policy", json=changes) as resp:
        assert resp.status == 200, await resp.text()
