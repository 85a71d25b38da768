"""Byte-level BPE by merge rank (``tokenizer.ggml.model == "gpt2"``), spec §4.3.

Source: llama.cpp ``llm_tokenizer_bpe_session::tokenize``. Each pre-tokenizer piece is mapped
to the byte-level alphabet, split into characters, and the adjacent pair with the **lowest
merge rank** (ties: leftmost) is merged until no adjacent pair is in the merge table. Results
are cached per piece: natural text repeats its words, so most pieces cost one dict lookup.
"""

from __future__ import annotations

from lexguide.errors import TokenizerError
from lexguide.tokenizer.byte_level import BYTE_LEVEL_ENCODE_TABLE
from lexguide.tokenizer.pieces import CachedPieceEncoder, merge_by_priority
from lexguide.tokenizer.pretokenize import pre_type_ignores_merges, pretokenizer_for
from lexguide.tokenizer.vocab import Vocab

__all__ = ["ByteLevelBPE"]

_SCAN_LIMIT = 48  # longer words merge with a heap

def parse_merges(merges: list[str]) -> dict[tuple[str, str], int]:
    """``"left right"`` strings → rank dict; the split is at the first space at index ≥ 1."""
    ranks: dict[tuple[str, str], int] = {}
    for rank, merge in enumerate(merges):
        cut = merge.find(" ", 1)
        if cut < 0:
            raise TokenizerError(
                f"'tokenizer.ggml.merges'[{rank}] = {merge!r} has no space separating two parts"
            )
        ranks.setdefault((merge[:cut], merge[cut + 1:]), rank)
    return ranks


class ByteLevelBPE(CachedPieceEncoder):
    """Encoder for one gpt2-style vocabulary; pieces are pre-tokenizer splits."""

    def __init__(self, vocab: Vocab) -> None:
        if vocab.merges is None:
            raise TokenizerError("a byte-level BPE vocabulary needs 'tokenizer.ggml.merges'")
        self.ranks = parse_merges(vocab.merges)
        self.text_to_id = vocab.text_to_id
        self._split = pretokenizer_for(vocab.pre)
        self.ignore_merges = pre_type_ignores_merges(vocab.pre)
        self.cache: dict[str, tuple[int, ...]] = {}

    def split(self, text: str) -> list[str]:
        """Pre-tokenizer pieces of ``text`` (the regex list of ``tokenizer.ggml.pre``)."""
        return self._split(text)

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        word = piece.encode("utf-8").decode("latin-1").translate(BYTE_LEVEL_ENCODE_TABLE)
        text_to_id = self.text_to_id
        if self.ignore_merges:
            tid = text_to_id.get(word)
            if tid is not None:
                return (tid,)
        symbols = self._merge(word)
        ids: list[int] = []
        for sym in symbols:
            tid = text_to_id.get(sym)
            if tid is not None:
                ids.append(tid)
                continue
            for ch in sym:  # llama.cpp: fall back to the single-character tokens
                cid = text_to_id.get(ch)
                if cid is None:
                    raise TokenizerError(
                        f"cannot encode {piece!r}: the byte-level character {ch!r} has no token "
                        "in this vocabulary"
                    )
                ids.append(cid)
        return tuple(ids)

    def _merge(self, word: str) -> list[str]:
        """Lowest-rank-first merging (ties leftmost) of the characters of ``word``.

        Short words use a plain scan (O(n²) but tiny n); long ones a heap, O(n log n), so a
        megabyte without a single pre-tokenizer split (a base64 blob) still encodes in seconds.
        """
        symbols = list(word)
        n = len(symbols)
        if n < 2:
            return symbols
        if n > _SCAN_LIMIT:
            ranks = self.ranks
            return merge_by_priority(symbols, lambda a, b: ranks.get((a, b)))
        ranks = self.ranks
        get = ranks.get
        # rank of each adjacent pair; None where the pair is not a merge
        pair_ranks = [get((symbols[i], symbols[i + 1])) for i in range(n - 1)]
        while True:
            best = -1
            best_rank = 1 << 62
            for i, r in enumerate(pair_ranks):
                if r is not None and r < best_rank:
                    best_rank = r
                    best = i
            if best < 0:
                return symbols
            symbols[best] = symbols[best] + symbols[best + 1]
            del symbols[best + 1]
            del pair_ranks[best]
            if best > 0:
                pair_ranks[best - 1] = get((symbols[best - 1], symbols[best]))
            if best < len(symbols) - 1:
                pair_ranks[best] = get((symbols[best], symbols[best + 1]))
