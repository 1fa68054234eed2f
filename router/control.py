"""The control plane's background tasks: policy tick, health checks, scrapes.

Each is a loop started by the client app's cleanup_ctx (see app.py) and cancelled on close.
They write group/pool state; the hot path only reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import orjson

from .context import RouterContext
from .policy import combined_load, decide
from .state import GroupState, PoolState, monotonic

# ------------------------------------------------------------------------ policy


def policy_tick(ctx: RouterContext, now: float) -> None:
    """Evaluate every group once: load signal, KV verdict, decision, switch."""
    policy = ctx.get_policy()
    fresh_s = ctx.config.scrape.fresh_s
    for group in ctx.registry.groups:
        reported, fresh = _reported_load(group, now, fresh_s)
        group.load = combined_load(group.inflight, reported, policy, fresh)
        verdict = ctx.selector.kv_verdict(group)
        target = decide(group.mode, group.load, policy, now - group.last_switch, verdict)
        if target == group.mode:
            continue
        old = group.mode
        drained = group.switch(target, now)
        if drained is not None:
            ctx.metrics.drain_by_pool[old].observe(drained)
        reason = "forced" if policy.mode != "auto" else ("kv" if verdict.reason else "load")
        ctx.log.info(
            "event=switch group=%s from=%s to=%s load=%d reason=%s draining=%d",
            group.name, old, target, group.load, reason, group.pools[old].inflight,
        )  # fmt: skip


def _reported_load(group: GroupState, now: float, fresh_s: float) -> tuple[int | None, bool]:
    total, fresh = 0, False
    for pool in (group.spec, group.baseline):
        if pool.load_report is not None and now - pool.load_report_at <= fresh_s:
            total += pool.load_report
            fresh = True
    return (total if fresh else None), fresh


async def policy_loop(ctx: RouterContext) -> None:
    while True:
        try:
            policy_tick(ctx, monotonic())
        except Exception:
            ctx.log.exception("event=policy_tick_error")
        await asyncio.sleep(ctx.get_policy().tick_s)


# ------------------------------------------------------------------------ health


async def check_pool(ctx: RouterContext, pool: PoolState) -> None:
    cfg = ctx.config.health
    session = ctx.control_session
    assert session is not None
    error = ""
    try:
        async with session.get(
            pool.url + cfg.path, timeout=aiohttp.ClientTimeout(total=cfg.timeout_s)
        ) as resp:
            await resp.read()
            if resp.status != 200:
                error = f"HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:200] or type(exc).__name__
    if not error:
        pool.oks += 1
        pool.fails = 0
        if not pool.healthy and pool.oks >= cfg.healthy_after:
            pool.healthy = True
            pool.last_error = ""
            ctx.log.info(
                "event=server_healthy group=%s pool=%s url=%s", pool.group_name, pool.pool, pool.url
            )
        return
    pool.fails += 1
    pool.oks = 0
    pool.last_error = error
    if pool.healthy and pool.fails >= cfg.unhealthy_after:
        pool.healthy = False
        ctx.log.warning(
            "event=server_unhealthy group=%s pool=%s url=%s reason=health_check error=%r",
            pool.group_name, pool.pool, pool.url, error,
        )  # fmt: skip


async def health_loop(ctx: RouterContext) -> None:
    while True:
        pools = [p for g in ctx.registry.groups for p in (g.spec, g.baseline)]
        await asyncio.gather(*(check_pool(ctx, p) for p in pools), return_exceptions=True)
        await asyncio.sleep(ctx.config.health.interval_s)


# ------------------------------------------------------------------------ scrape

_SERVER_KEYS = (
    "model_path", "version", "status", "tp_size", "mem_fraction_static", "max_running_requests",
    "max_total_num_tokens", "max_req_input_len", "speculative_algorithm",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
)  # fmt: skip
_STATE_KEYS = ("effective_max_running_requests_per_dp", "avg_spec_accept_length")
_GAUGES = {
    "sglang:num_running_reqs": "num_running_reqs",
    "sglang:num_queue_reqs": "num_queue_reqs",
    "sglang:num_used_tokens": "num_used_tokens",
    "sglang:token_usage": "token_usage",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:cache_hit_rate": "cache_hit_rate",
    "sglang:spec_accept_length": "spec_accept_length",
}


async def _get(ctx: RouterContext, url: str) -> tuple[int, bytes]:
    session = ctx.control_session
    assert session is not None
    timeout = aiohttp.ClientTimeout(total=ctx.config.scrape.timeout_s)
    async with session.get(url, timeout=timeout) as resp:
        return resp.status, await resp.read()


def apply_server_info(pool: PoolState, info: dict[str, Any]) -> None:
    server = {k: info[k] for k in _SERVER_KEYS if k in info}
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        server.update({k: states[0][k] for k in _STATE_KEYS if k in states[0]})
    pool.server = server
    if isinstance(server.get("max_total_num_tokens"), int):
        pool.kv["max_total_num_tokens"] = server["max_total_num_tokens"]


def apply_load(pool: PoolState, loads: Any, now: float) -> None:
    """/get_load: [{"dp_rank", "num_reqs" (running+waiting), "num_waiting_reqs", "num_tokens"}]."""
    if isinstance(loads, dict):  # 2026 /v1/loads shape
        loads = loads.get("loads", [])
    if not isinstance(loads, list):
        return
    reqs = tokens = waiting = 0
    for item in loads:
        if isinstance(item, dict):
            if "num_reqs" in item:
                reqs += int(item.get("num_reqs") or 0)
            else:
                reqs += int(item.get("num_running_reqs") or 0)
                reqs += int(item.get("num_waiting_reqs") or 0)
            waiting += int(item.get("num_waiting_reqs") or 0)
            tokens += int(item.get("num_tokens", item.get("num_used_tokens", 0)) or 0)
    pool.load_report = reqs
    pool.load_waiting = waiting
    pool.load_report_at = now
    pool.kv["used_tokens"] = tokens
    cap = pool.kv.get("max_total_num_tokens")
    if cap:
        pool.kv["token_usage"] = round(tokens / cap, 4)


def parse_metrics(text: str) -> dict[str, float]:
    """The sglang: gauges we show, summed over label sets (tp ranks)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("sglang:"):
            continue
        name_end = line.find("{")
        if name_end < 0:
            name_end = line.find(" ")
        key = _GAUGES.get(line[:name_end])
        if key is None:
            continue
        with contextlib.suppress(ValueError, IndexError):
            out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


async def scrape_pool(ctx: RouterContext, pool: PoolState, info_due: bool) -> None:
    cfg = ctx.config.scrape
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        if info_due or not pool.server:
            status, body = await _get(ctx, pool.url + "/get_server_info")
            if status == 404:
                status, body = await _get(ctx, pool.url + "/server_info")
            if status == 200:
                apply_server_info(pool, orjson.loads(body))
        status, body = await _get(ctx, pool.url + "/get_load")
        if status == 200:
            apply_load(pool, orjson.loads(body), monotonic())
        if cfg.metrics and not pool.metrics_missing:
            status, body = await _get(ctx, pool.url + "/metrics")
            if status == 404:
                pool.metrics_missing = True  # server started without --enable-metrics
            elif status == 200:
                pool.server_metrics = parse_metrics(body.decode("utf-8", "replace"))
                if "token_usage" in pool.server_metrics:
                    pool.kv["reported_token_usage"] = pool.server_metrics["token_usage"]


async def scrape_loop(ctx: RouterContext) -> None:
    next_info = 0.0
    while True:
        cfg = ctx.config.scrape
        now = monotonic()
        info_due = now >= next_info
        if info_due:
            next_info = now + cfg.info_interval_s
        pools = [p for g in ctx.registry.groups for p in (g.spec, g.baseline) if p.healthy]
        await asyncio.gather(
            *(scrape_pool(ctx, p, info_due) for p in pools), return_exceptions=True
        )
        await asyncio.sleep(cfg.interval_s)
