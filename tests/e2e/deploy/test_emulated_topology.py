"""The compose `emulated` topology without Docker: the very commands docker-compose.emulated.yml
runs (`specswitch emulate ...`, `specswitch serve ...`), started as processes with loopback
addresses and free ports in place of the container names and fixed ports, serving through the
router."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[3]
SPECSWITCH = str(Path(sys.executable).with_name("specswitch"))


def compose_command(service: str) -> list[str]:
    """The service's command from docker-compose.emulated.yml, ${VAR:-default} interpolated."""
    services = yaml.safe_load((ROOT / "docker-compose.emulated.yml").read_text())["services"]
    return [re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(a)) for a in services[service]["command"]]


def replace_value(cmd: list[str], flag: str, value: str) -> list[str]:
    i = cmd.index(flag)
    return [*cmd[: i + 1], value, *cmd[i + 2 :]]


def tail(log: Path) -> str:
    return log.read_text()[-2000:]


async def start(
    cmd: list[str], pattern: str, count: int, log: Path
) -> tuple[asyncio.subprocess.Process, list[str]]:
    """Start `specswitch <cmd>` and wait (bounded) for `count` stdout matches of pattern."""
    with log.open("w") as err:  # a file, not a pipe: logs can never block the process
        proc = await asyncio.create_subprocess_exec(
            SPECSWITCH, *cmd, stdout=asyncio.subprocess.PIPE, stderr=err
        )
    found: list[str] = []
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while len(found) < count:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise AssertionError(f"specswitch {cmd[0]} exited: {tail(log)}")
            found += re.findall(pattern, line)
    return proc, found


async def stop(proc: asyncio.subprocess.Process) -> int:
    if proc.returncode is None:
        proc.terminate()
    async with asyncio.timeout(30):
        return await proc.wait()


async def test_emulated_compose_topology_serves_through_the_router(tmp_path: Path) -> None:
    emulate = compose_command("emulator")
    serve = compose_command("router-emulated")
    assert emulate[0] == "emulate" and "--enable-metrics" in emulate and serve[0] == "serve"

    # container networking -> loopback: listen on 127.0.0.1, any free port
    emulate = replace_value(emulate, "--host", "127.0.0.1")
    emulate = replace_value(replace_value(emulate, "--spec-port", "0"), "--baseline-port", "0")
    emulator, urls = await start(emulate, r"listening on (http://\S+)", 2, tmp_path / "emulate.log")
    router = None
    try:
        spec_url, baseline_url = urls
        group = serve[serve.index("--group") + 1]
        group = group.replace("http://sglang-spec:30001", spec_url)
        group = group.replace("http://sglang-baseline:30002", baseline_url)
        assert group == f"g0={spec_url},{baseline_url}"
        serve = replace_value(serve, "--group", group)
        serve = replace_value(serve, "--listen", "127.0.0.1:0")
        serve = replace_value(serve, "--admin-listen", "127.0.0.1:0")
        router, (url, admin_url) = await start(
            serve, r"(http://[\d.:]+)", 2, tmp_path / "serve.log"
        )

        async with aiohttp.ClientSession() as session:
            async with asyncio.timeout(30):  # the router health-checks the servers first
                while True:
                    async with session.get(f"{url}/health") as resp:
                        if resp.status == 200:
                            break
                    await asyncio.sleep(0.1)
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 12,
            }
            async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                assert resp.headers["X-Specswitch-Group"] == "g0"
                assert resp.headers["X-Specswitch-Pool"] == "spec"  # low load: speculative pool
                answer = await resp.json()
            assert answer["choices"][0]["message"]["content"]
            async with session.post(
                f"{url}/v1/chat/completions", json=body | {"stream": True}
            ) as resp:
                assert resp.status == 200
                text = await resp.text()
            assert text.rstrip().endswith("data: [DONE]") and '"error"' not in text
            async with session.get(f"{admin_url}/admin/state") as resp:
                state = await resp.json()
            (g0,) = state["groups"]
            assert (
                g0["name"] == "g0"
                and g0["pools"]["spec"]["healthy"]
                and g0["pools"]["baseline"]["healthy"]
            )
            assert (state["policy"]["high"], state["policy"]["low"]) == (12, 6)  # compose defaults
            async with session.get(f"{admin_url}/metrics") as resp:
                assert 'specswitch_group_mode{group="g0"} 0.0' in await resp.text()
            async with session.get(f"{spec_url}/metrics") as resp:  # --enable-metrics
                assert resp.status == 200 and "sglang:num_running_reqs" in await resp.text()
        assert await stop(router) == 0
        assert await stop(emulator) == 0
    finally:
        for proc in (router, emulator):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
