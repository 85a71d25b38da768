"""The text tokens as a prefix tree, level by level, for walks that share prefixes.

A walk over whole first-byte buckets (``walk.VocabWalker._split_walk``) steps every token
through the lexer DFA byte by byte. Tokens with a common prefix take the same steps: walking
the tree of distinct prefixes instead does about 3.3x less work (SmolLM2: 100,297 prefixes
for 332,150 token bytes; Gemma 3: 587,920 for 1,965,214), and a prefix whose state dies
settles every token below it at once.

Tokens are numbered in lexicographic order (*positions*), so the tokens below a prefix are one
range of positions. Level ``d`` holds the prefixes of ``d`` bytes in that order, each with its
last byte, its range, and the range of its children on level ``d + 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

__all__ = ["TokenTrie"]


class _Level(NamedTuple):
    byte: np.ndarray  # uint8: last byte of each prefix
    lo: np.ndarray  # int64: first position below the prefix
    hi: np.ndarray  # int64: one past the last
    child_lo: np.ndarray  # int64: first child on the next level (== child_hi: none)
    child_hi: np.ndarray


class TokenTrie:
    """Prefix tree of a :class:`~lexguide.engine.tokenizer_info.TokenizerInfo`'s text rows."""

    def __init__(self, text_ids: np.ndarray, lengths: np.ndarray, columns: np.ndarray) -> None:
        n = len(text_ids)
        # lexicographic order by sorting fixed-width zero-padded byte strings; rows come sorted
        # by decreasing length, so a stable sort of them reversed puts "a" before "a\x00"
        rev = np.arange(n - 1, -1, -1)
        keys = np.ascontiguousarray(columns[:, rev].T).view(f"S{columns.shape[0]}").ravel()
        lex = rev[np.argsort(keys, kind="stable")].astype(np.int64)
        self.row_at = lex  # position -> row
        self.position = np.empty(n, dtype=np.int64)  # row -> position
        self.position[lex] = np.arange(n)
        self.lengths = lengths[lex]  # position -> byte length
        max_len = int(lengths.max()) if n else 0
        levels: list[dict] = []
        node_at = np.zeros(n, dtype=np.int64)  # position -> prefix node on the previous level
        for d in range(1, max_len + 1):
            pos = np.flatnonzero(self.lengths >= d)
            byte = columns[d - 1][lex[pos]]
            parent = node_at[pos] if d > 1 else np.zeros(len(pos), dtype=np.int64)
            new = np.ones(len(pos), dtype=bool)
            new[1:] = (parent[1:] != parent[:-1]) | (byte[1:] != byte[:-1])
            starts = np.flatnonzero(new)
            ends = np.append(starts[1:], len(pos)) - 1
            node_at[pos] = np.cumsum(new) - 1
            level = {"byte": byte[starts], "lo": pos[starts], "hi": pos[ends] + 1, "parent": parent[starts]}
            if levels:  # children of the previous level: contiguous, in parent order
                prev = levels[-1]
                n_prev = len(prev["lo"])
                prev["child_lo"] = np.searchsorted(level["parent"], np.arange(n_prev), side="left")
                prev["child_hi"] = np.searchsorted(level["parent"], np.arange(n_prev), side="right")
            levels.append(level)
        if levels:
            last = levels[-1]
            last["child_lo"] = last["child_hi"] = np.zeros(len(last["lo"]), dtype=np.int64)
        self.levels = [_Level(lv["byte"], lv["lo"], lv["hi"], lv["child_lo"], lv["child_hi"]) for lv in levels]
        # first byte -> its node on level 1 (-1: no token starts with it)
        self.first_node = np.full(256, -1, dtype=np.int64)
        if levels:
            self.first_node[self.levels[0].byte] = np.arange(len(self.levels[0].byte))

    def prefix_ranges(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Position ranges ``[lo[d], hi[d])`` of the tokens starting with ``data[:d + 1]``, for
        every ``d`` such that some token does (nested: ``lo`` rises, ``hi`` falls)."""
        los: list[int] = []
        his: list[int] = []
        node = int(self.first_node[data[0]]) if data else -1
        d = 0
        while node >= 0:
            level = self.levels[d]
            los.append(int(level.lo[node]))
            his.append(int(level.hi[node]))
            d += 1
            if d == len(data) or d == len(self.levels):
                break
            lo, hi = int(level.child_lo[node]), int(level.child_hi[node])
            below = self.levels[d].byte
            k = lo + int(np.searchsorted(below[lo:hi], data[d]))
            node = k if k < hi and below[k] == data[d] else -1
        return np.array(los, dtype=np.int64), np.array(his, dtype=np.int64)

    def common_prefix(self, data: bytes, positions: np.ndarray) -> np.ndarray:
        """Per position: the length of the longest common prefix of its token and ``data``.

        The tokens sharing ``d`` bytes with ``data`` are one position range, and the ranges
        nest; so the length is how many ranges hold the position -- two binary searches.
        """
        lo, hi = self.prefix_ranges(data)
        a = np.searchsorted(lo, positions, side="right")
        b = np.searchsorted(-hi, -positions, side="left")
        return np.minimum(a, b)

    def death_walk(self, first_bytes: list[int], state: int, step: Callable, accepts: Callable
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Walk the tokens starting with ``first_bytes`` from column 1, in lexer ``state``
        (the state after their first byte). ``step(states, bytes)`` is the DFA transition
        (0 = dead) and ``accepts(states)`` whether each state accepts.

        Returns ``(death, acc)`` indexed by position for all tokens (only those below the given
        first bytes are meaningful): the column of the byte that kills the state (== length if
        none does) and whether the state before it accepts.
        """
        death = self.lengths.astype(np.int16)
        acc = np.zeros(len(death), dtype=bool)
        nodes = self.first_node[np.asarray(first_bytes, dtype=np.int64)]
        nodes = nodes[nodes >= 0]
        states = np.full(len(nodes), state, dtype=np.int32)
        dead_lo: list[np.ndarray] = []
        dead_hi: list[np.ndarray] = []
        dead_col: list[int] = []
        dead_acc: list[np.ndarray] = []
        for d in range(1, len(self.levels)):
            if not len(nodes):
                break
            level, below = self.levels[d - 1], self.levels[d]
            children, parent = _ranges(level.child_lo[nodes], level.child_hi[nodes])
            parent_states = states[parent]
            nxt = step(parent_states, below.byte[children])
            died = nxt == 0
            if died.any():
                gone = children[died]
                dead_lo.append(below.lo[gone])
                dead_hi.append(below.hi[gone])
                dead_col.append(d)
                dead_acc.append(accepts(parent_states[died]))
                live = ~died
                children, nxt = children[live], nxt[live]
            nodes, states = children, nxt
        if dead_lo:
            col = np.repeat(np.array(dead_col, dtype=np.int16), [len(x) for x in dead_lo])
            at, which = _ranges(np.concatenate(dead_lo), np.concatenate(dead_hi))
            death[at] = col[which]
            acc[at] = np.concatenate(dead_acc)[which]
        return death, acc


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The integers of the ranges ``[lo[i], hi[i])`` in order, and the range ``i`` of each."""
    sizes = hi - lo
    which = np.repeat(np.arange(len(lo)), sizes)
    return np.arange(int(sizes.sum())) - (np.cumsum(sizes) - sizes)[which] + lo[which], which
