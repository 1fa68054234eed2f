"""GPU and model catalogs (catalog/*.toml) and local HF config.json models.

Everything here is plain data: frozen dataclasses validated once, loaded with tomllib.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specswitch.errors import UserError

GB = 1e9  # checkpoint sizes are decimal GB
GIB = float(1 << 30)


@dataclass(frozen=True)
class GpuSpec:
    id: str
    name: str
    memory_mib: float  # total as reported by the driver
    cuda_context_gib: float = 0.75  # CUDA context + torch init, before SGLang measures F0
    comm_base_gib: float = 0.5  # NCCL / custom all-reduce buffers when tp > 1 ...
    comm_per_rank_gib: float = 0.06  # ... plus this per TP rank
    interconnect: str = ""
    sm: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if not (1024 <= self.memory_mib <= 4 * 1024 * 1024):
            raise UserError(
                f"gpu {self.id!r}: memory {self.memory_mib / 1024:.1f} GiB is not a plausible GPU "
                "memory; give it in GiB between 1 and 4096"
            )
        for name in ("cuda_context_gib", "comm_base_gib", "comm_per_rank_gib"):
            value = getattr(self, name)
            if not (0 <= value <= 64):
                raise UserError(f"gpu {self.id!r}: {name}={value} must be between 0 and 64 GiB")

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    def comm_gib(self, tp: int) -> float:
        return 0.0 if tp <= 1 else self.comm_base_gib + self.comm_per_rank_gib * tp

    def before_weights_gib(self, tp: int) -> float:
        """Memory one server takes on each GPU before SGLang measures free memory (F0)."""
        return self.cuda_context_gib + self.comm_gib(tp)


@dataclass(frozen=True)
class DraftSpec:
    algorithm: str  # EAGLE3 | NEXTN
    model_id: str  # "" for NEXTN (the MTP layer lives in the target checkpoint)
    size_gb: float
    layers: int = 1
    in_checkpoint: bool = False
    kv_heads: int = 0  # EAGLE3 drafts: their own GQA geometry; NEXTN: the target's
    head_dim: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if self.algorithm not in ("EAGLE3", "NEXTN"):
            raise UserError(f"draft algorithm {self.algorithm!r} must be EAGLE3 or NEXTN")
        if not (0 < self.size_gb < 200):
            raise UserError(f"draft size {self.size_gb} GB must be between 0 and 200 GB")
        if not (1 <= self.layers <= 8):
            raise UserError(f"draft layers={self.layers} must be between 1 and 8")
        if self.algorithm == "EAGLE3" and (self.kv_heads < 1 or self.head_dim < 1):
            raise UserError("an EAGLE3 draft needs kv_heads and head_dim (its own config.json)")


@dataclass(frozen=True)
class ModelSpec:
    id: str
    hf_id: str
    attention: str  # gqa | mla
    layers: int
    attention_heads: int
    checkpoint_gb: float
    kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    dsa_index_head_dim: int = 0
    swa_layers: int = 0
    sliding_window: int = 0
    params_b: float = 0.0
    weight_format: str = ""
    max_context: int = 0
    draft: DraftSpec | None = None
    source: str = ""

    def __post_init__(self) -> None:
        where = f"model {self.id!r}"
        if self.attention not in ("gqa", "mla"):
            raise UserError(f"{where}: attention={self.attention!r} must be gqa or mla")
        if not (1 <= self.layers <= 1000):
            raise UserError(f"{where}: layers={self.layers} must be between 1 and 1000")
        if not (1 <= self.attention_heads <= 4096):
            raise UserError(f"{where}: attention_heads={self.attention_heads} is not plausible")
        if not (0 < self.checkpoint_gb < 100_000):
            raise UserError(
                f"{where}: checkpoint size {self.checkpoint_gb} GB must be > 0 and < 100000"
            )
        if self.attention == "gqa":
            if not (1 <= self.kv_heads <= self.attention_heads):
                raise UserError(
                    f"{where}: kv_heads={self.kv_heads} must be between 1 and attention_heads"
                )
            if not (1 <= self.head_dim <= 4096):
                raise UserError(f"{where}: head_dim={self.head_dim} is not plausible")
            if not (0 <= self.swa_layers < self.layers):
                raise UserError(f"{where}: swa_layers={self.swa_layers} must be < layers")
        else:
            if not (1 <= self.kv_lora_rank <= 65536) or not (0 <= self.qk_rope_head_dim <= 4096):
                raise UserError(f"{where}: MLA needs kv_lora_rank and qk_rope_head_dim")
        if self.draft is not None and self.draft.in_checkpoint:
            if self.draft.size_gb >= self.checkpoint_gb:
                raise UserError(f"{where}: draft size must be smaller than the checkpoint")

    @property
    def target_weight_gb(self) -> float:
        """Bytes the target server loads (an in-checkpoint MTP layer belongs to the draft)."""
        if self.draft is not None and self.draft.in_checkpoint:
            return self.checkpoint_gb - self.draft.size_gb
        return self.checkpoint_gb

    def check_tp(self, tp: int) -> str | None:
        """Why SGLang cannot shard this model at `tp` (None when it can)."""
        if self.attention_heads % tp:
            return f"{self.attention_heads} attention heads do not divide by TP={tp}"
        if self.attention == "gqa":
            if self.kv_heads >= tp and self.kv_heads % tp:
                return f"{self.kv_heads} KV heads do not divide by TP={tp}"
            if self.kv_heads < tp and tp % self.kv_heads:
                return f"TP={tp} is not a multiple of {self.kv_heads} KV heads (replication)"
        return None


def _catalog_text(name: str) -> str:
    return resources.files(__package__).joinpath("catalog", name).read_text(encoding="utf-8")


def load_gpus() -> dict[str, GpuSpec]:
    data = tomllib.loads(_catalog_text("gpus.toml"))
    return {gid: GpuSpec(id=gid, **fields) for gid, fields in data["gpus"].items()}


def _model_from_table(mid: str, fields: dict[str, Any]) -> ModelSpec:
    fields = dict(fields)
    draft_fields = fields.pop("draft", None)
    draft = DraftSpec(**draft_fields) if draft_fields else None
    return ModelSpec(id=mid, draft=draft, **fields)


def load_models() -> dict[str, ModelSpec]:
    data = tomllib.loads(_catalog_text("models.toml"))
    return {mid: _model_from_table(mid, fields) for mid, fields in data["models"].items()}


def get_gpu(gpu_id: str) -> GpuSpec:
    gpus = load_gpus()
    if gpu_id not in gpus:
        raise UserError(
            f"unknown GPU {gpu_id!r}; known: {', '.join(gpus)} (or pass --gpu-mem-gib N "
            "for a custom GPU)"
        )
    return gpus[gpu_id]


def custom_gpu(mem_gib: float, base: GpuSpec | None = None) -> GpuSpec:
    if not (1 <= mem_gib <= 4096) or math.isnan(mem_gib):
        raise UserError(f"--gpu-mem-gib {mem_gib} is not a plausible GPU memory (1..4096 GiB)")
    if base is None:
        return GpuSpec(
            id=f"custom-{mem_gib:g}gib",
            name=f"custom GPU, {mem_gib:g} GiB",
            memory_mib=mem_gib * 1024,
            source="--gpu-mem-gib",
        )
    return replace(base, id=f"{base.id}@{mem_gib:g}gib", memory_mib=mem_gib * 1024)


def get_model(model_id: str) -> ModelSpec:
    models = load_models()
    if model_id not in models:
        raise UserError(
            f"unknown model {model_id!r}; known: {', '.join(models)} (or pass --model-config "
            "PATH/config.json)"
        )
    return models[model_id]


# ---------------------------------------------------------------- local HF config.json


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{what} {path} is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} is not a JSON object")
    return data


def _int_field(cfg: dict[str, Any], key: str, path: Path) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{path}: field {key!r} is missing or not a positive integer")
    return value


def checkpoint_gb_beside(config_path: Path) -> float | None:
    """metadata.total_size of model.safetensors.index.json next to config.json, in GB."""
    index = config_path.parent / "model.safetensors.index.json"
    if not index.exists():
        return None
    data = _read_json(index, "safetensors index")
    total = (data.get("metadata") or {}).get("total_size")
    if not isinstance(total, (int, float)) or total <= 0:
        raise UserError(f"{index}: metadata.total_size is missing; pass --checkpoint-gib")
    return float(total) / GB


def model_from_hf_config(
    config_path: str | Path,
    checkpoint_gib: float | None = None,
    draft_gib: float | None = None,
) -> ModelSpec:
    """A ModelSpec from a HF config.json (text_config is used for multimodal wrappers)."""
    path = Path(config_path)
    if path.is_dir():
        path = path / "config.json"
    cfg = _read_json(path, "model config")
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    layers = _int_field(cfg, "num_hidden_layers", path)
    heads = _int_field(cfg, "num_attention_heads", path)
    if checkpoint_gib is not None:
        if not (0 < checkpoint_gib < 100_000):
            raise UserError(f"--checkpoint-gib {checkpoint_gib} must be > 0 and < 100000")
        checkpoint_gb = checkpoint_gib * GIB / GB
    else:
        found = checkpoint_gb_beside(path)
        if found is None:
            raise UserError(
                f"no checkpoint size for {path}: pass --checkpoint-gib N or put "
                "model.safetensors.index.json beside it"
            )
        checkpoint_gb = found
    fields: dict[str, Any] = {
        "id": f"local:{path.parent.name or path.name}",
        "hf_id": str(cfg.get("_name_or_path") or path.parent),
        "layers": layers,
        "attention_heads": heads,
        "checkpoint_gb": checkpoint_gb,
        "max_context": int(cfg.get("max_position_embeddings") or 0),
        "source": str(path),
    }
    if cfg.get("kv_lora_rank"):
        fields["attention"] = "mla"
        fields["kv_lora_rank"] = _int_field(cfg, "kv_lora_rank", path)
        fields["qk_rope_head_dim"] = _int_field(cfg, "qk_rope_head_dim", path)
        if cfg.get("index_topk") or cfg.get("index_head_dim"):
            fields["dsa_index_head_dim"] = int(cfg.get("index_head_dim") or 128)
    else:
        fields["attention"] = "gqa"
        fields["kv_heads"] = int(cfg.get("num_key_value_heads") or heads)
        head_dim = cfg.get("head_dim")
        if not head_dim:
            hidden = _int_field(cfg, "hidden_size", path)
            head_dim = hidden // heads
        fields["head_dim"] = int(head_dim)
        layer_types = cfg.get("layer_types")
        if isinstance(layer_types, list) and cfg.get("sliding_window"):
            fields["swa_layers"] = sum(1 for t in layer_types if t == "sliding_attention")
            fields["sliding_window"] = int(cfg["sliding_window"])
    nextn = int(cfg.get("num_nextn_predict_layers") or 0)
    if nextn > 0:
        # The MTP layer ships in the checkpoint; without a figure assume one layer's share.
        size = draft_gib * GIB / GB if draft_gib else checkpoint_gb * nextn / (layers + nextn)
        fields["draft"] = DraftSpec(
            algorithm="NEXTN",
            model_id="",
            size_gb=size,
            layers=nextn,
            in_checkpoint=True,
            source="--draft-gib" if draft_gib else "est.: checkpoint share of the MTP layer",
        )
    return ModelSpec(**fields)


def eagle_draft_from_hf_config(
    config_path: str | Path, model_id: str, size_gib: float | None
) -> DraftSpec:
    """An EAGLE-3 draft from its config.json (+ safetensors index or --draft-gib)."""
    path = Path(config_path)
    if path.is_dir():
        path = path / "config.json"
    cfg = _read_json(path, "draft config")
    heads = _int_field(cfg, "num_attention_heads", path)
    head_dim = cfg.get("head_dim") or (_int_field(cfg, "hidden_size", path) // heads)
    size_gb = size_gib * GIB / GB if size_gib else None
    if size_gb is None:
        size_gb = checkpoint_gb_beside(path)
    if size_gb is None:
        weights = path.parent / "model.safetensors"
        if weights.exists():
            size_gb = weights.stat().st_size / GB
    if size_gb is None:
        raise UserError(f"no size for the draft at {path}: pass --draft-gib N")
    return DraftSpec(
        algorithm="EAGLE3",
        model_id=model_id or str(path.parent),
        size_gb=size_gb,
        layers=_int_field(cfg, "num_hidden_layers", path),
        kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        source=str(path),
    )
