"""deploy/sglang/prestop_drain.py (the group pod's preStop): drains the group on every router
replica, then returns only once the servers' in-flight requests have finished."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import aiohttp
from specswitch.loadtest.emulator import start_group
from specswitch.router import GroupConfig, HealthConfig, RouterConfig, start_router
from specswitch.router.discovery import group_name_for

ROOT = Path(__file__).resolve().parents[3]
PRESTOP = ROOT / "deploy" / "sglang" / "prestop_drain.py"


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[1]


async def test_prestop_drains_all_replicas_and_waits_for_inflight(tmp_path: Path) -> None:
    group = await start_group(speedup=2)
    name = group_name_for("sglang-groups", "127.0.0.1")  # what DNS discovery would call it
    config = RouterConfig(
        groups=(GroupConfig(name, group.spec_url, group.baseline_url),),
        listen="127.0.0.1:0",
        admin_listen="127.0.0.1:0",
        health=HealthConfig(interval_s=0.1),
    )
    replicas = [await start_router(config), await start_router(config)]
    try:
        async with aiohttp.ClientSession() as session:
            body = {"model": "m", "messages": [{"role": "user", "content": "a long answer"}],
                    "max_tokens": 160, "stream": True, "ignore_eos": True}  # fmt: skip
            first_chunk = asyncio.Event()
            finished: list[float] = []

            async def long_stream() -> str:
                async with session.post(
                    f"{replicas[0].url}/v1/chat/completions", json=body
                ) as resp:
                    assert resp.status == 200
                    chunks = []
                    async for chunk in resp.content.iter_any():
                        chunks.append(chunk)
                        first_chunk.set()
                    finished.append(time.monotonic())
                    return b"".join(chunks).decode()

            stream = asyncio.create_task(long_stream())
            await asyncio.wait_for(first_chunk.wait(), 30)
            env = {
                "PATH": os.environ["PATH"],
                "POD_IP": "127.0.0.1",
                "DISCOVERY_DNS_NAME": "sglang-groups",
                "ROUTER_ADMIN_URLS": ",".join(r.admin_url for r in replicas),
                "SPEC_PORT": port_of(group.spec_url),
                "BASELINE_PORT": port_of(group.baseline_url),
                "POLL_S": "0.1",
                "DRAIN_TIMEOUT_S": "60",
            }
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(PRESTOP), env=env, stderr=asyncio.subprocess.PIPE
            )
            _, err = await asyncio.wait_for(proc.communicate(), 90)
            hook_done = time.monotonic()
            log = err.decode()
            assert proc.returncode == 0, log
            assert log.count("event=drain_requested") == 2 and "status=200" in log, log
            assert "event=drained" in log, log
            text = await stream
            assert text.rstrip().endswith("data: [DONE]") and '"error"' not in text
            assert finished[0] <= hook_done  # the hook returned only after the stream ended
            for replica in replicas:
                (state,) = replica.registry.groups
                assert state.admin_drained and state.inflight == 0
            short = body | {"stream": False, "max_tokens": 4}
            async with session.post(f"{replicas[1].url}/v1/chat/completions", json=short) as resp:
                assert resp.status == 503  # no new request reaches a draining pod

            # the pod's next life (same address): launch-group.sh resumes the group
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(PRESTOP), "--resume", env=env, stderr=asyncio.subprocess.PIPE
            )
            _, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0 and err.decode().count("event=resume_requested") == 2
            assert not any(r.registry.groups[0].admin_drained for r in replicas)
            async with session.post(f"{replicas[1].url}/v1/chat/completions", json=short) as resp:
                assert resp.status == 200
    finally:
        for replica in replicas:
            await replica.close()
        await group.close()
