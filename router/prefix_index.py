"""Per pool: an approximate index of what the server's prefix cache holds.

Every request routed to a pool inserts its prefix keys (conversation.PrefixKey). Each entry
accounts for the tokens its boundary adds to its parent (the previous key of the same request),
so the index's resident tokens approximate the unique tokens the server's radix cache holds.
Entries age out LRU when resident tokens pass the pool's KV capacity (max_total_num_tokens,
times a fill factor) and whenever the entry count passes ``max_entries``: memory is bounded
whatever the traffic.

Insertion touches a request's keys leaf first, root last, so a parent is always at least as
recent as its children and eviction removes leaves first, like SGLang's radix-tree LRU.

Corrections from what the servers report:
- ``TokenScale``: actual prompt_tokens / estimated prompt tokens (EWMA), so estimates made from
  text length converge to the real tokenizer's counts.
- ``PrefixIndex.observe(predicted, cached)``: when the server reports far fewer cached tokens
  than the index predicted, the server evicted sooner than we modelled (other traffic,
  running requests' KV): the fill factor shrinks; it recovers slowly on good predictions.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .conversation import PrefixKey

DEFAULT_MAX_ENTRIES = 50_000
MIN_FILL_FACTOR = 0.1


class TokenScale:
    """Real tokens per estimated token, learnt from the prompt_tokens the servers report."""

    def __init__(self, alpha: float = 0.1, lo: float = 0.25, hi: float = 4.0) -> None:
        self.value = 1.0
        self.samples = 0
        self._alpha = alpha
        self._lo = lo
        self._hi = hi

    def observe(self, estimated: int, actual: int) -> None:
        if estimated <= 0 or actual <= 0:
            return
        ratio = min(self._hi, max(self._lo, actual / estimated))
        # A faster start: the first samples move the value more.
        alpha = max(self._alpha, 1.0 / (self.samples + 1))
        self.value += alpha * (ratio - self.value)
        self.samples += 1


@dataclass(frozen=True, slots=True)
class IndexStats:
    entries: int
    max_entries: int
    resident_tokens: int
    capacity_tokens: int | None
    fill_factor: float
    evictions: int

    def as_dict(self) -> dict[str, object]:
        return {
            "entries": self.entries,
            "max_entries": self.max_entries,
            "cached_tokens_est": self.resident_tokens,
            "capacity_tokens": self.capacity_tokens,
            "fill_factor": round(self.fill_factor, 3),
            "evictions": self.evictions,
        }


class PrefixIndex:
    """LRU set of prefix digests, each holding the estimated tokens it adds to its parent."""

    def __init__(
        self,
        capacity_tokens: int | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        scale: TokenScale | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self._lru: OrderedDict[int, int] = OrderedDict()
        self._resident = 0  # in estimated units
        self.capacity_tokens = capacity_tokens
        self.max_entries = max_entries
        self.scale = scale or TokenScale()
        self.fill_factor = 1.0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def resident_tokens(self) -> int:
        """Estimated real tokens held (scaled)."""
        return int(self._resident * self.scale.value)

    def lookup(self, keys: Sequence[PrefixKey], start: int = 0) -> int:
        """Estimated real prompt tokens of the longest prefix of `keys` held here (0: none).

        Only prefixes ending at key index >= `start` count (a conversation's own turns, not a
        system prompt it shares with others)."""
        lru = self._lru
        for i in range(len(keys) - 1, start - 1, -1):
            key = keys[i]
            if key.digest in lru:
                return int(key.tokens * self.scale.value)
        return 0

    def insert(self, keys: Sequence[PrefixKey]) -> None:
        """Record that the server now holds every prefix of `keys` (after serving them)."""
        lru = self._lru
        for i in range(len(keys) - 1, -1, -1):
            key = keys[i]
            if key.digest in lru:
                lru.move_to_end(key.digest)
            else:
                own = key.tokens - (keys[i - 1].tokens if i else 0)
                lru[key.digest] = own
                self._resident += own
        self._evict()

    def set_capacity(self, capacity_tokens: int | None) -> None:
        self.capacity_tokens = capacity_tokens if capacity_tokens and capacity_tokens > 0 else None
        self._evict()

    def observe(self, predicted: int, cached: int) -> None:
        """Compare a prediction with the server's reported cached_tokens; adjust the fill factor."""
        if predicted <= 0:
            return
        ratio = cached / predicted
        if ratio < 0.5:
            self.fill_factor = max(MIN_FILL_FACTOR, self.fill_factor * 0.8)
            self._evict()
        elif ratio >= 0.9 and self.fill_factor < 1.0:
            self.fill_factor = min(1.0, self.fill_factor * 1.05)

    def clear(self) -> None:
        """Forget everything (the server restarted: its cache is empty)."""
        self._lru.clear()
        self._resident = 0

    def stats(self) -> IndexStats:
        return IndexStats(
            entries=len(self._lru),
            max_entries=self.max_entries,
            resident_tokens=self.resident_tokens,
            capacity_tokens=self.capacity_tokens,
            fill_factor=self.fill_factor,
            evictions=self.evictions,
        )

    def _evict(self) -> None:
        lru = self._lru
        limit: float | None = None
        if self.capacity_tokens:
            limit = self.capacity_tokens * self.fill_factor / self.scale.value
        while lru and (
            len(lru) > self.max_entries or (limit is not None and self._resident > limit)
        ):
            _, own = lru.popitem(last=False)
            self._resident -= own
            self.evictions += 1
