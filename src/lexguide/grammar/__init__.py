"""Grammars: the IR, its front ends (Lark variant, GBNF, JSON Schema via ``jsonschema``, regex),
the regex → byte-DFA lexer and the Earley parser. Tokenizer-independent."""

from lexguide.errors import GrammarError, RegexError
from lexguide.grammar.grammar import Grammar
from lexguide.grammar.ir import CompileNote


def gbnf_to_lark(text: str) -> str:
    """Convert a GBNF grammar to equivalent llguidance Lark-variant text."""
    from lexguide.grammar.gbnf import gbnf_to_lark as convert

    return convert(text)


__all__ = ["CompileNote", "Grammar", "GrammarError", "RegexError", "gbnf_to_lark"]
