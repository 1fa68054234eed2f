"""The deterministic "language model": next token = function of all the tokens before it.

Each request keeps an O(1) rolling state: a 64-bit hash folded over every token so far
(prompt, then output). The next greedy token is a function of that state only, so the same
prompt gives the same text on either server, and a request whose input is the prompt plus
the first k output ids continues with exactly the remaining output ids.

With temperature > 0 the token also depends on the request's seed (a seeded request is
reproducible; an unseeded one gets a random seed).
"""

from __future__ import annotations

from .tokenizer import VOCAB_SIZE

_MASK = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MIX = 0x9E3779B97F4A7C15


def fold(state: int, token: int) -> int:
    """State after appending ``token``."""
    return ((state ^ (token + 0x51ED27)) * _FNV_PRIME) & _MASK


def initial_state(ids: list[int]) -> int:
    state = _FNV_OFFSET
    prime = _FNV_PRIME
    mask = _MASK
    for t in ids:
        state = ((state ^ (t + 0x51ED27)) * prime) & mask
    return state


def next_token(state: int, salt: int = 0) -> int:
    """The token that follows ``state``; ``salt`` is 0 for greedy, the seed mix otherwise."""
    x = ((state ^ salt) * _MIX) & _MASK
    x ^= x >> 31
    return (x >> 20) % VOCAB_SIZE


def seed_salt(seed: int) -> int:
    """Salt used for sampled (temperature > 0) requests with this seed (never 0)."""
    return (((seed & _MASK) + 1) * _MIX & _MASK) | 1
