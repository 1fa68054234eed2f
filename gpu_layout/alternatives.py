"""What would fit instead when a plan is refused (each candidate is a real plan)."""

from __future__ import annotations

from dataclasses import replace

from .catalog import GB
from .planner import Plan, PlanRequest, plan


def _fits(req: PlanRequest, **changes: object) -> Plan | None:
    try:
        result = plan(replace(req, **changes), alternatives=False)
    except Exception:  # an invalid candidate (e.g. a context too long) is simply not offered
        return None
    return result if result.fits else None


def _pools(p: Plan) -> str:
    c = p.request.context_len
    return ", ".join(
        f"{s.role} holds {s.max_concurrent_requests} requests of {c}" for s in p.servers
    )


def _bits(req: PlanRequest, checkpoint_gb: float) -> str:
    if not req.model.params_b:
        return ""
    return f" (~{checkpoint_gb * GB * 8 / (req.model.params_b * 1e9):.1f} bits/weight)"


def suggest(req: PlanRequest, refused: Plan) -> list[str]:
    """One line per alternative that fits, most conservative change first."""
    base = replace(
        req,
        mem_fraction_static=None,
        spec_mem_fraction=None,
        baseline_mem_fraction=None,
        free_gib=req.free_per_gpu_gib if req.free_gib_each else req.free_gib,
        free_gib_each=None,
    )
    out: list[str] = []

    if req.free_gib_each is not None and any("unbalanced" in r for r in refused.reasons):
        # other layouts on the same GPUs are just as unbalanced: only offer leaving GPUs out
        top = max(req.free_gib_each)
        keep = [i for i, x in enumerate(req.free_gib_each) if x >= 0.9 * top]
        for n in range(len(keep), 0, -1):
            ids = keep[:n]
            p = _fits(base, gpus=n, spec_gpus=None, free_gib=min(req.free_gib_each[i] for i in ids))
            if p:
                out.append(
                    f"leave the busy GPUs out: CUDA_VISIBLE_DEVICES={','.join(map(str, ids))} "
                    f"--gpus {n} ({_pools(p)})"
                )
                break
        return out or ["free the busy GPUs first (see `specswitch layout probe`)"]

    if req.layout == "shared" and req.split is not None:
        for split in (0.4, 0.3, 0.2, 0.1, 0.05):
            if split < req.split and (p := _fits(base, split=split)):
                out.append(f"smaller spec split: --split {split} ({_pools(p)})")
                break

    if req.layout == "shared" and req.gpus >= 2:
        p = _fits(base, layout="disjoint", split=None, spec_kv_tokens=None)
        if p:
            tps = "+".join(f"TP{s.tp}" for s in p.servers)
            out.append(f"disjoint layout {tps}: --layout disjoint ({_pools(p)})")
    if req.layout == "disjoint":
        p = _fits(base, layout="shared", spec_gpus=None)
        if p:
            out.append(f"shared layout at TP{req.gpus}: --layout shared ({_pools(p)})")

    # fewer bytes per weight: the largest checkpoint that fits this layout (draft kept as is)
    draft = req.model.draft
    floor = (draft.size_gb / req.model.checkpoint_gb if draft and draft.in_checkpoint else 0) + 0.02

    def scaled(s: float) -> Plan | None:
        return _fits(base, model=replace(req.model, checkpoint_gb=req.model.checkpoint_gb * s))

    if floor < 1 and scaled(floor):
        lo, hi = floor, 1.0
        for _ in range(18):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if scaled(mid) else (lo, mid)
        gb = req.model.checkpoint_gb * lo
        if lo < 0.999:
            out.append(
                f"fewer bytes per weight: a checkpoint of at most {gb:.0f} GB{_bits(req, gb)} "
                f"instead of {req.model.checkpoint_gb:.0f} GB{_bits(req, req.model.checkpoint_gb)}"
            )

    for n in range(req.gpus + 1, min(4 * req.gpus, 64) + 1):
        p = _fits(base, gpus=n, spec_gpus=None)
        if p:
            out.append(f"more GPUs: {n}x {req.gpu.id} in the {req.layout} layout ({_pools(p)})")
            break

    shorter = [c for c in (65536, 32768, 16384, 8192, 4096, 2048) if c < req.context_len]
    for c in shorter:
        p = _fits(base, context_len=c)
        if p:
            out.append(f"shorter requests: --context-len {c} ({_pools(p)})")
            break

    if req.layout != "single":
        for label, use_draft in (("speculative", True), ("baseline", False)):
            p = _fits(base, layout="single", use_draft=use_draft, spec_gpus=None)
            if p:
                s = p.servers[0]
                out.append(
                    f"no second server: one {label} server at TP{s.tp} "
                    f"(--mem-fraction-static {s.mem_fraction_static}, holds "
                    f"{s.max_concurrent_requests} requests of {req.context_len})"
                )
    if not out:
        out.append("nothing close fits: this model needs a larger node")
    return out
