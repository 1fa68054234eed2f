"""The switching decision: pure functions of (current mode, load, policy, time).

Hysteresis: a group in spec goes to baseline when load >= high; a group in baseline returns
to spec when load <= low (low < high); never sooner than min_dwell_s after the previous
switch. A forced mode (policy.mode spec|baseline) wins at once, dwell or not; so does
KV pressure on the spec pool (safety before flapping).

The KV layer plugs in through `KvVerdict`: it can veto a return to spec (the in-flight work
would not fit the spec pool's KV) or ask for baseline early (spec pool nearly full or queueing).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import PolicyConfig


@dataclass(frozen=True, slots=True)
class KvVerdict:
    """What the KV guard says about a group right now (default: no opinion)."""

    spec_fits: bool = True  # False: do not switch to spec (the work would overflow its KV)
    spec_pressure: bool = False  # True: go to baseline now, whatever the request count
    reason: str = ""


NO_VERDICT = KvVerdict()


def decide(
    current: str,
    load: float,
    policy: PolicyConfig,
    since_switch_s: float,
    verdict: KvVerdict = NO_VERDICT,
) -> str:
    """The mode the group should be in now ('spec' or 'baseline')."""
    if policy.mode != "auto":
        return policy.mode
    if current == "spec" and verdict.spec_pressure:
        return "baseline"  # KV safety wins over the dwell
    if since_switch_s < policy.min_dwell_s:
        return current
    if current == "spec":
        if load >= policy.high:
            return "baseline"
        return "spec"
    if load <= policy.low and verdict.spec_fits and not verdict.spec_pressure:
        return "spec"
    return "baseline"


def combined_load(
    local: int, reported: int | None, policy: PolicyConfig, reported_fresh: bool
) -> int:
    """The load signal: router-local in-flight, or (load_signal=max) the larger of it and
    the servers' own running+waiting counts when those are fresh (several router replicas)."""
    if policy.load_signal == "max" and reported is not None and reported_fresh:
        return max(local, reported)
    return local
