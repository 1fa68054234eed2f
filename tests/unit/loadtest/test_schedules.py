from __future__ import annotations

import pytest
from specswitch.loadtest import schedules as sch

from specswitch.errors import UserError


def test_linear_and_log_ramps() -> None:
    lin = sch.ramp(1, 129, 100)
    assert lin.value(0) == 1 and lin.value(50) == 129 and lin.value(100) == 1
    assert lin.value(25) == pytest.approx(65)
    log = sch.ramp(1, 128, 140, "log")
    assert log.value(10) == pytest.approx(2)  # one doubling per 10 s
    assert log.value(70) == pytest.approx(128)
    assert log.value(130) == pytest.approx(2)
    assert log.peak == 128 and log.duration == 140


def test_step_and_bursts_hold_values() -> None:
    st = sch.step(2, 50, 90)
    assert [st.value(t) for t in (0, 29.9, 30, 59.9, 60, 90)] == [2, 2, 50, 50, 2, 2]
    b = sch.bursts(1, 40, 100, period=30, width=5)
    assert b.value(10) == 1 and b.value(26) == 40 and b.value(31) == 1 and b.value(56) == 40


def test_build_from_cli_values_and_errors() -> None:
    custom = sch.build("custom", base=1, peak=1, duration=1, points="0:1,60:128,120:1")
    assert custom.value(60) == 128 and custom.duration == 120
    with pytest.raises(UserError, match="TIME:VALUE"):
        sch.build("custom", base=1, peak=1, duration=1, points="0-1")
    with pytest.raises(UserError, match="start at 0"):
        sch.build("custom", base=1, peak=1, duration=1, points="5:1,2:3")
    with pytest.raises(UserError, match="duration"):
        sch.build("ramp", base=1, peak=8, duration=0)
    with pytest.raises(UserError, match="burst"):
        sch.build("bursts", base=1, peak=8, duration=60, burst_period=5, burst_width=10)
    assert "log" in sch.build("ramp", base=1, peak=8, duration=60, interp="log").describe()
