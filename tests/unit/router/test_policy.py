"""The switching decision (pure): hysteresis, dwell, forced mode, KV verdict, load signal."""

from specswitch.router.config import PolicyConfig
from specswitch.router.policy import KvVerdict, combined_load, decide

P = PolicyConfig(high=12, low=6, min_dwell_s=10.0)


def test_spec_to_baseline_at_high_and_back_at_low() -> None:
    assert decide("spec", 11, P, 100.0) == "spec"
    assert decide("spec", 12, P, 100.0) == "baseline"
    assert decide("baseline", 7, P, 100.0) == "baseline"
    assert decide("baseline", 6, P, 100.0) == "spec"


def test_band_between_low_and_high_keeps_the_mode() -> None:
    for load in range(7, 12):
        assert decide("spec", load, P, 100.0) == "spec"
        assert decide("baseline", load, P, 100.0) == "baseline"


def test_dwell_holds_a_switch_back() -> None:
    assert decide("spec", 64, P, 9.9) == "spec"
    assert decide("spec", 64, P, 10.0) == "baseline"
    assert decide("baseline", 0, P, 3.0) == "baseline"


def test_forced_mode_wins_at_once() -> None:
    forced = PolicyConfig(mode="baseline")
    assert decide("spec", 0, forced, 0.0) == "baseline"
    assert decide("baseline", 99, PolicyConfig(mode="spec"), 0.0) == "spec"


def test_kv_verdict_vetoes_spec_and_forces_baseline() -> None:
    assert decide("baseline", 0, P, 100.0, KvVerdict(spec_fits=False)) == "baseline"
    assert decide("spec", 1, P, 0.5, KvVerdict(spec_pressure=True)) == "baseline"


def test_oscillating_load_switches_at_most_once_per_dwell() -> None:
    mode, last, switches = "spec", -1e9, 0
    for step in range(1000):  # 100 s at 0.1 s ticks, load 2 <-> 20 every 0.3 s
        now = step * 0.1
        load = 20 if (step // 3) % 2 else 2
        new = decide(mode, load, P, now - last)
        if new != mode:
            mode, last, switches = new, now, switches + 1
    assert switches <= 100 / P.min_dwell_s + 1


def test_combined_load_signal() -> None:
    local = PolicyConfig(load_signal="local")
    both = PolicyConfig(load_signal="max")
    assert combined_load(3, 10, local, True) == 3
    assert combined_load(3, 10, both, True) == 10
    assert combined_load(3, 10, both, False) == 3
    assert combined_load(12, 10, both, True) == 12
