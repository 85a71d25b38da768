"""``lexguide run``: flags, errors and exit codes.

Tests that only need the command line to fail before a model is loaded pass a model path that
does not exist: reaching the loader would be a different error, so they also prove the order.
"""

from __future__ import annotations

import pytest

from lexguide.cli import main

NO_MODEL = "/nonexistent/model.gguf"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["run", "-m", NO_MODEL, *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_schema_errors_come_before_the_model_loads(capsys):
    rc, _, err = run(capsys, "-p", "x", "-j",
                     '{"type":"array","items":{"type":"string"},"uniqueItems":true}')
    assert rc == 1 and "/uniqueItems" in err and "--lenient" in err
    assert "nonexistent" not in err


def test_lenient_and_strict_formats_flags(capsys):
    schema = '{"type":"array","items":{"type":"string","format":"color"},"uniqueItems":true}'
    rc, _, err = run(capsys, "-p", "x", "--lenient", "-j", schema)
    assert rc == 1 and "nonexistent" in err  # compiled; then the (missing) model
    assert "note: at /items/format (format)" in err and "note: at /uniqueItems" in err
    rc, _, err = run(capsys, "-p", "x", "--strict-formats", "-j",
                     '{"type":"string","format":"color"}')
    assert rc == 1 and "Unknown format: color" in err and "nonexistent" not in err


@pytest.mark.parametrize("flag", ["--lenient", "--strict-formats"])
def test_help_lists_schema_flags(capsys, flag):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert flag in capsys.readouterr().out


def test_layout_flags_reach_the_schema_compiler(monkeypatch, capsys):
    seen = {}
    from lexguide.grammar import Grammar

    real = Grammar.from_json_schema.__func__

    def spy(cls, schema, **opts):
        seen.update(opts)
        return real(cls, schema, **opts)

    monkeypatch.setattr(Grammar, "from_json_schema", classmethod(spy))
    for flags, expected in ((["--compact"], {"whitespace": "compact"}),
                            (["--indent", "2"], {"indent": 2}),
                            (["--whitespace-pattern", "[ ]?"], {"whitespace_pattern": "[ ]?"}),
                            ([], {})):
        seen.clear()
        rc, _, err = run(capsys, "-p", "x", "-j", '{"type":"array"}', *flags)
        assert rc == 1 and "nonexistent" in err  # compiled, then the model is missing
        assert {k: v for k, v in seen.items() if k not in ("lenient", "strict_formats")} \
            == expected


@pytest.mark.parametrize("argv, message", [
    (["--compact", "--indent", "2", "-j", "{}"], "at most one of --compact, --indent"),
    (["--compact", "--grammar", 'root ::= "a"'], "only for JSON Schemas"),
    (["--lenient", "--grammar", 'root ::= "a"'], "only for JSON Schemas"),
])
def test_layout_flag_errors(capsys, argv, message):
    rc, _, err = run(capsys, "-p", "x", *argv)
    assert rc == 1 and message in err and "nonexistent" not in err


def test_indent_must_be_a_small_integer(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--indent", "x", "-j", "{}"])
    assert e.value.code == 2 and "--indent: must be an integer" in capsys.readouterr().err
