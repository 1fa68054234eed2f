"""KvTracker: the facade the router calls (describe, select, account, state)."""

from __future__ import annotations

from specswitch.router.affinity import AffinityConfig
from specswitch.router.kv_guard import GuardConfig
from specswitch.router.kv_tracker import KvTracker

SYSTEM = {"role": "system", "content": "context " * 3000}  # ~6000 tokens


def turn(n: int, conv: str = "c") -> dict:
    msgs = [SYSTEM, {"role": "user", "content": f"{conv} q0"}]
    for i in range(1, n):
        msgs += [
            {"role": "assistant", "content": f"a{i}"},
            {"role": "user", "content": f"{conv} q{i}"},
        ]
    return {"model": "m", "messages": msgs, "max_tokens": 100}


def test_follow_up_sticks_to_the_draining_pool_then_moves_at_the_deadline() -> None:
    kv = KvTracker()
    cfg = AffinityConfig(sticky_min_tokens=1000, drain_deadline_s=10)
    t1 = kv.describe("/v1/chat/completions", turn(1), {})
    kv.on_complete(kv.on_routed("g", "spec", t1), prompt_tokens=None, cached_tokens=None)
    t2 = kv.describe("/v1/chat/completions", turn(2), {})
    assert kv.drain_pool("g", t2, "baseline", "spec", 1.0, cfg).sticky
    assert not kv.drain_pool("g", t2, "baseline", "spec", 10.0, cfg).sticky
    other = kv.describe(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "new"}]}, {}
    )
    assert kv.drain_pool("g", other, "baseline", "spec", 1.0, cfg).reason == "new conversation"
    assert kv.counters.sticky == 1 and kv.counters.moved == 1


def test_inflight_kv_feeds_the_guard_and_completion_releases_it() -> None:
    kv = KvTracker()
    kv.set_server_info("g", "spec", max_total_num_tokens=7_000, max_running_requests=48)
    kv.set_server_info("g", "baseline", max_total_num_tokens=100_000)
    conv = kv.describe("/v1/chat/completions", turn(1), {})
    assert kv.admit_spec("g", conv, GuardConfig())
    ticket = kv.on_routed("g", "spec", conv)
    assert kv.pool_kv("g", "spec").est_used_tokens == conv.kv_need
    assert not kv.admit_spec("g", conv, GuardConfig())  # a second one would overflow spec
    v = kv.verdict("g", load=1, cfg=GuardConfig(), now=100.0)
    assert v.block_spec and kv.group_state("g")["guard"]["block_spec"]
    kv.on_complete(ticket, prompt_tokens=conv.prompt_tokens, cached_tokens=0)
    kv.on_complete(ticket, prompt_tokens=conv.prompt_tokens, cached_tokens=0)  # idempotent
    assert kv.pool_kv("g", "spec").est_used_tokens == 0
    assert kv.verdict("g", load=0, cfg=GuardConfig(), now=101.0).block_spec  # peak held...
    assert not kv.verdict("g", load=0, cfg=GuardConfig(), now=102.5).block_spec  # ...2 s
    state = kv.pool_state("g", "spec")
    assert state["capacity_tokens"] == 7_000 and state["prefix_index"]["entries"] == 2


def test_group_affinity_and_usage_corrections() -> None:
    kv = KvTracker()
    cfg = AffinityConfig(sticky_min_tokens=1000)
    t1 = kv.describe("/v1/chat/completions", turn(1), {})
    kv.on_complete(
        kv.on_routed("g1", "baseline", t1),
        prompt_tokens=int(t1.prompt_tokens * 1.2),
        cached_tokens=0,
    )
    t2 = kv.describe("/v1/chat/completions", turn(2), {})
    assert kv.group_for(t2, [("g0", 0), ("g1", 2)], cfg) == "g1"
    assert kv.group_for(t2, [("g0", 0), ("g1", 50)], cfg) is None
    assert kv.scale.value > 1.1
    kv.server_restarted("g1", "baseline")
    assert kv.group_for(t2, [("g0", 0), ("g1", 2)], cfg) is None
    kv.forget_group("g1")
    assert kv.summary()["routed"] == 1


def test_a_shared_system_prompt_does_not_make_a_follow_up() -> None:
    kv = KvTracker()
    cfg = AffinityConfig(sticky_min_tokens=1000, drain_deadline_s=10)
    kv.on_routed("g", "spec", kv.describe("/v1/chat/completions", turn(1, "a"), {}))
    other = kv.describe("/v1/chat/completions", turn(1, "b"), {})
    assert kv.cached("g", "spec", other) > 5000 and kv.cached("g", "spec", other, own=True) == 0
    assert kv.drain_pool("g", other, "baseline", "spec", 1.0, cfg).reason == "new conversation"
    assert kv.group_for(other, [("g", 0), ("h", 0)], cfg) is None


def test_token_scale_applies_to_the_estimated_prompt_not_the_output_reserve() -> None:
    kv = KvTracker()
    conv = kv.describe("/v1/chat/completions", {**turn(1), "max_tokens": 200}, {})
    for _ in range(30):  # the servers report 1.5x the estimated prompt tokens
        kv.scale.observe(conv.prompt_tokens, int(conv.prompt_tokens * 1.5))
    ticket = kv.on_routed("g", "spec", conv)
    want = int(conv.prompt_tokens * kv.scale.value) + 140  # 0.7 x 200, unscaled
    assert kv.pool_kv("g", "spec").est_used_tokens == want == ticket.kv_tokens
    kv.scale.observe(conv.prompt_tokens, conv.prompt_tokens * 3)  # the scale moves meanwhile
    kv.on_complete(ticket)
    assert kv.pool_kv("g", "spec").est_used_tokens == 0  # released exactly what it counted
    exact = kv.describe(
        "/generate", {"input_ids": list(range(300)), "sampling_params": {"max_new_tokens": 10}}, {}
    )
    assert exact.exact and kv.kv_tokens(exact) == 300 + 7
