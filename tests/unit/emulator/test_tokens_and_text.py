"""Tokenizer and text model: deterministic, reversible for generated ids, O(1) rolling state."""

from __future__ import annotations

from specswitch.loadtest.emulator.textmodel import fold, initial_state, next_token, seed_salt
from specswitch.loadtest.emulator.tokenizer import (
    VOCAB,
    VOCAB_SIZE,
    count_tokens,
    decode,
    encode,
)


def test_counts_about_one_token_per_word_or_four_chars() -> None:
    assert count_tokens("the cat sat on the mat") == 6
    assert count_tokens("internationalization") == 5
    assert len(encode("hello world")) == count_tokens("hello world")
    assert encode("same text") == encode("same text")


def test_generated_ids_round_trip() -> None:
    ids = list(range(VOCAB_SIZE)) * 2
    assert encode(decode(ids)) == ids
    assert all(1 < len(w) <= 5 and w[0] == " " for w in VOCAB)


def test_rolling_state_equals_state_of_the_whole_prefix() -> None:
    ids = encode("a prompt of a few words")
    state = initial_state(ids)
    out = []
    for _ in range(20):
        tok = next_token(state)
        out.append(tok)
        state = fold(state, tok)
        assert state == initial_state(ids + out)
    assert next_token(initial_state(ids + out[:5])) == out[5]


def test_seed_changes_sampled_tokens_only() -> None:
    state = initial_state([1, 2, 3])
    assert next_token(state, 0) == next_token(state)
    picks = {next_token(state, seed_salt(s)) for s in range(20)}
    assert len(picks) > 5
