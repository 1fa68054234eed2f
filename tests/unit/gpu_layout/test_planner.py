"""Layouts, start order, the same-fraction trap and refusals, on hand-worked numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest
from specswitch.gpu_layout.catalog import GB, GIB, ModelSpec, custom_gpu, get_gpu, get_model
from specswitch.gpu_layout.memory import Overheads
from specswitch.gpu_layout.planner import PlanRequest, plan

# A toy model and a bare GPU make every number checkable by hand: 80 GiB card, 1 GiB taken
# before F0, no activation/graph overheads, a 16 GiB BF16 GQA model (cell 131072 B at TP1).
# The only reserve left is SGLang's req_to_token table: 4096 rows * (8192 + 4) * 4 B
# = 0.12506103515625 GiB per server.
TOY = ModelSpec(
    id="toy",
    hf_id="toy/toy",
    attention="gqa",
    layers=32,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    checkpoint_gb=16 * GIB / GB,
)
BARE = Overheads(
    meta_gib=0,
    activation_mib_per_token=0,
    graph_mib_per_bs=0,
    spec_extra_gib=0,
    context_gib=1.0,
    comm_gib=0.0,
)
REQ_TABLE = 4096 * 8196 * 4 / GIB


def toy(**kw) -> PlanRequest:
    base = {"gpu": custom_gpu(80), "gpus": 1, "model": TOY, "use_draft": False, "overheads": BARE}
    return PlanRequest(**{**base, **kw})


def test_shared_split_by_hand():
    p = plan(toy(split=0.5))
    assert p.fits
    spec, base = p.servers
    assert [s.role for s in p.servers] == ["spec", "baseline"]  # start order
    # spec: F0 = 80 - 1 = 79. KV memory for both = 80 - 2*(1 + 16 + 0.12506) = 45.74988 GiB,
    # half = 22.87494 GiB -> 187391 tokens wanted -> f = ceil4((16 + 187391/8192)/79) = 0.4921
    assert spec.f0_gib == 79
    assert spec.mem_fraction_static == 0.4921
    # SGLang then gives rest = (79-16) - 79*(1-0.4921) = 22.8759 GiB -> floor(22.8759*8192)
    assert spec.kv_tokens == 187_399
    # spec's peak use: 1 + 16 + 187399/8192 + 0.12506 = 40.00092 GiB
    assert spec.footprint_gib == pytest.approx(1 + 16 + 187_399 / 8192 + REQ_TABLE)
    # baseline starts second: F0 = 80 - 40.00092 - 1 = 38.99908 GiB (what spec left)
    assert base.f0_gib == pytest.approx(80 - spec.footprint_gib - 1)
    # its budget 38.99908 - 16 - 0.12506 = 22.87402 -> 187384 tokens wanted
    # -> f = ceil4((16 + 187384/8192) / 38.99908) = ceil4(0.996793) = 0.9968, but that leaves
    # 38.99908 * 0.0032 = 0.12480 GiB < the 0.12506 table: one step back to 0.9967
    assert base.mem_fraction_static == 0.9967
    # rest = 22.99908 - 38.99908 * 0.0033 = 22.87039 GiB -> floor(22.87039 * 8192) = 187354
    assert base.kv_tokens == 187_354
    assert base.headroom_gib >= base.headroom_needed_gib
    # both pools hold 22 requests of 8192 tokens; together they use the whole card
    assert spec.max_concurrent_requests == base.max_concurrent_requests == 22
    assert spec.footprint_gib + base.footprint_gib == pytest.approx(80, abs=0.01)


def test_same_fraction_trap_by_hand():
    p = plan(toy(spec_mem_fraction=0.5, baseline_mem_fraction=0.5))
    spec, base = p.servers
    # spec: rest = 63 - 79*0.5 = 23.5 GiB -> 23.5*8192 = 192512 tokens
    assert spec.kv_tokens == 192_512
    # spec uses 1 + 16 + 23.5 + 0.12506 = 40.62506; baseline F0 = 80 - 40.62506 - 1 = 38.37494
    assert base.f0_gib == pytest.approx(38.374939, abs=1e-5)
    # baseline: rest = (38.37494 - 16) - 38.37494*0.5 = 3.18747 GiB -> 26111 tokens, not 192512
    assert base.kv_tokens == 26_111
    assert p.trap is not None
    assert p.trap["real_spec_share"] == pytest.approx(23.5 / (23.5 + 26_111 / 8192), abs=1e-3)
    # the fractions read as shares of the card meant 50/50; the fix gives each its own F0
    assert p.trap["expected_spec_share"] == 0.5
    fixed = plan(toy(split=0.5))
    assert p.trap["fix_spec_mem_fraction"] == fixed.servers[0].mem_fraction_static
    assert p.trap["fix_baseline_mem_fraction"] == fixed.servers[1].mem_fraction_static
    # with 0.3 the baseline cannot even start: rest = 22.37494 - 38.37494*0.7 < 0 -> SGLang error
    p = plan(toy(spec_mem_fraction=0.45, baseline_mem_fraction=0.3))
    assert not p.fits
    assert "Not enough memory" in p.servers[1].problems[0]


def test_single_evaluates_a_given_fraction():
    # one server at f=0.88: rest = (79 - 16) - 79*0.12 = 53.52 GiB -> floor(53.52*8192) = 438435
    p = plan(toy(layout="single", mem_fraction_static=0.88))
    (s,) = p.servers
    assert s.role == "single"
    assert s.kv_tokens == 438_435
    assert s.headroom_gib == pytest.approx(79 * 0.12)
    assert p.fits


def test_single_headroom_too_small_is_refused():
    over = Overheads(
        meta_gib=0, activation_mib_per_token=1, graph_mib_per_bs=0, spec_extra_gib=0,
        context_gib=1.0, comm_gib=0.0,
    )  # fmt: skip
    # activations 8192 * 1 MiB = 8 GiB + 0.125 table; f = 0.95 leaves 79*0.05 = 3.95 GiB
    p = plan(toy(layout="single", mem_fraction_static=0.95, overheads=over))
    assert not p.fits
    assert "out-of-memory under load by 4.18 GiB" in p.servers[0].problems[0]


def test_disjoint_halves():
    p = plan(toy(layout="disjoint", gpus=2))
    assert p.fits
    spec, base = p.servers
    assert (spec.gpu_ids, base.gpu_ids) == ([0], [1])
    # alone on its GPU: budget = 79 - 16 - 0.12506 = 62.87494 -> 515071 tokens wanted;
    # ceil4((16 + 515071/8192) / 79) = 0.9985 leaves 79*0.0015 = 0.1185 < 0.12506 -> 0.9984
    assert spec.f0_gib == base.f0_gib == 79
    assert spec.mem_fraction_static == base.mem_fraction_static == 0.9984
    # rest = 63 - 79*0.0016 = 62.8736 GiB -> floor(62.8736 * 8192) = 515060
    assert spec.kv_tokens == base.kv_tokens == 515_060


def test_auto_split_sizes_spec_for_its_requests():
    p = plan(PlanRequest(gpu=get_gpu("rtx-pro-6000"), gpus=8, model=get_model("llama-3.3-70b-fp8")))
    assert p.fits
    spec, base = p.servers
    assert spec.speculative and not base.speculative
    # auto: room for --spec-requests 48 requests of 8192 tokens
    assert spec.max_concurrent_requests == 48
    assert p.spec_pool_requests == 48
    assert p.suggested_high == 36 and p.suggested_low == 18  # floor(0.75 * 48)
    assert base.max_concurrent_requests > spec.max_concurrent_requests
    # the baseline's fraction is for what spec left, so it is much larger than spec's
    assert base.f0_gib < spec.f0_gib
    assert base.mem_fraction_static > spec.mem_fraction_static


def test_spec_kv_tokens_caps_high():
    p = plan(
        PlanRequest(
            gpu=get_gpu("rtx-pro-6000"),
            gpus=8,
            model=get_model("llama-3.3-70b-fp8"),
            spec_kv_tokens=8192 * 10,
        )
    )
    assert p.spec_pool_requests == 10
    assert p.suggested_high == 7  # floor(0.75 * 10): the pool caps the threshold


def test_refusal_says_how_much_and_what_fits():
    p = plan(PlanRequest(gpu=get_gpu("rtx-pro-6000"), gpus=8, model=get_model("glm-5-nvfp4")))
    assert not p.fits
    assert "over by" in p.reasons[0] and "GiB" in p.reasons[0]
    text = "\n".join(p.alternatives)
    assert "fewer bytes per weight" in text
    assert "more GPUs" in text
    assert "no second server" in text


def test_refusal_offers_disjoint_and_smaller_split():
    # 22 GiB cards x2, 3 GiB taken before F0 per process. Shared TP2: each GPU holds two
    # processes: 2 * (3 + 8 + 0.125) + one request per pool (2 * 0.5) = 23.25 GiB -> refused.
    # Disjoint TP1+TP1: one process per GPU: 3 + 16 + 0.125 + 1 (one request) = 20.125 -> fits
    p = plan(toy(gpu=custom_gpu(22), gpus=2, overheads=replace(BARE, context_gib=3.0)))
    assert not p.fits
    assert any(a.startswith("disjoint layout TP1+TP1") for a in p.alternatives)
    p = plan(toy(split=0.99))
    assert not p.fits
    # baseline needs 1 GiB (8192 tokens x 131072 B) of the 45.75 GiB: (45.75 - 1) / 45.75 = 0.978
    assert "--split 0.97" in p.reasons[0]
    assert any(a.startswith("smaller spec split") for a in p.alternatives)


def test_tp_that_cannot_shard_is_refused():
    p = plan(PlanRequest(gpu=get_gpu("h100"), gpus=3, model=get_model("llama-3.3-70b-fp8")))
    assert not p.fits
    assert "TP=3" in p.reasons[0]


@pytest.mark.parametrize("model_id", ["llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-120b"])
def test_every_fitting_plan_keeps_both_peaks_on_the_card(model_id):
    req = PlanRequest(gpu=get_gpu("rtx-pro-6000"), gpus=8, model=get_model(model_id))
    p = plan(req)
    assert p.fits
    total = sum(s.footprint_gib for s in p.servers)
    assert total <= req.gpu.memory_gib + 0.05
    for s in p.servers:
        assert s.headroom_gib + 0.05 >= s.headroom_needed_gib


def test_unbalanced_free_memory_is_refused():
    # 80 < 0.9 * 90 = 81: SGLang's "memory capacity is unbalanced"; GPUs 0,1 are balanced
    req = PlanRequest(
        gpu=get_gpu("rtx-pro-6000"),
        gpus=4,
        model=get_model("llama-3.1-8b"),
        free_gib_each=(90.0, 90.0, 80.0, 90.0),
    )
    p = plan(req)
    assert not p.fits and "unbalanced" in p.reasons[0]
    assert p.alternatives[0].startswith("leave the busy GPUs out: CUDA_VISIBLE_DEVICES=0,1")
    # balanced within 10%: planned from the minimum (SGLang takes the min over ranks)
    ok = plan(replace(req, free_gib_each=(90.0, 90.0, 85.0, 90.0)))
    assert ok.fits and ok.servers[0].f0_gib == pytest.approx(85.0 - req.before_gib(4))


def test_probe_summary_flags_unbalanced_gpus():
    from specswitch.gpu_layout.probe import GpuReading, summarize

    total = 97_887 / 1024
    lines = summarize(
        [GpuReading(0, "RTX PRO 6000", total, 94.0), GpuReading(1, "RTX PRO 6000", total, 60.0)]
    )
    text = "\n".join(lines)
    assert "GPU 1" in text and "in use 35.59 GiB" in text
    assert "unbalanced" in text  # 60 < 0.9 * 94
    assert "--gpu rtx-pro-6000 --gpus 2 --free-gib 94.00,60.00" in text
