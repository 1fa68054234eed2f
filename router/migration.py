"""Migration of long native /generate streams off a draining pool, stitched into one stream.

Only streams whose continuation is exact are eligible (`plan`): POST /generate, stream=true,
the prompt as `input_ids` (the router cannot re-tokenise text exactly), greedy decoding
(explicit temperature 0 or top_k 1: SGLang's default temperature is 1.0), an explicit
`max_new_tokens`, no stop strings (SGLang matches them on the output only, so one that spans
the migration point would be missed), no penalties, no logprobs, n = 1, and only sampling keys
known to be safe (anything else, e.g. regex/json_schema whose grammar state depends on the
output, makes the stream ineligible). The policy key `migrate` turns it on.

The relay forwards each complete SSE event of such a stream unchanged while it tracks the
output ids and text. When the stream's pool is draining because of a switch that happened after
the stream started, the remaining generation is at least `migrate_min_remaining_tokens`, and
the group's active pool is healthy, it sends the active pool a new /generate with
input_ids = prompt + generated ids, max_new_tokens (and min_new_tokens) reduced by the
generated count and a new rid, and waits for that stream's first content event. Only then
does it close the old connection (SGLang aborts the request; nothing of it reaches the
client) and move the request's in-flight count; if the new pool fails first, the stream simply
carries on where it was. Events of the new stream are rewritten so that the client sees one
stream: cumulative text/output_ids prefixed with what was already sent (or deltas when the
old server streams deltas), meta_info with the original id, prompt_tokens, cached_tokens,
total completion_tokens and a `length` finish reason carrying the original max_new_tokens.
docs/kv-aware.md ("Migration") lists which bytes can still differ and why.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from time import monotonic, perf_counter
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from .errors import sse_error
from .selection import RequestInfo, Route, Usage
from .state import ACTIVE
from .upstream import BodyError, ConnectError, DisconnectedError, Response

if TYPE_CHECKING:
    from .context import RouterContext

_TOP_KEYS = frozenset({"input_ids", "sampling_params", "stream", "rid", "return_logprob"})
# Sampling keys whose meaning does not depend on where generation (re)starts.
_SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p",
        "stop_token_ids", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
        "no_stop_trim", "n", "stop", "frequency_penalty", "presence_penalty",
        "repetition_penalty",
    }
)  # fmt: skip
_NEUTRAL = {"frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1, "n": 1}
SEP = b"\n\n"
# How long a client stream may wait for the active pool's first event (its prefill of the
# prompt + generated ids) before the migration is given up and the stream stays put.
FIRST_EVENT_TIMEOUT_S = 10.0


@dataclass(slots=True)
class Plan:
    """An eligible request: its parsed body, prompt ids and output cap."""

    body: dict[str, Any]
    prompt_ids: list[int]
    max_new_tokens: int


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def plan(body: dict[str, Any] | None) -> Plan | None:
    """The migration plan of a /generate body, or None when migration could not be exact."""
    if body is None or body.get("stream") is not True or not _TOP_KEYS.issuperset(body):
        return None
    if body.get("return_logprob") or not isinstance(body.get("rid", ""), str):
        return None
    ids = body.get("input_ids")
    if not isinstance(ids, list) or not ids or not all(_is_int(t) for t in ids):
        return None
    sp = body.get("sampling_params")
    if not isinstance(sp, dict) or not _SAMPLING_KEYS.issuperset(sp):
        return None
    max_new = sp.get("max_new_tokens")
    if not _is_int(max_new) or max_new <= 0 or sp.get("stop"):
        return None
    for key, neutral in _NEUTRAL.items():
        if sp.get(key, neutral) != neutral:
            return None
    min_new = sp.get("min_new_tokens", 0)
    if not _is_int(min_new):
        return None
    if not (sp.get("temperature") == 0 or sp.get("top_k") == 1):
        return None  # SGLang samples at temperature 1.0 by default
    return Plan(body, ids, max_new)


@dataclass(slots=True)
class Stitch:
    """What the client has received, and the current upstream's output relative to it."""

    plan: Plan
    started: float  # monotonic time the current upstream request was sent
    t0: float  # perf_counter at the client request's arrival (for e2e_latency)
    client_mode: str | None = None  # "cum" | "inc": how the first server streams
    base_ids: list[int] = field(default_factory=list)  # output before the current upstream
    base_text: str = ""
    up_ids: list[int] = field(default_factory=list)  # the current upstream's cumulative output
    up_text: str = ""
    migrations: int = 0
    orig_meta: dict[str, Any] = field(default_factory=dict)  # id, prompt/cached tokens
    finished: bool = False  # a finish_reason was seen
    pending: bytes | None = None  # the latest cumulative event, not parsed yet
    stay: bool = False  # a migration attempt failed: this stream finishes where it is
    opaque: bool = False  # an event we cannot follow (error, odd shape): never migrate
    final_usage: Usage | None = None

    @property
    def sent_count(self) -> int:
        return len(self.base_ids) + len(self.up_ids)

    def on_event(self, ev: bytes) -> bytes:
        """One complete SSE event (without its separator) -> the bytes for the client."""
        raw = ev + SEP
        if not ev.startswith(b"data:"):
            return raw
        payload = ev[5:].strip()
        if payload == b"[DONE]":
            return raw
        if self.migrations == 0 and self.client_mode == "cum" and not self.opaque:
            # A cumulative event holds the whole output so far: parse only the latest, when
            # a decision needs it (`sync`), not every event of a long stream.
            self.pending = payload
            return raw
        return self._apply(payload, raw)

    def sync(self) -> None:
        """Fold in the latest cumulative event not parsed yet."""
        if self.pending is not None:
            payload, self.pending = self.pending, None
            self._apply(payload, b"")

    def _apply(self, payload: bytes, raw: bytes) -> bytes:
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.opaque = True
            return raw
        ids = obj.get("output_ids") if isinstance(obj, dict) else None
        text = obj.get("text") if isinstance(obj, dict) else None
        meta = obj.get("meta_info") if isinstance(obj, dict) else None
        ct = meta.get("completion_tokens") if isinstance(meta, dict) else None
        if not (isinstance(ids, list) and isinstance(text, str) and _is_int(ct)):
            self.opaque = True  # e.g. {"error": ...}: passed through, no migration after it
            return raw
        assert isinstance(meta, dict)
        prev_n, prev_text = len(self.up_ids), self.up_text
        if len(ids) == ct:  # cumulative (or the first event, where both readings agree)
            if not text.startswith(prev_text):
                self.opaque = True
            d_ids, d_text = ids[prev_n:], text[len(prev_text) :]
            self.up_ids, self.up_text = ids, text
            mode = "cum"
        elif ct == prev_n + len(ids):  # deltas
            d_ids, d_text = ids, text
            self.up_ids.extend(ids)
            self.up_text = prev_text + text
            mode = "inc"
        else:
            self.opaque = True
            return raw
        if meta.get("finish_reason") is not None:
            self.finished = True
        if self.migrations == 0:
            if prev_n > 0 and self.client_mode is None:
                self.client_mode = mode
            for key in ("id", "prompt_tokens", "cached_tokens"):
                if key in meta:
                    self.orig_meta[key] = meta[key]
            if self.finished:
                self.final_usage = Usage(meta.get("prompt_tokens"), ct, meta.get("cached_tokens"))
            return raw
        if self.client_mode == "cum":
            obj["text"] = self.base_text + self.up_text
            obj["output_ids"] = self.base_ids + self.up_ids
        else:
            obj["text"], obj["output_ids"] = d_text, d_ids
        meta.update(self.orig_meta)
        meta["completion_tokens"] = self.sent_count
        if "e2e_latency" in meta:  # the router's view: since the client request arrived
            meta["e2e_latency"] = perf_counter() - self.t0
        reason = meta.get("finish_reason")
        if isinstance(reason, dict) and reason.get("type") == "length" and "length" in reason:
            reason["length"] = self.plan.max_new_tokens
        if self.finished:
            self.final_usage = Usage(
                meta.get("prompt_tokens"), self.sent_count, meta.get("cached_tokens")
            )
        return b"data: " + orjson.dumps(obj) + SEP

    def continuation(self, rid: str) -> bytes:
        """The body of the request that continues this stream elsewhere."""
        self.sync()
        body = dict(self.plan.body)
        done = self.sent_count
        sp = dict(body["sampling_params"])
        sp["max_new_tokens"] = self.plan.max_new_tokens - done
        if "min_new_tokens" in sp:
            sp["min_new_tokens"] = max(0, sp["min_new_tokens"] - done)
        body["sampling_params"] = sp
        body["input_ids"] = self.plan.prompt_ids + self.base_ids + self.up_ids
        body["rid"] = rid
        return orjson.dumps(body)

    def rebase(self, now: float) -> None:
        """The new upstream took over: what was sent becomes the base."""
        self.sync()
        self.base_ids = self.base_ids + self.up_ids
        self.base_text = self.base_text + self.up_text
        self.up_ids, self.up_text = [], ""
        self.migrations += 1
        self.started = now


def wanted(ctx: RouterContext, st: Stitch, route: Route) -> bool:
    """Should this stream move now? Cheap first test: its pool is still active."""
    pool = route.pool
    if pool.state == ACTIVE or st.stay:
        return False
    st.sync()
    if st.opaque or st.finished or st.client_mode is None:
        return False
    policy = ctx.config.policy
    group = route.group
    if not policy.migrate or group.last_switch <= st.started:
        return False
    if st.plan.max_new_tokens - st.sent_count < policy.migrate_min_remaining_tokens:
        return False
    target = group.pools[group.mode]
    return target is not pool and target.healthy and not (group.admin_drained or group.removing)


async def relay(
    ctx: RouterContext,
    request: web.Request,
    route: Route,
    info: RequestInfo,
    upstream: Response,
    out_headers: dict[str, str],
    t0: float,
    pre_send: float,
    plan_: Plan,
    fwd_headers: dict[str, str],
) -> web.StreamResponse:
    """proxy._relay_stream for an eligible /generate stream, with migration."""
    from .proxy import _release, _status_outcome  # proxy imports this module

    resp = web.StreamResponse(status=upstream.status, headers=out_headers)
    st = Stitch(plan_, monotonic() - (perf_counter() - t0), t0)
    outcome = "cancelled"
    first = True
    buf = b""
    try:
        await resp.prepare(request)
        while True:
            try:
                chunk = await upstream.read()
            except BodyError as exc:
                outcome = "failed"
                ctx.log.warning(
                    "event=upstream_failed_midstream rid=%s group=%s pool=%s error=%r",
                    info.request_id, route.group.name, route.pool.pool, exc,
                )  # fmt: skip
                await resp.write(sse_error(f"upstream failed mid-stream: {type(exc).__name__}"))
                break
            if not chunk:
                if buf:
                    await resp.write(buf)
                outcome = _status_outcome(upstream.status)
                break
            buf += chunk
            while True:
                end = buf.rfind(SEP)
                if end < 0:
                    break
                events, buf = buf[:end].split(SEP), buf[end + 2 :]
                t_up = perf_counter()
                await resp.write(b"".join([st.on_event(ev) for ev in events]))
                if first:
                    first = False
                    t_out = perf_counter()
                    ctx.metrics.ttft_by_pool[route.pool.pool].observe(t_out - t0)
                    ctx.metrics.overhead.observe(pre_send + (t_out - t_up))
                if not wanted(ctx, st, route):
                    break
                moved = await _migrate(ctx, request, route, info, st, fwd_headers)
                if moved is None:
                    st.stay = True  # stay here for good: no retry storm against a bad pool
                    break
                upstream.close()  # aborts the old request; nothing more of it is read
                route, upstream, buf = moved
        await resp.write_eof()
        st.sync()  # the final usage, for the selector's accounting
        return resp
    except ConnectionResetError:  # our client went away while we wrote to it
        return resp
    finally:
        upstream.close()
        _release(ctx, route, info, st.final_usage if outcome == "ok" else None, outcome)


async def _migrate(
    ctx: RouterContext,
    request: web.Request,
    old: Route,
    info: RequestInfo,
    st: Stitch,
    fwd_headers: dict[str, str],
) -> tuple[Route, Response, bytes] | None:
    """Start the continuation on the active pool; commit once its first event arrived.

    Returns the new route, its response and the bytes read from it (to be relayed), or None
    when the new pool failed (the stream stays where it was; nothing was sent to the client).
    """
    group = old.group
    target = group.pools[group.mode]
    new = Route(group, target, "migrated")
    rid = f"{info.request_id}-m{st.migrations + 1}"
    headers = dict(fwd_headers)
    headers["X-Request-Id"] = rid
    client = ctx.upstream
    assert client is not None
    from .proxy import _note_connect_failure  # proxy imports this module

    target.acquire()
    up: Response | None = None
    t_send = perf_counter()
    try:
        # The client's stream waits meanwhile (the old pool's events stay buffered): bounded.
        async with asyncio.timeout(FIRST_EVENT_TIMEOUT_S):
            up = await client.request("POST", target.url, request.raw_path, headers,
                                      st.continuation(rid))  # fmt: skip
            head = b""
            if up.status == 200 and up.content_type.startswith("text/event-stream"):
                while SEP not in head:
                    chunk = await up.read()
                    if not chunk:
                        break
                    head += chunk
        ok = head.startswith(b"data: {") and b'"output_ids"' in head.partition(SEP)[0]
        if not ok:
            raise BodyError(f"no content event (status {up.status}): {head[:200]!r}")
    except (ConnectError, DisconnectedError, BodyError, TimeoutError) as exc:
        if up is not None:
            up.close()
        _leave(ctx, new, info)
        if isinstance(exc, ConnectError | DisconnectedError):
            _note_connect_failure(ctx, target, exc)
        ctx.log.warning(
            "event=migration_failed rid=%s group=%s from=%s to=%s error=%r",
            info.request_id, group.name, old.pool.pool, target.pool, exc,
        )  # fmt: skip
        return None
    except BaseException:
        if up is not None:
            up.close()
        _leave(ctx, new, info)
        raise
    _leave(ctx, old, info)
    try:  # the selector's per-request accounting (KV tickets) follows the request
        ctx.selector.on_moved(old, new, info)
    except Exception:  # a hook bug must not break the data plane
        ctx.log.exception("event=selector_hook_error rid=%s", info.request_id)
    ctx.metrics.migrations.labels(group.name, old.pool.pool, target.pool).inc()
    ctx.log.info(
        "event=migrated rid=%s group=%s from=%s to=%s generated=%d remaining=%d wait_s=%.3f",
        info.request_id, group.name, old.pool.pool, target.pool, st.sent_count,
        st.plan.max_new_tokens - st.sent_count, perf_counter() - t_send,
    )  # fmt: skip
    st.rebase(monotonic())
    return new, up, head


def _leave(ctx: RouterContext, route: Route, info: RequestInfo) -> None:
    """The request no longer runs on `route.pool`: in-flight count (maybe ending a drain)."""
    pool = route.pool
    drained = pool.release(monotonic())
    if drained is not None:
        ctx.metrics.drain_by_pool[pool.pool].observe(drained)
        ctx.log.info(
            "event=drain_done group=%s pool=%s drain_s=%.3f", route.group.name, pool.pool, drained
        )
