"""Vocabulary walks: which tokens a lexer state lets through, and where lexemes end inside them.

A walk from lexer state ``s`` classifies every text token (a *row* of ``TokenizerInfo``'s
column-major byte matrix):

* the token's bytes stay inside the current lexeme to its last byte → allowed, whatever the
  parser says;
* at byte ``j`` the lexeme ends (the byte extends no alive lexeme and the lexemes in ``acc``
  accept the bytes before it; or a lazy lexeme accepts) → the token crosses a boundary; the
  parser decides whether ``acc`` may come next, and where the lexer restarts;
* otherwise the token is rejected.

Results are grouped by ``(j, acc)`` and cached per lexer state in a :class:`WalkNode`; the
continuation of a group from a restart state is cached on the node as a child. Nothing here
depends on a grammar's parser: every grammar of the process shares the lexer DFA
(``lexparser.shared_lexer``), so a walk is done once per tokenizer.

Root walks are *decomposed by lexeme*: the state is a tuple of independent regex derivatives,
so a token's fate is fixed by the column at which each derivative dies (the state dies at the
latest of them) and whether it accepted just before. Those per-derivative columns are cached
per regex node, which is hash-consed: "inside a JSON string" is walked once, then reused by
every state that contains it (a property key that may also be any other string, a string in
another schema...). A node that takes many first bytes is assembled from *tails*, one per
first byte, cached per (successor node, byte) and walked over the token prefix tree
(``trie.py``); counters no short token can tell apart are capped (``rx.cap_counters``); a
state dominated by one derivative starts from that derivative's packed mask and recomputes
only the rows the others list. Continuations are shared across parents by (restart state,
rows), and walks of a few rows run byte by byte in Python. ``docs/engine.md`` has the
measurements behind each of these.
"""

from __future__ import annotations

import threading
from typing import NamedTuple, Union

import numpy as np

from lexguide.engine.tokenizer_info import TokenizerInfo, clear_bits, set_bits
from lexguide.grammar import rx

__all__ = ["VocabWalker", "WalkNode", "walker_for"]

#: node walks over at least this many tokens deduplicate them by byte class first
VIEW_MIN_ROWS = 4096
#: a partition's view is built when this many node walks asked for it
VIEW_AFTER_REQUESTS = 2
#: partitions with more byte classes than this get no view: a JSON string body's 37 classes
#: leave 81,932 class strings of Gemma 3's 255,895 tokens, not worth building the view
VIEW_MAX_CLASSES = 24
#: node walks over at least this many tokens are assembled per first byte (``_split_walk``)
SPLIT_MIN_ROWS = 4096
#: tails of ``(A & ~B) rest`` nodes start from the tail of ``A rest`` (``_negation_tail``)
NEGATION_TAILS = True
#: unions of at most this many literals (enums) are walked off the prefix tree
MAX_LITERAL_SET = 512
#: counter patches of at most this many long tokens step one lexer transition at a time
TRANSITION_WALK_ROWS = 256
#: ... when ``B`` has at most this many (literal, first byte of rest) pairs
MAX_NEGATION_PREFIXES = 4096
#: tails of at least this many tokens are walked over the token prefix tree (``trie.py``)
TRIE_MIN_ROWS = 2048
#: combined fates of more rows than this read split walks through a dense row -> slot map
_DENSE_FATES = 4096
#: walks of at most this many rows run byte by byte in Python (``_walk_small``)
SMALL_WALK_ROWS = 48
#: node walks share the walk of their counter-capped twin for tokens shorter than this
#: (``rx.cap_counters``; 379 of Gemma 3's 262k tokens and 54 of SmolLM2's 49k are longer)
CAP_BYTES = 32
#: a state's root walk starts from its largest derivative walk when that lists this many
#: times the rows of all others together (``_combine_dominant``)
DOMINANT_RATIO = 8
_MAX_VIEWS = 256
_MAX_WALKERS = 3
#: bounds of the walk caches of one tokenizer; past them the cache is dropped and rebuilt on
#: demand (walks are deterministic, so this only costs time)
MAX_ROOTS = 20_000
MAX_NODE_WALK_ROWS = 64 << 20  # total rows held by cached per-node walks (~11 bytes each)
MAX_SHARED_CHILD_BYTES = 64 << 20  # signature bytes of continuations shared across parents
MAX_PY_ROWS = 20_000  # DFA rows kept as Python lists for small walks (~2 KiB each)
MAX_GROUP_REFS = 2_048  # reference masks of successor nodes (one packed mask each)
#: states with more alive lexemes than this are walked directly, not combined per lexeme
#: (literals, walked off the prefix tree, are counted apart: an object's declared names)
_MAX_COMBINED = 30
_MAX_COMBINED_LITERALS = 1024
#: nodes with at most this many allowed tokens set bits directly instead of OR-ing a mask
_SMALL = 2048


class FirstBytes(NamedTuple):
    """A row set given by first bytes: every token whose first byte ``b`` has ``mask[b]``."""

    mask: np.ndarray  # bool[256]


Rows = Union[np.ndarray, FirstBytes]  # noqa: UP007 (a runtime alias, Python 3.10)


class Group(NamedTuple):
    column: int  # byte position at which the lexeme ended
    acc: tuple[int, ...]  # global lexemes accepting the bytes before ``column``
    rows: Rows


class WalkNode:
    """Tokens walked from one lexer (re)start; ``children`` caches continuations per
    ``(acc, restart state)``.

    The allowed tokens are ``rows`` (explicit) plus, optionally, a packed mask ``extra``
    (a large set assembled by mask algebra, see :meth:`VocabWalker._combine_dominant`)."""

    __slots__ = ("_packed", "_rows", "by_acc", "children", "extra", "ids", "info")

    def __init__(self, info: TokenizerInfo, rows: np.ndarray, groups: list[Group],
                 extra: np.ndarray | None = None) -> None:
        self.info = info
        self._rows = rows
        self.ids = info.text_ids[rows].astype(np.int64)
        self.extra = extra
        self.by_acc: dict[tuple[int, ...], list[tuple[int, Rows]]] = {}
        for column, acc, grows in groups:
            self.by_acc.setdefault(acc, []).append((column, grows))
        self.children: dict[tuple[tuple[int, ...], int], WalkNode] = {}
        self._packed: np.ndarray | None = None

    @property
    def is_small(self) -> bool:
        """Few allowed tokens, all explicit: cheaper to set their bits than OR a mask."""
        return self.extra is None and len(self.ids) <= _SMALL

    @property
    def rows(self) -> np.ndarray:
        """All allowed rows (materialised from ``extra`` on first use)."""
        if self.extra is not None:
            ids = np.flatnonzero(np.unpackbits(self.extra.view(np.uint8), bitorder="little"))
            extra_rows = self.info.row_of_id[ids[ids < self.info.vocab_size]]
            self._rows = np.concatenate((self._rows, extra_rows[extra_rows >= 0]))
            self.ids = self.info.text_ids[self._rows].astype(np.int64)
            self._packed = self.packed()
            self.extra = None
        return self._rows

    def packed(self) -> np.ndarray:
        """The allowed tokens as a packed bitmask (built on first use)."""
        if self._packed is None:
            packed = self.info.mask_from_ids(self.ids) if len(self.ids) else None
            if self.extra is not None:
                packed = self.extra.copy() if packed is None else packed | self.extra
            self._packed = packed if packed is not None else self.info.mask_from_ids(self.ids)
        return self._packed


class _Tail:
    """Tokens walked under one regex node (those starting with one byte, from column 1, for a
    tail), with the products a state's walk is assembled from."""

    __slots__ = ("_allowed", "_crossing", "acc", "death", "rows")

    def __init__(self, rows: np.ndarray, death: np.ndarray, acc: np.ndarray) -> None:
        self.rows, self.death, self.acc = rows, death, acc  # rows sorted
        self._allowed: np.ndarray | None = None
        self._crossing: tuple[np.ndarray, np.ndarray] | None = None

    def allowed_ids(self, info: TokenizerInfo) -> np.ndarray:
        if self._allowed is None:
            rows = self.rows[self.death == info.lengths[self.rows]]
            self._allowed = info.text_ids[rows].astype(np.int64)
        return self._allowed

    def crossing(self, info: TokenizerInfo) -> tuple[np.ndarray, np.ndarray]:
        """Rows that end the lexeme accepting before their last byte, and where."""
        if self._crossing is None:
            c = (self.death < info.lengths[self.rows]) & self.acc
            self._crossing = (self.rows[c], self.death[c])
        return self._crossing


class _NodeWalk:
    """Fate of every token under one regex node: rows not listed die at column 0.

    Three shapes: flat arrays (``rows`` sorted, ``death``, ``acc``); one cached
    :class:`_Tail` per first byte (``tails``: byte -> (successor node, tail)), for nodes that
    take many first bytes; or another node's walk (``base``) with the fates of a few rows
    replaced (``patch``), for a node with counters that only long tokens can tell from
    ``base`` (see :func:`rx.cap_counters`). Flat arrays are materialised only if needed.
    """

    __slots__ = ("_acc", "_death", "_first", "_rows", "_significant", "_solo", "base", "nullable",
                 "patch", "tails")

    def __init__(self, nullable: bool, rows: np.ndarray | None = None, death: np.ndarray | None = None,
                 acc: np.ndarray | None = None, tails: dict[int, tuple[int, _Tail]] | None = None,
                 base: _NodeWalk | None = None, patch: tuple | None = None) -> None:
        self.nullable = nullable  # the node accepts the empty string (fate of unlisted rows)
        self.tails = tails
        self.base, self.patch = base, patch
        if rows is not None:
            order = np.argsort(rows, kind="stable")
            rows, death, acc = rows[order], death[order], acc[order]
        self._rows, self._death, self._acc = rows, death, acc
        self._first: np.ndarray | None = None
        self._solo: tuple | None = None
        self._significant: tuple | None = None

    def _flatten(self) -> None:
        if self._rows is not None:
            return
        if self.base is not None:
            b = self.base
            p_rows, p_death, p_acc = self.patch
            keep = _without_mask(b.rows, p_rows)
            taken = p_death > 0
            rows = np.concatenate((b.rows[keep], p_rows[taken]))
            death = np.concatenate((b.death[keep], p_death[taken]))
            acc = np.concatenate((b.acc[keep], p_acc[taken]))
        else:
            parts = [t for _, t in self.tails.values()]
            rows = np.concatenate([t.rows for t in parts])
            death = np.concatenate([t.death for t in parts])
            acc = np.concatenate([t.acc for t in parts])
        order = np.argsort(rows, kind="stable")
        self._rows, self._death, self._acc = rows[order], death[order], acc[order]

    @property
    def rows(self) -> np.ndarray:
        self._flatten()
        return self._rows

    @property
    def death(self) -> np.ndarray:  # int16: column of the byte that kills the node; == length if none
        self._flatten()
        return self._death

    @property
    def acc(self) -> np.ndarray:  # bool: the node accepts the bytes before ``death``
        self._flatten()
        return self._acc

    def significant(self) -> np.ndarray:
        """Rows that outlive column 1 or accept before dying (the others die at column 1)."""
        return self.significant_fates()[0]

    def significant_fates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, death, acc) of the significant rows (cached)."""
        if self._significant is None:
            keep = (self.death >= 2) | self.acc
            self._significant = (self.rows[keep], self.death[keep], self.acc[keep])
        return self._significant

    def size(self, info: TokenizerInfo) -> int:
        if self.base is not None:
            return self.base.size(info)
        if self.tails is not None:
            return sum(len(t.rows) for _, t in self.tails.values())
        return len(self._rows)

    def first_alive(self, info: TokenizerInfo) -> np.ndarray:
        """bool[256]: the first bytes the node takes."""
        if self.base is not None:
            return self.base.first_alive(info)  # one-byte prefixes: the same as the base's
        if self._first is None:
            first = np.zeros(256, dtype=bool)
            if self.tails is not None:
                first[list(self.tails)] = True
            else:
                first[info.first_byte[self._rows]] = True
            self._first = first
        return self._first

    def scatter(self, info: TokenizerInfo, pos: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(death, acc) at positions ``pos[row]`` of ``n`` slots (rows with ``pos < 0`` are
        outside the query), unlisted slots dying at column 0."""
        death = np.zeros(n, dtype=np.int16)
        acc = np.full(n, self.nullable, dtype=bool)
        if self.base is not None:
            death, acc = self.base.scatter(info, pos, n)
            parts = [self.patch]
        elif self.tails is not None:
            parts = [(t.rows, t.death, t.acc) for _, t in self.tails.values()]
        else:
            parts = [(self._rows, self._death, self._acc)]
        for rows, d, a in parts:
            at = pos[rows]
            ok = at >= 0
            if not ok.all():
                at, d, a = at[ok], d[ok], a[ok]
            death[at] = d
            acc[at] = a
        return death, acc

    def fate(self, info: TokenizerInfo, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(death, acc) of ``rows`` (sorted, distinct) without flattening."""
        if self.base is not None:
            death, acc = self.base.fate(info, rows)
            _gather(*self.patch, rows, death, acc, np.arange(len(rows)))
            return death, acc
        death = np.zeros(len(rows), dtype=np.int16)
        acc = np.full(len(rows), self.nullable, dtype=bool)
        if self.tails is None:
            _gather(self._rows, self._death, self._acc, rows, death, acc, np.arange(len(rows)))
            return death, acc
        first = info.first_byte[rows]
        for b in _distinct(first).tolist():
            hit = self.tails.get(b)
            if hit is not None:
                at = np.flatnonzero(first == b)
                t = hit[1]
                _gather(t.rows, t.death, t.acc, rows[at], death, acc, at)
        return death, acc


def _gather(rows, death, acc, query, out_death, out_acc, at) -> None:
    """out[at] = (death, acc) of the ``query`` rows found in sorted ``rows``."""
    if not len(rows) or not len(query):
        return
    pos = np.minimum(np.searchsorted(rows, query), len(rows) - 1)
    found = rows[pos] == query
    out_death[at[found]] = death[pos[found]]
    out_acc[at[found]] = acc[pos[found]]


class VocabWalker:
    """Walks of one tokenizer's vocabulary through one (shared) lexer DFA. Thread-safe caches."""

    def __init__(self, lexer, info: TokenizerInfo) -> None:
        self.lexer = lexer
        self.info = info
        self._acc = np.zeros(0, dtype=bool)  # lexer state -> accepts some lexeme
        self._lazy = np.zeros(0, dtype=bool)  # lexer state -> accepts a lazy lexeme
        self._n_props = 0
        self.roots: dict[int, WalkNode] = {}
        self._node_walks: dict[int, _NodeWalk] = {}
        self._node_walk_rows = 0
        self._tails: dict[tuple[int, int], _Tail] = {}
        self._group_refs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._shared_children: dict[tuple, WalkNode] = {}
        self._py_rows: dict[int, list[int]] = {}
        self._text_ids: tuple[int, ...] | None = None
        self._shared_bytes = 0
        self._views: dict[int, _ClassView | None] = {}
        self._view_requests: dict[int, int] = {}
        self.lock = threading.Lock()

    # -- lexer state properties as arrays -------------------------------------------------
    def _grow_state_props(self) -> None:
        n = self.lexer.n_states
        old = self._n_props
        if n <= old:
            return
        if n > len(self._acc):
            acc = np.zeros(max(n, 2 * len(self._acc), 64), dtype=bool)
            lazy = np.zeros_like(acc)
            acc[:old], lazy[:old] = self._acc[:old], self._lazy[:old]
            self._acc, self._lazy = acc, lazy
        for s in range(old, n):
            self._acc[s] = bool(self.lexer.accepting(s))
            self._lazy[s] = self.lexer.accepts_lazy(s)
        self._n_props = n

    def _step(self, states: np.ndarray, byts: np.ndarray) -> np.ndarray:
        """``table[states, byts]`` with missing DFA rows computed on demand."""
        lexer = self.lexer
        table = lexer.table
        if int(states.max(initial=0)) < len(table):
            nxt = table.ravel().take(states.astype(np.int64) * 256 + byts)
            if not (nxt < 0).any():
                if lexer.n_states > self._n_props:
                    self._grow_state_props()
                return nxt
        lexer.ensure_rows(_distinct(states))
        nxt = lexer.table.ravel().take(states.astype(np.int64) * 256 + byts)
        if lexer.n_states > self._n_props:
            self._grow_state_props()
        return nxt

    def _acc_of(self, states: np.ndarray) -> np.ndarray:
        """Whether each lexer state accepts (states already stepped through :meth:`_step`)."""
        return self._acc[states]

    def _alive_first_bytes(self, state: int) -> np.ndarray:
        self.lexer.ensure_rows(np.array([state], dtype=np.int32))
        return self.lexer.table[state] > 0

    def _rows_by_first(self, alive: np.ndarray) -> np.ndarray:
        nz = np.nonzero(alive)[0]
        if len(nz) > 128:
            return self.info.all_rows
        if not len(nz):
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([self.info.rows_by_first[b] for b in nz.tolist()])

    # -- generic walk (any state, any rows, from any column) ------------------------------
    def walk(self, state: int, rows: np.ndarray, column: int) -> tuple[np.ndarray, list[Group]]:
        """Walk ``rows`` from byte ``column`` on, starting in lexer ``state``.

        Returns (rows allowed without leaving the lexeme, boundary groups).
        """
        if len(rows) <= SMALL_WALK_ROWS:
            return self._walk_small(state, rows, column)
        info = self.info
        columns, lengths = info.columns, info.lengths
        accepting = self.lexer.accepting
        inside: list[np.ndarray] = []
        groups: list[Group] = []
        states = np.full(len(rows), state, dtype=np.int32)
        j = column
        self._grow_state_props()
        while len(rows):
            nxt = self._step(states, columns[j].take(rows))
            died = nxt == 0
            if died.any():
                dead_rows, pre = rows[died], states[died]
                ok = self._acc[pre]
                for s, r in _split_by_state(pre[ok], dead_rows[ok]):
                    groups.append(Group(j, accepting(s), r))
                live = ~died
                rows, nxt = rows[live], nxt[live]
            j += 1
            if not len(rows):
                break
            lazy = self._lazy[nxt]
            if lazy.any():
                for s, r in _split_by_state(nxt[lazy], rows[lazy]):
                    groups.append(Group(j, accepting(s), r))
                keep = ~lazy
                rows, nxt = rows[keep], nxt[keep]
            done = lengths[rows] == j
            if done.any():
                inside.append(rows[done])
                keep = ~done
                rows, nxt = rows[keep], nxt[keep]
            states = nxt
        allowed = np.concatenate(inside) if inside else np.zeros(0, dtype=np.int64)
        return allowed, groups

    def _walk_small(self, state: int, rows: np.ndarray, column: int) -> tuple[np.ndarray, list[Group]]:
        """:meth:`walk` for a few rows, byte by byte in Python: numpy's per-call overhead
        (about ten calls per column) costs more than the work for a handful of tokens."""
        if self._text_ids is None:
            self._text_ids = tuple(self.info.text_ids.tolist())
        token_bytes, text_ids = self.info.token_bytes, self._text_ids
        py_row = self._py_row
        allowed: list[int] = []
        ends: dict[tuple[int, int], list[int]] = {}
        for r in rows.tolist():
            data = token_bytes[text_ids[r]]
            s = state
            for j in range(column, len(data)):
                nxt = py_row(s)[data[j]]
                if nxt == 0:
                    if self._acc[s]:
                        ends.setdefault((j, s), []).append(r)
                    break
                if self._lazy[nxt]:
                    ends.setdefault((j + 1, nxt), []).append(r)
                    break
                s = nxt
            else:
                allowed.append(r)
        accepting = self.lexer.accepting
        groups = [Group(j, accepting(s), np.array(rs, dtype=np.int64)) for (j, s), rs in ends.items()]
        return np.array(allowed, dtype=np.int64), groups

    def _py_row(self, state: int) -> list[int]:
        """The DFA row of ``state`` as a Python list (computed on demand, cached)."""
        row = self._py_rows.get(state)
        if row is None:
            self.lexer.ensure_rows(np.array([state], dtype=np.int32))
            row = self.lexer.table[state].tolist()
            self._grow_state_props()
            if len(self._py_rows) >= MAX_PY_ROWS:
                self._py_rows.clear()
            self._py_rows[state] = row
        return row

    # -- root walks -----------------------------------------------------------------------
    def root(self, lexer_state: int) -> WalkNode:
        """The walk of every token from a lexer state (cached; parser-independent)."""
        node = self.roots.get(lexer_state)
        if node is not None:
            return node
        self._grow_state_props()
        entries = self.lexer.state_key(lexer_state)
        lazy = self.lexer.lazy
        if self._lazy[lexer_state]:
            # a lazy lexeme matching the empty string ends before the token's first byte
            acc = self.lexer.accepting(lexer_state)
            node = WalkNode(self.info, np.zeros(0, np.int64), [Group(0, acc, FirstBytes(np.ones(256, bool)))])
        elif any(lazy[g] for g, _ in entries) or len(entries) > _MAX_COMBINED_LITERALS or sum(
                rx.literal_bytes(x) is None for _, x in entries) > _MAX_COMBINED:
            alive = self._alive_first_bytes(lexer_state)
            allowed, groups = self.walk(lexer_state, self._rows_by_first(alive), 0)
            groups = [g for g in groups if g.column > 0]
            acc = self.lexer.accepting(lexer_state)
            if acc:
                groups.append(Group(0, acc, FirstBytes(~alive)))
            node = WalkNode(self.info, allowed, groups)
        else:
            node = WalkNode(self.info, *self._combine(entries))
        if len(self.roots) >= MAX_ROOTS:
            self.roots.clear()
        self.roots[lexer_state] = node
        return node

    def _combine(self, entries) -> tuple[np.ndarray, list[Group], np.ndarray | None]:
        """Root walk of a state from the cached walks of its derivatives (see module doc):
        (explicit allowed rows, groups, packed mask of further allowed tokens or None)."""
        info = self.info
        walks = [self._node_walk(g, x) for g, x in entries]
        if not walks:
            return np.zeros(0, dtype=np.int64), [], None
        # column-0 deaths: tokens whose first byte no derivative takes
        first_alive = np.zeros(256, dtype=bool)
        for w in walks:
            first_alive |= w.first_alive(info)
        acc0 = tuple(g for (g, _), w in zip(entries, walks) if w.nullable)
        groups: list[Group] = [Group(0, acc0, FirstBytes(~first_alive))] if acc0 else []
        sizes = [w.size(info) for w in walks]
        big = max(range(len(walks)), key=sizes.__getitem__)
        patch = None
        if sizes[big] >= SPLIT_MIN_ROWS and (sum(sizes) - sizes[big]) * DOMINANT_RATIO > sizes[big]:
            # the others list many rows, but most may die at column 1 (declared names list
            # every token of their first letter): judge by the rows that need recomputing
            patch = self._dominant_patch(walks, big)
            if len(patch) * DOMINANT_RATIO > sizes[big]:
                patch = None
        if sizes[big] >= SPLIT_MIN_ROWS and (
                patch is not None or (sum(sizes) - sizes[big]) * DOMINANT_RATIO <= sizes[big]):
            allowed, crossing, extra = self._combine_dominant(walks, big, patch)
        else:
            allowed, crossing = self._combine_rows(walks)
            extra = None
        c_rows, c_death, c_bits = crossing
        if len(c_rows):
            # group the crossing rows by (column, accepting derivatives)
            if len(entries) <= 31:  # one sort key: column << 32 | bits
                key = c_death.astype(np.int64) << 32 | c_bits[0]
                order = np.argsort(key, kind="stable")
                keys = key[order][None, :]
                cuts = np.flatnonzero(np.diff(keys[0])) + 1
            else:
                keys = np.vstack((c_death.astype(np.int64)[None, :], c_bits))
                order = np.lexsort(keys)
                keys = keys[:, order]
                cuts = np.flatnonzero((keys[:, 1:] != keys[:, :-1]).any(axis=0)) + 1
            c_rows = c_rows[order]
            for start, r in zip(np.concatenate(([0], cuts)).tolist(), np.split(c_rows, cuts)):
                if len(keys) == 1:
                    k = int(keys[0, start])
                    column, words = k >> 32, [k & 0xFFFFFFFF]
                else:
                    column, words = int(keys[0, start]), keys[1:, start].tolist()
                acc = tuple(g for i, (g, _) in enumerate(entries)
                            if words[i // _BITS] >> (i % _BITS) & 1)
                groups.append(Group(column, acc, r))
        # column-0 boundaries of tokens some derivative takes but none keeps alive are
        # impossible: a derivative that takes the first byte has death > 0
        return allowed, groups, extra

    def _fates(self, walks: list[_NodeWalk], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Combined fate of ``rows`` (sorted, distinct, each taken by some walk, so dying at
        column 1 at the earliest) under ``walks``: (death, accbits).

        A flat walk contributes only its significant rows: the others die at column 1 without
        accepting, which changes nothing here -- so forty declared names, each listing every
        token of its first letter, cost their few rows that follow the name."""
        n = len(rows)
        death = np.ones(n, dtype=np.int16)
        parts: list[tuple[np.ndarray | None, np.ndarray, np.ndarray] | None] = []
        pos = None
        for w in walks:
            if w.tails is None and w.base is None:
                s_rows, s_death, s_acc = w.significant_fates()
                idx = np.minimum(np.searchsorted(rows, s_rows), max(n - 1, 0))
                found = rows[idx] == s_rows if n else np.zeros(len(s_rows), dtype=bool)
                idx, s_death, s_acc = idx[found], s_death[found], s_acc[found]
                death[idx] = np.maximum(death[idx], s_death)
                parts.append((idx, s_death, s_acc))
            else:
                if n > _DENSE_FATES:  # many rows: scatter the walk through a row -> slot map
                    if pos is None:
                        pos = np.full(len(self.info.lengths), -1, dtype=np.int64)
                        pos[rows] = np.arange(n)
                    d, a = w.scatter(self.info, pos, n)
                else:
                    d, a = w.fate(self.info, rows)
                np.maximum(death, d, out=death)
                parts.append((None, d, a))
        accbits = np.zeros((_words(len(walks)), n), dtype=np.int64)
        for i, (idx, d, a) in enumerate(parts):
            bit = np.int64(1) << np.int64(i % _BITS)
            if idx is None:
                accbits[i // _BITS] |= ((d == death) & a).astype(np.int64) * bit
            else:
                accbits[i // _BITS][idx[(d == death[idx]) & a]] |= bit
        return death, accbits

    def _combine_rows(self, walks: list[_NodeWalk]):
        """General combination over the union of the walks' rows."""
        if len(walks) == 1:
            w = walks[0]
            rows, death, accbits = w.rows, w.death, w.acc.astype(np.int64)[None, :]
        else:
            rows = _distinct(np.concatenate([w.rows for w in walks]), np.int64)
            death, accbits = self._fates(walks, rows)
        survive = death == self.info.lengths[rows]
        crossing = ~survive & accbits.any(axis=0) & (death > 0)
        return rows[survive], (rows[crossing], death[crossing], accbits[:, crossing])

    def _dominant_patch(self, walks: list[_NodeWalk], big: int) -> np.ndarray:
        """The rows whose fate the walks other than ``walks[big]`` may change (sorted).

        A row another derivative kills at column 1 without accepting cannot change the
        dominant walk's verdict when that walk takes the row's first byte (it then dies at
        column 1 or later, and the combined state dies at the latest of them)."""
        info = self.info
        d_first = walks[big].first_alive(info)
        others = []
        for i, w in enumerate(walks):
            if i != big:
                others.append(w.significant())
                if (w.first_alive(info) & ~d_first).any():
                    others.append(w.rows[~d_first[info.first_byte[w.rows]]])
        return _distinct(np.concatenate(others), np.int64) if others else np.zeros(0, np.int64)

    def _combine_dominant(self, walks: list[_NodeWalk], big: int, patch: np.ndarray | None = None):
        """Combination when one walk lists most rows (a property key that may be any string
        or a declared name): that walk's own results, as a packed mask and its few crossing
        rows, with only the rows the other walks may change recomputed."""
        info = self.info
        d = walks[big]
        solo, c_rows_d, c_death_d = self._solo(d)
        if patch is None:
            patch = self._dominant_patch(walks, big)
        death, accbits = self._fates(walks, patch)
        survive = death == info.lengths[patch]
        # a row the dominant walk keeps alive stays alive combined (the state dies at the
        # latest of its derivatives), so its mask needs no clearing; its crossing rows in
        # the patch are replaced by the combined fate
        keep = _without_mask(c_rows_d, patch)
        cross = ~survive & accbits.any(axis=0) & (death > 0)
        dominant_bits = np.zeros((len(accbits), int(keep.sum())), dtype=np.int64)
        dominant_bits[big // _BITS] = 1 << (big % _BITS)
        crossing = (np.concatenate((c_rows_d[keep], patch[cross])),
                    np.concatenate((c_death_d[keep], death[cross])),
                    np.concatenate((dominant_bits, accbits[:, cross]), axis=1))
        return patch[survive], crossing, solo

    def _solo(self, w: _NodeWalk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A walk as a state of its own: (packed allowed mask, crossing rows sorted, their
        death columns); cached on the walk, read-only. For a split walk the mask is assembled
        per successor node from a reference mask of that node (see :meth:`_successor_mask`)."""
        if w._solo is None:
            w._solo = self._solo_uncached(w)
            w._solo[0].flags.writeable = False
        return w._solo

    def _solo_uncached(self, w: _NodeWalk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        info = self.info
        if w.base is not None:
            packed, c_rows, c_death = self._solo(w.base)
            p_rows, p_death, p_acc = w.patch
            packed = packed.copy()
            ids = info.text_ids[p_rows].astype(np.int64)
            clear_bits(packed, ids)
            survive = p_death == info.lengths[p_rows]
            set_bits(packed, ids[survive])
            keep = _without_mask(c_rows, p_rows)
            c = ~survive & p_acc & (p_death > 0)
            c_rows = np.concatenate((c_rows[keep], p_rows[c]))
            c_death = np.concatenate((c_death[keep], p_death[c]))
        elif w.tails is None:  # one flat walk reads like one tail (rows sorted)
            flat = _Tail(w.rows, w.death, w.acc)
            return info.mask_from_ids(flat.allowed_ids(info)), *flat.crossing(info)
        else:
            by_node: dict[int, list[int]] = {}
            for b, (node, _) in w.tails.items():
                by_node.setdefault(node, []).append(b)
            packed = None
            for node, byts in by_node.items():
                part = self._successor_mask(node, byts, w.tails)
                packed = part if packed is None else np.bitwise_or(packed, part, out=packed)
            crossings = [t.crossing(info) for _, t in w.tails.values()]
            c_rows = np.concatenate([c[0] for c in crossings])
            c_death = np.concatenate([c[1] for c in crossings])
        order = np.argsort(c_rows, kind="stable")
        return packed, c_rows[order], c_death[order]

    def _successor_mask(self, node: int, byts: list[int], tails: dict[int, tuple[int, _Tail]]) -> np.ndarray:
        """Packed allowed tokens of the tails of ``node`` for first bytes ``byts`` (a new
        array). Tails are per (node, byte), so this is a reference mask of the node with
        whole first-byte buckets removed or added: keys with different prefixes differ only
        in the few bytes that continue a declared name."""
        info = self.info
        want = np.zeros(256, dtype=bool)
        want[byts] = True
        ref = self._group_refs.get(node)
        if ref is None:
            packed = info.mask_from_ids(np.concatenate([tails[b][1].allowed_ids(info) for b in byts]))
            if len(self._group_refs) >= MAX_GROUP_REFS:
                self._group_refs.clear()
            self._group_refs[node] = (want, packed)
            return packed.copy()
        ref_want, ref_packed = ref
        out = ref_packed.copy()
        drop = np.flatnonzero(ref_want & ~want)
        if len(drop):
            rows = np.concatenate([info.rows_by_first[b] for b in drop.tolist()])
            clear_bits(out, info.text_ids[rows].astype(np.int64))
        add = np.flatnonzero(want & ~ref_want)
        if len(add):
            set_bits(out, np.concatenate([tails[b][1].allowed_ids(info) for b in add.tolist()]))
        return out

    def _node_walk(self, gid: int, node: int) -> _NodeWalk:
        """Fate of every token under the single derivative ``node`` (cached per node)."""
        hit = self._node_walks.get(node)
        if hit is not None:
            return hit
        lit = rx.literal_bytes(node)
        lits = None if lit is not None else rx.literal_set(node, MAX_LITERAL_SET)
        if lit is not None or lits is not None:
            result = self._literal_set_walk([lit] if lit is not None else lits)
            self._cache_node_walk(node, result, len(result.rows))
            return result
        lexer = self.lexer
        with lexer._lock:
            state = lexer._intern(((gid, node),))
        self._grow_state_props()
        alive = self._alive_first_bytes(state)
        rows = self._rows_by_first(alive)
        nullable = bool(rx.nullable(node))
        capped = rx.cap_counters(node, CAP_BYTES) if len(rows) >= SPLIT_MIN_ROWS else node
        if capped != node:
            # tokens shorter than CAP_BYTES cannot tell the node from its capped twin, whose
            # walk is shared by all counter positions: walk only the long tokens
            base = self._node_walk(gid, capped)
            k = self._indistinct_below(node, capped)
            n_long = int(self.info.n_active[k - 1]) if k <= self.info.max_len else 0
            long_rows = self.info.all_rows[:n_long]
            long_rows = long_rows[alive[self.info.first_byte[long_rows]]]
            if len(long_rows) <= TRANSITION_WALK_ROWS:
                death, acc = self._transition_walk(state, long_rows)
            else:
                death, acc = self._death_walk(state, long_rows, 0)
            result = _NodeWalk(nullable, base=base, patch=(long_rows, death, acc))
            n = len(long_rows)
        elif len(rows) >= SPLIT_MIN_ROWS:
            result = _NodeWalk(nullable, tails=self._split_walk(state))
            n = 0
        else:
            death, acc = self._walk_deduped(node, state, rows, 0)
            taken = death > 0
            if not taken.all():
                rows, death, acc = rows[taken], death[taken], acc[taken]
            result = _NodeWalk(nullable, rows, death, acc)
            n = len(rows)
        self._cache_node_walk(node, result, n)
        return result

    def _transition_walk(self, state: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_death_walk` from column 0 for a few long tokens, one lexer transition at a
        time: the states they pass (a length counter counting down) are new and seen by no
        other token, so whole DFA rows (one derivative per byte class) would be wasted."""
        lexer, token_bytes, text_ids = self.lexer, self.info.token_bytes, self.info.text_ids
        nxt, accepting = lexer.next, lexer.accepting
        death = np.empty(len(rows), dtype=np.int16)
        acc = np.zeros(len(rows), dtype=bool)
        for i, r in enumerate(rows.tolist()):
            s = state
            data = token_bytes[text_ids[r]]
            for j, b in enumerate(data):
                t = nxt(s, b)
                if t == 0:
                    death[i] = j
                    acc[i] = bool(accepting(s))
                    break
                s = t
            else:
                death[i] = len(data)
        self._grow_state_props()
        return death, acc

    def _literal_set_walk(self, lits: list[bytes]) -> _NodeWalk:
        """The walk of a literal (a property name, an enum value...) or a union of them, read
        off the prefix tree with no lexer rows: a token dies where it leaves the last literal
        it follows (its longest common prefix with any of them), accepting if the bytes
        before are one of them."""
        info, trie = self.info, self.info.trie
        if len(lits) == 1 and lits[0]:  # one literal: its common prefix is the death column
            lit = lits[0]
            rows = info.rows_by_first[lit[0]]
            death = trie.common_prefix(lit, trie.position[rows]).astype(np.int16)
            return _NodeWalk(False, rows, death, (death == len(lit)) & (info.lengths[rows] > len(lit)))
        by_first: dict[int, list[bytes]] = {}
        for u in lits:
            if u:
                by_first.setdefault(u[0], []).append(u)
        parts = []
        for b, us in sorted(by_first.items()):
            rows = info.rows_by_first[b]
            if not len(rows):
                continue
            pos, lengths = trie.position[rows], info.lengths[rows]
            death = np.zeros(len(rows), dtype=np.int64)
            acc = np.zeros(len(rows), dtype=bool)
            for u in us:
                lcp = trie.common_prefix(u, pos)
                spelled = (lcp == len(u)) & (lengths > lcp)  # the token spells u, then goes on
                acc = np.where(lcp > death, spelled, acc | (spelled & (lcp == death)))
                death = np.maximum(death, lcp)
            parts.append((rows, death.astype(np.int16), acc))
        if not parts:
            return _NodeWalk(b"" in lits, np.zeros(0, np.int64), np.zeros(0, np.int16), np.zeros(0, bool))
        return _NodeWalk(b"" in lits, *(np.concatenate(x) for x in zip(*parts)))

    def _indistinct_below(self, node: int, capped: int) -> int:
        """A length ``k >= CAP_BYTES`` such that no token shorter than ``k`` tells ``node``
        from ``capped`` (its counters capped at CAP_BYTES): the largest of a few candidates
        for which capping at ``k`` gives the same node. Past the longest token, the capped
        walk is exact for every token (a string with ``maxLength: 140`` at its start)."""
        for k in (self.info.max_len + 1, 64, 48, 40):
            if k > CAP_BYTES and rx.cap_counters(node, k) == capped:
                return k
        return CAP_BYTES

    def _cache_node_walk(self, node: int, result: _NodeWalk, n: int) -> None:
        self._node_walk_rows += n
        if self._node_walk_rows > MAX_NODE_WALK_ROWS:
            self._node_walks.clear()
            self._tails.clear()
            self._group_refs.clear()
            self._node_walk_rows = n
        self._node_walks[node] = result

    def _split_walk(self, state: int) -> dict[int, tuple[int, _Tail]]:
        """A node walk as one tail per first byte, from the walks of the byte's successor.

        The successor on byte ``b`` decides the fate of every token starting with ``b``, and
        successors repeat across nodes: inside a property key that must not spell a declared
        name, every byte that leaves the declared names leads to the plain-string node,
        whatever the prefix and whatever the object. So tails are cached per ``(successor
        node, first byte)`` and a new key prefix walks only the buckets of the bytes that
        continue a declared name.
        """
        lexer = self.lexer
        succ = lexer.table[state]
        self._grow_state_props()
        by_first = self.info.rows_by_first
        tails: dict[int, tuple[int, _Tail]] = {}
        missing: dict[int, list[int]] = {}
        for b in np.flatnonzero(succ > 0).tolist():
            if not len(by_first[b]):
                continue
            t = int(succ[b])
            node = lexer.state_key(t)[0][1]
            hit = self._tails.get((node, b))
            if hit is not None:
                tails[b] = (node, hit)
            else:
                missing.setdefault(t, []).append(b)
        for t, byts in missing.items():
            node = lexer.state_key(t)[0][1]
            for b, tail in self._tails_for(t, byts).items():
                tails[b] = (node, tail)
        return tails

    def _tails_for(self, t: int, byts: list[int]) -> dict[int, _Tail]:
        """The tails (tokens starting with each of ``byts``, walked from column 1 in the
        single-lexeme state ``t`` they all lead to); computed and cached per (node, byte)."""
        gid, node = self.lexer.state_key(t)[0]
        out: dict[int, _Tail] = {}
        todo = []
        for b in byts:
            hit = self._tails.get((node, b))
            if hit is not None:
                out[b] = hit
            else:
                todo.append(b)
        if not todo:
            return out
        by_first = self.info.rows_by_first
        split = rx.split_negation(node) if NEGATION_TAILS and rx.has_boolean(node) else None
        if split is not None:
            rest = []
            for b in todo:
                tail = self._negation_tail(gid, split, b)
                if tail is None:
                    rest.append(b)
                else:
                    out[b] = self._cache_tail(node, b, tail)
            todo = rest
            if not todo:
                return out
        buckets = [by_first[b] for b in todo]
        rows = np.concatenate(buckets) if len(buckets) > 1 else buckets[0]
        if len(rows) >= TRIE_MIN_ROWS:
            # many tokens: walk their distinct prefixes, then read each row's fate
            death_at, acc_at = self.info.trie.death_walk(todo, t, self._step, self._acc_of)
            at = self.info.trie.position[rows]
            death, acc = death_at[at], acc_at[at]
        else:
            death, acc = self._walk_deduped(node, t, rows, 1)
        start = 0
        for b, bucket in zip(todo, buckets):
            end = start + len(bucket)
            out[b] = self._cache_tail(node, b, _Tail(bucket, death[start:end], acc[start:end]))
            start = end
        return out

    def _cache_tail(self, node: int, b: int, tail: _Tail) -> _Tail:
        self._tails[(node, b)] = tail
        self._node_walk_rows += len(tail.rows)
        return tail

    def _negation_tail(self, gid: int, split: tuple[int, int, int], b: int) -> _Tail | None:
        """The tail for byte ``b`` of a node ``(A & ~B) rest`` where ``B`` is a few literals
        (a property key that must not spell a declared name): the tail of ``A rest`` --
        shared by every object, A being "any string" -- with one change, read off the prefix
        tree without lexer rows: a token that spells a literal of ``B`` and then starts
        ``rest`` dies there, not accepting. None when the shape does not allow it (then the
        bucket is walked as usual).

        Why only those tokens: ``~B`` rejects nothing but the literals themselves, so the two
        nodes part only where the intersection would end on one, and it ends only where
        ``rest`` begins -- which, checked per literal, ``A`` cannot continue into.
        """
        A, neg, rest = split
        lits = rx.literal_set(neg)
        if lits is None or rest == rx.EPSILON:
            return None
        q = rx.first_bytes(rest)
        qs = [x for x in range(256) if q >> x & 1]
        if len(qs) * len(lits) > MAX_NEGATION_PREFIXES:
            return None
        for u in lits:
            a = A
            for x in u:
                a = rx.derivative(a, x)
                if a == rx.NOTHING:
                    break
            if a != rx.NOTHING and rx.first_bytes(a) & q:
                return None  # A could go on with a byte that starts rest
        lexer, trie = self.lexer, self.info.trie
        with lexer._lock:
            pos_state = lexer._intern(((gid, rx.concat(A, rest)),))
        self._grow_state_props()
        base = self._tails_for(pos_state, [b])[b]
        bucket = base.rows
        death = acc = None
        for u in lits:
            for x in qs:
                prefix = bytes((b,)) + u + bytes((x,))
                lo, hi = trie.prefix_ranges(prefix)
                if len(lo) < len(prefix):
                    continue  # no token spells it
                idx = np.searchsorted(bucket, trie.row_at[lo[-1] : hi[-1]])
                column = len(prefix) - 1
                idx = idx[base.death[idx] > column]  # the others die no later under both
                if len(idx):
                    if death is None:
                        death, acc = base.death.copy(), base.acc.copy()
                    death[idx] = column
                    acc[idx] = False
        return base if death is None else _Tail(bucket, death, acc)

    def _walk_deduped(self, node: int, state: int, rows: np.ndarray, column: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_death_walk`, walking one token per class string when ``rows`` are many."""
        view = self._view(node) if len(rows) >= VIEW_MIN_ROWS else None
        if view is None:
            return self._death_walk(state, rows, column)
        inv = view.inverse[rows]
        present = np.zeros(len(view.reps), dtype=bool)
        present[inv] = True
        distinct = np.flatnonzero(present)
        death_r, acc_r = self._death_walk(state, view.reps[distinct], column)
        slot = np.cumsum(present) - 1
        back = slot[inv]
        return death_r[back], acc_r[back]

    def _death_walk(self, state: int, rows: np.ndarray, column: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the column of the byte that kills ``state`` (== length if none) and
        whether the state before that byte accepts. ``state`` is the state after the first
        ``column`` bytes. For states without lazy lexemes."""
        info = self.info
        columns, lengths = info.columns, info.lengths
        n = len(rows)
        death = np.empty(n, dtype=np.int16)
        acc = np.zeros(n, dtype=bool)
        idx = np.arange(n)
        cur = rows
        states = np.full(n, state, dtype=np.int32)
        j = column
        while len(idx):
            done = lengths[cur] == j
            if done.any():
                death[idx[done]] = j
                keep = ~done
                idx, cur, states = idx[keep], cur[keep], states[keep]
                if not len(idx):
                    break
            nxt = self._step(states, columns[j].take(cur))
            died = nxt == 0
            if died.any():
                death[idx[died]] = j
                acc[idx[died]] = self._acc[states[died]]
                live = ~died
                idx, cur, nxt = idx[live], cur[live], nxt[live]
            j += 1
            states = nxt
        return death, acc

    def _view(self, node: int) -> _ClassView | None:
        """Tokens deduplicated by class string under the deep partition of ``node``, valid
        for all its derivatives (so a string with a length counter builds one view for all
        its counter states, and every plain JSON string shares one). Built on the second
        request of a partition: a first one walks directly, since building costs about one
        walk."""
        pid = rx.deep_partition([node])
        if len(rx.partition_arrays(pid)[1]) > VIEW_MAX_CLASSES:
            return None  # too many classes: few tokens share a class string
        if pid in self._views:
            return self._views[pid]
        n = self._view_requests.get(pid, 0) + 1
        self._view_requests[pid] = n
        if n < VIEW_AFTER_REQUESTS:
            return None
        view = _ClassView.build(self.info, pid)
        if len(self._views) >= _MAX_VIEWS:
            self._views.pop(next(iter(self._views)))
        self._views[pid] = view
        return view

    # -- continuations --------------------------------------------------------------------
    def child(self, node: WalkNode, acc: tuple[int, ...], lstart: int) -> WalkNode:
        """Continue the tokens of ``node`` that ended lexemes ``acc`` from restart ``lstart``.

        Cached on the node: it depends only on where the lexer restarts, which the parser
        decides, not on the parser state itself.
        """
        key = (acc, lstart)
        child = node.children.get(key)
        if child is not None:
            return child
        # the same tokens continued from the same restart, under another parent (a new root
        # for a new lexer state often ends lexemes on the same tokens): walked once
        groups_in = node.by_acc[acc]
        signature = (lstart, tuple((c, r.mask.tobytes() if isinstance(r, FirstBytes) else r.tobytes())
                                   for c, r in groups_in))
        child = self._shared_children.get(signature)
        if child is not None:
            node.children[key] = child
            return child
        child = self._continue(groups_in, lstart)
        node.children[key] = child
        size = sum(len(b) for _, b in signature[1])
        self._shared_bytes += size
        if self._shared_bytes > MAX_SHARED_CHILD_BYTES:
            self._shared_children.clear()
            self._shared_bytes = size
        self._shared_children[signature] = child
        return child

    def _continue(self, groups_in: list[tuple[int, Rows]], lstart: int) -> WalkNode:
        """The walk node continuing ``groups_in`` from lexer restart ``lstart``."""
        info = self.info
        allowed: list[np.ndarray] = []
        extra: np.ndarray | None = None
        groups: list[Group] = []
        self._grow_state_props()
        for column, rows in groups_in:
            if isinstance(rows, FirstBytes):
                # tokens that end the lexeme before their first byte: the restart state's
                # root walk (cached), restricted to them
                ok, ok_extra, sub = self._restrict(self.root(lstart), rows)
                allowed.append(ok)
                if ok_extra is not None:
                    extra = ok_extra if extra is None else extra | ok_extra
                groups.extend(sub)
                continue
            at_end = info.lengths[rows] == column  # bytes end exactly at a lazy finish
            if at_end.any():
                allowed.append(rows[at_end])
                rows = rows[~at_end]
            if not len(rows):
                continue
            if self._lazy[lstart]:
                groups.append(Group(column, self.lexer.accepting(lstart), rows))
                continue
            ok, sub = self.walk(lstart, rows, column)
            allowed.append(ok)
            groups.extend(sub)
        rows_ok = np.concatenate(allowed) if allowed else np.zeros(0, np.int64)
        return WalkNode(info, rows_ok, groups, extra)

    def _restrict(self, node: WalkNode, rows: FirstBytes):
        """``node``'s results restricted to the tokens whose first byte is in ``rows``:
        (explicit allowed rows, packed allowed mask or None, groups)."""
        member_first = rows.mask
        first = self.info.first_byte
        explicit = node._rows
        ok = explicit[member_first[first[explicit]]]
        extra = None
        if node.extra is not None:
            extra = node.extra & self.info.first_byte_mask(member_first)
        groups = []
        for acc, parts in node.by_acc.items():
            for column, grows in parts:
                if isinstance(grows, FirstBytes):
                    keep: Rows = FirstBytes(grows.mask & member_first)
                    if not keep.mask.any():
                        continue
                else:
                    keep = grows[member_first[first[grows]]]
                    if not len(keep):
                        continue
                groups.append(Group(column, acc, keep))
        return ok, extra, groups


# -- byte-class deduplication -------------------------------------------------------------

class _ClassView:
    """All text tokens grouped by class string (sequence of byte classes) under one partition."""

    __slots__ = ("inverse", "reps")

    _HASH_MUL = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, reps: np.ndarray, inverse: np.ndarray) -> None:
        self.reps = reps  # representative row of each class string
        self.inverse = inverse  # row -> index of its class string

    @classmethod
    def build(cls, info: TokenizerInfo, pid: int) -> _ClassView | None:
        """Hash class strings column by column (rows are sorted by length, so column ``j``
        is a prefix of rows), dedupe, and verify exactly (None on a hash collision)."""
        labels = np.frombuffer(rx.partition_labels(pid), dtype=np.uint8).astype(np.uint64) + np.uint64(1)
        h = info.lengths.astype(np.uint64)
        with np.errstate(over="ignore"):
            for j in range(info.max_len):
                k = int(info.n_active[j])
                if k == 0:
                    break
                h[:k] = h[:k] * cls._HASH_MUL + labels[info.columns[j][:k]]
        # group equal hashes by sorting (numpy's hash-based ``unique`` is slower here)
        order = np.argsort(h, kind="stable")
        sh = h[order]
        starts = np.concatenate(([True], sh[1:] != sh[:-1]))
        reps = order[starts]
        inverse = np.empty(len(h), dtype=np.int64)
        inverse[order] = np.cumsum(starts) - 1
        mapped = reps[inverse]
        if not (info.lengths[mapped] == info.lengths).all():
            return None
        for j in range(info.max_len):
            k = int(info.n_active[j])
            if k == 0:
                break
            col = info.columns[j]
            if not (labels[col[:k]] == labels[col[mapped[:k]]]).all():
                return None
        return cls(reps.astype(np.int64), inverse.astype(np.int64))


_BITS = 62  # derivatives per int64 word of accepting bits


def _words(n: int) -> int:
    """int64 words holding one accepting bit per derivative of ``n``."""
    return max(1, (n + _BITS - 1) // _BITS)


def _distinct(values: np.ndarray, dtype=np.int32) -> np.ndarray:
    """Sorted distinct values (numpy's hash-based ``unique`` is slow on this machine's numpy)."""
    s = np.sort(values)
    if len(s) > 1:
        s = s[np.concatenate(([True], s[1:] != s[:-1]))]
    return s.astype(dtype, copy=False)


def _without_mask(sorted_rows: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """bool per element of ``sorted_rows``: not in ``drop``."""
    keep = np.ones(len(sorted_rows), dtype=bool)
    if len(drop) and len(sorted_rows):
        pos = np.searchsorted(sorted_rows, drop)
        valid = pos < len(sorted_rows)
        pos = pos[valid]
        keep[pos[sorted_rows[pos] == drop[valid]]] = False
    return keep



def _split_by_state(states: np.ndarray, rows: np.ndarray):
    """Yield (state, rows) per distinct state."""
    if not len(states):
        return
    if (states == states[0]).all():
        yield int(states[0]), rows
        return
    order = np.argsort(states, kind="stable")
    states, rows = states[order], rows[order]
    cuts = np.nonzero(np.diff(states))[0] + 1
    for s, r in zip(np.split(states, cuts), np.split(rows, cuts)):
        yield int(s[0]), r


def walker_for(lexer, info: TokenizerInfo) -> VocabWalker:
    """The shared :class:`VocabWalker` of (lexer DFA, tokenizer)."""
    return info.attached(info._walkers, lexer, lambda: VocabWalker(lexer, info), _MAX_WALKERS)
