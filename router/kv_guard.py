"""The KV guard: keep the spec pool (the one with less KV memory) from overflowing.

Two checks, both pure functions of a snapshot:

- ``evaluate`` (policy loop, once per tick): the verdict for the group's mode.
  * ``block_spec``: do not switch to spec while the KV the group's in-flight work needs would
    not fit the spec pool (``demand > spec_kv_fit x capacity``), or the load exceeds the spec
    server's max_running_requests (SGLang caps spec servers at 48 unless set). The demand is
    the peak over the last ``DEMAND_HOLD_S`` seconds (kv_tracker): requests batched together
    end together, and the moment between a turn's end and the next turn is not an empty group.
  * ``force_baseline``: switch to baseline now, whatever the request count, when the spec pool
    nears full (the router's estimate >= ``spec_kv_high``), or the group's in-flight demand
    would overflow it (``demand > spec_kv_high x capacity``; between fit and high the mode
    stays as it is), or it starves for KV (reported waiting requests > ``spec_queue_max`` and
    > a quarter of its running requests, while it runs fewer than max_running_requests: a
    queue behind the request cap is the thresholds' business, not the guard's).
- ``admit_spec`` (hot path, per request while the mode is spec): would this request still fit
  the spec pool? If not, and baseline has room, the request goes to baseline instead of queueing
  on a full spec pool, before the next policy tick switches the group.

KV use is the router's estimate (sum over the requests it has in flight on the pool of the
prompt, scaled by the learnt tokens per estimated token, plus 0.7 x the output cap, the share
SGLang's admission reserves): it reacts at once. The servers' token_usage gauges lag (SGLang
refreshes them every decode-log interval), and admission blocks on reserved output room before
they read full: they are shown in the admin state, not decided on. The server-side safety net
is the queue: waiting requests (/get_load, computed when asked; else the num_queue_reqs gauge)
above spec_queue_max and above a quarter of the running requests, in three scrapes in a row
(which also catches traffic from other routers).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GuardConfig:
    enabled: bool = True
    spec_kv_fit: float = 0.85
    """Switch to spec only when the in-flight KV demand fits this fraction of the spec pool."""
    spec_kv_high: float = 0.92
    """Leave spec (and stop admitting to it) when its KV use reaches this fraction."""
    spec_queue_max: int = 2
    """Leave spec when its server reports more queued requests than this. Not 0: a request
    arriving during a prefill step waits for the next one, and SGLang's gauges refresh only at
    prefill steps and every decode-log interval, so a queue of 1-2 is routine."""

    def validate(self) -> None:
        if not 0.0 < self.spec_kv_fit <= 1.0:
            raise ValueError(f"spec_kv_fit must be in (0, 1], got {self.spec_kv_fit}")
        if not 0.0 < self.spec_kv_high <= 1.0:
            raise ValueError(f"spec_kv_high must be in (0, 1], got {self.spec_kv_high}")
        if self.spec_kv_fit > self.spec_kv_high:
            raise ValueError("spec_kv_fit must be <= spec_kv_high (else the guard would flap)")
        if self.spec_queue_max < 0:
            raise ValueError(f"spec_queue_max must be >= 0, got {self.spec_queue_max}")


@dataclass(frozen=True, slots=True)
class PoolKv:
    """What is known of one pool's KV: capacity (scraped), router estimate, server reports."""

    capacity_tokens: int | None = None
    est_used_tokens: int = 0
    """Router estimate: KV needed by the requests in flight on this pool."""
    reported_usage: float | None = None
    """The server's token_usage gauge (0..1), when metrics are scraped."""
    reported_waiting: int | None = None
    """The server's queued requests (/get_load, else num_queue_reqs), when scraped."""
    reported_running: int | None = None
    """The server's running requests, when scraped."""
    inflight: int = 0
    max_running: int | None = None

    def usage(self) -> float | None:
        """The router's estimate of the KV in use, as a fraction of the pool (None: capacity
        unknown). The server's token_usage is shown, not decided on (see the module doc)."""
        if not self.capacity_tokens:
            return None
        return self.est_used_tokens / self.capacity_tokens

    def as_dict(self) -> dict[str, object]:
        usage = self.usage()
        return {
            "capacity_tokens": self.capacity_tokens,
            "inflight_kv_tokens_est": self.est_used_tokens,
            "token_usage_reported": self.reported_usage,
            "queued_reported": self.reported_waiting,
            "usage": None if usage is None else round(usage, 4),
        }


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    block_spec: bool = False
    force_baseline: bool = False
    reason: str = "ok"

    def as_dict(self) -> dict[str, object]:
        return {
            "block_spec": self.block_spec,
            "force_baseline": self.force_baseline,
            "reason": self.reason,
        }


OK = GuardVerdict()


def evaluate(cfg: GuardConfig, spec: PoolKv, demand_tokens: int, load: int) -> GuardVerdict:
    """The guard's verdict for a group. `demand_tokens`: KV its in-flight work needs (all pools)."""
    if not cfg.enabled:
        return GuardVerdict(reason="guard disabled")
    usage = spec.usage()
    if usage is not None and usage >= cfg.spec_kv_high:
        return GuardVerdict(
            block_spec=True,
            force_baseline=True,
            reason=f"spec KV {usage:.0%} >= spec_kv_high {cfg.spec_kv_high:.0%}",
        )
    if _queue_overflows(cfg, spec):
        return GuardVerdict(
            block_spec=True,
            force_baseline=True,
            reason=(
                f"spec queues {spec.reported_waiting} requests beside "
                f"{'?' if spec.reported_running is None else spec.reported_running} running "
                f"(> spec_queue_max {cfg.spec_queue_max} and > 1/4 of the batch)"
            ),
        )
    if spec.capacity_tokens and demand_tokens > cfg.spec_kv_high * spec.capacity_tokens:
        return GuardVerdict(
            block_spec=True,
            force_baseline=True,
            reason=(
                f"in-flight KV {demand_tokens} tokens overflows spec pool "
                f"({cfg.spec_kv_high:.0%} of {spec.capacity_tokens})"
            ),
        )
    if spec.capacity_tokens and demand_tokens > cfg.spec_kv_fit * spec.capacity_tokens:
        return GuardVerdict(
            block_spec=True,
            reason=(
                f"in-flight KV {demand_tokens} tokens would not fit spec pool "
                f"({cfg.spec_kv_fit:.0%} of {spec.capacity_tokens})"
            ),
        )
    if spec.max_running and load > spec.max_running:
        return GuardVerdict(
            block_spec=True,
            reason=f"load {load} > spec max_running_requests {spec.max_running}",
        )
    if spec.capacity_tokens is None:
        return GuardVerdict(reason="ok (spec KV capacity not known yet)")
    return OK


QUEUE_SHARE = 0.25
"""A spec queue counts only when it is more than this share of what the server runs."""


def _queue_overflows(cfg: GuardConfig, spec: PoolKv) -> bool:
    """The spec server's queue says its KV is overflowing: more than spec_queue_max waiting
    (in every one of the last scrapes, see kv_selector), more than QUEUE_SHARE of its running
    requests, and not because it runs max_running_requests already.

    Near a full pool a spec server admits arrivals a few at a time as requests finish (a
    dozen waiting beside 120 running at the end of a batch): each waits for a few completions,
    the server keeps its throughput and the thresholds (measured on this very behaviour) say
    spec is still better. A queue as large as a quarter of the batch is memory starvation.
    """
    waiting = spec.reported_waiting
    if waiting is None or waiting <= cfg.spec_queue_max or _queue_is_request_cap(spec):
        return False
    running = spec.reported_running
    return running is None or waiting > QUEUE_SHARE * running


def _queue_is_request_cap(spec: PoolKv) -> bool:
    """The spec server queues because it runs max_running_requests already, not for KV.

    That queue is a throughput matter, which the thresholds (high/low) and block_spec's
    "load > max_running_requests" handle; leaving spec for it would second-guess them.
    """
    return bool(
        spec.max_running
        and spec.reported_running is not None
        and spec.reported_running >= spec.max_running
    )


def admit_spec(cfg: GuardConfig, spec: PoolKv, baseline: PoolKv, need_tokens: int) -> bool:
    """May one more request needing `need_tokens` of KV go to the spec pool now?

    False only when spec would pass spec_kv_high (or is at max_running) and baseline has room:
    a request is never refused outright, it goes where it will not queue.
    """
    if not cfg.enabled:
        return True
    spec_full = False
    if spec.capacity_tokens:
        after = (spec.est_used_tokens + need_tokens) / spec.capacity_tokens
        spec_full = after > cfg.spec_kv_high
    if spec.max_running and spec.inflight >= spec.max_running:
        spec_full = True
    if not spec_full:
        return True
    if baseline.capacity_tokens:
        after = (baseline.est_used_tokens + need_tokens) / baseline.capacity_tokens
        if after > 1.0:
            return True  # neither has room: spec queues no worse than baseline would
    return False
