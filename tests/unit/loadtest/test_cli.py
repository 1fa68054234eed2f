"""Bad input to `specswitch loadtest` / `demo`: one clear line on stderr, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from specswitch.loadtest.cli import parse_concurrencies, parse_duration
from specswitch.loadtest.stack import free_port

from specswitch.cli import main
from specswitch.errors import UserError


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        code = main(argv)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("specswitch: error:") and "Traceback" not in err
    return err


def test_parse_concurrencies() -> None:
    assert parse_concurrencies("1..128") == (1, 2, 4, 8, 16, 32, 64, 128)
    assert parse_concurrencies("1..12,3") == (1, 2, 3, 4, 8, 12)
    for bad in ("0", "a", "4..2", ""):
        with pytest.raises(UserError):
            parse_concurrencies(bad)


def test_parse_duration() -> None:
    assert parse_duration("250ms", "--x") == pytest.approx(0.25)
    assert parse_duration("2s", "--x") == 2 and parse_duration("0.5", "--x") == 0.5
    with pytest.raises(UserError, match="--slo-tpot"):
        parse_duration("fast", "--slo-tpot")


@pytest.mark.parametrize(
    "argv",
    [
        ["loadtest", "sweep", "--target", "http://127.0.0.1:1", "--max-tokens", "many"],
        ["loadtest", "sweep"],
        ["loadtest", "frobnicate"],
        ["loadtest", "trace", "--target", "http://x", "--shape", "zigzag"],
        ["demo", "--peak", "lots"],
        ["loadtest", "sweep", "--target", "ftp://x"],
        ["loadtest", "sweep", "--target", "http://127.0.0.1:1", "--concurrency", "0"],
        ["loadtest", "sweep", "--target", "http://127.0.0.1:1", "--slo-tpot", "soon"],
        ["loadtest", "sweep", "--target", "http://127.0.0.1:1", "--speedup", "0"],
        ["loadtest", "trace", "--target", "http://127.0.0.1:1", "--shape", "custom"],
        ["loadtest", "compare", "--profile", "no-such-profile"],
        ["loadtest", "compare", "--high", "4"],
        ["loadtest", "compare", "--policy", "spec_queue_max"],
        ["loadtest", "plot", "/nonexistent/report.json"],
    ],
)
def test_bad_flags_give_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    _one_line(capsys, argv)


def test_unreachable_target(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nothing listens there
    err = _one_line(
        capsys, ["loadtest", "sweep", "--target", f"http://127.0.0.1:{port}", "--concurrency", "1"]
    )
    assert "cannot reach target" in err


def test_bad_dataset_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "ok"}\n{oops\n')
    err = _one_line(
        capsys, ["loadtest", "sweep", "--target", "http://127.0.0.1:1", "--dataset", str(bad)]
    )
    assert "prompts.jsonl:2" in err
    err = _one_line(
        capsys,
        [
            "loadtest",
            "trace",
            "--target",
            "http://127.0.0.1:1",
            "--dataset",
            str(tmp_path / "missing.jsonl"),
        ],
    )
    assert "does not exist" in err
