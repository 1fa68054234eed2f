"""`specswitch serve` as a real process: the embedded default, and SIGTERM's graceful drain."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import aiohttp
from specswitch.loadtest.thresholds import profile_thresholds

from .conftest import chat_stream


async def wait_state_url(s: aiohttp.ClientSession, admin_url: str, cond) -> None:
    for _ in range(2000):
        async with s.get(admin_url + "/admin/state") as r:
            if cond(await r.json()):
                return
        await asyncio.sleep(0.01)
    raise AssertionError("router state never matched")


async def _start_serve(*args: str) -> tuple[asyncio.subprocess.Process, str, str, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specswitch", "serve", "--listen", "127.0.0.1:0",
        "--admin-listen", "127.0.0.1:0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SPECSWITCH_ADMIN_TOKEN": ""},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line.startswith(b"specswitch router: serving on "), line
    url, admin_url = line.split()[4].decode(), line.split()[6].decode().rstrip(")")
    logs: list[str] = []

    async def pump() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            logs.append(raw.decode())

    asyncio.get_running_loop().create_task(pump())
    return proc, url, admin_url, logs


async def test_embedded_default_and_sigterm_lets_streams_finish() -> None:
    proc, url, admin_url, logs = await _start_serve("--speedup", "20", "--shutdown-grace", "20")
    try:
        async with aiohttp.ClientSession() as s:
            quick = await chat_stream(s, url, max_tokens=8)
            assert quick.complete and quick.group == "emulated" and quick.pool == "spec"
            assert any("embedded" in line and "EMULATED" in line for line in logs[:3]), logs[:3]
            # No --high/--low: the thresholds come from the profile's model, as in the demo.
            high, low, _ = profile_thresholds("seed-glm5-rtxpro6000")
            async with s.get(admin_url + "/admin/policy") as r:
                policy = await r.json()
            assert (policy["high"], policy["low"]) == (high, low) == (11, 7)
            # A long stream is in flight when SIGTERM arrives: it must finish whole.
            long_task = asyncio.ensure_future(chat_stream(s, url, max_tokens=3000, ignore_eos=True))
            async with s.get(url + "/health") as r:
                assert r.status == 200
            await wait_state_url(s, admin_url, lambda st: st["groups"][0]["inflight"] == 1)
            proc.send_signal(signal.SIGTERM)
            # New connections are refused while the in-flight stream goes on.
            for _ in range(500):
                try:
                    async with aiohttp.ClientSession() as fresh:
                        async with fresh.get(url + "/health") as r:
                            await r.read()
                except aiohttp.ClientConnectorError:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the listener still accepts after SIGTERM")
            assert not long_task.done()
            result = await asyncio.wait_for(long_task, 60)
            assert result.complete, result
            assert result.completion_tokens == 3000
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert any("event=shutdown_signal" in line for line in logs)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_second_signal_stops_without_waiting_for_the_grace() -> None:
    proc, url, admin_url, logs = await _start_serve("--speedup", "1", "--shutdown-grace", "600")
    try:
        async with aiohttp.ClientSession() as s:
            # ~30 s of generation in real time, far beyond what the test waits for.
            long_task = asyncio.ensure_future(chat_stream(s, url, max_tokens=3000, ignore_eos=True))
            await wait_state_url(s, admin_url, lambda st: st["groups"][0]["inflight"] == 1)
            proc.send_signal(signal.SIGTERM)
            for _ in range(1000):  # the first signal was handled: graceful wait under way
                if any("event=router_stopping" in line for line in logs):
                    break
                await asyncio.sleep(0.01)
            assert proc.returncode is None
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 20) == 0  # not the 600 s grace
            result = await asyncio.wait_for(long_task, 20)
            # cut, as asked: the emulator ends it with finish_reason "abort" (or the link breaks)
            assert result.completion_tokens != 3000 and (
                result.finish_reason == "abort" or result.error
            ), result
        assert any("event=shutdown_forced" in line for line in logs)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
