"""A real Prometheus (Debian package `prometheus`) scrapes the router and the emulator with
deploy/prometheus/prometheus.yml (targets pointed at the test's ports); the dashboard's
queries are valid PromQL and every metric they name is exported."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from specswitch.loadtest.emulator import start_group
from specswitch.router import GroupConfig, HealthConfig, RouterConfig, start_router

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "specswitch.json"
PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the `prometheus` binary is not installed (Debian package prometheus; .ci/run installs it)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hostport(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")


def scrape_config_for(tmp_path: Path, targets: dict[str, str]) -> Path:
    """deploy/prometheus/prometheus.yml with compose service names replaced by test addresses."""
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    config["global"]["scrape_interval"] = "500ms"
    seen = set()
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            static["targets"] = [targets[t] for t in static["targets"]]
            seen.update(static["targets"])
    assert seen == set(targets.values())
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


async def query(session: aiohttp.ClientSession, base: str, promql: str) -> dict[str, Any]:
    async with session.get(f"{base}/api/v1/query", params={"query": promql}) as resp:
        body = await resp.json()
    assert body["status"] == "success", (promql, body)
    return body["data"]


async def poll(fn, limit_s: float = 30.0):
    """Prometheus scrapes on its own clock: poll (bounded) until fn() returns something truthy."""
    async with asyncio.timeout(limit_s):
        while True:
            result = await fn()
            if result:
                return result
            await asyncio.sleep(0.2)


async def test_prometheus_scrapes_router_and_emulator(tmp_path: Path) -> None:
    group = await start_group(speedup=50, enable_metrics=True)
    router = await start_router(
        RouterConfig(
            groups=(GroupConfig("g0", group.spec_url, group.baseline_url),),
            listen="127.0.0.1:0",
            admin_listen="127.0.0.1:0",
            health=HealthConfig(interval_s=0.1),
        )
    )
    targets = {
        "router:8001": hostport(router.admin_url),
        "sglang-spec:30001": hostport(group.spec_url),
        "sglang-baseline:30002": hostport(group.baseline_url),
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = await asyncio.create_subprocess_exec(
        PROMETHEUS,
        f"--config.file={scrape_config_for(tmp_path, targets)}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    try:
        async with aiohttp.ClientSession() as session:
            # a little traffic so the request/latency series exist
            for stream in (False, True):
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 8, "stream": stream}  # fmt: skip
                async with session.post(f"{router.url}/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200
                    await resp.read()

            async def ready() -> bool:
                if proc.returncode is not None:
                    pytest.fail(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}")
                try:
                    async with session.get(f"{base}/-/ready") as resp:
                        return resp.status == 200
                except aiohttp.ClientError:
                    return False

            await poll(ready)

            async def mode() -> list:
                return (await query(session, base, "specswitch_group_mode"))["result"]

            (series,) = await poll(mode)
            assert (
                series["metric"]["group"] == "g0" and series["metric"]["job"] == "specswitch-router"
            )
            assert float(series["value"][1]) == 0.0  # spec at low load

            async def all_up() -> list:
                up = (await query(session, base, "up == 1"))["result"]
                return up if len(up) == 3 else []

            up = await poll(all_up)
            assert {s["metric"]["instance"] for s in up} == set(targets.values())

            async def pools() -> set:
                result = (await query(session, base, "sglang:num_running_reqs"))["result"]
                return {s["metric"].get("pool") for s in result}

            assert await poll(pools) == {"spec", "baseline"}  # labels from prometheus.yml

            async def names() -> set[str]:
                async with session.get(f"{base}/api/v1/label/__name__/values") as resp:
                    return set((await resp.json())["data"])

            dashboard = json.loads(DASHBOARD.read_text())
            exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
            wanted = set()
            for expr in exprs:
                await query(session, base, expr.replace("$group", ".*"))  # valid PromQL
                wanted |= set(re.findall(r"\b((?:specswitch_|sglang:)[a-z_:]+)", expr))

            async def exported() -> set[str]:
                missing = wanted - await names()
                return set() if missing else wanted

            try:
                await poll(exported, limit_s=15)
            except TimeoutError:
                pytest.fail(f"dashboard metrics never scraped: {sorted(wanted - await names())}")
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        await router.close()
        await group.close()
