"""GET /metrics: SGLang's Prometheus metrics (sglang: prefix), only with --enable-metrics."""

from __future__ import annotations

from aiohttp import web

from .server import SERVER, EmulatedServer
from .stats import Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

GAUGES = (
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("num_used_tokens", "The number of used tokens."),
    ("token_usage", "The token usage."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("spec_accept_length", "The average acceptance length of speculative decoding."),
    ("spec_accept_rate", "The average acceptance rate of speculative decoding."),
)
COUNTERS = (
    ("prompt_tokens_total", "Number of prefill tokens processed."),
    ("generation_tokens_total", "Number of generation tokens processed."),
    ("cached_tokens_total", "Number of cached prompt tokens."),
    ("num_requests_total", "Number of requests processed."),
    ("num_aborted_requests_total", "Number of requests aborted."),
)
HISTOGRAMS = (
    ("time_to_first_token_seconds", "ttft", "Histogram of time to first token in seconds."),
    ("inter_token_latency_seconds", "itl", "Histogram of inter-token latency in seconds."),
    ("e2e_request_latency_seconds", "e2e", "Histogram of End-to-end request latency in seconds"),
)


def _num(value: float) -> str:
    return repr(float(value))


def render(server: EmulatedServer) -> str:
    stats = server.engine.stats
    model = server.model_name.replace("\\", "\\\\").replace('"', '\\"')
    labels = f'model_name="{model}",engine_type="unified",tp_rank="0",pp_rank="0"'
    lines: list[str] = []
    for name, help_text in GAUGES:
        lines += [
            f"# HELP sglang:{name} {help_text}",
            f"# TYPE sglang:{name} gauge",
            f"sglang:{name}{{{labels}}} {_num(getattr(stats, name))}",
        ]
    for name, help_text in COUNTERS:
        base = name[: -len("_total")]
        lines += [
            f"# HELP sglang:{name} {help_text}",
            f"# TYPE sglang:{name} counter",
            f"sglang:{name}{{{labels}}} {_num(getattr(stats, base + '_total'))}",
        ]
    for name, attr, help_text in HISTOGRAMS:
        hist: Histogram = getattr(stats, attr)
        lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} histogram"]
        for bound, count in hist.cumulative():
            lines.append(f'sglang:{name}_bucket{{{labels},le="{bound}"}} {_num(count)}')
        lines.append(f"sglang:{name}_sum{{{labels}}} {_num(hist.sum)}")
        lines.append(f"sglang:{name}_count{{{labels}}} {_num(hist.count)}")
    return "\n".join(lines) + "\n"


async def metrics(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    return web.Response(body=render(server).encode(), headers={"Content-Type": CONTENT_TYPE})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/metrics", metrics)
