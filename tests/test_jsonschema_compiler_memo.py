"""Per-document lookups of the compiler: a string lexeme is made once per set of constraints,
except where making it can note something at the schema (lenient length limits)."""

from __future__ import annotations

import pytest

from lexguide import Grammar
from lexguide.errors import SchemaError
from lexguide.jsonschema.compiler import SchemaCompiler


def _schema(tag: str, lengths: bool) -> dict:
    extra = {"minLength": 2, "maxLength": 9} if lengths else {}
    return {"type": "object", "properties": {
        f"{tag}_{i}": {"type": "string", "pattern": f"^memo_{tag}", **extra} for i in range(3)}}


@pytest.mark.parametrize("lenient, lengths, made", [
    (False, False, 1), (False, True, 1), (True, False, 1), (True, True, 3)])
def test_string_lexeme_made_once_unless_it_can_note(monkeypatch, lenient, lengths, made):
    calls = []
    string = SchemaCompiler.string

    def counted(self, s, esc):
        calls.append(s.pointer)
        return string(self, s, esc)

    monkeypatch.setattr(SchemaCompiler, "string", counted)
    tag = f"{'l' if lenient else 's'}{int(lengths)}"
    g = Grammar.from_json_schema(_schema(tag, lengths), lenient=lenient)
    assert len(calls) == made
    key = f"{tag}_1"
    assert g.validate(f'{{"{key}": "memo_{tag}x"}}')
    assert not g.validate(f'{{"{key}": "other"}}')


def _nested(depth: int, leaf: dict, seen_first: bool) -> dict:
    for _ in range(depth):
        leaf = {"type": "object", "properties": {"p": leaf}}
    props = {"deep": leaf}
    if seen_first:  # the reference's rule exists before the deep one is met
        props = {"x": {"$ref": "#/$defs/a"}, **props}
    return {"$defs": {"a": {"type": "string"}}, "type": "object", "properties": props}


@pytest.mark.parametrize("seen_first", [False, True])
def test_reference_with_a_rule_is_still_refused_past_the_nesting_limit(seen_first):
    leaf = {"$ref": "#/$defs/a"}
    Grammar.from_json_schema(_nested(97, leaf, seen_first))
    with pytest.raises(SchemaError, match="nested more than 100 levels"):
        Grammar.from_json_schema(_nested(99 if seen_first else 98, leaf, seen_first))


def test_declared_keys_and_booleans_are_one_lexeme_per_document():
    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"name": {"type": "boolean"}}},
        "b": {"type": "object", "properties": {"name": {"type": "boolean"}}},
        "c": {"type": "boolean"}}}
    g = Grammar.from_json_schema(schema)
    names = [lx.name for lx in g.ir.lexemes]
    assert names.count('"name"') == 1 and names.count("true") == 1
    assert g.validate('{"a": {"name": true}, "b": {"name": false}, "c": true}')
    assert not g.validate('{"a": {"name": 1}}')
