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
                     '{"type":"array","items":{"type":"object","maxProperties":2,'
                     '"additionalProperties":false},"uniqueItems":true}')
    assert rc == 1 and "/uniqueItems" in err and "--lenient" in err
    assert "nonexistent" not in err


def test_lenient_and_strict_formats_flags(capsys):
    schema = ('{"type":"array","items":{"type":"string","format":"color","maxLength":3},'
              '"uniqueItems":true,'  # bounded strings spelled many ways: not enforced
              '"x-guidance":{"json_allow_general_unicode_escapes":true}}')
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
    from lexguide import Grammar
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


# -- sampling flags, errors found before loading, Ctrl-C ---------------------------------------
@pytest.mark.parametrize("flag, value, message", [
    ("--temp", "-1", "--temp: must be a finite number >= 0, not -1"),
    ("--top-p", "5", "--top-p: must be a finite number > 0 and <= 1, not 5"),
    ("--top-p", "0", "--top-p: must be a finite number > 0 and <= 1"),
    ("--min-p", "1.5", "--min-p: must be a finite number >= 0 and <= 1"),
    ("--top-k", "-3", "--top-k: must be an integer >= 0"),
    ("--top-k", "2.5", "--top-k: must be an integer >= 0, not '2.5'"),
    ("--repeat-penalty", "0", "--repeat-penalty: must be a finite number > 0"),
    ("--repeat-last-n", "-2", "--repeat-last-n: must be an integer >= -1"),
    ("-n", "0", "--n-predict: must be an integer >= 1"),
    ("-c", "0", "--ctx-size: must be an integer >= 1"),
    ("-t", "0", "--threads: must be an integer >= 1"),
    ("--temp", "nan", "--temp: must be a finite number >= 0"),
    ("--temp", "inf", "--temp: must be a finite number >= 0, not inf"),
    ("--repeat-penalty", "inf", "--repeat-penalty: must be a finite number > 0"),
    ("-s", "-1", "--seed: must be an integer >= 0, not -1"),
])
def test_sampling_flags_are_validated(capsys, flag, value, message):
    with pytest.raises(SystemExit) as e:
        main(["run", "-m", NO_MODEL, "-p", "x", flag, value])
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--grammar", 'root ::= "a" root'], "line 1:1: the grammar matches no input"),
    (["--grammar", '%llguidance {}\nstart: "a" start'], "line 2:1: the grammar matches no input"),
    (["--grammar", "root ::= [a-"], "line 1:10: unterminated character class"),
    (["--regex", "[^\\x00-\\x{10FFFF}]"], "the regex matches no string"),
    (["--regex", "(a"], "unclosed group"),
    (["-j", '{"type":"string","pattern":"^a$","not":{"pattern":"a"}}'], "Unsatisfiable"),
])
def test_empty_or_bad_constraints_fail_before_loading(capsys, argv, message):
    rc, _, err = run(capsys, "-p", "x", *argv)
    assert rc == 1 and message in err and "nonexistent" not in err


def test_json_text_nested_past_pythons_recursion_limit_is_located(capsys):
    rc, _, err = run(capsys, "-p", "x", "-j", '{"enum": ' + "[" * 5000 + "]" * 5000 + "}")
    assert rc == 1 and "nested more than 216 levels deep at line 1:225" in err
    assert "Traceback" not in err and "nonexistent" not in err


def test_only_one_input_reads_stdin(capsys):
    rc, _, err = run(capsys, "-f", "-", "--grammar-file", "-")
    assert rc == 1 and "only one input can be read from stdin" in err and "-f and --grammar-file" in err


def test_ctrl_c_while_starting_up_exits_130_with_one_line(monkeypatch, capsys):
    import lexguide.cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(lexguide.cli, "build_parser", interrupted)
    rc = main(["run", "-p", "x"])
    err = capsys.readouterr().err
    assert rc == 130 and err.strip() == "lexguide: interrupted"


def test_prompt_bar_starts_at_the_reported_count(monkeypatch):
    import io
    import sys

    pytest.importorskip("tqdm")
    from lexguide.runtime import run_command

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(run_command._prompt_bar, "bar", None, raising=False)
    run_command._prompt_bar(256, 1000, 0.5)  # under a second: nothing yet
    assert term.getvalue() == ""
    run_command._prompt_bar(512, 1000, 2.0)  # shown from here, with what is already done
    shown = term.getvalue()
    assert "512/1000" in shown and "0/1000" not in shown.replace("512/1000", "")
    run_command._prompt_bar(1000, 1000, 4.0)
    assert run_command._prompt_bar.bar.n == 1000


def test_ctrl_c_exits_130_with_one_line(monkeypatch, capsys):
    from lexguide.runtime import generate

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate.Model, "from_gguf", classmethod(interrupted))
    rc, out, err = run(capsys, "-p", "x")
    assert rc == 130 and err.strip() == "lexguide run: interrupted" and "Traceback" not in err


# -- with the default model ----------------------------------------------------------------------
def run_model(capsys, model_file, *argv: str) -> tuple[int, str, str]:
    rc = main(["run", "-m", str(model_file), "-t", "1", "-c", "128", "--temp", "0", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_regex_flag_constrains_the_output(smollm2_file, capsys):
    rc, out, err = run_model(capsys, smollm2_file, "-p", "The year is", "--regex", "[0-9]{4}",
                             "-n", "8")
    assert rc == 0 and len(out.strip()) == 4 and out.strip().isdigit()


def test_prompt_from_stdin(smollm2_file, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("The capital of France is"))
    rc, out, _ = run_model(capsys, smollm2_file, "-f", "-", "-n", "2")
    assert rc == 0 and out.startswith(" Paris")


# no completion fits in 3 tokens (the masks keep the output completable whenever one does)
@pytest.mark.parametrize("mode", [
    ["-j", '{"type":"string","minLength":400}'],
    ["--regex", "[a-z]{500}"],
    ["--grammar", 'root ::= "(" [a-z]{500} ")"'],
    ["--chat", "-j", '{"type":"array","items":{"type":"integer"},"minItems":30}'],
])
def test_incomplete_constrained_output_exits_3(smollm2_file, capsys, mode):
    rc, out, err = run_model(capsys, smollm2_file, "-p", "Say something", "-n", "3", *mode)
    assert rc == 3 and "the output is incomplete" in err and "-n 3" in err


def test_a_stop_string_that_cuts_a_constrained_output_exits_3(smollm2_file, capsys):
    schema = '{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}'
    rc, out, err = run_model(capsys, smollm2_file, "-p", "A JSON person:", "-n", "24", "--temp", "0",
                             "-j", schema, "--stop", "name")
    assert rc == 3 and "stop string" in err and "incomplete" in err
    assert "name" not in out  # cut before the stop text


def test_a_tight_budget_still_completes(smollm2_file, capsys):
    """-n close to the shortest completion: the output is complete, exit 0."""
    rc, out, err = run_model(capsys, smollm2_file, "-p", "Say something", "-n", "8",
                             "-j", '{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}')
    assert rc == 0, err
    import json

    assert isinstance(json.loads(out)["a"], str)


def test_quiet_prints_only_the_output(smollm2_file, capsys):
    rc, out, err = run_model(capsys, smollm2_file, "-q", "-p", "Hi", "-n", "2",
                             "-j", '{"type":"string","format":"color"}')
    # two tokens are enough for a complete string (the masks keep the output completable)
    assert rc == 0 and out.strip().startswith('"') and out.strip().endswith('"')
    assert err.strip() == ""


def test_prompt_progress_is_reported_and_changes_nothing(smollm2_file):
    from lexguide import Model

    ids = list(range(1000, 1600))
    plain = Model.from_gguf(smollm2_file, n_threads=1)
    calls: list[tuple[int, int]] = []
    watched = Model.from_gguf(smollm2_file, n_threads=1)
    watched.prompt_progress = lambda done, total, elapsed: calls.append((done, total))
    a = plain.generate(ids, max_tokens=4, temperature=0)
    b = watched.generate(ids, max_tokens=4, temperature=0)
    assert a.token_ids == b.token_ids
    assert calls == [(64, 600), (320, 600), (576, 600), (600, 600)]
