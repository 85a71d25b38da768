"""``Matcher``: the per-generation state machine the runtime drives token by token."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from lexguide import _core
from lexguide.engine.grammar import Grammar
from lexguide.engine.lexparser import ParseState
from lexguide.engine.mask import MaskEngine
from lexguide.engine.tokenizer_info import TokenizerInfo
from lexguide.engine.unique_items import EMPTY, UniqueItems, UniqueState
from lexguide.errors import MatcherError, TokenRejected

__all__ = ["Matcher", "apply_mask", "engine_for", "fill_masks"]

MAX_FORCED_BYTES = 512
#: ``compute_mask(remaining)`` narrows the mask once fewer than ``c + max(BUDGET_MARGIN, c)``
#: tokens remain, ``c`` the tokens of a shortest completion (``kBudgetMargin`` in
#: ``csrc/engine/limits.h``)
BUDGET_MARGIN = 128
#: grammars whose mask caches a tokenizer keeps (the oldest are dropped past this)
MAX_ENGINES = 256


def engine_for(grammar: Grammar, info: TokenizerInfo) -> MaskEngine:
    """The shared :class:`MaskEngine` of (grammar, tokenizer), created on first use."""
    return info.attached(info._compiled, grammar, lambda: MaskEngine(grammar, info), MAX_ENGINES)


class Matcher:
    """Constrains one generation to a grammar.

    Cheap to create and to ``clone`` (the heavy tables live in a :class:`MaskEngine` shared per
    grammar and tokenizer). Not thread-safe per instance; use one matcher per sequence.

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
    are masked out; a lexeme that still cannot end (one started inside a token that also ended
    another lexeme) leaves an empty mask, a dead end that ``is_stopped()`` reports while
    ``is_accepting()`` is false.

    ``uniqueItems`` arrays of strings that the grammar marks (see
    :mod:`lexguide.engine.unique_items`): the matcher keeps the values of the items written so
    far, beside each history entry, and removes from every mask the tokens that would close an
    item equal to an earlier one; ``consume`` rejects them. Grammars without such arrays pay
    nothing for it.
    """

    def __init__(self, grammar: Grammar, tokenizer_info: TokenizerInfo) -> None:
        self.grammar = grammar
        self.info = tokenizer_info
        self._engine = engine_for(grammar, tokenizer_info)
        self._lp = self._engine.lp
        self._history: list[ParseState] = [self._lp.initial]
        self._tokens: list[int] = []  # consumed tokens (EOS excluded), for captures()
        self._stopped = False  # an EOS token was consumed
        # token budgets: global lexeme -> max_tokens; per history entry, the tokens that hold
        # bytes of the lexeme being read; budget-restricted masks by (state, count)
        self._budgets: dict[int, int] = self._lp.budgets
        self._counts: list[int] = [0]
        self._budget_masks: dict[tuple[ParseState, int], np.ndarray] = {}
        # uniqueItems enforced here: per history entry, the values of the open marked array
        self._unique: UniqueItems | None = self._engine.unique_items
        self._uniq: list[UniqueState] = [EMPTY]

    # -- state ----------------------------------------------------------------------------
    @property
    def state(self) -> ParseState:
        return self._history[-1]

    @property
    def n_consumed(self) -> int:
        """Tokens consumed since the start (or the last reset)."""
        return len(self._history) - 1 + (1 if self._stopped else 0)

    def is_accepting(self) -> bool:
        """Whether the output so far is a complete sentence (EOS allowed)."""
        return self._stopped or self._lp.is_accepting(self.state)

    def is_stopped(self) -> bool:
        """True once EOS was consumed or nothing but EOS can follow."""
        return self._stopped or not self._lp.can_continue(self.state)

    # -- masks ----------------------------------------------------------------------------
    def compute_mask(self, remaining: int | None = None) -> np.ndarray:
        """Allowed-token bitmask (read-only; cached per parse state, so usually microseconds).

        ``remaining``: tokens the caller can still generate, this one included (``max_tokens``
        and the context left). Once the budget is tight — fewer than ``c + max(128, c)`` tokens
        left, ``c`` the tokens of a shortest completion from here (:meth:`min_completion`) —
        the mask keeps only tokens after which a completion of at most ``remaining - 1``
        tokens is known, so the output ends complete whenever a completion fits in the
        budget it started with. When no completion is known, or none fits, the plain mask.
        Costs, per parse state met in that regime, one completion search per distinct state
        the allowed tokens lead to (memoised: states repeat, e.g. inside strings).
        """
        if self._stopped:
            return self.info.mask_from_ids(np.zeros(0, dtype=np.int64))
        if self._unique is not None and self._unique.may_mask(self._uniq[-1],
                                                              self._engine.quote_tokens):
            return self._unique_mask(remaining)
        if self._budgets:
            return self._budget_mask(self.state, self._counts[-1])
        if remaining is not None:
            mask = self._engine._core.budget_mask(self.state, max(0, int(remaining) - 1))
            if mask is not None:
                mask.flags.writeable = False
                return mask
        return self._engine.compute_mask(self.state)

    def _masked_in_python(self) -> bool:
        """Whether :meth:`compute_mask` does work the core's mask fill does not (a stopped
        matcher, token budgets, a ``uniqueItems`` item that a token could close)."""
        return self._stopped or bool(self._budgets) or (
            self._unique is not None
            and self._unique.may_mask(self._uniq[-1], self._engine.quote_tokens))

    def _without_duplicates(self, mask: np.ndarray) -> np.ndarray:
        """``mask`` less the tokens that close a ``uniqueItems`` item equal to an earlier one."""
        assert self._unique is not None
        unique, st, state = self._unique, self._uniq[-1], self.state
        bad = unique.duplicate_ids(st, state, mask, self._engine.quote_tokens)
        if unique.bounded:
            bad += unique.dead_ids(st, state, mask, self._engine)
        if not bad:
            mask.flags.writeable = False
            return mask
        out = mask & ~self.info.mask_from_ids(np.asarray(bad, dtype=np.int64))
        out.flags.writeable = False
        return out

    def _unique_mask(self, remaining: int | None) -> np.ndarray:
        """The mask where a token could close a duplicate item: the budget-aware mask without
        those tokens, or, when that leaves nothing (every short completion of the open item
        was a duplicate), the plain mask without them, so the output never stops in a dead
        end; the budget's promise is then lost by the few tokens a distinct item needs."""
        state = self.state
        if self._budgets:
            plain = self._budget_mask(state, self._counts[-1])
        else:
            plain = self._engine.compute_mask(state)
        if remaining is not None and not self._budgets:
            narrowed = self._engine._core.budget_mask(state, max(0, int(remaining) - 1))
            if narrowed is not None:
                out = self._without_duplicates(narrowed)
                if out.any():
                    return out
        return self._without_duplicates(plain)

    def min_completion(self) -> int | None:
        """Tokens of a completion from here (0 when complete): a shortest byte completion
        (read off the grammar's structure, replayed to check it; else a search of up to 64
        bytes) split into the longest vocabulary tokens — an upper bound on the fewest tokens
        that complete. None when no completion was found."""
        if self._stopped:
            return 0
        return self._engine._core.min_completion(self.state)

    def is_allowed(self, token_id: int) -> bool:
        mask = self.compute_mask()
        return bool((int(mask[token_id >> 5]) >> (token_id & 31)) & 1)

    def fill_mask(self, out: Any, row: int = 0) -> None:
        """Write the next mask into row ``row`` of ``out`` without allocating.

        ``out`` is a uint32/int32 numpy array or CPU torch tensor of shape ``(n_words,)`` or
        ``(rows, n_words)``, C-contiguous (``n_words = ceil(V / 32)``); other rows are untouched.
        """
        dst = _mask_rows(out, self.info.n_words)[row]
        if self._masked_in_python():
            dst[:] = self.compute_mask()
        else:
            self._engine.fill_mask(self.state, dst)

    def validate_tokens(self, token_ids) -> int:
        """How many of ``token_ids`` (a draft, e.g. from speculative decoding) the grammar
        accepts in sequence from here, without consuming them. Costs one consume per token."""
        probe = self.clone()
        n = 0
        for t in token_ids:
            try:
                probe.consume(t)
            except TokenRejected:
                break
            n += 1
        return n

    # -- advancing ------------------------------------------------------------------------
    def _next_state(self, token_id: int) -> ParseState | None:
        return self._engine.advance_token(self.state, token_id)

    def _next_budgeted(self, token_id: int) -> tuple[ParseState, int] | None:
        """As :meth:`_next_state`, plus the token count of the lexeme being read after it,
        with spent budgets applied to the state."""
        state, count = self.state, self._counts[-1]
        data = self.info.token_bytes[token_id]
        if self._engine.token_lexemes_of(token_id) or token_id in self.info.special_ids or not data:
            nxt = self._next_state(token_id)
            if nxt is None:
                return None
            return self._cap(nxt, count if nxt.pending and nxt == state else 0)
        lp, lexer = self._lp, self._lp.lexer
        same_lexeme = True  # every byte so far extended the lexeme that was being read
        for b in data:
            if same_lexeme and not (state.pending and lexer.next(state.lexer_state, b) != 0):
                same_lexeme = False
            nxt = lp.advance_byte(state, b)
            if nxt is None:
                return None
            state = nxt
        if not state.pending:
            return state, 0
        return self._cap(state, count + 1 if same_lexeme else 1)

    def _cap(self, state: ParseState, count: int) -> tuple[ParseState, int]:
        """``state`` where the lexemes whose budget ``count`` spent take no more bytes."""
        if not state.pending or state.lexer_state == 0:
            return state, count
        lexer = self._lp.lexer
        budgets = self._budgets
        lstate = state.lexer_state
        spent = [g for g in lexer.alive_lexemes(lstate) if budgets.get(g, count + 1) <= count]
        if not spent:
            return state, count
        return ParseState(state.set_id, lexer.without_extensions(lstate, spent), True), count

    def _budget_mask(self, state: ParseState, count: int) -> np.ndarray:
        """The mask of ``state`` when the next token is the last one of a budgeted lexeme:
        tokens that would stay inside it and leave it unable to end are removed."""
        mask = self._engine.compute_mask(state)
        lstate = state.lexer_state
        if lstate == 0:
            return mask
        count = count if state.pending else 0
        lexer = self._lp.lexer
        budgets = self._budgets
        if not any(budgets.get(g, count + 2) == count + 1 for g in lexer.alive_lexemes(lstate)):
            return mask
        key = (state, count)
        hit = self._budget_masks.get(key)
        if hit is not None:
            return hit
        ids, ends = self._engine.inside_end_states(lstate)
        bad = [
            s for s in np.unique(ends).tolist()
            if self._cap(ParseState(state.set_id, s, True), count + 1)[0].lexer_state == 0
        ]  # fmt: skip
        if bad:
            mask = mask & ~self.info.mask_from_ids(ids[np.isin(ends, bad)])
            mask.flags.writeable = False
        self._budget_masks[key] = mask
        return mask

    def consume(self, token_id: int) -> None:
        """Advance by one token. Raises ``TokenRejected`` (state unchanged) if not allowed."""
        token_id = int(token_id)
        if not 0 <= token_id < self.info.vocab_size:
            raise TokenRejected(token_id, f"token id {token_id} outside vocabulary")
        if self._stopped:
            raise TokenRejected(token_id, "the matcher has stopped (EOS was consumed)")
        if self._budgets:
            if not self.is_allowed(token_id):  # the mask holds the budget's look-ahead
                raise TokenRejected(token_id)
            step = self._next_budgeted(token_id)
            nxt, count = step if step is not None else (None, 0)
        else:
            nxt, count = self._next_state(token_id), 0
        if nxt is None:
            if token_id in self.info.eos_ids and self._lp.is_accepting(self.state):
                self._stopped = True
                return
            raise TokenRejected(token_id)
        if self._unique is not None:
            uniq = self._uniq[-1]
            data = self.info.token_bytes[token_id]
            if data and token_id not in self.info.special_ids:
                got = self._unique.step(uniq, self.state, data, nxt)
                if got is None:
                    raise TokenRejected(token_id, "closes an item equal to an earlier item of "
                                        "its uniqueItems array, or leaves one that can only "
                                        "become one")
                uniq = got
            self._uniq.append(uniq)
        self._history.append(nxt)
        self._tokens.append(token_id)
        self._counts.append(count)

    def consume_tokens(self, token_ids) -> None:
        """Consume several tokens; on rejection the ones before it stay consumed."""
        for t in token_ids:
            self.consume(t)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` consumed tokens (EOS included)."""
        if n < 0 or n > self.n_consumed:
            raise MatcherError(f"cannot roll back {n} tokens; {self.n_consumed} consumed")
        if n and self._stopped:
            self._stopped = False
            n -= 1
        if n:
            del self._history[-n:]
            del self._tokens[-n:]
            del self._counts[-n:]
            if self._unique is not None:
                del self._uniq[-n:]

    def reset(self) -> None:
        """Back to the start of the grammar."""
        del self._history[1:]
        del self._tokens[:]
        del self._counts[1:]
        del self._uniq[1:]
        self._stopped = False

    def clone(self) -> Matcher:
        """An independent copy sharing the compiled tables."""
        twin = Matcher.__new__(Matcher)
        twin.grammar, twin.info, twin._engine, twin._lp = self.grammar, self.info, self._engine, self._lp
        twin._history = list(self._history)
        twin._tokens = list(self._tokens)
        twin._stopped = self._stopped
        twin._budgets, twin._budget_masks = self._budgets, self._budget_masks
        twin._counts = list(self._counts)
        twin._unique, twin._uniq = self._unique, list(self._uniq)
        return twin

    # -- captures -------------------------------------------------------------------------
    def captures(self) -> list[tuple[str, bytes]]:
        """``(name, bytes)`` of the Lark ``capture``/``stop_capture`` rules in the output so
        far, ordered by end position (see :mod:`lexguide.engine.captures`).

        Once the output is complete (EOS consumed, or nothing but EOS can follow) the last
        lexeme counts as ended; before that, only rules a parse of the prefix has completed
        are reported. Computed on demand by replaying the consumed tokens (cost grows with the
        output); ``[]`` at once for grammars without captures.
        """
        lp = self._lp
        if not lp.ir.has_captures:
            return []
        from lexguide.engine.captures import captures

        pieces: list = []
        data = bytearray()
        for before, after, token_id in zip(self._history, self._history[1:], self._tokens):
            lexemes = self._engine.token_lexemes_of(token_id)
            if lexemes and lp.advance_token_lexeme(before, lexemes) is not None:
                pieces.append((lexemes, after))
            else:
                piece = self.info.token_bytes[token_id]
                pieces.append((piece, after))
                data += piece
        final = self._stopped or (lp.is_accepting(self.state) and not lp.can_continue(self.state))
        return captures(lp, bytes(data), pieces, final)

    # -- forcing --------------------------------------------------------------------------
    def forced_bytes(self) -> bytes:
        """Bytes the grammar forces next (empty if there is a choice, including EOS)."""
        lp = self._lp
        state = self.state
        out = bytearray()
        if self._stopped:
            return b""
        while len(out) < MAX_FORCED_BYTES:
            if lp.is_accepting(state):
                break
            if self._engine._special_ids(state) is not None:
                break
            allowed = lp.allowed_bytes(state)
            if allowed.sum() != 1:
                break
            only = int(np.argmax(allowed))
            out.append(only)
            state = lp.advance_byte(state, only)
        return bytes(out)

    def forced_tokens(self) -> list[int]:
        """Canonical tokens for the forced bytes, all of which the grammar allows in sequence.

        Uses the tokenizer's ``encode`` when ``TokenizerInfo`` has one (else longest match),
        and drops the last token, which might merge with the text that follows.
        """
        if self.grammar.ir.options.no_forcing:
            return []
        forced = self.forced_bytes()
        if not forced:
            return []
        tokens = self._tokenize_forced(forced)
        if not tokens:
            return []
        # the last token could be a prefix of a longer, better token once more text follows
        tokens = tokens[:-1]
        probe = self.clone()
        out = []
        for t in tokens:
            try:
                probe.consume(t)
            except TokenRejected:
                break
            out.append(t)
        return out

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
    :meth:`Matcher.compute_mask`); rows whose budget is tight are narrowed one by one, first.
    """
    if not matchers:
        return
    n_words = matchers[0].info.n_words
    rows = _mask_rows(out, n_words)
    if rows.shape[0] < len(matchers):
        raise ValueError(f"mask buffer has {rows.shape[0]} rows for {len(matchers)} matchers")
    batch, items, rest = [], [], []
    for i, m in enumerate(matchers):
        if m.info.n_words != n_words:
            raise ValueError("fill_masks: every matcher must use the same vocabulary size")
        if m._masked_in_python():
            rest.append(i)
            continue
        if remaining is not None and remaining[i] is not None:
            narrowed = m._engine._core.budget_mask(m.state, max(0, int(remaining[i]) - 1))
            if narrowed is not None:
                rows[i] = narrowed
                continue
        batch.append(i)
        items.append((m._engine._core, m.state))
    if items:
        threads = n_threads if n_threads is not None else (os.cpu_count() or 1)
        if len(batch) == len(matchers):
            _core.fill_masks(items, rows, max(1, threads))
        else:
            tmp = np.empty((len(items), n_words), dtype=np.uint32)
            _core.fill_masks(items, tmp, max(1, threads))
            rows[batch] = tmp
    for i in rest:
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
