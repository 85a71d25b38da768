"""The core's mirror of the regex store: Python nodes exported into ``lexguide._core``'s own
hash-consed store, and the questions the core answers faster than Python (emptiness).

The core's store belongs to a *generation* (a lexer DFA and its store, ``_core.generation()``),
which the core replaces by a new one once it grows past its rotation marks; a grammar keeps the
generation it was lowered into alive. Within a generation a node crosses over once and its core
id stays valid; a new generation starts the mirror afresh. The core never calls back into
Python.
"""

from __future__ import annotations

import struct
import threading

from lexguide import _core
from lexguide.regex import nodes as rx

__all__ = ["core_nodes", "is_empty", "lower"]

_REF = 9  # export record: a node the core already has (by core id)
_core_ids: dict[int, int] = {}  # Python rx node -> its node in _generation's store
_generation: _core.Generation | None = None
_core_lock = threading.Lock()
_WORDS = struct.Struct("<8I")  # a byte set's 256-bit mask as 8 little-endian 32-bit words


def _current() -> _core.Generation:
    """The core's current generation; the mirror restarts when it is a new one. Under _core_lock."""
    global _generation
    gen = _core.generation()
    if _generation is None or gen.serial != _generation.serial:
        _generation = gen
        _core_ids.clear()
    return gen


def retire() -> None:
    """Start a new core generation now (the Python store was emptied: its ids are reused)."""
    global _generation
    with _core_lock:
        _generation = _core.generation(fresh=True)
        _core_ids.clear()


rx.on_rotate(retire)


def lower(roots: list[int]) -> tuple[_core.Generation, list[int]]:
    """The current core generation and the node ids of Python regex nodes ``roots`` in it
    (exporting what it lacks): what a grammar is lowered with."""
    with _core_lock:
        gen = _current()
        return gen, _export(gen, roots)


def core_nodes(roots: list[int]) -> list[int]:
    """The node ids of ``roots`` in the current core generation."""
    return lower(roots)[1]


def _export(gen: _core.Generation, roots: list[int]) -> list[int]:
    """Export into ``gen`` what it lacks of ``roots``; their core ids. Under _core_lock.

    Store ids are topological (a node is appended after its children), so the nodes to export
    are collected in one pass and sent in ascending id order: children always come first.
    Every exported node's core id is kept, so each node crosses over once per generation."""
    known = _core_ids
    missing = [r for r in roots if r not in known]
    if missing:
        kind, args, children_of = rx._kind, rx._args, rx._children_of
        new: dict[int, tuple[int, ...]] = {}  # node to export -> its children
        todo = list(missing)
        while todo:
            x = todo.pop()
            if x in new or x in known:
                continue
            kids = new[x] = children_of(kind[x], args[x])
            todo.extend(kids)
        flat: list[int] = []
        add, extend = flat.append, flat.extend
        pos: dict[int, int] = {}
        order = sorted(new)
        for x in order:
            k = kind[x]
            kids = new[x]
            for c in kids:
                if c not in pos:  # exported before: a reference record
                    pos[c] = len(pos)
                    extend((_REF, 1, known[c]))
            pos[x] = len(pos)
            if k == rx.K_BYTES:
                add(k)
                add(8)
                extend(_WORDS.unpack(args[x][0].to_bytes(32, "little")))
            elif k == rx.K_REPEAT:
                a = args[x]
                extend((k, 3, pos[a[0]], a[1], 0xFFFFFFFF if a[2] < 0 else a[2]))
            else:
                add(k)
                add(len(kids))
                extend([pos[c] for c in kids])
        # every exported node is remembered, so later exports stop at it
        got = gen.import_nodes(flat, [pos[x] for x in order])
        known.update(zip(order, got))
    return [known[r] for r in roots]


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
    with _core_lock:
        gen = _current()
        node = _export(gen, [x])[0]
        return not gen.nonempty(node)
