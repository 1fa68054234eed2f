"""Two router replicas in front of one group agree on the mode with load_signal = "max"."""

from __future__ import annotations

import dataclasses

import aiohttp
from specswitch.router import GroupConfig, PolicyConfig, RouterConfig, ScrapeConfig, start_router

from .conftest import Driver, wait_state


def _config(emu, signal: str) -> RouterConfig:
    return RouterConfig(
        groups=(GroupConfig("g0", emu.spec_url, emu.baseline_url),),
        listen="127.0.0.1:0",
        admin_listen="127.0.0.1:0",
        policy=PolicyConfig(high=12, low=6, min_dwell_s=0.5, tick_s=0.05, load_signal=signal),
        scrape=dataclasses.replace(ScrapeConfig(), interval_s=0.1, fresh_s=2.0),
    )


async def test_replica_without_traffic_follows_the_servers_load(emu) -> None:
    busy = await start_router(_config(emu, "max"))
    quiet = await start_router(_config(emu, "max"))
    local_only = await start_router(_config(emu, "local"))
    try:
        async with aiohttp.ClientSession() as s:
            drv = Driver(s, busy.url, max_tokens=64)
            drv.set(24)  # all the traffic through one replica
            await wait_state(s, busy, lambda st: st["groups"][0]["mode"] == "baseline", what="busy")
            # The quiet replica has nothing in flight itself, yet sees the servers' count.
            st = await wait_state(
                s, quiet, lambda st: st["groups"][0]["mode"] == "baseline", what="quiet replica"
            )
            assert st["groups"][0]["inflight"] == 0 and st["groups"][0]["load"] >= 12
            st = await wait_state(s, local_only, lambda st: True)
            assert st["groups"][0]["mode"] == "spec"  # local signal: blind to other replicas
            drv.set(0)
            await drv.stop()
            # Load gone everywhere: the quiet replica returns to spec after the dwell.
            await wait_state(s, quiet, lambda st: st["groups"][0]["mode"] == "spec", what="back")
        assert all(r.complete for r in drv.results)
    finally:
        for r in (busy, quiet, local_only):
            await r.close()
