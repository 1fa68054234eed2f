"""A dependency-free progress bar on stderr (redrawn on a terminal, a line per 25% otherwise)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self, total: int, label: str, *, stream: TextIO | None = None, enabled: bool = True
    ) -> None:
        self.total = max(1, total)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.done = 0
        self.failed = 0
        self.note = ""
        self._t0 = time.monotonic()
        self._last_draw = 0.0
        self._last_quarter = -1

    def advance(self, ok: bool = True, note: str | None = None) -> None:
        self.done += 1
        if not ok:
            self.failed += 1
        if note is not None:
            self.note = note
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        frac = min(1.0, self.done / self.total)
        if self.tty:
            if not force and now - self._last_draw < 0.1 and self.done < self.total:
                return
            self._last_draw = now
            width = 24
            fill = int(frac * width)
            fail = f" failed {self.failed}" if self.failed else ""
            self.stream.write(
                f"\r\x1b[2K{self.label:<22} [{'#' * fill}{'.' * (width - fill)}] "
                f"{self.done}/{self.total} {now - self._t0:5.1f}s{fail} {self.note}"
            )
            self.stream.flush()
        else:
            quarter = int(frac * 4)
            if quarter != self._last_quarter and (quarter > 0 or force):
                self._last_quarter = quarter
                self.stream.write(
                    f"{self.label}: {self.done}/{self.total} ({frac:.0%}) {self.note}\n"
                )
                self.stream.flush()

    def close(self, summary: str = "") -> None:
        if not self.enabled:
            return
        if self.tty:
            self._draw(force=True)
            self.stream.write(f"  {summary}\n" if summary else "\n")
        elif summary:
            self.stream.write(f"{self.label}: {summary}\n")
        self.stream.flush()
