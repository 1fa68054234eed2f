"""`specswitch emulate`: run one emulated group (spec + baseline servers, one simulated GPU).

Argparse only at module level; the handler imports the emulator lazily.
"""

from __future__ import annotations

import argparse


def _number(text: str, kind: type[int] | type[float], what: str) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _positive_float(text: str) -> float:
    value = _number(text, float, "a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(_number(text, int, "an integer"))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _port(text: str) -> int:
    value = int(_number(text, int, "a port number"))
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be within 0..65535, got {text}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "emulate",
        help="run an emulated SGLang group (spec + baseline servers on one simulated GPU)",
        description="Run one emulated group: a speculative and a baseline SGLang server that "
        "share one simulated GPU, until SIGINT/SIGTERM. Prints one line per server once "
        "it listens. See docs/emulator.md.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--profile",
        default="seed-glm5-rtxpro6000",
        help="built-in profile name (default: %(default)s); see --list-profiles",
    )
    src.add_argument("--profile-file", metavar="PATH", help="a profile TOML file")
    p.add_argument("--list-profiles", action="store_true", help="list built-in profiles and exit")
    p.add_argument(
        "--fit-csv",
        metavar="CSV",
        help="fit both pools' step times to measured points (columns pool,"
        "concurrency,output_tok_s) on top of the chosen profile",
    )
    p.add_argument(
        "--write-profile",
        metavar="PATH",
        help="with --fit-csv: write the fitted profile TOML to PATH and exit",
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    p.add_argument("--spec-port", type=_port, default=30001, help="spec server port (0 = any)")
    p.add_argument(
        "--baseline-port", type=_port, default=30002, help="baseline server port (0 = any)"
    )
    p.add_argument(
        "--speedup",
        type=_positive_float,
        default=1.0,
        help="time scale: every simulated duration is divided by X (default 1)",
    )
    p.add_argument(
        "--enable-metrics",
        action="store_true",
        help="serve Prometheus metrics at /metrics (like SGLang's flag)",
    )
    p.add_argument(
        "--incremental-streaming-output",
        action="store_true",
        help="/generate streams deltas instead of cumulative text (SGLang flag)",
    )
    p.add_argument(
        "--disable-cache-report",
        action="store_true",
        help="omit usage.prompt_tokens_details.cached_tokens",
    )
    ov = p.add_argument_group("overrides (replace the profile's value)")
    ov.add_argument("--spec-kv-tokens", type=_positive_int)
    ov.add_argument("--baseline-kv-tokens", type=_positive_int)
    ov.add_argument("--spec-max-running-requests", type=_positive_int)
    ov.add_argument("--baseline-max-running-requests", type=_positive_int)
    ov.add_argument(
        "--accept-length",
        type=_positive_float,
        help="mean accepted tokens per verify step of the spec server",
    )
    ov.add_argument("--prefill-tokens-per-s", type=_positive_float)
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from .run import run_cli

    return run_cli(args)
