"""Subcommand registration (argparse only; handlers import lazily)."""

from __future__ import annotations

import argparse


def _not_built(args: argparse.Namespace) -> int:
    from specswitch.errors import UserError

    raise UserError(f"{args.command!r} is not built yet")


def register(subparsers: argparse._SubParsersAction) -> None:
    subparsers.add_parser("layout", help="(not built yet)").set_defaults(func=_not_built)
