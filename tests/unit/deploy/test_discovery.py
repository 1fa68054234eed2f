"""DnsDiscovery reconcile logic against a minimal registry (the real registry: integration)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from specswitch.router.discovery import DnsDiscovery, NoAddress, group_name_for, resolve_dns


@dataclass(frozen=True)
class Group:
    name: str
    spec_url: str
    baseline_url: str


class FakeRegistry:
    """The registry contract: names(), add() (ValueError on a taken name), await remove()."""

    def __init__(self, *static: str) -> None:
        self.groups: dict[str, Group | None] = dict.fromkeys(static)
        self.release: dict[str, asyncio.Event] = {}
        self.removed: list[str] = []

    def names(self) -> list[str]:
        return list(self.groups)

    def add(self, group: Group) -> None:
        if group.name in self.groups:
            raise ValueError(f"group {group.name!r} exists")
        self.groups[group.name] = group

    async def remove(self, name: str) -> None:
        if name not in self.groups:
            raise KeyError(name)
        event = self.release.get(name)
        if event is not None:  # a drain that takes time
            await event.wait()
        del self.groups[name]
        self.removed.append(name)


class StubResolver:
    def __init__(self, *answer: str) -> None:
        self.answer: list[str] | BaseException = list(answer)
        self.calls = 0
        self.third_call = asyncio.Event()

    async def __call__(self, name: str) -> list[str]:
        self.calls += 1
        if self.calls >= 3:
            self.third_call.set()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return list(self.answer)


def make(registry: FakeRegistry, resolver: StubResolver, **kw: object) -> DnsDiscovery:
    return DnsDiscovery(
        registry,
        "sglang-groups.ns.svc.cluster.local",
        30001,
        30002,
        0.01,
        resolver,
        make_group=Group,
        **kw,
    )


async def test_adds_one_group_per_address_with_fixed_ports() -> None:
    reg, res = FakeRegistry(), StubResolver("10.0.0.2", "10.0.0.1", "fd00::7")
    disc = make(reg, res)
    await disc.reconcile_once()
    assert sorted(reg.names()) == [
        "sglang-groups-10-0-0-1",
        "sglang-groups-10-0-0-2",
        "sglang-groups-fd00--7",
    ]
    g = reg.groups["sglang-groups-10-0-0-1"]
    assert g == Group("sglang-groups-10-0-0-1", "http://10.0.0.1:30001", "http://10.0.0.1:30002")
    assert reg.groups["sglang-groups-fd00--7"].spec_url == "http://[fd00::7]:30001"
    await disc.reconcile_once()  # same answer: nothing changes
    assert len(reg.names()) == 3 and reg.removed == []


async def test_vanished_address_removed_after_misses_then_readded() -> None:
    reg, res = FakeRegistry(), StubResolver("10.0.0.1", "10.0.0.2")
    disc = make(reg, res)
    await disc.reconcile_once()
    res.answer = ["10.0.0.1"]
    await disc.reconcile_once()  # first miss: kept (DNS answers can lag or flap)
    assert "sglang-groups-10-0-0-2" in reg.names()
    await disc.reconcile_once()  # second miss: drained and removed
    await disc.wait_removals()
    assert reg.removed == ["sglang-groups-10-0-0-2"]
    assert disc.owned == {"sglang-groups-10-0-0-1"}
    res.answer = ["10.0.0.1", "10.0.0.2"]
    await disc.reconcile_once()
    assert "sglang-groups-10-0-0-2" in reg.names()


async def test_one_miss_then_back_resets_the_count() -> None:
    reg, res = FakeRegistry(), StubResolver("10.0.0.1")
    disc = make(reg, res)
    await disc.reconcile_once()
    for answer in ([], ["10.0.0.1"], [], ["10.0.0.1"]):
        res.answer = answer
        await disc.reconcile_once()
    await disc.wait_removals()
    assert reg.removed == []


async def test_removal_runs_in_background_and_blocks_readd_until_done() -> None:
    reg, res = FakeRegistry(), StubResolver("10.0.0.1", "10.0.0.2")
    disc = make(reg, res, remove_after_misses=1)
    await disc.reconcile_once()
    reg.release["sglang-groups-10-0-0-1"] = asyncio.Event()
    res.answer = ["10.0.0.2", "10.0.0.3"]
    await disc.reconcile_once()  # removal of .1 waits for its drain; .3 is added meanwhile
    assert "sglang-groups-10-0-0-3" in reg.names()
    assert "sglang-groups-10-0-0-1" in reg.names()
    res.answer = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    await disc.reconcile_once()  # .1 back while still draining: not added twice
    reg.release["sglang-groups-10-0-0-1"].set()
    await disc.wait_removals()
    assert reg.removed == ["sglang-groups-10-0-0-1"]
    await disc.reconcile_once()
    assert sorted(reg.names())[0] == "sglang-groups-10-0-0-1"


async def test_failed_resolution_keeps_groups_and_no_address_empties() -> None:
    reg, res = FakeRegistry(), StubResolver("10.0.0.1")
    disc = make(reg, res, remove_after_misses=1)
    await disc.reconcile_once()
    res.answer = TimeoutError("dns timeout")
    await disc.reconcile_once()
    await disc.wait_removals()
    assert reg.names() == ["sglang-groups-10-0-0-1"] and disc.last_addresses == ["10.0.0.1"]
    res.answer = NoAddress()
    await disc.reconcile_once()
    await disc.wait_removals()
    assert reg.names() == [] and disc.last_addresses == []


async def test_static_groups_are_never_touched() -> None:
    taken = group_name_for("sglang-groups", "10.0.0.9")
    reg, res = FakeRegistry("g0", taken), StubResolver("10.0.0.9")
    disc = make(reg, res, remove_after_misses=1)
    await disc.reconcile_once()
    assert reg.groups[taken] is None and disc.owned == frozenset()  # not replaced
    res.answer = []
    await disc.reconcile_once()
    await disc.wait_removals()
    assert sorted(reg.names()) == sorted(["g0", taken]) and reg.removed == []


async def test_run_loops_until_cancelled() -> None:
    reg, res = FakeRegistry(), StubResolver("10.0.0.1")
    disc = make(reg, res)
    task = asyncio.create_task(disc.run())
    await asyncio.wait_for(res.third_call.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert reg.names() == ["sglang-groups-10-0-0-1"]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"dns_name": ""}, "dns_name"),
        ({"spec_port": 0}, "spec_port"),
        ({"baseline_port": 30001}, "must differ"),
        ({"interval_s": 0}, "interval_s"),
    ],
)
def test_bad_settings_fail_naming_the_field(kw: dict, field: str) -> None:
    args = {"dns_name": "g", "spec_port": 30001, "baseline_port": 30002, "interval_s": 1.0} | kw
    with pytest.raises(ValueError, match=field):
        DnsDiscovery(FakeRegistry(), **args)


async def test_default_resolver_reads_the_system_resolver() -> None:
    assert "127.0.0.1" in await resolve_dns("localhost")
