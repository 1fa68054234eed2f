"""Prefix index: longest-prefix lookup, LRU against capacity, hard entry bound, corrections."""

from __future__ import annotations

import random

from specswitch.router.conversation import PrefixKey, identify
from specswitch.router.prefix_index import PrefixIndex, TokenScale


def keys(conv_id: int, turns: int, per_turn: int = 100) -> list[PrefixKey]:
    return [PrefixKey(conv_id * 1_000_003 + t, (t + 1) * per_turn) for t in range(turns)]


def test_lookup_returns_the_longest_held_prefix() -> None:
    idx = PrefixIndex()
    idx.insert(keys(1, 3))
    assert idx.lookup(keys(1, 5)) == 300
    assert idx.lookup(keys(1, 2)) == 200
    assert idx.lookup(keys(2, 3)) == 0
    assert idx.resident_tokens == 300


def test_shared_prefix_counts_once() -> None:
    idx = PrefixIndex()
    idx.insert(keys(1, 4))
    idx.insert(keys(1, 6))
    assert idx.resident_tokens == 600 and len(idx) == 6


def test_capacity_evicts_least_recent_conversation_leaves_first() -> None:
    idx = PrefixIndex(capacity_tokens=1000)
    idx.insert(keys(1, 5))  # 500 tokens
    idx.insert(keys(2, 5))  # 1000
    idx.insert(keys(3, 3))  # 1300 -> evicts 300 of conversation 1, leaves first
    assert idx.resident_tokens <= 1000
    assert idx.lookup(keys(1, 5)) == 200  # its root part survives
    assert idx.lookup(keys(2, 5)) == 500 and idx.lookup(keys(3, 3)) == 300


def test_touching_a_conversation_keeps_it() -> None:
    idx = PrefixIndex(capacity_tokens=1000)
    idx.insert(keys(1, 5))
    idx.insert(keys(2, 5))
    idx.insert(keys(1, 5))  # conversation 1 recent again
    idx.insert(keys(3, 5))
    assert idx.lookup(keys(1, 5)) == 500 and idx.lookup(keys(2, 5)) == 0


def test_entry_bound_holds_under_a_long_random_workload() -> None:
    rng = random.Random(7)
    idx = PrefixIndex(capacity_tokens=None, max_entries=2_000)
    live: dict[int, int] = {}
    for _ in range(20_000):
        conv = rng.randrange(5_000)
        live[conv] = live.get(conv, 0) + 1
        idx.insert(keys(conv, min(live[conv], 40), rng.randrange(10, 3000)))
        assert len(idx) <= 2_000
    assert idx.evictions > 0
    assert 0 <= idx.resident_tokens


def test_resident_tokens_match_the_entries_after_churn() -> None:
    rng = random.Random(3)
    idx = PrefixIndex(capacity_tokens=50_000, max_entries=500)
    for _ in range(5_000):
        conv = rng.randrange(300)
        idx.insert(keys(conv, rng.randrange(1, 20), 250))
        assert idx.resident_tokens <= 50_000
    assert idx._resident == sum(idx._lru.values())


def test_observe_shrinks_fill_factor_on_over_prediction_and_recovers() -> None:
    idx = PrefixIndex(capacity_tokens=1000)
    idx.insert(keys(1, 10))
    idx.observe(predicted=1000, cached=0)
    assert idx.fill_factor < 1.0 and idx.resident_tokens <= 800
    for _ in range(50):
        idx.observe(predicted=500, cached=500)
    assert idx.fill_factor == 1.0


def test_token_scale_learns_the_tokenizer_ratio() -> None:
    scale = TokenScale()
    for _ in range(40):
        scale.observe(estimated=1000, actual=1300)
    assert 1.25 < scale.value < 1.31
    idx = PrefixIndex(scale=scale)
    idx.insert(keys(1, 1))
    assert idx.lookup(keys(1, 1)) == int(100 * scale.value)


def test_real_conversations_through_the_index() -> None:
    idx = PrefixIndex(capacity_tokens=100_000)
    msgs = [{"role": "system", "content": "s" * 8000}, {"role": "user", "content": "q1"}]
    t1 = identify("/v1/chat/completions", {"messages": msgs})
    idx.insert(t1.keys)
    t2 = identify(
        "/v1/chat/completions",
        {
            "messages": [
                *msgs,
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"},
            ]
        },
    )
    assert idx.lookup(t2.keys) == t1.prompt_tokens
