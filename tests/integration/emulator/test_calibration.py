"""Calibration: the profiles reproduce their source figures (fast version of the benchmark).

Two checks, so a noisy machine cannot fail the test on timing alone:
- the profile's model meets every source figure within 15% (pure arithmetic), and
- the emulator, driven closed-loop over HTTP, runs at its model's throughput (within 15%),
  measured against the shared GPU's own simulated clock, which pauses when the host stalls.
The full sweep with the measured-vs-source table is loadtest/bench/emulator_calibration.py.
"""

from __future__ import annotations

import pytest
from specswitch.loadtest.emulator import load_profile
from specswitch.loadtest.emulator.calibrate import (
    PAPER_BATCH1,
    PAPER_SPEEDUP,
    SEED_ONE_STREAM,
    SEED_SATURATION,
    sweep,
)


def test_paper_profile_model_meets_the_paper_table() -> None:
    prof = load_profile("paper-h100-llama31-8b")
    for c, speedup in PAPER_SPEEDUP.items():  # every batch size of the table, 1..64
        ratio = prof.spec.throughput(c) / prof.baseline.throughput(c)
        assert ratio == pytest.approx(speedup, rel=0.01), c
    for pool, figure in PAPER_BATCH1.items():
        assert prof.pool(pool).throughput(1) == pytest.approx(figure, rel=0.01)


def test_seed_profile_model_meets_the_seed_figures() -> None:
    prof = load_profile("seed-glm5-rtxpro6000")
    for pool, figure in SEED_ONE_STREAM.items():
        assert prof.pool(pool).throughput(1) == pytest.approx(figure, rel=0.02)
    for pool, (c, figure) in SEED_SATURATION.items():
        assert prof.pool(pool).throughput(c) == pytest.approx(figure, rel=0.02)
    assert prof.baseline.throughput(250) > 2 * prof.spec.throughput(250)
    assert prof.spec.max_running_requests == 48


@pytest.mark.parametrize(
    ("profile", "speedup", "window"),
    [("seed-glm5-rtxpro6000", 50.0, 12.0), ("paper-h100-llama31-8b", 5.0, 1.2)],
)
async def test_emulator_runs_at_its_model_throughput(profile, speedup, window) -> None:
    prof = load_profile(profile)
    points = await sweep(
        prof, concurrencies=(1, 8, 64), speedup=speedup, window_s=window, clock="gpu"
    )
    for p in points:
        assert p.output_tok_s == pytest.approx(p.model_tok_s, rel=0.15), p
    by = {(p.pool, p.concurrency): p.output_tok_s for p in points}
    # orderings the sources imply: spec wins at one stream, the gap closes with load
    assert by[("spec", 1)] > 1.5 * by[("baseline", 1)]
    assert by[("spec", 64)] / by[("baseline", 64)] < by[("spec", 1)] / by[("baseline", 1)]
    if profile == "paper-h100-llama31-8b":  # measured speedups (own clock) meet the paper
        for c in (1, 8, 64):
            ratio = by[("spec", c)] / by[("baseline", c)]
            assert ratio == pytest.approx(PAPER_SPEEDUP[c], rel=0.10), (c, ratio)
