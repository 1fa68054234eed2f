"""Every package folder is installed: pyproject lists each folder that holds an __init__.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {
    "router": "specswitch.router",
    "gpu_layout": "specswitch.gpu_layout",
    "loadtest": "specswitch.loadtest",
    "specswitch": "specswitch",
}


def test_every_package_folder_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in MAPPED.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *rel.parts]))
    assert found - listed == set(), f"add these to [tool.setuptools] packages: {found - listed}"


def test_cli_lists_every_contract_subcommand() -> None:
    from specswitch.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"serve", "emulate", "demo", "ctl", "layout", "loadtest"} <= set(sub.choices)
