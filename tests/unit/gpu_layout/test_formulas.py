"""Every formula against numbers worked by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import pytest
from specswitch.gpu_layout.catalog import DraftSpec, get_model
from specswitch.gpu_layout.kvcache import (
    dsa_fp8_overshoot_bytes,
    dsa_indexer_bytes,
    gqa_cell_bytes,
    kv_geometry,
    mla_cell_bytes,
    resolve_kv_dtype,
    swa_capacity_factor,
    target_cell_bytes,
)
from specswitch.gpu_layout.memory import (
    NotEnoughMemory,
    default_max_running_requests,
    fraction_for_tokens,
    sglang_default_mem_fraction,
    sglang_max_total_tokens,
    unbalanced,
)

from specswitch.errors import UserError

# ------------------------------------------------------------------ GQA / MHA


def test_gqa_cell_llama_8b():
    # 2 (K,V) * 32 layers * 8 kv heads * 128 head_dim * 2 bytes (bf16) = 131072 at TP1
    assert gqa_cell_bytes(32, 8, 128, 1, 2) == 131_072
    # TP4: 8 // 4 = 2 heads per GPU -> 2*32*2*128*2 = 32768
    assert gqa_cell_bytes(32, 8, 128, 4, 2) == 32_768
    # TP8: 1 head per GPU -> 2*32*1*128*2 = 16384
    assert gqa_cell_bytes(32, 8, 128, 8, 2) == 16_384


def test_gqa_kv_heads_below_tp_are_replicated():
    # Qwen3-30B-A3B: 48 layers, 4 kv heads x 128. TP8 > 4 kv heads: each GPU keeps a whole
    # head (replicated), max(1, 4 // 8) = 1 -> 2*48*1*128*2 = 24576, NOT 2*48*0.5*128*2 = 12288
    assert gqa_cell_bytes(48, 4, 128, 8, 2) == 24_576
    # TP4 = kv heads: 1 head each, the same bytes per GPU as TP8
    assert gqa_cell_bytes(48, 4, 128, 4, 2) == 24_576
    # TP2: 2 heads each -> 2*48*2*128*2 = 49152
    assert gqa_cell_bytes(48, 4, 128, 2, 2) == 49_152
    model = get_model("qwen3-30b-a3b")
    assert target_cell_bytes(model, 8, 2) == 24_576
    # FP8 KV halves it: 2*48*1*128*1 = 12288
    assert target_cell_bytes(model, 8, 1) == 12_288


# ------------------------------------------------------------------ MLA / DSA


def test_mla_cell_is_replicated_on_every_rank():
    # DeepSeek-V3: (kv_lora_rank 512 + rope 64) * 61 layers * 2 bytes = 70272, any TP
    assert mla_cell_bytes(61, 512, 64, 2) == 70_272
    model = get_model("deepseek-v3")
    assert target_cell_bytes(model, 1, 2) == 70_272
    assert target_cell_bytes(model, 8, 2) == 70_272  # not divided by TP
    assert target_cell_bytes(get_model("kimi-k2.5"), 8, 2) == 70_272


def test_dsa_indexer_132_bytes_per_layer():
    # index_head_dim 128 FP8 bytes + 128 // 128 * 4 bytes of fp32 scale = 132 per layer
    assert dsa_indexer_bytes(1) == 132
    assert dsa_indexer_bytes(78) == 10_296
    glm = get_model("glm-5-nvfp4")
    # FP8 KV: 576 * 78 * 1 + 132 * 78 = 44928 + 10296 = 55224
    assert target_cell_bytes(glm, 8, 1) == 55_224
    # BF16 KV: 576 * 78 * 2 + 132 * 78 = 89856 + 10296 = 100152
    assert target_cell_bytes(glm, 8, 2) == 100_152
    # the FP8 pool really stores 512 + 512/128*4 + 64*2 = 656 B/layer: (656 - 576) * 78 = 6240
    assert dsa_fp8_overshoot_bytes(78, 512, 64) == 6_240


def test_kv_dtype_auto():
    glm, llama = get_model("glm-5-nvfp4"), get_model("llama-3.1-8b")
    assert resolve_kv_dtype("auto", glm, 120) == "fp8_e4m3"  # DSA on Blackwell
    assert resolve_kv_dtype("auto", glm, 90) == "bfloat16"
    assert resolve_kv_dtype("auto", llama, 120) == "bfloat16"
    with pytest.raises(UserError):
        resolve_kv_dtype("int3", llama, 90)


# ------------------------------------------------------------------ drafts, both accountings


def test_eagle3_draft_both_accountings():
    llama = get_model("llama-3.1-8b")  # draft: 1 layer, 8 kv heads x 128
    # scaled: 16384 * (1 + 1/32) = 16384 + 512 = 16896 inside the fraction, nothing outside
    g = kv_geometry(llama, 8, "bf16", llama.draft, "scaled")
    assert (g.cell_bytes, g.outside_bytes, g.draft_bytes) == (16_896, 0, 512)
    # separate: target 16384 inside; the draft's own pool 2*1*1*128*2 = 512 outside
    g = kv_geometry(llama, 8, "bf16", llama.draft, "separate")
    assert (g.cell_bytes, g.outside_bytes, g.draft_bytes) == (16_384, 512, 512)
    # an EAGLE-3 draft with 4 kv heads at TP1: 2*1*4*128*2 = 2048 outside
    small = DraftSpec("EAGLE3", "x/y", 0.5, layers=1, kv_heads=4, head_dim=128)
    assert kv_geometry(llama, 1, "bf16", small, "separate").outside_bytes == 2_048


def test_nextn_draft_both_accountings():
    ds = get_model("deepseek-v3")  # MTP: 1 MLA layer
    # scaled: 70272 * (1 + 1/61) = 70272 + 1152 = 71424
    g = kv_geometry(ds, 8, "bf16", ds.draft, "scaled")
    assert (g.cell_bytes, g.outside_bytes) == (71_424, 0)
    # separate: the MTP layer's own pool (512 + 64) * 1 * 2 = 1152 outside
    g = kv_geometry(ds, 8, "bf16", ds.draft, "separate")
    assert (g.cell_bytes, g.outside_bytes) == (70_272, 1_152)
    glm = get_model("glm-5-nvfp4")
    # GLM-5 FP8 separate: MTP layer 576 + 132 = 708 plus the DSA overshoot 6240 outside
    g = kv_geometry(glm, 8, "fp8_e4m3", glm.draft, "separate")
    assert (g.cell_bytes, g.outside_bytes) == (55_224, 708 + 6_240)
    # scaled: 55224 * (1 + 1/78) = 55224 + 708 = 55932
    assert kv_geometry(glm, 8, "fp8_e4m3", glm.draft, "scaled").cell_bytes == 55_932


def test_draft_weights_inside_or_outside_the_fraction():
    from specswitch.gpu_layout.catalog import GB, GIB, get_gpu
    from specswitch.gpu_layout.planner import PlanRequest, server_costs

    glm = get_model("glm-5-nvfp4")  # 459 GB checkpoint incl. the 19 GB BF16 MTP layer
    req = PlanRequest(gpu=get_gpu("rtx-pro-6000"), gpus=8, model=glm, draft_accounting="scaled")
    c = server_costs(req, "spec", 8, speculative=True)
    # target: (459 - 19) GB / 8 = 55 GB = 51.2227 GiB per GPU; draft 19 GB / 8 = 2.2119 GiB
    assert c.weights_gib == pytest.approx(440 * GB / GIB / 8)
    assert c.weights_gib == pytest.approx(51.2227, abs=1e-4)
    assert c.draft_weights_gib == pytest.approx(2.2119, abs=1e-4)
    assert c.weights_in_gib == pytest.approx(51.2227 + 2.2119, abs=1e-3)
    sep = server_costs(
        PlanRequest(gpu=req.gpu, gpus=8, model=glm, draft_accounting="separate"), "spec", 8, True
    )
    assert sep.weights_in_gib == pytest.approx(51.2227, abs=1e-4)
    assert sep.weights_out_gib == pytest.approx(2.2119, abs=1e-4)


# ------------------------------------------------------------------ SGLang token arithmetic


def test_max_total_tokens_formula():
    geom = kv_geometry(get_model("llama-3.1-8b"), 1, "bf16", None)  # cell 131072
    # F0 80, weights 20, f 0.5: rest = (80-20) - 80*0.5 = 20 GiB -> 20 * 2^30 / 131072 = 163840
    assert sglang_max_total_tokens(80, 20, 0.5, geom) == 163_840
    # page 64 keeps it (163840 = 2560 * 64); f 0.25: rest = 60 - 60 = 0 -> SGLang refuses
    assert sglang_max_total_tokens(80, 20, 0.5, geom, page_size=64) == 163_840
    with pytest.raises(NotEnoughMemory):
        sglang_max_total_tokens(80, 20, 0.25, geom)
    # page alignment: rest 1.001 GiB -> floor(1.001 * 8192) = 8200 -> page 64 -> 8192
    assert sglang_max_total_tokens(10, 1, 1.001 / 10 + 0.1, geom) == 8_200
    assert sglang_max_total_tokens(10, 1, 1.001 / 10 + 0.1, geom, page_size=64) == 8_192


def test_swa_capacity_gpt_oss():
    oss = get_model("gpt-oss-120b")  # 18 SWA + 18 full layers, 8 kv heads x 64
    # cell over all 36 layers at TP8: 2*36*1*64*2 = 9216
    geom = kv_geometry(oss, 8, "bf16", None)
    assert geom.cell_bytes == 9_216
    # full tokens per profiled token: 36 / (18 + 0.8*18) = 36 / 32.4 = 1.1111
    assert swa_capacity_factor(oss) == pytest.approx(36 / 32.4)
    # rest 10 GiB: raw = floor(10 * 2^30 / 9216) = 1165084; full = floor(1165084 * 1.1111) = 1294537
    assert sglang_max_total_tokens(20, 5, 0.75, geom) == 1_294_537


def test_fraction_for_tokens_round_trip():
    geom = kv_geometry(get_model("llama-3.1-8b"), 1, "bf16", None)
    # want 100000 tokens, F0 79, weights 16: (16 + 100000/8192) / 79 = 0.357059 -> 0.3571
    f = fraction_for_tokens(79, 16, 100_000, geom)
    assert f == 0.3571
    assert sglang_max_total_tokens(79, 16, f, geom) >= 100_000
    assert sglang_max_total_tokens(79, 16, f - 0.0001, geom) < 100_000


def test_sglang_default_mem_fraction():
    # RTX PRO 6000 97887 MiB, TP8: 512 + 8192*1.5 + 512*2 + 8/8*1024 = 14848 MiB reserved
    # (97887 - 14848) / 97887 = 0.84832 -> 0.848; with EAGLE +2048: 0.82739 -> 0.827
    assert sglang_default_mem_fraction(97_887, 8, False) == 0.848
    assert sglang_default_mem_fraction(97_887, 8, True) == 0.827
    # H100 81559 MiB, TP1: 512 + 12288 + 256*2 + 128 = 13440 -> 0.83521 -> 0.835
    assert sglang_default_mem_fraction(81_559, 1, False) == 0.835
    # B200 183359 MiB, TP8: chunk 16384: 512 + 24576 + 1024 + 1024 = 27136 -> 0.85200 -> 0.852
    assert sglang_default_mem_fraction(183_359, 8, False) == 0.852
    # 40 GiB card, TP1: 512 + 4096*1.5 + 32*2 + 128 = 6848 (no 10 GiB floor) -> 0.83281 -> 0.833
    assert sglang_default_mem_fraction(40_960, 1, False) == 0.833


def test_default_max_running_and_balance():
    # min(max(int(tokens / ctx * 512), 2048), 4096)
    assert default_max_running_requests(20_000, 8192) == 2048  # 1250 -> at least 2048
    assert default_max_running_requests(40_000, 4096) == 4096  # 5000 -> capped
    assert default_max_running_requests(30_000, 4096) == 3750
    assert unbalanced([90.0, 80.0])  # 80 < 0.9 * 90 = 81
    assert not unbalanced([90.0, 81.5])
