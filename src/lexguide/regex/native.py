"""The core's mirror of the regex store: Python nodes exported into ``lexguide._core``'s own
hash-consed store, and the questions the core answers faster than Python (emptiness).

The core's store belongs to a *generation* (a lexer DFA and its store, ``_core.generation()``),
which the core replaces by a new one once it grows past its rotation marks; a grammar keeps the
generation it was lowered into alive. Within a generation a node crosses over once and its core
id stays valid; a new generation starts the mirror afresh. The core never calls back into
Python.
"""

from __future__ import annotations

import threading

from lexguide import _core
from lexguide.regex import nodes as rx

__all__ = ["empty_among", "is_empty", "lower"]

_core_ids: dict[int, int] = {}  # Python rx node -> its node in _generation's store
_generation: _core.Generation | None = None
_core_lock = threading.Lock()


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

    Store ids are topological (a node is appended after its children), so the core walks the
    store's columns from the roots (stopping at nodes it has), and rebuilds the new nodes in
    ascending id order: children always come first. Every exported node's core id is kept
    in ``_core_ids``, so each node crosses over once per generation."""
    known = _core_ids
    for r in roots:
        if r not in known:
            return gen.export_python(rx._kind, rx._args, known, roots)
    return [known[r] for r in roots]


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
