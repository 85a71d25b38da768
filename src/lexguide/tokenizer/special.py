"""Special-token partitioning (spec §2, llama.cpp ``tokenizer_st_partition``), made fast.

llama.cpp takes the candidate tokens longest text first and, for each one, splits every remaining
text fragment around all its occurrences. Done literally that costs one substring search per
candidate (6,414 for Gemma 3) per call. We first find which candidates occur at all — one scan with
a trie-shaped regex in a lookahead, which reports the longest candidate starting at every
position — close that set under "is a prefix of" (a shorter candidate starting at the same place
is hidden by the longest one), and then run llama.cpp's loop over those few candidates only.
The result is identical to the literal algorithm.
"""

from __future__ import annotations

import re

__all__ = ["SpecialMatcher"]


def _trie_pattern(words: list[str]) -> str:
    """A regex matching exactly ``words``, longest alternative first, shaped as a prefix trie."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, dict]) -> str:
        alts = [re.escape(ch) + emit(node[ch]) for ch in sorted(k for k in node if k)]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(trie)


_C_SPACE = " \t\n\v\f\r"  # C isspace(), what llama.cpp strips for LSTRIP/RSTRIP


class SpecialMatcher:
    """Splits text around occurrences of candidate token texts (``(text, id)`` pairs).

    ``lstrip``/``rstrip`` hold the ids whose match also swallows ASCII whitespace on its
    left/right (llama.cpp's LSTRIP/RSTRIP attributes). The scanning regex is compiled on first
    use (~0.1–0.5 s for thousands of candidates).
    """

    def __init__(
        self,
        candidates: list[tuple[str, int]],
        lstrip: frozenset[int] = frozenset(),
        rstrip: frozenset[int] = frozenset(),
    ) -> None:
        self._ids = {text: tid for text, tid in candidates}
        self._lstrip = lstrip
        self._rstrip = rstrip
        self._rx: re.Pattern[str] | None = None

    def __bool__(self) -> bool:
        return bool(self._ids)

    def partition(self, text: str) -> list[str | int]:
        """Fragments of ``text`` in order: ``str`` for raw text, ``int`` for a matched token id.

        Pure; cost is one regex scan of ``text`` plus one split per candidate that occurs.
        """
        if not text:
            return []
        if not self._ids:
            return [text]
        rx = self._rx
        if rx is None:
            words = sorted(self._ids, key=len, reverse=True)
            rx = self._rx = re.compile(f"(?=({_trie_pattern(words)}))", re.DOTALL)
        found = {m.group(1) for m in rx.finditer(text)}
        if not found:
            return [text]
        ids = self._ids
        present = {w[:k] for w in found for k in range(1, len(w) + 1) if w[:k] in ids}
        frags: list[str | int] = [text]
        for word in sorted(present, key=lambda w: (-len(w), ids[w])):
            tid = ids[word]
            lstrip = tid in self._lstrip
            rstrip = tid in self._rstrip
            new: list[str | int] = []
            for frag in frags:
                if isinstance(frag, int) or word not in frag:
                    new.append(frag)
                    continue
                parts = frag.split(word)
                last = len(parts) - 1
                for j, part in enumerate(parts):
                    if j:
                        new.append(tid)
                    if rstrip and j:
                        part = part.lstrip(_C_SPACE)
                    if lstrip and j < last:
                        part = part.rstrip(_C_SPACE)
                    if part:
                        new.append(part)
            frags = new
        return frags
