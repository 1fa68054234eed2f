"""Affinity decisions: which pool during a drain, which group across groups. Pure functions.

During a drain (after a switch the old pool is ``draining``, the new one ``active``), with
``drain = "kv-aware"`` a request stays on the draining pool only when all hold:

1. it continues a conversation the draining pool holds (matched prefix tokens > 0: a new
   conversation always goes to the active pool);
2. moving would re-prefill more than ``sticky_min_tokens`` (tokens cached on the draining pool
   minus tokens cached on the active one);
3. the draining pool has room: its KV use stays under ``drain_kv_headroom``, it runs fewer
   requests than its server's max_running_requests (more would queue), and fewer than
   ``sticky_max_inflight`` when that cap is set (0: no cap; an operator who wants a switch
   away from spec under load to shed spec's load at once sets it, e.g. to ``high``);
4. the drain deadline has not passed (``drain_age_s < drain_deadline_s``).

At the deadline every conversation moves, so the drain always ends: once the requests already
in flight there finish, the pool is idle. ``drain = "immediate"`` is the naive switch (every
new request to the active pool), kept for comparison.

Across groups: a conversation goes back to the group holding most of its prefix (at least
``sticky_min_tokens``) unless that group is much more loaded than the least loaded one
(``load > affinity_load_ratio x least_load + affinity_load_slack``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DRAIN_POLICIES = ("kv-aware", "immediate")


@dataclass(frozen=True, slots=True)
class AffinityConfig:
    drain: str = "kv-aware"
    drain_deadline_s: float = 30.0
    sticky_min_tokens: int = 1024
    drain_kv_headroom: float = 0.9
    sticky_max_inflight: int = 0
    affinity_load_ratio: float = 1.5
    affinity_load_slack: int = 4

    def validate(self) -> None:
        if self.drain not in DRAIN_POLICIES:
            raise ValueError(
                f"drain must be one of {', '.join(DRAIN_POLICIES)}, got {self.drain!r}"
            )
        if not self.drain_deadline_s >= 0:
            raise ValueError(f"drain_deadline_s must be >= 0, got {self.drain_deadline_s}")
        if self.sticky_min_tokens < 0:
            raise ValueError(f"sticky_min_tokens must be >= 0, got {self.sticky_min_tokens}")
        if self.sticky_max_inflight < 0:
            raise ValueError(f"sticky_max_inflight must be >= 0, got {self.sticky_max_inflight}")
        if not 0.0 < self.drain_kv_headroom <= 1.0:
            raise ValueError(f"drain_kv_headroom must be in (0, 1], got {self.drain_kv_headroom}")
        if self.affinity_load_ratio < 1.0:
            raise ValueError(f"affinity_load_ratio must be >= 1, got {self.affinity_load_ratio}")
        if self.affinity_load_slack < 0:
            raise ValueError(f"affinity_load_slack must be >= 0, got {self.affinity_load_slack}")


@dataclass(frozen=True, slots=True)
class PoolChoice:
    sticky: bool
    """True: stay on the draining pool. False: the active pool."""
    reason: str
    """A fixed label (the admin state counts decisions by it)."""


def drain_choice(
    cfg: AffinityConfig,
    *,
    cached_on_draining: int,
    cached_on_active: int,
    draining_usage: float | None,
    draining_need_fraction: float,
    drain_age_s: float,
    draining_inflight: int = 0,
    draining_max_running: int | None = None,
) -> PoolChoice:
    """Where a request goes while its group drains the old pool.

    `cached_on_*`: estimated prompt tokens of the request each pool's prefix cache holds.
    `draining_usage`: the draining pool's KV use (0..1, None: unknown, taken as room).
    `draining_need_fraction`: the fraction of that pool this request would add.
    `draining_inflight`: requests in flight on the draining pool now; `draining_max_running`:
    its server's max_running_requests (None: unknown).
    """
    if cfg.drain != "kv-aware":
        return PoolChoice(False, "drain=immediate")
    if cached_on_draining <= 0:
        return PoolChoice(False, "new conversation")
    saved = cached_on_draining - cached_on_active
    if saved <= cfg.sticky_min_tokens:
        return PoolChoice(False, "re-prefill <= sticky_min_tokens")
    if drain_age_s >= cfg.drain_deadline_s:
        return PoolChoice(False, "drain deadline passed")
    if (
        draining_usage is not None
        and draining_usage + draining_need_fraction > cfg.drain_kv_headroom
    ):
        return PoolChoice(False, "draining pool has no KV room")
    if draining_max_running and draining_inflight >= draining_max_running:
        return PoolChoice(False, "draining pool at max_running_requests")
    if cfg.sticky_max_inflight and draining_inflight >= cfg.sticky_max_inflight:
        return PoolChoice(False, "draining pool at sticky_max_inflight")
    return PoolChoice(True, "sticky")


@dataclass(frozen=True, slots=True)
class GroupCandidate:
    name: str
    load: int
    cached_tokens: int
    """Estimated prompt tokens of the request held by this group's pools (best pool)."""


def group_choice(
    cfg: AffinityConfig, candidates: Sequence[GroupCandidate]
) -> tuple[str | None, str]:
    """The group a request should go to for affinity, or None to let least-loaded choose.

    Candidates are the groups that can serve. Ties on cached tokens keep the given order.
    """
    if len(candidates) < 2:
        return None, "single group"
    best = max(candidates, key=lambda c: c.cached_tokens)
    if best.cached_tokens <= 0:
        return None, "no group holds the prefix"
    if best.cached_tokens < cfg.sticky_min_tokens:
        return None, "cached prefix below sticky_min_tokens"
    least = min(c.load for c in candidates)
    if best.load > cfg.affinity_load_ratio * least + cfg.affinity_load_slack:
        return (
            None,
            f"{best.name} holds the prefix but is much more loaded ({best.load} vs {least})",
        )
    return best.name, f"prefix affinity: {best.cached_tokens} tokens cached on {best.name}"
