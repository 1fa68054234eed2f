"""THE hot path: client request -> route -> upstream -> relay, with accounting.

It only reads state (mode, health, in-flight counts) and bumps in-flight counters; nothing
here waits on the control plane. The body is parsed once (orjson) and forwarded unchanged
but for the request id spliced in as SGLang's `rid` when it has none (`with_rid`);
SSE responses are relayed chunk by chunk as they arrive. A client that goes away cancels
this handler (the runner has handler_cancellation on), which closes the upstream response:
SGLang sees the connection drop and aborts the request.
"""

from __future__ import annotations

import os
from collections import deque
from time import monotonic, perf_counter
from typing import Any

import orjson
from aiohttp import web

from . import migration
from .context import CTX, RouterContext
from .errors import error_response, openai_error_from_upstream, sse_error
from .selection import RequestInfo, Route, Usage
from .upstream import BodyError, ConnectError, DisconnectedError, Response

CLIENT_PATHS_POST = ("/v1/chat/completions", "/v1/completions", "/generate")
CLIENT_PATHS_GET = ("/v1/models", "/get_model_info", "/model_info")
_SKIP_REQUEST_HEADERS = frozenset(
    h.lower()
    for h in (
        "Host", "Content-Length", "Connection", "Keep-Alive", "Proxy-Authenticate",
        "Proxy-Authorization", "TE", "Trailers", "Transfer-Encoding", "Upgrade",
        "Accept-Encoding", "X-Request-Id", "Expect",
    )
)  # fmt: skip


def _forward_headers(headers: Any, rid: str) -> dict[str, str]:
    out = {k: v for k, v in headers.items() if k.lower() not in _SKIP_REQUEST_HEADERS}
    out["X-Request-Id"] = rid
    return out


def with_rid(body: bytes, body_dict: dict[str, Any], rid: str) -> bytes:
    """The body with `"rid": <rid>` spliced in first, every other byte as it was.

    Left unchanged when the request is a batch or asks for n > 1 (SGLang then wants a list
    of ids) or when the body does not start with `{`.
    """
    n = body_dict.get("n")
    if (n is not None and n != 1) or _is_batch(body_dict):
        return body
    start = body.find(b"{")
    if start < 0 or body[:start].strip():
        return body
    rest = body[start + 1 :]
    sep = b"" if rest.lstrip().startswith(b"}") else b","
    return body[: start + 1] + b'"rid":' + orjson.dumps(rid) + sep + rest


def _is_batch(body: dict[str, Any]) -> bool:
    for key in ("text", "prompt"):
        if isinstance(body.get(key), list):
            return not all(isinstance(x, int) for x in body[key])  # a list of ids is one prompt
    ids = body.get("input_ids")
    return isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    try:
        return await _proxy(request)
    except web.HTTPException as exc:  # aiohttp's own (e.g. 413 body too large): OpenAI shape
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.text or exc.reason, str(exc.status))
    except Exception as exc:  # a bug must not leak a traceback to the client
        request.app[CTX].log.exception("event=proxy_error path=%s", request.path)
        return error_response(500, f"router error: {type(exc).__name__}", "router_error")


async def not_found_handler(request: web.Request) -> web.Response:
    """Anything the client listener does not serve, as an OpenAI-style error."""
    if request.path in CLIENT_PATHS_POST or request.path in CLIENT_PATHS_GET:
        return error_response(405, f"{request.method} is not allowed on {request.path}")
    return error_response(404, f"no route {request.method} {request.path} on this router")


async def _proxy(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    t0 = perf_counter()
    body = await request.read()
    parsed: Any = None
    if body:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            ctx.metrics.rejected.labels("bad_request").inc()
            return error_response(400, f"the request body is not valid JSON: {exc}", "bad_json")
    body_dict = parsed if isinstance(parsed, dict) else None
    body_rid = body_dict.get("rid") if body_dict is not None else None
    rid = (
        request.headers.get("X-Request-Id")
        or (body_rid if isinstance(body_rid, str) and body_rid else None)
        or os.urandom(16).hex()
    )
    if body_rid is None and body_dict is not None and ctx.config.proxy.request_id_to_rid:
        body = with_rid(body, body_dict, rid)
    info = RequestInfo(request.path, body_dict, request.headers, rid)
    route = ctx.selector.choose(ctx.registry.groups, info)
    if route is None:
        return _unavailable(ctx, rid)
    headers = _forward_headers(request.headers, rid)
    path = request.raw_path
    client = ctx.upstream
    assert client is not None
    upstream: Response | None = None
    for attempt in range(2):
        pool = route.pool
        pool.acquire()
        t_send = perf_counter()
        try:
            upstream = await client.request(request.method, pool.url, path, headers, body)
            break
        except (ConnectError, DisconnectedError) as exc:
            _release(ctx, route, info, None, "failed")
            _note_connect_failure(ctx, pool, exc)
            retry = (
                ctx.selector.choose(ctx.registry.groups, info, avoid=(pool,))
                if attempt == 0
                else None
            )
            if retry is None:
                return error_response(
                    502,
                    f"upstream {route.group.name}/{pool.pool} unreachable: {type(exc).__name__}",
                    "upstream_unreachable",
                    headers={"X-Request-Id": rid},
                )
            ctx.metrics.retries.labels(route.group.name, pool.pool).inc()
            route = retry
        except BodyError as exc:  # a malformed response head: not retried (it may have run)
            _release(ctx, route, info, None, "failed")
            return error_response(
                502,
                f"upstream {route.group.name}/{pool.pool} sent a bad response: {exc}",
                "upstream_bad_response",
                headers={"X-Request-Id": rid},
            )
        except BaseException:
            _release(ctx, route, info, None, "cancelled")
            raise
    assert upstream is not None
    pre_send = t_send - t0
    out_headers = {
        "X-Request-Id": rid,
        "X-Specswitch-Group": route.group.name,
        "X-Specswitch-Pool": route.pool.pool,
    }
    ctype = upstream.content_type or "application/octet-stream"
    encoding = upstream.headers.get("content-encoding")
    if encoding:  # bodies are relayed as they are: keep their encoding visible
        out_headers["Content-Encoding"] = encoding
    if ctype.startswith("text/event-stream"):
        if info.path == "/generate" and ctx.config.policy.migrate:  # docs/kv-aware.md
            if plan := migration.plan(body_dict):
                return await migration.relay(ctx, request, route, info, upstream, out_headers,
                                             t0, pre_send, plan, headers)  # fmt: skip
        return await _relay_stream(ctx, request, route, info, upstream, out_headers, ctype, t0,
                                   pre_send)  # fmt: skip
    return await _relay_whole(ctx, route, info, upstream, out_headers, ctype, t0, pre_send)


async def _relay_stream(
    ctx: RouterContext,
    request: web.Request,
    route: Route,
    info: RequestInfo,
    upstream: Response,
    out_headers: dict[str, str],
    ctype: str,
    t0: float,
    pre_send: float,
) -> web.StreamResponse:
    out_headers["Content-Type"] = ctype
    out_headers["Cache-Control"] = "no-cache"
    resp = web.StreamResponse(status=upstream.status, headers=out_headers)
    tail: deque[bytes] = deque()
    tail_len = 0
    tail_max = ctx.config.proxy.usage_tail_bytes
    outcome = "cancelled"
    complete = False
    read = upstream.read
    try:
        await resp.prepare(request)
        failure: BaseException | None = None
        try:
            chunk = await read()
        except BodyError as exc:
            chunk, failure = b"", exc
        if chunk:
            t_up = perf_counter()
            await resp.write(chunk)
            t_out = perf_counter()
            ctx.metrics.ttft_by_pool[route.pool.pool].observe(t_out - t0)
            ctx.metrics.overhead.observe(pre_send + (t_out - t_up))
        while chunk:
            tail.append(chunk)
            tail_len += len(chunk)
            while tail_len > tail_max and len(tail) > 1:
                tail_len -= len(tail.popleft())
            try:
                chunk = await read()
            except BodyError as exc:
                failure = exc
                break
            if chunk:
                await resp.write(chunk)
        if failure is not None:
            # The upstream broke after the stream started: say so in-band, then [DONE].
            outcome = "failed"
            ctx.log.warning(
                "event=upstream_failed_midstream rid=%s group=%s pool=%s error=%r",
                info.request_id, route.group.name, route.pool.pool, failure,
            )  # fmt: skip
            await resp.write(sse_error(f"upstream failed mid-stream: {type(failure).__name__}"))
            await resp.write_eof()
            return resp
        await resp.write_eof()
        outcome = _status_outcome(upstream.status)
        complete = True
        return resp
    except ConnectionResetError:  # our client went away while we wrote to it
        return resp
    finally:
        upstream.close()  # keep-alive reuse when complete; aborts the upstream request otherwise
        usage = _usage_from_sse(b"".join(tail)) if complete and tail else None
        _release(ctx, route, info, usage, outcome)


async def _relay_whole(
    ctx: RouterContext,
    route: Route,
    info: RequestInfo,
    upstream: Response,
    out_headers: dict[str, str],
    ctype: str,
    t0: float,
    pre_send: float,
) -> web.StreamResponse:
    outcome = "cancelled"
    usage: Usage | None = None
    try:
        try:
            data = await upstream.read_all()
        except BodyError as exc:
            outcome = "failed"
            return error_response(
                502,
                f"upstream {route.group.name}/{route.pool.pool} failed before the response "
                f"was complete: {type(exc).__name__}",
                "upstream_failed",
                headers=out_headers,
            )
        t_up = perf_counter()
        outcome = _status_outcome(upstream.status)
        if upstream.status >= 400:  # SGLang's error shapes -> the OpenAI shape (rare path)
            data = openai_error_from_upstream(upstream.status, data, ctype)
            ctype = "application/json"
            out_headers.pop("Content-Encoding", None)
        elif "json" in ctype:
            usage = _usage_from_json(data)
        resp = web.Response(status=upstream.status, body=data, headers=out_headers)
        resp.headers["Content-Type"] = ctype
        ctx.metrics.overhead.observe(pre_send + (perf_counter() - t_up))
        return resp
    finally:
        upstream.close()
        _release(ctx, route, info, usage, outcome)


def _release(
    ctx: RouterContext, route: Route, info: RequestInfo, usage: Usage | None, outcome: str
) -> None:
    pool = route.pool
    drained = pool.release(monotonic())
    if drained is not None:
        ctx.metrics.drain_by_pool[pool.pool].observe(drained)
        ctx.log.info(
            "event=drain_done group=%s pool=%s drain_s=%.3f", route.group.name, pool.pool, drained
        )
    ctx.metrics.count_request(route.group.name, pool.pool, outcome)
    try:
        ctx.selector.on_complete(route, info, usage, outcome == "ok")
    except Exception:  # a hook bug must not break the data plane
        ctx.log.exception("event=selector_hook_error rid=%s", info.request_id)
    if ctx.access_log and ctx.log.isEnabledFor(20):
        ctx.log.info(
            "event=request rid=%s path=%s group=%s pool=%s reason=%s outcome=%s",
            info.request_id, info.path, route.group.name, pool.pool, route.reason, outcome,
        )  # fmt: skip


def _note_connect_failure(ctx: RouterContext, pool: Any, exc: BaseException) -> None:
    """Passive health: a refused connection marks the server unhealthy at once."""
    pool.last_error = f"{type(exc).__name__}: {exc}"[:200]
    if isinstance(exc, ConnectError) and pool.healthy:
        pool.healthy = False
        pool.oks = 0
        pool.fails = ctx.config.health.unhealthy_after
        ctx.log.warning(
            "event=server_unhealthy group=%s pool=%s url=%s reason=connect_failed error=%r",
            pool.group_name, pool.pool, pool.url, pool.last_error,
        )  # fmt: skip


def _status_outcome(status: int) -> str:
    if status < 400:
        return "ok"
    return "http_4xx" if status < 500 else "http_5xx"


def _unavailable(ctx: RouterContext, rid: str) -> web.Response:
    ctx.metrics.rejected.labels("no_group").inc()
    retry_after = ctx.config.proxy.retry_after_s
    return error_response(
        503,
        "no GPU group can serve right now (all drained or unhealthy); retry later",
        "no_group_available",
        headers={"Retry-After": str(retry_after), "X-Request-Id": rid},
    )


# ------------------------------------------------------------------ usage extraction


def _usage_from_obj(obj: Any) -> Usage | None:
    if not isinstance(obj, dict):
        return None
    usage = obj.get("usage")
    if isinstance(usage, dict) and "completion_tokens" in usage:
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return Usage(usage.get("prompt_tokens"), usage.get("completion_tokens"), cached)
    meta = obj.get("meta_info")
    if isinstance(meta, dict) and "completion_tokens" in meta:
        return Usage(
            meta.get("prompt_tokens"), meta.get("completion_tokens"), meta.get("cached_tokens")
        )
    return None


def _usage_from_json(data: bytes) -> Usage | None:
    try:
        return _usage_from_obj(orjson.loads(data))
    except orjson.JSONDecodeError:
        return None


def _usage_from_sse(tail: bytes, max_events: int = 4) -> Usage | None:
    """The usage of a finished stream: the chat usage chunk or /generate's last meta_info."""
    seen = 0
    for line in reversed(tail.split(b"\n")):
        if not line.startswith(b"data: {"):
            continue
        try:
            usage = _usage_from_obj(orjson.loads(line[6:]))
        except orjson.JSONDecodeError:
            continue
        if usage is not None:
            return usage
        seen += 1
        if seen >= max_events:
            break
    return None


async def health_handler(request: web.Request) -> web.Response:
    """200 when at least one group can serve (and the router is not shutting down)."""
    ctx = request.app[CTX]
    serving = [g.name for g in ctx.registry.groups if g.can_serve()]
    ok = bool(serving) and not ctx.shutting_down
    return web.json_response(
        {"status": "ok" if ok else "unavailable", "groups_serving": serving},
        status=200 if ok else 503,
    )
