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

__all__ = ["empty_among", "is_empty", "lower"]

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


def _export(gen: _core.Generation, roots: list[int]) -> list[int]:
    """Export into ``gen`` what it lacks of ``roots``; their core ids. Under _core_lock.

    Store ids are topological (a node is appended after its children), so the nodes to export
    are collected in one pass and sent in ascending id order: children always come first.
    Every exported node's core id is kept, so each node crosses over once per generation."""
    known = _core_ids
    missing = [r for r in roots if r not in known]
    if missing:
        kind, args = rx._kind, rx._args
        has_kids = _HAS_KIDS
        new: set[int] = set()  # nodes to export
        todo = missing
        while todo:
            x = todo.pop()
            if x in new or x in known:
                continue
            new.add(x)
            k = kind[x]
            if has_kids[k]:
                todo.extend(args[x] if k != rx.K_REPEAT else args[x][:1])
        flat: list[int] = []
        add, extend = flat.append, flat.extend
        pos: dict[int, int] = {}
        order = sorted(new)
        concat = rx.K_CONCAT
        for x in order:
            k = kind[x]
            a = args[x]
            if k == concat:  # the commonest record (literals are chains of them)
                h, t = a
                if h not in pos:
                    pos[h] = len(pos)
                    extend((_REF, 1, known[h]))
                if t not in pos:
                    pos[t] = len(pos)
                    extend((_REF, 1, known[t]))
                pos[x] = len(pos)
                extend((k, 2, pos[h], pos[t]))
                continue
            if k == rx.K_BYTES:
                pos[x] = len(pos)
                extend((k, 8, *_WORDS.unpack(a[0].to_bytes(32, "little"))))
                continue
            if k == rx.K_REPEAT:
                kids = a[:1]
            elif has_kids[k]:
                kids = a
            else:  # NOTHING, EPSILON
                pos[x] = len(pos)
                extend((k, 0))
                continue
            for c in kids:
                if c not in pos:  # exported before: a reference record
                    pos[c] = len(pos)
                    extend((_REF, 1, known[c]))
            pos[x] = len(pos)
            if k == rx.K_REPEAT:
                extend((k, 3, pos[a[0]], a[1], 0xFFFFFFFF if a[2] < 0 else a[2]))
            else:
                add(k)
                add(len(kids))
                extend([pos[c] for c in kids])
        # every exported node is remembered, so later exports stop at it
        got = gen.import_nodes(flat, [pos[x] for x in order])
        known.update(zip(order, got))
    return [known[r] for r in roots]


# node kind -> whether its args are (or start with) child node ids
_HAS_KIDS = [k in (rx.K_CONCAT, rx.K_ALT, rx.K_AND, rx.K_NOT, rx.K_STAR, rx.K_REPEAT)
             for k in range(rx.K_REPEAT + 1)]  # K_REPEAT is the last kind


def empty_among(xs: list[int]) -> list[bool]:
    """:func:`is_empty` of each of ``xs``, with one export and one lock for all of them."""
    out = [x == rx.NOTHING for x in xs]
    ask = [i for i, x in enumerate(xs) if not out[i] and rx.has_boolean(x)]
    if ask:
        with _core_lock:
            gen = _current()
            nodes = _export(gen, [xs[i] for i in ask])
            nonempty = gen.nonempty
            for i, node in zip(ask, nodes):
                out[i] = not nonempty(node)
    return out


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
