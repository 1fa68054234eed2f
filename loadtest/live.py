"""Watching the router while load runs: poll GET /admin/state, and a live terminal view.

:class:`AdminPoller` turns the router's state into one flat sample (mode, load, per-pool
in-flight, switches), summed over groups; the trace drivers store these samples for the
timeline plot. :class:`LiveView` redraws a few status lines on a terminal (or prints one line
every few seconds when the output is not a terminal).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, TextIO

import aiohttp
import orjson

from .client import RequestResult


def state_sample(state: dict[str, Any]) -> dict[str, Any]:
    """Flatten /admin/state: the first group's mode, and loads/in-flight summed over groups."""
    groups = state.get("groups") or []
    out: dict[str, Any] = {"load": 0, "inflight_spec": 0, "inflight_baseline": 0, "switches": 0}
    modes = []
    for g in groups:
        modes.append(g.get("mode"))
        out["load"] += int(g.get("load") or 0)
        pools = g.get("pools") or {}
        for pool in ("spec", "baseline"):
            out[f"inflight_{pool}"] += int((pools.get(pool) or {}).get("inflight") or 0)
        sw = g.get("switches") or {}
        out["switches"] += sum(int(v) for v in sw.values()) if isinstance(sw, dict) else int(sw)
    out["mode"] = modes[0] if len(set(modes)) == 1 and modes else ("mixed" if modes else None)
    policy = state.get("policy") or {}
    if "mode" in policy:
        out["policy_mode"] = policy["mode"]
    return out


class AdminPoller:
    """GET {admin_url}/admin/state -> :func:`state_sample` (None when unavailable)."""

    def __init__(self, admin_url: str, token: str | None = None, timeout_s: float = 2.0) -> None:
        self.url = admin_url.rstrip("/") + "/admin/state"
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self.last: dict[str, Any] | None = None

    async def __aenter__(self) -> AdminPoller:
        self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self) -> dict[str, Any] | None:
        assert self._session is not None
        try:
            async with self._session.get(self.url) as resp:
                if resp.status != 200:
                    return None
                state = orjson.loads(await resp.read())
        except (aiohttp.ClientError, TimeoutError, OSError, orjson.JSONDecodeError):
            return None
        self.last = state_sample(state)
        return self.last


class Throughput:
    """Delivered output tokens per second over a sliding window (from finished requests)."""

    def __init__(self, window_s: float = 5.0) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self.done = 0
        self.failed = 0

    def add(self, res: RequestResult) -> None:
        if res.ok:
            self.done += 1
            self._events.append((res.end, res.output_tokens))
        else:
            self.failed += 1

    def rate(self, now: float | None = None) -> float:
        now = time.perf_counter() if now is None else now
        while self._events and self._events[0][0] < now - self.window_s:
            self._events.popleft()
        return sum(n for _, n in self._events) / self.window_s


class LiveView:
    """A small status panel redrawn in place (ANSI) on a terminal."""

    def __init__(
        self, stream: TextIO | None = None, time_scale: float = 1.0, plain_every_s: float = 5.0
    ) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.time_scale = time_scale
        self.plain_every_s = plain_every_s
        self._lines = 0
        self._last_plain = 0.0

    def render(
        self,
        elapsed_s: float,
        total_s: float,
        sample: dict[str, Any] | None,
        meter: Throughput,
        target: float | None = None,
    ) -> None:
        s = sample or {}
        sim_t = elapsed_s * self.time_scale
        bar_w = 30
        frac = min(1.0, sim_t / total_s) if total_s else 0.0
        bar = "#" * int(frac * bar_w) + "." * (bar_w - int(frac * bar_w))
        tok_s = meter.rate() / self.time_scale
        mode = s.get("mode") or "?"
        lines = [
            f"[{bar}] {sim_t:6.1f}/{total_s:.0f} s   target load {target or 0:5.0f}",
            f"  mode {mode:<9} load {s.get('load', '-')!s:>4}   in-flight spec "
            f"{s.get('inflight_spec', '-')!s:>4}  baseline {s.get('inflight_baseline', '-')!s:>4}"
            f"   switches {s.get('switches', '-')}",
            f"  {tok_s:8.0f} tok/s   done {meter.done}   failed {meter.failed}",
        ]
        if self.tty:
            if self._lines:
                self.stream.write(f"\x1b[{self._lines}F")
            for line in lines:
                self.stream.write("\x1b[2K" + line + "\n")
            self._lines = len(lines)
            self.stream.flush()
        elif time.monotonic() - self._last_plain >= self.plain_every_s:
            self._last_plain = time.monotonic()
            self.stream.write(" | ".join(x.strip() for x in lines) + "\n")
            self.stream.flush()
