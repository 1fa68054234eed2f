"""Group and pool choice (pure reads of state)."""

from specswitch.router.config import GroupConfig, PolicyConfig
from specswitch.router.selection import RequestInfo, Selector
from specswitch.router.state import GroupState

INFO = RequestInfo("/v1/chat/completions", {}, {}, "r1")


def _groups() -> list[GroupState]:
    return [GroupState(GroupConfig(f"g{i}", f"http://h{i}:1", f"http://h{i}:2")) for i in range(2)]


def test_least_loaded_group_then_mode_pool() -> None:
    a, b = _groups()
    sel = Selector(PolicyConfig)
    a.spec.inflight = 3
    route = sel.choose([a, b], INFO)
    assert route is not None and route.group is b and route.pool is b.spec
    b.mode = "baseline"
    assert sel.choose([b], INFO).pool is b.baseline


def test_failover_and_retry_avoid() -> None:
    (a,) = _groups()[:1]
    sel = Selector(PolicyConfig)
    a.spec.healthy = False
    route = sel.choose([a], INFO)
    assert route.pool is a.baseline and route.reason == "failover"
    a.spec.healthy = True
    route = sel.choose([a], INFO, avoid=(a.spec,))
    assert route.pool is a.baseline and route.reason == "retry"
    assert sel.choose([a], INFO, avoid=(a.spec, a.baseline)) is None


def test_admin_drained_group_gets_nothing() -> None:
    a, b = _groups()
    sel = Selector(PolicyConfig)
    a.admin_drained = True
    assert sel.choose([a, b], INFO).group is b
    b.admin_drained = True
    assert sel.choose([a, b], INFO) is None


def test_switch_and_drain_states() -> None:
    (g,) = _groups()[:1]
    g.spec.inflight = 2
    assert g.switch("baseline", 10.0) is None
    assert (g.spec.state, g.baseline.state) == ("draining", "active")
    assert g.spec.release(11.0) is None
    assert g.spec.release(12.5) == 2.5 and g.spec.state == "idle"
    assert g.switch("spec", 20.0) == 0.0 and g.switches == {"spec": 1, "baseline": 1}
