"""SGLang 0.5.x memory semantics (calibration/memory_model.md) and the overheads outside them.

  F0    free memory per GPU when the server starts (after its CUDA/NCCL init, before weights;
        min over TP ranks; memory another process holds is not free)
  A     free memory after the weights load = F0 - weights
  rest  = A - F0 * (1 - f)                       f = --mem-fraction-static
  max_total_num_tokens = floor(rest * 2^30 / cell_size), page aligned; rest <= 0 is SGLang's
        "Not enough memory. Please try to increase --mem-fraction-static"
So weights + KV = f * F0 and F0 * (1 - f) is the headroom left for activations, CUDA graphs,
the draft (separate accounting) and anything else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specswitch.errors import UserError

from .kvcache import KvGeometry

GIB = float(1 << 30)
UNBALANCED_RATIO = 0.9  # SGLang refuses TP startup when min free < 0.9 * local free


class NotEnoughMemory(Exception):
    """SGLang's own startup failure: rest <= 0 for the given fraction."""


def sglang_card_defaults(gpu_mem_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a card (server_args)."""
    gib = gpu_mem_mib / 1024
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 2048, (24 if tp < 4 else 80)
    if gib < 60:
        return 4096, (32 if tp < 4 else 160)
    if gib < 160:
        return 8192, (256 if tp < 4 else 512)
    return 16384, 512


def sglang_default_mem_fraction(
    gpu_mem_mib: float,
    tp: int,
    speculative: bool,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    pp: int = 1,
) -> float:
    """The fraction SGLang picks itself (computed from the card's TOTAL memory)."""
    chunk, graph_bs = sglang_card_defaults(gpu_mem_mib, tp)
    chunk = chunked_prefill_size or chunk
    graph_bs = cuda_graph_max_bs or graph_bs
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if speculative:
        reserved += 2 * 1024
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def sglang_max_total_tokens(
    f0_gib: float, weights_gib: float, fraction: float, geom: KvGeometry, page_size: int = 1
) -> int:
    """max_total_num_tokens as SGLang computes it (full-attention tokens for SWA models)."""
    available = f0_gib - weights_gib
    rest = available - f0_gib * (1 - fraction)
    if rest <= 0:
        raise NotEnoughMemory(
            f"rest = A - F0*(1-f) = {available:.2f} - {f0_gib:.2f}*(1-{fraction:g}) = "
            f"{rest:.2f} GiB <= 0"
        )
    tokens = int(rest * GIB) // geom.cell_bytes
    tokens = tokens // page_size * page_size
    if geom.capacity_factor != 1.0:
        tokens = int(tokens * geom.capacity_factor) // page_size * page_size
    if tokens <= 0:
        raise NotEnoughMemory(f"rest {rest:.3f} GiB holds no KV token")
    return tokens


def in_fraction_kv_gib(tokens: int, geom: KvGeometry) -> float:
    """Memory the KV pool takes inside the fraction for `tokens` full-attention tokens."""
    return tokens / geom.capacity_factor * geom.cell_bytes / GIB


def fraction_for_tokens(f0_gib: float, weights_gib: float, tokens: int, geom: KvGeometry) -> float:
    """Smallest 4-decimal fraction whose SGLang token count is at least `tokens`."""
    exact = (weights_gib + in_fraction_kv_gib(tokens, geom)) / f0_gib
    return math.ceil(exact * 10_000 - 1e-6) / 10_000


def default_max_running_requests(kv_tokens: int, context_len: int) -> int:
    """SGLang's req_to_token pool size when --max-running-requests is not given."""
    return min(max(int(kv_tokens / context_len * 512), 2048), 4096)


def unbalanced(free_gib: list[float]) -> bool:
    """True when SGLang would refuse TP startup: some GPU has < 90% of another's free memory."""
    return bool(free_gib) and min(free_gib) < UNBALANCED_RATIO * max(free_gib)


@dataclass(frozen=True)
class Overheads:
    """Memory outside SGLang's formula, per GPU; all are flags. metadata, CUDA graph and draft
    figures are SGLang's own estimates (server_args default-fraction heuristic). Activations:
    SGLang budgets 1.5 MiB per chunked-prefill token there (plus a 10 GiB floor) as a safety
    pad; we default to 0.5 MiB (4 GiB for an 8192-token chunk), a typical peak for sharded
    large models - pass --activation-mib-per-token 1.5 to plan with SGLang's pad."""

    meta_gib: float = 0.5  # attention-backend metadata, constant buffers
    activation_mib_per_token: float = 0.5  # peak activations per chunked-prefill token
    graph_mib_per_bs: float = 2.0  # CUDA graph memory per captured batch size
    spec_extra_gib: float = 2.0  # draft CUDA graphs + draft activations (EAGLE/NEXTN)
    chunked_prefill_size: int | None = None  # None: SGLang's default for the card
    cuda_graph_max_bs: int | None = None  # None: SGLang's default for the card and TP
    context_gib: float | None = None  # None: the GPU catalog's CUDA context figure
    comm_gib: float | None = None  # None: the GPU catalog's NCCL figure for the TP size

    def __post_init__(self) -> None:
        checks = {
            "meta_gib": (self.meta_gib, 0, 64),
            "activation_mib_per_token": (self.activation_mib_per_token, 0, 64),
            "graph_mib_per_bs": (self.graph_mib_per_bs, 0, 1024),
            "spec_extra_gib": (self.spec_extra_gib, 0, 64),
            "chunked_prefill_size": (self.chunked_prefill_size or 1, 1, 1 << 20),
            "cuda_graph_max_bs": (self.cuda_graph_max_bs or 1, 1, 8192),
            "context_gib": (self.context_gib or 0, 0, 64),
            "comm_gib": (self.comm_gib or 0, 0, 64),
        }
        for name, (value, lo, hi) in checks.items():
            if not (lo <= value <= hi) or math.isnan(value):
                raise UserError(f"overhead {name}={value} must be between {lo} and {hi}")

    def card_settings(self, gpu_mem_mib: float, tp: int) -> tuple[int, int]:
        chunk, graph_bs = sglang_card_defaults(gpu_mem_mib, tp)
        return self.chunked_prefill_size or chunk, self.cuda_graph_max_bs or graph_bs

    def reserve_gib(self, gpu_mem_mib: float, tp: int, speculative: bool) -> dict[str, float]:
        """Headroom one server needs inside F0*(1-f), itemised (GiB per GPU)."""
        chunk, graph_bs = self.card_settings(gpu_mem_mib, tp)
        items = {
            "metadata": self.meta_gib,
            "activations": chunk * self.activation_mib_per_token / 1024,
            "cuda_graphs": graph_bs * self.graph_mib_per_bs / 1024,
        }
        if speculative:
            items["draft_graphs_activations"] = self.spec_extra_gib
        return items
