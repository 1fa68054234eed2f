"""`specswitch demo` end to end (child processes: emulator, router), shortened and sped up."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


async def test_demo_runs_and_writes_summary_and_plot(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specswitch",
        "demo",
        "--duration",
        "16",
        "--speedup",
        "8",
        "--peak",
        "16",
        "--max-tokens",
        "24",
        "--out",
        str(tmp_path / "demo"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 90)
    out = stdout.decode()
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert "summary (simulated time)" in out and "plot:" in out
    report = json.loads((tmp_path / "demo" / "demo.json").read_text())
    s = report["summary"]
    assert s["failed"] == 0 and s["ok"] > 0
    assert (tmp_path / "demo" / "demo-timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert any(r.get("mode") for r in report["timeline"])  # the admin state was sampled
