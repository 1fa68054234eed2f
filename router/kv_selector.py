"""KvSelector: the router's Selector with the KV layer wired in (the router's default selector).

On top of the default routing (least loaded group, the group's mode pool, failover):
- across groups: a conversation goes back to the group holding its prefix unless that group
  is much more loaded (affinity.group_choice);
- during a drain with ``drain = "kv-aware"``: a follow-up turn stays on the draining pool when
  moving would re-prefill more than ``sticky_min_tokens``, the pool has KV room and the drain
  deadline has not passed (affinity.drain_choice);
- while the mode is spec (auto): a request that would overflow the spec pool's KV (or pass its
  max_running_requests) goes to baseline when baseline has room (kv_guard.admit_spec);
- each policy tick: the guard's verdict (kv_guard.evaluate) vetoes a return to spec or asks for
  baseline early; the scraped server figures feed the tracker; each pool's ``kv`` in the admin
  state gains ``router_estimate`` (and the spec pool ``guard``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .affinity import AffinityConfig
from .config import PolicyConfig
from .conversation import EMPTY, Conversation
from .kv_guard import GuardConfig
from .kv_tracker import KvTracker, Ticket
from .policy import KvVerdict
from .selection import RequestInfo, Route, Selector, Usage
from .state import DRAINING, GroupState, PoolState

QUEUE_SCRAPES = 3
"""The spec server's queue counts for the guard when every one of this many scrapes in a row
(2 s apart from first to last at the default 1 s scrape interval) saw it."""

_AFFINITY_FIELDS = (
    "drain",
    "drain_deadline_s",
    "sticky_min_tokens",
    "drain_kv_headroom",
    "sticky_max_inflight",
    "affinity_load_ratio",
    "affinity_load_slack",
)


def affinity_config(policy: PolicyConfig) -> AffinityConfig:
    defaults = AffinityConfig()
    values = {f: getattr(policy, f, getattr(defaults, f)) for f in _AFFINITY_FIELDS}
    if not values["sticky_max_inflight"]:
        # 0: the policy's high. The draining pool carries no more sticky load than the level
        # at which the policy judged spec worse than baseline.
        values["sticky_max_inflight"] = max(1, int(getattr(policy, "high", 0)))
    return AffinityConfig(**values)


def guard_config(policy: PolicyConfig) -> GuardConfig:
    d = GuardConfig()
    return GuardConfig(
        enabled=getattr(policy, "kv_guard", d.enabled),
        spec_kv_fit=getattr(policy, "spec_kv_fit", d.spec_kv_fit),
        spec_kv_high=getattr(policy, "spec_kv_high", d.spec_kv_high),
        spec_queue_max=getattr(policy, "spec_queue_max", d.spec_queue_max),
    )


def _num(*values: Any) -> float | None:
    for v in values:
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    return None


class KvSelector(Selector):
    def __init__(
        self, policy: Callable[[], PolicyConfig] | None = None, tracker: KvTracker | None = None
    ) -> None:
        super().__init__(policy)  # type: ignore[arg-type]  # the context fills it when None
        self.tracker = tracker if tracker is not None else KvTracker()
        self._tickets: dict[int, Ticket] = {}
        self._conv: Conversation = EMPTY  # the request being routed (choose is synchronous)
        self._affinity_hit = False
        self._cfg_for: PolicyConfig | None = None
        self._acfg = AffinityConfig()
        self._gcfg = GuardConfig()
        self._was_healthy: dict[tuple[str, str], bool] = {}
        self._queue_hist: dict[tuple[str, str], tuple[object, deque[float]]] = {}

    def _configs(self) -> tuple[AffinityConfig, GuardConfig]:
        policy = self.policy()
        if policy is not self._cfg_for:  # the policy object is swapped on every PATCH
            self._acfg, self._gcfg = affinity_config(policy), guard_config(policy)
            self._cfg_for = policy
        return self._acfg, self._gcfg

    # -- hot path ------------------------------------------------------------------------------
    def choose(
        self, groups: Sequence[GroupState], info: RequestInfo, avoid: Sequence[PoolState] = ()
    ) -> Route | None:
        self._conv = self.tracker.describe(info.path, info.body, info.headers)
        self._affinity_hit = False
        route = super().choose(groups, info, avoid)
        key = id(info)
        old = self._tickets.pop(key, None)
        if old is not None:
            self.tracker.on_complete(old)
        if route is not None:
            if self._affinity_hit and route.reason == "mode":
                route.reason = "affinity"
            self._tickets[key] = self.tracker.on_routed(
                route.group.name, route.pool.pool, self._conv
            )
        self._conv = EMPTY
        return route

    def choose_group(
        self, groups: Sequence[GroupState], info: RequestInfo, avoid: Sequence[PoolState] = ()
    ) -> GroupState | None:
        best = super().choose_group(groups, info, avoid)
        if best is None or len(groups) < 2 or not self._conv.keys:
            return best
        acfg, _ = self._configs()
        usable = {
            g.name: g
            for g in groups
            if g.can_serve()
            and not (avoid and all(p in avoid or not p.healthy for p in (g.spec, g.baseline)))
        }
        name = self.tracker.group_for(
            self._conv, [(n, g.inflight) for n, g in usable.items()], acfg
        )
        if name is not None and name != best.name:
            self._affinity_hit = True
            return usable[name]
        return best

    def choose_pool(
        self, group: GroupState, info: RequestInfo, avoid: Sequence[PoolState] = ()
    ) -> Route | None:
        if avoid:
            return super().choose_pool(group, info, avoid)
        acfg, gcfg = self._configs()
        active = group.pools[group.mode]
        other = group.partner(active)
        # The sticky window is [switch, switch + drain_deadline_s]: follow-up turns arrive
        # after the previous turn ended, often when the old pool has just emptied (idle), so
        # stickiness keys on the switch time, not on the pool's momentary state.
        age = time.monotonic() - group.last_switch
        if (
            acfg.drain == "kv-aware"
            and age < acfg.drain_deadline_s
            and other.healthy
            and self._conv.keys
        ):
            choice = self.tracker.drain_pool(
                group.name, self._conv, active.pool, other.pool, age, acfg
            )
            if choice.sticky:
                if other.state != DRAINING:  # it drains again until this request ends
                    other.state = DRAINING
                    other.drain_started = group.last_switch
                return Route(group, other, "kv-sticky")
        if (
            group.mode == "spec"
            and gcfg.enabled
            and self.policy().mode == "auto"
            and active.healthy
            and group.baseline.healthy
            and not self.tracker.admit_spec(group.name, self._conv, gcfg)
        ):
            return Route(group, group.baseline, "kv-guard")
        return super().choose_pool(group, info, avoid)

    def on_complete(self, route: Route, info: RequestInfo, usage: Usage | None, ok: bool) -> None:
        ticket = self._tickets.pop(id(info), None)
        if ticket is None:
            return
        if usage is None:
            self.tracker.on_complete(ticket)
        else:
            self.tracker.on_complete(ticket, usage.prompt_tokens, usage.cached_tokens)

    def on_moved(self, old: Route, new: Route, info: RequestInfo) -> None:
        """The request's KV moves with it: released from the old pool, counted (and its prefix
        indexed: the continuation prefills it there) on the new one."""
        ticket = self._tickets.pop(id(info), None)
        if ticket is None:
            return
        self.tracker.on_complete(ticket)
        self._tickets[id(info)] = self.tracker.on_routed(new.group.name, new.pool.pool, ticket.conv)

    def on_group_removed(self, group: GroupState) -> None:
        """Drop the group's prefix indexes and KV figures: with DNS discovery groups come and
        go, and a group re-added under the same name starts with an empty cache."""
        self.tracker.forget_group(group.name)
        for key in [k for k in self._was_healthy if k[0] == group.name]:
            del self._was_healthy[key]
        for key in [k for k in self._queue_hist if k[0] == group.name]:
            del self._queue_hist[key]

    # -- control plane (policy tick) --------------------------------------------------------------
    def kv_verdict(self, group: GroupState) -> KvVerdict:
        _, gcfg = self._configs()
        for pool in (group.spec, group.baseline):
            self._sync(group.name, pool)
        v = self.tracker.verdict(group.name, max(group.load, group.inflight), gcfg)
        for pool in (group.spec, group.baseline):
            pool.kv["router_estimate"] = self.tracker.pool_state(group.name, pool.pool)
        group.spec.kv["guard"] = v.as_dict()
        return KvVerdict(
            spec_fits=not v.block_spec, spec_pressure=v.force_baseline, reason=v.reason
        )

    def _sync(self, group: str, pool: PoolState) -> None:
        """Scraped server figures -> tracker; a server that came back has an empty cache."""
        key = (group, pool.pool)
        was = self._was_healthy.get(key, True)
        if pool.healthy and not was:
            self.tracker.server_restarted(group, pool.pool)
        self._was_healthy[key] = pool.healthy
        server: Mapping[str, Any] = pool.server or {}
        kv: Mapping[str, Any] = pool.kv or {}
        metrics: Mapping[str, Any] = pool.server_metrics or {}
        capacity = _num(kv.get("max_total_num_tokens"), server.get("max_total_num_tokens"))
        running = _num(
            server.get("effective_max_running_requests_per_dp"), server.get("max_running_requests")
        )
        self.tracker.set_server_info(
            group,
            pool.pool,
            max_total_num_tokens=int(capacity) if capacity else None,
            max_running_requests=int(running) if running else None,
        )
        # /metrics token_usage (exact, lags), else /get_load's used tokens / capacity.
        usage = _num(kv.get("reported_token_usage"), kv.get("token_usage"))
        # /get_load is computed when asked (live); the /metrics gauge refreshes only at prefill
        # steps and decode-log intervals, so a stale queue can outlive the requests in it.
        queued = _num(pool.load_waiting, metrics.get("num_queue_reqs"))
        running = (
            pool.load_report - pool.load_waiting
            if pool.load_report is not None and pool.load_waiting is not None
            else _num(metrics.get("num_running_reqs"))
        )
        if queued is not None:
            # Requests wait between arrival and the next prefill step, and chunked prefill
            # admits a burst of arrivals over several steps: under high concurrency most
            # scrapes see a few waiting requests. A queue for KV lasts until requests finish:
            # the guard sees the smallest of the last QUEUE_SCRAPES scrapes.
            # A new scrape: /get_load's timestamp when the queue came from there (a server
            # without --enable-metrics never replaces its metrics dict), else a new dict.
            stamp: object = pool.load_report_at if pool.load_waiting is not None else metrics
            seen = self._queue_hist.get(key)
            if seen is None or (
                seen[0] != stamp if isinstance(stamp, float) else seen[0] is not stamp
            ):
                hist = seen[1] if seen is not None else deque([0.0] * QUEUE_SCRAPES, QUEUE_SCRAPES)
                hist.append(queued)
                self._queue_hist[key] = (stamp, hist)
            queued = min(self._queue_hist[key][1])
        self.tracker.set_reported(
            group,
            pool.pool,
            token_usage=usage,
            queued=int(queued) if queued is not None else None,
            running=int(running) if running is not None else None,
        )
