"""Per-server scheduler: waiting queue, running batch, KV pool, prefix cache, steps.

The shared GPU (gpu.py) asks an engine to ``plan_step`` (admit what fits, then pick a
chunked-prefill step or a decode step and return its simulated duration) and, when that
duration has elapsed, to ``apply_step`` (hand out the tokens the step produced).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .prefix_cache import PrefixCache
from .profile import PoolProfile
from .request import DECODE, FINISHED, PREFILL, QUEUED, Request
from .stats import EngineStats
from .textmodel import fold, next_token
from .tokenizer import VOCAB

log = logging.getLogger("specswitch.emulator")

# SGLang clips max_new_tokens to this when estimating the KV a request will need.
CLIP_MAX_NEW_TOKENS_ESTIMATION = 4096
# SGLang's new-token ratio: the share of a running request's remaining (clipped) output that
# admission expects it to still need. Starts at 0.7, decays per decode step to 0.7 x 0.14,
# and goes back to 0.7 when the pool runs out and requests have to be retracted.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600


@dataclass(slots=True)
class Step:
    kind: str  # "prefill" | "decode"
    seconds: float  # simulated duration
    chunks: list[tuple[Request, int]] | None = None  # prefill: (request, tokens this step)
    batch: list[Request] | None = None  # decode: the batch at plan time


def accept_probability(mean_len: float, draft_tokens: int) -> float:
    """Per-draft acceptance p so that E[1 + accepted chain] = mean_len, chain <= draft-1."""
    if mean_len <= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        mean = sum(mid**i for i in range(draft_tokens))
        lo, hi = (mid, hi) if mean < mean_len else (lo, mid)
    return (lo + hi) / 2


class Engine:
    """The scheduler of one emulated SGLang server (pool ``name`` of a group)."""

    def __init__(
        self,
        name: str,
        pool: PoolProfile,
        *,
        context_length: int,
        seed: int,
        wake: Callable[[], None],
    ) -> None:
        self.name = name
        self.pool = pool
        self.context_length = context_length
        self.capacity = pool.kv_tokens
        self.max_running = pool.max_running_requests
        # SGLang: max_req_input_len = min(context_len - 1, max_total_num_tokens - 1)
        self.max_req_input_len = min(context_length - 1, pool.kv_tokens - 1)
        self.draft_tokens = (pool.speculative_num_draft_tokens or 0) if pool.is_spec else 0
        self._accept_p = accept_probability(pool.accept_length, self.draft_tokens or 1)
        self._rng = random.Random(f"{seed}:{name}")
        self._wake = wake
        self.cache = PrefixCache()
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.running: list[Request] = []
        self.by_rid: dict[str, Request] = {}
        self.own_tokens = 0  # tokens held by live requests outside the shared cache
        self.reserved = 0  # remaining (clipped) output tokens of admitted requests
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.num_retracted = 0
        self.stats = EngineStats(spec=pool.is_spec)
        self.enabled = True
        self._changed = asyncio.Event()

    async def wait_until(self, predicate: Callable[[Engine], bool]) -> None:
        """Wait until ``predicate(self)`` holds, re-checked after every state change."""
        while not predicate(self):
            event = self._changed
            await event.wait()

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def reset(self) -> None:
        """Forget everything (cache, counters): a restarted server starts cold."""
        self.abort_all()
        self.cache = PrefixCache()
        self.stats = EngineStats(spec=self.pool.is_spec)
        self.own_tokens = 0
        self.reserved = 0
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.num_retracted = 0

    # ---- state seen by the HTTP layer -------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def pool_tokens(self) -> int:
        """KV slots occupied: live requests' own tokens plus the whole prefix cache
        (evictable blocks included). What admission and retraction plan against."""
        return self.own_tokens + self.cache.tokens

    @property
    def evictable_tokens(self) -> int:
        """Cached tokens no running request locks (freed on demand)."""
        return self.cache.evictable_tokens

    @property
    def used_tokens(self) -> int:
        """SGLang's ``num_used``: max_total_num_tokens - (available + evictable), i.e. the
        tokens of running requests and the cached prefixes they lock. A warm but idle
        server reports 0."""
        return self.pool_tokens - self.cache.evictable_tokens

    @property
    def token_usage(self) -> float:
        return self.used_tokens / self.capacity

    @property
    def waiting_tokens(self) -> int:
        """Tokens (prompt + output so far) of the queued requests: /get_load adds them."""
        return sum(len(r.input_ids) + len(r.out_ids) for r in self.waiting)

    def has_work(self) -> bool:
        return bool(self.running or self.prefilling or self.waiting)

    # ---- requests ----------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        if req.rid in self.by_rid:
            raise ValueError(f"Duplicate request ID {req.rid!r}")
        self.by_rid[req.rid] = req
        self.waiting.append(req)
        self._wake()
        self._notify()

    def abort(self, rid: str) -> bool:
        req = self.by_rid.get(rid)
        if req is None or req.finished:
            return False
        if req.status == QUEUED:
            self.waiting.remove(req)
            self._finish(req, {"type": "abort", "message": "Abort before prefill"})
        else:
            self._finish(req, {"type": "abort", "message": "Aborted"})
        return True

    def abort_all(self) -> int:
        rids = [r.rid for r in (*self.waiting, *self.prefilling, *self.running)]
        return sum(self.abort(rid) for rid in rids)

    def flush_cache(self) -> bool:
        if self.has_work():
            return False
        self.cache.flush()
        return True

    # ---- scheduling --------------------------------------------------------------------
    def _admit(self) -> None:
        cap = self.capacity
        ratio = self.new_token_ratio
        while self.waiting and self.num_running < self.max_running:
            req = self.waiting[0]
            ids = req.input_ids + req.out_ids if req.out_ids else req.input_ids
            locked = self.cache.match_and_lock(ids)
            cached = len(locked) * self.cache.block_size
            uncached = len(ids) - cached
            reserve = min(
                req.params.max_new_tokens - len(req.out_ids), CLIP_MAX_NEW_TOKENS_ESTIMATION
            )
            reserve = max(0, min(reserve, cap - len(ids)))
            short = self.pool_tokens + (self.reserved + reserve) * ratio + uncached - cap
            if short > 0:
                short -= self.cache.evict(int(short) + 1)
            if short > 0 and self.num_running > 0:
                self.cache.release(locked, [])  # unlock, wait for room
                return
            self.waiting.popleft()
            req.locked = locked
            req.prefill_left = uncached
            req.admitted_len = len(ids)
            req.held = uncached
            req.reserve = reserve
            req.status = PREFILL
            self.own_tokens += uncached
            self.reserved += reserve
            self.prefilling.append(req)
            if not req.out_ids:  # first admission (not a retracted request coming back)
                req.cached_tokens = cached
                self.stats.on_admit(req)

    def _make_room_for_decode(self) -> None:
        """Retract running requests (fewest output tokens first) if the next decode step
        would overflow the KV pool; they go back to the head of the queue (SGLang's
        retract_decode) and the new-token ratio is reset."""
        per_req = self.draft_tokens or 1
        need = len(self.running) * per_req
        free = self.capacity - self.pool_tokens
        if need > free:
            free += self.cache.evict(need - free)
        while need > free and len(self.running) > 1:
            victim = min(self.running, key=lambda r: (len(r.out_ids), -len(r.input_ids)))
            self.running.remove(victim)
            freed = self._release(victim)
            victim.status = QUEUED
            self.waiting.appendleft(victim)
            self.num_retracted += 1
            self.new_token_ratio = INIT_NEW_TOKEN_RATIO
            need -= per_req
            free += freed
            log.info("event=emulator_retract server=%s rid=%s", self.name, victim.rid)
            if need > free:
                free += self.cache.evict(need - free)

    def plan_step(self) -> Step | None:
        self._admit()
        if self.prefilling:
            budget = self.pool.chunked_prefill_size
            chunks: list[tuple[Request, int]] = []
            total = 0
            for req in self.prefilling:
                take = min(req.prefill_left, budget - total)
                if take <= 0 and chunks:
                    break
                chunks.append((req, take))
                total += take
            seconds = self.pool.step_t0_ms / 1000.0 + total / self.pool.prefill_tokens_per_s
            return Step("prefill", seconds, chunks=chunks)
        if self.running:
            self._make_room_for_decode()
            self.new_token_ratio = max(
                MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY
            )
            batch = list(self.running)
            return Step("decode", self.pool.step_seconds(len(batch)), batch=batch)
        return None

    def apply_step(self, step: Step) -> None:
        now = time.perf_counter()
        if step.kind == "prefill":
            assert step.chunks is not None
            done: list[Request] = []
            for req, take in step.chunks:
                if req.status != PREFILL:
                    continue
                req.prefill_left -= take
                if req.prefill_left <= 0:
                    done.append(req)
            if done:
                done_set = set(done)
                self.prefilling = [r for r in self.prefilling if r not in done_set]
                for req in done:
                    req.status = DECODE
                    self.running.append(req)
                    first = not req.out_ids
                    self._emit(req, 1, now)
                    if first:
                        req.first_token_wall = now
                        self.stats.on_first_token(req, now)
            self.stats.on_prefill_step(self, step.seconds)
        else:
            assert step.batch is not None
            spec = self.draft_tokens
            p = self._accept_p
            rand = self._rng.random
            for req in step.batch:
                if req.status != DECODE:
                    continue
                n = 1
                if spec:
                    while n < spec and rand() < p:
                        n += 1
                    req.spec_verify_ct += 1
                emitted = self._emit(req, n, now)
                if spec and emitted > 1:
                    req.accepted_tokens += emitted - 1
            self.stats.on_decode_step(self, step.seconds)
        if not self.has_work():
            self.stats.refresh_gauges(self, "idle")
        self._notify()

    def _release(self, req: Request) -> int:
        """Give back the KV ``req`` holds; its computed tokens go to the prefix cache.
        Returns the tokens freed from the pool (held minus newly cached)."""
        ids = req.input_ids + req.out_ids if req.out_ids else req.input_ids
        if req.prefill_left > 0:  # stopped mid-prefill: only the computed part is cached
            ids = ids[: req.admitted_len - req.prefill_left]
        self.own_tokens -= req.held
        self.reserved -= req.reserve
        held, req.held, req.reserve = req.held, 0, 0
        added = self.cache.release(req.locked, ids)
        req.locked = []
        return held - added

    # ---- token output ------------------------------------------------------------------
    def _emit(self, req: Request, n: int, now: float) -> int:
        """Append up to ``n`` tokens to ``req``; finish it on stop/length. Returns tokens added."""
        params = req.params
        out = req.out_ids
        state = req.state
        salt = req.salt
        limit = params.max_new_tokens
        added = 0
        reason = None
        for _ in range(n):
            if len(out) >= limit:
                break
            tok = next_token(state, salt)
            state = fold(state, tok)
            out.append(tok)
            added += 1
            if tok in params.stop_token_ids:
                reason = {"type": "stop", "matched": tok}
                break
            if req.stop_tail:
                tail = "".join([VOCAB[t] for t in out[-req.stop_tail :]])
                hit = next((s for s in params.stop if s in tail), None)
                if hit is not None:
                    reason = {"type": "stop", "matched": hit}
                    break
        req.state = state
        if added:
            self.own_tokens += added
            req.held += added
            used = min(added, req.reserve)
            req.reserve -= used
            self.reserved -= used
            self.stats.on_tokens(req, added, now)
            req.last_token_wall = now
        if reason is None and len(out) >= limit:
            reason = {"type": "length", "length": limit}
        if reason is not None:
            self._finish(req, reason)
        else:
            req.event.set()
        return added

    def _finish(self, req: Request, reason: dict) -> None:
        status = req.status
        req.finish_reason = reason
        req.status = FINISHED
        if status == PREFILL:
            self.prefilling.remove(req)
        elif status == DECODE:
            self.running.remove(req)
        if status in (PREFILL, DECODE):
            self._release(req)
        self.by_rid.pop(req.rid, None)
        self.stats.on_finish(req)
        req.event.set()
        self._notify()
