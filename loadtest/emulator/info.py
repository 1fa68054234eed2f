"""Health, info, load and control endpoints of an emulated SGLang server."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aiohttp import web

from .httputil import BadRequest, json_response, read_json, validation_error
from .request import SamplingParams
from .server import SERVER, VERSION, EmulatedServer

HEALTH_TIMEOUT_S = 20.0
FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)


async def health(request: web.Request) -> web.Response:
    """200 when the server can generate: outputs are flowing, or a 1-token generation works."""
    server: EmulatedServer = request.app[SERVER]
    engine = server.engine
    if not engine.enabled:
        return web.Response(status=503)
    if engine.running and request.path != "/health_generate":
        return web.Response(status=200)
    try:
        req = server.new_request(
            f"HEALTH_CHECK_{uuid.uuid4().hex}", [1, 2, 3], SamplingParams(max_new_tokens=1)
        )
    except BadRequest:
        return web.Response(status=503)
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            async with server.guard(req):
                await server.wait_finished(req)
    except TimeoutError:
        return web.Response(status=503)
    return web.Response(status=200)


def model_info(server: EmulatedServer) -> dict[str, Any]:
    return {
        "model_path": server.profile.model_path,
        "tokenizer_path": server.profile.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": None,
        "architectures": None,
    }


def server_args(server: EmulatedServer) -> dict[str, Any]:
    pool = server.pool
    prof = server.profile
    return {
        "model_path": prof.model_path,
        "tokenizer_path": prof.model_path,
        "served_model_name": server.model_name,
        "host": server.host,
        "port": server.port,
        "tp_size": prof.tp_size,
        "dp_size": 1,
        "pp_size": 1,
        "mem_fraction_static": pool.mem_fraction_static,
        "max_running_requests": pool.max_running_requests,
        "max_total_tokens": None,
        "chunked_prefill_size": pool.chunked_prefill_size,
        "context_length": prof.context_length,
        "page_size": 1,
        "schedule_policy": "fcfs",
        "stream_interval": 1,
        "decode_log_interval": 40,
        "random_seed": prof.seed,
        "enable_metrics": server.settings.enable_metrics,
        "enable_cache_report": server.settings.enable_cache_report,
        "incremental_streaming_output": server.settings.incremental_streaming_output,
        "stream_response_default_include_usage": (
            server.settings.stream_response_default_include_usage
        ),
        "disable_radix_cache": False,
        "speculative_algorithm": pool.speculative_algorithm,
        "speculative_draft_model_path": pool.speculative_draft_model_path,
        "speculative_num_steps": pool.speculative_num_steps,
        "speculative_eagle_topk": pool.speculative_eagle_topk,
        "speculative_num_draft_tokens": pool.speculative_num_draft_tokens,
    }


def server_info(server: EmulatedServer) -> dict[str, Any]:
    engine = server.engine
    stats = engine.stats
    state: dict[str, Any] = {
        "last_gen_throughput": stats.gen_throughput,
        "memory_usage": {
            "weight": 0.0,
            "kvcache": 0.0,
            "token_capacity": engine.capacity,
            "graph": 0.0,
        },
        "effective_max_running_requests_per_dp": engine.max_running,
    }
    if engine.draft_tokens:
        state["avg_spec_accept_length"] = stats.spec_accept_length
    info = server_args(server)
    info.update(
        status="ready",
        max_total_num_tokens=engine.capacity,
        max_req_input_len=engine.max_req_input_len,
        version=VERSION,
        internal_states=[state],
        emulator={
            "profile": server.profile.name,
            "pool": server.pool_name,
            "speedup": server.speedup,
            "step_t0_ms": server.pool.step_t0_ms,
            "step_t1_ms": server.pool.step_t1_ms,
            "step_ms_table": [list(p) for p in server.pool.step_ms_table] or None,
            "accept_length": server.pool.accept_length,
            # times the shared GPU loop fell > 0.5 s behind its schedule (CPU-bound emulator)
            "lag_resets": server.gpu.lag_resets if server.gpu is not None else 0,
            "num_retracted_reqs": engine.num_retracted,
            # not in SGLang's API: the prefix cache behind the gauges (used_tokens excludes
            # the evictable part), and the lifetime hit rate (cached / prompt tokens)
            "prefix_cache_tokens": engine.cache.tokens,
            "evictable_tokens": engine.evictable_tokens,
            "prompt_cache_hit_rate": stats.cached_tokens_total / stats.prompt_tokens_total
            if stats.prompt_tokens_total
            else 0.0,
        },
    )
    return info


async def get_model_info(request: web.Request) -> web.Response:
    return json_response(model_info(request.app[SERVER]))


async def get_server_info(request: web.Request) -> web.Response:
    return json_response(server_info(request.app[SERVER]))


async def get_load(request: web.Request) -> web.Response:
    engine = request.app[SERVER].engine
    return json_response(
        [
            {
                "dp_rank": 0,
                "num_reqs": engine.num_running + engine.num_waiting,
                "num_waiting_reqs": engine.num_waiting,
                # SGLang: num_used (evictable cache excluded) + tokens of queued requests
                "num_tokens": engine.used_tokens + engine.waiting_tokens,
            }
        ]
    )


async def v1_loads(request: web.Request) -> web.Response:
    engine = request.app[SERVER].engine
    stats = engine.stats
    load: dict[str, Any] = {
        "dp_rank": 0,
        "num_running_reqs": engine.num_running,
        "num_waiting_reqs": engine.num_waiting,
        "num_used_tokens": engine.used_tokens,
        "max_total_num_tokens": engine.capacity,
        "token_usage": round(engine.token_usage, 4),
        "gen_throughput": round(stats.gen_throughput, 2),
        "cache_hit_rate": round(stats.cache_hit_rate, 4),
        "max_running_requests": engine.max_running,
        "speculative": None,
    }
    if engine.draft_tokens:
        load["speculative"] = {
            "accept_length": stats.spec_accept_length,
            "accept_rate": stats.spec_accept_rate,
        }
    return json_response({"loads": [load]})


async def abort_request(request: web.Request) -> web.Response:
    server: EmulatedServer = request.app[SERVER]
    try:
        data = await read_json(request)
    except BadRequest as exc:
        return validation_error(exc.message)
    if data.get("abort_all"):
        server.engine.abort_all()
    elif isinstance(data.get("rid"), str):
        server.engine.abort(data["rid"])
    return web.Response(status=200)


async def flush_cache(request: web.Request) -> web.Response:
    ok = request.app[SERVER].engine.flush_cache()
    return web.Response(text=FLUSH_TEXT, status=200 if ok else 400)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    for path in ("/get_model_info", "/model_info"):
        app.router.add_get(path, get_model_info)
    for path in ("/get_server_info", "/server_info"):
        app.router.add_get(path, get_server_info)
    app.router.add_get("/get_load", get_load)
    app.router.add_get("/v1/loads", v1_loads)
    app.router.add_post("/abort_request", abort_request)
    app.router.add_route("GET", "/flush_cache", flush_cache)
    app.router.add_route("POST", "/flush_cache", flush_cache)
