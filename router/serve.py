"""`specswitch serve`: build the config (file, then flags), run the router on uvloop.

SIGTERM/SIGINT: stop accepting, let in-flight streams finish within proxy.shutdown_grace_s,
exit 0. With no groups and no discovery: the embedded default, an emulated group.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from typing import Any

from specswitch.errors import UserError

from .config import (
    ConfigError,
    GroupConfig,
    RouterConfig,
    load_toml,
    parse_group_flag,
    updated,
)

log = logging.getLogger("specswitch.router")

_POLICY_FLAGS = {
    "mode": "mode",
    "high": "high",
    "low": "low",
    "min_dwell": "min_dwell_s",
    "drain": "drain",
    "drain_deadline": "drain_deadline_s",
    "load_signal": "load_signal",
}
_DISCOVERY_FLAGS = {
    "discover_dns": "dns_name",
    "discover_spec_port": "spec_port",
    "discover_baseline_port": "baseline_port",
    "discover_interval": "interval_s",
}


def _picked(args: argparse.Namespace, names: dict[str, str]) -> dict[str, Any]:
    return {
        key: getattr(args, flag)
        for flag, key in names.items()
        if getattr(args, flag, None) is not None
    }


def build_config(args: argparse.Namespace, env: dict[str, str] | None = None) -> RouterConfig:
    """The config file (if any), then the flags over it, then the env token. Validated."""
    env = dict(os.environ) if env is None else env
    try:
        config = load_toml(args.config) if args.config else RouterConfig()
        changes: dict[str, Any] = {}
        if args.group:
            changes["groups"] = tuple(parse_group_flag(g) for g in args.group)
        if args.listen:
            changes["listen"] = args.listen
        if args.admin_listen:
            changes["admin_listen"] = args.admin_listen
        changes["policy"] = updated(config.policy, "policy", _picked(args, _POLICY_FLAGS))
        changes["discovery"] = updated(
            config.discovery, "discovery", _picked(args, _DISCOVERY_FLAGS)
        )
        proxy: dict[str, Any] = {}
        if args.shutdown_grace is not None:
            proxy["shutdown_grace_s"] = args.shutdown_grace
        if args.access_log:
            proxy["access_log"] = True
        changes["proxy"] = updated(config.proxy, "proxy", proxy)
        if args.health_interval is not None:
            changes["health"] = updated(
                config.health, "health", {"interval_s": args.health_interval}
            )
        token = env.get("SPECSWITCH_ADMIN_TOKEN") or None
        config = dataclasses.replace(config, admin_token=token, **changes)
        return config.validate()
    except ConfigError as exc:
        raise UserError(f"{exc}") from exc


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


async def run(
    config: RouterConfig, profile: str, speedup: float, profile_thresholds: bool = False
) -> int:
    """Serve until SIGTERM/SIGINT. `profile_thresholds`: for the embedded emulated group, take
    high/low from the profile's model (where its baseline overtakes its spec server), as
    `specswitch demo` does; the caller sets it when the user gave neither flags nor a file."""
    from .app import start_router

    group = None
    if not config.groups and not config.discovery.dns_name:
        log.info(
            "event=embedded_default msg=%r profile=%s speedup=%s",
            "no --group, --config or --discover-dns given: starting an embedded EMULATED "
            "group (SGLang emulator, no GPU) so the router can be tried as is",
            profile, speedup,
        )  # fmt: skip
        try:
            from specswitch.loadtest.emulator import ProfileError, load_profile, start_group
        except ImportError as exc:
            raise UserError(
                f"the embedded default needs the emulator ({exc}); pass --group instead"
            ) from exc
        if not speedup > 0:
            raise UserError(f"--speedup must be > 0 (1 = real time), not {speedup}")
        try:
            loaded = load_profile(profile)
        except (ProfileError, OSError) as exc:
            raise UserError(f"--profile {profile}: {exc}") from exc
        if profile_thresholds:
            from specswitch.loadtest.thresholds import profile_thresholds as model_thresholds

            high, low, cross = model_thresholds(profile)
            config = dataclasses.replace(
                config, policy=dataclasses.replace(config.policy, high=high, low=low)
            )
            log.info(
                "event=embedded_thresholds high=%d low=%d model_crossover=%s msg=%r",
                high, low, "none" if cross is None else f"{cross:.1f}",
                "from the profile's model; --high/--low override",
            )  # fmt: skip
        group = await start_group(loaded, host="127.0.0.1", speedup=speedup)
        config = dataclasses.replace(
            config, groups=(GroupConfig("emulated", group.spec_url, group.baseline_url),)
        )
        log.info(
            "event=embedded_group_started group=emulated spec_url=%s baseline_url=%s",
            group.spec_url, group.baseline_url,
        )  # fmt: skip
    try:
        router = await start_router(config)
    except (OSError, ConfigError) as exc:
        if group is not None:
            await group.close()
        if isinstance(exc, ConfigError):
            raise UserError(str(exc)) from exc
        raise UserError(f"cannot listen ({exc}); choose another --listen/--admin-listen") from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"specswitch router: serving on {router.url} (admin {router.admin_url})", flush=True)
    try:
        await stop.wait()
        log.info(
            "event=shutdown_signal grace_s=%s inflight=%d msg=%r",
            config.proxy.shutdown_grace_s,
            sum(g.inflight for g in router.registry.groups),
            "in-flight requests may finish; a second signal stops at once",
        )
        closing = asyncio.ensure_future(router.close())

        def force() -> None:
            log.warning(
                "event=shutdown_forced inflight=%d", sum(g.inflight for g in router.registry.groups)
            )
            closing.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, force)
        with contextlib.suppress(asyncio.CancelledError):
            await closing
    finally:
        await router.close()  # no-op after a graceful close; cleans up after an error
        if group is not None:
            await group.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0


def raise_fd_limit() -> None:
    """Each stream holds two sockets (client + upstream): lift the soft fd limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("event=fd_limit_raised from=%d to=%d", soft, target)
    except (ImportError, ValueError, OSError) as exc:  # pragma: no cover - platform specific
        log.warning("event=fd_limit_unchanged error=%r", exc)


def serve_main(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    config = build_config(args)
    raise_fd_limit()
    given = args.high is not None or args.low is not None or args.config is not None
    main = run(config, args.profile, args.speedup, profile_thresholds=not given)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - non-Linux fallback
        return asyncio.run(main)
    return uvloop.run(main)
