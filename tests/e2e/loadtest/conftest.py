"""An in-process emulated group and router on free loopback ports, sped up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from specswitch.loadtest.emulator import start_group
from specswitch.router import GroupConfig, PolicyConfig, RouterConfig, start_router

SPEEDUP = 20.0


@dataclass
class Stack:
    url: str
    admin_url: str
    spec_url: str
    baseline_url: str


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    group = await start_group("seed-glm5-rtxpro6000", speedup=SPEEDUP)
    config = RouterConfig(
        groups=(GroupConfig("g0", group.spec_url, group.baseline_url),),
        listen="127.0.0.1:0",
        admin_listen="127.0.0.1:0",
        policy=PolicyConfig(mode="auto", high=6, low=2, min_dwell_s=0.05),
    )
    router = await start_router(config)
    try:
        yield Stack(router.url, router.admin_url, group.spec_url, group.baseline_url)
    finally:
        await router.close()
        await group.close()
