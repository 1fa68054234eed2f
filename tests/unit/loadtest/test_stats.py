from __future__ import annotations

import pytest
from specswitch.loadtest.stats import Slo, envelope, percentile, summarize, timeline, tokens_between
from specswitch.loadtest.thresholds import crossover, thresholds
from specswitch.loadtest.workloads import RunRecord

from .conftest import make_result


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile(list(range(101)), 90) == pytest.approx(90)


def test_tokens_between_spreads_usage_over_chunks_by_text() -> None:
    res = make_result(0.0, 1.0, 1.0, 4)  # chunks at 1, 2, 3, 4
    res.output_tokens = 8  # 2 tokens per chunk (equal text)
    assert tokens_between(res, 0.0, 10.0) == pytest.approx(8)
    assert tokens_between(res, 1.5, 3.5) == pytest.approx(4)
    assert tokens_between(res, 5.0, 9.0) == 0


def test_summary_of_a_steady_run(steady_run: RunRecord) -> None:
    s = summarize(steady_run)
    assert s["requests"] == 10 and s["ok"] == 10 and s["failed"] == 0
    # two lanes each deliver ~1 token per 0.1 s
    assert s["output_tok_s"] == pytest.approx(20, rel=0.15)
    assert s["tpot_s_p50"] == pytest.approx(0.1)
    assert s["ttft_s_p50"] == pytest.approx(0.1)
    assert s["pools"] == {"spec": 5, "baseline": 5}


def test_time_scale_converts_to_simulated_time(steady_run: RunRecord) -> None:
    wall = summarize(steady_run)
    sim = summarize(steady_run, time_scale=4.0)  # speedup 4: 1 wall s = 4 simulated s
    assert sim["ttft_s_p50"] == pytest.approx(wall["ttft_s_p50"] * 4)
    assert sim["output_tok_s"] == pytest.approx(wall["output_tok_s"] / 4)


def test_goodput_counts_only_requests_within_the_slo() -> None:
    rec = RunRecord(label="x", started=0.0)
    rec.results = [
        make_result(0.0, 0.5, 0.05, 10),
        make_result(0.0, 3.0, 0.05, 10),
        make_result(0.0, 0.5, 0.5, 10),
        make_result(0.0, 0.5, 0.05, 0, error="boom"),
    ]
    rec.ended = max(r.end for r in rec.results)
    s = summarize(rec, Slo(ttft_s=1.0, tpot_s=0.1))
    assert s["failed"] == 1
    assert s["slo_attainment"] == pytest.approx(0.25)
    assert s["goodput_tok_s"] == pytest.approx(s["output_tok_s"] * 10 / 30)
    assert s["errors"] == {"boom": 1}


def test_slo_validation_and_text() -> None:
    with pytest.raises(ValueError, match="ttft_s"):
        Slo(ttft_s=0)
    assert Slo(2.0, 0.1).describe() == "TTFT <= 2 s and TPOT <= 100 ms"


def test_envelope_picks_the_better_forced_run() -> None:
    spec = [{"concurrency": 1, "output_tok_s": 90.0}, {"concurrency": 64, "output_tok_s": 300.0}]
    base = [{"concurrency": 1, "output_tok_s": 40.0}, {"concurrency": 64, "output_tok_s": 600.0}]
    env = envelope(spec, base)
    assert env[1] == {"concurrency": 1, "output_tok_s": 90.0, "from": "spec"}
    assert env[64]["from"] == "baseline"


def test_crossover_and_thresholds() -> None:
    spec = [{"concurrency": c, "output_tok_s": v} for c, v in ((4, 200.0), (8, 260.0), (16, 300.0))]
    base = [{"concurrency": c, "output_tok_s": v} for c, v in ((4, 130.0), (8, 230.0), (16, 360.0))]
    cross = crossover(spec, base)
    assert cross is not None and 8 < cross < 16
    high, low = thresholds(cross, 16)
    assert low < high and high == pytest.approx(cross, abs=1)
    assert crossover(spec, spec) is None  # never overtakes: no switch
    assert thresholds(None, 128)[0] > 128
    assert crossover(spec[2:], base[2:]) == 0.0  # baseline leads from the first point


def test_timeline_bins_tokens_and_admin_samples(steady_run: RunRecord) -> None:
    steady_run.samples = [
        {
            "t": 0.2,
            "target": 2,
            "mode": "spec",
            "load": 2,
            "inflight_spec": 2,
            "inflight_baseline": 0,
            "switches": 0,
        },
        {
            "t": 2.1,
            "target": 2,
            "mode": "baseline",
            "load": 2,
            "inflight_spec": 0,
            "inflight_baseline": 2,
            "switches": 1,
        },
    ]
    rows = timeline(steady_run, bin_s=2.0)
    assert rows[0]["mode"] == "spec" and rows[1]["mode"] == "baseline"
    total = sum(r["tok_s"] * 2.0 for r in rows)
    assert total == pytest.approx(100)


def test_closed_loop_throughput_uses_the_steady_rounds(steady_run: RunRecord) -> None:
    for i, res in enumerate(sorted(steady_run.results, key=lambda r: r.start)):
        res.seq = i + 1
    # a slow first round (warm-up) must not count
    for res in steady_run.results:
        if res.seq <= 2:
            res.start -= 5.0
    s = summarize(steady_run)
    assert s["throughput_method"].startswith("steady")
    assert s["output_tok_s"] == pytest.approx(2 * 10 / 1.001, rel=1e-3)
    assert s["request_s"] == pytest.approx(2 / 1.001, rel=1e-3)
