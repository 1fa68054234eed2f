"""DNS discovery of GPU groups: one A/AAAA record of a (headless Service) name = one group.

In Kubernetes each GPU node runs one pod holding both SGLang servers (spec on a fixed port,
baseline on another). A headless Service lists the ready pods' IPs under one DNS name. The
router re-resolves that name every ``interval_s`` seconds and reconciles its registry:

- an IP that appears becomes a group ``<first label of dns_name>-<ip with dashes>``
  (``sglang-groups-10-0-3-7``) with ``http://IP:spec_port`` and ``http://IP:baseline_port``;
- a group whose IP is missing for ``remove_after_misses`` consecutive resolutions is removed
  through ``registry.remove`` (admin-drain, wait until its in-flight requests finish, remove),
  in the background so that other groups keep being reconciled;
- a failed resolution (timeout, server failure) changes nothing: only an answer counts, and
  "no such name" counts as an empty answer (a headless Service with no ready pod).

Only groups this object added are ever removed: groups configured statically (``--group``)
or through the admin API are left alone even if their name matches the pattern.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from .config import GroupConfig

log = logging.getLogger("specswitch.router.discovery")

Resolver = Callable[[str], Awaitable[list[str]]]
GroupFactory = Callable[[str, str, str], Any]

# getaddrinfo errors that mean "the name has no address" (an answer), not "no answer".
_NO_ADDRESS_ERRORS = {
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)
}


class GroupRegistry(Protocol):
    """What discovery needs from the router's registry (see router/registry)."""

    def names(self) -> list[str]: ...

    def add(self, group: Any) -> Any: ...

    async def remove(self, name: str) -> Any: ...


class NoAddress(Exception):
    """The name resolved to nothing (NXDOMAIN / no data): an empty answer."""


def group_name_for(dns_name: str, ip: str) -> str:
    """Group name for one address; deploy/sglang/prestop_drain.py derives the same name."""
    label = dns_name.strip(".").split(".", 1)[0] or "group"
    return f"{label}-{ip.replace('.', '-').replace(':', '-')}"


def server_url(ip: str, port: int) -> str:
    host = f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    return f"http://{host}:{port}"


async def resolve_dns(name: str) -> list[str]:
    """Every address of ``name`` (IPv4 and IPv6), via the event loop's non-blocking getaddrinfo."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in _NO_ADDRESS_ERRORS:
            return []
        raise
    return sorted({str(info[4][0]) for info in infos})


def _default_group_factory(name: str, spec_url: str, baseline_url: str) -> Any:
    return GroupConfig(name=name, spec_url=spec_url, baseline_url=baseline_url)


class DnsDiscovery:
    """Keeps the registry's discovered groups equal to the addresses of ``dns_name``."""

    def __init__(
        self,
        registry: GroupRegistry,
        dns_name: str,
        spec_port: int = 30001,
        baseline_port: int = 30002,
        interval_s: float = 10.0,
        resolve: Resolver | None = None,
        *,
        remove_after_misses: int = 2,
        make_group: GroupFactory | None = None,
    ) -> None:
        if not dns_name or not dns_name.strip("."):
            raise ValueError("discovery.dns_name must be a DNS name, e.g. sglang-groups")
        for field, port in (("spec_port", spec_port), ("baseline_port", baseline_port)):
            if not 0 < int(port) < 65536:
                raise ValueError(f"discovery.{field} must be a TCP port (1-65535), got {port}")
        if spec_port == baseline_port:
            raise ValueError("discovery.spec_port and discovery.baseline_port must differ")
        if not interval_s > 0:
            raise ValueError(f"discovery.interval_s must be > 0, got {interval_s}")
        if remove_after_misses < 1:
            raise ValueError(f"remove_after_misses must be >= 1, got {remove_after_misses}")
        self.registry = registry
        self.dns_name = dns_name
        self.spec_port = int(spec_port)
        self.baseline_port = int(baseline_port)
        self.interval_s = float(interval_s)
        self.remove_after_misses = remove_after_misses
        self._resolve: Resolver = resolve or resolve_dns
        self._make_group: GroupFactory = make_group or _default_group_factory
        self._owned: set[str] = set()  # groups this discovery added and has not removed
        self._misses: dict[str, int] = {}
        self._removing: dict[str, asyncio.Task[None]] = {}
        self.last_addresses: list[str] | None = None  # last answer (None before the first)

    @property
    def owned(self) -> frozenset[str]:
        return frozenset(self._owned)

    def name_for(self, ip: str) -> str:
        return group_name_for(self.dns_name, ip)

    async def reconcile_once(self) -> None:
        """Resolve once and add/remove groups; a failed resolution changes nothing."""
        try:
            addresses = sorted(set(await self._resolve(self.dns_name)))
        except NoAddress:
            addresses = []
        except Exception as exc:  # no answer: keep what we have
            log.warning(
                "event=discovery_resolve_failed dns_name=%s error=%r kept_groups=%d",
                self.dns_name,
                f"{type(exc).__name__}: {exc}",
                len(self._owned),
            )
            return
        self.last_addresses = addresses
        wanted = {self.name_for(ip): ip for ip in addresses}
        existing = set(self.registry.names())
        for name, ip in wanted.items():
            self._misses.pop(name, None)
            if name in self._owned or name in self._removing:
                continue  # present, or being removed (re-added once the removal ends)
            if name in existing:
                log.warning(
                    "event=discovery_name_taken group=%s (a group not added by discovery has this name)",
                    name,
                )
                continue
            await self._add(name, ip)
        for name in sorted(self._owned - wanted.keys()):
            misses = self._misses.get(name, 0) + 1
            self._misses[name] = misses
            if misses >= self.remove_after_misses:
                self._start_removal(name)

    async def _add(self, name: str, ip: str) -> None:
        spec_url = server_url(ip, self.spec_port)
        baseline_url = server_url(ip, self.baseline_port)
        try:
            result = self.registry.add(self._make_group(name, spec_url, baseline_url))
            if inspect.isawaitable(result):
                await result
        except ValueError as exc:  # name appeared meanwhile (admin API)
            log.warning("event=discovery_add_refused group=%s error=%s", name, exc)
            return
        self._owned.add(name)
        log.info(
            "event=discovery_group_added group=%s spec=%s baseline=%s", name, spec_url, baseline_url
        )

    def _start_removal(self, name: str) -> None:
        self._owned.discard(name)
        self._misses.pop(name, None)
        log.info("event=discovery_group_removing group=%s dns_name=%s", name, self.dns_name)
        task = asyncio.create_task(self._remove(name), name=f"discovery-remove-{name}")
        self._removing[name] = task

    async def _remove(self, name: str) -> None:
        try:
            await self.registry.remove(name)
            log.info("event=discovery_group_removed group=%s", name)
        except KeyError:
            log.info("event=discovery_group_already_gone group=%s", name)
        except Exception as exc:
            log.error(
                "event=discovery_remove_failed group=%s error=%s: %s", name, type(exc).__name__, exc
            )
        finally:
            self._removing.pop(name, None)

    async def wait_removals(self) -> None:
        """Wait for the removals in progress (tests, shutdown)."""
        while self._removing:
            await asyncio.gather(*self._removing.values(), return_exceptions=True)

    async def run(self) -> None:
        """Reconcile every ``interval_s`` seconds until cancelled."""
        try:
            while True:
                try:
                    await self.reconcile_once()
                except Exception as exc:  # never let one bad round stop discovery
                    log.error(
                        "event=discovery_reconcile_failed error=%s: %s", type(exc).__name__, exc
                    )
                await asyncio.sleep(self.interval_s)
        finally:
            tasks = list(self._removing.values())
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
