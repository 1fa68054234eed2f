"""The KV guard against the emulator with a small spec pool (override spec_kv_tokens)."""

from __future__ import annotations

import asyncio
import random

import aiohttp

from .conftest import generate, patch_policy, state, unique_ids, wait_for

SMALL_SPEC = {"spec_kv_tokens": 12000}


async def _capacity_known(http: aiohttp.ClientSession, admin_url: str) -> None:
    async def known() -> bool:
        kv = (await state(http, admin_url))["pools"]["spec"]["kv"]
        return (kv.get("router_estimate") or {}).get("capacity_tokens") == 12000

    await wait_for(known)


class QueueWatch:
    """Polls a server's /get_load; `sustained` when two polls in a row saw a waiting request
    (a request waits for a moment between arrival and the next step: one poll is not a queue)."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url
        self.sustained = False
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        prev = 0
        while True:
            async with self.http.get(self.url + "/get_load") as resp:
                waiting = sum(x.get("num_waiting_reqs", 0) for x in await resp.json())
            if waiting and prev:
                self.sustained = True
            prev = waiting
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def test_no_request_queues_on_a_full_spec_pool_while_baseline_has_room(
    make_stack, http
) -> None:
    router, group = await make_stack({"min_dwell_s": 0.2}, SMALL_SPEC)
    await _capacity_known(http, router.admin_url)
    rng = random.Random(1)

    async def burst() -> list[str]:
        reqs = [generate(http, router.url, unique_ids(rng, 5000), 200) for _ in range(4)]
        return [pool for pool, _ in await asyncio.gather(*reqs)]

    watch = QueueWatch(http, group.spec_url)
    pools = await burst()
    await watch.stop()
    assert sorted(pools) == ["baseline", "baseline", "spec", "spec"]  # 2 x 5k fit 12k, 3 do not
    assert not watch.sustained

    async def guard_moved_group() -> bool:  # load 4 < high, but 4 x 5k overflows spec: baseline
        g = await state(http, router.admin_url)
        return (
            g["mode"] == "baseline" and "overflows" in g["pools"]["spec"]["kv"]["guard"]["reason"]
        )

    await wait_for(guard_moved_group)

    # Control: without the guard the same burst queues on the spec pool.
    await patch_policy(http, router.admin_url, kv_guard=False)

    async def back_to_spec() -> bool:
        return (await state(http, router.admin_url))["mode"] == "spec"

    await wait_for(back_to_spec)
    watch = QueueWatch(http, group.spec_url)
    pools = await burst()
    await watch.stop()
    assert pools == ["spec"] * 4 and watch.sustained


async def test_guard_keeps_the_group_on_baseline_while_in_flight_kv_would_not_fit(
    make_stack, http
) -> None:
    router, _ = await make_stack({"mode": "baseline", "min_dwell_s": 0.2}, SMALL_SPEC)
    await _capacity_known(http, router.admin_url)
    rng = random.Random(2)
    stop = asyncio.Event()
    done: list[str] = []

    async def client() -> None:  # 5 long-prompt clients: load 5 <= low (6), KV 5 x 4.1k > 12k
        while not stop.is_set():
            pool, _ = await generate(http, router.url, unique_ids(rng, 4000), 100)
            done.append(pool)

    tasks = [asyncio.create_task(client()) for _ in range(5)]
    try:

        async def warm() -> bool:
            return len(done) >= 5

        await wait_for(warm)
        await patch_policy(http, router.admin_url, mode="auto")
        for _ in range(20):  # 1 s: 20 policy ticks, 5x the dwell
            await asyncio.sleep(0.05)
            g = await state(http, router.admin_url)
            assert g["mode"] == "baseline", g["pools"]["spec"]["kv"].get("guard")
        guard = g["pools"]["spec"]["kv"]["guard"]
        assert guard["block_spec"] and "spec pool" in guard["reason"]
        async with http.get(router.admin_url + "/metrics") as resp:
            metrics = await resp.text()
        assert 'specswitch_kv_guard{group="g0",verdict="block_spec"} 1.0' in metrics
        assert 'specswitch_kv_tokens{group="g0",kind="capacity",pool="spec"} 12000.0' in metrics
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    async def back_to_spec() -> bool:
        return (await state(http, router.admin_url))["mode"] == "spec"

    await wait_for(back_to_spec)  # the work is gone: the guard lifts, low load returns to spec
    assert set(done) == {"baseline"}
