"""Affinity across groups against two emulated groups: a follow-up turn goes back to the group
holding its prefix even when another group is less loaded; a new conversation does not."""

from __future__ import annotations

import asyncio
import random

from specswitch.loadtest.emulator import start_group
from specswitch.router import GroupConfig, PolicyConfig, RouterConfig, start_router

from .conftest import unique_ids


async def _send(http, url: str, ids: list[int], max_new_tokens: int = 8) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens}}
    async with http.post(url + "/generate", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["X-Specswitch-Group"], await resp.json()


async def test_follow_up_returns_to_the_group_holding_its_prefix(http) -> None:
    groups = [await start_group(speedup=20.0) for _ in range(2)]
    config = RouterConfig(
        groups=tuple(
            GroupConfig(f"g{i}", g.spec_url, g.baseline_url) for i, g in enumerate(groups)
        ),
        listen="127.0.0.1:0",
        admin_listen="127.0.0.1:0",
        policy=PolicyConfig(mode="spec", sticky_min_tokens=512),
    )
    router = await start_router(config)
    rng = random.Random(9)
    try:
        conv = unique_ids(rng, 2048)
        home, out = await _send(http, router.url, conv)
        # Busy the home group more than the other one with long requests.
        hold = [
            asyncio.create_task(_send(http, router.url, unique_ids(rng, 300), 3000))
            for _ in range(3)
        ]
        await asyncio.sleep(0.3)
        async with http.get(router.admin_url + "/admin/state") as resp:
            loads = {g["name"]: g["inflight"] for g in (await resp.json())["groups"]}
        assert loads[home] > min(loads.values())
        follow, _ = await _send(http, router.url, conv + out["output_ids"] + unique_ids(rng, 30))
        assert follow == home
        other, _ = await _send(http, router.url, unique_ids(rng, 2048))
        assert other != home  # nothing cached anywhere: least loaded
        for task in hold:
            task.cancel()
        await asyncio.gather(*hold, return_exceptions=True)
    finally:
        await router.close()
        for g in groups:
            await g.close()
