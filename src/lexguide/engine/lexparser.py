"""The lexer/parser pair of one grammar, computed by the compiled core (``lexguide._core``).

The grammar IR is lowered once: every lexeme's regex is already a node of the core's store (the
current generation's, :mod:`lexguide.regex.nodes`), rules become flat arrays, and the core builds
the Earley parser and shares one lazy lexer DFA between all grammars of the process
(``csrc/engine/lexparser.h`` describes the semantics: greedy and lazy lexemes, ``%ignore``
skips per lexeme class, lexemes matching the empty string).

A parse state is ``ParseState(set_id, lexer_state, pending)``: three ints, so states hash
cheaply and masks are memoised on them. This module keeps the Python face of the core that
captures and the engine's matcher use; none of it runs per vocabulary token.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from lexguide import _core
from lexguide.grammar.ir import GrammarIR
from lexguide.regex import nodes as rx

__all__ = ["DEAD_SET", "LexParser", "ParseState"]

DEAD_SET = -1
# How the lexer was (re)started: the skip rules depend on it.
_INITIAL, _NORMAL, _AFTER_SKIP = 0, 1, 2

class ParseState(NamedTuple):
    set_id: int
    lexer_state: int
    pending: bool


class _LexerView:
    """The shared lexer DFA as seen by one grammar (states are global ints)."""

    __slots__ = ("_c",)

    def __init__(self, core: _core.LexParser) -> None:
        self._c = core

    def next(self, state: int, byte: int) -> int:
        return self._c.lexer_next(state, byte)

    def accepting(self, state: int) -> tuple[int, ...]:
        """Global lexemes whose regex matches the bytes read to reach ``state``."""
        return tuple(self._c.lexer_accepting(state))

    def accepts_lazy(self, state: int) -> bool:
        return self._c.lexer_accepts_lazy(state)

    def alive_lexemes(self, state: int) -> tuple[int, ...]:
        return tuple(self._c.lexer_alive(state))

    def without_extensions(self, state: int, lexemes) -> int:
        return self._c.lexer_without_extensions(state, sorted(lexemes))

    def can_extend(self, state: int) -> bool:
        return state != 0 and self._c.lexer_can_extend(state)

    @property
    def n_states(self) -> int:
        return self._c.lexer_n_states


class _ParserView:
    """The grammar's Earley parser (canonical sets by id)."""

    __slots__ = ("_c", "_expected")

    def __init__(self, core: _core.LexParser) -> None:
        self._c = core
        self._expected: dict[int, frozenset[int]] = {}

    def scan(self, set_id: int, lexemes) -> int:
        return self._c.scan(set_id, list(lexemes))

    def expected(self, set_id: int) -> frozenset[int]:
        hit = self._expected.get(set_id)
        if hit is None:
            hit = self._expected[set_id] = frozenset(self._c.expected(set_id))
        return hit

    def is_accepting(self, set_id: int) -> bool:
        return self._c.set_accepting(set_id)

    @property
    def n_sets(self) -> int:
        return self._c.n_sets



class LexParser:
    """Byte-level acceptance for one grammar; shared (thread-safe) by every matcher.

    Lowers ``ir`` into the core at construction (the rules; the lexemes' regexes are nodes of
    ``store``, the generation the IR was built in, already; default the current one). Raises ``LimitExceeded`` when a core bound is hit.
    """

    def __init__(self, ir: GrammarIR, store: _core.Generation | None = None) -> None:
        self.ir = ir
        n = len(ir.lexemes)
        self.n_lexemes = n
        rxs = [lx.rx for lx in ir.lexemes] + [s for s in ir.skips if s is not None]
        # the regexes are nodes of `store` (the grammar's generation; default the current one)
        gen, ids = store or rx.store(), rxs
        lexemes = [
            (ids[i], lx.lexeme_class, lx.lazy, -1 if lx.max_tokens is None else lx.max_tokens,
             lx.token_set is not None, lx.token_set is not None and lx.token_set.eos)
            for i, lx in enumerate(ir.lexemes)
        ]
        skip_ids = iter(ids[n:])
        skips = [next(skip_ids) if s is not None else -1 for s in ir.skips]
        rules = ir.rules
        #: the generation (regex store and lexer DFA) the grammar was lowered into
        self.store = gen
        self._core = _core.LexParser(
            gen,
            len(ir.nonterminals), ir.start, rules,
            lexemes, skips, ir.options.allow_initial_skip, ir.options.ignore_once,
        )
        self.lexer = _LexerView(self._core)
        self.parser = _ParserView(self._core)
        self.token_lexemes = frozenset(i for i, lx in enumerate(ir.lexemes) if lx.token_set is not None)
        self.eos_lexemes = frozenset(self._core.eos_lexemes)
        #: global lexeme -> its ``max_tokens`` (enforced per token by the engine's Matcher)
        self.budgets: dict[int, int] = dict(self._core.budgets)
        self.initial = ParseState(*self._core.initial)
        self._locals: dict[int, tuple[int, ...]] = {}
        self._capture_table: tuple[_core.CaptureTable, tuple[str, ...]] | None = None

    # -- lexemes ----------------------------------------------------------------------------
    def locals_of(self, global_lexeme: int) -> tuple[int, ...]:
        """The grammar's lexeme indices (skips: ``n_lexemes + k``) of a global lexeme."""
        hit = self._locals.get(global_lexeme)
        if hit is None:
            hit = self._locals[global_lexeme] = tuple(self._core.locals_of(global_lexeme))
        return hit

    def is_skip(self, local: int) -> bool:
        return local >= self.n_lexemes

    def capture_table(self) -> tuple[_core.CaptureTable, tuple[str, ...]]:
        """The core's capture marks of the grammar and the capture names its ids index (see
        :mod:`lexguide.engine.captures`); lowered on first use, so grammars without captures
        do not pay for them. Raises ``CoreGrammarError`` if the IR does not fit the core's
        grammar."""
        got = self._capture_table
        if got is None:
            ir = self.ir
            names = sorted({name for _, name in ir.captures}
                           | {x for lx in ir.lexemes for x in (lx.capture, lx.stop_capture) if x is not None})
            ids = {name: i for i, name in enumerate(names)}

            def name_id(name: str | None) -> int:
                return -1 if name is None else ids[name]

            by_nt = dict(ir.captures)
            nt_names = [name_id(by_nt.get(nt)) for nt in range(len(ir.nonterminals))]
            lexemes = []
            for lx in ir.lexemes:
                tail = lx.stop_rx if lx.stop_rx is not None else lx.suffix_rx
                body = lx.body_rx if tail is not None and lx.body_rx is not None else None
                lexemes.append((name_id(lx.capture), name_id(lx.stop_capture),
                                -1 if body is None else body, -1 if body is None else tail))
            got = self._capture_table = (_core.CaptureTable(self._core, nt_names, lexemes), tuple(names))
        return got

    @property
    def chain_limit_hits(self) -> int:
        """Times the bound on consecutive empty lexemes cut a chain."""
        return self._core.chain_limit_hits

    # -- lexer restarts and lexeme ends ------------------------------------------------------
    def lexer_start(self, set_id: int, mode: int = _NORMAL) -> int:
        return self._core.lexer_start(set_id, mode, [])

    def finish_lexeme(self, set_id: int, lexer_state: int) -> tuple[int, int]:
        """End the current lexeme: ``(new_set_id, new_lexer_start)``, ``(DEAD_SET, 0)`` when
        no alive lexeme accepts here or the parser rejects it. Memoised in the core."""
        return self._core.finish(set_id, lexer_state)

    def finish_accepted(self, set_id: int, accepting: tuple[int, ...]) -> tuple[int, int]:
        """As :meth:`finish_lexeme`, given the global lexemes that accept."""
        return self._core.finish_accepted(set_id, list(accepting))

    # -- stepping ---------------------------------------------------------------------------
    def advance_byte(self, state: ParseState, byte: int) -> ParseState | None:
        """The state after one byte, or ``None`` if the byte is not allowed."""
        r = self._core.advance_byte(state, byte)
        return None if r is None else ParseState(*r)

    def advance_bytes(self, state: ParseState, data: bytes) -> ParseState | None:
        r = self._core.advance_bytes(state, bytes(data))
        return None if r is None else ParseState(*r)

    def allowed_bytes(self, state: ParseState) -> np.ndarray:
        """bool[256]: the bytes :meth:`advance_byte` accepts from ``state``."""
        return np.frombuffer(self._core.allowed_bytes(state), dtype=np.uint8).astype(bool)

    def expected_token_lexemes(self, state: ParseState) -> frozenset[int]:
        """The special-token lexemes the parser accepts next from ``state``."""
        return frozenset(self._core.expected_token_lexemes(state))

    def advance_token_lexeme(self, state: ParseState, lexemes: frozenset[int]) -> ParseState | None:
        """Scan a special-token lexeme (any of ``lexemes``); pending bytes must end first."""
        r = self._core.advance_token_lexeme(state, list(lexemes))
        return None if r is None else ParseState(*r)

    def is_accepting(self, state: ParseState) -> bool:
        """Whether end of input is allowed here (the grammar is complete)."""
        return self._core.is_accepting(state)

    def can_continue(self, state: ParseState) -> bool:
        """Whether any more input (bytes or special tokens) is possible."""
        return self._core.can_continue(state)

    def can_extend(self, lexer_state: int) -> bool:
        """Whether some byte keeps the lexer alive from ``lexer_state``."""
        return self.lexer.can_extend(lexer_state)

    def accepts(self, data: bytes) -> bool:
        """Full match of ``data`` against the grammar (a ``stop=""`` lexeme may end at the end)."""
        return self._core.accepts(bytes(data))
