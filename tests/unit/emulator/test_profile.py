"""Profiles: built-ins load and state their sources; overrides and bad files fail loudly."""

from __future__ import annotations

import pytest
from specswitch.loadtest.emulator import (
    OVERRIDE_NAMES,
    ProfileError,
    builtin_profile_names,
    load_profile,
)


def test_builtins_load_with_sources() -> None:
    assert {"paper-h100-llama31-8b", "seed-glm5-rtxpro6000"} <= set(builtin_profile_names())
    for name in builtin_profile_names():
        prof = load_profile(name)
        assert prof.sources and prof.description
        assert prof.spec.is_spec and not prof.baseline.is_spec


def test_overrides_replace_single_fields() -> None:
    prof = load_profile("seed-glm5-rtxpro6000").with_overrides(
        {
            "spec_kv_tokens": 1234,
            "baseline_max_running_requests": 9,
            "accept_length": 3.0,
            "prefill_tokens_per_s": 500.0,
        }
    )
    assert prof.spec.kv_tokens == 1234 and prof.baseline.max_running_requests == 9
    assert prof.spec.accept_length == 3.0 and prof.baseline.accept_length == 1.0
    assert prof.spec.prefill_tokens_per_s == prof.baseline.prefill_tokens_per_s == 500.0
    assert set(OVERRIDE_NAMES) >= {"spec_kv_tokens", "accept_length"}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"accept_length": 7}, "accept_length"),
        ({"spec_kv_tokens": 3}, "kv_tokens"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_overrides_name_the_field(overrides, field) -> None:
    with pytest.raises(ProfileError, match=field):
        load_profile("seed-glm5-rtxpro6000").with_overrides(overrides)


def test_bad_profile_file_names_the_problem(tmp_path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('name = "x"\n[spec]\nstep_t0_ms = 1\n[baseline]\n')
    with pytest.raises(ProfileError, match="missing keys"):
        load_profile(str(path))
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(str(tmp_path / "nope.toml"))
    with pytest.raises(ProfileError, match="unknown profile"):
        load_profile("nope")


def test_max_running_requests_defaults_to_sglang_caps(tmp_path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        'name = "mine"\n'
        "[spec]\nstep_t0_ms = 10\nstep_t1_ms = 1\nkv_tokens = 10000\naccept_length = 2.0\n"
        'speculative_algorithm = "EAGLE3"\nspeculative_num_draft_tokens = 4\n'
        "[baseline]\nstep_t0_ms = 10\nstep_t1_ms = 0.5\nkv_tokens = 20000\n"
    )
    prof = load_profile(str(path))
    assert prof.spec.max_running_requests == 48
    assert prof.baseline.max_running_requests == 1024


def _table_profile(tmp_path, table: str) -> str:
    path = tmp_path / "t.toml"
    path.write_text(
        'name = "t"\n'
        "[spec]\nstep_t0_ms = 9\nstep_t1_ms = 0.5\nkv_tokens = 10000\naccept_length = 2.0\n"
        'speculative_algorithm = "EAGLE3"\nspeculative_num_draft_tokens = 4\n'
        f"step_ms_table = {table}\n"
        "[baseline]\nstep_t0_ms = 10\nstep_t1_ms = 0.5\nkv_tokens = 20000\n"
    )
    return str(path)


def test_step_table_interpolates_and_extends_with_t1(tmp_path) -> None:
    spec = load_profile(_table_profile(tmp_path, "[[1, 10.0], [4, 16.0], [8, 20]]")).spec
    ms = [round(spec.step_seconds(b) * 1000, 6) for b in (1, 2, 4, 6, 8, 10)]
    assert ms == [10.0, 12.0, 16.0, 18.0, 20.0, 21.0]  # past the last point: + t1 per request
    assert spec.throughput(4) == pytest.approx(4 * 2.0 / 0.016)


@pytest.mark.parametrize(
    "table",
    ["[[2, 10.0]]", "[[1, 10.0], [1, 12.0]]", "[[1, 10.0], [2, 9.0]]", "[[1, 0]]", "[1, 2]", "3"],
)
def test_bad_step_table_names_the_field(tmp_path, table) -> None:
    with pytest.raises(ProfileError, match="step_ms_table"):
        load_profile(_table_profile(tmp_path, table))


def test_paper_profile_meets_every_figure_of_the_paper_table() -> None:
    from specswitch.loadtest.emulator.calibrate import PAPER_BATCH1, PAPER_SPEEDUP

    prof = load_profile("paper-h100-llama31-8b")
    for batch, speedup in PAPER_SPEEDUP.items():  # all ten batch sizes, 1..64
        ratio = prof.spec.throughput(batch) / prof.baseline.throughput(batch)
        assert ratio == pytest.approx(speedup, rel=0.002), batch
    for pool, figure in PAPER_BATCH1.items():
        assert prof.pool(pool).throughput(1) == pytest.approx(figure, rel=0.001)
