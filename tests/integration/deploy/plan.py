"""The plan .env the deploy tests use (names fixed by the cross-team contract)."""

from __future__ import annotations

from pathlib import Path

PLAN_NAMES = (
    "MODEL_PATH SERVED_MODEL_NAME TP_SIZE SPEC_ALGORITHM DRAFT_MODEL_PATH SPEC_NUM_STEPS "
    "SPEC_EAGLE_TOPK SPEC_NUM_DRAFT_TOKENS SPEC_MEM_FRACTION BASELINE_MEM_FRACTION "
    "SPEC_MAX_RUNNING_REQUESTS BASELINE_MAX_RUNNING_REQUESTS CONTEXT_LENGTH KV_CACHE_DTYPE"
).split()

EXAMPLE = {
    "MODEL_PATH": "meta-llama/Llama-3.1-8B-Instruct",
    "SERVED_MODEL_NAME": "llama-3.1-8b",
    "TP_SIZE": "8",
    "SPEC_ALGORITHM": "EAGLE3",
    "DRAFT_MODEL_PATH": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
    "SPEC_NUM_STEPS": "3",
    "SPEC_EAGLE_TOPK": "1",
    "SPEC_NUM_DRAFT_TOKENS": "4",
    "SPEC_MEM_FRACTION": "0.37",
    "BASELINE_MEM_FRACTION": "0.79",
    "SPEC_MAX_RUNNING_REQUESTS": "64",
    "BASELINE_MAX_RUNNING_REQUESTS": "256",
    "CONTEXT_LENGTH": "8192",
    "KV_CACHE_DTYPE": "auto",
    "SPEC_KV_TOKENS": "1000000",
    "BASELINE_KV_TOKENS": "2000000",
    "SPECSWITCH_HIGH": "16",
    "SPECSWITCH_LOW": "8",
    "SGLANG_IMAGE": "lmsysorg/sglang:v0.5.16",
}


def write_plan(folder: Path) -> tuple[Path, dict[str, str]]:
    path = folder / "plan.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in EXAMPLE.items()))
    return path, dict(EXAMPLE)
