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

import re

from lexguide.errors import TokenizerError
from lexguide.tokenizer.pieces import CachedPieceEncoder, merge_by_priority
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
        get = text_to_id.get

        def key(left: str, right: str) -> float | None:
            t = get(left + right)
            return None if t is None else -scores[t]  # highest score first

        ids: list[int] = []
        for s in merge_by_priority(list(chunk), key):
            t = get(s)
            if t is not None:
                ids.append(t)
            else:
                ids.extend(self._bytes_of(s))
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
