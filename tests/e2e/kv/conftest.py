"""The KV area's end-to-end fixtures: an emulated group and the real router in-process."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from ..conftest import Stack, StackMaker, patch_policy

__all__ = ["generate", "patch_policy", "state", "unique_ids", "wait_for"]


@pytest.fixture
def make_stack(emulated_stack: StackMaker) -> StackMaker:
    async def make(policy: dict[str, Any], overrides: dict[str, Any] | None = None) -> Stack:
        return await emulated_stack(
            policy, speedup=20.0, tick_s=0.05, scrape_s=0.1, overrides=overrides
        )

    return make


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


async def wait_for(predicate: Callable[[], Awaitable[bool]], limit_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)
