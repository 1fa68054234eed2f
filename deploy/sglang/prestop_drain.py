#!/usr/bin/env python3
"""preStop hook of a GPU-group pod: stop new traffic, let in-flight streams finish, then exit.

1. Ask every router replica to drain this pod's group (POST /admin/groups/{name}/drain on the
   admin listener). The group name is the one DNS discovery gives the pod's address
   (router/discovery.py: ``<first label of DISCOVERY_DNS_NAME>-<POD_IP with dashes>``), or
   GROUP_NAME when set. Replicas: ROUTER_ADMIN_URLS (comma-separated) or every address of
   ROUTER_ADMIN_DNS (a headless Service of the router pods) on ROUTER_ADMIN_PORT (8001).
   SPECSWITCH_ADMIN_TOKEN, when set, is sent as a bearer token.
2. Wait until both local servers report no running or waiting request (GET /get_load, or
   /v1/loads on newer SGLang), for DRAIN_TIMEOUT_S at most (300), polling every POLL_S (2).
Kubernetes sends SIGTERM after this hook returns; terminationGracePeriodSeconds must exceed
DRAIN_TIMEOUT_S. Standard library only: it runs inside the official SGLang image.
Always exits 0 (a failed preStop only delays the pod), logging one line per event.

``prestop_drain.py --resume`` does the opposite step 1 (POST .../resume on every replica) and
returns: launch-group.sh runs it once both servers are healthy, so a group pod that restarts
on the same address (liveness failure: preStop drained it, discovery may never have seen the
address go) takes traffic again.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request


def log(event: str, **fields: object) -> None:
    extra = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"prestop-drain: event={event} {extra}".rstrip(), file=sys.stderr, flush=True)


def group_name(dns_name: str, ip: str) -> str:  # same rule as router/discovery.py
    label = dns_name.strip(".").split(".", 1)[0] or "group"
    return f"{label}-{ip.replace('.', '-').replace(':', '-')}"


def router_admin_urls(env: dict[str, str]) -> list[str]:
    if env.get("ROUTER_ADMIN_URLS"):
        return [u.strip().rstrip("/") for u in env["ROUTER_ADMIN_URLS"].split(",") if u.strip()]
    name = env.get("ROUTER_ADMIN_DNS", "")
    if not name:
        return []
    port = int(env.get("ROUTER_ADMIN_PORT", "8001"))
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        log("resolve_failed", name=name, error=exc)
        return []
    ips = sorted({str(info[4][0]) for info in infos})
    return [f"http://[{ip}]:{port}" if ":" in ip else f"http://{ip}:{port}" for ip in ips]


def admin_post(url: str, group: str, action: str, token: str) -> None:
    req = urllib.request.Request(f"{url}/admin/groups/{group}/{action}", data=b"", method="POST")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            log(f"{action}_requested", router=url, group=group, status=resp.status)
    except urllib.error.HTTPError as exc:  # 404: this replica has not discovered the group yet
        log(f"{action}_refused", router=url, group=group, status=exc.code)
    except OSError as exc:
        log(f"{action}_unreachable", router=url, group=group, error=exc)


def server_requests(port: int) -> int | None:
    """Running + waiting requests of the local server, None when it does not answer."""
    base = f"http://127.0.0.1:{port}"
    for path in ("/get_load", "/v1/loads"):
        try:
            with urllib.request.urlopen(base + path, timeout=5) as resp:
                body = json.load(resp)
        except (OSError, ValueError):
            continue
        if isinstance(body, list):  # /get_load: [{"num_reqs": running+waiting, ...}]
            return sum(int(d.get("num_reqs", 0)) for d in body)
        if isinstance(body, dict) and isinstance(body.get("loads"), list):
            return sum(
                int(d.get("num_running_reqs", 0)) + int(d.get("num_waiting_reqs", 0))
                for d in body["loads"]
            )
    return None


def main(env: dict[str, str], argv: list[str]) -> int:
    token = env.get("SPECSWITCH_ADMIN_TOKEN", "")
    group = env.get("GROUP_NAME") or group_name(
        env.get("DISCOVERY_DNS_NAME", "sglang-groups"), env.get("POD_IP", "")
    )
    urls = router_admin_urls(env)
    action = "resume" if "--resume" in argv else "drain"
    log("start", action=action, group=group, routers=len(urls))
    for url in urls:
        admin_post(url, group, action, token)
    if action == "resume":
        return 0
    ports = [int(env.get("SPEC_PORT", "30001")), int(env.get("BASELINE_PORT", "30002"))]
    timeout = float(env.get("DRAIN_TIMEOUT_S", "300"))
    poll = float(env.get("POLL_S", "2"))
    start = time.monotonic()
    idle_polls = 0
    while time.monotonic() - start < timeout:
        counts = [server_requests(p) for p in ports]
        busy = sum(c for c in counts if c is not None)
        idle_polls = idle_polls + 1 if busy == 0 else 0
        if idle_polls >= 2:  # two idle polls in a row: nothing was queued in between
            log("drained", group=group, after_s=round(time.monotonic() - start, 1))
            return 0
        time.sleep(poll)
    log("drain_timeout", group=group, after_s=timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ), sys.argv[1:]))
