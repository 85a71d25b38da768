"""Nesting limits shared by every front end, and the helpers that enforce them.

Each front end (Lark variant, GBNF, regex, JSON Schema) and each recursive pass after it
counts how deep it is and stops at :data:`MAX_NESTING_DEPTH` with the front end's own located
error (``GrammarError`` line:col, ``RegexError`` offset, ``SchemaError`` JSON pointer), so a
deep input is never a Python ``RecursionError``. What one level is:

- Lark variant, GBNF: one ``(`` / ``[`` group inside an expression;
- regex (Rust syntax, ECMA ``pattern``): one group or character class;
- JSON Schema: one subschema inside another (``properties``, ``items``, ``allOf``, ``not``,
  ...) or one ``$ref`` hop, along any path from the root;
- JSON text and values (schemas, grammar lists, ``const``/``enum``): :data:`MAX_JSON_DEPTH`
  arrays/objects, checked before anything walks them.

This module imports only :mod:`lexguide.errors` (a leaf, like it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_NESTING_DEPTH",
    "Nesting",
    "json_text_too_deep",
    "json_value_scan",
    "json_value_too_deep",
]

#: Deepest nesting accepted by every front end (see the module docstring for what one level is).
MAX_NESTING_DEPTH = 100
#: Deepest JSON accepted as input (a JSON Schema object nests two JSON levels per subschema:
#: ``"properties": {"name": {...}}``).
MAX_JSON_DEPTH = 2 * MAX_NESTING_DEPTH + 16


class Nesting:
    """Depth counter of one recursive pass; mutates itself.

    ``with nesting(where):`` enters one level; past ``limit`` levels it raises
    ``make_error(where, limit)`` instead (nothing is entered then). Cost: two attribute
    updates per level.
    """

    __slots__ = ("depth", "limit", "make_error")

    def __init__(self, make_error: Callable[[Any, int], Exception],
                 limit: int = MAX_NESTING_DEPTH) -> None:
        self.depth = 0
        self.limit = limit
        self.make_error = make_error

    def __call__(self, where: Any = None) -> Nesting:
        if self.depth >= self.limit:
            raise self.make_error(where, self.limit)
        self.depth += 1
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1


_JSON_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.S)


def json_text_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """Character offset of the first ``[``/``{`` nested deeper than ``limit`` in the first JSON
    value of ``text``, or None. Strings are skipped; the text need not be valid JSON, and text
    after the value is not looked at. Cost: one regex scan."""
    depth = 0
    for m in _JSON_BRACKETS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        elif c in "]}":
            depth -= 1
            if depth <= 0:  # the first value is complete: what follows is not its concern
                return None
    return None


def json_value_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> list[str | int] | None:
    """Path (keys and indices) to the first list/dict nested deeper than ``limit`` in a parsed
    JSON value, or None. Iterative, so any depth is safe; cost linear in the value (paths are
    only built once a value is found too deep)."""
    return json_value_scan(value, frozenset(), limit)[0]


def json_value_scan(value: Any, keys: frozenset[str], limit: int = MAX_JSON_DEPTH
                    ) -> tuple[list[str | int] | None, bool]:
    """:func:`json_value_too_deep` and, in the same walk, whether some object in ``value`` has
    one of ``keys`` as a key (False when the value is too deep: the walk stops there)."""
    # level by level: the lists and dicts ``depth`` levels down
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 0
    found = False
    while level:
        if depth + 1 > limit:
            return _path_too_deep(value, limit), False
        depth += 1
        if keys and not found:
            found = any(not keys.isdisjoint(node) for node in level if isinstance(node, dict))
        level = [v for node in level for v in (node.values() if isinstance(node, dict) else node)
                 if isinstance(v, (dict, list))]
    return None, found


def _path_too_deep(value: Any, limit: int) -> list[str | int] | None:
    """:func:`json_value_too_deep`, carrying every node's path (its slow path)."""
    todo: list[tuple[Any, int, tuple]] = [(value, 0, ())]
    while todo:
        node, depth, path = todo.pop()
        if isinstance(node, dict):
            items: Any = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        if depth + 1 > limit:
            return list(path)
        todo.extend((v, depth + 1, (*path, k)) for k, v in items)
    return None
