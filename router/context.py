"""The objects one router instance shares between its two listeners and background tasks."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web

from .config import PolicyConfig, RouterConfig
from .kv_selector import KvSelector
from .metrics import RouterMetrics
from .selection import Selector
from .state import GroupState, Registry
from .upstream import UpstreamPool


class RouterContext:
    """Config (with the live policy), group registry, selector, metrics, client sessions."""

    def __init__(self, config: RouterConfig, selector: Selector | None = None) -> None:
        self.config = config
        self.registry = Registry(
            initial_mode=self._initial_mode,
            on_removed=self._on_group_removed,
        )
        # The default selector is the KV-aware one (docs/kv-aware.md).
        self.selector = selector if selector is not None else KvSelector(self.get_policy)
        if selector is not None and getattr(selector, "policy", None) is None:
            selector.policy = self.get_policy
        self.metrics = RouterMetrics(self.registry, self.get_policy)
        self.log = logging.getLogger("specswitch.router")
        self.access_log = config.proxy.access_log
        # Set by the client app's cleanup_ctx: the hot path's upstream connection pool and
        # an aiohttp session for the control plane (health checks, scrapes).
        self.upstream: UpstreamPool | None = None
        self.control_session: aiohttp.ClientSession | None = None
        self.shutting_down = False
        self.started_at = time.monotonic()
        self.background: set[asyncio.Future[None]] = set()  # e.g. group removals in progress
        self.discovery: Any = None  # router/discovery.py's DnsDiscovery when [discovery] is set
        for group in config.groups:
            self.registry.add(group)

    def get_policy(self) -> PolicyConfig:
        return self.config.policy

    def set_policy(self, policy: PolicyConfig) -> None:
        """Swap in an already validated policy; the next policy tick applies it."""
        self.config = dataclasses.replace(self.config, policy=policy.validate())

    def _on_group_removed(self, group: GroupState) -> None:
        self.metrics.forget_group(group.name)
        self.selector.on_group_removed(group)

    def _initial_mode(self) -> str:
        mode = self.config.policy.mode
        return mode if mode != "auto" else "spec"


CTX: web.AppKey[RouterContext] = web.AppKey("specswitch_router_ctx", RouterContext)
