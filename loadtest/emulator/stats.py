"""Counters, gauges and histograms of one emulated server (what /metrics and server_info show).

Like SGLang, the gauges (running/queued requests, token usage, throughput, accept length)
are refreshed by the scheduler, not on read: after every prefill batch, every
``DECODE_LOG_INTERVAL`` decode steps, and when the server goes idle, so they lag a little.
Counters and histograms are updated as events happen. Times are wall-clock seconds (what a
client sees), so with --speedup X the emulated latencies are X times shorter.
"""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine
    from .request import Request

DECODE_LOG_INTERVAL = 40


def _buckets(bounds: str) -> tuple[float, ...]:
    """Histogram bucket upper bounds written as one space-separated line."""
    return tuple(float(b) for b in bounds.split())


# SGLang's default bucket bounds (seconds)
TTFT_BUCKETS = _buckets("0.01 0.025 0.05 0.1 0.2 0.4 0.6 0.8 1 2 4 6 8 10 20 40 60 80 100 200 400")
ITL_BUCKETS = _buckets(
    "0.002 0.004 0.006 0.008 0.01 0.015 0.02 0.025 0.03 0.035 0.04 0.06 0.08 0.1 0.2 0.4 0.6 "
    "0.8 1 2 4 6 8"
)
E2E_BUCKETS = _buckets("0.1 0.2 0.4 0.6 0.8 1 2 4 6 8 10 20 40 60 80 100 200 400 800")


class Histogram:
    __slots__ = ("buckets", "count", "counts", "sum")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        acc = 0
        for bound, n in zip(
            (*[repr(float(b)) for b in self.buckets], "+Inf"), self.counts, strict=True
        ):
            acc += n
            out.append((bound, acc))
        return out


class EngineStats:
    def __init__(self, spec: bool) -> None:
        self.spec = spec
        # counters
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.cached_tokens_total = 0
        self.num_requests_total = 0
        self.num_aborted_requests_total = 0
        self.decode_steps = 0
        self.busy_seconds = 0.0  # simulated GPU time spent on this server's steps
        # histograms
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        # gauges (refreshed by refresh_gauges)
        self.num_running_reqs = 0
        self.num_queue_reqs = 0
        self.num_used_tokens = 0
        self.token_usage = 0.0
        self.gen_throughput = 0.0
        self.cache_hit_rate = 0.0
        self.spec_accept_length = 0.0
        self.spec_accept_rate = 0.0
        # windows since the last refresh
        self._win_start = time.perf_counter()
        self._win_tokens = 0
        self._win_verify = 0
        self._win_spec_tokens = 0
        self._win_prompt = 0
        self._win_cached = 0
        self._decode_since_log = 0

    def on_admit(self, req: Request) -> None:
        self.prompt_tokens_total += req.prompt_tokens
        self.cached_tokens_total += req.cached_tokens
        self._win_prompt += req.prompt_tokens
        self._win_cached += req.cached_tokens

    def on_first_token(self, req: Request, now: float) -> None:
        self.ttft.observe(now - req.created_wall)

    def on_tokens(self, req: Request, n: int, now: float) -> None:
        self.generation_tokens_total += n
        self._win_tokens += n
        if req.last_token_wall:
            self.itl.observe((now - req.last_token_wall) / n)

    def on_finish(self, req: Request) -> None:
        self.num_requests_total += 1
        reason = req.finish_reason or {}
        if reason.get("type") == "abort":
            self.num_aborted_requests_total += 1
        self.e2e.observe(time.perf_counter() - req.created_wall)
        if self.spec:
            self._win_verify += req.spec_verify_ct
            self._win_spec_tokens += req.completion_tokens

    def on_prefill_step(self, engine: Engine, seconds: float) -> None:
        self.busy_seconds += seconds
        self.refresh_gauges(engine, "prefill")

    def on_decode_step(self, engine: Engine, seconds: float) -> None:
        self.busy_seconds += seconds
        self.decode_steps += 1
        self._decode_since_log += 1
        if self._decode_since_log >= DECODE_LOG_INTERVAL:
            self.refresh_gauges(engine, "decode")

    def refresh_gauges(self, engine: Engine, source: str = "idle") -> None:
        """Refresh the gauges as SGLang's scheduler does from ``source``: a prefill batch
        (``cache_hit_rate`` = cached / prompt tokens of the requests it admitted), a decode
        log (which sets ``cache_hit_rate`` to 0) or going idle. Token usage excludes the
        evictable prefix cache (see Engine.used_tokens)."""
        now = time.perf_counter()
        self._decode_since_log = 0
        self.num_running_reqs = engine.num_running
        self.num_queue_reqs = engine.num_waiting
        self.num_used_tokens = engine.used_tokens
        self.token_usage = engine.token_usage
        elapsed = now - self._win_start
        if elapsed > 0 and (self._win_tokens or engine.num_running):
            self.gen_throughput = self._win_tokens / elapsed
        elif not engine.num_running:
            self.gen_throughput = 0.0
        if source == "prefill":
            self.cache_hit_rate = self._win_cached / self._win_prompt if self._win_prompt else 0.0
        elif source == "decode":
            self.cache_hit_rate = 0.0
        if self.spec and self._win_verify:
            self.spec_accept_length = self._win_spec_tokens / self._win_verify
            draft = engine.draft_tokens
            if draft > 1:
                # SGLang: accepted tokens (bonus included) / (verify steps x draft tokens)
                self.spec_accept_rate = self.spec_accept_length / draft
        self._win_start = now
        self._win_tokens = 0
        self._win_prompt = self._win_cached = 0
        self._win_verify = self._win_spec_tokens = 0
