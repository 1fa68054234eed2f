"""Prometheus metrics on a per-router CollectorRegistry (several routers may share a process).

Event metrics (requests, TTFT, drain and overhead histograms) are recorded as they happen;
state metrics (mode, switches, in-flight, pool state, health, load) are read from the
registry of groups at scrape time by a custom collector, so the hot path never touches them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .config import PolicyConfig
from .state import ACTIVE, DRAINING, IDLE, GroupState, Registry

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_DRAIN_BUCKETS = (0.0, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_OVERHEAD_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
)  # fmt: skip


class RouterMetrics:
    """All the router's metrics; `render()` gives the text exposition."""

    def __init__(self, groups: Registry, policy: Callable[[], PolicyConfig]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "specswitch_requests",
            "Requests routed, by group, pool and outcome "
            "(ok, http_4xx, http_5xx, failed, cancelled)",
            ("group", "pool", "outcome"),
            registry=self.registry,
        )
        self.rejected = Counter(
            "specswitch_rejected",
            "Requests refused before routing (no_group: no group can serve; bad_request)",
            ("reason",),
            registry=self.registry,
        )
        self.retries = Counter(
            "specswitch_retries",
            "Requests retried on another pool/group after a connect failure",
            ("group", "pool"),
            registry=self.registry,
        )
        self.ttft = Histogram(
            "specswitch_ttft_seconds",
            "Time from the request's arrival to the first response byte sent to the client",
            ("pool",),
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        )
        self.drain = Histogram(
            "specswitch_drain_seconds",
            "How long a pool took to drain after a switch away from it",
            ("pool",),
            buckets=_DRAIN_BUCKETS,
            registry=self.registry,
        )
        self.overhead = Histogram(
            "specswitch_router_overhead_seconds",
            "Time the router itself adds before the first byte: parse+route+send, "
            "and first upstream byte -> first client write",
            buckets=_OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.migrations = Counter(
            "specswitch_migrations",
            "Native /generate streams moved off a draining pool mid-generation",
            ("group", "from_pool", "to_pool"),
            registry=self.registry,
        )
        self.registry.register(_StateCollector(groups, policy))
        # Cached label children: the hot path does one dict lookup instead of .labels().
        self._request_children: dict[tuple[str, str, str], Counter] = {}
        self.ttft_by_pool = {p: self.ttft.labels(pool=p) for p in ("spec", "baseline")}
        self.drain_by_pool = {p: self.drain.labels(pool=p) for p in ("spec", "baseline")}

    def count_request(self, group: str, pool: str, outcome: str) -> None:
        key = (group, pool, outcome)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.requests.labels(*key)
        child.inc()

    def forget_group(self, group: str) -> None:
        """A group left the registry: drop its per-group series (DNS discovery churns groups;
        their counters would otherwise be exported, and held, forever)."""
        for key in [k for k in self._request_children if k[0] == group]:
            del self._request_children[key]
            self.requests.remove(*key)
        for counter in (self.retries, self.migrations):
            children: dict[tuple[str, ...], Any] = getattr(counter, "_metrics", {})
            for labels in [k for k in children if k and k[0] == group]:
                counter.remove(*labels)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    def __init__(self, groups: Registry, policy: Callable[[], PolicyConfig]) -> None:
        self._groups = groups
        self._policy = policy

    def describe(self) -> list:  # no fixed description: collected fresh each scrape
        return []

    def collect(self) -> Iterator:
        mode = GaugeMetricFamily(
            "specswitch_group_mode", "Mode of the group: 0 spec, 1 baseline", labels=("group",)
        )
        load = GaugeMetricFamily(
            "specswitch_group_load", "Load signal the policy last saw", labels=("group",)
        )
        drained = GaugeMetricFamily(
            "specswitch_group_admin_drained", "1 when the group is admin-drained", labels=("group",)
        )
        switches = CounterMetricFamily(
            "specswitch_switches", "Mode switches, by target mode", labels=("group", "to")
        )
        inflight = GaugeMetricFamily(
            "specswitch_inflight", "Requests in flight", labels=("group", "pool")
        )
        state = GaugeMetricFamily(
            "specswitch_pool_state",
            "1 for the pool's current state (active, draining, idle)",
            labels=("group", "pool", "state"),
        )
        healthy = GaugeMetricFamily(
            "specswitch_pool_healthy", "1 when the server passes health checks",
            labels=("group", "pool"),
        )  # fmt: skip
        kv_tokens = GaugeMetricFamily(
            "specswitch_kv_tokens",
            "KV layer's view of a pool: capacity, inflight (estimated KV of the requests in "
            "flight) and cached (the prefix index's estimate of the server's cache)",
            labels=("group", "pool", "kind"),
        )
        guard = GaugeMetricFamily(
            "specswitch_kv_guard",
            "KV guard verdict for the group: block_spec (no switch to spec) and "
            "force_baseline (leave spec now), 1 when set",
            labels=("group", "verdict"),
        )
        for group in self._groups.groups:
            name = group.name
            _kv_metrics(group, kv_tokens, guard)
            mode.add_metric([name], 0.0 if group.mode == "spec" else 1.0)
            load.add_metric([name], float(group.load))
            drained.add_metric([name], 1.0 if group.admin_drained else 0.0)
            for to, count in group.switches.items():
                switches.add_metric([name, to], float(count))
            for pool_name, pool in group.pools.items():
                inflight.add_metric([name, pool_name], float(pool.inflight))
                healthy.add_metric([name, pool_name], 1.0 if pool.healthy else 0.0)
                for s in (ACTIVE, DRAINING, IDLE):
                    state.add_metric([name, pool_name, s], 1.0 if pool.state == s else 0.0)
        policy = self._policy()
        thresholds = GaugeMetricFamily(
            "specswitch_policy_threshold", "Live policy thresholds", labels=("name",)
        )
        thresholds.add_metric(["high"], float(policy.high))
        thresholds.add_metric(["low"], float(policy.low))
        thresholds.add_metric(["min_dwell_s"], float(policy.min_dwell_s))
        yield from (mode, load, drained, switches, inflight, state, healthy, thresholds)
        yield from (kv_tokens, guard)


def _kv_metrics(group: GroupState, kv_tokens: GaugeMetricFamily, guard: GaugeMetricFamily) -> None:
    """The KV layer's figures, as KvSelector leaves them in each pool's `kv` (admin state)."""
    name = group.name
    for pool_name, pool in group.pools.items():
        est = pool.kv.get("router_estimate")
        if not isinstance(est, dict):
            continue
        index = est.get("prefix_index") or {}
        for kind, value in (
            ("capacity", est.get("capacity_tokens")),
            ("inflight", est.get("inflight_kv_tokens_est")),
            ("cached", index.get("cached_tokens_est")),
        ):
            if isinstance(value, int | float):
                kv_tokens.add_metric([name, pool_name, kind], float(value))
    verdict = group.spec.kv.get("guard")
    if isinstance(verdict, dict):
        for key in ("block_spec", "force_baseline"):
            guard.add_metric([name, key], 1.0 if verdict.get(key) else 0.0)
