"""The `specswitch` console entry point.

Each package owns its subcommands: it exposes ``register(subparsers)`` in a light module
(argparse only) whose handlers import the heavy parts lazily, so `specswitch serve` never
imports matplotlib and `specswitch layout` never imports aiohttp.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from specswitch import __version__
from specswitch.errors import UserError

# Modules that register subcommands, in the order they appear in --help.
_REGISTRARS = (
    "specswitch.router.cli",  # serve, ctl
    "specswitch.loadtest.emulator.cli",  # emulate
    "specswitch.loadtest.cli",  # loadtest, demo
    "specswitch.gpu_layout.cli",  # layout
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specswitch",
        description="Speculative decoding at low load, baseline under load: "
        "a router in front of two SGLang servers sharing the same GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"specswitch {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _REGISTRARS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "func", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except UserError as exc:
        print(f"specswitch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last resort: one line, not a traceback
        if os.environ.get("SPECSWITCH_DEBUG"):
            raise
        print(
            f"specswitch: internal error: {type(exc).__name__}: {exc} "
            "(set SPECSWITCH_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1
