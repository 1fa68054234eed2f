"""The router's configuration: a frozen dataclass tree holding every default.

One set of names everywhere: the TOML file ([policy], [health], [scrape], [proxy],
[discovery] tables and [[groups]]), the `specswitch serve` flags, and the admin JSON
(GET/PATCH /admin/policy) use the same keys. A runtime change is copy -> validate -> swap:
`dataclasses.replace` then `validate()`, which raises ConfigError naming the bad field.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

MODES = ("auto", "spec", "baseline")
DRAINS = ("kv-aware", "immediate")
LOAD_SIGNALS = ("local", "max")
POOLS = ("spec", "baseline")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and what to do."""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One GPU group: a speculative server and a baseline server on the same GPUs."""

    name: str
    spec_url: str
    baseline_url: str

    def url(self, pool: str) -> str:
        return self.spec_url if pool == "spec" else self.baseline_url

    def validate(self) -> GroupConfig:
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ConfigError(
                f"group name {self.name!r} is invalid: use letters, digits, '-', '_' or '.'"
            )
        for key in ("spec_url", "baseline_url"):
            _check_url(f"groups.{self.name}.{key}", getattr(self, key))
        return self


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """The dial: switching thresholds, dwell, forced mode and drain behaviour.

    Defaults come from the seed-glm5-rtxpro6000 profile: baseline's throughput overtakes
    spec's near batch 11.6 (docs/router.md), so the group goes to baseline at 12 requests in
    flight and back to spec at 6, where spec is still ~30% ahead.
    """

    mode: str = "auto"  # auto | spec | baseline (forced)
    high: int = 12  # to baseline when load >= high
    low: int = 6  # back to spec when load <= low
    min_dwell_s: float = 10.0  # never switch sooner than this after the previous switch
    drain: str = "kv-aware"  # kv-aware | immediate
    drain_deadline_s: float = 30.0  # sticky (kv-aware) traffic to a draining pool ends here
    # KV layer (docs/kv-aware.md): drain stickiness, cross-group affinity, the spec-pool guard.
    sticky_min_tokens: int = 1024  # stay on the draining pool when moving re-prefills more
    drain_kv_headroom: float = 0.9  # ...and the draining pool's KV use stays under this
    sticky_max_inflight: int = 0  # ...and it has fewer in flight than this (0: the policy's high)
    affinity_load_ratio: float = 1.5  # a group holding the prefix wins unless its load >
    affinity_load_slack: int = 4  # ...ratio x least load + slack
    kv_guard: bool = True  # the spec-pool KV guard (veto spec / early baseline / divert)
    spec_kv_fit: float = 0.85  # to spec only if in-flight KV fits this fraction of spec's pool
    spec_kv_high: float = 0.92  # leave spec (and divert requests) at this spec KV use
    spec_queue_max: int = 2  # leave spec when it queues more than this and 1/4 of its batch
    tick_s: float = 0.1  # policy evaluation period: a dial change applies within one tick
    load_signal: str = "local"  # local | max (max of local in-flight and servers' running+waiting)
    # Migration (docs/kv-aware.md): move a long greedy native /generate stream (input_ids)
    # off a draining pool onto the active one, stitched into the same client stream.
    migrate: bool = False
    migrate_min_remaining_tokens: int = 64  # ...only when at least this much is left to generate

    def validate(self) -> PolicyConfig:
        if self.mode not in MODES:
            raise ConfigError(f"policy.mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.drain not in DRAINS:
            raise ConfigError(
                f"policy.drain must be one of {', '.join(DRAINS)}, not {self.drain!r}"
            )
        if self.load_signal not in LOAD_SIGNALS:
            raise ConfigError(
                f"policy.load_signal must be one of {', '.join(LOAD_SIGNALS)}, "
                f"not {self.load_signal!r}"
            )
        if self.high < 1:
            raise ConfigError(f"policy.high must be >= 1, not {self.high}")
        if self.low < 0:
            raise ConfigError(f"policy.low must be >= 0, not {self.low}")
        if self.low >= self.high:
            raise ConfigError(
                f"policy.low ({self.low}) must be below policy.high ({self.high}): "
                "the band between them is the hysteresis"
            )
        _positive("policy.min_dwell_s", self.min_dwell_s)
        _positive("policy.drain_deadline_s", self.drain_deadline_s)
        _period("policy.tick_s", self.tick_s)
        _at_least("policy.sticky_min_tokens", self.sticky_min_tokens, 0)
        _at_least("policy.sticky_max_inflight", self.sticky_max_inflight, 0)
        _at_least("policy.affinity_load_ratio", self.affinity_load_ratio, 1.0)
        _at_least("policy.affinity_load_slack", self.affinity_load_slack, 0)
        _at_least("policy.spec_queue_max", self.spec_queue_max, 0)
        _at_least("policy.migrate_min_remaining_tokens", self.migrate_min_remaining_tokens, 1)
        for key in ("drain_kv_headroom", "spec_kv_fit", "spec_kv_high"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                raise ConfigError(f"policy.{key} must be a fraction in (0, 1], not {value}")
        if self.spec_kv_fit > self.spec_kv_high:
            raise ConfigError(
                f"policy.spec_kv_fit ({self.spec_kv_fit}) must be <= policy.spec_kv_high "
                f"({self.spec_kv_high}), else the KV guard would flap"
            )
        return self


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """Active health checks of every server (GET <server>/health)."""

    path: str = "/health"
    interval_s: float = 2.0
    timeout_s: float = 5.0
    unhealthy_after: int = 2  # consecutive failures before a server is marked unhealthy
    healthy_after: int = 1  # consecutive successes before it is healthy again

    def validate(self) -> HealthConfig:
        _period("health.interval_s", self.interval_s)
        _positive("health.timeout_s", self.timeout_s)
        _at_least("health.unhealthy_after", self.unhealthy_after, 1)
        _at_least("health.healthy_after", self.healthy_after, 1)
        if not self.path.startswith("/"):
            raise ConfigError(f"health.path must start with '/', not {self.path!r}")
        return self


@dataclass(frozen=True, slots=True)
class ScrapeConfig:
    """Scraping of each server's /get_load, /metrics and /get_server_info."""

    enabled: bool = True
    interval_s: float = 1.0  # /get_load and /metrics
    info_interval_s: float = 30.0  # /get_server_info (static-ish)
    timeout_s: float = 2.0
    metrics: bool = True  # also scrape /metrics (404 is remembered and not retried)
    fresh_s: float = 5.0  # a server load report older than this is ignored by load_signal=max

    def validate(self) -> ScrapeConfig:
        _period("scrape.interval_s", self.interval_s)
        _period("scrape.info_interval_s", self.info_interval_s)
        _positive("scrape.timeout_s", self.timeout_s)
        _positive("scrape.fresh_s", self.fresh_s)
        return self


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """The data plane: upstream connection pool, timeouts, retries, shutdown."""

    connect_timeout_s: float = 5.0
    retry_after_s: int = 5  # Retry-After on a 503 when no group can serve
    shutdown_grace_s: float = 30.0  # SIGTERM: in-flight streams get this long to finish
    usage_tail_bytes: int = 262144  # stream tail kept to read the final usage/meta_info
    access_log: bool = False  # one structured line per request at INFO
    # Put the request id into the body as SGLang's `rid` when the body has none (SGLang reads
    # the id from the body, not from X-Request-Id): its logs, /abort_request and meta_info.id
    # then carry the same id as the client's X-Request-Id. The rest of the body is untouched.
    request_id_to_rid: bool = True

    def validate(self) -> ProxyConfig:
        _positive("proxy.connect_timeout_s", self.connect_timeout_s)
        _at_least("proxy.retry_after_s", self.retry_after_s, 0)
        _at_least("proxy.shutdown_grace_s", self.shutdown_grace_s, 0)
        _at_least("proxy.usage_tail_bytes", self.usage_tail_bytes, 1024)
        return self


@dataclass(frozen=True, slots=True)
class DiscoveryConfig:
    """DNS discovery of groups (a headless Service resolving to one IP per group)."""

    dns_name: str = ""  # empty = off
    spec_port: int = 30001
    baseline_port: int = 30002
    interval_s: float = 10.0

    def validate(self) -> DiscoveryConfig:
        for key in ("spec_port", "baseline_port"):
            port = getattr(self, key)
            if not 1 <= port <= 65535:
                raise ConfigError(f"discovery.{key} must be a TCP port (1-65535), not {port}")
        _period("discovery.interval_s", self.interval_s)
        return self


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """Everything the router needs; `start_router(config)` runs it."""

    groups: tuple[GroupConfig, ...] = ()
    listen: str = "0.0.0.0:8000"
    admin_listen: str = "127.0.0.1:8001"
    admin_token: str | None = None  # bearer token for the admin API (env SPECSWITCH_ADMIN_TOKEN)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    scrape: ScrapeConfig = field(default_factory=ScrapeConfig)
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)

    def validate(self) -> RouterConfig:
        parse_hostport("listen", self.listen)
        parse_hostport("admin_listen", self.admin_listen)
        names: set[str] = set()
        for group in self.groups:
            group.validate()
            if group.name in names:
                raise ConfigError(f"groups: the name {group.name!r} is used twice")
            names.add(group.name)
        self.policy.validate()
        self.health.validate()
        self.scrape.validate()
        self.proxy.validate()
        self.discovery.validate()
        return self


# --------------------------------------------------------------------------- helpers


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be > 0, not {value}")


MIN_PERIOD_S = 0.01


def _period(name: str, value: float) -> None:
    """A background loop's period: a tiny one would spin the event loop the hot path runs on."""
    if not value >= MIN_PERIOD_S:
        raise ConfigError(
            f"{name} must be >= {MIN_PERIOD_S} s (a shorter period busy-loops the router), "
            f"not {value}"
        )


def _at_least(name: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, not {value}")


def _check_url(name: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http(s) URL like http://10.0.0.5:30001, not {url!r}")


def parse_hostport(name: str, value: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); port 0 means 'pick a free port'."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"{name} must be HOST:PORT (e.g. 0.0.0.0:8000), not {value!r}")
    return host.strip("[]"), int(port_text)


def parse_group_flag(text: str) -> GroupConfig:
    """'NAME=SPEC_URL,BASELINE_URL' (the --group flag) -> GroupConfig."""
    name, sep, urls = text.partition("=")
    spec_url, comma, baseline_url = urls.partition(",")
    if not sep or not comma:
        raise ConfigError(
            f"--group must be NAME=SPEC_URL,BASELINE_URL "
            f"(e.g. g0=http://h:30001,http://h:30002), not {text!r}"
        )
    return GroupConfig(name.strip(), spec_url.strip(), baseline_url.strip()).validate()


def _coerce(section: str, key: str, value: Any, default: Any) -> Any:
    """Check a value from TOML/JSON against the default's type (int accepted for float)."""
    where = f"{section}.{key}" if section else key
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be an integer, not {value!r}")
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{where} must be an integer, not {value!r}")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, not {value!r}")
        return float(value)
    if isinstance(default, str) or default is None:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}")
        return value
    raise ConfigError(f"{where} cannot be set here")


def updated(obj: Any, section: str, changes: Mapping[str, Any]) -> Any:
    """A copy of a config dataclass with `changes` applied (unknown keys and bad types refused).

    The result is not validated: call `.validate()` on it (or on the tree holding it).
    """
    if not isinstance(changes, Mapping):
        raise ConfigError(f"{section or 'config'} must be a table/object, not {changes!r}")
    known = {f.name: f for f in dataclasses.fields(obj)}
    unknown = sorted(set(changes) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown {section or 'config'} key(s): {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known))}"
        )
    values = {k: _coerce(section, k, v, getattr(obj, k)) for k, v in changes.items()}
    return dataclasses.replace(obj, **values)


def policy_as_dict(policy: PolicyConfig) -> dict[str, Any]:
    return dataclasses.asdict(policy)


_SECTIONS = ("policy", "health", "scrape", "proxy", "discovery")
_TOP_SCALARS = ("listen", "admin_listen")


def config_from_mapping(data: Mapping[str, Any]) -> RouterConfig:
    """Build (unvalidated) a RouterConfig from a TOML-shaped mapping."""
    config = RouterConfig()
    allowed = set(_SECTIONS) | set(_TOP_SCALARS) | {"groups"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown top-level key(s): {', '.join(unknown)}; known: {', '.join(sorted(allowed))}"
        )
    top = {k: data[k] for k in _TOP_SCALARS if k in data}
    for key, value in top.items():
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string HOST:PORT, not {value!r}")
    sections = {s: updated(getattr(config, s), s, data[s]) for s in _SECTIONS if s in data}
    groups: list[GroupConfig] = []
    raw_groups = data.get("groups", [])
    if not isinstance(raw_groups, list):
        raise ConfigError(
            "groups must be an array of tables ([[groups]] name/spec_url/baseline_url)"
        )
    for i, raw in enumerate(raw_groups):
        if not isinstance(raw, Mapping) or set(raw) != {"name", "spec_url", "baseline_url"}:
            raise ConfigError(
                f"groups[{i}] must have exactly the keys name, spec_url, baseline_url; got {raw!r}"
            )
        groups.append(GroupConfig(str(raw["name"]), str(raw["spec_url"]), str(raw["baseline_url"])))
    return dataclasses.replace(config, groups=tuple(groups), **top, **sections)


def load_toml(path: str | Path) -> RouterConfig:
    """Read a router TOML file (unvalidated result; flags may still override it)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {p} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from exc
    try:
        return config_from_mapping(data)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from exc
