"""DNS discovery inside a real router, with a resolver stub: groups join and leave under load
and no request fails. Each emulated group listens on its own loopback address (127.0.0.x) on
the same two ports, as pods behind a headless Service do."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from specswitch.loadtest.emulator import start_group
from specswitch.router import DiscoveryConfig, HealthConfig, RouterConfig, start_router
from specswitch.router import discovery as discovery_module

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
DNS_NAME = "sglang-groups.specswitch.svc.cluster.local"


def free_port_on_all(hosts: tuple[str, ...]) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind((hosts[0], 0))
            port = s.getsockname()[1]
        try:
            for host in hosts[1:]:
                with socket.socket() as s:
                    s.bind((host, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every loopback address")


async def wait_until(check, limit_s: float = 20.0) -> None:
    """Router state changes on its own timers (no event to wait on): poll, bounded."""
    async with asyncio.timeout(limit_s):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_groups_added_and_removed_at_runtime_with_no_failed_request(monkeypatch) -> None:
    spec_port = free_port_on_all(ADDRESSES)
    baseline_port = free_port_on_all(ADDRESSES)
    groups = {
        ip: await start_group(host=ip, spec_port=spec_port, baseline_port=baseline_port, speedup=20)
        for ip in ADDRESSES
    }
    answer = [ADDRESSES[0]]

    async def resolver(name: str) -> list[str]:
        assert name == DNS_NAME
        return list(answer)

    monkeypatch.setattr(discovery_module, "resolve_dns", resolver)
    config = RouterConfig(
        listen="127.0.0.1:0",
        admin_listen="127.0.0.1:0",
        health=HealthConfig(interval_s=0.05),
        discovery=DiscoveryConfig(
            dns_name=DNS_NAME, spec_port=spec_port, baseline_port=baseline_port, interval_s=0.05
        ),
    )
    router = await start_router(config)
    name = {ip: discovery_module.group_name_for(DNS_NAME, ip) for ip in ADDRESSES}
    results: list[tuple[int, str, bool]] = []
    stop = asyncio.Event()

    async def client(session: aiohttp.ClientSession, i: int) -> None:
        n = 0
        while not stop.is_set() and n < 400:
            n += 1
            stream = n % 2 == 0
            body = {"model": "m", "messages": [{"role": "user", "content": f"client {i} turn {n}"}],
                    "max_tokens": 24, "stream": stream}  # fmt: skip
            async with session.post(f"{router.url}/v1/chat/completions", json=body) as resp:
                text = await resp.text()
                complete = text.rstrip().endswith("data: [DONE]") if stream else '"choices"' in text
                complete = complete and '"error"' not in text
                results.append((resp.status, resp.headers.get("X-Specswitch-Group", ""), complete))

    try:
        await wait_until(lambda: router.registry.names() == [name[ADDRESSES[0]]])
        await wait_until(
            lambda: any(p.healthy for g in router.registry.groups for p in g.pools.values())
        )
        async with aiohttp.ClientSession() as session:
            clients = [asyncio.create_task(client(session, i)) for i in range(6)]
            await wait_until(lambda: len(results) >= 10)
            answer[:] = list(ADDRESSES)  # two more nodes join
            await wait_until(lambda: len(router.registry.names()) == 3)
            seen = lambda: {g for _, g, _ in results}  # noqa: E731
            await wait_until(lambda: set(name.values()) <= seen())
            answer[:] = [ADDRESSES[1]]  # two nodes leave: drained, then removed
            await wait_until(lambda: router.registry.names() == [name[ADDRESSES[1]]])
            for ip in (ADDRESSES[0], ADDRESSES[2]):  # the pods go away only after the drain
                await groups[ip].close()
            mark = len(results)
            await wait_until(lambda: len(results) >= mark + 20)
            stop.set()
            await asyncio.gather(*clients)
    finally:
        stop.set()
        await router.close()
        for group in groups.values():
            await group.close()
    failed = [r for r in results if r[0] != 200 or not r[2]]
    assert not failed, f"{len(failed)} of {len(results)} requests failed: {failed[:5]}"
    assert {g for _, g, _ in results[mark:]} == {name[ADDRESSES[1]]}
    assert len(results) >= 40


@pytest.fixture(autouse=True)
def _loopback_aliases_work() -> None:
    try:
        with socket.socket() as s:
            s.bind((ADDRESSES[-1], 0))
    except OSError:
        pytest.skip("127.0.0.x addresses other than 127.0.0.1 are not bindable here")
