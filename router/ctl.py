"""`specswitch ctl`: a small admin client (httpx) for a running router."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import httpx

from specswitch.errors import UserError

DEFAULT_ADMIN = "http://127.0.0.1:8001"


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare word such as auto / kv-aware


def dial_changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for flag, key in (
        ("mode", "mode"),
        ("high", "high"),
        ("low", "low"),
        ("min_dwell", "min_dwell_s"),
        ("drain", "drain"),
        ("drain_deadline", "drain_deadline_s"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            changes[key] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set takes KEY=VALUE (e.g. --set tick_s=0.2), not {item!r}")
        changes[key.strip()] = _parse_value(value.strip())
    return changes


def _kv_text(kv: dict[str, Any]) -> str:
    """used/capacity tokens and usage, plus the KV guard's reason when it has one."""
    used, cap = kv.get("used_tokens"), kv.get("max_total_num_tokens")
    text = f"{used}/{cap} tok" if used is not None and cap else "-"
    usage = kv.get("reported_token_usage", kv.get("token_usage"))
    if isinstance(usage, int | float):
        text += f" ({usage:.0%})"
    guard = kv.get("guard")
    if isinstance(guard, dict) and guard.get("reason"):
        text += f" guard={guard['reason']}"
    return text


def format_state(state: dict[str, Any]) -> str:
    p = state.get("policy", {})
    lines = [
        "policy: " + " ".join(f"{k}={v}" for k, v in p.items()),
        f"{'GROUP':<12} {'MODE':<9} {'LOAD':>5} {'SW->S/B':>8} {'DRAINED':<8} "
        f"{'POOL':<9} {'STATE':<9} {'HEALTHY':<8} {'INFLIGHT':>8}  KV",
    ]
    for g in state.get("groups", []):
        sw = g.get("switches", {})
        head = (
            f"{g['name']:<12} {g['mode']:<9} {g['load']:>5} "
            f"{str(sw.get('spec', 0)) + '/' + str(sw.get('baseline', 0)):>8} "
            f"{'yes' if g.get('admin_drained') else 'no':<8} "
        )
        for i, (pname, pool) in enumerate(g.get("pools", {}).items()):
            kv_text = _kv_text(pool.get("kv") or {})
            prefix = head if i == 0 else " " * len(head)
            lines.append(
                f"{prefix}{pname:<9} {pool['state']:<9} "
                f"{'yes' if pool['healthy'] else 'NO':<8} {pool['inflight']:>8}  {kv_text}"
            )
    if not state.get("groups"):
        lines.append("(no groups)")
    return "\n".join(lines)


def _error_text(resp: httpx.Response, base: str, token: str | None) -> str:
    """The router's OpenAI-style error message, or a hint when the answer is not the router's."""
    try:
        message = str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = resp.text.strip()[:200] or (
            f"no message; is {base} the router's admin listener (default port 8001)?"
        )
    if resp.status_code == 401:
        message += (
            "; pass --token or set SPECSWITCH_ADMIN_TOKEN"
            if not token
            else "; the --token / SPECSWITCH_ADMIN_TOKEN given is not the router's"
        )
    return message


def ctl_main(args: argparse.Namespace) -> int:
    base = (args.admin or os.environ.get("SPECSWITCH_ADMIN_URL") or DEFAULT_ADMIN).rstrip("/")
    token = args.token or os.environ.get("SPECSWITCH_ADMIN_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    cmd = args.ctl_command
    if not args.timeout > 0:
        raise UserError(f"--timeout must be > 0 seconds, not {args.timeout}")
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=args.timeout) as client:
            if cmd == "state":
                resp = client.get("/admin/state")
            elif cmd == "dial":
                changes = dial_changes(args)
                resp = (
                    client.patch("/admin/policy", json=changes)
                    if changes
                    else client.get("/admin/policy")
                )
            elif cmd in ("drain", "resume"):
                resp = client.post(f"/admin/groups/{args.group}/{cmd}")
            elif cmd == "add-group":
                resp = client.post(
                    "/admin/groups",
                    json={
                        "name": args.group,
                        "spec_url": args.spec_url,
                        "baseline_url": args.baseline_url,
                    },
                )
            elif cmd == "remove-group":
                resp = client.delete(f"/admin/groups/{args.group}", timeout=None)
            else:  # pragma: no cover - argparse restricts the choices
                raise UserError(f"unknown ctl action {cmd!r}")
    except httpx.HTTPError as exc:
        raise UserError(
            f"cannot reach the router's admin API at {base} ({type(exc).__name__}: {exc}); "
            "is it running? pass --admin URL"
        ) from exc
    if resp.status_code >= 400:
        raise UserError(f"{cmd}: HTTP {resp.status_code}: {_error_text(resp, base, token)}")
    try:
        data = resp.json()
    except ValueError as exc:
        raise UserError(
            f"{cmd}: {base} answered HTTP {resp.status_code} without JSON; "
            "is --admin the router's admin listener (default port 8001)?"
        ) from exc
    if cmd == "state" and not args.json:
        print(format_state(data))
    else:
        print(json.dumps(data, indent=2))
    return 0
