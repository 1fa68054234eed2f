"""Load shapes over time: a value (concurrency or arrival rate) as a function of time.

A :class:`Schedule` is a list of ``(t, value)`` points joined linearly, geometrically (``log``:
equal time per doubling, how a sweep over 1, 2, 4, ... spends its time) or held (``step``).
Times are in simulated seconds (wall seconds when the target runs in real time).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from specswitch.errors import UserError

SHAPES = ("ramp", "step", "bursts", "constant", "custom")
INTERPS = ("linear", "log", "step")


@dataclass(frozen=True)
class Schedule:
    points: tuple[tuple[float, float], ...]
    interp: str = "linear"

    def __post_init__(self) -> None:
        if len(self.points) < 2:
            raise ValueError("a schedule needs at least two points")
        if self.interp not in INTERPS:
            raise ValueError(f"interp must be one of {INTERPS}")
        times = [t for t, _ in self.points]
        if times[0] != 0 or any(b < a for a, b in itertools.pairwise(times)):
            raise ValueError("schedule times must start at 0 and never decrease")
        if any(v < 0 for _, v in self.points):
            raise ValueError("schedule values must be >= 0")
        if self.interp == "log" and any(v <= 0 for _, v in self.points):
            raise ValueError("a log schedule needs values > 0")

    @property
    def duration(self) -> float:
        return self.points[-1][0]

    @property
    def peak(self) -> float:
        return max(v for _, v in self.points)

    def value(self, t: float) -> float:
        pts = self.points
        if t <= 0:
            return pts[0][1]
        if t >= pts[-1][0]:
            return pts[-1][1]
        for (t0, v0), (t1, v1) in itertools.pairwise(pts):
            if t0 <= t < t1:
                if self.interp == "step" or t1 == t0:
                    return v0
                f = (t - t0) / (t1 - t0)
                if self.interp == "log":
                    return math.exp(math.log(v0) + f * (math.log(v1) - math.log(v0)))
                return v0 + f * (v1 - v0)
        return pts[-1][1]

    def describe(self) -> str:
        pts = ", ".join(f"{t:g}s:{v:g}" for t, v in self.points)
        return f"{self.interp} [{pts}]"


def ramp(base: float, peak: float, duration: float, interp: str = "linear") -> Schedule:
    """base -> peak at half time -> base."""
    return Schedule(((0.0, base), (duration / 2, peak), (duration, base)), interp)


def step(base: float, peak: float, duration: float) -> Schedule:
    """base for the first third, peak for the middle third, base again."""
    third = duration / 3
    return Schedule(((0.0, base), (third, peak), (2 * third, base), (duration, base)), "step")


def bursts(base: float, peak: float, duration: float, period: float, width: float) -> Schedule:
    """base, with a burst to peak lasting ``width`` at the start of every ``period``."""
    if not 0 < width < period:
        raise UserError("--burst-width must be > 0 and shorter than --burst-period")
    pts: list[tuple[float, float]] = [(0.0, base)]
    t = period - width  # the first burst comes after one quiet stretch
    while t < duration:
        pts += [(t, peak), (min(t + width, duration), base)]
        t += period
    pts.append((duration, base))
    return Schedule(tuple(pts), "step")


def parse_points(text: str) -> tuple[tuple[float, float], ...]:
    """``"0:1,60:128,120:1"`` -> ((0, 1), (60, 128), (120, 1))."""
    pts = []
    for part in text.split(","):
        try:
            t, v = part.split(":")
            pts.append((float(t), float(v)))
        except ValueError:
            raise UserError(
                f"bad schedule point {part!r}; write TIME:VALUE pairs like 0:1,60:128,120:1"
            ) from None
    return tuple(pts)


def build(
    shape: str,
    *,
    base: float,
    peak: float,
    duration: float,
    interp: str = "linear",
    points: str | None = None,
    burst_period: float = 30.0,
    burst_width: float = 5.0,
) -> Schedule:
    """The schedule for a CLI shape; UserError (one line) for bad values."""
    if duration <= 0:
        raise UserError("--duration must be > 0 seconds")
    if base < 0 or peak <= 0:
        raise UserError("--base must be >= 0 and --peak > 0")
    try:
        if shape == "ramp":
            return ramp(base, peak, duration, interp)
        if shape == "step":
            return step(base, peak, duration)
        if shape == "bursts":
            return bursts(base, peak, duration, burst_period, burst_width)
        if shape == "constant":
            return Schedule(((0.0, peak), (duration, peak)), "step")
        if shape == "custom":
            if not points:
                raise UserError("--shape custom needs --points TIME:VALUE,...")
            return Schedule(parse_points(points), interp)
    except ValueError as exc:
        raise UserError(f"bad schedule: {exc}") from None
    raise UserError(f"unknown shape {shape!r}; use one of {', '.join(SHAPES)}")
