"""A radix-style prefix cache over token blocks, with LRU eviction.

Tokens are grouped in blocks of ``block_size``; a block's key chains the key of the block
before it, so a key stands for the whole prefix up to that block (a path in a radix tree).
A running request locks the blocks it matched; unlocked blocks are evictable, least recently
used first. Sizes are counted in tokens, against the server's KV pool.
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK_SIZE = 16


def block_keys(ids: list[int], limit: int, block_size: int = BLOCK_SIZE) -> list[int]:
    """Chained keys of the full blocks of ``ids[:limit]``."""
    keys: list[int] = []
    prev = 0
    for start in range(0, limit - block_size + 1, block_size):
        prev = hash((prev, *ids[start : start + block_size]))
        keys.append(prev)
    return keys


class PrefixCache:
    def __init__(self, block_size: int = BLOCK_SIZE) -> None:
        self.block_size = block_size
        self._refs: OrderedDict[int, int] = OrderedDict()  # key -> lock count, LRU order
        self._evictable = 0  # blocks with lock count 0

    @property
    def tokens(self) -> int:
        return len(self._refs) * self.block_size

    @property
    def evictable_tokens(self) -> int:
        return self._evictable * self.block_size

    def match_and_lock(self, ids: list[int]) -> list[int]:
        """Lock the longest cached prefix of ``ids`` (at least one token left uncached)."""
        refs = self._refs
        matched: list[int] = []
        size = self.block_size
        prev = 0
        for start in range(0, len(ids) - size, size):  # keys computed lazily: stop at a miss
            key = hash((prev, *ids[start : start + size]))
            prev = key
            count = refs.get(key)
            if count is None:
                break
            if count == 0:
                self._evictable -= 1
            refs[key] = count + 1
            refs.move_to_end(key)
            matched.append(key)
        return matched

    def release(self, locked: list[int], ids: list[int]) -> int:
        """Unlock ``locked`` and insert the full blocks of ``ids``; return tokens newly cached."""
        refs = self._refs
        for key in locked:
            count = refs.get(key)
            if count is None:
                continue
            refs[key] = count - 1
            if count == 1:
                self._evictable += 1
        added = 0
        for key in block_keys(ids, len(ids), self.block_size):
            if key in refs:
                refs.move_to_end(key)
            else:
                refs[key] = 0
                self._evictable += 1
                added += 1
        return added * self.block_size

    def evict(self, tokens: int) -> int:
        """Evict least recently used unlocked blocks worth at least ``tokens``; return freed."""
        freed = 0
        if tokens <= 0 or self._evictable == 0:
            return 0
        victims: list[int] = []
        for key, count in self._refs.items():
            if freed >= tokens or len(victims) >= self._evictable:
                break
            if count == 0:
                victims.append(key)
                freed += self.block_size
        for key in victims:
            del self._refs[key]
        self._evictable -= len(victims)
        return freed

    def flush(self) -> None:
        """Drop every unlocked block."""
        for key in [k for k, c in self._refs.items() if c == 0]:
            del self._refs[key]
        self._evictable = 0
