"""Per-document lookups of the compiler: a string lexeme is made once per set of constraints,
except where making it can note something at the schema (lenient length limits)."""

from __future__ import annotations

import pytest

from lexguide import Grammar
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
