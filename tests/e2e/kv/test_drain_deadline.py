"""kv-aware drain against the emulator: follow-ups stick to the draining pool, and the drain
ends by its deadline even under continuous sticky traffic."""

from __future__ import annotations

import asyncio
import random

from .conftest import generate, patch_policy, state, unique_ids, wait_for


async def test_drain_ends_by_its_deadline_under_continuous_sticky_traffic(make_stack, http) -> None:
    deadline = 1.5
    router, _ = await make_stack(
        {"mode": "spec", "drain_deadline_s": deadline, "sticky_min_tokens": 256, "min_dwell_s": 0.1}
    )
    loop = asyncio.get_running_loop()
    rng = random.Random(5)
    stop = asyncio.Event()
    log: list[tuple[float, float, str, int]] = []  # (start, end, pool, turn)

    async def session() -> None:
        ids = unique_ids(rng, 3000)  # ~3k tokens of context, growing every turn
        turn = 0
        while not stop.is_set():
            t0 = loop.time()
            pool, out = await generate(http, router.url, ids)
            log.append((t0, loop.time(), pool, turn))
            ids = ids + out["output_ids"] + unique_ids(rng, 40)
            turn += 1

    tasks = [asyncio.create_task(session()) for _ in range(3)]
    try:

        async def warm() -> bool:
            return sum(1 for e in log if e[3] >= 1) >= 3

        await wait_for(warm)
        assert all(e[2] == "spec" for e in log)
        t_switch = loop.time()
        await patch_policy(http, router.admin_url, mode="baseline")
        await asyncio.sleep(deadline + 1.5)  # continuous traffic well past the deadline
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    margin = 0.5  # the switch lands within a policy tick (50 ms) of the PATCH
    sticky = [e for e in log if t_switch + margin < e[0] < t_switch + deadline - margin]
    assert sticky and all(e[2] == "spec" for e in sticky), "follow-ups stay where their KV is"
    late = [e for e in log if e[0] > t_switch + deadline + margin]
    assert late and all(e[2] == "baseline" for e in late), "at the deadline everything moves"

    async def spec_idle() -> bool:
        g = await state(http, router.admin_url)
        return g["pools"]["spec"]["state"] == "idle" and g["pools"]["spec"]["inflight"] == 0

    await wait_for(spec_idle)
    longest = max(e[1] - e[0] for e in log if e[2] == "spec")
    last_spec_end = max(e[1] for e in log if e[2] == "spec")
    assert last_spec_end <= t_switch + deadline + margin + longest
