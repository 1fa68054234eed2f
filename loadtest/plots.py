"""PNG plots from report dicts (matplotlib is imported lazily, with the Agg backend)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from specswitch.errors import UserError

COLORS = {"spec": "#1f77b4", "baseline": "#ff7f0e", "auto": "#2ca02c", "envelope": "#444444"}


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError(
            "plots need matplotlib; install it with: pip install 'specswitch[plot]'"
        ) from None
    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    tmp.replace(path)
    return path


def _series(levels: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(lv["concurrency"], lv.get(key)) for lv in levels if lv.get(key) is not None]
    pts.sort()
    return [c for c, _ in pts], [v for _, v in pts]


def _log2_axis(ax: Any, xs: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.grid(True, which="major", alpha=0.3)


def plot_throughput(
    runs: dict[str, list[dict[str, Any]]],
    path: Path,
    title: str,
    envelope: list[dict[str, Any]] | None = None,
) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    allx: set[int] = set()
    for name, levels in runs.items():
        xs, ys = _series(levels, "output_tok_s")
        allx.update(xs)
        ax.plot(
            xs,
            ys,
            marker="o",
            label=f"{name}",
            color=COLORS.get(name),
            linewidth=2.5 if name == "auto" else 1.5,
        )
    if envelope:
        xs, ys = _series(envelope, "output_tok_s")
        ax.plot(xs, ys, linestyle="--", color=COLORS["envelope"], label="envelope (best forced)")
        ax.fill_between(
            xs,
            [0.95 * y for y in ys],
            ys,
            color=COLORS["envelope"],
            alpha=0.1,
            label="95% of envelope",
        )
    _log2_axis(ax, sorted(allx))
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("output tokens/s (simulated time)")
    ax.set_title(title)
    ax.legend()
    path = _save(fig, path)
    plt.close(fig)
    return path


def plot_latency(runs: dict[str, list[dict[str, Any]]], path: Path, title: str) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    allx: set[int] = set()
    for ax, metric, label in ((axes[0], "ttft_s", "TTFT (s)"), (axes[1], "tpot_s", "TPOT (ms)")):
        scale = 1000.0 if metric == "tpot_s" else 1.0
        for name, levels in runs.items():
            for q, style in (("p50", "-"), ("p99", ":")):
                xs, ys = _series(levels, f"{metric}_{q}")
                allx.update(xs)
                ax.plot(
                    xs,
                    [y * scale for y in ys],
                    linestyle=style,
                    marker="o",
                    markersize=3,
                    color=COLORS.get(name),
                    label=f"{name} {q}",
                )
        ax.set_ylabel(f"{label}, simulated time")
        ax.set_xlabel("concurrency")
        if metric == "ttft_s":
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    for ax in axes:
        _log2_axis(ax, sorted(allx))
    fig.suptitle(title)
    path = _save(fig, path)
    plt.close(fig)
    return path


def _smooth(values: list[float], half: int) -> list[float]:
    """Centred moving average over 2*half+1 bins (shorter at the edges)."""
    out = []
    for i in range(len(values)):
        window = values[max(0, i - half) : i + half + 1]
        out.append(sum(window) / len(window))
    return out


def plot_timeline(
    runs: dict[str, dict[str, Any]], path: Path, title: str, focus: str = "auto"
) -> Path:
    """runs: name -> {"timeline": [...], "summary": {...}}. Panels: load, mode and per-pool
    in-flight of the ``focus`` run, tok/s of every run."""
    plt = _plt()
    fig, axes = plt.subplots(
        4, 1, figsize=(11, 10), sharex=True, gridspec_kw={"height_ratios": [2, 0.6, 2, 2.4]}
    )
    main = runs.get(focus) or next(iter(runs.values()))
    tl = main["timeline"]
    t = [r["t_s"] for r in tl]
    axes[0].plot(t, [r.get("target", 0) for r in tl], color="#888888", label="target concurrency")
    if any("load" in r for r in tl):
        axes[0].plot(
            t, [r.get("load", 0) for r in tl], color=COLORS["auto"], label=f"router load ({focus})"
        )
    axes[0].set_ylabel("load")
    axes[0].legend(loc="upper right", fontsize=8)
    modes = [
        1 if r.get("mode") == "baseline" else 0 if r.get("mode") == "spec" else None for r in tl
    ]
    axes[1].step(
        t, [m if m is not None else float("nan") for m in modes], where="mid", color="black"
    )
    axes[1].set_yticks([0, 1])
    axes[1].set_yticklabels(["spec", "baseline"])
    axes[1].set_ylim(-0.3, 1.3)
    axes[1].set_ylabel(f"mode ({focus})")
    axes[2].plot(
        t,
        [r.get("inflight_spec", 0) for r in tl],
        color=COLORS["spec"],
        label="spec pool in flight",
    )
    axes[2].plot(
        t,
        [r.get("inflight_baseline", 0) for r in tl],
        color=COLORS["baseline"],
        label="baseline pool in flight",
    )
    axes[2].set_ylabel(f"in flight ({focus})")
    axes[2].legend(loc="upper right", fontsize=8)
    for name, run in runs.items():
        rt = run["timeline"]
        good = run.get("summary", {}).get("goodput_tok_s")
        label = f"{name}" + (f" (goodput {good:.0f} tok/s)" if good is not None else "")
        ts, ys = [r["t_s"] for r in rt], [r["tok_s"] for r in rt]
        axes[3].plot(ts, ys, color=COLORS.get(name), alpha=0.2, linewidth=0.8)
        axes[3].plot(
            ts,
            _smooth(ys, max(1, len(ys) // 30)),
            color=COLORS.get(name),
            label=label,
            linewidth=2 if name == focus else 1.2,
        )
    axes[3].set_ylabel("output tok/s (faint: per bin)")
    axes[3].set_xlabel("time (simulated s)")
    axes[3].legend(loc="upper right", fontsize=8)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    path = _save(fig, path)
    plt.close(fig)
    return path


def plot_goodput(summaries: dict[str, dict[str, Any]], path: Path, title: str) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    names = list(summaries)
    for ax, key, label in (
        (axes[0], "goodput_tok_s", "goodput (tok/s)"),
        (axes[1], "output_tok_s", "throughput (tok/s)"),
    ):
        vals = [summaries[n].get(key) or 0 for n in names]
        bars = ax.bar(names, vals, color=[COLORS.get(n, "gray") for n in names])
        for bar, v in zip(bars, vals, strict=True):
            ax.annotate(
                f"{v:.0f}",
                (bar.get_x() + bar.get_width() / 2, v),
                ha="center",
                va="bottom",
                fontsize=9,
            )
        ax.set_ylabel(label)
    fig.suptitle(title)
    path = _save(fig, path)
    plt.close(fig)
    return path
