"""The lexer/parser pair: a lazy byte DFA for lexemes driven by the Earley parser.

The state of a parse is the triple ``(set_id, lexer_state, pending)``: the canonical Earley set
(everything before the current lexeme), the DFA state of the lexeme being read (which lexemes
are still alive, how far), and whether any bytes of that lexeme were read. All three are ints or
bools, so states hash cheaply and the engine memoises masks on them.

Lexing follows llguidance (https://github.com/guidance-ai/llguidance/blob/main/docs/syntax.md):
the parser tells the lexer which lexemes
may come next; greedy lexemes end when the next byte extends none of them (maximal munch, no
backtracking) and every lexeme accepting the bytes read so far is handed to the parser at once;
lazy lexemes end at their first match; a class's skip regex (``%ignore``) may stand between
lexemes while the parser expects a lexeme of that class.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from lexguide.grammar.ir import GrammarIR
from lexguide.regex import nodes as rx
from reference.earley import DEAD_SET, EarleyParser
from reference.lexer import LexerDFA

__all__ = ["LexParser", "ParseState"]

# How the lexer was (re)started: the skip rules depend on it.
_INITIAL, _NORMAL, _AFTER_SKIP = 0, 1, 2
# Bound on lexemes matching the empty string that may end one after another at one position:
# a parse needing more (only grammars such as ``B*`` with ``B: ""`` can) is not followed.
_MAX_EMPTY_LEXEMES = 64


class SharedLexerDFA(LexerDFA):
    """One lexer DFA for every grammar of the process, over *global* lexemes.

    A global lexeme is a distinct ``(regex node, lazy)`` pair; grammars map their lexemes onto
    them. Because regex nodes are hash-consed, "inside a JSON string" is the same DFA state for
    every grammar, so per-state work (the vocabulary walks of the engine) is done once per
    tokenizer and reused by every grammar and request (DESIGN.md, "Key caches by canonical
    lexer state").
    """

    def __init__(self, max_states: int) -> None:
        super().__init__([], [], max_states)
        self.lexeme_rxs = []  # type: ignore[assignment]  # grows: append-only lists
        self.lazy = []  # type: ignore[assignment]
        self._lexeme_ids: dict[tuple, int] = {}  # (rx, lazy) or (rx, lazy, max_tokens)
        self._live: dict[int, bool] = {}  # state -> its language is not empty (memo)

    def lexeme_id(self, rx_node: int, lazy: bool, max_tokens: int | None = None) -> int:
        """The global lexeme of ``(rx_node, lazy, max_tokens)``, registered on first use.

        A token budget gives a lexeme of its own: capping it (``without_extensions``) must not
        cap an unbudgeted lexeme with the same regex.
        """
        key: tuple = (rx_node, bool(lazy))
        if max_tokens is not None:
            key += (max_tokens,)
        gid = self._lexeme_ids.get(key)
        if gid is None:
            with self._lock:
                gid = self._lexeme_ids.get(key)
                if gid is None:
                    gid = len(self.lexeme_rxs)
                    self.lexeme_rxs.append(rx_node)
                    self.lazy.append(bool(lazy))
                    self._any_lazy = self._any_lazy or bool(lazy)
                    self._lexeme_ids[key] = gid
        return gid


    def _compute_row(self, s: int) -> None:
        """Fill row ``s``; successors whose language is empty become DEAD.

        Smart constructors do not always reduce an empty language to ``NOTHING`` (``&`` and
        ``~`` can hide it), and a lexer that enters such a state can never end its lexeme:
        a mask would admit a prefix that leads nowhere.
        """
        if self._has_row[s]:
            return
        super()._compute_row(s)
        row = self.table[s]
        for t in set(row.tolist()):
            if not self._is_live(t):
                row[row == t] = 0

    def _transition(self, s: int, b: int) -> int:
        t = super()._transition(s, b)
        return t if self._is_live(t) else 0

    def _is_live(self, t: int) -> bool:
        """Whether state ``t``'s language is not empty (memoised)."""
        ok = self._live.get(t)
        if ok is None:
            # regexes without & or ~ answer at once: try them before searching the others
            ok = t == 0 or any(_nonempty(x) for x in sorted((x for _, x in self._states[t]),
                                                            key=rx.has_boolean))
            self._live[t] = ok
        return ok


#: nodes explored before a language is assumed non-empty (a bound, never a wrong "empty")
NONEMPTY_BUDGET = 5_000
_nonempty_memo: dict[int, bool] = {}


def _nonempty(node: int) -> bool:
    """Whether regex ``node`` matches some byte string: search its derivatives for a nullable
    one (breadth first, memoised; past :data:`NONEMPTY_BUDGET` nodes, assume yes)."""
    hit = _nonempty_memo.get(node)
    if hit is not None:
        return hit
    if not rx.has_boolean(node):
        return node != rx.NOTHING
    seen = {node}
    frontier = [node]
    result = rx.nullable(node)
    while frontier and not result:
        if len(seen) > NONEMPTY_BUDGET:
            result = True
            break
        nxt = []
        for x in frontier:
            _, reps = rx.partition_arrays(rx.partition_of([x]))
            for b in reps:
                d = rx.derivative(x, b)
                if d == rx.NOTHING or d in seen:
                    continue
                # stop at the first derivative known to match something
                if rx.nullable(d) or _nonempty_memo.get(d) or not rx.has_boolean(d):
                    result = True
                    break
                seen.add(d)
                nxt.append(d)
            if result:
                break
        frontier = nxt
    if result:
        _nonempty_memo[node] = True
    else:
        for x in seen:  # every node reached has an empty language too
            _nonempty_memo[x] = False
    return result


#: a new shared DFA is started (for grammars compiled from then on) past this many states
SHARED_DFA_ROTATE_STATES = 50_000
SHARED_DFA_MAX_STATES = 150_000
_shared: list[SharedLexerDFA] = []
_shared_lock = threading.Lock()


def shared_lexer() -> SharedLexerDFA:
    """The process-wide lexer DFA new grammars use (rotated when it grows large)."""
    with _shared_lock:
        if not _shared or _shared[0].n_states > SHARED_DFA_ROTATE_STATES:
            _shared[:] = [SharedLexerDFA(SHARED_DFA_MAX_STATES)]
        return _shared[0]


class ParseState(NamedTuple):
    set_id: int
    lexer_state: int
    pending: bool


class LexParser:
    """Byte-level acceptance for one grammar; shared (thread-safe caches) by every matcher."""

    def __init__(self, ir: GrammarIR) -> None:
        self.ir = ir
        self.parser = EarleyParser(ir)
        n = len(ir.lexemes)
        self.n_lexemes = n
        rxs = [lx.rx for lx in ir.lexemes]
        lazy = [lx.lazy for lx in ir.lexemes]
        # skip regexes become extra DFA lexemes, one per lexeme class: index n + class
        self.skip_index: dict[int, int] = {}
        for cls, skip in enumerate(ir.skips):
            if skip is not None:
                self.skip_index[cls] = len(rxs)
                rxs.append(skip)
                lazy.append(False)
        self.is_skip = [False] * n + [True] * (len(rxs) - n)
        self._class_of_skip = {i: cls for cls, i in self.skip_index.items()}
        self.lexer = shared_lexer()
        # local lexeme index <-> global lexeme of the shared DFA (several locals may share one)
        budgets = [lx.max_tokens for lx in ir.lexemes] + [None] * (len(rxs) - n)
        self._global = [self.lexer.lexeme_id(r, z, m) for r, z, m in zip(rxs, lazy, budgets)]
        #: global lexeme -> its ``max_tokens`` (enforced per token by the engine's Matcher)
        self.budgets = {g: m for g, m in zip(self._global, budgets) if m is not None}
        self._locals: dict[int, tuple[int, ...]] = {}
        for local, g in enumerate(self._global):
            self._locals[g] = self._locals.get(g, ()) + (local,)
        self.token_lexemes = frozenset(i for i, lx in enumerate(ir.lexemes) if lx.token_set is not None)
        # ``stop=""`` terminators: at byte level, the end of the input is the EOS token
        self.eos_lexemes = frozenset(
            i for i in self.token_lexemes if ir.lexemes[i].token_set.eos  # type: ignore[union-attr]
        )
        self._start_cache: dict[tuple[int, int, frozenset[int]], int] = {}
        self._scan_cache: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}
        self.chain_limit_hits = 0  # times _MAX_EMPTY_LEXEMES cut a chain of empty lexemes
        self.initial = ParseState(self.parser.initial, self._lexer_start(self.parser.initial, _INITIAL), False)

    # -- lexer restarts -------------------------------------------------------------------
    def _lexer_start(self, set_id: int, mode: int, skipped: frozenset[int] = frozenset()) -> int:
        """Lexer restart state; after a skip of classes ``skipped`` only their lexemes follow."""
        key = (set_id, mode, skipped)
        hit = self._start_cache.get(key)
        if hit is not None:
            return hit
        expected = self.parser.expected(set_id) - self.token_lexemes
        if skipped:
            expected = frozenset(i for i in expected if self.ir.lexemes[i].lexeme_class in skipped)
        allowed = set(expected)
        opts = self.ir.options
        skip_ok = (mode != _INITIAL or opts.allow_initial_skip) and not (
            mode == _AFTER_SKIP and opts.ignore_once
        )
        if skip_ok:
            # The skip of a nested grammar's class (``%json``) may only stand between two of
            # its lexemes, never before its first one.
            last = self.parser.last_classes(set_id)
            for lex in expected:
                cls = self.ir.lexemes[lex].lexeme_class
                s = self.skip_index.get(cls)
                if s is not None and (cls == 0 or cls in last):
                    allowed.add(s)
        state = self.lexer.start(frozenset(self._global[i] for i in allowed))
        self._start_cache[key] = state
        return state

    def finish_lexeme(self, set_id: int, lexer_state: int) -> tuple[int, int]:
        """End the current lexeme (bytes read so far): ``(new_set_id, new_lexer_start)``.

        Returns ``(DEAD_SET, 0)`` when no alive lexeme accepts here or the parser rejects it.
        Memoised per (set, lexer state).
        """
        return self.finish_accepted(set_id, self.lexer.accepting(lexer_state))

    def finish_accepted(self, set_id: int, accepting: tuple[int, ...]) -> tuple[int, int]:
        """As :meth:`finish_lexeme`, given the global lexemes that accept (memoised)."""
        key = (set_id, accepting)
        hit = self._scan_cache.get(key)
        if hit is not None:
            return hit
        accepted = [loc for g in accepting for loc in self._locals.get(g, ())]
        real = frozenset(i for i in accepted if not self.is_skip[i])
        new_set = self.parser.scan(set_id, real) if real else DEAD_SET
        if new_set != DEAD_SET:
            result = (new_set, self._lexer_start(new_set, _NORMAL))
        elif len(real) < len(accepted):  # the skip regex matched: the parser does not move
            skipped = frozenset(self._class_of_skip[i] for i in accepted if self.is_skip[i])
            result = (set_id, self._lexer_start(set_id, _AFTER_SKIP, skipped))
        else:
            result = (DEAD_SET, 0)
        self._scan_cache[key] = result
        return result

    # -- stepping -------------------------------------------------------------------------
    def _restarts(self, set_id: int, lstate: int, pending: bool):
        """The (set, lexer state) pairs a next byte may start from: the given one, then each
        one reached by ending the current (possibly empty) lexeme, while it accepts.

        A lazy lexeme matching the empty string ends before any byte. Stops at a cycle of
        empty lexemes, and past ``_MAX_EMPTY_LEXEMES`` of them (counted in
        ``chain_limit_hits``).
        """
        if not pending and lstate != 0 and self.lexer.accepts_lazy(lstate):
            set_id, lstate = self.finish_lexeme(set_id, lstate)
            if set_id == DEAD_SET:
                return
        seen: set[tuple[int, int]] = set()
        while True:
            yield set_id, lstate
            if lstate == 0 or not self.lexer.accepting(lstate) or (set_id, lstate) in seen:
                return
            seen.add((set_id, lstate))
            if len(seen) > _MAX_EMPTY_LEXEMES:
                self.chain_limit_hits += 1
                return
            set_id, lstate = self.finish_lexeme(set_id, lstate)
            if set_id == DEAD_SET:
                return

    def advance_byte(self, state: ParseState, byte: int) -> ParseState | None:
        """The state after one byte, or ``None`` if the byte is not allowed."""
        lexer = self.lexer
        for set_id, lstate in self._restarts(*state):
            nxt = lexer.next(lstate, byte) if lstate != 0 else 0
            if nxt != 0:
                break
        else:
            return None
        if lexer.accepts_lazy(nxt):
            set_id, lstart = self.finish_lexeme(set_id, nxt)
            if set_id == DEAD_SET:
                return None
            return ParseState(set_id, lstart, False)
        return ParseState(set_id, nxt, True)

    def allowed_bytes(self, state: ParseState) -> np.ndarray:
        """bool[256]: the bytes :meth:`advance_byte` accepts from ``state`` (same rules)."""
        lexer = self.lexer
        allowed = np.zeros(256, dtype=bool)
        for _, lstate in self._restarts(*state):
            if lstate != 0:
                lexer.ensure_rows(np.array([lstate], dtype=np.int32))
                allowed |= lexer.table[lstate] > 0
        return allowed

    def advance_bytes(self, state: ParseState, data: bytes) -> ParseState | None:
        for b in data:
            state = self.advance_byte(state, b)
            if state is None:
                return None
        return state

    def _token_sets(self, state: ParseState):
        """The Earley sets a special token may be scanned from: pending bytes end first, then
        lexemes matching the empty string may end too (as before a byte)."""
        set_id, lstate, pending = state
        if pending:
            set_id, lstate = self.finish_lexeme(set_id, lstate)
            if set_id == DEAD_SET:
                return
        for s, _ in self._restarts(set_id, lstate, False):
            yield s

    def expected_token_lexemes(self, state: ParseState) -> frozenset[int]:
        """The special-token lexemes the parser accepts next from ``state``."""
        out: frozenset[int] = frozenset()
        for set_id in self._token_sets(state):
            out |= self.parser.expected(set_id) & self.token_lexemes
        return out

    def advance_token_lexeme(self, state: ParseState, lexemes: frozenset[int]) -> ParseState | None:
        """Scan a special-token lexeme (any of ``lexemes``); pending bytes must end first."""
        for set_id in self._token_sets(state):
            new_set = self.parser.scan(set_id, lexemes)
            if new_set != DEAD_SET:
                return ParseState(new_set, self._lexer_start(new_set, _NORMAL), False)
        return None

    def is_accepting(self, state: ParseState) -> bool:
        """Whether end of input is allowed here (the grammar is complete).

        Pending bytes must form a lexeme; lexemes matching the empty string may end too (as
        they may before any byte mid-stream).
        """
        pending = state.pending
        for set_id, _ in self._restarts(state.set_id, state.lexer_state, True):
            if not pending and self.parser.is_accepting(set_id):
                return True
            pending = False
        return False

    def can_continue(self, state: ParseState) -> bool:
        """Whether any more input (bytes or special tokens) is possible."""
        set_id, lstate, pending = state
        if lstate != 0 and self.can_extend(lstate):
            return True
        if pending:
            set_id, lstate = self.finish_lexeme(set_id, lstate)
            if set_id == DEAD_SET:
                return False
            return self.can_extend(lstate) or bool(self.parser.expected(set_id) & self.token_lexemes)
        return bool(self.parser.expected(set_id) & self.token_lexemes)

    def can_extend(self, lexer_state: int) -> bool:
        """Whether some byte keeps the lexer alive from ``lexer_state``."""
        if lexer_state == 0:
            return False
        self.lexer.ensure_rows(np.array([lexer_state], dtype=np.int32))
        return bool((self.lexer.table[lexer_state] != 0).any())

    def accepts(self, data: bytes) -> bool:
        """Full-match of ``data`` against the grammar."""
        state = self.advance_bytes(self.initial, data)
        if state is None:
            return False
        if self.is_accepting(state):
            return True
        if self.eos_lexemes:  # a ``stop=""`` lexeme ends at the end of the input (EOS)
            state = self.advance_token_lexeme(state, self.eos_lexemes)
            return state is not None and self.is_accepting(state)
        return False
