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
