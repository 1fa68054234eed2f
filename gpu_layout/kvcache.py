"""KV cache bytes per token per GPU, as SGLang 0.5.x counts them (its `cell_size`).

Formulas (docs/gpu_layout.md has the worked numbers):
  GQA/MHA  2 * layers * max(1, kv_heads // tp) * head_dim * dtype_bytes
           (K and V; kv heads are replicated when kv_heads < tp)
  MLA      (kv_lora_rank + qk_rope_head_dim) * layers * dtype_bytes, on every TP rank
  DSA      + (index_head_dim + index_head_dim // 128 * 4) * layers  (FP8 key + fp32 scale per
           128 -> 132 bytes per layer for index_head_dim 128)
  draft    "separate": the draft has its own pool with the target's token count, sized by its
           own geometry and layers, allocated OUTSIDE mem_fraction_static (older 0.5.x);
           "scaled": the target cell is scaled by (1 + draft_layers / target_layers) and the
           draft weights load inside the fraction (newer releases).
  SWA      hybrid sliding-window models (GPT-OSS): SGLang profiles with the cell of ALL layers,
           then splits the memory between a full-attention pool and a SWA pool holding
           swa_full_tokens_ratio (0.8) times as many tokens. The full pool (= the context the
           server can hold) therefore gets (n_full + n_swa) / (n_full + 0.8 * n_swa) times the
           profiled token count.
"""

from __future__ import annotations

from dataclasses import dataclass

from specswitch.errors import UserError

from .catalog import DraftSpec, ModelSpec

DRAFT_ACCOUNTING = ("scaled", "separate")
SWA_FULL_TOKENS_RATIO = 0.8  # SGLang --swa-full-tokens-ratio default
DSA_QUANT_BLOCK = 128

_DTYPE_BYTES = {
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8": 1,
}
KV_DTYPES = ("auto", *_DTYPE_BYTES)


def resolve_kv_dtype(kv_dtype: str, model: ModelSpec, gpu_sm: int) -> str:
    """SGLang's `auto`: the model dtype (BF16) except DSA models on SM>=100 -> fp8_e4m3."""
    if kv_dtype not in KV_DTYPES:
        raise UserError(f"--kv-dtype {kv_dtype!r} is not one of {', '.join(KV_DTYPES)}")
    if kv_dtype != "auto":
        return kv_dtype
    if model.dsa_index_head_dim and gpu_sm >= 100:
        return "fp8_e4m3"
    return "bfloat16"


def dtype_bytes(kv_dtype: str) -> int:
    try:
        return _DTYPE_BYTES[kv_dtype]
    except KeyError:
        raise UserError(f"KV dtype {kv_dtype!r} has no byte size; use bf16 or fp8_e4m3") from None


def gqa_cell_bytes(layers: int, kv_heads: int, head_dim: int, tp: int, nbytes: int) -> int:
    return 2 * layers * max(1, kv_heads // tp) * head_dim * nbytes


def mla_cell_bytes(layers: int, kv_lora_rank: int, qk_rope_head_dim: int, nbytes: int) -> int:
    return (kv_lora_rank + qk_rope_head_dim) * layers * nbytes


def dsa_indexer_bytes(layers: int, index_head_dim: int = 128) -> int:
    return (index_head_dim + index_head_dim // DSA_QUANT_BLOCK * 4) * layers


def dsa_fp8_overshoot_bytes(layers: int, kv_lora_rank: int, qk_rope_head_dim: int) -> int:
    """Extra bytes the DSA pool really stores per token with an FP8 KV cache (non-trtllm
    backends keep a scale per 128 and the rope part in BF16), beyond what profiling counts."""
    stored = kv_lora_rank + kv_lora_rank // DSA_QUANT_BLOCK * 4 + qk_rope_head_dim * 2
    return (stored - (kv_lora_rank + qk_rope_head_dim)) * layers


def target_cell_bytes(model: ModelSpec, tp: int, nbytes: int, layers: int | None = None) -> int:
    """SGLang's cell_size for the target model (all layers unless `layers` is given)."""
    n = model.layers if layers is None else layers
    if model.attention == "mla":
        cell = mla_cell_bytes(n, model.kv_lora_rank, model.qk_rope_head_dim, nbytes)
        if model.dsa_index_head_dim:
            cell += dsa_indexer_bytes(n, model.dsa_index_head_dim)
        return cell
    return gqa_cell_bytes(n, model.kv_heads, model.head_dim, tp, nbytes)


def draft_cell_bytes(model: ModelSpec, draft: DraftSpec, tp: int, nbytes: int) -> int:
    """The draft worker's own cell (separate accounting)."""
    if draft.algorithm == "NEXTN":
        return target_cell_bytes(model, tp, nbytes, layers=draft.layers)
    return gqa_cell_bytes(draft.layers, draft.kv_heads, draft.head_dim, tp, nbytes)


def swa_capacity_factor(model: ModelSpec) -> float:
    """Full-attention tokens per profiled token for hybrid SWA models (1.0 otherwise)."""
    if not model.swa_layers:
        return 1.0
    n_swa = model.swa_layers
    n_full = model.layers - n_swa
    return (n_full + n_swa) / (n_full + SWA_FULL_TOKENS_RATIO * n_swa)


@dataclass(frozen=True)
class KvGeometry:
    """What one server's KV cache costs per token on each GPU."""

    cell_bytes: int  # SGLang's cell_size: counted inside mem_fraction_static
    outside_bytes: int  # per (full) token, allocated outside the fraction
    draft_bytes: int  # the draft's share (inside `cell_bytes` when scaled, else outside)
    capacity_factor: float  # full-attention tokens per profiled token (SWA), else 1.0

    @property
    def bytes_per_token(self) -> float:
        """All bytes one full-context token costs on a GPU, inside and outside the fraction."""
        return self.cell_bytes / self.capacity_factor + self.outside_bytes


def kv_geometry(
    model: ModelSpec,
    tp: int,
    kv_dtype: str,
    draft: DraftSpec | None,
    accounting: str = "separate",
) -> KvGeometry:
    """KV cost per token for a server at `tp` (speculative when `draft` is given)."""
    if accounting not in DRAFT_ACCOUNTING:
        raise UserError(f"draft accounting {accounting!r} must be one of {DRAFT_ACCOUNTING}")
    nbytes = dtype_bytes(kv_dtype)
    cell = target_cell_bytes(model, tp, nbytes)
    outside = 0
    if model.dsa_index_head_dim and nbytes == 1:
        outside += dsa_fp8_overshoot_bytes(model.layers, model.kv_lora_rank, model.qk_rope_head_dim)
    draft_bytes = 0
    if draft is not None:
        if accounting == "scaled":
            scaled = cell * (1 + draft.layers / model.layers)
            draft_bytes = round(scaled) - cell
            cell = round(scaled)
        else:
            draft_bytes = draft_cell_bytes(model, draft, tp, nbytes)
            outside += draft_bytes
    return KvGeometry(
        cell_bytes=cell,
        outside_bytes=outside,
        draft_bytes=draft_bytes,
        capacity_factor=swa_capacity_factor(model),
    )
