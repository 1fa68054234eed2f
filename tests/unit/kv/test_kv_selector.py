"""KvSelector on real GroupState objects: drain stickiness, deadline, guard diversion, affinity."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from specswitch.router.config import GroupConfig, PolicyConfig
from specswitch.router.kv_selector import KvSelector
from specswitch.router.selection import RequestInfo, Route, Usage
from specswitch.router.state import DRAINING, GroupState, Registry

SYSTEM = {"role": "system", "content": "repository context " * 500}  # ~2.4k tokens shared


def body(conv: str, turns: int) -> dict:
    msgs = [SYSTEM, {"role": "user", "content": f"{conv} task " + "details " * 800}]  # ~1.6k own
    for i in range(1, turns):
        msgs += [
            {"role": "assistant", "content": f"r{i}"},
            {"role": "user", "content": f"{conv} {i}"},
        ]
    return {"model": "m", "messages": msgs, "max_tokens": 64, "stream": True}


def req(conv: str, turns: int) -> RequestInfo:
    return RequestInfo("/v1/chat/completions", body(conv, turns), {}, f"{conv}-{turns}")


def group(name: str = "g0") -> GroupState:
    return GroupState(GroupConfig(name, "http://127.0.0.1:1", "http://127.0.0.1:2"))


class Dial:
    def __init__(self, **kw: object) -> None:
        self.policy = dataclasses.replace(PolicyConfig(), **kw)

    def __call__(self) -> PolicyConfig:
        return self.policy


def serve(sel: KvSelector, groups: list[GroupState], info: RequestInfo, usage: Usage | None = None):
    route = sel.choose(groups, info)
    assert route is not None
    route.pool.acquire()
    return route


def finish(sel: KvSelector, route, info: RequestInfo) -> None:  # type: ignore[no-untyped-def]
    route.pool.release(time.monotonic())
    sel.on_complete(route, info, Usage(None, 10, None), True)


def test_follow_up_sticks_to_the_draining_pool_until_the_deadline() -> None:
    dial = Dial(drain_deadline_s=30.0)
    sel = KvSelector(dial)
    g = group()
    first = req("a", 1)
    r1 = serve(sel, [g], first)
    assert r1.pool.pool == "spec"
    keep = serve(sel, [g], req("z", 1))  # keeps spec busy so it drains
    finish(sel, r1, first)
    g.switch("baseline", time.monotonic())
    assert g.spec.state == DRAINING
    follow = serve(sel, [g], req("a", 2))
    assert (follow.pool.pool, follow.reason) == ("spec", "kv-sticky")
    new = serve(sel, [g], req("b", 1))
    assert new.pool.pool == "baseline"
    finish(sel, keep, req("z", 1))
    finish(sel, follow, req("a", 2))
    assert g.spec.state == "idle"  # emptied...
    again = serve(sel, [g], req("a", 3))  # ...but a follow-up within the deadline still sticks
    assert (again.pool.pool, g.spec.state) == ("spec", DRAINING)
    finish(sel, again, req("a", 3))
    g.last_switch -= 31  # the deadline passed
    late = serve(sel, [g], req("a", 4))
    assert late.pool.pool == "baseline"


def test_immediate_drain_moves_every_follow_up() -> None:
    sel = KvSelector(Dial(drain="immediate"))
    g = group()
    info = req("a", 1)
    r = serve(sel, [g], info)
    g.switch("baseline", time.monotonic())
    assert serve(sel, [g], req("a", 2)).pool.pool == "baseline"
    finish(sel, r, info)


def test_guard_diverts_to_baseline_when_spec_kv_would_overflow() -> None:
    sel = KvSelector(Dial())
    g = group()
    g.spec.server = {"max_total_num_tokens": 4_500, "max_running_requests": 48}
    g.baseline.server = {"max_total_num_tokens": 200_000}
    verdict = sel.kv_verdict(g)
    assert verdict.spec_fits and not verdict.spec_pressure
    a = serve(sel, [g], req("a", 1))
    assert a.pool.pool == "spec"
    b = serve(sel, [g], req("b", 1))
    assert (b.pool.pool, b.reason) == ("baseline", "kv-guard")
    verdict = sel.kv_verdict(g)
    assert not verdict.spec_fits and "would not fit" in verdict.reason
    assert (
        g.spec.kv["guard"]["block_spec"]
        and g.spec.kv["router_estimate"]["capacity_tokens"] == 4_500
    )
    g.spec.server_metrics = {"num_queue_reqs": 5.0}
    assert not sel.kv_verdict(g).spec_pressure  # one scrape with a queue: prefill pacing
    g.spec.server_metrics = {"num_queue_reqs": 4.0}
    assert not sel.kv_verdict(g).spec_pressure  # two: a burst still being prefilled
    assert not sel.kv_verdict(g).spec_pressure  # ticks between scrapes change nothing
    g.spec.server_metrics = {"num_queue_reqs": 6.0}  # the third scrape in a row still queues
    assert sel.kv_verdict(g).spec_pressure
    g.spec.server_metrics = {"num_queue_reqs": 0.0}
    assert not sel.kv_verdict(g).spec_pressure


def test_affinity_brings_a_conversation_back_to_its_group() -> None:
    sel = KvSelector(Dial())
    g0, g1 = group("g0"), group("g1")
    info = req("a", 1)
    r = serve(sel, [g0, g1], info)
    finish(sel, r, info)
    home = r.group
    other = g1 if home is g0 else g0
    for i in range(2):  # make the home group a little busier
        serve(sel, [home], req(f"x{i}", 1))
    again = serve(sel, [g0, g1], req("a", 2))
    assert again.group is home and again.reason == "affinity"
    fresh = RequestInfo(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, {}, "f"
    )
    assert serve(sel, [g0, g1], fresh).group is other  # nothing cached anywhere: least loaded


def test_a_server_that_comes_back_has_an_empty_cache() -> None:
    sel = KvSelector(Dial())
    g = group()
    info = req("a", 1)
    finish(sel, serve(sel, [g], info), info)
    conv = sel.tracker.describe(info.path, req("a", 2).body, {})
    assert sel.tracker.cached("g0", "spec", conv) > 0
    g.spec.healthy = False
    sel.kv_verdict(g)
    g.spec.healthy = True
    sel.kv_verdict(g)  # the policy tick sees it back: its prefix cache is gone
    assert sel.tracker.cached("g0", "spec", conv) == 0


def test_a_removed_group_leaves_nothing_behind() -> None:
    """Registry.remove -> on_group_removed: no index or KV figures survive for the name, so a
    group re-added under it (a pod back on the same IP) starts with an empty cache."""
    sel = KvSelector(Dial())
    registry = Registry(on_removed=sel.on_group_removed)
    g = registry.add(GroupConfig("g0", "http://127.0.0.1:1", "http://127.0.0.1:2"))
    info = req("a", 1)
    finish(sel, serve(sel, [g], info), info)
    sel.kv_verdict(g)
    assert sel.tracker.cached("g0", "spec", sel.tracker.describe(info.path, info.body, {})) > 0
    asyncio.run(registry.remove("g0"))
    assert registry.names() == []
    assert not any(k[0] == "g0" for k in sel.tracker._pool)
    assert not any(k[0] == "g0" for k in sel.tracker._index)
    assert not any(k[0] == "g0" for k in sel._was_healthy)
    again = registry.add(GroupConfig("g0", "http://127.0.0.1:1", "http://127.0.0.1:2"))
    conv = sel.tracker.describe(info.path, info.body, {})
    assert sel.tracker.cached("g0", "spec", conv) == 0 and again.name == "g0"


def test_a_migrated_request_takes_its_kv_estimate_to_the_new_pool() -> None:
    sel = KvSelector(Dial())
    g = group()
    info = req("m", 1)
    old = serve(sel, [g], info)
    counted = sel.tracker.pool_kv("g0", old.pool.pool).est_used_tokens
    assert counted > 0
    new = Route(g, g.partner(old.pool), "migrated")
    new.pool.acquire()
    old.pool.release(time.monotonic())
    sel.on_moved(old, new, info)
    assert sel.tracker.pool_kv("g0", old.pool.pool).est_used_tokens == 0
    assert sel.tracker.pool_kv("g0", new.pool.pool).est_used_tokens == counted
    conv = sel.tracker.describe(info.path, info.body, info.headers)
    assert sel.tracker.cached("g0", new.pool.pool, conv) > 0  # the continuation's prefix
    finish(sel, new, info)
    assert sel.tracker.pool_kv("g0", new.pool.pool).est_used_tokens == 0


def test_the_queue_trigger_works_without_server_metrics() -> None:
    # A server started without --enable-metrics: the queue comes from /get_load alone, and
    # each scrape is told apart by its timestamp (the metrics dict never changes).
    sel = KvSelector(Dial())
    g = group()
    g.spec.server = {"max_total_num_tokens": 100_000, "max_running_requests": 48}
    g.baseline.server = {"max_total_num_tokens": 200_000}
    g.spec.load_report, g.spec.load_waiting = 12, 8  # 4 running, 8 waiting: starving
    for i in range(1, 3):
        g.spec.load_report_at = float(i)
        assert not sel.kv_verdict(g).spec_pressure  # one, then two scrapes: not yet
    assert not sel.kv_verdict(g).spec_pressure  # a tick without a new scrape changes nothing
    g.spec.load_report_at = 3.0
    assert sel.kv_verdict(g).spec_pressure
