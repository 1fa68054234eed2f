"""The aiohttp application of one emulated server: routes plus SGLang-style 404/500s."""

from __future__ import annotations

import logging

from aiohttp import web

from . import info, metrics, native, openai_api
from .httputil import openai_error
from .server import SERVER, EmulatedServer

log = logging.getLogger("specswitch.emulator")


@web.middleware
async def _errors(request: web.Request, handler):  # type: ignore[no-untyped-def]
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status == 404:
            return web.json_response({"detail": "Not Found"}, status=404)
        if exc.status == 405:
            return web.json_response({"detail": "Method Not Allowed"}, status=405)
        raise
    except (ConnectionResetError, TimeoutError):
        raise
    except Exception as exc:  # never a traceback to the client
        log.exception("event=emulator_handler_failed path=%s", request.path)
        return openai_error(f"Internal server error: {exc}", 500, "InternalServerError")


def build_app(server: EmulatedServer) -> web.Application:
    app = web.Application(middlewares=[_errors], client_max_size=64 * 1024 * 1024)
    app[SERVER] = server
    native.add_routes(app)
    openai_api.add_routes(app)
    info.add_routes(app)
    if server.settings.enable_metrics:
        metrics.add_routes(app)
    return app
