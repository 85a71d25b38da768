"""A lazily built multi-lexeme byte DFA over hash-consed regex derivatives.

A state is the canonical tuple of ``(lexeme_index, derivative_node)`` pairs of the lexemes still
alive (sorted by index; ``NOTHING`` derivatives dropped). State 0 is ``DEAD`` (no lexeme alive).
Because derivative nodes are hash-consed (:mod:`lexguide.regex.nodes`), "inside a JSON string"
is the same node in every grammar, so callers can cache per-state work by the state's key.

Rows of the transition table are computed on demand, one derivative per *byte class* of the
state (the common refinement of its nodes' byte partitions), and written to ``table`` with one
numpy gather; :meth:`LexerDFA.next` fills single transitions of rows not yet computed. Lazy lexemes (spec section 8.3) end at their first match: once a lazy lexeme's
node is nullable it is not carried into successor states.

Limit: ``max_states`` (default :data:`DEFAULT_MAX_STATES`) -- building more states raises
:class:`lexguide.errors.LimitExceeded` naming ``max_dfa_states``.

Thread safety: ``start`` and ``ensure_rows`` take a lock; ``table`` may be reallocated by them,
so re-read the attribute after calling.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from lexguide.errors import LimitExceeded
from lexguide.regex import nodes as rx

__all__ = ["DEAD", "DEFAULT_MAX_STATES", "LexerDFA"]

DEAD = 0
#: default bound on the states of one LexerDFA (the table grows by doubling up to this)
DEFAULT_MAX_STATES = 100_000

State = tuple[tuple[int, int], ...]


class LexerDFA:
    """Lazy DFA recognising several lexemes in parallel.

    Parameters
    ----------
    lexeme_rxs
        One :mod:`rx` node id per lexeme.
    lazy
        Per lexeme: does it end at its first match?
    max_states
        Bound on the number of states (``LimitExceeded("max_dfa_states")`` past it).

    Attributes
    ----------
    table : np.ndarray[int32], shape (capacity, 256)
        ``table[s, b]`` is the successor of state ``s`` on byte ``b``; ``-1`` until the row of
        ``s`` was computed by :meth:`ensure_rows`. Row ``DEAD`` maps every byte to ``DEAD``.
    """

    def __init__(
        self,
        lexeme_rxs: Sequence[int],
        lazy: Sequence[bool] | None = None,
        max_states: int = DEFAULT_MAX_STATES,
    ) -> None:
        self.lexeme_rxs: tuple[int, ...] = tuple(lexeme_rxs)
        self.lazy: tuple[bool, ...] = (
            tuple(bool(v) for v in lazy) if lazy is not None else (False,) * len(self.lexeme_rxs)
        )
        if len(self.lazy) != len(self.lexeme_rxs):
            raise ValueError("lazy flags and lexeme regexes differ in length")
        self.max_states = max_states
        self._any_lazy = any(self.lazy)
        self._lock = threading.RLock()
        self._states: list[State] = [()]
        self._ids: dict[State, int] = {(): DEAD}
        self._accepting: list[tuple[int, ...]] = [()]
        self._lazy_accept: list[bool] = [False]
        self._start_cache: dict[frozenset[int], int] = {}
        self._first_bytes: dict[int, npt.NDArray[np.uint8]] = {}
        cap = 64
        self.table: npt.NDArray[np.int32] = np.full((cap, 256), -1, dtype=np.int32)
        self.table[DEAD] = DEAD
        self._has_row = np.zeros(cap, dtype=bool)
        self._has_row[DEAD] = True

    # -- states ------------------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        """Number of states built so far (including DEAD)."""
        return len(self._states)

    def _intern(self, entries: State) -> int:
        sid = self._ids.get(entries)
        if sid is not None:
            return sid
        sid = len(self._states)
        if sid >= self.max_states:
            raise LimitExceeded(
                "max_dfa_states",
                self.max_states,
                f"resource limit max_dfa_states={self.max_states} exceeded: the lexer automaton "
                "is too large (a regex with a large counted repetition, or &/~ blow-up?)",
            )
        self._states.append(entries)
        self._ids[entries] = sid
        null = rx.nullable
        acc = tuple(i for i, x in entries if null(x))
        self._accepting.append(acc)
        self._lazy_accept.append(any(self.lazy[i] for i in acc))
        if sid >= self.table.shape[0]:
            cap = min(max(2 * self.table.shape[0], sid + 1), max(self.max_states, sid + 1))
            table = np.full((cap, 256), -1, dtype=np.int32)
            table[: self.table.shape[0]] = self.table
            has = np.zeros(cap, dtype=bool)
            has[: self._has_row.shape[0]] = self._has_row
            self.table, self._has_row = table, has
        return sid

    def start(self, allowed: Iterable[int]) -> int:
        """The state where exactly the lexemes ``allowed`` (indices) begin. Cached per set."""
        key = frozenset(allowed)
        sid = self._start_cache.get(key)
        if sid is None:
            n = len(self.lexeme_rxs)
            for i in key:
                if not 0 <= i < n:
                    raise IndexError(f"lexeme index {i} out of range (0..{n - 1})")
            entries = tuple(
                (i, self.lexeme_rxs[i]) for i in sorted(key) if self.lexeme_rxs[i] != rx.NOTHING
            )
            with self._lock:
                sid = self._intern(entries)
                self._start_cache[key] = sid
        return sid

    def state_key(self, state: int) -> State:
        """The canonical ``((lexeme_index, rx_node), ...)`` tuple of ``state``."""
        return self._states[state]

    def accepting(self, state: int) -> tuple[int, ...]:
        """Indices of the lexemes whose regex matches the bytes consumed to reach ``state``."""
        return self._accepting[state]

    def accepts_lazy(self, state: int) -> bool:
        """Does a lazy lexeme match here (so the lexeme must end now)?"""
        return self._lazy_accept[state]

    def alive_lexemes(self, state: int) -> tuple[int, ...]:
        """Indices of the lexemes that may still match after ``state`` (or accept at it)."""
        return tuple(i for i, _ in self._states[state])

    def without_extensions(self, state: int, lexemes: Iterable[int]) -> int:
        """``state`` where ``lexemes`` may still end here but take no more bytes.

        Each listed lexeme's derivative becomes ``EPSILON`` if it accepts here and is dropped
        otherwise; the other lexemes are unchanged. Returns ``DEAD`` when nothing is left.
        Interns a new state (may raise ``LimitExceeded``); used for token budgets
        (``max_tokens``).
        """
        capped = frozenset(lexemes)
        null = rx.nullable
        entries = tuple(
            (i, rx.EPSILON if i in capped else x)
            for i, x in self._states[state]
            if i not in capped or null(x)
        )
        sid = self._ids.get(entries)
        if sid is None:
            with self._lock:
                sid = self._intern(entries)
        return sid

    def can_extend(self, state: int) -> bool:
        """Is some byte allowed from ``state``? (Computes the row if needed.)"""
        self.ensure_rows(np.array([state], dtype=np.int32))
        return bool((self.table[state] != DEAD).any())

    def first_bytes(self, state: int) -> npt.NDArray[np.uint8]:
        """Sorted bytes that do not lead to DEAD from ``state`` (cached; computes the row).

        Lets callers prune a vocabulary walk to the tokens starting with one of these bytes.
        """
        r = self._first_bytes.get(state)
        if r is None:
            self.ensure_rows(np.array([state], dtype=np.int32))
            r = np.flatnonzero(self.table[state] != DEAD).astype(np.uint8)
            r.setflags(write=False)
            self._first_bytes[state] = r
        return r

    def __reduce__(self) -> tuple:
        # node ids are process-local: ship the regexes, rebuild states lazily on the other side
        return (_rebuild, (rx.export_nodes(self.lexeme_rxs), self.lazy, self.max_states))

    # -- transitions -------------------------------------------------------------------------
    def next(self, state: int, byte: int) -> int:
        """Successor of ``state`` on ``byte``.

        Computes that one transition when the row is missing (a matcher consuming text steps
        through states no vocabulary walk needs whole rows of: one derivative per lexeme
        instead of one per byte class) and stores it in ``table``; the row stays incomplete
        until :meth:`ensure_rows` fills it.
        """
        if state < self._has_row.shape[0]:
            t = int(self.table[state, byte])
            if t >= 0:
                return t
        if not 0 <= state < len(self._states):
            raise IndexError(f"no lexer state {state}")
        with self._lock:
            t = self._transition(state, byte)
            self.table[state, byte] = t
        return t

    def _transition(self, s: int, b: int) -> int:
        """The successor of ``s`` on ``b`` alone (as :meth:`_compute_row` would set it)."""
        return self._successors(self._stepping_entries(s), (b,))[0]

    def _stepping_entries(self, s: int) -> State:
        """The entries of ``s`` that take bytes: a lazy lexeme that matched has ended."""
        entries = self._states[s]
        if self._any_lazy:
            lazy, null = self.lazy, rx.nullable
            entries = tuple((i, x) for i, x in entries if not (lazy[i] and null(x)))
        return entries

    def _successors(self, entries: State, byts) -> list[int]:
        """The states of the derivatives of ``entries`` on each of ``byts`` (interned)."""
        nothing, deriv, ids_get = rx.NOTHING, rx.derivative, self._ids.get
        targets = []
        for b in byts:
            nxt = []
            for i, x in entries:
                d = deriv(x, b)
                if d != nothing:
                    nxt.append((i, d))
            key = tuple(nxt)
            t = ids_get(key)
            targets.append(self._intern(key) if t is None else t)
        return targets

    def ensure_rows(self, states: npt.NDArray[np.integer]) -> None:
        """Compute every missing row among ``states`` (mutates ``table``; may reallocate it)."""
        states = np.asarray(states)
        if states.size == 0:
            return
        if states.min() < 0 or states.max() >= len(self._states):
            raise IndexError(f"lexer state out of range 0..{len(self._states) - 1}")
        has = self._has_row
        missing = states[~has[np.minimum(states, has.shape[0] - 1)] | (states >= has.shape[0])]
        if missing.size == 0:
            return
        with self._lock:
            for s in sorted(set(missing.tolist())):  # (np.unique hashes: slow on numpy 2.4)
                if s >= self._has_row.shape[0] or not self._has_row[s]:
                    self._compute_row(s)

    def ensure_reachable(self, state: int, max_new: int | None = None) -> int:
        """Compute rows for every state reachable from ``state`` (at most ``max_new`` new rows).

        Returns the number of rows computed. Used by benchmarks and eager callers.
        """
        done = 0
        todo = [state]
        seen = {state}
        while todo and (max_new is None or done < max_new):
            s = todo.pop()
            if not self._has_row[s]:
                with self._lock:
                    self._compute_row(s)
                done += 1
            for t in np.unique(self.table[s]).tolist():
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return done

    def _compute_row(self, s: int) -> None:
        """Fill row ``s``: one derivative per byte class of the state (caller holds the lock)."""
        if s < 0 or s >= len(self._states):
            raise IndexError(f"no lexer state {s}")
        if self._has_row[s]:
            return
        entries = self._stepping_entries(s)
        pid = rx.partition_of(x for _, x in entries)
        labels, reps = rx.partition_arrays(pid)
        targets = self._successors(entries, reps)
        if len(targets) == 1:
            self.table[s] = targets[0]
        else:
            self.table[s] = np.array(targets, dtype=np.int32)[labels]
        self._has_row[s] = True


def _rebuild(exported: tuple, lazy: tuple[bool, ...], max_states: int) -> LexerDFA:
    return LexerDFA(rx.import_nodes(exported), lazy, max_states)
