"""The llguidance Lark-variant grammar front end: ``compile_lark(text) -> GrammarIR``.

The language is specified in ``lark-syntax.md`` (shared spec): lowercase CFG rules, UPPERCASE
terminals compiled to one regex each, string and ``/regex/`` literals, EBNF operators,
``%ignore``, ``%import common``, ``%llguidance {}``, ``%json {}``, ``%regex {}``, ``%lark {}``,
special tokens ``<|name|>`` / ``<[ids]>`` and rule attributes. The pipeline is three small
passes: :mod:`.lexer` (text → tokens), :mod:`.parser` (tokens → AST) and
:mod:`.compiler` (AST → IR through :class:`~lexguide.grammar.ir.GrammarBuilder`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from lexguide.errors import GrammarError
from lexguide.grammar.ir import GrammarIR, report_dead_rules
from lexguide.grammar.lark.compiler import COMMON_REGEXES, GrammarEntry, LarkCompiler
from lexguide.grammar.lark.parser import parse_lark
from lexguide.limits import MAX_JSON_DEPTH, json_text_too_deep

__all__ = ["COMMON_REGEXES", "compile_grammar_list", "compile_lark"]

_ENTRY_KEYS = ("name", "lark_grammar", "json_schema")
_NAME = re.compile(r"[a-zA-Z0-9_-]+")


def compile_lark(text: str, *, reject_empty: bool = False) -> GrammarIR:
    """Compile llguidance Lark-variant grammar ``text`` to the grammar IR.

    Pure (builds fresh regex nodes in the process-wide ``rx`` store); cost is linear in the
    size of the grammar plus regex construction, and of the parameter values parametric rules
    reach. Unsupported features (templates, priorities, ``%override``, ``%declare``) raise
    :class:`~lexguide.errors.GrammarError` saying so; ``@name`` references need a grammar list
    (:func:`compile_grammar_list`). With ``reject_empty`` (as ``Grammar.from_lark`` does;
    llguidance does not), a grammar matching no input is a GrammarError at its ``start``.

    Raises
    ------
    GrammarError
        Malformed or unsupported text; ``line``/``col`` and a caret excerpt locate it.
    LimitExceeded
        A regex or repetition exceeds a resource limit of the regex engine.
    """
    try:
        parsed = parse_lark(text)
        ir = LarkCompiler(text).compile(parsed)
    except RecursionError:  # the nesting limits make this unreachable in practice
        raise GrammarError("grammar is nested too deeply to compile") from None
    return _non_empty(ir, text, parsed, reject_empty)


def _non_empty(ir: GrammarIR, text: str, parsed: Any, reject_empty: bool = True) -> GrammarIR:
    """``ir`` with notes for rules that never complete, or (``reject_empty``) a GrammarError
    at ``start`` when it matches no input at all (:func:`report_dead_rules`)."""
    offsets = {name: rule.offset for name, rule in parsed.rules.items()}
    return report_dead_rules(ir, text, offsets, "start", reject_empty)


def compile_grammar_list(spec: dict[str, Any] | str, *, reject_empty: bool = False) -> GrammarIR:
    """Compile a grammar list ``{"grammars": [entry, ...]}`` (llguidance's "Multiple grammars").

    Each entry has an optional ``"name"`` and exactly one of ``"lark_grammar"`` (text) or
    ``"json_schema"`` (a schema). Entry 0 is the top level; ``@name`` in a Lark entry refers to
    another entry, recursively if need be. ``spec`` may be the JSON text. Raises
    :class:`~lexguide.errors.GrammarError` (JSON position, or line:col inside an entry).
    """
    if isinstance(spec, str):
        deep = json_text_too_deep(spec)
        if deep is not None:
            raise GrammarError(f"grammar list nested more than {MAX_JSON_DEPTH} levels deep",
                               text=spec, offset=deep)
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise GrammarError(f"grammar list is not valid JSON: {e.msg}", text=e.doc, offset=e.pos) from None
    if not isinstance(spec, dict) or not isinstance(spec.get("grammars"), list) or not spec["grammars"]:
        raise GrammarError('a grammar list is a JSON object {"grammars": [entry, ...]} with at '
                           "least one entry")  # fmt: skip
    for key in spec:
        if key == "max_tokens":
            raise GrammarError("max_tokens on a whole grammar list is not supported; limit the "
                               "generation length instead (max_tokens / -n)")  # fmt: skip
        if key != "grammars":
            raise GrammarError(f"unknown key {key!r} in the grammar list (expected 'grammars')")
    entries: list[GrammarEntry] = []
    by_name: dict[str, GrammarEntry] = {}
    for i, raw in enumerate(spec["grammars"]):
        where = f"grammars[{i}]"
        if not isinstance(raw, dict):
            raise GrammarError(f"{where} must be an object")
        unknown = [k for k in raw if k not in _ENTRY_KEYS]
        if unknown:
            raise GrammarError(f"{where}: unknown key {unknown[0]!r} (expected one of {', '.join(_ENTRY_KEYS)})")
        if ("lark_grammar" in raw) == ("json_schema" in raw):
            raise GrammarError(f"{where} needs exactly one of 'lark_grammar' and 'json_schema'")
        name = raw.get("name")
        if name is not None and (not isinstance(name, str) or not _NAME.fullmatch(name)):
            raise GrammarError(f"{where}: name must be letters, digits, '_' or '-', got {name!r}")
        if name is not None and name in by_name:
            raise GrammarError(f"{where}: duplicate grammar name {name!r}")
        lark = raw.get("lark_grammar")
        if "lark_grammar" in raw and not isinstance(lark, str):
            raise GrammarError(f"{where}: 'lark_grammar' must be a string")
        entry = GrammarEntry(name, lark, raw.get("json_schema"))
        entries.append(entry)
        if name is not None:
            by_name[name] = entry
    top = entries[0]
    if top.lark is None:
        from lexguide.grammar.ir import GrammarBuilder, json_schema_compiler

        builder = GrammarBuilder()
        return builder.build(json_schema_compiler()(builder, top.json_schema, lexeme_class=0))
    try:
        parsed = parse_lark(top.lark)
        ir = LarkCompiler(top.lark, grammars=by_name, name=top.name).compile(parsed)
    except RecursionError:
        raise GrammarError("grammar is nested too deeply to compile") from None
    return _non_empty(ir, top.lark, parsed, reject_empty)
