"""Fixture data for the load generator's pure parts: fabricated request results."""

from __future__ import annotations

from array import array

import pytest
from specswitch.loadtest.client import RequestResult
from specswitch.loadtest.workloads import RunRecord


def make_result(
    start: float,
    ttft: float,
    gap: float,
    tokens: int,
    *,
    pool: str = "spec",
    error: str | None = None,
    chars: int = 4,
) -> RequestResult:
    """A request whose content chunks arrive every ``gap`` s after ``ttft``, one token each."""
    res = RequestResult(conv_id="c", turn=0, start=start, pool=pool)
    times = [start + ttft + i * gap for i in range(tokens)]
    res.chunk_times = array("d", times)
    res.chunk_chars = array("l", [chars] * tokens)
    res.ttft = ttft
    res.output_tokens = tokens
    res.end = times[-1] + 0.001 if times else start
    res.error = error
    res.status = 200
    return res


@pytest.fixture
def steady_run() -> RunRecord:
    """Concurrency 2: two back-to-back chains of 10-token requests, 0.1 s per token."""
    rec = RunRecord(label="spec", started=0.0, concurrency=2)
    for lane in range(2):
        t = 0.0
        for _ in range(5):
            res = make_result(t, 0.1, 0.1, 10, pool="spec" if lane == 0 else "baseline")
            rec.results.append(res)
            t = res.end
    rec.ended = max(r.end for r in rec.results)
    return rec
