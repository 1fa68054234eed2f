"""`specswitch layout ...` through the real dispatcher: outputs, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specswitch.cli import main

CONTRACT_ENV = (
    "MODEL_PATH SERVED_MODEL_NAME TP_SIZE SPEC_ALGORITHM DRAFT_MODEL_PATH SPEC_NUM_STEPS "
    "SPEC_EAGLE_TOPK SPEC_NUM_DRAFT_TOKENS SPEC_MEM_FRACTION BASELINE_MEM_FRACTION "
    "SPEC_MAX_RUNNING_REQUESTS BASELINE_MAX_RUNNING_REQUESTS CONTEXT_LENGTH KV_CACHE_DTYPE "
    "SPEC_KV_TOKENS BASELINE_KV_TOKENS SPECSWITCH_HIGH SPECSWITCH_LOW SGLANG_IMAGE"
).split()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["layout", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_catalog_ids(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    for mid in ("llama-3.1-8b", "llama-3.3-70b-fp8", "qwen3-30b-a3b", "qwen3-235b-a22b-fp8",
                "gpt-oss-120b", "deepseek-v3", "kimi-k2.5", "glm-5-nvfp4"):  # fmt: skip
        assert mid in out
    code, out, _ = run(capsys, "gpus", "--format", "json")
    assert code == 0 and {"rtx-pro-6000", "h100", "h200", "b200"} <= set(json.loads(out))


def test_plan_json_servers(capsys):
    code, out, _ = run(capsys, "plan", "--model", "llama-3.3-70b-fp8", "--gpus", "8",
                       "--format", "json")  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["fits"] and data["start_order"] == ["spec", "baseline"]
    for s in data["servers"]:
        for key in ("role", "mem_fraction_static", "weights_gib_per_gpu", "kv_bytes_per_token",
                    "kv_tokens", "max_concurrent_requests"):  # fmt: skip
            assert key in s
    assert data["spec_pool"]["suggested_high"] <= data["spec_pool"]["requests"]


def test_plan_env_has_every_contract_name(capsys, tmp_path: Path):
    target = tmp_path / "plan.env"
    code, _, err = run(capsys, "plan", "--model", "qwen3-30b-a3b", "--format", "env",
                       "-o", str(target))  # fmt: skip
    assert code == 0 and "wrote" in err
    env = dict(
        line.split("=", 1) for line in target.read_text().splitlines() if not line.startswith("#")
    )
    assert set(CONTRACT_ENV) <= set(env)
    assert env["SPEC_ALGORITHM"] == "EAGLE3" and env["TP_SIZE"] == "8"
    assert 0 < float(env["SPEC_MEM_FRACTION"]) < float(env["BASELINE_MEM_FRACTION"]) < 1
    assert int(env["SPECSWITCH_LOW"]) < int(env["SPECSWITCH_HIGH"])
    # the same file re-validates against the same model
    code, out, _ = run(capsys, "check", str(target))
    assert code == 0 and "CHECK OK" in out


def test_nextn_env_has_empty_draft_path(capsys):
    code, out, _ = run(capsys, "plan", "--model", "glm-5-nvfp4", "--gpus", "16", "--format", "env")
    assert code == 0
    assert "SPEC_ALGORITHM=NEXTN\n" in out and "DRAFT_MODEL_PATH=\n" in out


def test_refusal_exit_1_with_alternatives(capsys):
    code, out, _ = run(capsys, "plan", "--model", "glm-5-nvfp4", "--gpus", "8")
    assert code == 1
    assert "REFUSED" in out and "over by" in out and "what would fit instead" in out
    code, out, err = run(capsys, "plan", "--model", "glm-5-nvfp4", "--format", "env")
    assert code == 1 and out == "" and "REFUSED" in err  # nothing half-written


def test_same_fraction_trap_in_output(capsys):
    code, out, _ = run(capsys, "plan", "--model", "llama-3.1-8b", "--spec-mem-fraction", "0.45",
                       "--baseline-mem-fraction", "0.45")  # fmt: skip
    assert code == 0
    assert "same-fraction trap" in out and "real split of the KV memory" in out


def test_args_format(capsys):
    code, out, _ = run(capsys, "plan", "--model", "gpt-oss-120b", "--format", "args")
    assert code == 0
    assert out.count("sglang.launch_server") == 2
    assert "--speculative-algorithm EAGLE3" in out and "--mem-fraction-static" in out


def test_local_model_config(capsys, tmp_path: Path):
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "hidden_size": 4096, "max_position_embeddings": 131072}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16_060_522_496}})
    )
    code, out, _ = run(capsys, "plan", "--model-config", str(tmp_path / "config.json"),
                       "--layout", "single", "--gpu", "h100", "--gpus", "1", "--format", "json")  # fmt: skip
    assert code == 0
    (s,) = json.loads(out)["servers"]
    assert s["kv_bytes_per_token"] == 131_072 and not s["speculative"]
    # check: a plan made for llama-3.1-8b (with draft) fails against a config with 16 kv heads
    run(capsys, "plan", "--model", "llama-3.1-8b", "--layout", "single", "--gpu", "h100",
        "--gpus", "1", "--format", "json", "-o", str(tmp_path / "p.json"))  # fmt: skip
    cfg["num_key_value_heads"] = 16
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out, _ = run(capsys, "check", str(tmp_path / "p.json"), "--model-config",
                       str(tmp_path))  # fmt: skip
    assert code == 1 and "CHECK FAILED" in out


def test_probe_without_torch_or_gpu_says_so(capsys):
    code, out, _ = run(capsys, "probe")
    # no GPU in CI: either torch is missing or it sees no device; a machine with a GPU prints it
    assert code in (0, 1)
    if code == 1:
        assert out.startswith("probe: ") and ("torch" in out)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "--model", "nope"], "unknown model 'nope'"),
        (["plan", "--model", "llama-3.1-8b", "--gpu", "a100"], "unknown GPU 'a100'"),
        (["plan", "--model", "llama-3.1-8b", "--gpus", "-2"], "--gpus -2"),
        (["plan", "--model", "llama-3.1-8b", "--gpu-mem-gib", "1e9"], "not a plausible"),
        (["plan", "--model", "llama-3.1-8b", "--gpu-mem-gib", "nan"], "finite"),
        (["plan", "--model", "llama-3.1-8b", "--context-len", "9999999"], "exceeds"),
        (["plan", "--model", "llama-3.1-8b", "--split", "1.5"], "--split 1.5"),
        (["plan", "--model", "llama-3.1-8b", "--spec-mem-fraction", "0.4"], "give both"),
        (["plan", "--model", "llama-3.1-8b", "--mem-fraction-static", "0.8"], "--layout single"),
        (["plan", "--model", "llama-3.1-8b", "--free-gib", "500"], "--free-gib 500"),
        (["plan", "--model", "llama-3.1-8b", "--kv-dtype", "int3"], "--kv-dtype 'int3'"),
        (
            ["plan", "--model", "llama-3.1-8b", "--layout", "single", "--format", "env"],
            "two-server layouts",
        ),
        (["plan"], "give --model"),
        (["check", "/nonexistent/plan.json"], "cannot read plan"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("specswitch: error: ")
    assert needle in err


def test_config_missing_fields(capsys, tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 32}))
    code, _, err = run(capsys, "plan", "--model-config", str(tmp_path), "--checkpoint-gib", "10")
    assert code == 2 and "'num_hidden_layers' is missing" in err
    (tmp_path / "config.json").write_text(
        json.dumps({"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096})
    )
    code, _, err = run(capsys, "plan", "--model-config", str(tmp_path))
    assert code == 2 and "--checkpoint-gib" in err
    code, _, err = run(capsys, "plan", "--model-config", str(tmp_path), "--checkpoint-gib", "-3")
    assert code == 2 and "--checkpoint-gib -3" in err


def test_table_covers_every_catalog_model(capsys):
    code, out, _ = run(capsys, "table", "--gpu", "rtx-pro-6000", "--gpus", "8")
    assert code == 0
    rows = [r for r in out.splitlines() if r.startswith("| ") and not r.startswith("| model")]
    code, models, _ = run(capsys, "models", "--format", "json")
    assert len(rows) == 2 * len(json.loads(models))
    assert any(r.startswith("| glm-5-nvfp4 | shared |") and "REFUSED" in r for r in rows)
    assert any(r.startswith("| llama-3.3-70b-fp8 | shared |") and "fits" in r for r in rows)


@pytest.mark.parametrize(
    "argv",
    [
        ["--layout", "single", "--gpu", "h100", "--gpus", "1", "--format", "json"],
        ["--layout", "disjoint", "--gpu-mem-gib", "47.5", "--gpus", "2", "--format", "json"],
        ["--gpu-mem-gib", "47.5", "--gpus", "2", "--free-gib", "45", "--format", "env"],
    ],
)
def test_check_round_trip(capsys, tmp_path: Path, argv):
    target = tmp_path / "plan.out"
    code, _, _ = run(capsys, "plan", "--model", "llama-3.1-8b", *argv, "-o", str(target))
    assert code == 0
    code, out, _ = run(capsys, "check", str(target))
    assert code == 0, out
    assert "CHECK OK" in out


def test_unwritable_output_is_one_line_and_leaves_nothing(capsys, tmp_path: Path):
    base = ("plan", "--model", "llama-3.1-8b", "--format", "env", "--output")
    code, _, err = run(capsys, *base, str(tmp_path / "missing" / "plan.env"))
    assert code == 2 and err.count("\n") == 1 and "cannot write --output" in err
    code, _, err = run(capsys, *base, str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "is a directory" in err
    assert list(tmp_path.iterdir()) == []
