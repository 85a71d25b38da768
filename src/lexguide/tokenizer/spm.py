"""SentencePiece-style BPE by scores (``tokenizer.ggml.model == "llama"``), spec §3.

Source: llama.cpp ``llm_tokenizer_spm_session``. Spaces become ``▁`` (U+2581); the text is split
into characters; every adjacent pair whose concatenation is a vocabulary entry is a candidate
with that entry's score; the **highest score** (ties: leftmost) is merged repeatedly, stale
candidates skipped. Final symbols that are not tokens become byte-fallback tokens ``<0xHH>``.

Speed-up (exact): the merge loop never joins two characters ``a``, ``b`` unless some vocabulary
entry contains ``ab``. So the text can be cut in front of every ``▁`` whose left neighbour ``c``
never precedes ``▁`` inside any entry; the chunks are then encoded independently and cached
(for Gemma 3 only ``>`` — from ``>▁</`` — and ``▁`` itself are such neighbours).
"""

from __future__ import annotations

import heapq
import re

from lexguide.errors import TokenizerError
from lexguide.tokenizer.pieces import CachedPieceEncoder
from lexguide.tokenizer.vocab import Vocab

__all__ = ["SentencePieceBPE"]

_SPACE = "\u2581"


class SentencePieceBPE(CachedPieceEncoder):
    """Encoder for one SPM-style vocabulary; pieces are ``▁``-delimited chunks."""

    def __init__(self, vocab: Vocab) -> None:
        self.text_to_id = vocab.text_to_id
        self.scores: list[float] = vocab.scores.tolist()
        self.byte_ids: list[int | None] = []
        for b in range(256):
            tid = vocab.text_to_id.get(f"<0x{b:02X}>")
            if tid is None and b < 0x80:  # llama.cpp falls back to the one-byte text itself
                tid = vocab.text_to_id.get(chr(b))
            self.byte_ids.append(tid)
        # characters that precede ▁ inside some entry: no cut is allowed after them
        joined = "\x00".join(vocab.texts)
        sticky = set(re.findall(f"(.)(?={_SPACE})", joined, flags=re.DOTALL))
        body = "".join(re.escape(c) for c in sorted(sticky))
        cut = f"(?<![{body}])(?={_SPACE})" if body else f"(?={_SPACE})"
        self._cut = re.compile(cut)
        self.cache: dict[str, tuple[int, ...]] = {}

    def split(self, text: str) -> list[str]:
        """Spaces → ``▁``, then cut into independently encodable chunks (see module doc)."""
        return [c for c in self._cut.split(text.replace(" ", _SPACE)) if c]

    def _encode_piece(self, chunk: str) -> tuple[int, ...]:
        text_to_id = self.text_to_id
        tid = text_to_id.get(chunk)
        n = len(chunk)
        if n == 1:
            return (tid,) if tid is not None else self._bytes_of(chunk)
        scores = self.scores
        sym = list(chunk)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        heap: list[tuple[float, int, int, int]] = []
        for i in range(n - 1):
            t = text_to_id.get(chunk[i:i + 2])
            if t is not None:
                heap.append((-scores[t], i, i + 1, 2))
        heapq.heapify(heap)
        pop = heapq.heappop
        push = heapq.heappush
        while heap:
            _, left, right, size = pop(heap)
            ls = sym[left]
            rs = sym[right]
            if not ls or not rs or len(ls) + len(rs) != size:
                continue  # stale: one side already merged into something else
            merged = ls + rs
            sym[left] = merged
            sym[right] = ""
            after = nxt[right]
            nxt[left] = after
            if after != -1:
                prv[after] = left
            before = prv[left]
            if before != -1:
                t = text_to_id.get(sym[before] + merged)
                if t is not None:
                    push(heap, (-scores[t], before, left, len(sym[before]) + len(merged)))
            if after != -1:
                t = text_to_id.get(merged + sym[after])
                if t is not None:
                    push(heap, (-scores[t], left, after, len(merged) + len(sym[after])))
        ids: list[int] = []
        i = 0
        while i != -1:
            s = sym[i]
            t = text_to_id.get(s)
            if t is not None:
                ids.append(t)
            else:
                ids.extend(self._bytes_of(s))
            i = nxt[i]
        return tuple(ids)

    def _bytes_of(self, symbol: str) -> tuple[int, ...]:
        out = []
        for b in symbol.encode("utf-8"):
            tid = self.byte_ids[b]
            if tid is None:
                raise TokenizerError(
                    f"cannot encode {symbol!r}: it is not in the vocabulary and byte 0x{b:02X} "
                    f"has no byte-fallback token '<0x{b:02X}>'"
                )
            out.append(tid)
        return tuple(out)
