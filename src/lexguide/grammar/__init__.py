"""Grammars as data: the grammar IR (:mod:`.ir`) and its front ends, the Lark variant
(:mod:`.lark`) and GBNF (:mod:`.gbnf`). Tokenizer-independent; no parser or regex engine here
(regexes are :mod:`lexguide.regex`, the lexer and parser the C++ core behind
:class:`lexguide.Grammar`). JSON Schema (:mod:`lexguide.jsonschema`) also builds this IR; it
registers itself for ``%json`` through :func:`.ir.set_json_schema_compiler`."""

from lexguide.errors import GrammarError, RegexError
from lexguide.grammar.gbnf import gbnf_to_lark
from lexguide.grammar.ir import CompileNote

__all__ = ["CompileNote", "GrammarError", "RegexError", "gbnf_to_lark"]
