"""Redraw the PNGs of a saved report (`specswitch loadtest plot REPORT.json`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specswitch.errors import UserError

from .plots import plot_goodput, plot_latency, plot_throughput, plot_timeline


def replot(report: dict[str, Any], out: Path) -> list[Path]:
    kind = report.get("kind")
    prof = report.get("profile", "")
    if kind == "compare-sweep":
        runs = report["runs"]
        title = (
            f"{prof}: auto vs forced pools ({report.get('dataset')}, "
            f"{report.get('max_tokens')} tokens out)"
        )
        return [
            plot_throughput(runs, out / "throughput.png", title, report.get("envelope")),
            plot_latency(
                runs, out / "latency.png", f"{prof}: latency percentiles (p50 solid, p99 dotted)"
            ),
        ]
    if kind == "compare-trace":
        name = report.get("trace", "trace")
        runs = report["runs"]
        return [
            plot_timeline(
                runs, out / f"timeline-{name}.png", f"{prof}: {name} trace, auto vs forced pools"
            ),
            plot_goodput(
                {m: r["summary"] for m, r in runs.items()},
                out / f"goodput-{name}.png",
                f"{prof}: {name} trace, SLO {report.get('slo', {}).get('text', '')}",
            ),
        ]
    if kind == "sweep":
        label = report.get("label", "run")
        return [
            plot_throughput({label: report["levels"]}, out / "throughput.png", "sweep"),
            plot_latency({label: report["levels"]}, out / "latency.png", "latency"),
        ]
    if kind == "trace":
        label = report.get("label", "run")
        return [plot_timeline({label: report}, out / "timeline.png", "trace", focus=label)]
    raise UserError(f"not a specswitch loadtest report (kind {kind!r})")
