from __future__ import annotations

from pathlib import Path

import pytest
from specswitch.loadtest.plots import plot_goodput, plot_latency, plot_throughput, plot_timeline
from specswitch.loadtest.stats import summarize, timeline
from specswitch.loadtest.workloads import RunRecord

PNG = b"\x89PNG"


def _levels(scale: float) -> list[dict]:
    return [
        {
            "concurrency": c,
            "output_tok_s": scale * c**0.5,
            "ttft_s_p50": 0.1 * c,
            "ttft_s_p99": 0.2 * c,
            "tpot_s_p50": 0.01 * c,
            "tpot_s_p99": 0.02 * c,
        }
        for c in (1, 2, 4, 8)
    ]


def test_compare_plots_from_fixture_data(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    runs = {"spec": _levels(100), "baseline": _levels(60), "auto": _levels(98)}
    env = [{"concurrency": c, "output_tok_s": 100 * c**0.5} for c in (1, 2, 4, 8)]
    p1 = plot_throughput(runs, tmp_path / "t.png", "title", env)
    p2 = plot_latency(runs, tmp_path / "l.png", "title")
    assert p1.read_bytes()[:4] == PNG and p2.read_bytes()[:4] == PNG


def test_timeline_and_goodput_plots(tmp_path: Path, steady_run: RunRecord) -> None:
    pytest.importorskip("matplotlib")
    steady_run.samples = [
        {
            "t": 0.5,
            "target": 2,
            "mode": "spec",
            "load": 2,
            "inflight_spec": 2,
            "inflight_baseline": 0,
            "switches": 0,
        }
    ]
    run = {"summary": summarize(steady_run), "timeline": timeline(steady_run, 1.0)}
    p = plot_timeline({"spec": run, "auto": run}, tmp_path / "tl.png", "trace")
    g = plot_goodput({"spec": run["summary"], "auto": run["summary"]}, tmp_path / "g.png", "x")
    assert p.read_bytes()[:4] == PNG and g.read_bytes()[:4] == PNG
