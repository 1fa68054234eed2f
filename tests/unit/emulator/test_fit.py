"""Fitting a profile to measured (concurrency, tok/s) points per pool."""

from __future__ import annotations

import pytest
from specswitch.loadtest.emulator import ProfileError, load_profile
from specswitch.loadtest.emulator.fit import fit_profile, write_profile


def write_csv(path, rows) -> None:
    path.write_text(
        "pool,concurrency,output_tok_s,extra\n" + "".join(f"{p},{c},{t},x\n" for p, c, t in rows)
    )


def test_fit_recovers_the_step_model(tmp_path) -> None:
    base = load_profile("paper-h100-llama31-8b")
    t0, t1 = 0.010, 0.0005  # seconds
    rows = [("baseline", c, c / (t0 + t1 * c)) for c in (1, 4, 16, 64)]
    rows += [("spec", c, c * 3.0 / (0.02 + 0.002 * c)) for c in (1, 8, 32)]
    csv_path = tmp_path / "mine.csv"
    write_csv(csv_path, rows)
    prof, results = fit_profile(base, csv_path)
    assert prof.baseline.step_t0_ms == pytest.approx(10.0, rel=1e-6)
    assert prof.baseline.step_t1_ms == pytest.approx(0.5, rel=1e-6)
    assert prof.spec.step_t0_ms == pytest.approx(20.0, rel=1e-6)
    assert all(r.max_error < 1e-6 for r in results)
    assert prof.name == "fitted-mine" and any("mine.csv" in s for s in prof.sources)
    out = tmp_path / "fitted.toml"
    write_profile(prof, out, header="test")
    again = load_profile(str(out))
    assert again.baseline.step_t1_ms == pytest.approx(prof.baseline.step_t1_ms)
    assert again.spec.speculative_algorithm == "EAGLE3"


def test_fit_of_one_pool_keeps_the_other(tmp_path) -> None:
    base = load_profile("seed-glm5-rtxpro6000")
    csv_path = tmp_path / "b.csv"
    write_csv(csv_path, [("baseline", 1, 50.0), ("baseline", 32, 900.0)])
    prof, _ = fit_profile(base, csv_path)
    assert prof.spec == base.spec and prof.baseline != base.baseline


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("pool,concurrency\nspec,1\n", "missing CSV columns"),
        ("pool,concurrency,output_tok_s\nfast,1,3\n", "pool must be"),
        ("pool,concurrency,output_tok_s\nspec,one,3\n", "must be numbers"),
        ("pool,concurrency,output_tok_s\nspec,1,3\n", "two or more"),
        ("pool,concurrency,output_tok_s\n", "no data rows"),
    ],
)
def test_bad_csv_is_refused_with_the_reason(tmp_path, text, match) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ProfileError, match=match):
        fit_profile(load_profile("seed-glm5-rtxpro6000"), path)


def test_a_fitted_pool_drops_its_step_table_the_other_keeps_it(tmp_path) -> None:
    base = load_profile("paper-h100-llama31-8b")
    assert base.spec.step_ms_table
    csv_path = tmp_path / "b.csv"
    write_csv(csv_path, [("baseline", 1, 150.0), ("baseline", 64, 5000.0)])
    prof, _ = fit_profile(base, csv_path)
    assert prof.spec == base.spec and prof.baseline.step_ms_table == ()
    out = tmp_path / "fitted.toml"
    write_profile(prof, out)
    again = load_profile(str(out))
    assert again.spec.step_ms_table == base.spec.step_ms_table
    assert again.spec.step_seconds(40) == base.spec.step_seconds(40)
    csv_path.write_text("pool,concurrency,output_tok_s\nspec,1,300\nspec,16,2000\n")
    refit, _ = fit_profile(base, csv_path)
    assert refit.spec.step_ms_table == ()
    assert refit.spec.step_seconds(16) == pytest.approx(16 * 3.0 / 2000, rel=1e-6)
