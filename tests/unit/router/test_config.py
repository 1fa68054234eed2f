"""Config tree: defaults, TOML, validation naming the field, update-by-copy."""

import argparse

import pytest
from specswitch.router.config import (
    ConfigError,
    PolicyConfig,
    RouterConfig,
    config_from_mapping,
    load_toml,
    parse_group_flag,
    updated,
)
from specswitch.router.serve import build_config

from specswitch.errors import UserError


def test_defaults_validate() -> None:
    RouterConfig().validate()
    p = PolicyConfig()
    assert (p.mode, p.high, p.low, p.drain) == ("auto", 12, 6, "kv-aware")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"low": 12}, "policy.low"),
        ({"min_dwell_s": 0}, "policy.min_dwell_s"),
        ({"mode": "fast"}, "policy.mode"),
        ({"drain": "lazy"}, "policy.drain"),
        ({"high": "many"}, "policy.high"),
        ({"bogus": 1}, "bogus"),
        ({"high": True}, "policy.high"),
        ({"tick_s": 1e-6}, "policy.tick_s"),
    ],
)
def test_bad_policy_names_the_field(changes: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        updated(PolicyConfig(), "policy", changes).validate()


def test_toml_and_flags_override(tmp_path) -> None:
    path = tmp_path / "router.toml"
    path.write_text(
        'listen = "127.0.0.1:9000"\n'
        "[policy]\nhigh = 20\nlow = 4\nmin_dwell_s = 5\n"
        "[health]\ninterval_s = 0.5\n"
        '[[groups]]\nname = "g0"\nspec_url = "http://a:1"\nbaseline_url = "http://a:2"\n'
    )
    cfg = load_toml(path).validate()
    assert (
        cfg.listen == "127.0.0.1:9000" and cfg.policy.high == 20 and cfg.policy.min_dwell_s == 5.0
    )
    assert cfg.groups[0].baseline_url == "http://a:2" and cfg.health.interval_s == 0.5
    args = argparse.Namespace(
        config=str(path), group=["g1=http://b:1,http://b:2"], listen=None, admin_listen=None,
        mode=None, high=30, low=None, min_dwell=None, drain=None, drain_deadline=None,
        load_signal=None, discover_dns=None, discover_spec_port=None,
        discover_baseline_port=None, discover_interval=None, shutdown_grace=None,
        access_log=False, health_interval=None,
    )  # fmt: skip
    cfg = build_config(args, env={"SPECSWITCH_ADMIN_TOKEN": "s3cret"})
    assert cfg.policy.high == 30 and cfg.policy.low == 4
    assert [g.name for g in cfg.groups] == ["g1"] and cfg.admin_token == "s3cret"
    args.low = 40
    with pytest.raises(UserError, match=r"policy\.low"):
        build_config(args, env={})


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="--group"):
        parse_group_flag("g0=http://a:1")
    with pytest.raises(ConfigError, match="spec_url"):
        parse_group_flag("g0=ftp://a:1,http://a:2")
    with pytest.raises(ConfigError, match="unknown top-level"):
        config_from_mapping({"polcy": {}})
    with pytest.raises(ConfigError, match="listen"):
        RouterConfig(listen="8000").validate()
    with pytest.raises(ConfigError, match="twice"):
        config_from_mapping(
            {"groups": [{"name": "a", "spec_url": "http://x:1", "baseline_url": "http://x:2"}] * 2}
        ).validate()


def test_loop_periods_have_a_floor() -> None:
    """A near-zero period would spin the event loop that serves the hot path."""
    for section, key in (("health", "interval_s"), ("scrape", "interval_s"),
                         ("scrape", "info_interval_s"), ("discovery", "interval_s")):  # fmt: skip
        with pytest.raises(ConfigError, match=rf"{section}\.{key} must be >= 0\.01 s"):
            config_from_mapping({section: {key: 0.000001}}).validate()
        config_from_mapping({section: {key: 0.05}}).validate()
