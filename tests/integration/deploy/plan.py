"""The plan .env the deploy tests use: written by the real planner (`specswitch layout plan
--format env`), whose names are fixed by the cross-team contract."""

from __future__ import annotations

from pathlib import Path

from specswitch.cli import main as specswitch_main

PLAN_NAMES = (
    "MODEL_PATH SERVED_MODEL_NAME TP_SIZE SPEC_ALGORITHM DRAFT_MODEL_PATH SPEC_NUM_STEPS "
    "SPEC_EAGLE_TOPK SPEC_NUM_DRAFT_TOKENS SPEC_MEM_FRACTION BASELINE_MEM_FRACTION "
    "SPEC_MAX_RUNNING_REQUESTS BASELINE_MAX_RUNNING_REQUESTS CONTEXT_LENGTH KV_CACHE_DTYPE"
).split()
CONTRACT_NAMES = (*PLAN_NAMES, "SPEC_KV_TOKENS", "BASELINE_KV_TOKENS", "SPECSWITCH_HIGH",
                  "SPECSWITCH_LOW", "SGLANG_IMAGE")  # fmt: skip
PLAN_ARGS = ("--gpu", "h100", "--gpus", "8", "--model", "llama-3.3-70b-fp8", "--draft", "catalog")


def read_env(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def write_plan(folder: Path) -> tuple[Path, dict[str, str]]:
    path = folder / "plan.env"
    code = specswitch_main(["layout", "plan", *PLAN_ARGS, "--format", "env", "--output", str(path)])
    assert code == 0, "specswitch layout plan failed"
    values = read_env(path)
    missing = [k for k in CONTRACT_NAMES if k not in values]
    assert not missing, f"the planner's .env lacks {missing}"
    return path, values
