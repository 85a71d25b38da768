"""Shared skeleton of the two merge encoders: split text into pieces, encode each piece once.

Natural text repeats its words, so caching per piece makes most pieces cost one dict lookup.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Callable

__all__ = ["CachedPieceEncoder", "merge_by_priority"]

_CACHE_LIMIT = 200_000


class CachedPieceEncoder(ABC):
    """Subclasses provide ``split(text) -> list[str]`` and ``_encode_piece(piece) -> tuple``.

    The cache is a plain dict, cleared when it reaches 200k entries; concurrent use from
    several threads at worst recomputes an entry.
    """

    cache: dict[str, tuple[int, ...]]

    @abstractmethod
    def split(self, text: str) -> list[str]:
        """The pieces of ``text`` that are encoded independently (pre-tokenization)."""

    @abstractmethod
    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        """The token ids of one piece."""

    def encode_text(self, text: str, out: list[int]) -> None:
        """Append the ids of raw text ``text`` (no special tokens) to ``out`` (mutates ``out``)."""
        cache = self.cache
        get = cache.get
        extend = out.extend
        for piece in self.split(text):
            ids = get(piece)
            if ids is None:
                ids = self._encode_piece(piece)
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[piece] = ids
            extend(ids)


def merge_by_priority(sym: list[str], key: Callable[[str, str], float | None]) -> list[str]:
    """Merge adjacent symbols, best pair first, until no pair can merge; returns the symbols.

    ``key(left, right)`` is the pair's priority (lower merges first; ties: leftmost) or ``None``
    when the pair cannot merge. A heap over a linked list of symbols with stale entries skipped
    (llama.cpp ``llm_bigram_spm`` / ``llm_bigram_bpe``): O(n log n). Mutates ``sym``.
    """
    n = len(sym)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    heap = [(k, i, i + 1, 2) for i in range(n - 1) if (k := key(sym[i], sym[i + 1])) is not None]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        _, left, right, size = pop(heap)
        ls, rs = sym[left], sym[right]
        if not ls or not rs or len(ls) + len(rs) != size:
            continue  # stale: a side was merged into something else since the push
        merged = ls + rs
        sym[left] = merged
        sym[right] = ""
        after = nxt[right]
        nxt[left] = after
        before = prv[left]
        if before != -1 and (k := key(sym[before], merged)) is not None:
            push(heap, (k, before, left, len(sym[before]) + len(merged)))
        if after != -1:
            prv[after] = left
            if (k := key(merged, sym[after])) is not None:
                push(heap, (k, left, after, len(merged) + len(sym[after])))
    return [s for s in sym if s]
