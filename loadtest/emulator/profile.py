"""Emulator profiles: the performance model of one group (a spec and a baseline server).

A profile is a TOML data file (profiles/<name>.toml) that states its sources and every number.
Per-run overrides (CLI flags / ``start_group(overrides=...)``) replace single fields.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

POOLS = ("spec", "baseline")

OVERRIDE_NAMES = (
    "spec_kv_tokens",
    "baseline_kv_tokens",
    "spec_max_running_requests",
    "baseline_max_running_requests",
    "accept_length",
    "prefill_tokens_per_s",
)


SPEC_DEFAULT_MAX_RUNNING = 48  # SGLang's cap for speculative servers without the flag
BASELINE_DEFAULT_MAX_RUNNING = 1024


class ProfileError(ValueError):
    """A profile file or override is invalid; the message names the field."""


@dataclass(frozen=True)
class PoolProfile:
    """Performance model of one server (pool) of the group."""

    step_t0_ms: float
    step_t1_ms: float
    max_running_requests: int
    kv_tokens: int
    prefill_tokens_per_s: float = 10000.0
    chunked_prefill_size: int = 8192
    mem_fraction_static: float = 0.5
    accept_length: float = 1.0
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    # Optional decode step times at given batch sizes, ((batch, ms), ...), batch 1 first.
    # When set, a step over B requests takes the linear interpolation between the points
    # around B and, past the last point, that point's time + step_t1_ms per extra request;
    # step_t0_ms stays the fixed cost of a prefill step.
    step_ms_table: tuple[tuple[int, float], ...] = ()

    @property
    def is_spec(self) -> bool:
        return self.speculative_algorithm is not None

    def step_seconds(self, batch: int) -> float:
        """Simulated duration of one decode step over ``batch`` requests."""
        table = self.step_ms_table
        if not table:
            return (self.step_t0_ms + self.step_t1_ms * batch) / 1000.0
        i = bisect.bisect_left(table, (batch, -math.inf))
        if i == len(table):
            last_b, last_ms = table[-1]
            return (last_ms + self.step_t1_ms * (batch - last_b)) / 1000.0
        b1, ms1 = table[i]
        if b1 == batch or i == 0:
            return ms1 / 1000.0
        b0, ms0 = table[i - 1]
        return (ms0 + (ms1 - ms0) * (batch - b0) / (b1 - b0)) / 1000.0

    def throughput(self, batch: int) -> float:
        """Model output tokens/s at a steady batch (capped at max_running_requests)."""
        b = min(batch, self.max_running_requests)
        return b * self.accept_length / self.step_seconds(b)

    def validate(self, where: str) -> None:
        def bad(name: str, why: str) -> ProfileError:
            return ProfileError(f"{where}.{name}: {why}")

        if not (self.step_t0_ms >= 0 and math.isfinite(self.step_t0_ms)):
            raise bad("step_t0_ms", f"must be >= 0, got {self.step_t0_ms}")
        if not (self.step_t1_ms >= 0 and math.isfinite(self.step_t1_ms)):
            raise bad("step_t1_ms", f"must be >= 0, got {self.step_t1_ms}")
        if self.step_t0_ms + self.step_t1_ms <= 0:
            raise bad("step_t0_ms", "step_t0_ms + step_t1_ms must be > 0")
        if self.max_running_requests < 1:
            raise bad("max_running_requests", f"must be >= 1, got {self.max_running_requests}")
        if self.kv_tokens < 64:
            raise bad("kv_tokens", f"must be >= 64, got {self.kv_tokens}")
        if not self.prefill_tokens_per_s > 0:
            raise bad("prefill_tokens_per_s", f"must be > 0, got {self.prefill_tokens_per_s}")
        if self.chunked_prefill_size < 1:
            raise bad("chunked_prefill_size", f"must be >= 1, got {self.chunked_prefill_size}")
        if self.step_ms_table:
            _check_step_table(self.step_ms_table, bad)
        if self.is_spec:
            draft = self.speculative_num_draft_tokens
            if draft is None or draft < 2:
                raise bad("speculative_num_draft_tokens", f"must be >= 2, got {draft}")
            if not 1.0 <= self.accept_length <= draft:
                raise bad(
                    "accept_length",
                    f"must be within [1, speculative_num_draft_tokens={draft}], "
                    f"got {self.accept_length}",
                )
        elif self.accept_length != 1.0:
            raise bad("accept_length", "a server without speculation yields 1 token per step")


@dataclass(frozen=True)
class Profile:
    """A group's model: identity of the served model plus one PoolProfile per pool."""

    name: str
    spec: PoolProfile
    baseline: PoolProfile
    description: str = ""
    sources: tuple[str, ...] = ()
    model_path: str = "emulated/model"
    served_model_name: str = ""
    context_length: int = 32768
    tp_size: int = 1
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path

    def pool(self, name: str) -> PoolProfile:
        if name not in POOLS:
            raise ProfileError(f"pool must be one of {POOLS}, got {name!r}")
        return self.spec if name == "spec" else self.baseline

    def validate(self) -> Profile:
        if not self.name:
            raise ProfileError("name: must not be empty")
        if self.context_length < 16:
            raise ProfileError(f"context_length: must be >= 16, got {self.context_length}")
        if not self.spec.is_spec:
            raise ProfileError("spec.speculative_algorithm: the spec pool needs an algorithm")
        if self.baseline.is_spec:
            raise ProfileError("baseline.speculative_algorithm: the baseline must not speculate")
        self.spec.validate("spec")
        self.baseline.validate("baseline")
        return self

    def with_overrides(self, overrides: dict[str, Any] | None) -> Profile:
        """Return a copy with per-run overrides applied (names as in OVERRIDE_NAMES)."""
        if not overrides:
            return self
        spec: dict[str, Any] = {}
        base: dict[str, Any] = {}
        for key, value in overrides.items():
            if value is None:
                continue
            if key not in OVERRIDE_NAMES:
                raise ProfileError(
                    f"unknown override {key!r}; known overrides: {', '.join(OVERRIDE_NAMES)}"
                )
            if key == "accept_length":
                spec["accept_length"] = float(value)
            elif key == "prefill_tokens_per_s":
                spec["prefill_tokens_per_s"] = base["prefill_tokens_per_s"] = float(value)
            else:
                pool, _, attr = key.partition("_")
                target = spec if pool == "spec" else base
                target["kv_tokens" if attr == "kv_tokens" else attr] = int(value)
        return dataclasses.replace(
            self,
            spec=dataclasses.replace(self.spec, **spec),
            baseline=dataclasses.replace(self.baseline, **base),
        ).validate()


def _check_step_table(table: Any, bad: Any) -> None:
    why = "must be [[batch, ms], ...] from batch 1, batches increasing, ms > 0 non-decreasing"
    prev_b, prev_ms = 0, 0.0
    for point in table:
        ok = (
            isinstance(point, tuple)
            and len(point) == 2
            and isinstance(point[0], int)
            and isinstance(point[1], int | float)
            and math.isfinite(point[1])
        )
        if not ok or point[0] <= prev_b or not point[1] > 0 or point[1] < prev_ms:
            raise bad("step_ms_table", f"{why}; bad point {point!r}")
        if prev_b == 0 and point[0] != 1:
            raise bad("step_ms_table", f"{why}; it starts at batch {point[0]}")
        prev_b, prev_ms = point


_POOL_FIELDS = {f.name for f in dataclasses.fields(PoolProfile)}
_TOP_FIELDS = {f.name for f in dataclasses.fields(Profile)} - {"spec", "baseline", "extra"}


def _pool_from_table(table: Any, where: str) -> PoolProfile:
    if not isinstance(table, dict):
        raise ProfileError(f"[{where}]: missing table")
    unknown = set(table) - _POOL_FIELDS
    if unknown:
        raise ProfileError(f"[{where}]: unknown keys {sorted(unknown)}")
    missing = {"step_t0_ms", "step_t1_ms", "kv_tokens"} - set(table)
    if missing:
        raise ProfileError(f"[{where}]: missing keys {sorted(missing)}")
    if "max_running_requests" not in table:
        # SGLang caps a speculative server at 48 running requests unless set
        spec = table.get("speculative_algorithm") is not None
        table = {
            **table,
            "max_running_requests": SPEC_DEFAULT_MAX_RUNNING
            if spec
            else BASELINE_DEFAULT_MAX_RUNNING,
        }
    if "step_ms_table" in table:
        points = table["step_ms_table"]
        if not isinstance(points, list):
            raise ProfileError(f"[{where}].step_ms_table: must be a list of [batch, ms] pairs")
        table = {
            **table,
            "step_ms_table": tuple(tuple(p) if isinstance(p, list) else p for p in points),
        }
    try:
        return PoolProfile(**table)
    except TypeError as exc:
        raise ProfileError(f"[{where}]: {exc}") from None


def profile_from_dict(data: dict[str, Any], origin: str = "<dict>") -> Profile:
    """Build and validate a Profile from parsed TOML (tables [spec] and [baseline])."""
    top = {k: v for k, v in data.items() if k in _TOP_FIELDS}
    extra = {k: v for k, v in data.items() if k not in _TOP_FIELDS | {"spec", "baseline"}}
    if "sources" in top:
        top["sources"] = tuple(top["sources"])
    try:
        prof = Profile(
            spec=_pool_from_table(data.get("spec"), "spec"),
            baseline=_pool_from_table(data.get("baseline"), "baseline"),
            extra=extra,
            **top,
        )
        return prof.validate()
    except ProfileError as exc:
        raise ProfileError(f"{origin}: {exc}") from None


def builtin_profile_names() -> list[str]:
    folder = resources.files(__package__).joinpath("profiles")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_profile_file(path: str | Path) -> Profile:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"profile file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile file {path} is not valid TOML: {exc}") from None
    return profile_from_dict(data, str(path))


def load_profile(profile: str | Profile) -> Profile:
    """A Profile from a built-in name, a .toml path, or a Profile (returned as is)."""
    if isinstance(profile, Profile):
        return profile.validate()
    if profile.endswith(".toml") or "/" in profile:
        return load_profile_file(profile)
    names = builtin_profile_names()
    if profile not in names:
        raise ProfileError(f"unknown profile {profile!r}; built-in profiles: {', '.join(names)}")
    text = resources.files(__package__).joinpath("profiles", f"{profile}.toml").read_text("utf-8")
    return profile_from_dict(tomllib.loads(text), f"profile {profile}")
