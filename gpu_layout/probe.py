"""Read real free memory per GPU with torch (optional extra: pip install 'specswitch[probe]')."""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import load_gpus
from .memory import UNBALANCED_RATIO, unbalanced


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    total_gib: float
    free_gib: float


class ProbeUnavailable(Exception):
    """torch or a CUDA GPU is missing; the message says which."""


def read_gpus() -> list[GpuReading]:
    try:
        import torch  # optional, imported only here
    except ImportError:
        raise ProbeUnavailable(
            "torch is not installed, so GPU memory cannot be read here "
            "(pip install 'specswitch[probe]' on the GPU host); plan with --free-gib instead"
        ) from None
    if not torch.cuda.is_available():
        raise ProbeUnavailable("torch sees no CUDA GPU on this machine (no driver or no device)")
    readings = []
    for i in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(i)
        readings.append(
            GpuReading(i, torch.cuda.get_device_name(i), total / (1 << 30), free / (1 << 30))
        )
    return readings


def summarize(readings: list[GpuReading]) -> list[str]:
    lines = [
        f"GPU {r.index}: {r.name}: total {r.total_gib:.2f} GiB, free {r.free_gib:.2f} GiB, "
        f"in use {r.total_gib - r.free_gib:.2f} GiB"
        for r in readings
    ]
    if not readings:
        return lines
    free = [r.free_gib for r in readings]
    if unbalanced(free):
        lines.append(
            f"WARNING: free memory is unbalanced (min {min(free):.2f} < {UNBALANCED_RATIO:.0%} of "
            f"max {max(free):.2f} GiB): SGLang refuses to start TP across these GPUs "
            "('memory capacity is unbalanced')"
        )
    total = readings[0].total_gib
    best = min(load_gpus().values(), key=lambda g: abs(g.memory_gib - total))
    lines.append(
        f"closest catalog GPU: {best.id} ({best.memory_gib:.2f} GiB); plan with "
        f"--gpu {best.id} --gpus {len(readings)} --free-gib {','.join(f'{x:.2f}' for x in free)}"
    )
    return lines
