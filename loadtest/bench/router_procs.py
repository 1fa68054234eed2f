"""Shared by the router benchmarks (a helper, not a benchmark): an emulated group and a router,
each a `specswitch` subcommand in its own process, started together and stopped together.

    async with emulated_router("seed-glm5-rtxpro6000", speedup=10, mode="spec") as stack:
        stack.spec_url, stack.baseline_url, stack.router_url, stack.admin_url, stack.router.pid
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def spawn(*args: str, ready: bytes) -> asyncio.subprocess.Process:
    """`python -m specswitch ARGS`, returned once its stdout has shown `ready`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specswitch", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "SPECSWITCH_ADMIN_TOKEN": ""},
    )  # fmt: skip
    assert proc.stdout is not None
    seen = b""
    while ready not in seen:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            raise SystemExit(f"{args[0]} exited before it was ready")
        seen += line
    return proc


async def stop(*procs: asyncio.subprocess.Process) -> None:
    """SIGTERM each, then wait (30 s at most, then SIGKILL)."""
    for proc in procs:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()


@dataclass(frozen=True, slots=True)
class Stack:
    emulator: asyncio.subprocess.Process
    router: asyncio.subprocess.Process
    spec_url: str
    baseline_url: str
    router_url: str
    admin_url: str


@contextlib.asynccontextmanager
async def emulated_router(profile: str, speedup: float, mode: str) -> AsyncIterator[Stack]:
    """`specswitch emulate` + `specswitch serve --mode MODE` in front of it, on free ports."""
    spec_port, base_port, listen, admin = free_port(), free_port(), free_port(), free_port()
    emulator = await spawn(
        "emulate", "--profile", profile, "--spec-port", str(spec_port),
        "--baseline-port", str(base_port), "--speedup", str(speedup),
        "--log-level", "warning", ready=b"baseline",
    )  # fmt: skip
    spec_url, baseline_url = f"http://127.0.0.1:{spec_port}", f"http://127.0.0.1:{base_port}"
    try:
        router = await spawn(
            "serve", "--group", f"g0={spec_url},{baseline_url}",
            "--listen", f"127.0.0.1:{listen}", "--admin-listen", f"127.0.0.1:{admin}",
            "--mode", mode, "--log-level", "warning", ready=b"serving on",
        )  # fmt: skip
    except BaseException:
        await stop(emulator)
        raise
    try:
        yield Stack(
            emulator, router, spec_url, baseline_url,
            f"http://127.0.0.1:{listen}", f"http://127.0.0.1:{admin}",
        )  # fmt: skip
    finally:
        await stop(router, emulator)
