"""The body of `specswitch emulate` (imported lazily by cli.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from specswitch.errors import UserError

from .fit import fit_profile, format_fit, write_profile
from .group import start_group
from .profile import (
    OVERRIDE_NAMES,
    Profile,
    ProfileError,
    builtin_profile_names,
    load_profile,
)


def _overrides(args: argparse.Namespace) -> dict[str, float | int]:
    return {n: getattr(args, n) for n in OVERRIDE_NAMES if getattr(args, n, None) is not None}


def _profile(args: argparse.Namespace) -> Profile:
    profile = load_profile(args.profile_file or args.profile)
    if args.fit_csv:
        profile, results = fit_profile(profile, args.fit_csv)
        print(f"emulate: fitted {args.fit_csv}:\n{format_fit(results)}", flush=True)
    return profile.with_overrides(_overrides(args))


async def _serve(args: argparse.Namespace, profile: Profile) -> None:
    try:
        group = await start_group(
            profile,
            host=args.host,
            spec_port=args.spec_port,
            baseline_port=args.baseline_port,
            speedup=args.speedup,
            enable_metrics=args.enable_metrics,
            incremental_streaming_output=args.incremental_streaming_output,
            enable_cache_report=not args.disable_cache_report,
        )
    except OSError as exc:
        raise UserError(
            f"cannot listen on {args.host} (spec port {args.spec_port}, baseline port "
            f"{args.baseline_port}): {exc.strerror or exc}; pick free ports or stop what uses them"
        ) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        for pool in ("spec", "baseline"):
            server = group.servers[pool]
            p = server.pool
            print(
                f"emulate: {pool:<8} server listening on {server.url}  "
                f"(profile {profile.name}, max_running_requests {p.max_running_requests}, "
                f"kv_tokens {p.kv_tokens}, speedup {args.speedup:g})",
                flush=True,
            )
        await stop.wait()
    finally:
        await group.close()
    print("emulate: stopped", flush=True)


def run_cli(args: argparse.Namespace) -> int:
    if args.list_profiles:
        for name in builtin_profile_names():
            print(f"{name}: {load_profile(name).description}")
        return 0
    if args.write_profile and not args.fit_csv:
        raise UserError("--write-profile needs --fit-csv CSV (the points to fit)")
    try:
        profile = _profile(args)
    except ProfileError as exc:
        raise UserError(f"{exc}; fix the profile, the CSV or the override") from None
    except OSError as exc:
        path = exc.filename or args.profile_file or args.fit_csv
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        if args.write_profile:
            write_profile(
                profile,
                args.write_profile,
                header=f"{profile.description}\nWritten by specswitch emulate "
                "--fit-csv; step times fitted, other fields from the base profile.",
            )
            print(f"emulate: wrote {args.write_profile}")
            return 0
    except OSError as exc:
        raise UserError(f"cannot write {args.write_profile}: {exc.strerror or exc}") from None
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        uvloop = None
    if uvloop is not None:
        uvloop.run(_serve(args, profile))
    else:
        asyncio.run(_serve(args, profile))
    return 0
