"""An emulated group: a spec and a baseline server sharing one simulated GPU."""

from __future__ import annotations

import logging
from typing import Any

from .engine import Engine
from .gpu import SharedGpu
from .profile import POOLS, Profile, load_profile
from .server import EmulatedServer, ServerSettings

log = logging.getLogger("specswitch.emulator")


class EmulatorGroup:
    """Both servers of one group. Build it with ``await start_group(...)``."""

    def __init__(
        self,
        profile: Profile,
        *,
        host: str,
        ports: dict[str, int],
        speedup: float,
        settings: ServerSettings,
    ) -> None:
        self.profile = profile
        self.speedup = speedup
        self.gpu = SharedGpu(speedup)
        self.servers: dict[str, EmulatedServer] = {}
        for pool_name in POOLS:
            pool = profile.pool(pool_name)
            engine = Engine(
                pool_name,
                pool,
                context_length=profile.context_length,
                seed=profile.seed,
                wake=self.gpu.wake,
            )
            self.gpu.add(engine)
            self.servers[pool_name] = EmulatedServer(
                pool_name,
                profile,
                engine,
                settings,
                host=host,
                port=ports[pool_name],
                speedup=speedup,
                gpu=self.gpu,
            )

    @property
    def spec(self) -> EmulatedServer:
        return self.servers["spec"]

    @property
    def baseline(self) -> EmulatedServer:
        return self.servers["baseline"]

    @property
    def spec_url(self) -> str:
        return self.spec.url

    @property
    def baseline_url(self) -> str:
        return self.baseline.url

    def _server(self, pool: str) -> EmulatedServer:
        if pool not in self.servers:
            raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
        return self.servers[pool]

    async def start(self) -> None:
        self.gpu.start()
        try:
            for server in self.servers.values():
                await server.start()
        except BaseException:
            await self.close()
            raise

    async def stop_server(self, pool: str) -> None:
        """Stop one server (its requests are aborted, its port closed), like a crash."""
        await self._server(pool).stop()

    async def start_server(self, pool: str) -> None:
        """Start a stopped server again on the same port."""
        await self._server(pool).start()

    async def close(self) -> None:
        for server in self.servers.values():
            await server.stop()
        await self.gpu.close()

    async def __aenter__(self) -> EmulatorGroup:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def start_group(
    profile: str | Profile = "seed-glm5-rtxpro6000",
    *,
    host: str = "127.0.0.1",
    spec_port: int = 0,
    baseline_port: int = 0,
    speedup: float = 1.0,
    enable_metrics: bool = True,
    overrides: dict[str, Any] | None = None,
    incremental_streaming_output: bool = False,
    enable_cache_report: bool = True,
) -> EmulatorGroup:
    """Start both servers of an emulated group (port 0 = pick a free port)."""
    prof = load_profile(profile).with_overrides(overrides)
    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    settings = ServerSettings(
        enable_metrics=enable_metrics,
        incremental_streaming_output=incremental_streaming_output,
        enable_cache_report=enable_cache_report,
    )
    group = EmulatorGroup(
        prof,
        host=host,
        ports={"spec": spec_port, "baseline": baseline_port},
        speedup=speedup,
        settings=settings,
    )
    await group.start()
    log.info(
        "event=emulator_group_started profile=%s spec=%s baseline=%s speedup=%s",
        prof.name,
        group.spec_url,
        group.baseline_url,
        speedup,
    )
    return group
