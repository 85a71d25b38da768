"""The test oracle for the engine: the pure-Python lexer DFA, Earley parser and lexer/parser
driver that the compiled core (csrc/engine/) replaced, kept here only to check it.

``recognizer(grammar)`` answers, byte by byte, whether a text is a valid prefix of a grammar;
the brute-force masks of the tests run each token's bytes through it.
"""

from __future__ import annotations

from reference.lexparser import LexParser


class Recognizer:
    """Byte-level prefix recognition for one grammar (slow; tests only)."""

    def __init__(self, grammar) -> None:
        self.lp = LexParser(grammar.ir)

    def state(self, data: bytes):
        """The reference parse state after ``data`` (None if it is not a valid prefix)."""
        return self.lp.advance_bytes(self.lp.initial, data)

    def allowed(self, prefix: bytes, token_bytes, skip=()) -> set[int]:
        """Ids of the tokens whose bytes continue ``prefix`` validly (``skip`` left out)."""
        st = self.state(prefix)
        if st is None:
            return set()
        return {t for t, tb in enumerate(token_bytes) if t not in skip and tb and self.lp.advance_bytes(st, tb) is not None}

    def allowed_bytes(self, prefix: bytes) -> list[bool]:
        st = self.state(prefix)
        return [st is not None and self.lp.advance_byte(st, b) is not None for b in range(256)]

    def is_accepting(self, prefix: bytes) -> bool:
        st = self.state(prefix)
        return st is not None and self.lp.is_accepting(st)


_cache: dict[int, tuple] = {}


def recognizer(grammar) -> Recognizer:
    hit = _cache.get(id(grammar))
    if hit is None or hit[0] is not grammar:
        hit = _cache[id(grammar)] = (grammar, Recognizer(grammar))
    return hit[1]
