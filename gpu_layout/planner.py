"""Plan one or two SGLang servers on the same GPUs (shared, disjoint or single layout).

Per GPU, in GiB. A server's peak use is
  before (CUDA context + NCCL, taken before F0 is measured)
  + weights inside the fraction (target; + draft with "scaled" draft accounting)
  + KV inside the fraction (tokens x cell_size)
  + outside the fraction: draft weights and draft KV ("separate"), DSA FP8 overshoot,
    activations, CUDA graphs, metadata, the req_to_token table.
The first server's F0 is the free memory of the card minus its own `before`; the second
server's F0 is what the first left (its peak use counted, so the first keeps its headroom).
"""

from __future__ import annotations

import math
from dataclasses import replace

from .catalog import GB, GIB
from .kvcache import kv_geometry
from .memory import (
    NotEnoughMemory,
    default_max_running_requests,
    fraction_for_tokens,
    in_fraction_kv_gib,
    sglang_default_mem_fraction,
    sglang_max_total_tokens,
    unbalanced,
)
from .plan_types import (
    DEFAULT_IMAGE,
    HIGH_MARGIN,
    LAYOUTS,
    SLACK_GIB,
    Costs,
    Plan,
    PlanRequest,
    ServerPlan,
)

__all__ = [
    "DEFAULT_IMAGE",
    "HIGH_MARGIN",
    "LAYOUTS",
    "Costs",
    "Plan",
    "PlanRequest",
    "ServerPlan",
    "evaluate_server",
    "plan",
    "server_costs",
    "size_server",
]

# ----------------------------------------------------------------------------- sizing


def server_costs(req: PlanRequest, role: str, tp: int, speculative: bool) -> Costs:
    draft = req.spec_draft if speculative else None
    weights = req.model.target_weight_gb * GB / GIB / tp
    draft_w = draft.size_gb * GB / GIB / tp if draft else 0.0
    scaled = req.draft_accounting == "scaled"
    reserve = req.overheads.reserve_gib(req.gpu.memory_mib, tp, draft is not None)
    max_running = req.spec_requests if draft is not None else None
    rows = max_running or 4096  # SGLang's default req pool is at most 4096 rows
    extra = 4 + (req.spec_num_draft_tokens if draft is not None else 0)
    reserve["req_to_token"] = rows * (req.context_len + extra) * 4 / GIB
    return Costs(
        role=role,
        tp=tp,
        draft=draft,
        before_gib=req.before_gib(tp),
        weights_gib=weights,
        draft_weights_gib=draft_w,
        weights_in_gib=weights + (draft_w if scaled else 0.0),
        weights_out_gib=0.0 if scaled else draft_w,
        reserve=reserve,
        geom=kv_geometry(req.model, tp, req.resolved_kv_dtype, draft, req.draft_accounting),
        max_running=max_running,
    )


def evaluate_server(
    req: PlanRequest, c: Costs, f0: float, fraction: float, gpu_ids: list[int]
) -> ServerPlan:
    """One server launched with `fraction` when `f0` GiB are free: SGLang's arithmetic."""
    problems: list[str] = []
    try:
        tokens = sglang_max_total_tokens(f0, c.weights_in_gib, fraction, c.geom, req.page_size)
    except NotEnoughMemory as exc:
        tokens = 0
        problems.append(
            f"{c.role}: SGLang stops at startup ('Not enough memory. Please try to increase "
            f"--mem-fraction-static'): {exc}"
        )
    kv_in = in_fraction_kv_gib(tokens, c.geom) if tokens else 0.0
    kv_out = tokens * c.geom.outside_bytes / GIB
    headroom = f0 * (1 - fraction)
    needed = c.weights_out_gib + c.reserve_gib + kv_out
    if tokens and headroom + SLACK_GIB < needed:
        problems.append(
            f"{c.role}: headroom F0*(1-f) = {headroom:.2f} GiB < {needed:.2f} GiB it needs "
            f"(activations, CUDA graphs{', draft' if c.draft else ''}): out-of-memory under "
            f"load by {needed - headroom:.2f} GiB"
        )
    if tokens and tokens < req.context_len:
        problems.append(
            f"{c.role}: KV pool of {tokens} tokens cannot hold one request of "
            f"{req.context_len} tokens"
        )
    used_headroom = max(needed, 0.0) if tokens else 0.0
    footprint = c.before_gib + c.weights_in_gib + kv_in + used_headroom
    max_running = c.max_running or default_max_running_requests(max(tokens, 1), req.context_len)
    return ServerPlan(
        role=c.role,
        tp=c.tp,
        gpu_ids=gpu_ids,
        speculative=c.draft is not None,
        algorithm=c.draft.algorithm if c.draft else "",
        draft_model=(c.draft.model_id or req.model.hf_id) if c.draft else "",
        before_weights_gib=c.before_gib,
        f0_gib=f0,
        weights_gib_per_gpu=c.weights_gib,
        draft_weights_gib_per_gpu=c.draft_weights_gib,
        weights_in_fraction_gib=c.weights_in_gib,
        kv_bytes_per_token=c.geom.cell_bytes,
        draft_kv_bytes_per_token=c.geom.draft_bytes,
        kv_outside_bytes_per_token=c.geom.outside_bytes,
        kv_tokens=tokens,
        kv_gib=kv_in,
        kv_outside_gib=kv_out,
        mem_fraction_static=fraction,
        sglang_default_mem_fraction=sglang_default_mem_fraction(
            req.gpu.memory_mib,
            c.tp,
            c.draft is not None,
            req.overheads.chunked_prefill_size,
            req.overheads.cuda_graph_max_bs,
        ),
        headroom_gib=headroom,
        headroom_needed_gib=needed,
        reserve_gib=dict(c.reserve),
        max_concurrent_requests=tokens // req.context_len,
        max_running_requests=max_running,
        footprint_gib=footprint,
        problems=problems,
    )


def size_server(
    req: PlanRequest, c: Costs, f0: float, budget_gib: float, gpu_ids: list[int]
) -> ServerPlan:
    """The fraction that gives a KV pool of `budget_gib` (inside + outside the fraction)."""
    tokens = int(budget_gib * GIB / c.geom.bytes_per_token) // req.page_size * req.page_size
    tokens = max(tokens, req.page_size)
    fraction = min(fraction_for_tokens(f0, c.weights_in_gib, tokens, c.geom), 0.9999)
    # rounding up to 4 decimals must not eat the headroom: step back while it would
    needed = c.weights_out_gib + c.reserve_gib + tokens * c.geom.outside_bytes / GIB
    while f0 * (1 - fraction) < needed and fraction > 0.0001:
        fraction = round(fraction - 0.0001, 4)
    return evaluate_server(req, c, f0, fraction, gpu_ids)


def _min_pool_gib(req: PlanRequest, c: Costs) -> float:
    return req.context_len * c.geom.bytes_per_token / GIB


# ----------------------------------------------------------------------------- layouts


def _tp_reasons(req: PlanRequest, *tps: int) -> list[str]:
    reasons = []
    for tp in sorted(set(tps)):
        why = req.model.check_tp(tp)
        if why:
            reasons.append(f"SGLang cannot shard {req.model.id} at TP={tp}: {why}")
    return reasons


def _plan_single(req: PlanRequest) -> Plan:
    tp = req.gpus
    plan = Plan(req, [], reasons=_tp_reasons(req, tp))
    if plan.reasons:
        return plan
    c = server_costs(req, "single", tp, speculative=req.spec_draft is not None)
    f0 = req.free_per_gpu_gib - c.before_gib
    ids = list(range(tp))
    if req.mem_fraction_static is not None:
        plan.servers.append(evaluate_server(req, c, f0, req.mem_fraction_static, ids))
        return plan
    budget = f0 - (c.fixed_gib - c.before_gib)
    need = _min_pool_gib(req, c)
    if budget < need:
        plan.reasons.append(
            f"one server does not fit on {req.gpus}x {req.gpu.id}: it needs "
            f"{c.fixed_gib + need:.2f} GiB per GPU (weights {c.weights_in_gib + c.weights_out_gib:.2f}, "
            f"overheads {c.before_gib + c.reserve_gib:.2f}, one request of {req.context_len} tokens "
            f"{need:.2f}) but has {req.free_per_gpu_gib:.2f}: over by {need - budget:.2f} GiB"
        )
        return plan
    plan.servers.append(size_server(req, c, f0, budget, ids))
    return plan


def _plan_disjoint(req: PlanRequest) -> Plan:
    k = req.spec_gpus or req.gpus // 2
    tps = {"spec": k, "baseline": req.gpus - k}
    plan = Plan(req, [], reasons=_tp_reasons(req, *tps.values()))
    if plan.reasons:
        return plan
    start = 0
    fractions = {"spec": req.spec_mem_fraction, "baseline": req.baseline_mem_fraction}
    for role, tp in tps.items():
        ids = list(range(start, start + tp))
        start += tp
        c = server_costs(req, role, tp, speculative=(role == "spec" and req.spec_draft is not None))
        f0 = req.free_per_gpu_gib - c.before_gib
        if fractions[role] is not None:
            plan.servers.append(evaluate_server(req, c, f0, fractions[role], ids))
            continue
        budget = f0 - (c.fixed_gib - c.before_gib)
        need = _min_pool_gib(req, c)
        if budget < need:
            plan.reasons.append(
                f"{role} at TP={tp} does not fit: it needs {c.fixed_gib + need:.2f} GiB per GPU "
                f"(weights {c.weights_in_gib + c.weights_out_gib:.2f}, overheads "
                f"{c.before_gib + c.reserve_gib:.2f}, one request {need:.2f}) but a GPU has "
                f"{req.free_per_gpu_gib:.2f}: over by {need - budget:.2f} GiB"
            )
            continue
        plan.servers.append(size_server(req, c, f0, budget, ids))
    return plan


def _shared_costs(req: PlanRequest) -> tuple[Costs, Costs]:
    tp = req.gpus
    spec = server_costs(req, "spec", tp, speculative=req.spec_draft is not None)
    base = server_costs(req, "baseline", tp, speculative=False)
    return spec, base


def _evaluate_shared(req: PlanRequest, f_spec: float, f_base: float) -> list[ServerPlan]:
    spec_c, base_c = _shared_costs(req)
    ids = list(range(req.gpus))
    free = req.free_per_gpu_gib
    first = evaluate_server(req, spec_c, free - spec_c.before_gib, f_spec, ids)
    f0_2 = free - first.footprint_gib - base_c.before_gib
    if f0_2 <= 0:
        second = evaluate_server(req, base_c, 1e-9, f_base, ids)
        second.f0_gib = f0_2
        second.problems = [f"baseline: no memory left after spec ({f0_2:.2f} GiB free)"]
    else:
        second = evaluate_server(req, base_c, f0_2, f_base, ids)
    return [first, second]


def _plan_shared(req: PlanRequest) -> Plan:
    plan = Plan(req, [], reasons=_tp_reasons(req, req.gpus))
    if plan.reasons:
        return plan
    if req.spec_mem_fraction is not None and req.baseline_mem_fraction is not None:
        plan.servers = _evaluate_shared(req, req.spec_mem_fraction, req.baseline_mem_fraction)
        plan.trap = _trap(req, plan.servers)
        return plan
    spec_c, base_c = _shared_costs(req)
    free = req.free_per_gpu_gib
    kv_mem = free - spec_c.fixed_gib - base_c.fixed_gib
    min_spec, min_base = _min_pool_gib(req, spec_c), _min_pool_gib(req, base_c)
    if kv_mem < min_spec + min_base:
        plan.reasons.append(
            f"two copies of {req.model.id} do not fit on {req.gpus}x {req.gpu.id}: per GPU they "
            f"need weights {spec_c.weights_in_gib + spec_c.weights_out_gib:.2f} + "
            f"{base_c.weights_in_gib:.2f} GiB, overheads "
            f"{spec_c.before_gib + spec_c.reserve_gib + base_c.before_gib + base_c.reserve_gib:.2f} "
            f"GiB and one request of {req.context_len} tokens in each pool "
            f"{min_spec + min_base:.2f} GiB, but a GPU has {free:.2f} GiB: over by "
            f"{min_spec + min_base - kv_mem:.2f} GiB"
        )
        return plan
    if req.spec_kv_tokens is not None:
        b_spec = req.spec_kv_tokens * spec_c.geom.bytes_per_token / GIB
    elif req.split is not None:
        b_spec = req.split * kv_mem
    else:
        want = req.spec_requests * req.context_len * spec_c.geom.bytes_per_token / GIB
        b_spec = min(want, 0.5 * kv_mem)
    b_spec = max(b_spec, min_spec)
    if kv_mem - b_spec < min_base:
        max_split = (kv_mem - min_base) / kv_mem
        plan.reasons.append(
            f"the spec split leaves the baseline pool {kv_mem - b_spec:.2f} GiB per GPU, less "
            f"than one request of {req.context_len} tokens ({min_base:.2f} GiB): give spec at most "
            f"--split {math.floor(max_split * 100) / 100:.2f}"
        )
        return plan
    ids = list(range(req.gpus))
    first = size_server(req, spec_c, free - spec_c.before_gib, b_spec, ids)
    f0_2 = free - first.footprint_gib - base_c.before_gib
    second = size_server(req, base_c, f0_2, f0_2 - (base_c.fixed_gib - base_c.before_gib), ids)
    plan.servers = [first, second]
    plan.trap = _trap(req, plan.servers)
    return plan


def _trap(req: PlanRequest, servers: list[ServerPlan]) -> dict[str, float | str]:
    """The two-servers-same-fraction trap, with numbers for this plan. In evaluate mode (both
    fractions given) it also shows the real split and the fractions that give the split the
    operator expected (each fraction read as a share of the whole card)."""
    spec, base = servers
    f = spec.mem_fraction_static
    naive = _evaluate_shared(req, f, f) if base.mem_fraction_static != f else [spec, base]
    naive_base = naive[1]
    card_f0 = req.free_per_gpu_gib - base.before_weights_gib
    expected = max(0.0, f * card_f0 - base.weights_in_fraction_gib)
    total = spec.kv_gib + base.kv_gib
    out: dict[str, float | str] = {
        "same_fraction": f,
        "baseline_f0_gib": round(naive_base.f0_gib, 2),
        "baseline_expected_kv_gib": round(expected, 2),
        "baseline_real_kv_gib": round(naive_base.kv_gib, 2),
        "baseline_real_kv_tokens": naive_base.kv_tokens,
        "baseline_outcome": "; ".join(naive_base.problems) or "starts",
        "real_spec_share": round(spec.kv_gib / total, 3) if total else 0.0,
    }
    auto = _evaluate_shared(req, spec.sglang_default_mem_fraction, base.sglang_default_mem_fraction)
    out["default_spec_fraction"] = spec.sglang_default_mem_fraction
    out["default_baseline_fraction"] = base.sglang_default_mem_fraction
    out["default_baseline_f0_gib"] = round(auto[1].f0_gib, 2)
    out["default_outcome"] = "; ".join(auto[1].problems) or (
        f"baseline starts with {auto[1].kv_tokens:,} tokens"
    )
    if req.spec_mem_fraction is not None and req.baseline_mem_fraction is not None:
        exp_spec = max(0.0, req.spec_mem_fraction * card_f0 - spec.weights_in_fraction_gib)
        exp_base = max(0.0, req.baseline_mem_fraction * card_f0 - base.weights_in_fraction_gib)
        if exp_spec + exp_base > 0:
            share = exp_spec / (exp_spec + exp_base)
            out["expected_spec_share"] = round(share, 3)
            if 0 < share < 1:
                fixed = _plan_shared(
                    replace(req, spec_mem_fraction=None, baseline_mem_fraction=None, split=share)
                )
                if fixed.fits:
                    out["fix_spec_mem_fraction"] = fixed.servers[0].mem_fraction_static
                    out["fix_baseline_mem_fraction"] = fixed.servers[1].mem_fraction_static
    return out


def plan(req: PlanRequest, alternatives: bool = True) -> Plan:
    """Plan (or, with fractions given, evaluate) a layout; refusals carry alternatives."""
    result = {"shared": _plan_shared, "disjoint": _plan_disjoint, "single": _plan_single}[
        req.layout
    ](req)
    result.reasons.extend(_balance_reasons(req))
    result.notes.extend(_notes(req))
    if alternatives and not result.fits:
        from .alternatives import suggest

        result.alternatives = suggest(req, result)
    return result


def _balance_reasons(req: PlanRequest) -> list[str]:
    """SGLang refuses TP startup when a rank has < 90% of another rank's free memory."""
    if req.free_gib_each is None:
        return []
    groups = [list(range(req.gpus))]
    if req.layout == "disjoint":
        k = req.spec_gpus or req.gpus // 2
        groups = [list(range(k)), list(range(k, req.gpus))]
    reasons = []
    for ids in groups:
        free = [req.free_gib_each[i] for i in ids]
        if unbalanced(free):
            reasons.append(
                f"GPUs {ids[0]}-{ids[-1]}: free memory {min(free):.2f}..{max(free):.2f} GiB differs "
                "by more than 10%: SGLang stops with 'The memory capacity is unbalanced'; free the "
                "busy GPU or leave it out"
            )
    return reasons


def _notes(req: PlanRequest) -> list[str]:
    notes = []
    m = req.model
    if m.swa_layers:
        notes.append(
            f"{m.id}: {m.swa_layers} of {m.layers} layers use a {m.sliding_window}-token sliding "
            "window. SGLang's hybrid SWA pool profiles with all layers, then gives the SWA layers "
            "0.8x as many token slots as the full layers; kv_tokens counts full-attention tokens "
            "(the context the server holds). With --disable-hybrid-swa-memory every layer is full."
        )
    if m.dsa_index_head_dim and req.resolved_kv_dtype.startswith("fp8"):
        notes.append(
            "DSA with an FP8 KV cache: the pool stores a scale per 128 and the rope part in BF16 "
            "(656 B/layer instead of the 576 SGLang profiles with); the difference is counted "
            "outside the fraction."
        )
    if req.kv_dtype == "auto":
        notes.append(f"--kv-cache-dtype auto resolves to {req.resolved_kv_dtype} here.")
    draft = req.spec_draft
    if draft is not None and req.draft_accounting == "scaled":
        notes.append(
            "draft accounting 'scaled': cell_size x (1 + draft_layers/target_layers) and the draft "
            "weights inside the fraction (newer releases per calibration/memory_model.md). If the "
            "server actually runs the draft pool outside the fraction, it overshoots the headroom: "
            "the default 'separate' is the safe choice."
        )
    elif draft is not None:
        notes.append(
            "draft accounting 'separate' (default, as in SGLang 0.5.x model_runner): the draft's "
            "own KV pool with the target's token count and its weights come from the headroom, "
            "outside the fraction."
        )
    return notes
