"""Small HTTP helpers shared by the route modules: JSON in/out and SGLang's error shapes."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

JSON = "application/json"
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
}
DONE = b"data: [DONE]\n\n"


class BadRequest(Exception):
    """Input SGLang would refuse with HTTP 400; ``kind`` picks the error shape."""

    def __init__(self, message: str, kind: str = "value") -> None:
        super().__init__(message)
        self.message = message
        # "validation": the request's shape (FastAPI would refuse it before any handler);
        # "value": checked by the route before generation starts;
        # "engine": raised by SGLang's tokenizer manager once generation is under way, so a
        # streaming request gets it as an SSE error event after a 200, not as a 400.
        self.kind = kind


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type=JSON)


def openai_error(
    message: str, status: int = 400, err_type: str = "BadRequestError"
) -> web.Response:
    """SGLang's OpenAI-route error: {"object": "error", "message", "type", "param", "code"}."""
    body = {"object": "error", "message": message, "type": err_type, "param": None, "code": status}
    return json_response(body, status)


def validation_error(message: str) -> web.Response:
    """SGLang's handler for malformed requests (FastAPI RequestValidationError)."""
    return openai_error(message, 400, "Bad Request")


def native_error(message: str, status: int = 400) -> web.Response:
    """SGLang's /generate error for a ValueError: {"error": {"message": ...}}."""
    return json_response({"error": {"message": message}}, status)


def sse_error_response(payload: dict[str, Any]) -> web.Response:
    """A streaming request that failed in the engine: 200, one `data: {"error": ...}` event,
    then `data: [DONE]` (what SGLang's stream generator yields on a ValueError)."""
    body = b"data: " + orjson.dumps({"error": payload}) + b"\n\n" + DONE
    return web.Response(body=body, headers=SSE_HEADERS)


async def read_json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        raise BadRequest("Request body is empty; send a JSON object", "validation")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"JSON decode error: {exc}", "validation") from None
    if not isinstance(data, dict):
        raise BadRequest("Request body must be a JSON object", "validation")
    return data


def opt_int(data: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise BadRequest(f"{key} must be an integer, got {value!r}", "validation")
    return value


def opt_float(data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{key} must be a number, got {value!r}", "validation")
    return float(value)


def stop_list(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(s for s in value if s)
    raise BadRequest("stop must be a string or a list of strings", "validation")
