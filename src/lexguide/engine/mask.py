"""Token masks for one grammar over one vocabulary, computed by the compiled core.

For a parse state ``(set_id, lexer_state, pending)`` a token is allowed iff feeding its bytes
keeps the parse alive. The core walks the vocabulary's prefix tree from a lexer state without
the parser (the walk is cached per lexer state and shared by every grammar on the tokenizer),
then lets the parser decide each place where a lexeme ends inside a token; the mask is that
union plus the special tokens the parser expects, plus EOS iff the grammar is complete, and is
memoised per parse state (``csrc/engine/mask.h``). This class resolves the grammar's
special-token lexemes against the vocabulary and hands the rest to the core; the matchers of
:mod:`lexguide.engine.matcher` are core objects made over its ``_core``.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from lexguide import _core
from lexguide.engine.grammar import Grammar
from lexguide.engine.lexparser import LexParser, ParseState
from lexguide.engine.tokenizer_info import TokenizerInfo
from lexguide.engine.unique_budget import DistinctBudget
from lexguide.engine.unique_items import QuoteTokens, UniqueItems
from lexguide.errors import GrammarError

__all__ = ["MaskEngine"]

# tokenizer -> its QuoteTokens (uniqueItems), dropped with the tokenizer
_QUOTE_TOKENS: weakref.WeakKeyDictionary[TokenizerInfo, QuoteTokens] = weakref.WeakKeyDictionary()
_QUOTE_LOCK = threading.Lock()


class MaskEngine:
    """Mask computation for one grammar and one tokenizer; shared by all their matchers.

    Thread-safe. ``compute_mask`` costs a cache lookup and a copy when the state was seen; a new
    state costs the core's walks of the lexer states not seen before on this tokenizer.
    """

    def __init__(self, grammar: Grammar, info: TokenizerInfo) -> None:
        self.grammar = grammar
        self.info = info
        self.lp: LexParser = grammar.lexparser
        self.lexer = self.lp.lexer
        self._token_lexeme_ids = self._resolve_token_lexemes()
        self._core = _core.MaskEngine(
            self.lp._core, info._vocab,
            [(lex, ids.astype(np.uint32).tolist()) for lex, ids in self._token_lexeme_ids.items()],
        )
        marked = grammar.ir.unique_item_lexemes
        #: the matcher's ``uniqueItems`` tracker; None when the grammar marks no item lexeme
        self.unique_items: UniqueItems | None = (
            UniqueItems(self.lp, marked, grammar.ir.bounded_unique_items) if marked else None)
        self._quote_tokens: QuoteTokens | None = None
        #: budget-aware masks inside uniqueItems arrays, made by the first matcher that needs
        #: them (:class:`lexguide.engine.unique_budget.DistinctBudget`)
        self.distinct_budget: DistinctBudget | None = None

    @property
    def quote_tokens(self) -> QuoteTokens:
        """The vocabulary's tokens holding ``"`` (for ``uniqueItems``): built on first use,
        once per tokenizer (one pass over the vocabulary), shared by its grammars."""
        got = self._quote_tokens
        if got is None:
            info = self.info
            with _QUOTE_LOCK:
                got = _QUOTE_TOKENS.get(info)
                if got is None:
                    got = _QUOTE_TOKENS[info] = QuoteTokens(info.token_bytes, info.special_ids)
            self._quote_tokens = got
        return got

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
        if not self._token_lexeme_ids:
            return frozenset()
        return frozenset(self._core.token_lexemes_of(token_id))

    # -- public ---------------------------------------------------------------------------
    def compute_mask(self, state: ParseState) -> np.ndarray:
        """The allowed-token bitmask for ``state`` (a new read-only array). EOS iff accepting."""
        mask = self._core.mask(state)
        mask.flags.writeable = False
        return mask

    @property
    def cache_info(self) -> dict[str, int]:
        info = dict(self._core.stats)
        info["parser_sets"] = self.lp.parser.n_sets
        return info
