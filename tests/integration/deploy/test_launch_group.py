"""deploy/sglang/launch-group.sh: spec first, baseline only once spec is healthy; supervision."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GROUP = ROOT / "deploy" / "sglang" / "launch-group.sh"
FAKE = Path(__file__).with_name("fake_sglang.py")
PLAN = {
    "MODEL_PATH": "org/model",
    "TP_SIZE": "8",
    "SPEC_ALGORITHM": "NEXTN",
    "SPEC_MEM_FRACTION": "0.41",
    "BASELINE_MEM_FRACTION": "0.83",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PLAN}
    env |= PLAN | {
        "SGLANG_LAUNCH": f"{sys.executable} {FAKE}",
        "SPEC_PORT": str(free_port()),
        "BASELINE_PORT": str(free_port()),
        "SGLANG_HEALTH_POLL_S": "0.1",
        "SGLANG_STARTUP_TIMEOUT_S": "30",
        "FAKE_LOG": str(tmp_path / "events.log"),
    }
    return env | extra


def wait_for_line(path: Path, text: str, proc: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # a file written by another process: poll it, bounded
        if path.exists() and text in path.read_text():
            return
        assert proc.poll() is None, f"launch-group exited early with {proc.returncode}"
        time.sleep(0.05)
    pytest.fail(
        f"{text!r} not logged within {timeout}s: {path.read_text() if path.exists() else ''}"
    )


@pytest.fixture
def router_admin() -> Iterator[tuple[str, list[str]]]:
    """A stand-in router admin listener recording the POSTs it gets."""
    posts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", posts
    server.shutdown()
    server.server_close()


def test_spec_then_baseline_then_sigterm_stops_both(tmp_path: Path, router_admin) -> None:
    admin_url, posts = router_admin
    env = group_env(tmp_path, ROUTER_ADMIN_URLS=admin_url, POD_IP="10.9.8.7")
    log, stderr = tmp_path / "events.log", tmp_path / "stderr.log"
    with stderr.open("w") as err:
        proc = subprocess.Popen(["bash", str(GROUP)], env=env, stderr=err)
    try:
        wait_for_line(stderr, "event=group_ready", proc)
        lines = log.read_text().splitlines()
        assert lines[0] == "start spec fraction=0.41 other_healthy=False"
        # the baseline started only once the spec server answered /health with 200
        assert lines[1] == "start baseline fraction=0.83 other_healthy=True"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "stop spec" in text and "stop baseline" in text
    assert "Connection refused" not in stderr.read_text()
    # once ready, the group is resumed on the routers (undoing a previous life's preStop drain)
    assert posts == ["/admin/groups/sglang-groups-10-9-8-7/resume"]


def test_spec_failing_at_startup_never_starts_baseline(tmp_path: Path) -> None:
    env = group_env(tmp_path)
    env["FAKE_FAIL_PORT"] = env["SPEC_PORT"]
    proc = subprocess.run(["bash", str(GROUP)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    assert "event=exited_during_startup role=spec rc=3" in proc.stderr
    assert "baseline" not in (tmp_path / "events.log").read_text()


def test_baseline_exit_stops_spec_and_fails_the_pod(tmp_path: Path) -> None:
    env = group_env(tmp_path)
    env["FAKE_FAIL_PORT"] = env["BASELINE_PORT"]
    proc = subprocess.run(["bash", str(GROUP)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    assert "stop spec" in (tmp_path / "events.log").read_text()
