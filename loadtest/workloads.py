"""Workload drivers: closed loop at a fixed concurrency, and traces over time.

A worker runs conversations: each user turn is one request carrying the whole conversation so
far (with the server's actual earlier replies), so agentic sessions resend a growing prefix.

- :func:`closed_loop`: ``concurrency`` workers share a budget of ``requests``; each sends its
  next request as soon as its previous one ends. The steady-state window (after the first
  round completes, until the last request is issued) is recorded for throughput.
- :func:`trace_closed`: the number of workers follows a concurrency :class:`Schedule`; when the
  target drops, workers finish their request and stop (nothing is cut).
- :func:`trace_poisson`: open loop; conversations start at Poisson arrivals whose rate follows
  the schedule.

Schedules are in simulated seconds; ``time_scale`` (the emulator's speedup, 1 for real servers)
converts: wall seconds = simulated seconds / time_scale.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .client import RequestResult, StreamClient, build_messages
from .datasets import Conversation
from .schedules import Schedule

Sampler = Callable[[], Awaitable[dict[str, Any] | None]]
OnResult = Callable[[RequestResult], None]


@dataclass
class RunRecord:
    """What one workload run produced (wall-clock perf_counter times)."""

    label: str
    started: float
    ended: float = 0.0
    concurrency: int | None = None
    warmup: int | None = None  # closed loop: leading tickets left out (None: one round)
    window: tuple[float, float] | None = None  # steady-state window (closed loop)
    results: list[RequestResult] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)  # timeline (traces)
    schedule: Schedule | None = None
    time_scale: float = 1.0


async def _run_conversation(
    client: StreamClient,
    conv: Conversation,
    results: list[RequestResult],
    may_send: Callable[[], int | bool],
    on_result: OnResult | None,
) -> None:
    replies: list[str] = []
    for turn in range(len(conv.turns)):
        ticket = may_send()
        if ticket is False:
            return
        msgs = build_messages(conv, turn, replies)
        res, text = await client.send(msgs, conv_id=conv.id, turn=turn, max_tokens=conv.max_tokens)
        if ticket is not True:
            res.seq = int(ticket)
        results.append(res)
        if on_result is not None:
            on_result(res)
        if res.error is not None:
            return  # a failed turn ends its session
        replies.append(text)


async def closed_loop(
    client: StreamClient,
    items: Iterator[Conversation],
    concurrency: int,
    requests: int,
    *,
    label: str = "",
    on_result: OnResult | None = None,
    warmup: int | None = None,
) -> RunRecord:
    """``warmup`` leading requests (default: one round, ``concurrency``) are left out of the
    steady-state figures."""
    if concurrency < 1 or requests < 1:
        raise ValueError("concurrency and requests must be >= 1")
    rec = RunRecord(
        label=label,
        started=time.perf_counter(),
        concurrency=concurrency,
        warmup=concurrency if warmup is None else warmup,
    )
    left = requests
    last_issue = rec.started
    completed = 0
    warm_end: float | None = None

    def may_send() -> int | bool:
        nonlocal left, last_issue
        if left <= 0:
            return False
        left -= 1
        if left == 0:
            last_issue = time.perf_counter()
        return requests - left  # the ticket: 1..requests in issue order

    def count(res: RequestResult) -> None:
        nonlocal completed, warm_end
        completed += 1
        if completed == concurrency:
            warm_end = res.end
        if on_result is not None:
            on_result(res)

    async def worker() -> None:
        while left > 0:
            await _run_conversation(client, next(items), rec.results, may_send, count)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    rec.ended = time.perf_counter()
    start = warm_end if warm_end is not None else rec.started
    if last_issue - start < 0.25 * (rec.ended - rec.started):
        start, last_issue = rec.started, rec.ended  # too short to drop a warm-up round
    rec.window = (start, last_issue)
    return rec


async def _sample_loop(
    rec: RunRecord,
    sampler: Sampler | None,
    interval: float,
    extra: Callable[[], dict[str, Any]],
    stop: asyncio.Event,
) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        sample: dict[str, Any] = {"t": t, **extra()}
        if sampler is not None:
            try:
                state = await sampler()
            except Exception as exc:  # a broken admin endpoint must not end the run
                state = {"sample_error": type(exc).__name__}
            if state:
                sample.update(state)
        rec.samples.append(sample)
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, interval - (time.perf_counter() - t)))
        except TimeoutError:
            pass


async def trace_closed(
    client: StreamClient,
    items: Iterator[Conversation],
    schedule: Schedule,
    *,
    time_scale: float = 1.0,
    label: str = "",
    sampler: Sampler | None = None,
    sample_interval: float = 0.5,
    on_result: OnResult | None = None,
    tick: float = 0.05,
) -> RunRecord:
    """Closed loop whose worker count follows ``schedule`` (values rounded, at least 0)."""
    rec = RunRecord(
        label=label, started=time.perf_counter(), schedule=schedule, time_scale=time_scale
    )
    t0 = rec.started
    wall_duration = schedule.duration / time_scale
    active = 0
    inflight = 0
    ended = False
    tasks: set[asyncio.Task[None]] = set()

    def target() -> int:
        return max(0, round(schedule.value((time.perf_counter() - t0) * time_scale)))

    def may_send() -> bool:
        nonlocal inflight
        if ended or active > target():
            return False
        inflight += 1
        return True

    def done(res: RequestResult) -> None:
        nonlocal inflight
        inflight -= 1
        if on_result is not None:
            on_result(res)

    async def worker() -> None:
        nonlocal active
        try:
            while not ended and active <= target():
                await _run_conversation(client, next(items), rec.results, may_send, done)
        finally:
            active -= 1

    stop = asyncio.Event()
    sampling = asyncio.create_task(
        _sample_loop(
            rec,
            sampler,
            sample_interval,
            lambda: {"target": target() if not ended else 0, "gen_inflight": inflight},
            stop,
        )
    )
    try:
        while time.perf_counter() - t0 < wall_duration:
            while active < target():
                active += 1
                task = asyncio.create_task(worker())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.sleep(tick)
        ended = True
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        ended = True
        for task in tasks:
            task.cancel()
        stop.set()
        await sampling
    rec.ended = time.perf_counter()
    return rec


async def trace_poisson(
    client: StreamClient,
    items: Iterator[Conversation],
    schedule: Schedule,
    *,
    time_scale: float = 1.0,
    seed: int = 0,
    label: str = "",
    sampler: Sampler | None = None,
    sample_interval: float = 0.5,
    on_result: OnResult | None = None,
    max_inflight: int = 4096,
) -> RunRecord:
    """Open loop: conversations arrive as a Poisson process, rate (per simulated second)
    following ``schedule``. Arrivals beyond ``max_inflight`` outstanding are dropped and
    counted as errors (the generator protects itself, it never queues silently)."""
    rec = RunRecord(
        label=label, started=time.perf_counter(), schedule=schedule, time_scale=time_scale
    )
    t0 = rec.started
    rng = random.Random(seed)
    inflight = 0
    tasks: set[asyncio.Task[None]] = set()

    def done(res: RequestResult) -> None:
        if on_result is not None:
            on_result(res)

    async def session(conv: Conversation) -> None:
        nonlocal inflight
        inflight += 1
        try:
            await _run_conversation(client, conv, rec.results, lambda: True, done)
        finally:
            inflight -= 1

    stop = asyncio.Event()
    sampling = asyncio.create_task(
        _sample_loop(
            rec,
            sampler,
            sample_interval,
            lambda: {
                "target": schedule.value((time.perf_counter() - t0) * time_scale),
                "gen_inflight": inflight,
            },
            stop,
        )
    )
    try:
        sim_now = 0.0
        while True:
            rate = schedule.value(sim_now)
            # piecewise: draw the next gap at the current rate; a zero rate waits 1 s and re-reads
            gap = rng.expovariate(rate) if rate > 0 else 1.0
            sim_now += gap
            if sim_now >= schedule.duration:
                break
            delay = t0 + sim_now / time_scale - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if rate <= 0:
                continue
            if inflight >= max_inflight:
                res = RequestResult(conv_id="dropped", turn=0, start=time.perf_counter())
                res.end, res.error = res.start, "generator limit: too many in flight"
                rec.results.append(res)
                continue
            task = asyncio.create_task(session(next(items)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        stop.set()
        await sampling
    rec.ended = time.perf_counter()
    return rec
