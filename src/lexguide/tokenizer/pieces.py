"""Shared skeleton of the two merge encoders: split text into pieces, encode each piece once.

Natural text repeats its words, so caching per piece makes most pieces cost one dict lookup.
"""

from __future__ import annotations

__all__ = ["CachedPieceEncoder"]

_CACHE_LIMIT = 200_000


class CachedPieceEncoder:
    """Subclasses provide ``split(text) -> list[str]`` and ``_encode_piece(piece) -> tuple``.

    The cache is a plain dict, cleared when it reaches 200k entries; concurrent use from
    several threads at worst recomputes an entry.
    """

    cache: dict[str, tuple[int, ...]]

    def split(self, text: str) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _encode_piece(self, piece: str) -> tuple[int, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

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
