"""Token masks for one grammar over one vocabulary: the parser's part of the computation.

For a parse state ``(set_id, lexer_state, pending)`` a token is allowed iff feeding its bytes
keeps the parse alive. The vocabulary walks (``walk.py``) say, per lexer state and without the
parser, which tokens stay inside the current lexeme and which end it at byte ``j`` with the
lexemes ``acc`` accepting. Here the parser decides each such group: ``finish_accepted`` gives
the next Earley set and lexer restart (memoised), and the group's continuation from that
restart is another cached walk node, collected recursively. The mask is the union of the
collected nodes' allowed tokens, plus the special tokens the parser expects, plus EOS iff the
grammar is complete.

Full masks are memoised per parse state (LRU, bounded in bytes): the canonical Earley sets make
repeated structure (list items, nested objects) hit the cache, and a hit costs one dict lookup.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from lexguide.engine.tokenizer_info import TokenizerInfo, set_bits
from lexguide.engine.walk import FirstBytes, WalkNode, walker_for
from lexguide.errors import GrammarError
from lexguide.grammar.earley import DEAD_SET
from lexguide.grammar.grammar import Grammar
from lexguide.grammar.lexparser import LexParser, ParseState

__all__ = ["MaskEngine"]

#: memory budget of one grammar's mask cache (a 262k-token mask is 32 KiB: 8,192 masks)
MASK_CACHE_BYTES = 256 << 20


_MAX_EMPTY_CHAIN = 64


class MaskEngine:
    """Mask computation for one grammar and one tokenizer; shared by all their matchers."""

    def __init__(self, grammar: Grammar, info: TokenizerInfo, *, max_cached_masks: int | None = None):
        self.grammar = grammar
        self.info = info
        self.lp: LexParser = grammar.lexparser
        self.lexer = self.lp.lexer
        self.walker = walker_for(self.lexer, info)
        self._eos = np.array(sorted(info.eos_ids), dtype=np.int64)
        self._masks: OrderedDict[ParseState, np.ndarray] = OrderedDict()
        if max_cached_masks is None:
            max_cached_masks = max(1024, MASK_CACHE_BYTES // (4 * info.n_words))
        self.max_cached_masks = max_cached_masks
        self.hits = 0
        self.misses = 0
        self._token_lexeme_ids = self._resolve_token_lexemes()

    # -- special-token lexemes ------------------------------------------------------------
    def _resolve_token_lexemes(self) -> dict[int, np.ndarray]:
        """Lexeme index -> sorted token ids it matches (validated against the vocabulary)."""
        info = self.info
        out: dict[int, np.ndarray] = {}
        for idx in self.lp.token_lexemes:
            ts = self.grammar.ir.lexemes[idx].token_set
            assert ts is not None
            ids: set[int] = set()
            for name in ts.names:
                tid = info.special_names.get(name)
                if tid is None:
                    avail = ", ".join(sorted(info.special_names)[:40])
                    raise GrammarError(
                        f"unknown special token: {name}; following special tokens are available: {avail}"
                    )
                ids.add(tid)
            for lo, hi in ts.ranges:
                if hi >= info.vocab_size:
                    raise GrammarError(f"Token range end too large: {hi} >= vocab size {info.vocab_size}")
                ids.update(range(lo, hi + 1))
            if ts.eos:  # the terminator of a Lark ``stop=""`` rule
                ids = set(info.eos_ids)
            elif ts.any:
                ids = set(range(info.vocab_size)) - info.eos_ids
            elif ts.negated:
                # EOS/EOG stay reserved for the end of the grammar (as llama.cpp does for !<[N]>)
                ids = set(range(info.vocab_size)) - ids - info.eos_ids
            out[idx] = np.array(sorted(ids), dtype=np.int64)
        return out

    def token_lexemes_of(self, token_id: int) -> frozenset[int]:
        return frozenset(i for i, ids in self._token_lexeme_ids.items() if _contains(ids, token_id))

    def _collect(self, node: WalkNode, set_id: int, out: list[WalkNode], path: tuple = ()) -> None:
        out.append(node)
        if len(path) > self.info.max_len + _MAX_EMPTY_CHAIN:
            self.lp.chain_limit_hits += 1  # endless empty lexemes: not followed (as in lexparser)
            return
        for acc, groups in node.by_acc.items():
            new_set, lstart = self.lp.finish_accepted(set_id, acc)
            if new_set == DEAD_SET:
                continue
            sub = path
            if self.lexer.accepting(lstart):
                # a lexeme of the restart matches the empty string: the same tokens may come
                # back at the same columns in the same states, a cycle of empty lexemes. (A
                # cycle through a restart that takes a byte cannot close: columns only grow.)
                key = (new_set, lstart, acc, tuple((c, _size(r)) for c, r in groups))
                if key in path:
                    continue
                sub = path + (key,)
            self._collect(self.walker.child(node, acc, lstart), new_set, out, sub)

    # -- public ---------------------------------------------------------------------------
    def compute_mask(self, state: ParseState) -> np.ndarray:
        """The allowed-token bitmask for ``state`` (read-only, cached). EOS iff accepting."""
        cached = self._masks.get(state)
        if cached is not None:
            self.hits += 1
            self._masks.move_to_end(state)
            return cached
        self.misses += 1
        set_id, lstate, _ = state
        info = self.info
        nodes: list[WalkNode] = []
        if lstate != 0:
            self._collect(self.walker.root(lstate), set_id, nodes)
        mask = np.zeros(info.n_words, dtype=np.uint32)
        small = [n.ids for n in nodes if n.is_small and len(n.ids)]
        for n in nodes:
            if not n.is_small:
                mask |= n.packed()
        specials = self._special_ids(state)
        if specials is not None:
            small.append(specials)
        if self.lp.is_accepting(state):
            small.append(self._eos)
        if small:
            ids = np.concatenate(small)
            set_bits(mask, ids)
        mask.flags.writeable = False
        self._masks[state] = mask
        if len(self._masks) > self.max_cached_masks:
            self._masks.popitem(last=False)
        return mask

    def _special_ids(self, state: ParseState) -> np.ndarray | None:
        if not self._token_lexeme_ids:
            return None
        expected = self.lp.expected_token_lexemes(state)
        parts = [ids for lex, ids in self._token_lexeme_ids.items() if lex in expected]
        return np.concatenate(parts) if parts else None

    @property
    def cache_info(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "masks": len(self._masks),
                "lexer_walks": len(self.walker.roots), "lexer_states": self.lexer.n_states,
                "parser_sets": self.lp.parser.n_sets}


def _contains(sorted_ids: np.ndarray, value: int) -> bool:
    i = np.searchsorted(sorted_ids, value)
    return bool(i < len(sorted_ids) and sorted_ids[i] == value)


def _size(rows) -> int | bytes:
    return rows.mask.tobytes() if isinstance(rows, FirstBytes) else len(rows)
