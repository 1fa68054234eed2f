"""The hot path's HTTP/1.1 client against raw servers: framing, keep-alive, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from specswitch.router.upstream import BodyError, ConnectError, DisconnectedError, UpstreamPool

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Script], object]]:
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> str:
        server = await asyncio.start_server(script, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for s in servers:
        s.close()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


async def test_chunked_body_split_anywhere_and_keepalive_reuse(raw_server) -> None:
    body = b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"
    wire = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in body) + b"0\r\nX-T: 1\r\n\r\n"
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    connections = 0

    async def script(reader, writer):
        nonlocal connections
        connections += 1
        for split in (1, 7, 23):  # three requests on one connection, cut differently
            await _read_request(reader)
            data = head + wire
            for i in range(0, len(data), split):
                writer.write(data[i : i + split])
                await writer.drain()
        writer.close()

    url = await raw_server(script)
    pool = UpstreamPool()
    for _ in range(3):
        resp = await pool.request("POST", url, "/generate", {"X-A": "1"}, b"{}")
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        assert await resp.read_all() == b"".join(body)
        resp.close()
    assert connections == 1
    pool.close()


async def test_content_length_and_until_close(raw_server) -> None:
    async def script(reader, writer):
        req = await _read_request(reader)
        if b"/len" in req:
            writer.write(
                b"HTTP/1.1 400 Bad\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n"
            )
            writer.write(b'{"err":1}')
        else:
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    url = await raw_server(script)
    pool = UpstreamPool()
    resp = await pool.request("POST", url, "/len", {}, b"x")
    assert resp.status == 400 and await resp.read_all() == b'{"err":1}'
    resp.close()
    resp = await pool.request("GET", url, "/close", {}, b"")
    assert await resp.read_all() == b"all of it"
    resp.close()
    pool.close()


async def test_errors_connect_disconnect_midbody(raw_server) -> None:
    async def hangup(reader, writer):
        await _read_request(reader)
        writer.close()

    async def midbody(reader, writer):
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        writer.close()

    pool = UpstreamPool(connect_timeout_s=2)
    with pytest.raises(ConnectError):
        await pool.request("POST", "http://127.0.0.1:1", "/", {}, b"")
    with pytest.raises(DisconnectedError):
        await pool.request("POST", await raw_server(hangup), "/", {}, b"")
    resp = await pool.request("POST", await raw_server(midbody), "/", {}, b"")
    assert await resp.read() == b"hello"
    with pytest.raises(BodyError):
        await resp.read()
    resp.close()
    pool.close()


async def test_stale_keepalive_connection_is_retried_transparently(raw_server) -> None:
    served = 0

    async def once_then_close(reader, writer):
        nonlocal served
        await _read_request(reader)
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # keep-alive promised, but the server closes (idle timeout race)

    url = await raw_server(once_then_close)
    pool = UpstreamPool()
    for _ in range(3):
        resp = await pool.request("POST", url, "/", {}, b"")
        assert await resp.read_all() == b"ok"
        resp.close()
        await asyncio.sleep(0)  # may or may not see the close first: both paths must work
    assert served == 3
    pool.close()


async def test_interim_100_continue_is_skipped(raw_server) -> None:
    async def script(reader, writer):
        await _read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n")
        await writer.drain()
        writer.write(b"Content-Type: application/json\r\n\r\n[1]")
        await writer.drain()
        writer.close()

    pool = UpstreamPool()
    resp = await pool.request("POST", await raw_server(script), "/", {}, b"{}")
    assert resp.status == 200 and resp.content_type == "application/json"
    assert await resp.read_all() == b"[1]"
    resp.close()
    pool.close()


async def test_idle_list_holds_only_reusable_connections(raw_server) -> None:
    """A connection the server closes leaves the idle list; aborting a busy one never scans it."""
    closing = asyncio.Event()

    async def serve(reader, writer):
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await closing.wait()
        writer.close()

    url = await raw_server(serve)
    pool = UpstreamPool()
    responses = [await pool.request("POST", url, "/", {}, b"") for _ in range(3)]
    for resp in responses[:2]:
        assert await resp.read_all() == b"ok"
        resp.close()
    (idle,) = pool._idle.values()
    assert len(idle) == 2 and all(c.idle for c in idle)
    responses[2].abort()  # a busy connection (unread body): not in the list, list unchanged
    assert len(idle) == 2 and not responses[2].idle
    closing.set()
    for _ in range(200):
        if not idle:
            break
        await asyncio.sleep(0.01)
    assert idle == [] and not any(r.idle for r in responses)
    pool.close()
