"""Token masks: walk the vocabulary through the lexer DFA with numpy, split by lexeme boundary.

For a parse state ``(set_id, lexer_state, pending)`` a token is allowed iff feeding its bytes
keeps the parse alive. The walk runs all candidate tokens in lock step, one gather
``table[states, bytes[:, j]]`` per byte position, and classifies each token:

* it stays inside the current lexeme to its last byte → allowed; this part depends only on the
  lexer state, so it is computed once per lexer state and cached (``_LexerWalk``);
* at byte ``j`` the lexeme ends (no alive lexeme takes the byte, and the state before accepts;
  or a lazy lexeme accepts) → the token crosses a boundary. Tokens are grouped by
  ``(j, state before)``: the parser advances once per group (memoised per Earley set), and only
  the group's remaining bytes are walked from the new lexer state, recursively.

Full masks are memoised per ``(set_id, lexer_state, pending)``: the canonical Earley sets make
repeated structure (list items, nested objects) hit the cache. Candidates are pruned by first
byte so a lexer state that admits few first bytes walks few tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from lexguide.errors import GrammarError
from lexguide.grammar.earley import DEAD_SET
from lexguide.grammar.grammar import Grammar
from lexguide.grammar.lexparser import LexParser, ParseState
from lexguide.engine.tokenizer_info import TokenizerInfo

__all__ = ["MaskEngine"]

DEFAULT_MASK_CACHE = 50_000


class _Group(NamedTuple):
    column: int  # byte position at which the lexeme ended
    pre_state: int  # lexer state holding the finished lexeme
    rows: np.ndarray  # token rows (TokenizerInfo matrix rows) in this group


_MAX_EMPTY_CHAIN = 64
_SMALL = 2048  # below this many ids, set bits directly instead of OR-ing a packed mask


class _WalkNode:
    """Tokens walked from one lexer (re)start: those allowed without the parser's help, and
    those that end a lexeme, grouped by the lexer state that ends it (the parser decides
    whether and where they go on; ``children`` caches that per restart state)."""

    __slots__ = ("info", "ids", "by_pre", "children", "_packed")

    def __init__(self, info: TokenizerInfo, rows: np.ndarray, groups: list[_Group]) -> None:
        self.info = info
        self.ids = info.text_ids[rows].astype(np.int64)
        self.by_pre: dict[int, list[tuple[int, np.ndarray]]] = {}
        for column, pre, grows in groups:
            self.by_pre.setdefault(pre, []).append((column, grows))
        self.children: dict[tuple[int, int], _WalkNode] = {}
        self._packed: np.ndarray | None = None

    def packed(self) -> np.ndarray:
        if self._packed is None:
            self._packed = self.info.mask_from_ids(self.ids)
        return self._packed


class MaskEngine:
    """Mask computation for one grammar and one tokenizer; shared by all their matchers."""

    def __init__(self, grammar: Grammar, info: TokenizerInfo, *, max_cached_masks: int = DEFAULT_MASK_CACHE):
        self.grammar = grammar
        self.info = info
        self.lp: LexParser = grammar.lexparser
        self.lexer = self.lp.lexer
        self._acc = np.zeros(0, dtype=bool)  # lexer state -> accepts some lexeme
        self._lazy = np.zeros(0, dtype=bool)  # lexer state -> accepts a lazy lexeme
        self._n_props = 0  # states whose properties are filled in
        self._roots: dict[int, _WalkNode] = {}
        self._eos = np.array(sorted(info.eos_ids), dtype=np.int64)
        self._masks: OrderedDict[ParseState, np.ndarray] = OrderedDict()
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
            if ts.any:
                ids = set(range(info.vocab_size))
            elif ts.negated:
                ids = set(range(info.vocab_size)) - ids
            out[idx] = np.array(sorted(ids), dtype=np.int64)
        return out

    def token_lexemes_of(self, token_id: int) -> frozenset[int]:
        return frozenset(i for i, ids in self._token_lexeme_ids.items() if _contains(ids, token_id))

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
        lexer.ensure_rows(np.unique(states).astype(np.int32))
        nxt = lexer.table.ravel().take(states.astype(np.int64) * 256 + byts)
        if lexer.n_states > self._n_props:
            self._grow_state_props()
        return nxt

    # -- the walk -------------------------------------------------------------------------
    def _walk(self, state: int, rows: np.ndarray, column: int) -> tuple[np.ndarray, list[_Group]]:
        """Walk ``rows`` from byte ``column`` on, starting in lexer ``state``.

        Returns (rows allowed without leaving the lexeme or ending exactly at a lazy finish,
        boundary groups).
        """
        info = self.info
        columns, lengths = info.columns, info.lengths
        inside: list[np.ndarray] = []
        groups: list[_Group] = []
        states = np.full(len(rows), state, dtype=np.int32)
        j = column
        self._grow_state_props()
        while len(rows):
            nxt = self._step(states, columns[j].take(rows))
            died = nxt == 0
            if died.any():
                dead_rows, pre = rows[died], states[died]
                ok = self._acc[pre]
                dead_rows, pre = dead_rows[ok], pre[ok]
                if len(dead_rows):
                    groups.extend(_group_by_state(j, pre, dead_rows))
                live = ~died
                rows, nxt = rows[live], nxt[live]
            j += 1
            if not len(rows):
                break
            lazy = self._lazy[nxt]
            if lazy.any():
                groups.extend(_group_by_state(j, nxt[lazy], rows[lazy]))
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

    def _candidates(self, state: int) -> np.ndarray:
        """Token rows worth walking from a lexeme start: prune by the first byte."""
        self._grow_state_props()
        if self._acc[state]:
            return self.info.all_rows  # a boundary right away is possible: any first byte
        self.lexer.ensure_rows(np.array([state], dtype=np.int32))
        row = self.lexer.table[state]
        alive = np.nonzero(row > 0)[0]
        if len(alive) == 0:
            return np.zeros(0, dtype=np.int64)
        if len(alive) > 128:
            return self.info.all_rows
        return np.concatenate([self.info.rows_by_first[b] for b in alive.tolist()])

    def _root(self, lexer_state: int) -> "_WalkNode":
        """The walk of all candidate tokens from a lexer state (cached; parser-independent)."""
        node = self._roots.get(lexer_state)
        if node is None:
            self._grow_state_props()
            if self._lazy[lexer_state]:
                # a lazy lexeme matching the empty string ends before the token's first byte
                node = _WalkNode(self.info, np.zeros(0, np.int64), [_Group(0, lexer_state, self.info.all_rows)])
            else:
                allowed, groups = self._walk(lexer_state, self._candidates(lexer_state), 0)
                node = _WalkNode(self.info, allowed, groups)
            self._roots[lexer_state] = node
        return node

    def _child(self, node: "_WalkNode", pre: int, lstart: int) -> "_WalkNode":
        """Continue the tokens of ``node`` that ended a lexeme in ``pre`` from ``lstart``.

        Cached on the node: it does not depend on the parser state, only on where the lexer
        restarts (which the parser decides).
        """
        key = (pre, lstart)
        child = node.children.get(key)
        if child is not None:
            return child
        info = self.info
        allowed: list[np.ndarray] = []
        groups: list[_Group] = []
        self._grow_state_props()
        for column, rows in node.by_pre[pre]:
            at_end = info.lengths[rows] == column  # bytes end exactly at a lazy finish
            if at_end.any():
                allowed.append(rows[at_end])
                rows = rows[~at_end]
            if not len(rows):
                continue
            if self._lazy[lstart]:
                groups.append(_Group(column, lstart, rows))
                continue
            ok, sub = self._walk(lstart, rows, column)
            allowed.append(ok)
            groups.extend(sub)
        rows_ok = np.concatenate(allowed) if allowed else np.zeros(0, np.int64)
        child = _WalkNode(info, rows_ok, groups)
        node.children[key] = child
        return child

    def _collect(
        self, node: "_WalkNode", set_id: int, out: list["_WalkNode"], path: tuple = ()
    ) -> None:
        out.append(node)
        if len(path) > _MAX_EMPTY_CHAIN:
            raise GrammarError(
                f"more than {_MAX_EMPTY_CHAIN} lexemes end at one position (empty lexemes chained)"
            )
        for pre, groups in node.by_pre.items():
            new_set, lstart = self.lp.finish_lexeme(set_id, pre)
            if new_set == DEAD_SET:
                continue
            # the same tokens at the same columns in the same states: a cycle of empty lexemes
            key = (new_set, lstart, pre, tuple((c, len(r)) for c, r in groups))
            if key in path:
                continue
            self._collect(self._child(node, pre, lstart), new_set, out, path + (key,))

    # -- public ---------------------------------------------------------------------------
    def compute_mask(self, state: ParseState) -> np.ndarray:
        """The allowed-token bitmask for ``state`` (read-only, cached). EOS iff accepting."""
        cached = self._masks.get(state)
        if cached is not None:
            self.hits += 1
            self._masks.move_to_end(state)
            return cached
        self.misses += 1
        set_id, lstate, pending = state
        info = self.info
        nodes: list[_WalkNode] = []
        if lstate != 0:
            self._collect(self._root(lstate), set_id, nodes)
        mask = np.zeros(info.n_words, dtype=np.uint32)
        small = [n.ids for n in nodes if 0 < len(n.ids) <= _SMALL]
        for n in nodes:
            if len(n.ids) > _SMALL:
                mask |= n.packed()
        specials = self._special_ids(state)
        if specials is not None:
            small.append(specials)
        if self.lp.is_accepting(state):
            small.append(self._eos)
        if small:
            ids = np.concatenate(small)
            np.bitwise_or.at(mask, ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32))
        mask.flags.writeable = False
        self._masks[state] = mask
        if len(self._masks) > self.max_cached_masks:
            self._masks.popitem(last=False)
        return mask

    def _special_ids(self, state: ParseState) -> np.ndarray | None:
        if not self._token_lexeme_ids:
            return None
        set_id, lstate, pending = state
        if pending:
            set_id, _ = self.lp.finish_lexeme(set_id, lstate)
            if set_id == DEAD_SET:
                return None
        expected = self.lp.parser.expected(set_id)
        parts = [ids for lex, ids in self._token_lexeme_ids.items() if lex in expected]
        return np.concatenate(parts) if parts else None

    @property
    def cache_info(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "masks": len(self._masks),
                "lexer_walks": len(self._roots), "lexer_states": self.lexer.n_states,
                "parser_sets": self.lp.parser.n_sets}


def _contains(sorted_ids: np.ndarray, value: int) -> bool:
    i = np.searchsorted(sorted_ids, value)
    return bool(i < len(sorted_ids) and sorted_ids[i] == value)


def _group_by_state(column: int, states: np.ndarray, rows: np.ndarray) -> list[_Group]:
    if len(states) and (states == states[0]).all():
        return [_Group(column, int(states[0]), rows)]
    order = np.argsort(states, kind="stable")
    states, rows = states[order], rows[order]
    cuts = np.nonzero(np.diff(states))[0] + 1
    return [
        _Group(column, int(s[0]), r)
        for s, r in zip(np.split(states, cuts), np.split(rows, cuts))
    ]
