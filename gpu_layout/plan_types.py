"""The planner's data: what is asked (PlanRequest) and what comes back (Plan, ServerPlan)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specswitch.errors import UserError

from .catalog import DraftSpec, GpuSpec, ModelSpec
from .kvcache import DRAFT_ACCOUNTING, KvGeometry, resolve_kv_dtype
from .memory import Overheads

LAYOUTS = ("shared", "disjoint", "single")
HIGH_MARGIN = 0.75  # suggested SPECSWITCH_HIGH: 75% of what the spec pool can hold
SLACK_GIB = 0.05  # rounding tolerance of the 4-decimal fraction
DEFAULT_IMAGE = "lmsysorg/sglang:v0.5.19-cu129"


@dataclass(frozen=True)
class PlanRequest:
    gpu: GpuSpec
    gpus: int
    model: ModelSpec
    layout: str = "shared"
    use_draft: bool = True
    draft: DraftSpec | None = None  # None: the model's catalog draft
    context_len: int = 8192
    kv_dtype: str = "auto"
    split: float | None = None  # share of the KV memory for spec; None = auto
    spec_kv_tokens: int | None = None
    spec_requests: int = 48  # spec --max-running-requests (SGLang's spec default)
    draft_accounting: str = "separate"
    mem_fraction_static: float | None = None  # single layout: evaluate this fraction
    spec_mem_fraction: float | None = None  # shared/disjoint: evaluate these fractions
    baseline_mem_fraction: float | None = None
    free_gib: float | None = None  # free memory per GPU before the first server
    free_gib_each: tuple[float, ...] | None = None  # measured per GPU (probe); min is used
    spec_gpus: int | None = None  # disjoint: GPUs for spec (default half)
    page_size: int = 1
    overheads: Overheads = field(default_factory=Overheads)
    spec_num_steps: int = 3
    spec_eagle_topk: int = 1
    spec_num_draft_tokens: int = 4
    sglang_image: str = DEFAULT_IMAGE

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise UserError(f"--layout {self.layout!r} must be one of {', '.join(LAYOUTS)}")
        if not (1 <= self.gpus <= 64):
            raise UserError(f"--gpus {self.gpus} must be between 1 and 64")
        if not (16 <= self.context_len <= 10_000_000):
            raise UserError(f"--context-len {self.context_len} must be between 16 and 10M")
        if self.model.max_context and self.context_len > self.model.max_context:
            raise UserError(
                f"--context-len {self.context_len} exceeds {self.model.id}'s maximum "
                f"{self.model.max_context}; pass a smaller --context-len"
            )
        if self.split is not None and not (0 < self.split < 1):
            raise UserError(f"--split {self.split} must be 'auto' or a ratio between 0 and 1")
        for name in ("mem_fraction_static", "spec_mem_fraction", "baseline_mem_fraction"):
            value = getattr(self, name)
            if value is not None and not (0 < value < 1):
                raise UserError(f"{name.replace('_', '-')} {value} must be between 0 and 1")
        if (self.spec_mem_fraction is None) != (self.baseline_mem_fraction is None):
            raise UserError("give both --spec-mem-fraction and --baseline-mem-fraction, or neither")
        if self.spec_kv_tokens is not None and self.spec_kv_tokens < 1:
            raise UserError(f"--spec-kv-tokens {self.spec_kv_tokens} must be positive")
        if not (1 <= self.spec_requests <= 4096):
            raise UserError(f"--spec-requests {self.spec_requests} must be between 1 and 4096")
        if self.draft_accounting not in DRAFT_ACCOUNTING:
            raise UserError(f"--draft-accounting must be one of {', '.join(DRAFT_ACCOUNTING)}")
        if self.free_gib is not None and not (0 < self.free_gib <= self.gpu.memory_gib + 1e-6):
            raise UserError(
                f"--free-gib {self.free_gib} must be > 0 and at most the card's "
                f"{self.gpu.memory_gib:.2f} GiB"
            )
        if self.free_gib_each is not None:
            if len(self.free_gib_each) != self.gpus:
                raise UserError(
                    f"--free-gib lists {len(self.free_gib_each)} values for {self.gpus} GPUs"
                )
            if not all(0 < x <= self.gpu.memory_gib + 1e-6 for x in self.free_gib_each):
                raise UserError("--free-gib values must be > 0 and at most the card's memory")
        if self.layout == "disjoint":
            if self.gpus < 2:
                raise UserError("--layout disjoint needs at least 2 GPUs")
            if self.spec_gpus is not None and not (1 <= self.spec_gpus < self.gpus):
                raise UserError(f"--spec-gpus {self.spec_gpus} must be between 1 and gpus-1")
        if not (1 <= self.page_size <= 1024):
            raise UserError(f"--page-size {self.page_size} must be between 1 and 1024")

    @property
    def spec_draft(self) -> DraftSpec | None:
        if not self.use_draft:
            return None
        return self.draft or self.model.draft

    @property
    def resolved_kv_dtype(self) -> str:
        return resolve_kv_dtype(self.kv_dtype, self.model, self.gpu.sm)

    @property
    def free_per_gpu_gib(self) -> float:
        if self.free_gib_each is not None:
            return min(self.free_gib_each)  # SGLang uses the minimum over TP ranks
        return self.free_gib if self.free_gib is not None else self.gpu.memory_gib

    def before_gib(self, tp: int) -> float:
        o = self.overheads
        ctx = o.context_gib if o.context_gib is not None else self.gpu.cuda_context_gib
        comm = o.comm_gib if o.comm_gib is not None else self.gpu.comm_gib(tp)
        return ctx + (comm if tp > 1 else 0.0)


@dataclass(frozen=True)
class Costs:
    """What one server needs per GPU apart from its KV pool."""

    role: str
    tp: int
    draft: DraftSpec | None
    before_gib: float
    weights_gib: float  # target weights per GPU
    draft_weights_gib: float
    weights_in_gib: float  # counted inside the fraction
    weights_out_gib: float  # loaded into the headroom
    reserve: dict[str, float]
    geom: KvGeometry
    max_running: int | None  # None: SGLang's default formula

    @property
    def reserve_gib(self) -> float:
        return sum(self.reserve.values())

    @property
    def fixed_gib(self) -> float:
        return self.before_gib + self.weights_in_gib + self.weights_out_gib + self.reserve_gib


@dataclass
class ServerPlan:
    role: str  # spec | baseline | single
    tp: int
    gpu_ids: list[int]
    speculative: bool
    algorithm: str
    draft_model: str
    before_weights_gib: float
    f0_gib: float
    weights_gib_per_gpu: float
    draft_weights_gib_per_gpu: float
    weights_in_fraction_gib: float
    kv_bytes_per_token: int
    draft_kv_bytes_per_token: int
    kv_outside_bytes_per_token: int
    kv_tokens: int
    kv_gib: float
    kv_outside_gib: float
    mem_fraction_static: float
    sglang_default_mem_fraction: float
    headroom_gib: float
    headroom_needed_gib: float
    reserve_gib: dict[str, float]
    max_concurrent_requests: int
    max_running_requests: int
    footprint_gib: float
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Plan:
    request: PlanRequest
    servers: list[ServerPlan]
    reasons: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trap: dict[str, float | str] | None = None

    @property
    def fits(self) -> bool:
        return not self.reasons and all(s.ok for s in self.servers)

    def server(self, role: str) -> ServerPlan | None:
        return next((s for s in self.servers if s.role == role), None)

    @property
    def spec_server(self) -> ServerPlan | None:
        return next((s for s in self.servers if s.speculative), None)

    @property
    def spec_pool_requests(self) -> int:
        s = self.spec_server
        return s.max_concurrent_requests if s else 0

    @property
    def suggested_high(self) -> int:
        s = self.spec_server
        if s is None:
            return 0
        cap = min(s.max_concurrent_requests, s.max_running_requests)
        return max(1, math.floor(HIGH_MARGIN * cap))

    @property
    def suggested_low(self) -> int:
        return self.suggested_high // 2
