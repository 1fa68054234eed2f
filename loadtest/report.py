"""Writing results: JSON (everything), CSV (one row per figure set), and terminal tables.

Files are written to a temporary name and renamed, so a failed run never leaves a half file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# The first columns of every sweep CSV (the emulator's profile fitter reads pool, concurrency,
# output_tok_s; the rest are extra columns it ignores).
SWEEP_COLUMNS = (
    "pool",
    "concurrency",
    "output_tok_s",
    "request_s",
    "goodput_tok_s",
    "goodput_req_s",
    "slo_attainment",
    "requests",
    "ok",
    "failed",
    "window_s",
    "ttft_s_p50",
    "ttft_s_p90",
    "ttft_s_p99",
    "tpot_s_p50",
    "tpot_s_p90",
    "tpot_s_p99",
    "itl_s_p50",
    "itl_s_p90",
    "itl_s_p99",
    "e2e_s_p50",
    "e2e_s_p90",
    "e2e_s_p99",
    "mean_prompt_tokens",
    "cached_fraction",
    "served_spec",
    "served_baseline",
)
TIMELINE_COLUMNS = (
    "run",
    "t_s",
    "target",
    "tok_s",
    "completed",
    "failed",
    "mode",
    "load",
    "inflight_spec",
    "inflight_baseline",
    "switches",
    "gen_inflight",
)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, data: dict[str, Any]) -> Path:
    _atomic_write(path, json.dumps(_clean(data), indent=2, sort_keys=False) + "\n")
    return path


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def sweep_row(pool: str, summary: dict[str, Any]) -> dict[str, Any]:
    row = {k: summary.get(k) for k in SWEEP_COLUMNS}
    row["pool"] = pool
    pools = summary.get("pools") or {}
    row["served_spec"] = pools.get("spec", 0)
    row["served_baseline"] = pools.get("baseline", 0)
    return row


def write_csv(path: Path, rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Path:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _fmt_csv(row.get(k)) for k in columns})
    _atomic_write(path, buf.getvalue())
    return path


def _fmt_csv(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def _fmt(v: Any, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "ms":
        return f"{v * 1000:.0f}" if v * 1000 >= 10 else f"{v * 1000:.1f}"
    if kind == "s":
        return f"{v:.2f}"
    if kind == "pct":
        return f"{v * 100:.0f}%"
    if kind == "f0":
        return f"{v:.0f}"
    if kind == "f1":
        return f"{v:.1f}"
    return str(v)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """Plain text table: columns are (header, key, format)."""
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        cells.append([_fmt(row.get(k), f) for _, k, f in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


SWEEP_TABLE = (
    ("run", "pool", "str"),
    ("conc", "concurrency", "str"),
    ("tok/s", "output_tok_s", "f0"),
    ("req/s", "request_s", "f1"),
    ("goodput tok/s", "goodput_tok_s", "f0"),
    ("TTFT p50 ms", "ttft_s_p50", "ms"),
    ("TTFT p99 ms", "ttft_s_p99", "ms"),
    ("TPOT p50 ms", "tpot_s_p50", "ms"),
    ("TPOT p99 ms", "tpot_s_p99", "ms"),
    ("ok", "ok", "str"),
    ("failed", "failed", "str"),
)
