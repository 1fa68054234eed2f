"""One emulated SGLang server: its engine, its settings and its aiohttp app/listener."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from .engine import Engine
from .gpu import SharedGpu
from .httputil import BadRequest
from .profile import PoolProfile, Profile
from .request import Request as GenRequest
from .request import SamplingParams

log = logging.getLogger("specswitch.emulator")

VERSION = "0.5.5"


@dataclass(frozen=True)
class ServerSettings:
    """Server flags that change the API's behaviour (SGLang names)."""

    enable_metrics: bool = True
    incremental_streaming_output: bool = False
    enable_cache_report: bool = True
    stream_response_default_include_usage: bool = False


class EmulatedServer:
    """A pool's server: engine + HTTP listener (restartable on the same port)."""

    def __init__(
        self,
        pool_name: str,
        profile: Profile,
        engine: Engine,
        settings: ServerSettings,
        *,
        host: str,
        port: int,
        speedup: float,
        gpu: SharedGpu | None = None,
    ) -> None:
        self.pool_name = pool_name
        self.profile = profile
        self.pool: PoolProfile = profile.pool(pool_name)
        self.engine = engine
        self.settings = settings
        self.host = host
        self.port = port
        self.speedup = speedup
        self.gpu = gpu
        self.model_name = profile.model_name
        self.started = time.time()
        self._runner: web.AppRunner | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    # ---- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        from .app import build_app

        if self._runner is not None:
            return
        if self._stopped:
            self.engine.reset()  # a restarted server starts cold, like a new process
        runner = web.AppRunner(build_app(self), handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True, backlog=4096)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        if self.port == 0:
            server = site._server
            assert server is not None and server.sockets  # type: ignore[union-attr]
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.engine.enabled = True
        self._runner = runner
        log.info("event=emulator_server_listening pool=%s url=%s", self.pool_name, self.url)

    async def stop(self) -> None:
        """Stop listening; requests in flight are aborted (like killing the process)."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self.engine.abort_all()
        self.engine.enabled = False
        self._stopped = True
        await runner.cleanup()
        log.info("event=emulator_server_stopped pool=%s", self.pool_name)

    # ---- requests ----------------------------------------------------------------------
    def new_request(
        self, rid: str | None, input_ids: list[int], params: SamplingParams
    ) -> GenRequest:
        """Validate like SGLang's tokenizer manager, then queue the request."""
        if not self.engine.enabled:
            raise BadRequest("The server is shutting down", "engine")
        n = len(input_ids)
        if n == 0:
            raise BadRequest("The input is empty; send text or input_ids", "engine")
        context = self.profile.context_length
        if n >= context:
            raise BadRequest(
                f"The input ({n} tokens) is longer than the model's context length "
                f"({context} tokens).",
                "engine",
            )
        limit = self.engine.max_req_input_len  # also bounded by the KV pool
        if n > limit:
            raise BadRequest(
                f"Input length ({n} tokens) exceeds the maximum allowed length "
                f"({limit} tokens). Use a shorter input or enable --allow-auto-truncate.",
                "engine",
            )
        if params.max_new_tokens < 0:
            raise BadRequest(
                f"max_new_tokens must be at least 0, got {params.max_new_tokens}.", "engine"
            )
        if n + params.max_new_tokens > self.profile.context_length:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.profile.context_length} tokens. You requested a total of "
                f"{n + params.max_new_tokens} tokens: {n} tokens from the input messages and "
                f"{params.max_new_tokens} tokens for the completion. Please reduce the number "
                f"of tokens in the input messages or the completion to fit within the limit.",
                "engine",
            )
        req = GenRequest(rid or uuid.uuid4().hex, input_ids, params)
        try:
            self.engine.submit(req)
        except ValueError as exc:
            raise BadRequest(str(exc), "engine") from None
        return req

    def abort(self, req: GenRequest) -> None:
        if not req.finished:
            self.engine.abort(req.rid)

    async def updates(self, req: GenRequest) -> AsyncIterator[int]:
        """Yield the output length each time new tokens arrive (and once when finished)."""
        sent = -1
        event = req.event
        while True:
            await event.wait()
            event.clear()
            n = len(req.out_ids)
            if req.finished:
                yield n
                return
            if n != sent:
                sent = n
                yield n

    async def wait_finished(self, req: GenRequest) -> None:
        event = req.event
        while not req.finished:
            await event.wait()
            event.clear()

    @contextlib.asynccontextmanager
    async def guard(self, req: GenRequest) -> AsyncIterator[None]:
        """Abort ``req`` if the handler ends early (client gone, write failed, cancelled)."""
        try:
            yield
        except (ConnectionResetError, asyncio.CancelledError):
            self.abort(req)
            raise
        finally:
            self.abort(req)


SERVER: web.AppKey[EmulatedServer] = web.AppKey("emulated_server", EmulatedServer)
