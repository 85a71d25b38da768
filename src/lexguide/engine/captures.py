"""Captures (Lark ``capture``, ``capture="n"``, ``stop_capture="n"``): the bytes a rule matched.

Masks never need them, so nothing is recorded while matching: the canonical Earley sets of the
core name their origins by set id, not by position, and cannot say where a rule began.
Captures are read on demand from the consumed input by the compiled core
(``csrc/engine/captures.h``), in two passes: a *lexeme trace* replays the input through the
:class:`LexParser` with the decisions it made while matching (greedy and lazy ends, skips,
empty lexemes), then a *positional Earley* recognizer over that lexeme sequence and a backward
pass keep the completions that take part in a parse of the whole input (of a complete
sentence when the input is final, of a viable prefix otherwise).

A rule's capture spans its first lexeme's first byte to its last lexeme's last byte (skipped
whitespace around it is not included). A lexeme rule's capture excludes its ``stop=`` or
``suffix=`` text, which ``stop_capture`` reports; enclosing rules include it (lexguide does
not remove stop text from the output). An ambiguous input may report a name more than once.
Results are ordered by end position, inner rules before the rules around them (for equal
spans: lexemes first, then a rule before the rules deriving it alone).
"""

from __future__ import annotations

from collections.abc import Sequence

from lexguide.engine.lexparser import LexParser, ParseState

__all__ = ["captures"]

#: a piece of consumed input: the bytes of a token (or the special-token lexemes of a special
#: token) and the parse state a matcher reached after it, if known
Piece = tuple[bytes | frozenset[int], ParseState | None]


def captures(lp: LexParser, data: bytes, pieces: Sequence[Piece], final: bool) -> list[tuple[str, bytes]]:
    """``(name, bytes)`` of every capture in ``data``, ordered by end position.

    ``data`` is the concatenation of the byte pieces of ``pieces``. Replay goes on after each
    piece from the parse state given with it, which may differ from the replayed one when a
    token budget (``max_tokens``) stopped a lexeme. ``final``: the input is complete (EOS was
    produced, or the text is whole): the pending lexeme ends as at end of input.

    One core call, the GIL released; mutates only the grammar's memos (the capture table is
    built on the first call, :meth:`LexParser.capture_table`). Costs a replay of the input and
    an Earley parse of its lexemes: linear for the usual unambiguous grammars, cubic in the
    number of lexemes at worst.

    Raises :class:`~lexguide.errors.CoreArgumentError` (a ``MatcherError``, ``where`` naming
    the ``byte``) if the pieces are not a valid prefix (with ``final``, not a complete
    sentence), :class:`~lexguide.errors.LimitExceeded` (``max_capture_items``,
    ``max_capture_steps``) when the parse of a long or highly ambiguous input passes the
    core's bounds.
    """
    if not lp.ir.has_captures:
        return []
    table, names = lp.capture_table()
    return [(names[name], data[lo:hi]) for name, lo, hi in table.read(pieces, final)]
