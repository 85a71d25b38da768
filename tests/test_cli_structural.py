"""``lexguide run --structural-tag`` and ``--lazy-trigger``: flags, located errors, and the
default model's output checked by an independent parse (``json`` + ``jsonschema``)."""

from __future__ import annotations

import json
import re

import pytest

from lexguide import Grammar
from lexguide.cli import build_parser, main

NO_MODEL = "/nonexistent/model.gguf"
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
        "required": ["city"], "additionalProperties": False}
TAG = {"type": "structural_tag", "format": {
    "type": "triggered_tags", "triggers": ["<tool_call>"], "at_least_one": True,
    "stop_after_first": True,
    "tags": [{"type": "tag", "begin": "<tool_call>", "end": "</tool_call>",
              "content": {"type": "json_schema", "json_schema": CITY}}]}}
DIGITS = 'root ::= "<n>" [0-9] [0-9]? "</n>"'


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["run", "-m", NO_MODEL, "-p", "x", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_model(capsys, model_file, *argv: str) -> tuple[int, str, str]:
    rc = main(["run", "-m", str(model_file), "-t", "1", "-c", "256", "--temp", "0", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_help_lists_the_flags():
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for flag in ("--structural-tag SPEC", "--structural-tag-file FILE", "--lazy-trigger WORD"):
        assert flag in text


@pytest.mark.parametrize("spec, message", [
    ({**TAG, "format": {**TAG["format"], "tags": [{**TAG["format"]["tags"][0], "end": 5}]}},
     "structural tag at $.format.tags[0].end:"),
    ({"type": "structural_tag", "structures": [{"begin": "<f>", "schema": {}}],
      "triggers": ["<f>"]}, "structural tag at $.structures[0]: missing field 'end'"),
    ({"type": "structural_tag", "format": {"type": "json_schema",
                                           "json_schema": {"type": "strin"}}}, "/type"),
])
def test_bad_specs_fail_located_before_the_model_loads(capsys, spec, message):
    rc, _, err = run(capsys, "--structural-tag", json.dumps(spec))
    assert rc == 1 and message in err, err
    assert "nonexistent" not in err and "Traceback" not in err


def test_spec_text_that_is_not_json_is_located(capsys):
    rc, _, err = run(capsys, "--structural-tag", '{"type": "structural_tag",\n "format": }')
    assert rc == 1 and "structural tag is not valid JSON: line 2:12" in err


def test_spec_file_and_stdin(capsys, tmp_path, monkeypatch):
    import io

    bad = tmp_path / "tag.json"
    bad.write_text(json.dumps({"type": "structural_tag", "format": {"type": "nope"}}))
    rc, _, err = run(capsys, "--structural-tag-file", str(bad))
    assert rc == 1 and "$.format.type" in err and "unknown format type 'nope'" in err
    monkeypatch.setattr("sys.stdin", io.StringIO('{"type": "regex"}'))
    rc, _, err = run(capsys, "--structural-tag-file", "-")
    assert rc == 1 and "missing field 'pattern'" in err


@pytest.mark.parametrize("argv, message", [
    (["--structural-tag", json.dumps(TAG), "--regex", "a"],
     "give at most one constraint; got --regex, --structural-tag"),
    (["--lazy-trigger", "<n>"], "--lazy-trigger needs a grammar"),
    (["--lazy-trigger", "<n>", "-j", "{}"], "--lazy-trigger needs a grammar"),
    (["--lazy-trigger", "<m>", "--grammar", DIGITS],
     "lazy grammar trigger 0: no sentence of the grammar starts with"),
    (["--lazy-trigger", "<n>", "--grammar", DIGITS, "--compact"], "only for JSON Schemas"),
    (["--lazy-trigger", "<n>", "--grammar", DIGITS, "--think-markers", "<t>", "</t>"],
     "do not take --lazy-trigger"),
])
def test_flag_errors(capsys, argv, message):
    rc, _, err = run(capsys, *argv)
    assert rc == 1 and message in err, err
    assert "nonexistent" not in err


# -- with the default model ----------------------------------------------------------------------


def _check_tag(out: str) -> None:
    m = re.fullmatch(r"<tool_call>(.*)</tool_call>", out.strip("\n"), re.DOTALL)
    assert m, out
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(m.group(1)), CITY)


def test_structural_tag_gives_a_complete_tag(smollm2_file, capsys):
    rc, out, err = run_model(capsys, smollm2_file, "-p", "Weather in Paris, as a tool call:",
                             "-n", "64", "--structural-tag", json.dumps(TAG))
    assert rc == 0, err
    _check_tag(out)


def test_structural_tag_with_a_json_layout_flag(smollm2_file, capsys):
    rc, out, err = run_model(capsys, smollm2_file, "-p", "Weather in Paris, as a tool call:",
                             "-n", "64", "--compact", "--structural-tag", json.dumps(TAG))
    assert rc == 0, err
    _check_tag(out)
    assert " " not in out.split("<tool_call>")[1].split('"')[0]  # compact: '{"' with no space


def test_structural_tag_composes_after_a_think_section(smollm2_file, capsys):
    """SmolLM2's template names no think markers; given ones, the output may open a think
    section (at most 4 tokens, then the forced end marker), and the answer is the tag."""
    rc, out, err = run_model(capsys, smollm2_file, "-p", "Weather in Paris?", "--chat",
                             "-n", "80", "--think-markers", "<think>", "</think>",
                             "--reasoning-budget", "4", "--structural-tag", json.dumps(TAG))
    assert rc == 0, err
    _check_tag(out)


def test_lazy_trigger(smollm2_file, capsys):
    prompt = "a <n>1</n>\nb <n>2</n>\nc <n>3</n>\nd"
    rc, out, err = run_model(capsys, smollm2_file, "-p", prompt, "-n", "48",
                             "--grammar", DIGITS, "--lazy-trigger", "<n>")
    assert rc == 0, err
    out = out.rstrip("\n")
    assert "<n>" in out, out
    head, tail = out[:out.index("<n>")], out[out.index("<n>"):]
    assert Grammar.parse(DIGITS).validate(tail), tail
    assert head and "<n>" not in head  # free text first, then the grammar
