"""The KV area's end-to-end fixtures: an emulated group and the real router in-process."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from specswitch.loadtest.emulator import start_group
from specswitch.router import GroupConfig, PolicyConfig, RouterConfig, start_router
from specswitch.router.config import HealthConfig, ScrapeConfig

Stack = tuple[Any, Any]  # (router, emulator group)


@pytest.fixture
async def make_stack() -> AsyncIterator[Callable[..., Awaitable[Stack]]]:
    made: list[Stack] = []

    async def make(policy: dict[str, Any], overrides: dict[str, Any] | None = None) -> Stack:
        group = await start_group(speedup=20.0, overrides=overrides)
        config = RouterConfig(
            groups=(GroupConfig("g0", group.spec_url, group.baseline_url),),
            listen="127.0.0.1:0",
            admin_listen="127.0.0.1:0",
            policy=dataclasses.replace(PolicyConfig(tick_s=0.05), **policy),
            scrape=ScrapeConfig(interval_s=0.1, info_interval_s=5.0),
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


def unique_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1000, 60000) for _ in range(n)]


async def generate(
    http: aiohttp.ClientSession, url: str, ids: list[int], max_new_tokens: int = 16
) -> tuple[str, dict[str, Any]]:
    """POST /generate through the router; returns (serving pool, response JSON)."""
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
    }
    async with http.post(url + "/generate", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["X-Specswitch-Pool"], await resp.json()


async def state(http: aiohttp.ClientSession, admin_url: str) -> dict[str, Any]:
    async with http.get(admin_url + "/admin/state") as resp:
        return (await resp.json())["groups"][0]


async def patch_policy(http: aiohttp.ClientSession, admin_url: str, **changes: Any) -> None:
    async with http.patch(admin_url + "/admin/policy", json=changes) as resp:
        assert resp.status == 200, await resp.text()


async def wait_for(predicate: Callable[[], Awaitable[bool]], limit_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)
