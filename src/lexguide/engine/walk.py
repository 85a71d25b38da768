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
another schema...). Large per-node walks first deduplicate tokens by their class string under
the byte partition of the node (262k tokens → a few hundred for a JSON string body).
"""

from __future__ import annotations

import threading
from typing import NamedTuple, Union

import numpy as np

from lexguide.engine.tokenizer_info import TokenizerInfo
from lexguide.grammar import rx

__all__ = ["VocabWalker", "WalkNode", "walker_for"]

#: node walks over at least this many tokens deduplicate them by byte class first
VIEW_MIN_ROWS = 4096
#: a partition's view is built when this many node walks asked for it
VIEW_AFTER_REQUESTS = 2
_MAX_VIEWS = 256
_MAX_WALKERS = 3
#: bounds of the walk caches of one tokenizer; past them the cache is dropped and rebuilt on
#: demand (walks are deterministic, so this only costs time)
MAX_ROOTS = 20_000
MAX_NODE_WALK_ROWS = 64 << 20  # total rows held by cached per-node walks (~11 bytes each)
#: states with more alive lexemes than this are walked directly, not combined per lexeme
_MAX_COMBINED = 30


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
    ``(acc, restart state)``."""

    __slots__ = ("_packed", "by_acc", "children", "ids", "info", "rows")

    def __init__(self, info: TokenizerInfo, rows: np.ndarray, groups: list[Group]) -> None:
        self.info = info
        self.rows = rows
        self.ids = info.text_ids[rows].astype(np.int64)
        self.by_acc: dict[tuple[int, ...], list[tuple[int, Rows]]] = {}
        for column, acc, grows in groups:
            self.by_acc.setdefault(acc, []).append((column, grows))
        self.children: dict[tuple[tuple[int, ...], int], WalkNode] = {}
        self._packed: np.ndarray | None = None

    def packed(self) -> np.ndarray:
        """The allowed tokens as a packed bitmask (built on first use)."""
        if self._packed is None:
            self._packed = self.info.mask_from_ids(self.ids)
        return self._packed


class _NodeWalk(NamedTuple):
    """Fate of every token under one regex node: rows not listed die at column 0."""

    rows: np.ndarray  # rows whose first byte the node takes
    death: np.ndarray  # int16: column of the byte that kills the node; == length if none does
    acc: np.ndarray  # bool: node accepts the bytes before ``death``
    nullable: bool  # the node accepts the empty string (fate of unlisted rows)


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
        elif any(lazy[g] for g, _ in entries) or len(entries) > _MAX_COMBINED:
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

    def _combine(self, entries) -> tuple[np.ndarray, list[Group]]:
        """Root walk of a state from the cached walks of its derivatives (see module doc)."""
        info = self.info
        walks = [self._node_walk(g, x) for g, x in entries]
        if not walks:
            return np.zeros(0, dtype=np.int64), []
        # column-0 deaths: tokens whose first byte no derivative takes
        first_alive = np.zeros(256, dtype=bool)
        for w in walks:
            first_alive[info.first_byte[w.rows]] = True
        acc0 = tuple(g for (g, _), w in zip(entries, walks) if w.nullable)
        groups: list[Group] = [Group(0, acc0, FirstBytes(~first_alive))] if acc0 else []
        if len(walks) == 1:
            w = walks[0]
            rows, death, accbits = w.rows, w.death, w.acc.astype(np.int64)
        else:
            member = np.zeros(len(info.lengths), dtype=bool)
            for w in walks:
                member[w.rows] = True
            rows = np.nonzero(member)[0]
            pos = np.full(len(info.lengths), -1, dtype=np.int64)
            pos[rows] = np.arange(len(rows))
            deaths = np.zeros((len(walks), len(rows)), dtype=np.int16)
            accs = np.zeros((len(walks), len(rows)), dtype=bool)
            for i, w in enumerate(walks):
                accs[i] = w.nullable  # rows the node does not list die at column 0
                deaths[i, pos[w.rows]] = w.death
                accs[i, pos[w.rows]] = w.acc
            death = deaths.max(axis=0)
            accbits = np.zeros(len(rows), dtype=np.int64)
            for i in range(len(walks)):
                accbits |= ((deaths[i] == death) & accs[i]).astype(np.int64) << i
        lengths = info.lengths[rows]
        survive = death == lengths
        allowed = rows[survive]
        crossing = ~survive & (accbits != 0) & (death > 0)
        if crossing.any():
            c_rows, c_death, c_bits = rows[crossing], death[crossing], accbits[crossing]
            key = c_death.astype(np.int64) << 32 | c_bits
            order = np.argsort(key, kind="stable")
            key, c_rows = key[order], c_rows[order]
            cuts = np.nonzero(np.diff(key))[0] + 1
            for k, r in zip(np.split(key, cuts), np.split(c_rows, cuts)):
                column, bits = int(k[0] >> 32), int(k[0] & 0xFFFFFFFF)
                acc = tuple(g for i, (g, _) in enumerate(entries) if bits >> i & 1)
                groups.append(Group(column, acc, r))
        # column-0 boundaries of tokens some derivative takes but none keeps alive are
        # impossible: a derivative that takes the first byte has death > 0
        return allowed, groups

    def _node_walk(self, gid: int, node: int) -> _NodeWalk:
        """Fate of every token under the single derivative ``node`` (cached per node)."""
        hit = self._node_walks.get(node)
        if hit is not None:
            return hit
        lexer = self.lexer
        with lexer._lock:
            state = lexer._intern(((gid, node),))
        self._grow_state_props()
        alive = self._alive_first_bytes(state)
        rows = self._rows_by_first(alive)
        view = self._view(gid) if len(rows) >= VIEW_MIN_ROWS else None
        if view is not None:
            # walking every class string covers the unlisted rows too: they die at column 0
            death_r, acc_r = self._death_walk(state, view.reps)
            rows = self.info.all_rows
            death, acc = death_r[view.inverse], acc_r[view.inverse]
        else:
            death, acc = self._death_walk(state, rows)
        taken = death > 0
        if not taken.all():
            rows, death, acc = rows[taken], death[taken], acc[taken]
        result = _NodeWalk(rows, death, acc, bool(rx.nullable(node)))
        self._node_walk_rows += len(rows)
        if self._node_walk_rows > MAX_NODE_WALK_ROWS:
            self._node_walks.clear()
            self._node_walk_rows = len(rows)
        self._node_walks[node] = result
        return result

    def _death_walk(self, state: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the column of the byte that kills ``state`` (== length if none) and
        whether the state before that byte accepts. For states without lazy lexemes."""
        info = self.info
        columns, lengths = info.columns, info.lengths
        n = len(rows)
        death = np.empty(n, dtype=np.int16)
        acc = np.zeros(n, dtype=bool)
        idx = np.arange(n)
        cur = rows
        states = np.full(n, state, dtype=np.int32)
        j = 0
        while len(idx):
            nxt = self._step(states, columns[j].take(cur))
            died = nxt == 0
            if died.any():
                death[idx[died]] = j
                acc[idx[died]] = self._acc[states[died]]
                live = ~died
                idx, cur, nxt = idx[live], cur[live], nxt[live]
            j += 1
            done = lengths[cur] == j
            if done.any():
                death[idx[done]] = j
                keep = ~done
                idx, cur, nxt = idx[keep], cur[keep], nxt[keep]
            states = nxt
        return death, acc

    def _view(self, gid: int) -> _ClassView | None:
        """Tokens deduplicated by class string under the deep partition of lexeme ``gid``'s
        regex, valid for all its derivatives (so a string with a length counter builds one
        view for all its counter states). Built on the second request of a partition: a first
        one walks directly, since building costs about one walk."""
        pid = rx.deep_partition([self.lexer.lexeme_rxs[gid]])
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
        info = self.info
        allowed: list[np.ndarray] = []
        groups: list[Group] = []
        self._grow_state_props()
        for column, rows in node.by_acc[acc]:
            if isinstance(rows, FirstBytes):
                # tokens that end the lexeme before their first byte: the restart state's
                # root walk (cached), restricted to them
                ok, sub = self._restrict(self.root(lstart), rows)
                allowed.append(ok)
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
        child = WalkNode(info, rows_ok, groups)
        node.children[key] = child
        return child

    def _restrict(self, node: WalkNode, rows: FirstBytes) -> tuple[np.ndarray, list[Group]]:
        """``node``'s results restricted to the tokens whose first byte is in ``rows``."""
        member_first = rows.mask
        first = self.info.first_byte
        ok = node.rows[member_first[first[node.rows]]]
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
        return ok, groups


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
        _, reps, inverse = np.unique(h, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
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


def _distinct(states: np.ndarray) -> np.ndarray:
    """Sorted distinct values (numpy's hash-based ``unique`` is slow on this machine's numpy)."""
    s = np.sort(states)
    if len(s) > 1:
        s = s[np.concatenate(([True], s[1:] != s[:-1]))]
    return s.astype(np.int32)


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
