"""A lean HTTP/1.1 client for the hot path: keep-alive pool, streamed bodies, abort on close.

Why not aiohttp's client: on this 2-core machine its per-request machinery (request and
response objects, timers, stream readers) costs ~0.2 ms, about half of the router's whole
added time-to-first-token (docs/router.md has the figures). This client writes the request
in one syscall and hands body pieces to the relay as they arrive; it speaks exactly what
SGLang's servers send: Content-Length, chunked, or read-until-close bodies.

- `ConnectError`: no connection (refused, unreachable, timeout). Nothing was sent.
- `DisconnectedError`: the connection closed before the response head. A reused keep-alive
  connection that the server had just closed is retried once on a fresh one, here.
- `BodyError`: the connection broke (or sent garbage) after the head.
Closing a response that is not complete aborts its connection: SGLang sees the client go
away and aborts the request.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections import deque
from urllib.parse import urlsplit

_HEAD, _LENGTH, _UNTIL_CLOSE, _CH_SIZE, _CH_DATA, _CH_DATA_END, _CH_TRAILER, _DONE = range(8)
_MAX_HEAD = 65536
_MAX_LINE = 8192
_PAUSE_AT = 1 << 20  # buffered body bytes before reading from the server pauses
_RESUME_AT = 1 << 18
_MAX_IDLE = 4096  # idle keep-alive connections kept per server


class UpstreamError(Exception):
    """Base of the errors talking to a server."""


class ConnectError(UpstreamError):
    """Could not connect; nothing was sent."""


class DisconnectedError(UpstreamError):
    """The server closed the connection before sending a response head."""


class BodyError(UpstreamError):
    """The response broke after its head (connection lost, malformed framing)."""


class Response(asyncio.Protocol):
    """One connection; while a request is on it, also that request's response."""

    __slots__ = (
        "_buf", "_buffered", "_chunks", "_error", "_key", "_pool", "_remaining", "_state",
        "_waiter", "closed", "content_type", "headers", "idle", "keep_alive", "paused", "status",
        "transport",
    )  # fmt: skip

    def __init__(self, pool: UpstreamPool, key: tuple[str, int, bool]) -> None:
        self._pool = pool
        self._key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle = False  # in the pool's idle list (so forgetting it is O(1) otherwise)
        self._reset()

    def _reset(self) -> None:
        self._state = _HEAD
        self._buf = bytearray()
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._remaining = 0
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.content_type = ""
        self.keep_alive = False

    # ------------------------------------------------------------ protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool._forget(self)
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
        elif self._state == _HEAD:
            self._error = DisconnectedError("server closed the connection before responding")
        elif self._state != _DONE:
            self._error = BodyError("server closed the connection mid-response")
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._state == _HEAD:
            self._buf += data
            while True:
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buf) > _MAX_HEAD:
                        self._fail(BodyError("response head larger than 64 KiB"))
                    return
                head = bytes(self._buf[:end])
                del self._buf[: end + 4]
                if not self._parse_head(head):
                    return
                if self._state != _HEAD:
                    break
                # an interim 1xx response (e.g. 100 Continue): the real head follows
            data = bytes(self._buf)
            self._buf.clear()
            self._wake()
            if not data:
                return
        state = self._state
        if state == _LENGTH:
            if len(data) >= self._remaining:
                if len(data) > self._remaining:
                    self.keep_alive = False  # bytes past the body: do not reuse
                    data = data[: self._remaining]
                self._remaining = 0
                if data:
                    self._push(data)
                self._state = _DONE
                self._wake()
            else:
                self._remaining -= len(data)
                self._push(data)
        elif state == _UNTIL_CLOSE:
            self._push(data)
        elif state == _DONE:
            self.keep_alive = False  # unsolicited bytes: this connection is not reusable
        else:
            self._feed_chunked(data)

    # ------------------------------------------------------------ parsing

    def _parse_head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            version, self.status = parts[0], int(parts[1])
        except (IndexError, ValueError):
            self._fail(BodyError(f"bad status line {lines[0][:80]!r}"))
            return False
        headers = self.headers
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        self.content_type = headers.get("content-type", "")
        conn = headers.get("connection", "").lower()
        self.keep_alive = version == b"HTTP/1.1" and "close" not in conn
        if 100 <= self.status < 200:
            self.headers = {}
            self.status = 0  # interim response: stay in _HEAD for the final one
        elif self.status in (204, 304):
            self._state = _DONE
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CH_SIZE
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                self._fail(BodyError("bad Content-Length"))
                return False
            self._state = _LENGTH if self._remaining > 0 else _DONE
        else:
            self._state = _UNTIL_CLOSE
            self.keep_alive = False
        return True

    def _feed_chunked(self, data: bytes) -> None:
        out: list[bytes] = []
        pos, n = 0, len(data)
        while pos < n:
            state = self._state
            if state == _CH_DATA:
                take = min(self._remaining, n - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = _CH_DATA_END
                continue
            if state == _DONE:
                self.keep_alive = False
                break
            i = data.find(b"\n", pos)
            if i < 0:
                self._buf += data[pos:]
                if len(self._buf) > _MAX_LINE:
                    self._fail(BodyError("chunk framing line too long"))
                    return
                break
            if self._buf:
                line = bytes(self._buf) + data[pos:i]
                self._buf.clear()
            else:
                line = data[pos:i]
            pos = i + 1
            line = line.rstrip(b"\r")
            if state == _CH_SIZE:
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self._fail(BodyError(f"bad chunk size {line[:40]!r}"))
                    return
                if size == 0:
                    self._state = _CH_TRAILER
                else:
                    self._remaining = size
                    self._state = _CH_DATA
            elif state == _CH_DATA_END:
                if line:
                    self._fail(BodyError("chunk not followed by CRLF"))
                    return
                self._state = _CH_SIZE
            elif not line:  # _CH_TRAILER: the empty line ends the body
                self._state = _DONE
        if out:
            self._push(out[0] if len(out) == 1 else b"".join(out))
        if self._state == _DONE:
            self._wake()

    # ------------------------------------------------------------ delivery

    def _push(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered > _PAUSE_AT and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        self._error = error
        self.keep_alive = False
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def _wait_head(self) -> None:
        while self._state == _HEAD:
            if self._error is not None:
                raise self._error
            await self._wait()
        if self._error is not None and not self.status:
            raise self._error

    async def read(self) -> bytes:
        """The next body piece as it arrived (b"" at the end). BodyError if it broke."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self.paused and self._buffered < _RESUME_AT and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
                return chunk
            if self._state == _DONE:
                return b""
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read_all(self) -> bytes:
        parts = []
        while chunk := await self.read():
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """Done with the response: reuse the connection if complete, else abort it."""
        if (
            self._state == _DONE
            and self.keep_alive
            and not self.closed
            and self._error is None
            and not self._chunks
        ):
            self._pool._release(self)
        else:
            self.abort()

    def abort(self) -> None:
        self.keep_alive = False
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True
        self._pool._forget(self)


class UpstreamPool:
    """Keep-alive connections per server, unlimited in number (streams hold one each)."""

    def __init__(self, connect_timeout_s: float = 5.0) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int, bool], list[Response]] = {}
        self._targets: dict[str, tuple[str, int, bool, str]] = {}
        self._ssl: ssl_module.SSLContext | None = None

    def _target(self, base_url: str) -> tuple[str, int, bool, str]:
        target = self._targets.get(base_url)
        if target is None:
            parts = urlsplit(base_url)
            tls = parts.scheme == "https"
            host = parts.hostname or "127.0.0.1"
            port = parts.port or (443 if tls else 80)
            host_header = parts.netloc.rpartition("@")[2]
            target = self._targets[base_url] = (host, port, tls, host_header)
        return target

    def _take_idle(self, key: tuple[str, int, bool]) -> Response | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            conn.idle = False
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    def _release(self, conn: Response) -> None:
        idle = self._idle.setdefault(conn._key, [])
        if len(idle) >= _MAX_IDLE:
            conn.abort()
            return
        conn._reset()
        conn.idle = True
        idle.append(conn)

    def _forget(self, conn: Response) -> None:
        """A connection closed: drop it from the idle list (only idle ones are there)."""
        if not conn.idle:
            return
        conn.idle = False
        idle = self._idle.get(conn._key)
        if idle and conn in idle:
            idle.remove(conn)

    async def _connect(self, key: tuple[str, int, bool]) -> Response:
        host, port, tls = key
        if tls and self._ssl is None:
            self._ssl = ssl_module.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: Response(self, key), host, port, ssl=self._ssl if tls else None
                )
        except (OSError, TimeoutError) as exc:
            raise ConnectError(
                f"cannot connect to {host}:{port}: {exc or type(exc).__name__}"
            ) from exc
        return conn

    async def request(
        self, method: str, base_url: str, path: str, headers: dict[str, str], body: bytes
    ) -> Response:
        """Send a request; return once the response head arrived (the body streams after)."""
        host, port, tls, host_header = self._target(base_url)
        key = (host, port, tls)
        lines = [f"{method} {path} HTTP/1.1\r\nHost: {host_header}\r\n"]
        lines.extend(f"{k}: {v}\r\n" for k, v in headers.items())
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append("\r\n")
        payload = "".join(lines).encode("utf-8", "surrogateescape") + body
        for attempt in range(2):
            conn = self._take_idle(key)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key)
            assert conn.transport is not None
            conn.transport.write(payload)
            try:
                await conn._wait_head()
            except DisconnectedError:
                conn.abort()
                if reused and attempt == 0:
                    continue  # the server had just closed this idle connection: a fresh one
                raise
            except BaseException:
                conn.abort()
                raise
            return conn
        raise DisconnectedError("server closed the connection before responding")  # unreachable

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in list(idle):
                conn.idle = False
                conn.abort()
        self._idle.clear()
