"""The specswitch router: one OpenAI-compatible endpoint in front of spec/baseline pools.

In-process API (see docs/router.md):

    router = await start_router(RouterConfig(groups=(GroupConfig("g0", spec, base),), ...))
    router.url, router.admin_url, router.registry
    await router.close()
"""

from .app import Router, start_router
from .config import (
    ConfigError,
    DiscoveryConfig,
    GroupConfig,
    HealthConfig,
    PolicyConfig,
    ProxyConfig,
    RouterConfig,
    ScrapeConfig,
)
from .policy import KvVerdict
from .selection import RequestInfo, Route, Selector, Usage
from .state import GroupState, PoolState, Registry

__all__ = [
    "ConfigError",
    "DiscoveryConfig",
    "GroupConfig",
    "GroupState",
    "HealthConfig",
    "KvVerdict",
    "PolicyConfig",
    "PoolState",
    "ProxyConfig",
    "Registry",
    "RequestInfo",
    "Route",
    "Router",
    "RouterConfig",
    "ScrapeConfig",
    "Selector",
    "Usage",
    "start_router",
]
