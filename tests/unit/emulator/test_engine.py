"""The scheduler, driven step by step without a clock: batching, KV waiting, prefix cache."""

from __future__ import annotations

import dataclasses

import pytest
from specswitch.loadtest.emulator import load_profile
from specswitch.loadtest.emulator.engine import Engine, accept_probability
from specswitch.loadtest.emulator.request import Request, SamplingParams


def make_engine(pool: str = "baseline", **changes) -> Engine:
    prof = load_profile("seed-glm5-rtxpro6000")
    p = dataclasses.replace(prof.pool(pool), **changes)
    return Engine(pool, p, context_length=prof.context_length, seed=1, wake=lambda: None)


def run(engine: Engine, steps: int = 10_000) -> None:
    for _ in range(steps):
        step = engine.plan_step()
        if step is None:
            return
        engine.apply_step(step)


def req(rid: str, n_prompt: int = 32, max_new: int = 10, base: int = 0) -> Request:
    return Request(rid, list(range(base, base + n_prompt)), SamplingParams(max_new, 0.0))


def test_max_running_requests_caps_the_batch_and_queues_the_rest() -> None:
    eng = make_engine(max_running_requests=2)
    for i in range(5):
        eng.submit(req(f"r{i}", base=1000 * i))
    step = eng.plan_step()
    assert eng.num_running == 2 and eng.num_waiting == 3
    eng.apply_step(step)
    step = eng.plan_step()
    assert step.kind == "decode" and len(step.batch) == 2
    run(eng)
    assert not eng.has_work() and eng.stats.num_requests_total == 5
    assert eng.own_tokens == 0 and eng.reserved == 0


def test_requests_wait_while_the_kv_pool_is_full() -> None:
    eng = make_engine(kv_tokens=200)
    eng.submit(req("a", n_prompt=100, max_new=60))
    eng.submit(req("b", n_prompt=100, max_new=60, base=5000))
    eng.plan_step()
    assert eng.num_running == 1 and eng.num_waiting == 1  # b does not fit next to a
    run(eng)
    assert eng.stats.num_requests_total == 2
    assert eng.used_tokens <= eng.capacity


def test_prefix_cache_reports_cached_tokens_and_evicts_lru() -> None:
    eng = make_engine(kv_tokens=1000)
    first = req("a", n_prompt=200)
    eng.submit(first)
    run(eng)
    again = req("b", n_prompt=200)
    eng.submit(again)
    run(eng)
    assert first.cached_tokens == 0 and again.cached_tokens == 192  # whole 16-token blocks
    # unrelated big requests push the old prefix out (LRU)
    for i in range(3):
        eng.submit(req(f"x{i}", n_prompt=600, max_new=10, base=10_000 * (i + 1)))
        run(eng)
    late = req("c", n_prompt=200)
    eng.submit(late)
    run(eng)
    assert late.cached_tokens == 0
    assert eng.used_tokens <= eng.capacity


def test_chunked_prefill_splits_long_prompts() -> None:
    eng = make_engine(chunked_prefill_size=100)
    eng.submit(req("long", n_prompt=250))
    kinds = []
    for _ in range(4):
        step = eng.plan_step()
        kinds.append(step.kind)
        eng.apply_step(step)
    assert kinds == ["prefill", "prefill", "prefill", "decode"]


def test_accept_probability_gives_the_mean_length() -> None:
    for mean, draft in ((2.5, 4), (3.0, 4), (1.0, 4), (1.7, 2)):
        p = accept_probability(mean, draft)
        assert sum(p**i for i in range(draft)) == pytest.approx(mean)


def test_spec_request_meta_reports_accept_length() -> None:
    eng = make_engine("spec")
    r = req("s", max_new=5000)
    eng.submit(r)
    run(eng)
    meta = r.meta_info(eng.draft_tokens)
    assert meta["spec_accept_length"] == pytest.approx(2.5, rel=0.06)
    assert 1 <= meta["spec_verify_ct"] < 5000


def test_abort_frees_everything() -> None:
    eng = make_engine()
    r = req("a", max_new=1000)
    eng.submit(r)
    eng.apply_step(eng.plan_step())
    eng.apply_step(eng.plan_step())
    assert eng.abort("a") and r.finish_reason == {"type": "abort", "message": "Aborted"}
    assert eng.own_tokens == 0 and eng.reserved == 0 and not eng.has_work()
    q = req("q")
    eng.submit(q)
    assert eng.abort("q") and q.finish_reason["message"] == "Abort before prefill"


def test_pool_overflow_retracts_and_the_output_is_unchanged() -> None:
    # both admitted on the 0.7 new-token ratio, then they outgrow the pool together
    eng = make_engine(kv_tokens=400)
    a, b = req("a", n_prompt=40, max_new=200), req("b", n_prompt=40, max_new=200, base=500)
    eng.submit(a)
    eng.submit(b)
    eng.plan_step()
    assert eng.num_running == 2
    run(eng)
    assert eng.num_retracted >= 1
    assert a.finish_reason["type"] == b.finish_reason["type"] == "length"
    solo = make_engine(kv_tokens=10_000)
    ref = req("a", n_prompt=40, max_new=200)
    solo.submit(ref)
    run(solo)
    assert a.out_ids == ref.out_ids
    assert eng.own_tokens == 0 and eng.reserved == 0


def test_used_tokens_exclude_the_evictable_prefix_cache_as_sglang() -> None:
    eng = make_engine(kv_tokens=10_000)
    eng.submit(req("warm", n_prompt=320, max_new=16))
    run(eng)
    # idle and warm: the pool holds the cached tokens, SGLang's num_used is 0
    assert eng.pool_tokens == eng.evictable_tokens == 336  # 21 blocks of prompt + output
    assert eng.used_tokens == 0 and eng.token_usage == 0.0
    assert eng.stats.num_used_tokens == 0 and eng.stats.token_usage == 0.0
    # a running request counts its own tokens and the cached prefix it locks
    hit = req("hit", n_prompt=320, max_new=1000)
    eng.submit(hit)
    eng.apply_step(eng.plan_step())  # prefill
    assert hit.cached_tokens == 304  # 19 whole blocks; at least one prompt token recomputed
    assert eng.stats.cache_hit_rate == pytest.approx(304 / 320)
    assert eng.used_tokens == 320 + 1  # locked prefix + recomputed prompt + first token
    assert eng.evictable_tokens == 336 - 304
    for _ in range(40):  # a decode log interval: SGLang sets cache_hit_rate to 0 there
        eng.apply_step(eng.plan_step())
    assert eng.stats.cache_hit_rate == 0.0
    assert eng.stats.num_used_tokens == eng.used_tokens == 320 + 41
    # queued requests add their tokens to /get_load's num_tokens (waiting_tokens)
    eng.submit(req("queued", n_prompt=50, base=7000))
    assert eng.waiting_tokens == 50


def test_spec_accept_gauges_follow_sglang_definitions() -> None:
    eng = make_engine("spec")
    eng.submit(req("s", n_prompt=32, max_new=400))
    run(eng)
    stats = eng.stats
    assert stats.spec_accept_length == pytest.approx(2.5, rel=0.15)  # the seed profile's L
    # accepted tokens (bonus included) / (verify steps x speculative_num_draft_tokens)
    assert stats.spec_accept_rate == pytest.approx(stats.spec_accept_length / eng.draft_tokens)
