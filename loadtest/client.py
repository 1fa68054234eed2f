"""The async streaming HTTP client: one request in, one :class:`RequestResult` out.

Speaks what any SGLang server (or the router, or the emulator) speaks: OpenAI
``/v1/chat/completions`` and ``/v1/completions`` with ``stream_options.include_usage``, and
SGLang's native ``/generate``. Nothing here knows about the emulator. Per request it records
the time of every content chunk (TTFT, inter-token gaps, TPOT), the output tokens from the
usage chunk (or ``meta_info`` for /generate), the pool and group from the router's response
headers when present, and errors (HTTP status, SSE error events, connection failures).

Parsing is kept cheap so one core holds hundreds of streams: the body is read in whatever
pieces arrive, split on newlines, and only ``data:`` lines are decoded (orjson).
"""

from __future__ import annotations

import asyncio
import time
import zlib
from array import array
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from specswitch.errors import UserError

from .datasets import Conversation, Message

APIS = ("chat", "completions", "generate")
_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "generate": "/generate"}


@dataclass(frozen=True)
class ClientConfig:
    target: str
    api: str = "chat"
    model: str | None = None  # None: ask GET /v1/models once, else "default"
    max_tokens: int = 256
    temperature: float = 0.0
    ignore_eos: bool = False  # SGLang extra (accepted by SGLang and the router)
    # per-request max_tokens drawn in [(1 - spread) * max_tokens, max_tokens], deterministic
    # per (conversation, turn): equal lengths make a closed loop run in lockstep convoys
    output_spread: float = 0.0
    timeout_s: float = 600.0
    headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"api must be one of {APIS}, not {self.api!r}")
        if not self.target.startswith(("http://", "https://")):
            raise ValueError(f"target must be an http(s) URL, not {self.target!r}")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if not 0.0 <= self.output_spread < 1.0:
            raise ValueError("output_spread must be in [0, 1)")

    def max_tokens_for(self, conv_id: str, turn: int, override: int | None = None) -> int:
        top = override or self.max_tokens
        if self.output_spread <= 0:
            return top
        frac = zlib.crc32(f"{conv_id}:{turn}".encode()) / 0xFFFFFFFF
        return max(1, round(top * (1.0 - self.output_spread * frac)))


@dataclass(slots=True)
class RequestResult:
    """One request. Times are ``time.perf_counter()`` seconds (wall clock)."""

    conv_id: str
    turn: int
    start: float
    end: float = 0.0
    status: int = 0
    ttft: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    finish_reason: str | None = None
    pool: str | None = None
    group: str | None = None
    error: str | None = None
    seq: int = -1  # issue order within a closed-loop level (1-based), -1 elsewhere
    chunk_times: array = field(default_factory=lambda: array("d"))
    chunk_chars: array = field(default_factory=lambda: array("l"))

    @property
    def ok(self) -> bool:
        return self.error is None and self.output_tokens > 0

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (last chunk - first chunk) / (tokens - 1)."""
        if self.output_tokens < 2 or len(self.chunk_times) < 2:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.output_tokens - 1)

    def itl(self) -> list[float]:
        """Gaps between consecutive content chunks (one chunk may carry several tokens)."""
        t = self.chunk_times
        return [t[i] - t[i - 1] for i in range(1, len(t))]


def render_prompt(messages: list[Message]) -> str:
    """A plain-text rendering of a chat for /v1/completions and /generate."""
    parts = [f"<|{m.role}|>\n{m.content}" for m in messages]
    parts.append("<|assistant|>\n")
    return "\n".join(parts)


def build_messages(conv: Conversation, turn: int, replies: list[str]) -> list[Message]:
    """The whole conversation up to user turn ``turn``, with the server's earlier replies."""
    msgs: list[Message] = []
    if conv.system:
        msgs.append(Message("system", conv.system))
    msgs.extend(conv.history)
    for i in range(turn):
        msgs.append(Message("user", conv.turns[i]))
        msgs.append(Message("assistant", replies[i]))
    msgs.append(Message("user", conv.turns[turn]))
    return msgs


class StreamClient:
    """Holds one aiohttp session (no connection limit) for every request of a run."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.model = config.model or "default"
        self._session: aiohttp.ClientSession | None = None
        self._url = config.target.rstrip("/") + _PATHS[config.api]

    async def __aenter__(self) -> StreamClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s, sock_connect=10)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, headers=dict(self.config.headers)
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def probe(self) -> None:
        """Check the target answers, and learn the model name; UserError if unreachable."""
        assert self._session is not None
        base = self.config.target.rstrip("/")
        try:
            async with self._session.get(
                base + "/v1/models", timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                if resp.status == 200 and self.config.model is None:
                    data = await resp.json(loads=orjson.loads, content_type=None)
                    models = data.get("data") or []
                    if models and isinstance(models[0], dict) and models[0].get("id"):
                        self.model = str(models[0]["id"])
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise UserError(
                f"cannot reach target {base} ({type(exc).__name__}: {exc}); "
                "check the URL and that the server is running"
            ) from None

    def _body(self, messages: list[Message], max_tokens: int) -> bytes:
        cfg = self.config
        if cfg.api == "generate":
            sp: dict[str, Any] = {"max_new_tokens": max_tokens, "temperature": cfg.temperature}
            if cfg.ignore_eos:
                sp["ignore_eos"] = True
            return orjson.dumps(
                {"text": render_prompt(messages), "sampling_params": sp, "stream": True}
            )
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": cfg.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if cfg.ignore_eos:
            body["ignore_eos"] = True
        if cfg.api == "chat":
            body["messages"] = [{"role": m.role, "content": m.content} for m in messages]
        else:
            body["prompt"] = render_prompt(messages)
        return orjson.dumps(body)

    async def send(
        self,
        messages: list[Message],
        *,
        conv_id: str = "",
        turn: int = 0,
        max_tokens: int | None = None,
    ) -> tuple[RequestResult, str]:
        """Send one streaming request; returns the result and the reply text."""
        assert self._session is not None, "open() the client first"
        body = self._body(messages, self.config.max_tokens_for(conv_id, turn, max_tokens))
        res = RequestResult(conv_id=conv_id, turn=turn, start=time.perf_counter())
        parts: list[str] = []
        try:
            async with self._session.post(
                self._url, data=body, headers={"Content-Type": "application/json"}
            ) as resp:
                res.status = resp.status
                res.pool = resp.headers.get("X-Specswitch-Pool")
                res.group = resp.headers.get("X-Specswitch-Group")
                if resp.status != 200:
                    text = (await resp.read()).decode("utf-8", "replace")
                    res.error = f"HTTP {resp.status}: {_error_message(text)}"
                else:
                    await self._read_stream(resp, res, parts)
        except asyncio.CancelledError:
            res.error = "cancelled"
            res.end = time.perf_counter()
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            res.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        res.end = time.perf_counter()
        if res.error is None and res.output_tokens == 0:
            res.error = "no output tokens"
        return res, "".join(parts)

    async def _read_stream(
        self, resp: aiohttp.ClientResponse, res: RequestResult, parts: list[str]
    ) -> None:
        api = self.config.api
        buf = b""
        done = False
        gen_text = ""  # /generate: the cumulative text so far
        times, chars = res.chunk_times, res.chunk_chars
        perf = time.perf_counter
        async for piece in resp.content.iter_any():
            buf += piece
            if b"\n" not in piece:
                continue
            lines = buf.split(b"\n")
            buf = lines.pop()
            now = perf()
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                try:
                    event = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    res.error = "malformed SSE event"
                    continue
                if not isinstance(event, dict):
                    continue
                if "error" in event:
                    err = event["error"]
                    msg = err.get("message") if isinstance(err, dict) else err
                    res.error = f"stream error: {msg}"
                    continue
                if api == "generate":
                    delta, gen_text = _generate_event(event, res, gen_text)
                else:
                    delta = _openai_event(event, res, api)
                if delta:
                    if res.ttft is None:
                        res.ttft = now - res.start
                    times.append(now)
                    chars.append(len(delta))
                    parts.append(delta)
            if done:
                break
        if not done and res.error is None:
            res.error = "stream ended without [DONE]"
        if res.output_tokens == 0 and times and res.error is None:
            # a server that ignores include_usage: count one token per content chunk
            res.output_tokens = len(times)
        if res.finish_reason == "abort" and res.error is None:
            res.error = "aborted by server"


def _generate_event(event: dict[str, Any], res: RequestResult, gen_text: str) -> tuple[str, str]:
    """One native /generate event: (new text, cumulative text so far). Reads the figures of
    meta_info into `res`. Output is cumulative by default, deltas with
    --incremental-streaming-output: output_ids as long as completion_tokens means cumulative."""
    text = event.get("text") or ""
    meta = event.get("meta_info") or {}
    ids = event.get("output_ids")
    ntok = meta.get("completion_tokens")
    cumulative = ids is None or ntok is None or len(ids) == ntok
    delta = text[len(gen_text) :] if cumulative else text
    if ntok is not None:
        res.output_tokens = int(ntok)
    res.prompt_tokens = int(meta.get("prompt_tokens") or res.prompt_tokens)
    if meta.get("cached_tokens") is not None:
        res.cached_tokens = int(meta["cached_tokens"])
    fr = meta.get("finish_reason")
    if isinstance(fr, dict):
        res.finish_reason = fr.get("type")
    return delta, (text if cumulative else gen_text + text)


def _openai_event(event: dict[str, Any], res: RequestResult, api: str) -> str | None:
    """One OpenAI chunk (chat or completions): its new text; finish reason and usage into `res`."""
    delta = None
    choices = event.get("choices")
    if choices:
        ch = choices[0]
        if api == "chat":
            delta = (ch.get("delta") or {}).get("content")
        else:
            delta = ch.get("text")
        if ch.get("finish_reason"):
            res.finish_reason = ch["finish_reason"]
    usage = event.get("usage")
    if usage:
        res.output_tokens = int(usage.get("completion_tokens") or 0)
        res.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            res.cached_tokens = int(details["cached_tokens"])
    return delta


def _error_message(text: str) -> str:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text.strip()[:200]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:200]
        if data.get("message"):
            return str(data["message"])[:200]
    return text.strip()[:200]
