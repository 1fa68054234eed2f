"""The KV keys of the dial: TOML [policy] / PATCH JSON names, types and validation."""

from __future__ import annotations

import pytest
from specswitch.router.config import ConfigError, PolicyConfig, config_from_mapping, updated
from specswitch.router.kv_selector import affinity_config, guard_config


def test_kv_keys_load_from_the_policy_table_and_reach_the_kv_layer() -> None:
    config = config_from_mapping(
        {
            "policy": {
                "drain": "immediate",
                "drain_deadline_s": 12,
                "sticky_min_tokens": 4096,
                "drain_kv_headroom": 0.8,
                "sticky_max_inflight": 0,
                "affinity_load_ratio": 2,
                "affinity_load_slack": 1,
                "kv_guard": False,
                "spec_kv_fit": 0.7,
                "spec_kv_high": 0.8,
                "spec_queue_max": 3,
            }
        }
    ).validate()
    a, g = affinity_config(config.policy), guard_config(config.policy)
    assert (a.drain, a.drain_deadline_s, a.sticky_min_tokens, a.drain_kv_headroom) == (
        "immediate", 12.0, 4096, 0.8,
    )  # fmt: skip
    assert a.sticky_max_inflight == config.policy.high  # 0: the policy's high
    assert (a.affinity_load_ratio, a.affinity_load_slack) == (2.0, 1)
    assert (g.enabled, g.spec_kv_fit, g.spec_kv_high, g.spec_queue_max) == (False, 0.7, 0.8, 3)


@pytest.mark.parametrize(
    "changes",
    [
        {"sticky_min_tokens": -1},
        {"sticky_min_tokens": "many"},
        {"drain_kv_headroom": 1.5},
        {"spec_kv_fit": 0},
        {"spec_kv_fit": 0.95, "spec_kv_high": 0.9},
        {"spec_queue_max": -2},
        {"affinity_load_ratio": 0.5},
        {"kv_guard": "yes"},
        {"sticky_max_inflight": -1},
    ],
)
def test_bad_kv_values_are_refused_naming_the_key(changes: dict) -> None:
    with pytest.raises(ConfigError) as err:
        updated(PolicyConfig(), "policy", changes).validate()
    assert any(key in str(err.value) for key in changes)
