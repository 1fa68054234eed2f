"""Plan output: a table for people, JSON for tools, .env and launch arguments for deploy/."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from typing import Any

from specswitch.errors import UserError

from .planner import Plan, ServerPlan

PORTS = {"spec": 30001, "baseline": 30002, "single": 30001}


def _r(x: float, n: int = 2) -> float:
    return round(x, n)


def plan_dict(p: Plan) -> dict[str, Any]:
    req = p.request
    servers = []
    for s in p.servers:
        d = asdict(s)
        for k, v in d.items():
            if isinstance(v, float):
                d[k] = _r(
                    v, 4 if k.endswith("fraction_static") or k == "mem_fraction_static" else 3
                )
        d["reserve_gib"] = {k: _r(v, 3) for k, v in s.reserve_gib.items()}
        d["ok"] = s.ok
        d["launch_args"] = launch_args(p, s)
        servers.append(d)
    return {
        "fits": p.fits,
        "layout": req.layout,
        "gpu": req.gpu.id,
        "gpu_memory_gib": req.gpu.memory_gib,
        "gpus": req.gpus,
        "free_gib_per_gpu": _r(req.free_per_gpu_gib, 3),
        "free_gib": req.free_gib,  # as given (None: the whole card)
        "free_gib_each": list(req.free_gib_each) if req.free_gib_each else None,
        "model": req.model.id,
        "model_path": req.model.hf_id,
        "checkpoint_gb": req.model.checkpoint_gb,
        "context_len": req.context_len,
        "kv_cache_dtype": req.kv_dtype,
        "kv_cache_dtype_resolved": req.resolved_kv_dtype,
        "draft_accounting": req.draft_accounting,
        "page_size": req.page_size,
        "start_order": [s.role for s in p.servers],
        "servers": servers,
        "spec_pool": {
            "requests": p.spec_pool_requests,
            "context_len": req.context_len,
            "suggested_high": p.suggested_high,
            "suggested_low": p.suggested_low,
        },
        "same_fraction_trap": p.trap,
        "refusal": p.reasons + [q for s in p.servers for q in s.problems],
        "alternatives": p.alternatives,
        "notes": p.notes,
    }


def render_json(p: Plan) -> str:
    return json.dumps(plan_dict(p), indent=2)


def launch_args(p: Plan, s: ServerPlan) -> list[str]:
    req = p.request
    args = [
        "python3", "-m", "sglang.launch_server",
        "--model-path", req.model.hf_id,
        "--served-model-name", req.model.id,
        "--tp", str(s.tp),
        "--mem-fraction-static", f"{s.mem_fraction_static:.4f}".rstrip("0").rstrip("."),
        "--max-total-tokens", str(s.kv_tokens),
        "--max-running-requests", str(s.max_running_requests),
        "--context-length", str(req.context_len),
        "--kv-cache-dtype", req.kv_dtype,
        "--host", "0.0.0.0",
        "--port", str(PORTS[s.role]),
    ]  # fmt: skip
    if req.page_size > 1:
        args += ["--page-size", str(req.page_size)]
    if s.speculative:
        args += ["--speculative-algorithm", s.algorithm]
        if s.algorithm == "EAGLE3":
            args += ["--speculative-draft-model-path", s.draft_model]
        args += [
            "--speculative-num-steps", str(req.spec_num_steps),
            "--speculative-eagle-topk", str(req.spec_eagle_topk),
            "--speculative-num-draft-tokens", str(req.spec_num_draft_tokens),
        ]  # fmt: skip
    return args


def render_args(p: Plan) -> str:
    lines = [
        f"# start order: {' -> '.join(s.role for s in p.servers)} (each ready before the next)"
    ]
    for s in p.servers:
        env = f"CUDA_VISIBLE_DEVICES={','.join(map(str, s.gpu_ids))} "
        lines.append(f"# {s.role}")
        lines.append(env + shlex.join(launch_args(p, s)))
    return "\n".join(lines) + "\n"


def render_env(p: Plan) -> str:
    """The .env docker-compose.yml and deploy/ read (names fixed by the cross-team contract)."""
    req = p.request
    spec, base = p.server("spec"), p.server("baseline")
    if spec is None or base is None:
        raise UserError("--format env is for the two-server layouts: use --layout shared|disjoint")
    draft = req.spec_draft
    values: dict[str, Any] = {
        "MODEL_PATH": req.model.hf_id,
        "SERVED_MODEL_NAME": req.model.id,
        "TP_SIZE": spec.tp,
        "SPEC_ALGORITHM": spec.algorithm or "",
        "DRAFT_MODEL_PATH": draft.model_id if draft and draft.algorithm == "EAGLE3" else "",
        "SPEC_NUM_STEPS": req.spec_num_steps,
        "SPEC_EAGLE_TOPK": req.spec_eagle_topk,
        "SPEC_NUM_DRAFT_TOKENS": req.spec_num_draft_tokens,
        "SPEC_MEM_FRACTION": f"{spec.mem_fraction_static:.4f}",
        "BASELINE_MEM_FRACTION": f"{base.mem_fraction_static:.4f}",
        "SPEC_MAX_RUNNING_REQUESTS": spec.max_running_requests,
        "BASELINE_MAX_RUNNING_REQUESTS": base.max_running_requests,
        "CONTEXT_LENGTH": req.context_len,
        "KV_CACHE_DTYPE": req.kv_dtype,
        "SPEC_KV_TOKENS": spec.kv_tokens,
        "BASELINE_KV_TOKENS": base.kv_tokens,
        "SPECSWITCH_HIGH": p.suggested_high,
        "SPECSWITCH_LOW": p.suggested_low,
        "SGLANG_IMAGE": req.sglang_image,
    }
    extra: dict[str, Any] = {
        "LAYOUT": req.layout,
        "LAYOUT_GPU": req.gpu.id,
        "LAYOUT_GPU_MEM_GIB": f"{req.gpu.memory_gib:.4f}",
        "LAYOUT_GPUS": req.gpus,
        "LAYOUT_FREE_GIB": ",".join(f"{x:g}" for x in req.free_gib_each)
        if req.free_gib_each
        else (f"{req.free_gib:g}" if req.free_gib is not None else ""),
        "LAYOUT_MODEL": req.model.id,
        "LAYOUT_DRAFT_ACCOUNTING": req.draft_accounting,
        "SPEC_TP_SIZE": spec.tp,
        "BASELINE_TP_SIZE": base.tp,
        "SPEC_GPU_IDS": ",".join(map(str, spec.gpu_ids)),
        "BASELINE_GPU_IDS": ",".join(map(str, base.gpu_ids)),
    }
    lines = [
        f"# specswitch layout plan: {req.model.id} on {req.gpus}x {req.gpu.id}, {req.layout} layout",
        "# start order: spec first (wait for /health), then baseline",
        f"# spec pool holds {p.spec_pool_requests} requests of {req.context_len} tokens",
    ]
    if req.layout == "disjoint":
        lines.append(
            "# disjoint: start spec with CUDA_VISIBLE_DEVICES=$SPEC_GPU_IDS --tp $SPEC_TP_SIZE and "
            "baseline with CUDA_VISIBLE_DEVICES=$BASELINE_GPU_IDS --tp $BASELINE_TP_SIZE"
        )
    lines += [f"{k}={v}" for k, v in values.items()]
    lines.append("# informational (not part of the fixed contract)")
    lines += [f"{k}={v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(
        c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def render_table(p: Plan) -> str:
    req = p.request
    head = (
        f"{req.model.id} ({req.model.hf_id}, {req.model.checkpoint_gb:g} GB) on {req.gpus}x "
        f"{req.gpu.id} ({req.gpu.memory_gib:.2f} GiB each), layout {req.layout}, "
        f"requests of {req.context_len} tokens, KV {req.resolved_kv_dtype}"
    )
    out = [head]
    if p.servers:
        cols = [
            ("server", lambda s: f"{s.role}{' (' + s.algorithm + ')' if s.algorithm else ''}"),
            (
                "GPUs",
                lambda s: (
                    f"{s.gpu_ids[0]}-{s.gpu_ids[-1]}" if len(s.gpu_ids) > 1 else str(s.gpu_ids[0])
                ),
            ),
            ("TP", lambda s: str(s.tp)),
            ("F0 GiB", lambda s: f"{s.f0_gib:.2f}"),
            ("weights", lambda s: f"{s.weights_gib_per_gpu:.2f}"),
            ("draft", lambda s: f"{s.draft_weights_gib_per_gpu:.2f}" if s.speculative else "-"),
            ("KV B/tok", lambda s: str(s.kv_bytes_per_token)),
            ("KV tokens", lambda s: f"{s.kv_tokens:,}"),
            ("KV GiB", lambda s: f"{s.kv_gib + s.kv_outside_gib:.2f}"),
            ("headroom/need", lambda s: f"{s.headroom_gib:.2f}/{s.headroom_needed_gib:.2f}"),
            ("--mem-fraction-static", lambda s: f"{s.mem_fraction_static:.4f}"),
            (f"reqs@{req.context_len}", lambda s: str(s.max_concurrent_requests)),
            ("max-running", lambda s: str(s.max_running_requests)),
        ]
        rows = [[name for name, _ in cols]] + [[fn(s) for _, fn in cols] for s in p.servers]
        widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
        out += [_row(r, widths) for r in rows]
        out.append(
            "(per GPU; F0 = free memory when the server starts; headroom = F0*(1-f) vs what it "
            "needs outside the fraction)"
        )
    if p.fits and len(p.servers) > 1:
        out.append(
            f"start order: {' -> '.join(s.role for s in p.servers)}; start the next only when the "
            "previous answers /health (its fraction is computed for the memory the first left)"
        )
    if p.fits:
        if p.spec_server is not None:
            out.append(  # the router's switch threshold is capped by what the spec pool holds
                f"spec pool holds {p.spec_pool_requests} requests of {req.context_len} tokens -> "
                f"suggested SPECSWITCH_HIGH={p.suggested_high}, SPECSWITCH_LOW={p.suggested_low}"
            )
    else:
        out.append("REFUSED:")
        out += [f"  - {r}" for r in p.reasons + [q for s in p.servers for q in s.problems]]
        if p.alternatives:
            out.append("what would fit instead:")
            out += [f"  - {a}" for a in p.alternatives]
    if p.trap:
        t = p.trap
        out.append(
            f"same-fraction trap: with --mem-fraction-static {t['same_fraction']} on BOTH servers the "
            f"baseline starts second and sees F0={t['baseline_f0_gib']} GiB, not the card: it would "
            f"get {t['baseline_real_kv_gib']} GiB of KV ({t['baseline_real_kv_tokens']:,} tokens) "
            f"instead of the {t['baseline_expected_kv_gib']} GiB one expects "
            f"[{t['baseline_outcome']}]. Each server needs its own fraction for its own F0."
        )
        out.append(
            f"SGLang's automatic fractions ({t['default_spec_fraction']} / "
            f"{t['default_baseline_fraction']}) are computed from the card's TOTAL memory: the "
            f"baseline would see F0={t['default_baseline_f0_gib']} GiB [{t['default_outcome']}]"
        )
    if p.trap and "expected_spec_share" in p.trap:
        t = p.trap
        spec_pct, exp_pct = float(t["real_spec_share"]) * 100, float(t["expected_spec_share"]) * 100
        line = (
            f"real split of the KV memory: spec {spec_pct:.0f}% / baseline {100 - spec_pct:.0f}% "
            f"(the fractions read as shares of the card suggest {exp_pct:.0f}% / {100 - exp_pct:.0f}%)"
        )
        if "fix_spec_mem_fraction" in t:
            line += (
                f"; for that split launch spec with --mem-fraction-static "
                f"{t['fix_spec_mem_fraction']} then baseline with {t['fix_baseline_mem_fraction']}"
            )
        out.append(line)
    out += [f"note: {n}" for n in p.notes]
    return "\n".join(out) + "\n"
