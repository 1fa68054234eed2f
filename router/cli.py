"""`specswitch serve` and `specswitch ctl` (argparse only here; handlers import lazily)."""

from __future__ import annotations

import argparse


def _serve(args: argparse.Namespace) -> int:
    from .serve import serve_main

    return serve_main(args)


def _ctl(args: argparse.Namespace) -> int:
    from .ctl import ctl_main

    return ctl_main(args)


def _add_serve(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the router (no --group/--config: an embedded emulated group)",
        description="Run the router. Flags override the --config TOML file. With no --group, "
        "no --config and no --discover-dns, it starts an embedded emulated group "
        "(SGLang emulator, profile seed-glm5-rtxpro6000, real time) so you can try it "
        "without GPUs; its high/low then come from the profile's model unless given. The admin API needs 'Authorization: Bearer $SPECSWITCH_ADMIN_TOKEN' "
        "when that env variable is set.",
    )
    p.add_argument("--config", metavar="FILE", help="router TOML file (see docs/router.md)")
    p.add_argument(
        "--group",
        action="append",
        metavar="NAME=SPEC_URL,BASELINE_URL",
        help="a GPU group (repeatable); replaces the groups of --config",
    )
    p.add_argument("--listen", metavar="HOST:PORT", help="client listener (default 0.0.0.0:8000)")
    p.add_argument(
        "--admin-listen", metavar="HOST:PORT", help="admin listener (default 127.0.0.1:8001)"
    )
    p.add_argument("--mode", choices=("auto", "spec", "baseline"), help="policy mode")
    p.add_argument("--high", type=int, metavar="N", help="to baseline when load >= N")
    p.add_argument("--low", type=int, metavar="N", help="back to spec when load <= N")
    p.add_argument("--min-dwell", type=float, metavar="S", help="seconds between switches")
    p.add_argument("--drain", choices=("kv-aware", "immediate"), help="drain policy")
    p.add_argument("--drain-deadline", type=float, metavar="S", help="end of sticky draining")
    p.add_argument(
        "--load-signal",
        choices=("local", "max"),
        help="local in-flight only, or max(local, servers' running+waiting) for replicas",
    )
    p.add_argument("--discover-dns", metavar="NAME", help="discover groups from this DNS name")
    p.add_argument("--discover-spec-port", type=int, metavar="PORT", help="default 30001")
    p.add_argument("--discover-baseline-port", type=int, metavar="PORT", help="default 30002")
    p.add_argument("--discover-interval", type=float, metavar="S", help="default 10")
    p.add_argument("--shutdown-grace", type=float, metavar="S", help="SIGTERM grace (default 30)")
    p.add_argument("--health-interval", type=float, metavar="S", help="default 2")
    p.add_argument("--access-log", action="store_true", help="one log line per request")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument(
        "--profile",
        default="seed-glm5-rtxpro6000",
        help="emulator profile of the embedded default group",
    )
    p.add_argument("--speedup", type=float, default=1.0, help="time scale of the embedded emulator")
    p.set_defaults(func=_serve)


def _add_ctl(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ctl",
        help="admin client: state, dial, drain, resume",
        description="Talk to a running router's admin API. The token comes from --token or "
        "$SPECSWITCH_ADMIN_TOKEN; the URL from --admin or $SPECSWITCH_ADMIN_URL.",
    )
    p.add_argument("--admin", metavar="URL", help="admin URL (default http://127.0.0.1:8001)")
    p.add_argument("--token", help="bearer token (default $SPECSWITCH_ADMIN_TOKEN)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    sub = p.add_subparsers(dest="ctl_command", metavar="ACTION", required=True)
    state = sub.add_parser("state", help="show groups, pools and the policy")
    state.add_argument("--json", action="store_true", help="raw JSON")
    dial = sub.add_parser("dial", help="show or change the live policy (thresholds, mode)")
    dial.add_argument("--mode", choices=("auto", "spec", "baseline"))
    dial.add_argument("--high", type=int)
    dial.add_argument("--low", type=int)
    dial.add_argument("--min-dwell", type=float)
    dial.add_argument("--drain", choices=("kv-aware", "immediate"))
    dial.add_argument("--drain-deadline", type=float)
    dial.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any policy key"
    )
    for name, text in (("drain", "admin-drain a group"), ("resume", "resume a drained group")):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("group")
    add = sub.add_parser("add-group", help="add a group")
    add.add_argument("group")
    add.add_argument("spec_url")
    add.add_argument("baseline_url")
    rm = sub.add_parser("remove-group", help="drain a group, then remove it")
    rm.add_argument("group")
    p.set_defaults(func=_ctl)


def register(subparsers: argparse._SubParsersAction) -> None:
    _add_serve(subparsers)
    _add_ctl(subparsers)
