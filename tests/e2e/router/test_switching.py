"""Must-show: load-driven switching with drain, no flapping, live dial, forced mode."""

from __future__ import annotations

import time

import aiohttp

from .conftest import Driver, admin_get, wait_state


def _mode(state: dict) -> str:
    return state["groups"][0]["mode"]


async def _emulator_counter(session: aiohttp.ClientSession, url: str, name: str) -> float:
    async with session.get(url + "/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith(name):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_ramp_1_64_1_switches_and_drains_without_failures(emu, make_router) -> None:
    router = await make_router(emu, high=12, low=4, min_dwell_s=1.0)
    seen: list[tuple[int, str]] = []  # (concurrency, mode at the end of that level)
    async with aiohttp.ClientSession() as s:
        drv = Driver(s, router.url, max_tokens=24)

        async def level(c: int, cond=None, what: str = "") -> dict:
            drv.set(c)
            st = await wait_state(s, router, cond, what=what) if cond else None
            n = len(drv.results)
            await wait_state(s, router, lambda st: len(drv.results) >= n + max(4, c), what=f"c={c}")
            st = await admin_get(s, router, "/admin/state")
            seen.append((c, _mode(st)))
            return st

        # Closed-loop ramp up: spec while load < high, baseline once it passes high.
        for c in (1, 2, 4, 8):
            await level(c)
        assert {r.pool for r in drv.results} == {"spec"}
        drv.set(16)
        st = await wait_state(s, router, lambda st: _mode(st) == "baseline", what="baseline")
        t_baseline = time.monotonic()
        draining_at_switch = st["groups"][0]["pools"]["spec"]["inflight"]
        for c in (16, 32, 64):
            await level(c)
        await wait_state(
            s, router,
            lambda st: st["groups"][0]["pools"]["spec"]["state"] == "idle",
            what="spec drained",
        )  # fmt: skip
        # Ramp down: baseline until load <= low (8 is inside the band: no switch), then spec,
        # never sooner than min_dwell_s after the first switch.
        for c in (32, 16, 8):
            await level(c)
        await level(4, lambda st: _mode(st) == "spec", "back to spec")
        assert time.monotonic() - t_baseline >= 1.0 - 0.05
        for c in (2, 1):
            st = await level(c)
        await drv.stop()
        metrics = await (await s.get(router.admin_url + "/metrics")).text()
        aborted = [
            await _emulator_counter(s, url, "sglang:num_aborted_requests_total")
            for url in (emu.spec_url, emu.baseline_url)
        ]
    assert seen == [
        (1, "spec"), (2, "spec"), (4, "spec"), (8, "spec"),
        (16, "baseline"), (32, "baseline"), (64, "baseline"),
        (32, "baseline"), (16, "baseline"), (8, "baseline"),
        (4, "spec"), (2, "spec"), (1, "spec"),
    ]  # fmt: skip
    results = drv.results
    bad = [r for r in results if not r.complete]
    assert not bad, f"{len(bad)} of {len(results)} requests failed/incomplete: {bad[:3]}"
    assert st["groups"][0]["switches"] == {"spec": 1, "baseline": 1}
    # The spec pool still had requests in flight at the switch; it drained (one drain
    # recorded) and nothing was aborted on either server: those requests finished on spec.
    drain_sum = next(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith('specswitch_drain_seconds_sum{pool="spec"}')
    )
    assert draining_at_switch > 0 or drain_sum > 0
    assert 'specswitch_drain_seconds_count{pool="spec"} 1.0' in metrics
    assert aborted == [0.0, 0.0]
    assert {r.pool for r in results[-3:]} == {"spec"}
    assert any(r.pool == "baseline" for r in results)
    # Requests that were on spec when the group switched finished there, complete.
    crossed = [r for r in results if r.pool == "spec" and r.t_start < t_baseline < r.t_end]
    assert crossed and all(r.complete for r in crossed)


async def test_hysteresis_band_and_oscillation_do_not_flap(emu, make_router) -> None:
    router = await make_router(emu, high=12, low=4, min_dwell_s=1.0)
    async with aiohttp.ClientSession() as s:
        drv = Driver(s, router.url, max_tokens=24)
        drv.set(8)  # inside the band (low < 8 < high): stays on spec
        await wait_state(s, router, lambda st: len(drv.results) >= 40, what="40 in band")
        st = await admin_get(s, router, "/admin/state")
        assert _mode(st) == "spec" and st["groups"][0]["switches"]["baseline"] == 0
        # Oscillate hard across both thresholds for ~3 s: the dwell bounds the switches.
        t0 = time.monotonic()
        flips = 0
        while time.monotonic() - t0 < 3.0:
            drv.set(24 if flips % 2 == 0 else 2)
            flips += 1
            n = len(drv.results)
            await wait_state(s, router, lambda st, n=n: len(drv.results) >= n + 2, what="flip")
        await drv.stop()
        st = await admin_get(s, router, "/admin/state")
    sw = st["groups"][0]["switches"]
    elapsed = time.monotonic() - t0
    assert flips >= 6
    assert sw["spec"] + sw["baseline"] <= elapsed / 1.0 + 1
    assert all(r.complete for r in drv.results)


async def test_live_dial_forced_mode_and_bad_patch(emu, make_router) -> None:
    router = await make_router(emu, high=40, low=20, token="t0k3n")
    auth = {"Authorization": "Bearer t0k3n"}
    async with aiohttp.ClientSession() as s:
        async with s.get(router.admin_url + "/admin/state") as r:
            assert r.status == 401
        async with s.get(
            router.admin_url + "/admin/state", headers={"Authorization": "Bearer x"}
        ) as r:
            assert r.status == 401
        async with aiohttp.ClientSession(headers=auth) as a:
            drv = Driver(s, router.url, max_tokens=24)
            drv.set(8)
            await wait_state(a, router, lambda st: st["groups"][0]["inflight"] >= 6, what="load 8")
            assert _mode(await admin_get(a, router, "/admin/state")) == "spec"
            # Thresholds changed live: load 8 >= new high 6 -> baseline within a tick.
            async with a.patch(router.admin_url + "/admin/policy", json={"high": 6, "low": 2}) as r:
                assert r.status == 200 and (await r.json())["high"] == 6
            await wait_state(a, router, lambda st: _mode(st) == "baseline", what="dial -> baseline")
            # Forced mode wins over load.
            async with a.patch(router.admin_url + "/admin/policy", json={"mode": "spec"}) as r:
                assert r.status == 200
            await wait_state(a, router, lambda st: _mode(st) == "spec", what="forced spec")
            n = len(drv.results)
            await wait_state(a, router, lambda st: len(drv.results) >= n + 16, what="forced run")
            assert _mode(await admin_get(a, router, "/admin/state")) == "spec"
            # Bad bodies: 400 with a clear message, nothing changed.
            before = await admin_get(a, router, "/admin/policy")
            for bad in ({"low": 9, "high": 3}, {"min_dwell_s": 0}, {"mode": "turbo"},
                        {"nonsense": 1}, [1, 2]):  # fmt: skip
                async with a.patch(router.admin_url + "/admin/policy", json=bad) as r:
                    assert r.status == 400, bad
                    assert "error" in await r.json()
            async with a.patch(router.admin_url + "/admin/policy", data=b"{oops") as r:
                assert r.status == 400
            assert await admin_get(a, router, "/admin/policy") == before
            await drv.stop()
    assert all(r.complete for r in drv.results)
