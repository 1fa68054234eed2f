"""docs/router.md stays true: its TOML example is the defaults, every policy key, `serve`
flag and metric family of the code is named in it."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

from specswitch.router import GroupConfig, RouterConfig
from specswitch.router.cli import register
from specswitch.router.config import PolicyConfig, config_from_mapping, policy_as_dict
from specswitch.router.metrics import RouterMetrics
from specswitch.router.state import Registry

DOC = (Path(__file__).parents[3] / "docs" / "router.md").read_text(encoding="utf-8")


def test_toml_example_is_the_defaults() -> None:
    block = re.search(r"```toml\n(.*?)```", DOC, re.S)
    assert block is not None, "docs/router.md lost its TOML example"
    config = config_from_mapping(tomllib.loads(block.group(1))).validate()
    example_groups = config.groups
    assert example_groups == (GroupConfig("g0", "http://10.0.0.5:30001", "http://10.0.0.5:30002"),)
    assert config == RouterConfig(groups=example_groups), "a documented default drifted"


def test_every_policy_key_is_documented() -> None:
    for key in policy_as_dict(PolicyConfig()):
        assert f"`{key}`" in DOC or f"\n{key} = " in DOC, key


def test_every_serve_flag_is_documented() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    flags = [o for a in serve._actions for o in a.option_strings if o.startswith("--")]
    missing = [f for f in flags if f != "--help" and f"`{f}" not in DOC]
    assert not missing, missing


def test_every_metric_family_is_documented() -> None:
    registry = Registry()
    registry.add(GroupConfig("g0", "http://a:1", "http://a:2"))
    text = RouterMetrics(registry, PolicyConfig).render().decode()
    families = set(re.findall(r"^# TYPE (specswitch_\w+) (\w+)", text, re.M))
    assert {"specswitch_kv_tokens", "specswitch_kv_guard"} <= {n for n, _ in families}
    for name, kind in families:
        if name.endswith("_created") and kind == "gauge":
            continue  # prometheus_client's creation timestamps
        assert f"`{name}`" in DOC, f"{name} ({kind}) is not in docs/router.md"
