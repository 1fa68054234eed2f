"""Metrics names, `specswitch ctl` against a live router, discovery wiring from the config."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import pytest
from specswitch.router import DiscoveryConfig, GroupConfig

from specswitch.cli import main as cli_main

from .conftest import Upstream, wait_for

REQUIRED = (
    "specswitch_group_mode{",
    "specswitch_switches_total{",
    "specswitch_inflight{",
    "specswitch_requests_total{",
    "specswitch_ttft_seconds_bucket{",
    "specswitch_drain_seconds_bucket{",
    "specswitch_router_overhead_seconds_bucket{",
)


async def test_metrics_exposition_has_the_contract_names(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router((GroupConfig("g0", spec.url, base.url),), admin_token="x")
    async with aiohttp.ClientSession() as s:
        async with s.post(router.url + "/v1/chat/completions", json={"stream": True}) as r:
            await r.read()
        async with s.get(router.admin_url + "/metrics") as r:  # open even with a token set
            assert r.status == 200
            text = await r.text()
    for name in REQUIRED:
        assert name in text, name
    assert 'specswitch_requests_total{group="g0",outcome="ok",pool="spec"} 1.0' in text


async def test_ctl_state_dial_drain_resume(upstreams, make_router, capsys, monkeypatch) -> None:
    spec, base = upstreams
    router = await make_router((GroupConfig("g0", spec.url, base.url),), admin_token="tok")
    monkeypatch.setenv("SPECSWITCH_ADMIN_TOKEN", "tok")

    def ctl(*args: str) -> int:
        return cli_main(["ctl", "--admin", router.admin_url, *args])

    assert await asyncio.to_thread(ctl, "state") == 0
    assert "g0" in capsys.readouterr().out
    assert await asyncio.to_thread(ctl, "dial", "--high", "20", "--low", "3") == 0
    assert router.ctx.get_policy().high == 20
    assert await asyncio.to_thread(ctl, "dial", "--low", "30") == 2
    assert "policy.low" in capsys.readouterr().err and router.ctx.get_policy().low == 3
    assert await asyncio.to_thread(ctl, "drain", "g0") == 0
    assert router.registry.get("g0").admin_drained
    assert await asyncio.to_thread(ctl, "resume", "g0") == 0
    assert not router.registry.get("g0").admin_drained
    monkeypatch.setenv("SPECSWITCH_ADMIN_TOKEN", "wrong")
    assert await asyncio.to_thread(ctl, "state") == 2
    assert "401" in capsys.readouterr().err


async def test_dns_discovery_is_started_from_the_config(make_router) -> None:
    spec = Upstream("spec")
    await spec.start()
    base = Upstream("baseline")
    await base.start()
    try:
        spec_port = int(spec.url.rsplit(":", 1)[1])
        base_port = int(base.url.rsplit(":", 1)[1])
        router = await make_router(
            (),
            discovery=dataclasses.replace(
                DiscoveryConfig(), dns_name="localhost", spec_port=spec_port,
                baseline_port=base_port, interval_s=0.2,
            ),
        )  # fmt: skip
        await wait_for(lambda: "localhost-127-0-0-1" in router.registry.names(), 10, "discovery")
        group = router.registry.get("localhost-127-0-0-1")
        assert group.spec.url == spec.url
    finally:
        await spec.stop()
        await base.stop()


def test_serve_rejects_bad_flags_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli_main(["serve", "--group", "g0=http://a:1,http://a:2", "--high", "3", "--low", "5"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "policy.low" in err[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--profile", "no-such-profile"], "--profile no-such-profile: unknown profile"),
        (["--speedup", "0"], "--speedup must be > 0"),
        (["--config", "."], "cannot read config file"),
        (
            [
                "--discover-dns",
                "localhost",
                "--discover-spec-port",
                "30001",
                "--discover-baseline-port",
                "30001",
            ],
            "discovery.spec_port and discovery.baseline_port must differ",
        ),
    ],
)
def test_serve_bad_embedded_default_is_one_line(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    listen = ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error"]
    assert cli_main(["serve", *listen, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


async def test_admin_errors_are_openai_json(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router((GroupConfig("g0", spec.url, base.url),))
    group = {"name": "g0", "spec_url": spec.url, "baseline_url": base.url}
    async with aiohttp.ClientSession() as s:
        for method, path, status in (
            ("GET", "/admin/nope", 404),
            ("PUT", "/admin/policy", 405),
            ("POST", "/admin/groups", 409),
        ):
            async with s.request(method, router.admin_url + path, json=group) as r:
                assert r.status == status
                error = (await r.json())["error"]
                assert set(error) == {"message", "type", "code"}, error
                assert error["type"] != "server_error", error
        async with s.patch(router.admin_url + "/admin/policy", data=b"x" * (2 << 20)) as r:
            assert r.status == 413 and "error" in await r.json()


async def test_ctl_explains_a_missing_token_and_a_wrong_url(
    upstreams, make_router, capsys, monkeypatch
) -> None:
    spec, base = upstreams
    router = await make_router((GroupConfig("g0", spec.url, base.url),), admin_token="tok")
    monkeypatch.delenv("SPECSWITCH_ADMIN_TOKEN", raising=False)

    def ctl(*args: str) -> int:
        return cli_main(["ctl", *args])

    assert await asyncio.to_thread(ctl, "--admin", router.admin_url, "state") == 2
    assert "pass --token or set SPECSWITCH_ADMIN_TOKEN" in capsys.readouterr().err
    assert await asyncio.to_thread(ctl, "--admin", router.url, "--token", "tok", "state") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HTTP 404" in err[0]
    assert await asyncio.to_thread(ctl, "--admin", router.admin_url, "--timeout", "0", "state") == 2
    assert "--timeout must be > 0" in capsys.readouterr().err


async def test_a_removed_group_leaves_no_series_on_metrics(upstreams, make_router) -> None:
    spec, base = upstreams
    router = await make_router((GroupConfig("g0", spec.url, base.url),))
    g1 = {"name": "g1", "spec_url": spec.url, "baseline_url": base.url}
    async with aiohttp.ClientSession() as s:
        async with s.post(router.admin_url + "/admin/groups", json=g1) as r:
            assert r.status == 201
        async with s.post(router.admin_url + "/admin/groups/g0/drain") as r:
            assert r.status == 200  # the next request goes to g1
        async with s.post(router.url + "/v1/chat/completions", json={"stream": True}) as r:
            assert r.headers["X-Specswitch-Group"] == "g1"
            await r.read()
        async with s.get(router.admin_url + "/metrics") as r:
            assert 'group="g1"' in await r.text()
        async with s.delete(router.admin_url + "/admin/groups/g1") as r:
            assert r.status == 200
        async with s.get(router.admin_url + "/metrics") as r:
            text = await r.text()
    assert 'group="g1"' not in text and 'group="g0"' in text
