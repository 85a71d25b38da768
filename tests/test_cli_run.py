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
