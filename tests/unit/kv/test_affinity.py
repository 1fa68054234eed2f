"""Drain stickiness and cross-group affinity decisions."""

from __future__ import annotations

import pytest
from specswitch.router.affinity import AffinityConfig, GroupCandidate, drain_choice, group_choice

CFG = AffinityConfig(sticky_min_tokens=1000, drain_deadline_s=30)


def choose(**kw: object) -> tuple[bool, str]:
    args = dict(
        cached_on_draining=5000,
        cached_on_active=0,
        draining_usage=0.2,
        draining_need_fraction=0.01,
        drain_age_s=1.0,
    )
    args.update(kw)
    c = drain_choice(CFG, **args)  # type: ignore[arg-type]
    return c.sticky, c.reason


def test_long_cached_conversation_stays_on_the_draining_pool() -> None:
    assert choose()[0]


def test_new_conversations_short_prefixes_and_full_pools_move() -> None:
    assert choose(cached_on_draining=0) == (False, "new conversation")
    assert not choose(cached_on_draining=900)[0]
    assert not choose(cached_on_active=4500)[0]  # active already holds most of it
    assert not choose(draining_usage=0.89, draining_need_fraction=0.05)[0]
    assert choose(draining_usage=None)[0]


def test_deadline_moves_everything_and_immediate_never_sticks() -> None:
    assert choose(drain_age_s=30.0) == (False, "drain deadline passed")
    c = drain_choice(
        AffinityConfig(drain="immediate"),
        cached_on_draining=10**6,
        cached_on_active=0,
        draining_usage=0.0,
        draining_need_fraction=0.0,
        drain_age_s=0.0,
    )
    assert not c.sticky


def test_group_affinity_unless_much_more_loaded() -> None:
    a = GroupCandidate("a", load=10, cached_tokens=8000)
    b = GroupCandidate("b", load=8, cached_tokens=0)
    assert group_choice(CFG, [a, b])[0] == "a"
    busy = GroupCandidate("a", load=40, cached_tokens=8000)
    assert group_choice(CFG, [busy, b])[0] is None
    small = GroupCandidate("a", load=1, cached_tokens=500)
    assert group_choice(CFG, [small, b])[0] is None
    assert group_choice(CFG, [a])[0] is None


@pytest.mark.parametrize(
    "cfg",
    [
        AffinityConfig(drain="lazy"),
        AffinityConfig(drain_deadline_s=-1),
        AffinityConfig(sticky_min_tokens=-1),
        AffinityConfig(drain_kv_headroom=0),
        AffinityConfig(affinity_load_ratio=0.5),
        AffinityConfig(affinity_load_slack=-1),
    ],
)
def test_bad_config_is_refused(cfg: AffinityConfig) -> None:
    with pytest.raises(ValueError):
        cfg.validate()


def test_a_busy_draining_pool_takes_no_more_sticky_requests() -> None:
    assert choose(draining_inflight=500)[0]  # no cap by default
    assert (
        choose(draining_inflight=48, draining_max_running=48)[1]
        == "draining pool at max_running_requests"
    )
    capped = AffinityConfig(sticky_min_tokens=1000, sticky_max_inflight=6)
    args = dict(
        cached_on_draining=5000,
        cached_on_active=0,
        draining_usage=0.2,
        draining_need_fraction=0.01,
        drain_age_s=1.0,
    )
    assert drain_choice(capped, draining_inflight=5, **args).sticky  # type: ignore[arg-type]
    assert not drain_choice(capped, draining_inflight=6, **args).sticky  # type: ignore[arg-type]
