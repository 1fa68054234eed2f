"""Migration e2e fixtures: an emulated group (in-process) behind the real router, SSE helpers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from ..conftest import Stack, StackMaker, patch_policy

__all__ = ["content_bytes", "metric", "patch_policy", "reassemble", "stream_generate"]


@pytest.fixture
def make_stack(emulated_stack: StackMaker) -> StackMaker:
    async def make(policy: dict[str, Any], incremental: bool = False) -> Stack:
        return await emulated_stack(
            policy,
            speedup=10.0,
            tick_s=0.02,
            scrape_s=0.5,
            incremental_streaming_output=incremental,
        )

    return make


async def stream_generate(
    http: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    on_event: Callable[[int], Awaitable[None]] | None = None,
) -> tuple[dict[str, str], list[bytes]]:
    """POST a streaming /generate; returns the headers and every SSE event's raw `data:` line.

    `on_event(i)` runs after the i-th event was read (the test's hook to switch mid-stream).
    """
    events: list[bytes] = []
    async with http.post(url + "/generate", json=body) as resp:
        assert resp.status == 200, await resp.text()
        buf = b""
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                events.append(ev)
                if on_event is not None:
                    await on_event(len(events))
        assert not buf
        return dict(resp.headers), events


def reassemble(events: list[bytes], incremental: bool) -> dict[str, Any]:
    """What a client rebuilds from the stream: the output after every event, and the end.

    Checks the stream's shape on the way: one [DONE] last, no error event, the cumulative
    output only ever grows (each event's output is a prefix of the next).
    """
    assert events[-1] == b"data: [DONE]", events[-3:]
    text, ids = "", []
    history: list[tuple[str, list[int]]] = []
    finish = None
    metas = []
    for ev in events[:-1]:
        assert ev.startswith(b"data: {"), ev[:200]
        obj = orjson.loads(ev[6:])
        assert "error" not in obj, obj
        if incremental:
            text, ids = text + obj["text"], ids + obj["output_ids"]
        else:
            assert obj["text"].startswith(text) and obj["output_ids"][: len(ids)] == ids
            text, ids = obj["text"], obj["output_ids"]
        history.append((text, ids))
        metas.append(obj["meta_info"])
        assert metas[-1]["completion_tokens"] == len(ids)
        finish = metas[-1]["finish_reason"]
    assert finish is not None
    return {
        "text": text, "output_ids": ids, "finish_reason": finish, "metas": metas,
        "history": history,
    }  # fmt: skip


def content_bytes(r: dict[str, Any]) -> bytes:
    """The reassembled content, serialised: what byte-identity is judged on."""
    return orjson.dumps(
        {"text": r["text"], "output_ids": r["output_ids"], "finish_reason": r["finish_reason"]}
    )


async def metric(http: aiohttp.ClientSession, url: str, line_prefix: str) -> float:
    """The value of the first exposition line starting with `line_prefix` (0 if absent)."""
    async with http.get(url) as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith(line_prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
