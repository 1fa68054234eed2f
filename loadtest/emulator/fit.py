"""Fit a profile's step-time model to a user's measured throughput-vs-concurrency points.

Input CSV columns: ``pool,concurrency,output_tok_s`` (pool = spec | baseline); other columns
are ignored (the load generator's `sweep --csv` writes this shape). Per pool, with
B = min(concurrency, max_running_requests) and L the pool's accept length (1 for baseline):
a point says one decode step takes y = B*L/tok_s seconds, and the model is y = t0 + t1*B.
t0 and t1 come from a least-squares fit weighted for RELATIVE error (weights 1/y^2), kept
non-negative. Only L/t matters for throughput, so the spec pool keeps the base profile's
accept length (override it with --accept-length if you measured it).
"""

from __future__ import annotations

import csv
import dataclasses
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .profile import POOLS, PoolProfile, Profile, ProfileError


@dataclasses.dataclass(frozen=True)
class FitResult:
    pool: str
    t0_ms: float
    t1_ms: float
    points: tuple[tuple[int, float, float], ...]  # (concurrency, measured, fitted) tok/s

    @property
    def max_error(self) -> float:
        return max((abs(f / m - 1) for _, m, f in self.points), default=0.0)


def read_points(path: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Points per pool from the CSV; raises ProfileError naming the bad row or column."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = {"pool", "concurrency", "output_tok_s"} - set(reader.fieldnames or [])
            if missing:
                raise ProfileError(
                    f"{path}: missing CSV columns {sorted(missing)} "
                    "(need pool,concurrency,output_tok_s)"
                )
            out: dict[str, list[tuple[int, float]]] = {p: [] for p in POOLS}
            for i, row in enumerate(reader, start=2):
                pool = (row["pool"] or "").strip()
                if pool not in POOLS:
                    raise ProfileError(f"{path}:{i}: pool must be spec or baseline, got {pool!r}")
                try:
                    c = int(float(row["concurrency"]))
                    tok = float(row["output_tok_s"])
                except (TypeError, ValueError):
                    raise ProfileError(
                        f"{path}:{i}: concurrency and output_tok_s must be numbers"
                    ) from None
                if c < 1 or not tok > 0:
                    raise ProfileError(f"{path}:{i}: need concurrency >= 1 and output_tok_s > 0")
                out[pool].append((c, tok))
    except FileNotFoundError:
        raise ProfileError(f"fit CSV {path} does not exist") from None
    return out


def fit_pool(pool_name: str, pool: PoolProfile, points: Iterable[tuple[int, float]]) -> FitResult:
    pts = list(points)
    xs = [min(c, pool.max_running_requests) for c, _ in pts]
    if len(set(xs)) < 2:
        raise ProfileError(
            f"{pool_name}: need points at two or more different concurrencies (below "
            f"max_running_requests={pool.max_running_requests}) to fit t0 and t1"
        )
    ys = [b * pool.accept_length / tok for b, (_, tok) in zip(xs, pts, strict=True)]
    ws = [1.0 / (y * y) for y in ys]
    sw = sum(ws)
    sx = sum(w * x for w, x in zip(ws, xs, strict=True))
    sy = sum(w * y for w, y in zip(ws, ys, strict=True))
    sxx = sum(w * x * x for w, x in zip(ws, xs, strict=True))
    sxy = sum(w * x * y for w, x, y in zip(ws, xs, ys, strict=True))
    det = sw * sxx - sx * sx
    t1 = (sw * sxy - sx * sy) / det
    t0 = (sy - t1 * sx) / sw
    if t1 < 0:  # throughput falls with load: flat step time
        t1, t0 = 0.0, sy / sw
    if t0 < 0:  # no fixed cost: fit through the origin
        t0, t1 = 0.0, sxy / sxx
    fitted = tuple(
        (c, tok, b * pool.accept_length / (t0 + t1 * b))
        for b, (c, tok) in zip(xs, pts, strict=True)
    )
    return FitResult(pool_name, t0 * 1000.0, t1 * 1000.0, fitted)


def fit_profile(base: Profile, csv_path: str | Path) -> tuple[Profile, list[FitResult]]:
    """``base`` with each pool's step times fitted to the CSV's points for that pool."""
    points = read_points(csv_path)
    if not any(points.values()):
        raise ProfileError(f"{csv_path}: no data rows")
    results: list[FitResult] = []
    pools: dict[str, PoolProfile] = {}
    for name in POOLS:
        pool = base.pool(name)
        if points[name]:
            res = fit_pool(name, pool, points[name])
            results.append(res)
            pool = dataclasses.replace(
                pool, step_t0_ms=res.t0_ms, step_t1_ms=res.t1_ms, step_ms_table=()
            )
        pools[name] = pool
    stem = Path(csv_path).stem
    fitted = dataclasses.replace(
        base,
        name=f"fitted-{stem}",
        description=f"{base.name} with step times fitted to {Path(csv_path).name}",
        sources=(*base.sources, f"fitted to measured points in {csv_path}"),
        spec=pools["spec"],
        baseline=pools["baseline"],
    )
    return fitted.validate(), results


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def profile_to_toml(profile: Profile, header: str = "") -> str:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for f in dataclasses.fields(Profile):
        if f.name in ("spec", "baseline", "extra"):
            continue
        lines.append(f"{f.name} = {_toml_value(getattr(profile, f.name))}")
    for name in POOLS:
        lines.append(f"\n[{name}]")
        pool = profile.pool(name)
        for f in dataclasses.fields(PoolProfile):
            value = getattr(pool, f.name)
            if value is not None and value != ():
                lines.append(f"{f.name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def write_profile(profile: Profile, path: str | Path, header: str = "") -> None:
    """Write atomically (temp file + rename), so a failure leaves nothing half-written."""
    path = Path(path)
    text = profile_to_toml(profile, header)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def format_fit(results: list[FitResult]) -> str:
    lines = []
    for r in results:
        lines.append(
            f"{r.pool}: step = {r.t0_ms:.3f} ms + {r.t1_ms:.4f} ms x batch "
            f"(worst point error {r.max_error:.1%})"
        )
        for c, measured, fitted in r.points:
            lines.append(
                f"  concurrency {c:>4}: measured {measured:9.1f}  fitted {fitted:9.1f} tok/s"
            )
    return "\n".join(lines)
