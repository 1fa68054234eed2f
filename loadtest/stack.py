"""Starting an emulated group and the router as separate processes, for compare and demo.

Three processes (emulator, router, and this generator) spread over the machine's cores the
way a real deployment would. Each child is ``python -m specswitch emulate|serve ...`` with its
output in a log file; readiness is the servers answering (``/health``), not a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from specswitch.errors import UserError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class StackConfig:
    profile: str = "seed-glm5-rtxpro6000"
    speedup: float = 1.0
    high: int = 12
    low: int = 6
    min_dwell_s: float = 2.0
    mode: str = "auto"
    host: str = "127.0.0.1"
    log_dir: Path = Path(".")
    extra_router_args: tuple[str, ...] = ()
    extra_emulator_args: tuple[str, ...] = ()


@dataclass
class ProcessStack:
    """An emulated group (`specswitch emulate`) and a router (`specswitch serve`)."""

    config: StackConfig
    spec_url: str = ""
    baseline_url: str = ""
    url: str = ""
    admin_url: str = ""
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    _router: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> ProcessStack:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _spawn(self, name: str, args: list[str]) -> asyncio.subprocess.Process:
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.config.log_dir / f"{name}.log"
        self.logs.append(log)
        fh = log.open("ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "specswitch",
            *args,
            stdout=fh,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        fh.close()
        self.procs.append(proc)
        return proc

    async def start(self) -> None:
        c = self.config
        sp, bp, lp, ap = (free_port(c.host) for _ in range(4))
        self.spec_url = f"http://{c.host}:{sp}"
        self.baseline_url = f"http://{c.host}:{bp}"
        self.url = f"http://{c.host}:{lp}"
        self.admin_url = f"http://{c.host}:{ap}"
        emu = await self._spawn(
            "emulator",
            [
                "emulate",
                "--profile",
                c.profile,
                "--host",
                c.host,
                "--spec-port",
                str(sp),
                "--baseline-port",
                str(bp),
                "--speedup",
                f"{c.speedup:g}",
                "--enable-metrics",
                *c.extra_emulator_args,
            ],
        )
        await wait_ready(
            [self.spec_url + "/health", self.baseline_url + "/health"], emu, self.logs[-1]
        )
        await self._start_router()

    async def _start_router(self) -> None:
        c = self.config
        listen = self.url.removeprefix("http://")
        admin = self.admin_url.removeprefix("http://")
        router = await self._spawn(
            "router",
            [
                "serve",
                "--group",
                f"g0={self.spec_url},{self.baseline_url}",
                "--listen",
                listen,
                "--admin-listen",
                admin,
                "--high",
                str(c.high),
                "--low",
                str(c.low),
                "--min-dwell",
                f"{c.min_dwell_s:g}",
                "--mode",
                c.mode,
                *c.extra_router_args,
            ],
        )
        self._router = router
        await wait_ready(
            [self.url + "/health", self.admin_url + "/admin/state"], router, self.logs[-1]
        )

    async def restart_router(self) -> None:
        """A fresh router on the same ports (no carried-over prefix index, drains, dwell)."""
        proc = self._router
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        await self._start_router()

    async def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        self.procs.clear()


async def wait_ready(
    urls: list[str],
    proc: asyncio.subprocess.Process | None,
    log: Path | None,
    timeout_s: float = 60.0,
) -> None:
    """Poll until every URL answers 200; fail with the child's last log line if it exits."""
    deadline = time.monotonic() + timeout_s
    pending = list(urls)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while pending:
            if proc is not None and proc.returncode is not None:
                raise UserError(
                    f"child process exited with code {proc.returncode} before it was "
                    f"ready: {_last_line(log)} (log: {log})"
                )
            url = pending[0]
            try:
                async with session.get(url) as resp:
                    if resp.status == 200:
                        pending.pop(0)
                        continue
            except (aiohttp.ClientError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                raise UserError(f"{url} was not ready after {timeout_s:.0f} s (log: {log})")
            await asyncio.sleep(0.1)


def _last_line(log: Path | None) -> str:
    if log is None or not log.exists():
        return "(no log)"
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    return lines[-1][:300] if lines else "(empty log)"


async def set_policy(admin_url: str, patch: dict[str, Any], token: str | None = None) -> dict:
    """PATCH /admin/policy; UserError with the router's message when refused."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.patch(
            admin_url.rstrip("/") + "/admin/policy", data=orjson.dumps(patch), headers=headers
        ) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise UserError(
                    f"router refused policy {patch}: HTTP {resp.status} "
                    f"{body[:200].decode('utf-8', 'replace')}"
                )
            return orjson.loads(body) if body else {}


async def flush_cache(server_urls: list[str], timeout_s: float = 60.0) -> None:
    """POST /flush_cache on each server, retrying while it still has requests (HTTP 400)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for url in server_urls:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    async with session.post(url.rstrip("/") + "/flush_cache") as resp:
                        if resp.status == 200:
                            break
                except (aiohttp.ClientError, TimeoutError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise UserError(f"{url}/flush_cache kept failing for {timeout_s:.0f} s")
                await asyncio.sleep(0.2)


async def wait_idle(admin_url: str, timeout_s: float = 120.0) -> None:
    """Wait until the router reports no request in flight in any pool."""
    from .live import AdminPoller

    deadline = time.monotonic() + timeout_s
    async with AdminPoller(admin_url) as poll:
        while time.monotonic() < deadline:
            s = await poll()
            if (
                s is not None
                and s["load"] == 0
                and s["inflight_spec"] == 0
                and s["inflight_baseline"] == 0
            ):
                return
            await asyncio.sleep(0.1)
    raise UserError(f"router at {admin_url} still had requests in flight after {timeout_s:.0f} s")


async def wait_mode(admin_url: str, mode: str, timeout_s: float = 30.0) -> None:
    """Wait until every group reports ``mode``."""
    from .live import AdminPoller

    deadline = time.monotonic() + timeout_s
    async with AdminPoller(admin_url) as poll:
        while time.monotonic() < deadline:
            s = await poll()
            if s is not None and s.get("mode") == mode:
                return
            await asyncio.sleep(0.05)
    raise UserError(f"router at {admin_url} did not reach mode {mode} in {timeout_s:.0f} s")
