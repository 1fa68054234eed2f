"""KV guard verdicts and per-request admission to the spec pool."""

from __future__ import annotations

from dataclasses import replace

import pytest
from specswitch.router.kv_guard import GuardConfig, PoolKv, admit_spec, evaluate

CFG = GuardConfig()


def test_blocks_spec_when_in_flight_kv_would_not_fit() -> None:
    spec = PoolKv(capacity_tokens=10_000)
    v = evaluate(CFG, spec, demand_tokens=9_000, load=2)
    assert v.block_spec and not v.force_baseline and "would not fit" in v.reason
    assert not evaluate(CFG, spec, demand_tokens=8_000, load=2).block_spec


def test_forces_baseline_when_the_demand_overflows_spec_and_holds_between_fit_and_high() -> None:
    spec = PoolKv(capacity_tokens=10_000)
    assert evaluate(CFG, spec, demand_tokens=9_300, load=2).force_baseline
    between = evaluate(CFG, spec, demand_tokens=8_800, load=2)
    assert between.block_spec and not between.force_baseline


def test_forces_baseline_when_spec_nears_full_or_queues_whatever_the_load() -> None:
    near_full = PoolKv(capacity_tokens=10_000, est_used_tokens=9_500)
    assert evaluate(CFG, near_full, demand_tokens=9_500, load=1).force_baseline
    # A server gauge alone (it may count evictable cache) is shown, not decided on.
    reported = PoolKv(capacity_tokens=10_000, est_used_tokens=10, reported_usage=0.99)
    assert not evaluate(CFG, reported, 10, 1).force_baseline
    assert not evaluate(
        CFG, PoolKv(capacity_tokens=10_000, reported_waiting=2), 0, 1
    ).force_baseline
    queued = PoolKv(capacity_tokens=10_000, reported_waiting=3)
    v = evaluate(CFG, queued, 0, 1)
    assert v.force_baseline and "queues" in v.reason


def test_a_queue_behind_the_request_cap_is_not_a_kv_signal() -> None:
    at_cap = PoolKv(capacity_tokens=10**6, max_running=48, reported_running=48, reported_waiting=9)
    assert not evaluate(CFG, at_cap, 0, 48).force_baseline  # the thresholds decide that one
    below = PoolKv(capacity_tokens=10**6, max_running=48, reported_running=30, reported_waiting=9)
    assert evaluate(CFG, below, 0, 39).force_baseline  # room for requests, none for KV


def test_a_queue_small_beside_the_running_batch_is_admission_pacing() -> None:
    # Near a full pool a spec server admits arrivals as requests finish: 12 waiting beside
    # 116 running is the end of a batch, not starvation (a quarter of the batch would be).
    busy = PoolKv(capacity_tokens=120_000, max_running=128, reported_running=116)
    assert not evaluate(CFG, replace(busy, reported_waiting=12), 0, 128).force_baseline
    assert evaluate(CFG, replace(busy, reported_waiting=30), 0, 128).force_baseline
    starved = replace(busy, reported_running=40, reported_waiting=11)
    assert evaluate(CFG, starved, 0, 51).force_baseline


def test_max_running_blocks_spec_and_unknown_capacity_allows() -> None:
    assert evaluate(CFG, PoolKv(capacity_tokens=10**6, max_running=48), 0, 49).block_spec
    v = evaluate(CFG, PoolKv(), 10**9, 1)
    assert not v.block_spec and "not known" in v.reason
    assert not evaluate(GuardConfig(enabled=False), PoolKv(capacity_tokens=1), 10, 1).block_spec


def test_admit_spec_diverts_only_when_baseline_has_room() -> None:
    spec = PoolKv(capacity_tokens=10_000, est_used_tokens=8_000)
    roomy = PoolKv(capacity_tokens=100_000)
    assert admit_spec(CFG, spec, roomy, 1_000)
    assert not admit_spec(CFG, spec, roomy, 2_000)
    full_base = PoolKv(capacity_tokens=100_000, est_used_tokens=99_000)
    assert admit_spec(CFG, spec, full_base, 2_000)
    at_cap = PoolKv(capacity_tokens=10**6, inflight=48, max_running=48)
    assert not admit_spec(CFG, at_cap, roomy, 1)


@pytest.mark.parametrize(
    "cfg",
    [
        GuardConfig(spec_kv_fit=0),
        GuardConfig(spec_kv_high=1.5),
        GuardConfig(spec_kv_fit=0.95, spec_kv_high=0.9),
        GuardConfig(spec_queue_max=-1),
    ],
)
def test_bad_config_is_refused(cfg: GuardConfig) -> None:
    with pytest.raises(ValueError):
        cfg.validate()
