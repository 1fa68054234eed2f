"""The admin listener: state, the live dial (policy), group drain/resume/add/remove, metrics.

Every /admin/* route needs `Authorization: Bearer <token>` when a token is configured
(env SPECSWITCH_ADMIN_TOKEN); the comparison is constant-time. /metrics and /health on this
listener stay open so Prometheus and liveness probes need no secret.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from .config import ConfigError, GroupConfig, policy_as_dict, updated
from .context import CTX, RouterContext
from .errors import error_response
from .state import monotonic

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(data, option=orjson.OPT_INDENT_2),
        status=status,
        content_type="application/json",
    )


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[CTX].config.admin_token
    if token and request.path.startswith("/admin"):
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return error_response(
                401,
                "admin API needs 'Authorization: Bearer <token>' (the SPECSWITCH_ADMIN_TOKEN "
                "of the router)",
                "unauthorized",
                headers={"WWW-Authenticate": "Bearer"},
            )
    return await handler(request)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every admin error is OpenAI-style JSON (404, 405, 413 and bugs too), never a traceback."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        message = exc.reason
        if exc.status == 404:
            message = f"no admin route {request.method} {request.path} (see docs/router.md)"
        elif exc.status == 405:
            message = f"{request.method} is not allowed on {request.path}"
        return error_response(exc.status, message, headers=_kept_headers(exc))
    except Exception as exc:
        request.app[CTX].log.exception("event=admin_error path=%s", request.path)
        return error_response(500, f"router error: {type(exc).__name__}", "router_error")


def _kept_headers(exc: web.HTTPException) -> dict[str, str]:
    allow = exc.headers.get("Allow")
    return {"Allow": allow} if allow else {}


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise web.HTTPBadRequest(
            text=orjson.dumps({"error": {"message": f"body is not valid JSON: {exc}",
                                         "type": "invalid_request_error", "code": "bad_json"}}).decode(),
            content_type="application/json",
        ) from exc  # fmt: skip


def state_dict(ctx: RouterContext) -> dict[str, Any]:
    now = monotonic()
    return {
        "policy": policy_as_dict(ctx.get_policy()),
        "groups": [g.snapshot(now) for g in ctx.registry.groups],
        "router": {
            "uptime_s": round(time.monotonic() - ctx.started_at, 3),
            "shutting_down": ctx.shutting_down,
        },
    }


async def get_state(request: web.Request) -> web.Response:
    return _json(state_dict(request.app[CTX]))


async def get_policy(request: web.Request) -> web.Response:
    return _json(policy_as_dict(request.app[CTX].get_policy()))


async def patch_policy(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    changes = await _body(request)
    if not isinstance(changes, dict):
        return error_response(400, "PATCH /admin/policy takes a JSON object of policy keys")
    old = ctx.get_policy()
    try:
        new = updated(old, "policy", changes).validate()
    except ConfigError as exc:
        return error_response(400, f"{exc}; the policy was not changed", "invalid_policy")
    ctx.set_policy(new)
    ctx.log.info(
        "event=policy_changed changes=%s", orjson.dumps(changes).decode()
    )  # next tick applies it
    return _json(policy_as_dict(new))


def _group_or_404(ctx: RouterContext, name: str) -> Any:
    group = ctx.registry.get(name)
    if group is None:
        raise web.HTTPNotFound(
            text=orjson.dumps({"error": {"message": f"no group named {name!r}; known: "
                                         f"{', '.join(ctx.registry.names()) or '(none)'}",
                                         "type": "not_found_error", "code": "no_such_group"}}).decode(),
            content_type="application/json",
        )  # fmt: skip
    return group


async def drain_group(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    group = _group_or_404(ctx, request.match_info["name"])
    group.admin_drained = True
    ctx.log.info("event=group_admin_drained group=%s inflight=%d", group.name, group.inflight)
    return _json(group.snapshot(monotonic()))


async def resume_group(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    group = _group_or_404(ctx, request.match_info["name"])
    group.admin_drained = False
    ctx.log.info("event=group_resumed group=%s", group.name)
    return _json(group.snapshot(monotonic()))


async def add_group(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    body = await _body(request)
    if not isinstance(body, dict) or set(body) != {"name", "spec_url", "baseline_url"}:
        return error_response(400, "POST /admin/groups takes {name, spec_url, baseline_url}")
    try:
        group = ctx.registry.add(
            GroupConfig(str(body["name"]), str(body["spec_url"]), str(body["baseline_url"]))
        )
    except ConfigError as exc:
        return error_response(400, str(exc), "invalid_group")
    except ValueError as exc:
        return error_response(409, str(exc), "group_exists")
    ctx.log.info("event=group_added group=%s", group.name)
    return _json(group.snapshot(monotonic()), status=201)


async def delete_group(request: web.Request) -> web.Response:
    """Drain the group, wait for its in-flight requests, remove it (?wait=false: 202 at once)."""
    ctx = request.app[CTX]
    group = _group_or_404(ctx, request.match_info["name"])
    ctx.log.info("event=group_removing group=%s inflight=%d", group.name, group.inflight)
    removal = asyncio.ensure_future(ctx.registry.remove(group.name))
    ctx.background.add(removal)
    removal.add_done_callback(ctx.background.discard)
    if request.query.get("wait", "true").lower() in ("0", "false", "no"):
        return _json({"name": group.name, "removing": True}, status=202)
    await asyncio.shield(removal)
    ctx.log.info("event=group_removed group=%s", group.name)
    return _json({"name": group.name, "removed": True})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[CTX].metrics.render(),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


async def admin_health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/state", get_state)
    app.router.add_get("/admin/policy", get_policy)
    app.router.add_patch("/admin/policy", patch_policy)
    app.router.add_post("/admin/groups", add_group)
    app.router.add_post("/admin/groups/{name}/drain", drain_group)
    app.router.add_post("/admin/groups/{name}/resume", resume_group)
    app.router.add_delete("/admin/groups/{name}", delete_group)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", admin_health)
