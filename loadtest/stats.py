"""Aggregates: throughput, percentiles, goodput under an SLO, and trace timelines.

All figures come out in *simulated* time: with ``time_scale`` X (the emulator's --speedup),
a wall duration d is d*X simulated seconds, so latencies are multiplied by X and rates divided
by X. For a real server X = 1 and nothing changes.

Throughput counts tokens as they arrive: each request's output tokens (from the usage chunk)
are spread over its content chunks by their text length, so a window holds exactly the tokens
delivered inside it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .client import RequestResult
from .workloads import RunRecord


@dataclass(frozen=True)
class Slo:
    """Per-request limits in simulated seconds; None = no limit."""

    ttft_s: float | None = None
    tpot_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0")

    def met(self, res: RequestResult, time_scale: float = 1.0) -> bool:
        if not res.ok:
            return False
        if self.ttft_s is not None and (res.ttft is None or res.ttft * time_scale > self.ttft_s):
            return False
        if self.tpot_s is not None:
            tpot = res.tpot
            if tpot is not None and tpot * time_scale > self.tpot_s:
                return False
        return True

    def describe(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT <= {self.ttft_s:g} s")
        if self.tpot_s is not None:
            parts.append(f"TPOT <= {self.tpot_s * 1000:g} ms")
        return " and ".join(parts) if parts else "none (every successful request counts)"


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _pcts(prefix: str, values: list[float], scale: float) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for q in (50, 90, 99):
        v = percentile(values, q)
        out[f"{prefix}_p{q}"] = None if v is None else v * scale
    out[f"{prefix}_mean"] = (sum(values) / len(values) * scale) if values else None
    return out


def tokens_between(res: RequestResult, a: float, b: float) -> float:
    """Output tokens of ``res`` delivered in the wall interval [a, b)."""
    times, chars = res.chunk_times, res.chunk_chars
    if not times or res.output_tokens <= 0 or times[-1] < a or times[0] >= b:
        return 0.0
    total = sum(chars)
    if total <= 0:
        inside = sum(1 for t in times if a <= t < b)
        return res.output_tokens * inside / len(times)
    inside_chars = sum(c for t, c in zip(times, chars, strict=True) if a <= t < b)
    return res.output_tokens * inside_chars / total


def summarize(
    rec: RunRecord,
    slo: Slo = Slo(),
    time_scale: float = 1.0,
    window: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """One run's figures (simulated units)."""
    a, b = window or rec.window or (rec.started, rec.ended)
    span = max(b - a, 1e-9)
    results = rec.results
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    in_window = [r for r in ok if a <= r.start <= b] or ok
    tokens = sum(tokens_between(r, a, b) for r in results)
    good = [r for r in ok if slo.met(r, time_scale)]
    good_tokens = sum(tokens_between(r, a, b) for r in good)
    completed_in = sum(1 for r in ok if a <= r.end <= b)
    good_in = sum(1 for r in good if a <= r.end <= b)
    steady = _steady(rec)
    if steady is not None:
        # closed loop: Little's law over the steady rounds (C workers always busy, no think
        # time): rate = C x tokens / busy time. Free of window-edge effects.
        c = rec.concurrency or 1
        busy = sum(r.e2e for r in steady)
        n_tok = sum(r.output_tokens for r in steady if r.ok)
        n_good = sum(r.output_tokens for r in steady if slo.met(r, time_scale))
        tok_s_wall = c * n_tok / busy
        out_tok_s = tok_s_wall / time_scale
        req_s = c * sum(1 for r in steady if r.ok) / busy / time_scale
        good_tok_s = c * n_good / busy / time_scale
        good_req_s = c * sum(1 for r in steady if slo.met(r, time_scale)) / busy / time_scale
        in_window = [r for r in steady if r.ok] or ok
    else:
        out_tok_s = tokens / (span * time_scale)
        req_s = completed_in / (span * time_scale)
        good_tok_s = good_tokens / (span * time_scale)
        good_req_s = good_in / (span * time_scale)
    pools = Counter(r.pool or "unknown" for r in ok)
    errors = Counter((r.error or "")[:120] for r in failed)
    prompt = [r.prompt_tokens for r in ok if r.prompt_tokens]
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    sim_span = span * time_scale
    out: dict[str, Any] = {
        "label": rec.label,
        "concurrency": rec.concurrency,
        "requests": len(results),
        "ok": len(ok),
        "failed": len(failed),
        "window_s": sim_span,
        "duration_s": (rec.ended - rec.started) * time_scale,
        "output_tokens": sum(r.output_tokens for r in ok),
        "output_tok_s": out_tok_s,
        "output_tok_s_window": tokens / sim_span,
        "throughput_method": "steady rounds (Little's law)" if steady else "time window",
        "request_s": req_s,
        "goodput_tok_s": good_tok_s,
        "goodput_req_s": good_req_s,
        "slo_attainment": (len(good) / len(results)) if results else None,
        "mean_prompt_tokens": (sum(prompt) / len(prompt)) if prompt else None,
        "cached_fraction": (sum(cached) / sum(prompt)) if cached and sum(prompt) else None,
        "pools": dict(pools),
        "errors": dict(errors.most_common(5)),
    }
    out.update(_pcts("ttft_s", [r.ttft for r in in_window if r.ttft is not None], time_scale))
    out.update(_pcts("tpot_s", [t for r in in_window if (t := r.tpot) is not None], time_scale))
    itl: list[float] = []
    for r in in_window:
        itl.extend(r.itl())
    out.update(_pcts("itl_s", itl, time_scale))
    out.update(_pcts("e2e_s", [r.e2e for r in in_window], time_scale))
    return out


def _steady(rec: RunRecord) -> list[RequestResult] | None:
    """Closed-loop requests issued after the warm-up and before the last round
    (tickets warmup+1 .. N-C); None when there are too few."""
    c = rec.concurrency
    if not c:
        return None
    n = max((r.seq for r in rec.results), default=-1)
    if n < 0:
        return None
    warm = c if rec.warmup is None else rec.warmup
    steady = [r for r in rec.results if warm < r.seq <= n - c]
    if len(steady) < max(2, c):
        return None
    return steady


def envelope(
    spec: Iterable[dict[str, Any]], baseline: Iterable[dict[str, Any]], key: str = "output_tok_s"
) -> dict[int, dict[str, Any]]:
    """Per concurrency, the better of the two forced runs."""
    by_c = {s["concurrency"]: s for s in spec}
    out: dict[int, dict[str, Any]] = {}
    for b in baseline:
        s = by_c.get(b["concurrency"])
        if s is None:
            continue
        best = s if (s[key] or 0) >= (b[key] or 0) else b
        out[b["concurrency"]] = {
            "concurrency": b["concurrency"],
            key: best[key],
            "from": "spec" if best is s else "baseline",
        }
    return out


def timeline(rec: RunRecord, bin_s: float, time_scale: float = 1.0) -> list[dict[str, Any]]:
    """Per bin of ``bin_s`` simulated seconds: load target, delivered tok/s, and the latest
    admin sample (mode, load, per-pool in-flight, switches)."""
    wall_bin = bin_s / time_scale
    n = max(1, math.ceil((rec.ended - rec.started) / wall_bin))
    rows: list[dict[str, Any]] = []
    for i in range(n):
        a = rec.started + i * wall_bin
        b = a + wall_bin
        toks = sum(tokens_between(r, a, b) for r in rec.results)
        done = sum(1 for r in rec.results if r.ok and a <= r.end < b)
        errs = sum(1 for r in rec.results if not r.ok and a <= r.end < b)
        row: dict[str, Any] = {
            "t_s": (i + 0.5) * bin_s,
            "tok_s": toks / bin_s,
            "completed": done,
            "failed": errs,
        }
        inside = [s for s in rec.samples if a <= s["t"] < b]
        if inside:
            last = inside[-1]
            row["target"] = sum(s.get("target", 0) for s in inside) / len(inside)
            for key in (
                "gen_inflight",
                "mode",
                "load",
                "inflight_spec",
                "inflight_baseline",
                "switches",
            ):
                if key in last:
                    row[key] = last[key]
        rows.append(row)
    return rows
