"""The core's mirror of the regex store: Python nodes exported into ``lexguide._core``'s own
hash-consed store, and the questions the core answers faster than Python (emptiness).

Both stores are process-wide and append-only, so a node crosses over once per process and its
core id stays valid; the core never calls back into Python.
"""

from __future__ import annotations

import threading

from lexguide import _core
from lexguide.regex import nodes as rx

__all__ = ["core_node", "core_nodes", "is_empty"]

_REF = 9  # export record: a node the core already has (by core id)
_core_ids: dict[int, int] = {}  # Python rx node -> core node (both stores are process-wide)
_core_lock = threading.Lock()


def core_nodes(roots: list[int]) -> list[int]:
    """The core's node ids of Python regex nodes ``roots``, exporting what it lacks.

    Store ids are topological (a node is appended after its children), so the nodes to export
    are collected in one pass and sent in ascending id order: children always come first.
    Every exported node's core id is kept, so each node crosses over once per process."""
    with _core_lock:
        known = _core_ids
        missing = [r for r in roots if r not in known]
        if missing:
            kind, args, children_of = rx._kind, rx._args, rx._children_of
            new: set[int] = set()
            todo = list(missing)
            while todo:
                x = todo.pop()
                if x in new or x in known:
                    continue
                new.add(x)
                todo.extend(children_of(kind[x], args[x]))
            flat: list[int] = []
            pos: dict[int, int] = {}
            order = sorted(new)
            for x in order:
                k, a = kind[x], args[x]
                kids = children_of(k, a)
                for c in kids:
                    if c not in pos:  # exported before: a reference record
                        pos[c] = len(pos)
                        flat += (_REF, 1, known[c])
                pos[x] = len(pos)
                if k == rx.K_BYTES:
                    m = a[0]
                    flat += (k, 8, *[(m >> s) & 0xFFFFFFFF for s in range(0, 256, 32)])
                elif k == rx.K_REPEAT:
                    flat += (k, 3, pos[a[0]], a[1], 0xFFFFFFFF if a[2] < 0 else a[2])
                else:
                    flat += (k, len(kids), *[pos[c] for c in kids])
            # every exported node is remembered, so later exports stop at it
            got = _core.regex_import(flat, [pos[x] for x in order])
            known.update(zip(order, got))
        return [known[r] for r in roots]


def core_node(x: int) -> int:
    """The core's node id of Python regex node ``x``."""
    return core_nodes([x])[0]


def is_empty(x: int) -> bool:
    """Whether regex ``x`` provably matches no string. Without ``&``/``~`` that is
    ``x == NOTHING``; with them the core searches its derivatives (breadth first, at most
    ``kNonEmptyBudget`` = 5,000 states, ``csrc/engine/limits.h``) for a nullable one. Past
    the bound the answer is "not empty", which is safe: the lexer still makes dead states
    DEAD. Memoised in the core."""
    if x == rx.NOTHING:
        return True
    if not rx.has_boolean(x):
        return False
    return not _core.regex_nonempty(core_node(x))
