"""``Matcher``: the per-generation state machine the runtime drives token by token.

The matcher lives in the compiled core (``csrc/engine/matcher.h``): history, rollback, clone,
token budgets, budget-aware masks, forced bytes and token validation are C++, and each method
here is one call into it. Only ``uniqueItems`` arrays (:mod:`lexguide.engine.unique_items`)
are kept in Python, on top of the core matcher, for the grammars that mark them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from lexguide import _core
from lexguide.engine.grammar import Grammar
from lexguide.engine.lexparser import ParseState
from lexguide.engine.mask import MaskEngine
from lexguide.engine.tokenizer_info import TokenizerInfo
from lexguide.engine.unique_budget import BUDGET_MARGIN as _UNIQUE_BUDGET_MARGIN
from lexguide.engine.unique_budget import DistinctBudget
from lexguide.engine.unique_items import EMPTY, UniqueItems, UniqueState
from lexguide.errors import TokenRejected

__all__ = ["Matcher", "apply_mask", "engine_for", "fill_masks"]

#: ``forced_bytes()`` stops after this many bytes (``kMaxForcedBytes`` in
#: ``csrc/engine/matcher.h``)
MAX_FORCED_BYTES: int = _core.MAX_FORCED_BYTES
#: ``compute_mask(remaining)`` narrows the mask once fewer than ``c + max(BUDGET_MARGIN, c)``
#: tokens remain, ``c`` the tokens of a shortest completion (``kBudgetMargin`` in
#: ``csrc/engine/limits.h``), one value with the ``uniqueItems`` budget's
BUDGET_MARGIN: int = _UNIQUE_BUDGET_MARGIN
#: grammars whose mask caches a tokenizer keeps (the oldest are dropped past this)
MAX_ENGINES = 256


def engine_for(grammar: Grammar, info: TokenizerInfo) -> MaskEngine:
    """The shared :class:`MaskEngine` of (grammar, tokenizer), created on first use."""
    return info.attached(info._compiled, grammar, lambda: MaskEngine(grammar, info), MAX_ENGINES)


class Matcher:
    """Constrains one generation to a grammar.

    Cheap to create and to ``clone`` (the heavy tables live in a :class:`MaskEngine` shared per
    grammar and tokenizer). Not thread-safe per instance; use one matcher per sequence (clones
    may run on different threads: the core releases the GIL while it consumes, masks, forces
    and validates).

    The state machine is the core's (``csrc/engine/matcher.h``): this class is a facade whose
    methods each make one core call, with no per-byte or per-state calls between Python and
    the core.

    ``compute_mask()`` returns a read-only ``uint32`` bitmask of ``ceil(V/32)`` words (bit
    ``t & 31`` of word ``t >> 5``): exactly the tokens whose bytes keep the output a valid
    prefix, plus EOS/EOG tokens iff the grammar is complete here. ``consume`` raises
    :class:`TokenRejected` on any other token and leaves the state unchanged.

    Token budgets (``max_tokens=N`` on a Lark lexeme rule): the matcher counts the tokens that
    contain bytes of the lexeme being read. Once ``N`` were spent, the lexeme takes no more
    bytes: the next token must end it at its first byte (or be EOS, or a special token, when
    the grammar allows them after it). The state it must end in is an ordinary parse state
    whose lexer state cannot extend that lexeme, so masks stay memoised per parse state. When
    one token is left, tokens that would stay inside the lexeme and leave it unable to end
    are masked out (memoised per parse state and count, shared by the grammar's matchers); a
    lexeme that still cannot end (one started inside a token that also ended another lexeme)
    leaves an empty mask, a dead end that ``is_stopped()`` reports while ``is_accepting()`` is
    false.

    ``uniqueItems`` arrays that the grammar marks (see :mod:`lexguide.engine.unique_items`)
    are the one part kept in Python, layered on the core matcher: the matcher keeps the values
    of the items written so far beside each history entry, removes from a mask the tokens that
    would close an item equal to an earlier one (or leave one that can only become one), and
    ``consume`` rejects them. For such grammars ``consume`` steps the tracker over the token's
    bytes in Python and masks are post-processed in Python while an item could be closed;
    grammars without marked arrays pay nothing for it and go straight to the core.
    """

    def __init__(self, grammar: Grammar, tokenizer_info: TokenizerInfo) -> None:
        self.grammar = grammar
        self.info = tokenizer_info
        self._engine = engine_for(grammar, tokenizer_info)
        self._lp = self._engine.lp
        self._core = _core.Matcher(self._engine._core)
        self._no_forcing = grammar.ir.options.no_forcing
        # uniqueItems, in Python on top of the core: per history entry, the tracker's state
        self._unique: UniqueItems | None = self._engine.unique_items
        self._uniq: list[UniqueState] = [EMPTY]

    # -- state ----------------------------------------------------------------------------
    @property
    def state(self) -> ParseState:
        """The parse state after the tokens consumed (EOS excluded)."""
        return ParseState(*self._core.state)

    @property
    def n_consumed(self) -> int:
        """Tokens consumed since the start (or the last reset), EOS included."""
        return self._core.n_consumed

    @property
    def _tokens(self) -> list[int]:
        """The consumed tokens (EOS excluded), a new list."""
        return self._core.tokens

    def is_accepting(self) -> bool:
        """Whether the output so far is a complete sentence (EOS allowed)."""
        return self._core.is_accepting()

    def is_stopped(self) -> bool:
        """True once EOS was consumed or nothing but EOS can follow."""
        return self._core.is_stopped()

    # -- masks ----------------------------------------------------------------------------
    def compute_mask(self, remaining: int | None = None) -> np.ndarray:
        """Allowed-token bitmask (read-only; cached per parse state, so usually microseconds).

        ``remaining``: tokens the caller can still generate, this one included (``max_tokens``
        and the context left). Once the budget is tight — fewer than ``c + max(128, c)`` tokens
        left, ``c`` the tokens of a shortest completion from here (:meth:`min_completion`) —
        the mask keeps only tokens after which a completion of at most ``remaining - 1``
        tokens is known, so the output ends complete whenever a completion fits in the
        budget it started with. When no completion is known, or none fits, the plain mask.
        Inside ``uniqueItems`` arrays the completion must also avoid the recorded items
        (:mod:`lexguide.engine.unique_budget`: a search over the core's completions, in the
        tight regime only). Grammars with token budgets use their budgets' mask instead.
        Costs, per parse state met in that regime, one completion search per distinct state
        the allowed tokens lead to (memoised: states repeat, e.g. inside strings). After EOS,
        all zeros.
        """
        if self._unique is not None and self._masked_in_python(remaining):
            return self._unique_mask(remaining)
        return self._core.compute_mask(remaining)

    def _masked_in_python(self, remaining: int | None = None) -> bool:
        """Whether :meth:`compute_mask` post-processes the core's mask in Python (a
        ``uniqueItems`` item that a token could close or leave dead, or a tight budget in a
        grammar with ``uniqueItems``: its completion may need a distinct item)."""
        if self._unique is None or self._core.eos_consumed:
            return False
        if self._unique.may_mask(self._uniq[-1], self._engine.quote_tokens):
            return True
        return remaining is not None and not self._core.has_budgets and \
            self._distinct().tight(self.state, remaining)

    def _distinct(self) -> DistinctBudget:
        """The grammar's :class:`DistinctBudget` (shared per mask engine, made on first use)."""
        got = self._engine.distinct_budget
        if got is None:
            assert self._unique is not None
            got = self._engine.distinct_budget = DistinctBudget(self._unique, self._engine)
        return got

    def _without_duplicates(self, mask: np.ndarray) -> np.ndarray:
        """``mask`` less the tokens that close a ``uniqueItems`` item equal to an earlier one."""
        assert self._unique is not None
        unique, st, state = self._unique, self._uniq[-1], self.state
        bad = unique.duplicate_ids(st, state, mask, self._engine.quote_tokens)
        if unique.bounded:
            bad += unique.dead_ids(st, state, mask, self._engine)
        if not bad:
            return mask
        out = mask & ~self.info.mask_from_ids(np.asarray(bad, dtype=np.int64))
        out.flags.writeable = False
        return out

    def _unique_mask(self, remaining: int | None) -> np.ndarray:
        """The mask of a grammar with ``uniqueItems`` arrays: the plain mask less the tokens
        that close a duplicate item (or leave one that can only become one); with a tight
        budget, narrowed to the tokens after which a completion avoiding recorded duplicates
        fits in ``remaining - 1`` tokens, or else overruns least
        (:class:`~lexguide.engine.unique_budget.DistinctBudget`). Never empty when some
        token continues without a duplicate, so the output never stops in a dead end."""
        core = self._core
        allowed = self._without_duplicates(core.compute_mask(None))
        if remaining is not None and not core.has_budgets:
            out = self._distinct().mask(self._uniq[-1], self.state, remaining, allowed)
            if out is not None:
                return out
        return allowed

    def min_completion(self) -> int | None:
        """Tokens of a completion from here (0 when complete): a shortest byte completion
        (read off the grammar's structure, replayed to check it; else a search of up to 64
        bytes) split into the longest vocabulary tokens — an upper bound on the fewest tokens
        that complete. None when no completion was found."""
        return self._core.min_completion()

    def is_allowed(self, token_id: int) -> bool:
        """Whether the next mask (``compute_mask()``) allows ``token_id``."""
        if self._unique is not None:
            if not 0 <= token_id < self.info.vocab_size:
                return False
            mask = self.compute_mask()
            return bool((int(mask[token_id >> 5]) >> (token_id & 31)) & 1)
        return self._core.is_allowed(token_id)

    def fill_mask(self, out: Any, row: int = 0) -> None:
        """Write the next mask into row ``row`` of ``out`` without allocating.

        ``out`` is a uint32/int32 numpy array or CPU torch tensor of shape ``(n_words,)`` or
        ``(rows, n_words)``, C-contiguous (``n_words = ceil(V / 32)``); other rows are untouched.
        """
        dst = _mask_rows(out, self.info.n_words)[row]
        if self._unique is not None and self._masked_in_python():
            dst[:] = self.compute_mask()
        else:
            self._core.fill_mask(dst)

    def validate_tokens(self, token_ids: Iterable[int]) -> int:
        """How many of ``token_ids`` (a draft, e.g. from speculative decoding) the grammar
        accepts in sequence from here, without consuming them (the state is unchanged after
        the call). Costs one consume per accepted token."""
        if self._unique is None:
            return self._core.validate_tokens(_as_sequence(token_ids))
        n = 0
        try:
            for t in token_ids:
                try:
                    self.consume(t)
                except TokenRejected:
                    break
                n += 1
        finally:
            self.rollback(n)
        return n

    # -- advancing ------------------------------------------------------------------------
    def consume(self, token_id: int) -> None:
        """Advance by one token. Raises ``TokenRejected`` (state unchanged) if not allowed."""
        if self._unique is None:
            self._core.consume(token_id)
        else:
            self._consume_unique(int(token_id))

    def _consume_unique(self, token_id: int) -> None:
        """:meth:`consume` with the ``uniqueItems`` tracker stepped over the token's bytes."""
        assert self._unique is not None
        core, uniq = self._core, self._uniq[-1]
        if core.has_budgets and 0 <= token_id < self.info.vocab_size and not core.eos_consumed \
                and not self.is_allowed(token_id):  # the mask without duplicates
            raise TokenRejected(token_id)
        before = self.state
        core.consume(token_id)
        if core.eos_consumed:
            return
        data = self.info.token_bytes[token_id]
        try:
            if data and token_id not in self.info.special_ids:
                got = self._unique.step(uniq, before, data, self.state)
                if got is None:
                    raise TokenRejected(token_id, "closes an item equal to an earlier item of "
                                        "its uniqueItems array, or leaves one that can only "
                                        "become one")
                uniq = got
        except BaseException:
            core.rollback(1)  # the state stays unchanged
            raise
        self._uniq.append(uniq)

    def consume_tokens(self, token_ids: Iterable[int]) -> None:
        """Consume several tokens; on rejection the ones before it stay consumed."""
        if self._unique is None:
            self._core.consume_tokens(_as_sequence(token_ids))
            return
        for t in token_ids:
            self.consume(t)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` consumed tokens (EOS included); ``MatcherError`` when ``n`` is
        negative or more than were consumed."""
        self._core.rollback(n)
        if self._unique is not None:
            del self._uniq[self._core.n_tokens + 1:]

    def reset(self) -> None:
        """Back to the start of the grammar."""
        self._core.reset()
        del self._uniq[1:]

    def clone(self) -> Matcher:
        """An independent copy sharing the compiled tables."""
        twin = Matcher.__new__(Matcher)
        twin.grammar, twin.info, twin._engine, twin._lp = self.grammar, self.info, self._engine, self._lp
        twin._no_forcing = self._no_forcing
        twin._core = self._core.clone()
        twin._unique, twin._uniq = self._unique, list(self._uniq)
        return twin

    # -- captures -------------------------------------------------------------------------
    def captures(self) -> list[tuple[str, bytes]]:
        """``(name, bytes)`` of the Lark ``capture``/``stop_capture`` rules in the output so
        far, ordered by end position (see :mod:`lexguide.engine.captures`).

        Once the output is complete (EOS consumed, or nothing but EOS can follow) the last
        lexeme counts as ended; before that, only rules a parse of the prefix has completed
        are reported. Computed on demand from the consumed tokens, their states and how special
        tokens were read (one core call for that history, one for the captures; cost grows with
        the output); ``[]`` at once for grammars without captures.
        """
        lp = self._lp
        if not lp.ir.has_captures:
            return []
        from lexguide.engine.captures import captures

        tokens, states, scans = self._core.history()
        token_bytes = self.info.token_bytes
        pieces: list = []
        data = bytearray()
        for token_id, after, lexemes in zip(tokens, states[1:], scans):
            if lexemes:  # a special token, read as these lexemes
                pieces.append((frozenset(lexemes), ParseState(*after)))
            else:
                piece = token_bytes[token_id]
                pieces.append((piece, ParseState(*after)))
                data += piece
        final = self._core.is_stopped() and self._core.is_accepting()
        return captures(lp, bytes(data), pieces, final)

    # -- forcing --------------------------------------------------------------------------
    def forced_bytes(self) -> bytes:
        """Bytes the grammar forces next (empty if there is a choice, including EOS, or a
        special token is allowed); at most ``MAX_FORCED_BYTES``."""
        return self._core.forced_bytes()

    def forced_tokens(self) -> list[int]:
        """Canonical tokens for the forced bytes, all of which the grammar allows in sequence.

        Uses the tokenizer's ``encode`` when ``TokenizerInfo`` has one (else longest match),
        and drops the last token, which might merge with the text that follows.
        """
        if self._no_forcing:
            return []
        forced = self._core.forced_bytes()
        if not forced:
            return []
        # the last token could be a prefix of a longer, better token once more text follows
        tokens = self._tokenize_forced(forced)[:-1]
        if not tokens:
            return []
        return tokens[:self.validate_tokens(tokens)]

    def _tokenize_forced(self, data: bytes) -> list[int]:
        info = self.info
        if info.encode is not None:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = data.decode("utf-8", errors="ignore")
                data = text.encode("utf-8")
            ids = list(info.encode(text))
            if b"".join(info.token_bytes[i] for i in ids) == data:
                return ids
        out, i = [], 0
        while i < len(data):
            for j in range(min(len(data), i + info.max_len), i, -1):
                t = info.ids_by_bytes.get(data[i:j])
                if t is not None:
                    out.append(t)
                    i = j
                    break
            else:
                return out
        return out

    def __repr__(self) -> str:
        return f"Matcher(consumed={self.n_consumed}, accepting={self.is_accepting()}, stopped={self.is_stopped()})"


def _as_sequence(token_ids: Iterable[int]) -> Sequence[int]:
    """``token_ids`` as the core takes them (a list, tuple or array is passed as it is)."""
    return token_ids if isinstance(token_ids, (list, tuple, np.ndarray)) else list(token_ids)


def _mask_rows(out: Any, n_words: int) -> np.ndarray:
    """``out`` (numpy or CPU torch, 32-bit ints) as a 2-D uint32 numpy view, checked."""
    if not isinstance(out, np.ndarray):
        if type(out).__module__.split(".")[0] != "torch":
            raise TypeError(f"mask buffer must be a numpy array or a torch tensor, not {type(out).__name__}")
        if out.device.type != "cpu":
            raise ValueError("mask buffer must be on the CPU")
        out = out.numpy()  # zero-copy view of the tensor's storage
    if out.dtype not in (np.uint32, np.int32):
        raise TypeError(f"mask buffer must hold 32-bit integers, not {out.dtype}")
    arr = out.view(np.uint32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n_words or not arr.flags.c_contiguous or not arr.flags.writeable:
        raise ValueError(f"mask buffer must be a writable C-contiguous (rows, {n_words}) array")
    return arr


def fill_masks(matchers: Sequence[Matcher], out: Any, n_threads: int | None = None,
               remaining: Sequence[int | None] | None = None) -> None:
    """Fill row ``i`` of ``out`` with the next mask of ``matchers[i]``, in one call.

    Matchers may have different grammars (one tokenizer: rows are ``ceil(V / 32)`` words).
    The core computes the masks with the GIL released, spread over ``n_threads`` threads
    (default: all cores). ``out`` is as for :meth:`Matcher.fill_mask`, with at least
    ``len(matchers)`` rows. ``remaining[i]``: tokens sequence ``i`` may still generate (see
    :meth:`Matcher.compute_mask`); rows whose budget is tight, token-budgeted rows and stopped
    rows are written one by one, first. Rows of matchers inside a ``uniqueItems`` item are
    then written in Python (:meth:`Matcher.compute_mask`).
    """
    if not matchers:
        return
    n_words = matchers[0].info.n_words
    rows = _mask_rows(out, n_words)
    if rows.shape[0] < len(matchers):
        raise ValueError(f"mask buffer has {rows.shape[0]} rows for {len(matchers)} matchers")
    cores = [None if m._masked_in_python(None if remaining is None else remaining[i])
             else m._core for i, m in enumerate(matchers)]
    threads = n_threads if n_threads is not None else (os.cpu_count() or 1)
    _core.fill_matcher_masks(cores, rows, max(1, threads),
                             None if remaining is None else list(remaining))
    for i, c in enumerate(cores):
        if c is None:
            rows[i] = matchers[i].compute_mask(None if remaining is None else remaining[i])


def mask_logits_rows(logits: Any, bitmask: Any, rows: Sequence[int] = ()) -> None:
    """Set the logits of disallowed tokens to ``-inf`` in place, in the core, for a batch.

    ``logits``: ``(B, V)`` float32, float16 or bfloat16 on the CPU with contiguous rows, a
    numpy array or a torch tensor (taken through DLPack: nothing is copied or converted).
    ``bitmask``: ``(R, n_words)`` C-contiguous 32-bit ints, row ``i`` for logits row
    ``rows[i]`` (``rows`` empty: R == B, in order); token ``t`` is allowed when bit ``t & 31``
    of word ``t >> 5`` is set, and columns past the bitmask are disallowed. Costs one pass over
    the R rows (a word of zeros sets 32 logits at once), with the GIL released. Raises
    ``ValueError`` for another dtype or layout, or a row index out of range.
    """
    _core.mask_logits(logits, bitmask, list(rows))


def apply_mask(logits: Any, mask: np.ndarray) -> Any:
    """Set logits of disallowed tokens to ``-inf`` in place; returns ``logits``.

    ``logits`` is a numpy array or a torch tensor whose last dimension is the vocabulary (it
    may be shorter than ``32 * len(mask)``, or longer: ids beyond the mask are disallowed).
    """
    n = logits.shape[-1]
    bits = np.unpackbits(np.ascontiguousarray(mask, dtype="<u4").view(np.uint8), bitorder="little")
    allowed = np.zeros(n, dtype=bool)
    k = min(n, len(bits))
    allowed[:k] = bits[:k].astype(bool)
    if isinstance(logits, np.ndarray):
        logits[..., ~allowed] = -np.inf
        return logits
    try:
        import torch
    except ImportError:  # pragma: no cover - only torch tensors reach here
        raise TypeError(f"apply_mask: unsupported logits type {type(logits).__name__}") from None
    if isinstance(logits, torch.Tensor):
        disallowed = torch.from_numpy(~allowed).to(logits.device)
        logits.masked_fill_(disallowed, float("-inf"))
        return logits
    raise TypeError(f"apply_mask: unsupported logits type {type(logits).__name__}")
