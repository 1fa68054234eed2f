"""The router image's build stage, without Docker: the files deploy/router/Dockerfile copies
(and its .dockerignore lets through) build a wheel holding the router, the emulator with its
profiles, the planner's catalog and the datasets, i.e. everything `specswitch serve` and
`specswitch emulate` need inside the image."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "deploy" / "router" / "Dockerfile"


def copied_paths() -> list[str]:
    """Sources of the build stage's COPY instructions (from the build context)."""
    paths = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            paths += line.split()[1:-1]
    return paths


def test_build_context_makes_a_complete_wheel(tmp_path: Path) -> None:
    context = tmp_path / "context"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results")  # as the .dockerignore
    for rel in copied_paths():
        src = ROOT / rel
        if src.is_dir():
            shutil.copytree(src, context / rel, ignore=ignore)
        else:
            context.mkdir(exist_ok=True)
            shutil.copy2(src, context / rel)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--wheel-dir", str(tmp_path / "wheels"), str(context)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "wheels").glob("specswitch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for required in ("specswitch/cli.py", "specswitch/router/discovery.py",
                     "specswitch/loadtest/emulator/__init__.py"):  # fmt: skip
        assert required in names, required
    for folder in ("specswitch/loadtest/emulator/profiles/", "specswitch/gpu_layout/catalog/"):
        assert any(n.startswith(folder) and n.endswith(".toml") for n in names), folder
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "specswitch = specswitch.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
