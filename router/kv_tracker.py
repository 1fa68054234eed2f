"""KvTracker: the router's KV bookkeeping, one object per router (no I/O, no globals).

It holds, per (group, pool): the prefix index, the KV estimate of the requests in flight
there, the server's scraped capacity and reported gauges; and per group the guard's last
verdict. The router calls it at four points:

- request arrival: ``describe(path, body, headers)`` -> Conversation (hash once);
- selection: ``group_for`` (affinity across groups), ``drain_pool`` (sticky during a drain),
  ``admit_spec`` (per-request KV guard);
- after selection: ``on_routed(group, pool, conv)`` -> Ticket; on completion
  ``on_complete(ticket, prompt_tokens, cached_tokens)`` with the usage the server reported;
- control plane: ``set_server_info`` / ``set_reported`` from scraping, ``verdict`` from the
  policy tick, ``pool_state`` / ``group_state`` for GET /admin/state.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .affinity import AffinityConfig, GroupCandidate, PoolChoice, drain_choice, group_choice
from .conversation import DEFAULT_SESSION_HEADERS, Conversation, identify
from .kv_guard import OK, GuardConfig, GuardVerdict, PoolKv, admit_spec, evaluate
from .prefix_index import DEFAULT_MAX_ENTRIES, PrefixIndex, TokenScale

PoolKey = tuple[str, str]
DEMAND_HOLD_S = 2.0
"""The guard sees the peak in-flight KV demand of a group over this many seconds."""


@dataclass(slots=True)
class Ticket:
    """One routed request's KV bookkeeping, handed back on completion."""

    group: str
    pool: str
    conv: Conversation
    predicted_cached: int
    kv_tokens: int = 0
    """The KV this request was counted for on routing (released as is on completion)."""
    done: bool = False


@dataclass(slots=True)
class _PoolInfo:
    capacity_tokens: int | None = None
    max_running: int | None = None
    reported_usage: float | None = None
    reported_waiting: int | None = None
    reported_running: int | None = None
    inflight_kv: int = 0
    """Sum of kv_tokens() of the requests in flight here (real tokens, scale applied)."""
    inflight: int = 0


@dataclass(slots=True)
class KvCounters:
    routed: int = 0
    sticky: int = 0
    moved: int = 0
    guard_diverted: int = 0
    affinity_hits: int = 0
    predicted_cached_tokens: int = 0
    reported_cached_tokens: int = 0
    reported_prompt_tokens: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class KvTracker:
    def __init__(
        self,
        *,
        max_entries_per_pool: int = DEFAULT_MAX_ENTRIES,
        session_headers: tuple[str, ...] = DEFAULT_SESSION_HEADERS,
    ) -> None:
        self.scale = TokenScale()
        self.max_entries_per_pool = max_entries_per_pool
        self.session_headers = session_headers
        self._index: dict[PoolKey, PrefixIndex] = {}
        self._pool: dict[PoolKey, _PoolInfo] = {}
        self._verdict: dict[str, GuardVerdict] = {}
        self._demand: dict[str, deque[tuple[float, int]]] = {}
        self.counters = KvCounters()

    # -- request arrival -------------------------------------------------------------------
    def describe(
        self, path: str, body: Mapping[str, Any] | None, headers: Mapping[str, str] | None
    ) -> Conversation:
        return identify(path, body, headers, session_headers=self.session_headers)

    # -- per-pool objects --------------------------------------------------------------------
    def index(self, group: str, pool: str) -> PrefixIndex:
        key = (group, pool)
        idx = self._index.get(key)
        if idx is None:
            info = self._pool.get(key)
            idx = PrefixIndex(
                info.capacity_tokens if info else None, self.max_entries_per_pool, self.scale
            )
            self._index[key] = idx
        return idx

    def _info(self, group: str, pool: str) -> _PoolInfo:
        info = self._pool.get((group, pool))
        if info is None:
            info = self._pool[(group, pool)] = _PoolInfo()
        return info

    def cached(self, group: str, pool: str, conv: Conversation, own: bool = False) -> int:
        """Estimated prompt tokens of `conv` the pool's cache holds; with own=True only when
        it holds the conversation itself (not just a system prompt it shares)."""
        idx = self._index.get((group, pool))
        if idx is None or not conv.keys:
            return 0
        return idx.lookup(conv.keys, conv.own_from if own else 0)

    def kv_tokens(self, conv: Conversation) -> int:
        """The KV one request is counted for, in real tokens: the estimated prompt times the
        learnt token scale (exact prompts as they are) plus the output reserve (exact: the
        scale converts characters, not output caps)."""
        prompt = conv.prompt_tokens if conv.exact else int(conv.prompt_tokens * self.scale.value)
        return prompt + conv.output_reserve

    def pool_kv(self, group: str, pool: str) -> PoolKv:
        info = self._info(group, pool)
        return PoolKv(
            capacity_tokens=info.capacity_tokens,
            est_used_tokens=info.inflight_kv,
            reported_usage=info.reported_usage,
            reported_waiting=info.reported_waiting,
            reported_running=info.reported_running,
            inflight=info.inflight,
            max_running=info.max_running,
        )

    # -- selection -----------------------------------------------------------------------------
    def group_for(
        self, conv: Conversation, candidates: Iterable[tuple[str, int]], cfg: AffinityConfig
    ) -> str | None:
        """Affinity across groups: candidates are (group name, load) of groups that can serve."""
        if not conv.keys:
            return None
        cands = [
            GroupCandidate(
                name,
                load,
                max(
                    self.cached(name, "spec", conv, True), self.cached(name, "baseline", conv, True)
                ),
            )
            for name, load in candidates
        ]
        name, _reason = group_choice(cfg, cands)
        if name is not None:
            self.counters.affinity_hits += 1
        return name

    def drain_pool(
        self,
        group: str,
        conv: Conversation,
        active: str,
        draining: str,
        drain_age_s: float,
        cfg: AffinityConfig,
    ) -> PoolChoice:
        """While `draining` drains: stay there (sticky) or go to `active`."""
        kv = self.pool_kv(group, draining)
        need = 0.0
        if kv.capacity_tokens:
            need = self.kv_tokens(conv) / kv.capacity_tokens
        on_draining = self.cached(group, draining, conv, own=True)
        on_active = self.cached(group, active, conv)
        choice = drain_choice(
            cfg,
            cached_on_draining=on_draining,
            cached_on_active=on_active,
            draining_usage=kv.usage(),
            draining_need_fraction=need,
            drain_age_s=drain_age_s,
            draining_inflight=kv.inflight,
            draining_max_running=kv.max_running,
        )
        if choice.sticky:
            self.counters.sticky += 1
        elif on_draining > on_active:
            self.counters.moved += 1  # left its cache behind (short, full pool, deadline)
        self.counters.reasons[choice.reason] = self.counters.reasons.get(choice.reason, 0) + 1
        return choice

    def admit_spec(self, group: str, conv: Conversation, cfg: GuardConfig) -> bool:
        """Per-request KV guard while the group's mode is spec (False: send to baseline)."""
        spec = self._pool.get((group, "spec"))
        if spec is None or not cfg.enabled:
            return True
        need = self.kv_tokens(conv)
        if (not spec.max_running or spec.inflight < spec.max_running) and (
            not spec.capacity_tokens
            or spec.inflight_kv + need <= cfg.spec_kv_high * spec.capacity_tokens
        ):
            return True  # the common case, without building snapshots
        ok = admit_spec(cfg, self.pool_kv(group, "spec"), self.pool_kv(group, "baseline"), need)
        if not ok:
            self.counters.guard_diverted += 1
        return ok

    # -- accounting ------------------------------------------------------------------------------
    def on_routed(self, group: str, pool: str, conv: Conversation) -> Ticket:
        predicted = 0
        if conv.keys:
            idx = self.index(group, pool)
            predicted = idx.lookup(conv.keys)
            idx.insert(conv.keys)
        info = self._info(group, pool)
        kv = self.kv_tokens(conv)
        info.inflight_kv += kv
        info.inflight += 1
        self.counters.routed += 1
        return Ticket(group, pool, conv, predicted, kv)

    def on_complete(
        self, ticket: Ticket, prompt_tokens: int | None = None, cached_tokens: int | None = None
    ) -> None:
        """The request ended (any outcome). Usage figures, when the server reported them, correct
        the token scale and the index's fill factor. Idempotent."""
        if ticket.done:
            return
        ticket.done = True
        info = self._info(ticket.group, ticket.pool)
        info.inflight_kv = max(0, info.inflight_kv - ticket.kv_tokens)
        info.inflight = max(0, info.inflight - 1)
        if prompt_tokens:
            self.counters.reported_prompt_tokens += prompt_tokens
            if not ticket.conv.exact:
                self.scale.observe(ticket.conv.prompt_tokens, prompt_tokens)
        if cached_tokens is not None:
            self.counters.reported_cached_tokens += cached_tokens
            self.counters.predicted_cached_tokens += ticket.predicted_cached
            idx = self._index.get((ticket.group, ticket.pool))
            if idx is not None:
                idx.observe(ticket.predicted_cached, cached_tokens)

    # -- control plane ---------------------------------------------------------------------------
    def set_server_info(
        self,
        group: str,
        pool: str,
        *,
        max_total_num_tokens: int | None,
        max_running_requests: int | None = None,
    ) -> None:
        info = self._info(group, pool)
        info.capacity_tokens = max_total_num_tokens or None
        info.max_running = max_running_requests or None
        idx = self._index.get((group, pool))
        if idx is not None:
            idx.set_capacity(info.capacity_tokens)

    def set_reported(
        self,
        group: str,
        pool: str,
        *,
        token_usage: float | None,
        queued: int | None,
        running: int | None = None,
    ) -> None:
        info = self._info(group, pool)
        info.reported_usage = token_usage
        info.reported_waiting = queued
        info.reported_running = running

    def server_restarted(self, group: str, pool: str) -> None:
        """The server came back (health): its prefix cache is empty."""
        idx = self._index.get((group, pool))
        if idx is not None:
            idx.clear()

    def verdict(
        self, group: str, load: int, cfg: GuardConfig, now: float | None = None
    ) -> GuardVerdict:
        """The guard's verdict for a group (policy tick); remembered for the admin state.

        The demand is the peak in-flight KV over the last DEMAND_HOLD_S seconds."""
        now = time.monotonic() if now is None else now
        demand = sum(info.inflight_kv for (g, _), info in self._pool.items() if g == group)
        hist = self._demand.setdefault(group, deque())
        hist.append((now, demand))
        while hist and hist[0][0] < now - DEMAND_HOLD_S:
            hist.popleft()
        peak = max(d for _, d in hist)
        v = evaluate(cfg, self.pool_kv(group, "spec"), peak, load)
        self._verdict[group] = v
        return v

    def last_verdict(self, group: str) -> GuardVerdict:
        return self._verdict.get(group, OK)

    def forget_group(self, group: str) -> None:
        for key in [k for k in self._pool if k[0] == group]:
            self._pool.pop(key, None)
            self._index.pop(key, None)
        self._verdict.pop(group, None)
        self._demand.pop(group, None)

    # -- admin state -------------------------------------------------------------------------------
    def pool_state(self, group: str, pool: str) -> dict[str, Any]:
        out = self.pool_kv(group, pool).as_dict()
        idx = self._index.get((group, pool))
        out["prefix_index"] = idx.stats().as_dict() if idx is not None else None
        return out

    def group_state(self, group: str) -> dict[str, Any]:
        return {"guard": self.last_verdict(group).as_dict()}

    def summary(self) -> dict[str, Any]:
        c = self.counters
        return {
            "token_scale": round(self.scale.value, 3),
            "routed": c.routed,
            "sticky": c.sticky,
            "moved": c.moved,
            "guard_diverted": c.guard_diverted,
            "affinity_hits": c.affinity_hits,
            "predicted_cached_tokens": c.predicted_cached_tokens,
            "reported_cached_tokens": c.reported_cached_tokens,
            "reported_prompt_tokens": c.reported_prompt_tokens,
            "drain_reasons": dict(c.reasons),
        }
