"""SGLang's OpenAI-compatible API: /v1/chat/completions, /v1/completions, /v1/models.

Streaming chunk sequence as SGLang sends it. Chat: a role chunk (delta role + empty content),
content chunks, a separate finish chunk (empty delta, finish_reason), a usage chunk
(choices []) when stream_options.include_usage, then [DONE]. Completions: content chunks,
the last one carrying finish_reason, then the usage chunk, then [DONE].
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from .httputil import (
    DONE,
    SSE_HEADERS,
    BadRequest,
    json_response,
    openai_error,
    opt_float,
    opt_int,
    read_json,
    sse_error_response,
    stop_list,
    validation_error,
)
from .request import Request, SamplingParams
from .server import SERVER, EmulatedServer
from .tokenizer import encode

# SGLang's DeltaMessage keeps its null fields (role, content, reasoning_content, tool_calls).
EMPTY_DELTA = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}


def chat_prompt(messages: Any) -> str:
    """A plain chat template: one "<|role|>\\ncontent\\n" block per message, then the
    assistant header (what the token count of a chat request is measured on)."""
    if not isinstance(messages, list):
        raise BadRequest("messages: Field required (a list of messages)", "validation")
    if not messages:
        raise BadRequest("Messages cannot be empty.", "value")
    parts: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise BadRequest(f"messages[{i}]: each message needs a string role", "validation")
        content = msg.get("content")
        if isinstance(content, list):
            texts = [p.get("text", "") for p in content if isinstance(p, dict)]
            content = "".join(t for t in texts if isinstance(t, str))
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string or a list", "validation")
        parts.append(f"<|{msg['role']}|>\n{content}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def sampling_from_openai(data: dict[str, Any], n_prompt: int, context: int) -> SamplingParams:
    max_tokens = opt_int(data, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = opt_int(data, "max_tokens")
    if max_tokens is None:
        max_tokens = max(0, context - n_prompt - 1)
    if max_tokens < 0:
        raise BadRequest(f"max_tokens must be at least 0, got {max_tokens}.", "engine")
    n = opt_int(data, "n", 1)
    if n != 1:
        raise BadRequest("n > 1 is not supported by the emulator; send n=1", "value")
    stop_ids = data.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(isinstance(t, int) for t in stop_ids):
        raise BadRequest("stop_token_ids must be a list of integers", "validation")
    temperature = opt_float(data, "temperature", 1.0)
    if temperature < 0:
        raise BadRequest(f"temperature must be non-negative, got {temperature}.", "engine")
    return SamplingParams(
        max_new_tokens=max_tokens,
        temperature=temperature,
        seed=opt_int(data, "seed"),
        stop=stop_list(data.get("stop")),
        stop_token_ids=frozenset(stop_ids),
        ignore_eos=bool(data.get("ignore_eos", False)),
    )


def finish_fields(req: Request) -> tuple[str | None, Any]:
    reason = req.finish_reason
    if reason is None:
        return None, None
    kind = reason.get("type")
    if kind == "stop":
        return "stop", reason.get("matched")
    if kind == "length":
        return "length", None
    return "abort", None


def usage(server: EmulatedServer, req: Request) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.completion_tokens,
        "total_tokens": req.prompt_tokens + req.completion_tokens,
        "prompt_tokens_details": None,
    }
    if server.settings.enable_cache_report and req.cached_tokens > 0:
        out["prompt_tokens_details"] = {"cached_tokens": req.cached_tokens}
    return out


async def _start(request: web.Request, chat: bool) -> tuple[dict[str, Any], Request] | web.Response:
    server: EmulatedServer = request.app[SERVER]
    data: dict[str, Any] = {}
    try:
        data = await read_json(request)
        if chat:
            if "messages" not in data:
                raise BadRequest("messages: Field required", "validation")
            input_ids = encode(chat_prompt(data["messages"]))
        else:
            prompt = data.get("prompt")
            if prompt is None:
                raise BadRequest("prompt: Field required", "validation")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if isinstance(prompt, str):
                input_ids = encode(prompt)
            elif isinstance(prompt, list) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt
            ):
                input_ids = prompt
            else:
                raise BadRequest(
                    "prompt must be a string or a list of token ids (one prompt)", "value"
                )
        params = sampling_from_openai(data, len(input_ids), server.profile.context_length)
        rid = data.get("rid")
        if rid is not None and not isinstance(rid, str):
            raise BadRequest("rid must be a string", "validation")
        prefix = "chatcmpl-" if chat else "cmpl-"
        req = server.new_request(rid or prefix + uuid.uuid4().hex, input_ids, params)
    except BadRequest as exc:
        if exc.kind == "validation":
            return validation_error(exc.message)
        if exc.kind == "engine" and data.get("stream"):
            return sse_error_response(
                {
                    "object": "error",
                    "message": exc.message,
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            )
        return openai_error(exc.message)
    return data, req


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, chat=False)


async def _complete(request: web.Request, chat: bool) -> web.StreamResponse:
    server: EmulatedServer = request.app[SERVER]
    started = await _start(request, chat)
    if isinstance(started, web.Response):
        return started
    data, req = started
    created = int(time.time())
    model = data.get("model") if isinstance(data.get("model"), str) else server.model_name
    if not data.get("stream"):
        async with server.guard(req):
            await server.wait_finished(req)
        reason, matched = finish_fields(req)
        choice: dict[str, Any] = {"index": 0}
        if chat:
            choice["message"] = {
                "role": "assistant",
                "content": req.text() or None,
                "reasoning_content": None,
                "tool_calls": None,
            }
        else:
            choice["text"] = req.text()
        choice.update(logprobs=None, finish_reason=reason, matched_stop=matched)
        body = {
            "id": req.rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage(server, req),
        }
        if chat:
            body["metadata"] = {"weight_version": "default"}
        return json_response(body)

    opts = data.get("stream_options")
    include_usage = server.settings.stream_response_default_include_usage
    if isinstance(opts, dict) and opts.get("include_usage") is not None:
        include_usage = bool(opts.get("include_usage"))
    obj = "chat.completion.chunk" if chat else "text_completion"
    head = (
        b'data: {"id":'
        + orjson.dumps(req.rid)
        + b',"object":"'
        + obj.encode()
        + b'","created":'
        + str(created).encode()
        + b',"model":'
        + orjson.dumps(model)
        + b',"choices":'
    )
    if chat:
        open_content = b'[{"index":0,"delta":{"role":null,"content":'
        close_content = (
            b',"reasoning_content":null,"tool_calls":null},"logprobs":null,'
            b'"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
        )
    else:
        open_content = b'[{"index":0,"text":'
        close_content = (
            b',"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
        )

    resp = web.StreamResponse(headers=SSE_HEADERS)
    try:
        async with server.guard(req):
            await resp.prepare(request)
            if chat:
                await resp.write(
                    head + b'[{"index":0,"delta":{"role":"assistant","content":"",'
                    b'"reasoning_content":null,"tool_calls":null},'
                    b'"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
                )
            sent_chars = 0
            async for n in server.updates(req):
                text = req.text() if req.finished else req.plain_text(n)
                delta = text[sent_chars:]
                sent_chars = len(text)
                if req.finished:
                    reason, matched = finish_fields(req)
                    tail = {"logprobs": None, "finish_reason": reason, "matched_stop": matched}
                    if chat:
                        if delta:
                            await resp.write(
                                head + open_content + orjson.dumps(delta) + close_content
                            )
                        choice = {"index": 0, "delta": EMPTY_DELTA, **tail}
                    else:
                        choice = {"index": 0, "text": delta, **tail}
                    await resp.write(head + orjson.dumps([choice]) + b',"usage":null}\n\n')
                elif delta:
                    await resp.write(head + open_content + orjson.dumps(delta) + close_content)
            if include_usage:
                await resp.write(
                    head + b'[],"usage":' + orjson.dumps(usage(server, req)) + b"}\n\n"
                )
            await resp.write(DONE)
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away; guard() aborted the request
    return resp


async def models(request: web.Request) -> web.Response:
    server: EmulatedServer = request.app[SERVER]
    return json_response(
        {
            "object": "list",
            "data": [
                {
                    "id": server.model_name,
                    "object": "model",
                    "created": int(server.started),
                    "owned_by": "sglang",
                    "root": server.model_name,
                    "max_model_len": server.profile.context_length,
                }
            ],
        }
    )


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
