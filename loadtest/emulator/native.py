"""SGLang's native generation API: POST /generate (streaming and not)."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from .httputil import (
    DONE,
    SSE_HEADERS,
    BadRequest,
    json_response,
    native_error,
    opt_float,
    opt_int,
    read_json,
    sse_error_response,
    stop_list,
    validation_error,
)
from .request import DEFAULT_MAX_NEW_TOKENS, SamplingParams
from .server import SERVER, EmulatedServer
from .tokenizer import encode


def parse_sampling_params(sp: Any, default_max: int | None) -> SamplingParams:
    if sp is None:
        sp = {}
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be a JSON object", "validation")
    max_new = opt_int(sp, "max_new_tokens", default_max)
    temperature = opt_float(sp, "temperature", 1.0)
    if temperature < 0:
        raise BadRequest(f"temperature must be non-negative, got {temperature}.", "engine")
    seed = opt_int(sp, "seed") if sp.get("seed") is not None else sp.get("sampling_seed")
    stop_ids = sp.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(isinstance(t, int) for t in stop_ids):
        raise BadRequest("stop_token_ids must be a list of integers", "validation")
    return SamplingParams(
        max_new_tokens=DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new,
        temperature=temperature,
        seed=seed if isinstance(seed, int) else None,
        stop=stop_list(sp.get("stop")),
        stop_token_ids=frozenset(stop_ids),
        ignore_eos=bool(sp.get("ignore_eos", False)),
    )


def input_ids_of(data: dict[str, Any]) -> list[int]:
    text = data.get("text")
    ids = data.get("input_ids")
    if text is not None and ids is not None:
        raise BadRequest("Either text or input_ids should be provided, not both.", "engine")
    if text is None and ids is None:
        raise BadRequest("Either text, input_ids or input_embeds should be provided.", "engine")
    if text is not None:
        if not isinstance(text, str):
            raise BadRequest("text must be a string (batched requests are not emulated)", "value")
        return encode(text)
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in ids
    ):
        raise BadRequest("input_ids must be a list of integers (one request)", "value")
    return ids


async def generate(request: web.Request) -> web.StreamResponse:
    server: EmulatedServer = request.app[SERVER]
    data: dict[str, Any] = {}
    try:
        data = await read_json(request)
        input_ids = input_ids_of(data)
        params = parse_sampling_params(data.get("sampling_params"), None)
        rid = data.get("rid")
        if rid is not None and not isinstance(rid, str):
            raise BadRequest("rid must be a string (one request)", "value")
        req = server.new_request(rid, input_ids, params)
    except BadRequest as exc:
        if exc.kind == "validation":
            return validation_error(exc.message)
        if exc.kind == "engine" and data.get("stream"):
            return sse_error_response(
                {"message": exc.message, "type": "invalid_request_error", "code": 400}
            )
        return native_error(exc.message)

    draft = server.engine.draft_tokens
    if not data.get("stream"):
        async with server.guard(req):
            await server.wait_finished(req)
        return json_response(
            {"text": req.text(), "output_ids": req.out_ids, "meta_info": req.meta_info(draft)}
        )

    incremental = server.settings.incremental_streaming_output
    resp = web.StreamResponse(headers=SSE_HEADERS)
    try:
        async with server.guard(req):
            await resp.prepare(request)
            sent = sent_chars = 0
            async for n in server.updates(req):
                if req.finished:
                    meta = req.meta_info(draft)
                else:
                    meta = {
                        "id": req.rid,
                        "finish_reason": None,
                        "prompt_tokens": req.prompt_tokens,
                        "completion_tokens": n,
                        "cached_tokens": req.cached_tokens,
                    }
                full = req.text() if req.finished else req.plain_text(n)
                if incremental:
                    ids = req.out_ids[sent:n]
                    text = full[sent_chars:]
                else:
                    ids = req.out_ids[:n]
                    text = full
                sent, sent_chars = n, len(full)
                payload = {"text": text, "output_ids": ids, "meta_info": meta}
                await resp.write(b"data: " + orjson.dumps(payload) + b"\n\n")
            await resp.write(DONE)
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away; guard() aborted the request
    return resp


def add_routes(app: web.Application) -> None:
    app.router.add_post("/generate", generate)
