"""A stand-in for `python3 -m sglang.launch_server` used by the launch-script tests.

Parses --port and --mem-fraction-static, answers GET /health with 503 for STARTUP_S seconds,
then 200. At startup it records whether the OTHER server of the group was already healthy
(what the real baseline server's memory measurement depends on) in the file $FAKE_LOG.
FAKE_FAIL_PORT=<port> makes the server on that port exit with status 3 during startup.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STARTUP_S = 0.3


def other_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mem-fraction-static", required=True)
    args, _ = parser.parse_known_args()
    spec_port = int(os.environ.get("SPEC_PORT", "30001"))
    baseline_port = int(os.environ.get("BASELINE_PORT", "30002"))
    role = "spec" if args.port == spec_port else "baseline"
    other = baseline_port if role == "spec" else spec_port
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(
            f"start {role} fraction={args.mem_fraction_static} other_healthy={other_healthy(other)}\n"
        )
    if os.environ.get("FAKE_FAIL_PORT") == str(args.port):
        time.sleep(0.2)
        return 3
    started = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/health" and time.monotonic() - started > STARTUP_S
            self.send_response(200 if ok else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    import signal

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        with open(os.environ["FAKE_LOG"], "a") as log:
            log.write(f"stop {role}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
