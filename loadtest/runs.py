"""Whole runs: a sweep over concurrencies, or one trace, against one target URL.

These glue the client, the workload drivers, stats and progress display together and return
plain dicts (the report format). They know nothing about how the target was started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .client import ClientConfig, RequestResult, StreamClient
from .datasets import Dataset
from .live import AdminPoller, LiveView, Throughput
from .progress import Progress
from .report import sweep_row
from .schedules import Schedule
from .stats import Slo, summarize, timeline
from .workloads import trace_closed, trace_poisson


@dataclass(frozen=True)
class SweepPlan:
    concurrencies: tuple[int, ...]
    rounds: float = 4.0  # requests per level = max(min_requests, rounds * concurrency)
    min_requests: int = 8
    requests: int | None = None  # fixed count per level (overrides rounds)
    warmup_rounds: float = 1.0  # leading rounds left out of the figures (switch transients)

    def __post_init__(self) -> None:
        if not self.concurrencies or any(c < 1 for c in self.concurrencies):
            raise ValueError("concurrencies must be a non-empty list of integers >= 1")
        if self.warmup_rounds < 0:
            raise ValueError("warmup rounds must be >= 0")
        if self.rounds <= 0 or self.min_requests < 1:
            raise ValueError("rounds must be > 0 and min_requests >= 1")
        if self.requests is not None and self.requests < 1:
            raise ValueError("requests must be >= 1")

    def warmup_for(self, concurrency: int) -> int:
        return round(self.warmup_rounds * concurrency)

    def requests_for(self, concurrency: int) -> int:
        if self.requests is not None:
            return self.requests
        return max(self.min_requests, round(self.rounds * concurrency))


async def sweep(
    client: StreamClient,
    dataset: Dataset,
    plan: SweepPlan,
    *,
    label: str,
    slo: Slo,
    time_scale: float = 1.0,
    show_progress: bool = True,
) -> list[dict[str, Any]]:
    """One closed-loop run per concurrency (ascending as given); a summary per level."""
    from .workloads import closed_loop

    levels = []
    items = dataset.cycle()
    for c in plan.concurrencies:
        n = plan.requests_for(c)
        bar = Progress(n, f"{label} c={c}", enabled=show_progress)

        def tick(res: RequestResult, bar: Progress = bar) -> None:
            bar.advance(res.ok)

        rec = await closed_loop(
            client, items, c, n, label=label, on_result=tick, warmup=plan.warmup_for(c)
        )
        summary = summarize(rec, slo, time_scale)
        bar.close(
            f"{summary['output_tok_s']:.0f} tok/s, TPOT p50 "
            f"{(summary['tpot_s_p50'] or 0) * 1000:.1f} ms, failed {summary['failed']}"
        )
        levels.append(summary)
    return levels


def sweep_rows(label: str, levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [sweep_row(label, lv) for lv in levels]


async def trace(
    client: StreamClient,
    dataset: Dataset,
    schedule: Schedule,
    *,
    label: str,
    slo: Slo,
    time_scale: float = 1.0,
    arrivals: str = "closed",
    admin_url: str | None = None,
    admin_token: str | None = None,
    live: bool = True,
    bin_s: float | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """One trace; returns {"summary", "timeline"} in simulated units."""
    meter = Throughput(window_s=max(2.0, 5.0 / time_scale) if time_scale < 1 else 5.0)
    view = LiveView(time_scale=time_scale) if live else None
    poller = AdminPoller(admin_url, admin_token) if admin_url else None
    t0 = time.perf_counter()

    async def sampler() -> dict[str, Any] | None:
        sample = await poller() if poller is not None else None
        if view is not None:
            elapsed = time.perf_counter() - t0
            view.render(
                elapsed, schedule.duration, sample, meter, schedule.value(elapsed * time_scale)
            )
        return sample

    kwargs: dict[str, Any] = dict(
        time_scale=time_scale,
        label=label,
        sampler=sampler,
        sample_interval=0.5,
        on_result=meter.add,
    )
    if poller is not None:
        await poller.__aenter__()
    try:
        if arrivals == "poisson":
            rec = await trace_poisson(client, dataset.cycle(), schedule, seed=seed, **kwargs)
        else:
            rec = await trace_closed(client, dataset.cycle(), schedule, **kwargs)
    finally:
        if poller is not None:
            await poller.__aexit__(None, None, None)
    summary = summarize(rec, slo, time_scale, window=(rec.started, rec.ended))
    summary["schedule"] = schedule.describe()
    summary["arrivals"] = arrivals
    switches = [s.get("switches") for s in rec.samples if s.get("switches") is not None]
    if switches:
        summary["switches"] = max(switches) - min(switches)
    bin_s = bin_s or max(1.0, schedule.duration / 120)
    return {"summary": summary, "timeline": timeline(rec, bin_s, time_scale)}


async def open_client(config: ClientConfig) -> StreamClient:
    """An opened client that has checked the target answers (UserError otherwise)."""
    client = StreamClient(config)
    await client.open()
    try:
        await client.probe()
    except BaseException:
        await client.close()
        raise
    return client
