"""Switch thresholds from two throughput curves: where baseline overtakes spec.

Used by `loadtest compare` (on measured sweeps), `demo` and `serve`'s embedded emulated group
(on the profile's step-time model). Pure functions; imports nothing heavy.
"""

from __future__ import annotations

import math
from typing import Any


def crossover(
    spec: list[dict[str, Any]], baseline: list[dict[str, Any]], key: str = "output_tok_s"
) -> float | None:
    """Concurrency where baseline overtakes spec (log2-interpolated); None if it never does,
    0.0 if baseline leads from the first point."""
    s = {lv["concurrency"]: lv[key] for lv in spec if lv.get(key)}
    b = {lv["concurrency"]: lv[key] for lv in baseline if lv.get(key)}
    cs = sorted(set(s) & set(b))
    prev: tuple[int, float] | None = None
    for c in cs:
        r = math.log(b[c] / s[c])
        if r > 0:
            if prev is None:
                return 0.0
            c0, r0 = prev
            f = -r0 / (r - r0) if r != r0 else 0.5
            return 2 ** (math.log2(c0) + f * (math.log2(c) - math.log2(c0)))
        prev = (c, r)
    return None


def thresholds(cross: float | None, max_c: int) -> tuple[int, int]:
    """(high, low) for a crossover concurrency."""
    if cross is None:
        return max_c * 4, max_c * 2  # spec is never worse: effectively never switch
    if cross <= 1:
        return 2, 1
    high = max(2, math.ceil(cross))
    low = max(1, min(high - 1, math.floor(0.7 * cross)))
    return high, low


def model_curves(profile_name: str, concurrencies: tuple[int, ...]) -> dict[str, list[dict]]:
    """Decode-only throughput of the profile's step-time model per concurrency."""
    from specswitch.loadtest.emulator.profile import load_profile

    prof = load_profile(profile_name)
    return {
        pool: [
            {"concurrency": c, "output_tok_s": prof.pool(pool).throughput(c)} for c in concurrencies
        ]
        for pool in ("spec", "baseline")
    }


MODEL_CONCURRENCIES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def profile_thresholds(profile_name: str, max_c: int = 256) -> tuple[int, int, float | None]:
    """(high, low, crossover) from an emulator profile's model curves up to `max_c`."""
    curves = model_curves(profile_name, tuple(c for c in MODEL_CONCURRENCIES if c <= max_c))
    cross = crossover(curves["spec"], curves["baseline"])
    high, low = thresholds(cross, max_c)
    return high, low, cross
