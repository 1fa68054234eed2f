"""Assemble and run a router: the client listener, the admin listener, background tasks.

router = await start_router(config)       # listen ports may be 0
router.url, router.admin_url, router.registry
await router.close()                      # graceful: in-flight requests finish first
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from . import admin, control, proxy
from .config import ConfigError, RouterConfig, parse_hostport
from .context import CTX, RouterContext
from .selection import Selector
from .state import Registry
from .upstream import UpstreamPool

MAX_BODY = 256 * 1024 * 1024  # long agentic contexts (and images) exceed aiohttp's 1 MiB default


async def _sessions(app: web.Application) -> AsyncIterator[None]:
    ctx = app[CTX]
    # The hot path's client: keep-alive connections, no connection limit (each stream holds
    # one; aiohttp's default cap of 100 is the classic throughput trap).
    ctx.upstream = UpstreamPool(connect_timeout_s=ctx.config.proxy.connect_timeout_s)
    ctx.control_session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=75),
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    try:
        yield
    finally:
        ctx.upstream.close()
        await ctx.control_session.close()


async def _background(app: web.Application) -> AsyncIterator[None]:
    ctx = app[CTX]
    tasks = [
        asyncio.create_task(control.policy_loop(ctx), name="specswitch-policy"),
        asyncio.create_task(control.health_loop(ctx), name="specswitch-health"),
    ]
    if ctx.config.scrape.enabled:
        tasks.append(asyncio.create_task(control.scrape_loop(ctx), name="specswitch-scrape"))
    if ctx.discovery is not None:
        tasks.append(asyncio.create_task(_run_discovery(ctx), name="specswitch-discovery"))
    try:
        yield
    finally:
        for task in (*tasks, *ctx.background):
            task.cancel()
        for task in (*tasks, *list(ctx.background)):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _make_discovery(ctx: RouterContext) -> Any:
    """The DnsDiscovery for [discovery] (None when dns_name is empty); ConfigError if refused."""
    cfg = ctx.config.discovery
    if not cfg.dns_name:
        return None
    discovery = importlib.import_module(".discovery", __package__)
    try:
        return discovery.DnsDiscovery(
            ctx.registry, cfg.dns_name, cfg.spec_port, cfg.baseline_port, cfg.interval_s
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


async def _run_discovery(ctx: RouterContext) -> None:
    cfg = ctx.config.discovery
    dns = ctx.discovery
    ctx.log.info(
        "event=discovery_started dns_name=%s spec_port=%d baseline_port=%d interval_s=%s",
        cfg.dns_name, cfg.spec_port, cfg.baseline_port, cfg.interval_s,
    )  # fmt: skip
    await dns.run()


def build_client_app(ctx: RouterContext) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[CTX] = ctx
    for path in proxy.CLIENT_PATHS_POST:
        app.router.add_post(path, proxy.proxy_handler)
    for path in proxy.CLIENT_PATHS_GET:
        app.router.add_get(path, proxy.proxy_handler)
    app.router.add_get("/health", proxy.health_handler)
    app.router.add_route("*", "/{tail:.*}", proxy.not_found_handler)  # last: only the rest
    app.cleanup_ctx.append(_sessions)
    app.cleanup_ctx.append(_background)
    return app


def build_admin_app(ctx: RouterContext) -> web.Application:
    app = web.Application(middlewares=[admin.error_middleware, admin.auth_middleware])
    app[CTX] = ctx
    admin.add_routes(app)
    return app


class Router:
    """A running router (both listeners and its background tasks)."""

    def __init__(
        self,
        ctx: RouterContext,
        client_runner: web.AppRunner,
        admin_runner: web.AppRunner,
        url: str,
        admin_url: str,
    ) -> None:
        self.ctx = ctx
        self._client_runner = client_runner
        self._admin_runner = admin_runner
        self.url = url
        self.admin_url = admin_url
        self._closed = False

    @property
    def registry(self) -> Registry:
        return self.ctx.registry

    @property
    def config(self) -> RouterConfig:
        return self.ctx.config

    async def close(self) -> None:
        """Stop accepting; in-flight requests get proxy.shutdown_grace_s to finish."""
        if self._closed:
            return
        self._closed = True
        self.ctx.shutting_down = True
        self.ctx.log.info("event=router_stopping inflight=%d", _inflight(self.ctx))
        try:
            await self._client_runner.cleanup()
        finally:  # also when the graceful wait is cancelled (a second SIGTERM/SIGINT)
            await self._admin_runner.cleanup()
            self.ctx.log.info("event=router_stopped inflight=%d", _inflight(self.ctx))


def _inflight(ctx: RouterContext) -> int:
    return sum(g.inflight for g in ctx.registry.groups)


def _url(runner: web.AppRunner, host: str) -> str:
    port = runner.addresses[0][1]
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


async def start_router(config: RouterConfig, selector: Selector | None = None) -> Router:
    """Validate the config, start both listeners and the control loops."""
    config.validate()
    ctx = RouterContext(config, selector)
    ctx.discovery = _make_discovery(ctx)  # before listening: a refused setting fails startup
    host, port = parse_hostport("listen", config.listen)
    admin_host, admin_port = parse_hostport("admin_listen", config.admin_listen)
    client_runner = web.AppRunner(
        build_client_app(ctx),
        handler_cancellation=True,  # a client that goes away cancels its upstream request
        access_log=None,
        shutdown_timeout=config.proxy.shutdown_grace_s,
    )
    admin_runner = web.AppRunner(build_admin_app(ctx), access_log=None, shutdown_timeout=5.0)
    await client_runner.setup()
    await admin_runner.setup()
    try:
        await web.TCPSite(client_runner, host, port, backlog=4096).start()
        await web.TCPSite(admin_runner, admin_host, admin_port).start()
    except OSError:
        await client_runner.cleanup()
        await admin_runner.cleanup()
        raise
    router = Router(ctx, client_runner, admin_runner, _url(client_runner, host),
                    _url(admin_runner, admin_host))  # fmt: skip
    ctx.log.info(
        "event=router_started url=%s admin_url=%s groups=%s mode=%s high=%d low=%d "
        "min_dwell_s=%s",
        router.url, router.admin_url, ",".join(ctx.registry.names()) or "-",
        config.policy.mode, config.policy.high, config.policy.low, config.policy.min_dwell_s,
    )  # fmt: skip
    return router
