"""llama.cpp GBNF front end: parse (:mod:`.parser`), decide which regular fragments become
lexemes (:mod:`.plan`, :mod:`.lexemes`), build the grammar IR, or print the grammar as
llguidance Lark-variant text (:mod:`.to_lark`)."""

from __future__ import annotations

from lexguide.errors import GrammarError
from lexguide.grammar.gbnf.plan import plan_gbnf
from lexguide.grammar.gbnf.to_lark import emit_lark
from lexguide.grammar.ir import GrammarIR, report_dead_rules

__all__ = ["compile_gbnf", "gbnf_to_lark"]


def compile_gbnf(text: str, root: str = "root", *, reject_empty: bool = False) -> GrammarIR:
    """Compile a llama.cpp GBNF grammar to the grammar IR, with GBNF's exact language.

    ``root`` names the start rule (llama.cpp's default is ``root``). Regular fragments become
    lexemes only where greedy lexing provably accepts the same strings (module docstring).
    Raises :class:`GrammarError` with line:col and caret for syntax errors, an undefined
    rule, a missing start rule or left recursion, and with ``reject_empty`` (as
    ``Grammar.from_gbnf`` does; llama.cpp does not) for a grammar matching no input.
    Cost: a few ms for the llama.cpp sample grammars; the analysis is quadratic in the number
    of lexemes in the worst case.
    """
    try:
        plan, ir = plan_gbnf(text, root)
    except RecursionError:  # backstop: the nesting limits make this unreachable in practice
        raise GrammarError("grammar is nested too deeply to compile") from None
    offsets = {name: rd.offset for name, rd in plan.g.rules.items()}
    return report_dead_rules(ir, text, offsets, root, reject_empty)


def gbnf_to_lark(text: str, root: str = "root") -> str:
    """The GBNF grammar as llguidance Lark-variant text accepting the same strings.

    Fragments that ``compile_gbnf`` makes lexemes are printed as UPPERCASE terminals (rules)
    or string literals; everything else stays rules, with multi-character literals split into
    one-character strings where greedy lexing would change the language. llguidance's own
    converter (``gbnf_to_lark.py``) makes every non-recursive rule of literals and classes a
    greedy lexeme, which can change the language (``root ::= word "b"``, ``word ::= [a-z]+``
    no longer accepts ``xb``); this one keeps the language.
    Raises :class:`GrammarError` like :func:`compile_gbnf`, and for ``!<text>`` (no Lark form).
    """
    plan, _ = plan_gbnf(text, root)
    return emit_lark(plan)
