"""Where a request goes: pick a group, then a pool. Pure reads of the current state.

This is the seam the KV layer extends (prefix affinity across groups, kv-aware stickiness
to a draining pool, the KV guard's verdict for the policy tick): subclass `Selector` and
override `choose_group`, `choose_pool`, `on_complete` and `kv_verdict`, then pass the
instance to `start_router(config, selector=...)`.

Default behaviour: the least loaded group that can serve; inside it, the group's mode pool;
when that server is unhealthy (or just failed to connect), its partner pool (failover).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .config import PolicyConfig
from .policy import NO_VERDICT, KvVerdict
from .state import GroupState, PoolState


@dataclass(slots=True)
class RequestInfo:
    """What selection may look at: the path, the parsed JSON body, the headers, the id."""

    path: str
    body: dict[str, Any] | None
    headers: Mapping[str, str]
    request_id: str


@dataclass(slots=True)
class Route:
    group: GroupState
    pool: PoolState
    reason: str = "mode"  # mode | failover | retry | (KV layer: kv-sticky, affinity, ...)


@dataclass(slots=True)
class Usage:
    """Token counts the server reported for a finished request (None when absent)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


class Selector:
    """Default routing. One instance per router; `policy()` returns the live policy."""

    def __init__(self, policy: Callable[[], PolicyConfig]) -> None:
        self.policy = policy

    def choose(
        self,
        groups: Sequence[GroupState],
        info: RequestInfo,
        avoid: Sequence[PoolState] = (),
    ) -> Route | None:
        """The route for a request, or None when no group can serve it.

        `avoid` lists pools that already failed this request (connect error): the retry
        goes to the partner pool or to another group.
        """
        group = self.choose_group(groups, info, avoid)
        if group is None:
            return None
        route = self.choose_pool(group, info, avoid)
        if route is not None and avoid:
            route.reason = "retry"
        return route

    def choose_group(
        self, groups: Sequence[GroupState], info: RequestInfo, avoid: Sequence[PoolState] = ()
    ) -> GroupState | None:
        """The least loaded group (router-local in-flight) that has a usable pool."""
        best: GroupState | None = None
        best_load = 0
        for group in groups:
            if not group.can_serve():
                continue
            if avoid and not any(_usable(p, avoid) for p in (group.spec, group.baseline)):
                continue
            load = group.spec.inflight + group.baseline.inflight
            if best is None or load < best_load:
                best, best_load = group, load
        return best

    def choose_pool(
        self, group: GroupState, info: RequestInfo, avoid: Sequence[PoolState] = ()
    ) -> Route | None:
        """The group's mode pool; its partner when that server is unhealthy or failed."""
        pool = group.pools[group.mode]
        if _usable(pool, avoid):
            return Route(group, pool)
        partner = group.partner(pool)
        if _usable(partner, avoid):
            return Route(group, partner, "failover")
        return None

    def on_complete(self, route: Route, info: RequestInfo, usage: Usage | None, ok: bool) -> None:
        """Accounting hook, called once per routed request after its response ended.

        `usage` carries what the server reported (prompt/completion/cached tokens) when the
        response had it; `ok` is False for failed or cancelled requests.
        """

    def on_moved(self, old: Route, new: Route, info: RequestInfo) -> None:
        """A running request moved to another pool (migration); on_complete follows with
        `new` when it ends."""

    def kv_verdict(self, group: GroupState) -> KvVerdict:
        """The KV guard's opinion for the policy tick (default: none)."""
        return NO_VERDICT

    def on_group_removed(self, group: GroupState) -> None:
        """A group left the registry (admin DELETE or DNS discovery): drop what you hold."""


def _usable(pool: PoolState, avoid: Sequence[PoolState]) -> bool:
    return pool.healthy and pool not in avoid
