"""OpenAI-style errors for clients: {"error": {"message", "type", "code"}}, never a traceback."""

from __future__ import annotations

import orjson
from aiohttp import web

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "upstream_timeout",
}


def error_body(status: int, message: str, code: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": _TYPES.get(status, "server_error"),
                "code": code or str(status),
            }
        }
    )


def error_response(
    status: int,
    message: str,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(status, message, code),
        content_type="application/json",
        headers=headers,
    )


def openai_error_from_upstream(status: int, data: bytes, ctype: str) -> bytes:
    """An upstream error body (status >= 400) in the OpenAI shape the router promises.

    SGLang's OpenAI layer answers `{"object": "error", "message", "type", "param", "code"}`
    and a crash may be plain text; both become `{"error": {"message", "type", "code"}}` with
    the message kept. A body already in the OpenAI shape is returned as it is.
    """
    obj = None
    if "json" in ctype:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        return data
    if isinstance(obj, dict) and isinstance(obj.get("message"), str):
        message = obj["message"]
    else:
        message = data[:2000].decode("utf-8", "replace").strip() or f"HTTP {status}"
    return error_body(status, message, "upstream_" + str(status))


def sse_error(message: str, code: str = "upstream_error") -> bytes:
    """A mid-stream failure: one SSE error event, then [DONE] (what SGLang itself sends)."""
    return b"data: " + error_body(502, message, code) + b"\n\ndata: [DONE]\n\n"
