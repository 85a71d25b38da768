"""The integrations stay optional: ``import lexguide`` imports no framework, a missing framework
is an ImportError naming the extra, and the shared constraint readers fail with located
messages."""

from __future__ import annotations

import json

import subprocess
import sys

import pytest

from lexguide import Grammar
from lexguide.errors import RegexError, SchemaError
from lexguide.integrations._common import as_grammar, check_compiles, grammar_from_spec

FRAMEWORKS = ("torch", "transformers", "vllm", "llama_cpp", "uvicorn", "fastapi")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False)


def test_importing_lexguide_imports_no_framework() -> None:
    code = ("import sys, lexguide, lexguide.integrations, lexguide.engine\n"
            "lexguide.TokenizerInfo, lexguide.Grammar\n"
            f"print([m for m in {FRAMEWORKS!r} if m in sys.modules])")
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("module,blocked,extra", [
    ("transformers", "transformers", "transformers"),
    ("llama_cpp", "llama_cpp", "llama-cpp"),
    ("vllm", "vllm", "vllm"),
])
def test_a_missing_framework_names_its_extra(module: str, blocked: str, extra: str) -> None:
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            f"import lexguide.integrations.{module}")
    result = _run(code)
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert f"pip install 'lexguide[{extra}]'" in result.stderr


def test_as_grammar_takes_schemas_and_grammars() -> None:
    g = Grammar.from_regex("[0-9]+")
    assert as_grammar(g) is g
    assert as_grammar({"type": "integer"}).validate("12")
    with pytest.raises(TypeError, match="ambiguous"):
        as_grammar("[0-9]+")
    with pytest.raises(TypeError, match="not int"):
        as_grammar(3)
    with pytest.raises(SchemaError):
        as_grammar({"type": "integer", "minimum": 5, "maximum": 1})


def test_per_request_specs() -> None:
    assert grammar_from_spec({"json_schema": '{"type": "boolean"}'}).validate("true")
    assert grammar_from_spec({"json_schema": {"type": "object"},
                              "json_options": {"whitespace": "compact"}}).validate('{"a":1}')
    assert not grammar_from_spec({"json_schema": {"type": "object"},
                                  "json_options": {"whitespace": "compact"}}).validate('{"a": 1}')
    assert grammar_from_spec({"grammar": 'root ::= "yes" | "no"'}).validate("no")
    assert grammar_from_spec({"grammar": '%llguidance {}\nstart: "a"+'}).validate("aaa")
    assert grammar_from_spec({"regex": r"\d{2}"}).validate("42")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tag = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<f>"],
        "tags": [{"type": "tag", "begin": "<f>", "end": "</f>",
                  "content": {"type": "json_schema", "json_schema": schema}}]}}
    for spec in ({"structural_tag": tag}, {"structural_tag": json.dumps(tag)}):
        g = grammar_from_spec(spec)
        assert g.validate('hi <f>{"n": 1}</f> bye') and not g.validate('hi <f>{"n": "x"}</f>')
    compact = grammar_from_spec({"structural_tag": tag, "json_options": {"whitespace": "compact"}})
    assert compact.validate('<f>{"n":1}</f>') and not compact.validate('<f>{"n": 1}</f>')
    for bad, match in [
        ({}, "exactly one"),
        ({"regex": "a", "grammar": "root ::= \"a\""}, "exactly one"),
        ({"regex": "a", "colour": 1}, "unknown key"),
        ({"regex": 5}, "must be a string"),
        ({"json_schema": "{nope"}, "not valid JSON"),
        ({"json_schema": [1]}, "JSON Schema object"),
        ({"regex": "a", "json_options": {"indent": 2}}, "json_schema and structural_tag only"),
        ({"structural_tag": 5}, "object or its JSON text"),
        ("regex", "must be an object"),
    ]:
        with pytest.raises(ValueError, match=match):
            grammar_from_spec(bad)  # type: ignore[arg-type]
    with pytest.raises(RegexError):
        grammar_from_spec({"regex": "a("})


def test_check_compiles_turns_compile_errors_into_value_errors() -> None:
    check_compiles({"regex": "[a-z]+"}, "lexguide")
    with pytest.raises(ValueError, match=r"lexguide: .*offset 1"):
        check_compiles({"regex": "a("}, "lexguide")
    with pytest.raises(ValueError, match="lexguide: .*#/minimum|lexguide: .*empty numeric range"):
        check_compiles({"json_schema": {"type": "integer", "minimum": 5, "maximum": 1}}, "lexguide")
    with pytest.raises(ValueError, match="lexguide: "):
        check_compiles({"json_schema": {"type": "object"}, "json_options": {"no_such": 1}},
                       "lexguide")
