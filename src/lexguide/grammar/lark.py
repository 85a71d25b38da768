"""The llguidance Lark-variant grammar front end: ``compile_lark(text) -> GrammarIR``.

The language is specified in ``lark-syntax.md`` (shared spec): lowercase CFG rules, UPPERCASE
terminals compiled to one regex each, string and ``/regex/`` literals, EBNF operators,
``%ignore``, ``%import common``, ``%llguidance {}``, ``%json {}``, ``%regex {}``, ``%lark {}``,
special tokens ``<|name|>`` / ``<[ids]>`` and rule attributes. The pipeline is three small
passes: :mod:`lark_lexer` (text → tokens), :mod:`lark_parser` (tokens → AST) and
:mod:`lark_compiler` (AST → IR through :class:`~lexguide.grammar.ir.GrammarBuilder`).
"""

from __future__ import annotations

from lexguide.errors import GrammarError
from lexguide.grammar.ir import GrammarIR
from lexguide.grammar.lark_compiler import COMMON_REGEXES, LarkCompiler
from lexguide.grammar.lark_parser import parse_lark

__all__ = ["COMMON_REGEXES", "compile_lark"]


def compile_lark(text: str) -> GrammarIR:
    """Compile llguidance Lark-variant grammar ``text`` to the grammar IR.

    Pure (builds fresh regex nodes in the process-wide ``rx`` store); cost is linear in the
    size of the grammar plus regex construction. Unsupported features (``stop=``, parametric
    rules, ``@grammar`` references, templates, ``%override``, ``%declare``) raise
    :class:`~lexguide.errors.GrammarError` saying so.

    Raises
    ------
    GrammarError
        Malformed or unsupported text; ``line``/``col`` and a caret excerpt locate it.
    LimitExceeded
        A regex or repetition exceeds a resource limit of the regex engine.
    """
    try:
        return LarkCompiler(text).compile(parse_lark(text))
    except RecursionError:  # the nesting limits make this unreachable in practice
        raise GrammarError("grammar is nested too deeply to compile") from None
