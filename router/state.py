"""Runtime state of groups and pools, and the registry that holds them.

The hot path reads this state (mode, health, in-flight counts) and bumps in-flight counts;
the control plane (policy tick, health checks, scrapes, admin) writes the rest. Everything
runs on one event loop, so plain attributes are enough: no locks.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from .config import POOLS, GroupConfig

ACTIVE, DRAINING, IDLE = "active", "draining", "idle"


class PoolState:
    """One server in its role (spec or baseline) inside a group."""

    __slots__ = (
        "drain_started",
        "fails",
        "group_name",
        "healthy",
        "inflight",
        "kv",
        "last_error",
        "load_report",
        "load_report_at",
        "load_waiting",
        "metrics_missing",
        "oks",
        "pool",
        "server",
        "server_metrics",
        "state",
        "url",
    )

    def __init__(self, group_name: str, pool: str, url: str, state: str) -> None:
        self.group_name = group_name
        self.pool = pool
        self.url = url.rstrip("/")
        self.state = state
        self.healthy = True  # optimistic until the first health check says otherwise
        self.inflight = 0
        self.fails = 0
        self.oks = 0
        self.last_error = ""
        self.drain_started: float | None = None
        # Filled by scrapes: /get_server_info subset, /get_load, /metrics gauges.
        self.server: dict[str, Any] = {}
        self.load_report: int | None = None  # running + waiting requests the server reports
        self.load_waiting: int | None = None  # of which waiting (queued), from the same scrape
        self.load_report_at = 0.0
        self.server_metrics: dict[str, float] = {}
        self.metrics_missing = False
        # KV view of this pool: capacity and use (scrapes); the KV layer adds its own keys.
        self.kv: dict[str, Any] = {}

    def acquire(self) -> None:
        self.inflight += 1

    def release(self, now: float) -> float | None:
        """One request finished; returns the drain duration when this ends a drain."""
        self.inflight -= 1
        if self.inflight == 0 and self.state == DRAINING:
            self.state = IDLE
            started, self.drain_started = self.drain_started, None
            return now - started if started is not None else 0.0
        return None

    def snapshot(self, now: float) -> dict[str, Any]:
        started = self.drain_started
        return {
            "url": self.url,
            "state": self.state,
            "drain_age_s": round(now - started, 3) if started is not None else None,
            "healthy": self.healthy,
            "inflight": self.inflight,
            "last_error": self.last_error or None,
            "reported_load": self.load_report,
            "kv": dict(self.kv),
            "server": dict(self.server),
            "metrics": dict(self.server_metrics),
        }


class GroupState:
    """A GPU group: its mode, its two pools, switch history and admin flags."""

    __slots__ = (
        "admin_drained",
        "baseline",
        "config",
        "last_switch",
        "load",
        "mode",
        "name",
        "pools",
        "removing",
        "spec",
        "switches",
    )

    def __init__(self, config: GroupConfig, mode: str = "spec") -> None:
        self.config = config
        self.name = config.name
        self.mode = mode
        self.spec = PoolState(config.name, "spec", config.spec_url, IDLE)
        self.baseline = PoolState(config.name, "baseline", config.baseline_url, IDLE)
        self.pools: dict[str, PoolState] = {"spec": self.spec, "baseline": self.baseline}
        self.pools[mode].state = ACTIVE
        self.admin_drained = False
        self.removing = False
        self.switches: dict[str, int] = dict.fromkeys(POOLS, 0)
        self.last_switch = -math.inf  # the first switch is never held back by the dwell
        self.load = 0  # the load the policy last saw (local or combined signal)

    @property
    def inflight(self) -> int:
        return self.spec.inflight + self.baseline.inflight

    def can_serve(self) -> bool:
        return not (self.admin_drained or self.removing) and (
            self.spec.healthy or self.baseline.healthy
        )

    def partner(self, pool: PoolState) -> PoolState:
        return self.baseline if pool is self.spec else self.spec

    def switch(self, to: str, now: float) -> float | None:
        """Change the mode; the old pool drains. Returns 0.0 if it was already empty."""
        old = self.pools[self.mode]
        new = self.pools[to]
        self.mode = to
        self.switches[to] += 1
        self.last_switch = now
        new.state = ACTIVE
        new.drain_started = None
        if old.inflight > 0:
            old.state = DRAINING
            old.drain_started = now
            return None
        old.state = IDLE
        return 0.0

    def snapshot(self, now: float) -> dict[str, Any]:
        age = now - self.last_switch
        return {
            "name": self.name,
            "mode": self.mode,
            "load": self.load,
            "inflight": self.inflight,
            "admin_drained": self.admin_drained,
            "removing": self.removing,
            "can_serve": self.can_serve(),
            "switches": dict(self.switches),
            "last_switch_age_s": round(age, 3) if math.isfinite(age) else None,
            "pools": {name: pool.snapshot(now) for name, pool in self.pools.items()},
        }


class Registry:
    """The groups the router routes to; add/remove at runtime (admin API, DNS discovery).

    `groups` is an immutable tuple replaced on every change, so the hot path can iterate it
    without copying while the control plane edits.
    """

    def __init__(
        self,
        initial_mode: Callable[[], str] = lambda: "spec",
        on_removed: Callable[[GroupState], None] | None = None,
    ) -> None:
        self.groups: tuple[GroupState, ...] = ()
        self._initial_mode = initial_mode
        self._on_removed = on_removed

    def names(self) -> list[str]:
        return [g.name for g in self.groups]

    def get(self, name: str) -> GroupState | None:
        for group in self.groups:
            if group.name == name:
                return group
        return None

    def add(self, config: GroupConfig) -> GroupState:
        """Add a group (validated). ValueError if the name exists."""
        config.validate()
        if self.get(config.name) is not None:
            raise ValueError(f"group {config.name!r} already exists")
        group = GroupState(config, self._initial_mode())
        self.groups = (*self.groups, group)
        return group

    async def remove(self, name: str, poll_s: float = 0.05) -> None:
        """Admin-drain the group, wait until its in-flight requests finished, then remove it.

        KeyError if no such group.
        """
        group = self.get(name)
        if group is None:
            raise KeyError(name)
        group.removing = True
        while group.inflight > 0:  # noqa: ASYNC110 - counts are plain ints the hot path bumps
            await asyncio.sleep(poll_s)
        if group in self.groups:
            self.groups = tuple(g for g in self.groups if g is not group)
            if self._on_removed is not None:
                self._on_removed(group)


def monotonic() -> float:
    return time.monotonic()
