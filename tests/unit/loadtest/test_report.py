from __future__ import annotations

import csv
import json
from pathlib import Path

from specswitch.loadtest.live import state_sample
from specswitch.loadtest.report import (
    SWEEP_COLUMNS,
    SWEEP_TABLE,
    sweep_row,
    table,
    write_csv,
    write_json,
)
from specswitch.loadtest.stats import summarize
from specswitch.loadtest.workloads import RunRecord


def test_sweep_csv_has_the_fitter_columns(tmp_path: Path, steady_run: RunRecord) -> None:
    rows = [sweep_row("baseline", summarize(steady_run))]
    path = write_csv(tmp_path / "out" / "sweep.csv", rows, SWEEP_COLUMNS)
    got = list(csv.DictReader(path.open()))
    assert list(got[0])[:3] == ["pool", "concurrency", "output_tok_s"]
    assert got[0]["pool"] == "baseline" and got[0]["concurrency"] == "2"
    assert float(got[0]["output_tok_s"]) > 0
    assert got[0]["served_spec"] == "5"
    assert not list(tmp_path.glob("out/.*tmp"))  # no temp file left behind


def test_json_replaces_non_finite_numbers(tmp_path: Path) -> None:
    path = write_json(tmp_path / "r.json", {"a": float("inf"), "b": [1.5, float("nan")]})
    assert json.loads(path.read_text()) == {"a": None, "b": [1.5, None]}


def test_terminal_table(steady_run: RunRecord) -> None:
    text = table([sweep_row("spec", summarize(steady_run))], SWEEP_TABLE)
    header, rule, row = text.splitlines()
    assert "tok/s" in header and set(rule) <= {"-", " "}
    assert row.split()[0] == "spec" and row.split()[1] == "2"


def test_state_sample_flattens_admin_state() -> None:
    state = {
        "policy": {"mode": "auto"},
        "groups": [
            {
                "name": "g0",
                "mode": "baseline",
                "load": 20,
                "switches": {"spec": 1, "baseline": 2},
                "pools": {"spec": {"inflight": 3}, "baseline": {"inflight": 17}},
            },
            {
                "name": "g1",
                "mode": "baseline",
                "load": 5,
                "switches": {"spec": 0, "baseline": 0},
                "pools": {"spec": {"inflight": 0}, "baseline": {"inflight": 5}},
            },
        ],
    }
    s = state_sample(state)
    assert s == {
        "load": 25,
        "inflight_spec": 3,
        "inflight_baseline": 22,
        "switches": 3,
        "mode": "baseline",
        "policy_mode": "auto",
    }
    state["groups"][1]["mode"] = "spec"
    assert state_sample(state)["mode"] == "mixed"
