"""deploy/sglang/launch-server.sh --dry-run: the SGLang command built from the plan's .env."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "deploy" / "sglang" / "launch-server.sh"
PLAN_NAMES = (
    "MODEL_PATH SERVED_MODEL_NAME TP_SIZE SPEC_ALGORITHM DRAFT_MODEL_PATH SPEC_NUM_STEPS "
    "SPEC_EAGLE_TOPK SPEC_NUM_DRAFT_TOKENS SPEC_MEM_FRACTION BASELINE_MEM_FRACTION "
    "SPEC_MAX_RUNNING_REQUESTS BASELINE_MAX_RUNNING_REQUESTS CONTEXT_LENGTH KV_CACHE_DTYPE"
).split()
EAGLE_PLAN = """\
# written by the planner
MODEL_PATH=meta-llama/Llama-3.1-8B-Instruct
SERVED_MODEL_NAME=llama
TP_SIZE=1
SPEC_ALGORITHM=EAGLE3
DRAFT_MODEL_PATH="jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
SPEC_NUM_STEPS=3
SPEC_EAGLE_TOPK=1
SPEC_NUM_DRAFT_TOKENS=4
SPEC_MEM_FRACTION=0.35
BASELINE_MEM_FRACTION=0.81
SPEC_MAX_RUNNING_REQUESTS=64
BASELINE_MAX_RUNNING_REQUESTS=256
CONTEXT_LENGTH=8192
KV_CACHE_DTYPE=auto
"""


def run(tmp_path: Path, role: str, plan: str = EAGLE_PLAN, *extra: str, **env: str):
    env_file = tmp_path / "plan.env"
    env_file.write_text(plan)
    clean = {k: v for k, v in os.environ.items() if k not in PLAN_NAMES and "EXTRA" not in k}
    return subprocess.run(
        ["bash", str(SCRIPT), "--env-file", str(env_file), "--dry-run", role, *extra],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=20,
    )


def flags(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_spec_server_eagle3(tmp_path: Path) -> None:
    proc = run(tmp_path, "spec")
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout.splitlines()
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    f = flags(argv)
    assert f["--mem-fraction-static"] == "0.35" and "--enable-metrics" in f
    assert "--enable-cache-report" in f
    assert f["--port"] == "30001" and f["--tp-size"] == "1" and f["--host"] == "0.0.0.0"
    assert f["--speculative-algorithm"] == "EAGLE3"
    assert f["--speculative-draft-model-path"] == "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
    assert (
        f["--speculative-num-steps"],
        f["--speculative-eagle-topk"],
        f["--speculative-num-draft-tokens"],
    ) == ("3", "1", "4")
    assert f["--max-running-requests"] == "64" and f["--context-length"] == "8192"
    assert f["--served-model-name"] == "llama" and f["--kv-cache-dtype"] == "auto"


def test_baseline_server_has_no_speculation_and_its_own_fraction(tmp_path: Path) -> None:
    proc = run(
        tmp_path,
        "baseline",
        EAGLE_PLAN,
        "--trust-remote-code",
        BASELINE_PORT="31002",
        SGLANG_EXTRA_ARGS="--log-level warning",
    )
    assert proc.returncode == 0, proc.stderr
    f = flags(proc.stdout.splitlines())
    assert f["--mem-fraction-static"] == "0.81" and f["--port"] == "31002"
    assert f["--max-running-requests"] == "256" and "--enable-metrics" in f
    assert not any(k.startswith("--speculative") for k in f)
    assert "--trust-remote-code" in f and f["--log-level"] == "warning"
    assert f["--nccl-port"] != flags(run(tmp_path, "spec").stdout.splitlines())["--nccl-port"]


def test_nextn_needs_no_draft_and_environment_wins(tmp_path: Path) -> None:
    plan = EAGLE_PLAN.replace("SPEC_ALGORITHM=EAGLE3", "SPEC_ALGORITHM=NEXTN").replace(
        'DRAFT_MODEL_PATH="jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"', "DRAFT_MODEL_PATH="
    )
    proc = run(tmp_path, "spec", plan, SPEC_MEM_FRACTION="0.5")
    assert proc.returncode == 0, proc.stderr
    f = flags(proc.stdout.splitlines())
    assert f["--speculative-algorithm"] == "NEXTN" and "--speculative-draft-model-path" not in f
    assert f["--mem-fraction-static"] == "0.5"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("MODEL_PATH=meta-llama/Llama-3.1-8B-Instruct", "MODEL_PATH="), "MODEL_PATH is not set"),
        (
            ("SPEC_MEM_FRACTION=0.35", "SPEC_MEM_FRACTION=1.3"),
            "SPEC_MEM_FRACTION must be a fraction",
        ),
        (("SPEC_MEM_FRACTION=0.35", ""), "SPEC_MEM_FRACTION is not set"),
        (("SPEC_EAGLE_TOPK=1", ""), "set all of SPEC_NUM_STEPS"),
        (("SPEC_ALGORITHM=EAGLE3", "SPEC_ALGORITHM=MEDUSA"), "SPEC_ALGORITHM must be"),
        (
            ('DRAFT_MODEL_PATH="jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"', ""),
            "DRAFT_MODEL_PATH is not set",
        ),
        (("TP_SIZE=1", "TP_SIZE=eight"), "TP_SIZE must be a positive integer"),
    ],
)
def test_bad_plan_fails_naming_the_setting(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    proc = run(tmp_path, "spec", EAGLE_PLAN.replace(*edit))
    assert proc.returncode == 2 and proc.stdout == ""
    assert message in proc.stderr and "launch-server: error:" in proc.stderr


def test_unknown_role_is_refused(tmp_path: Path) -> None:
    proc = run(tmp_path, "draft")
    assert proc.returncode == 2 and "role must be spec or baseline" in proc.stderr
