"""The --quick modes of the benchmarks run and print their tables (they must not rot).

Each runs as a subprocess, as a user would; all need the SmolLM2 vocabulary/model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import corpora
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _need_jsonschemabench() -> None:
    """The bench reads JSONSchemaBench from ``LEXGUIDE_CORPORA`` (docs/bench.md): skip without it."""
    if corpora.find("jsonschemabench") is None:
        pytest.skip(corpora.why_missing("jsonschemabench"))


def _run(args: list[str], tmp_path: Path) -> tuple[str, dict]:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, *args, "--out", str(out)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def test_budget_mask_bench_quick(smollm2_file, tmp_path):
    _need_jsonschemabench()
    stdout, report = _run([str(BENCH / "mask.py"), "--budget", "--quick", "--grammars", "json"],
                          tmp_path)
    assert "| smollm2 | tight |" in stdout and "cold × plain" in stdout
    tight = report["vocabs"]["smollm2"]["tight"]
    assert tight["steps"] > 0 and tight["narrowed"] > 0
    assert tight["completions"] == tight["schemas"] > 0


def test_whitespace_bench_quick(smollm2_file, tmp_path):
    pytest.importorskip("jsonschema")
    stdout, report = _run([str(BENCH / "whitespace.py"), "--quick"], tmp_path)
    assert "| smollm2 | before | flexible | off |" in stdout
    assert "| smollm2 | after | bounded | on |" in stdout
    assert {r["config"] for r in report["rows"]} == {"before", "after"}


def test_matcher_bench_quick(smollm2_file, tmp_path):
    """A generation step's cost and Python frames per token, with and without token budgets."""
    stdout, report = _run([str(BENCH / "matcher.py"), "--quick"], tmp_path)
    assert "| json schema, 5 fields |" in stdout and "| lark, max_tokens lexeme |" in stdout
    assert [r["case"] for r in report] == ["json schema, 5 fields", "lark, max_tokens lexeme"]
    assert all(r["tokens"] > 0 and 0 < r["frames_per_token"] < 10 for r in report)


def test_engine_footprint_bench_quick(smollm2_file, tmp_path):
    """Cold and disk-cached tokenizer preprocessing side by side, memory per grammar."""
    _need_jsonschemabench()
    stdout, report = _run([str(BENCH / "engine_footprint.py"), "--quick"], tmp_path)
    assert "| smollm2 | 49,152 |" in stdout and "prep ms (disk cache)" in stdout
    (row,) = report
    assert row["prep_ms"] > 0 and row["cached_ms"] > 0 and row["cache_file_mb"] > 0.1
    assert row["n_grammars"] > 0


def test_compile_bench_quick(smollm2_file, tmp_path):
    _need_jsonschemabench()
    stdout, report = _run([str(BENCH / "compile.py"), "--quick", "--no-peers"], tmp_path)
    assert "| lexguide | ttfm |" in stdout and "| lexguide | lower |" in stdout
    lex = report["summary"]["lexguide"]
    assert lex["ttfm"]["n"] == lex["compile"]["n"] > 0
    ok = [r for r in report["rows"] if "ttfm" in r]
    assert all(abs(r["compile"] + r["lower"] + r["first_mask"] - r["ttfm"]) < 1e-6 for r in ok)


def test_structural_tag_bench_quick(smollm2_file, tmp_path):
    """Masks in free text and inside a tag, forced through every engine without a refusal."""
    stdout, report = _run([str(BENCH / "structural_tag.py"), "--quick"], tmp_path)
    assert "| tool_call |" in stdout and "first free µs" in stdout
    row = report["rows"]["tool_call"]["lexguide"]
    assert row["first_error"] is None and row["repeated_error"] is None
    assert row["first_free_n"] > 0 and row["first_tag_n"] > 0
    if "xgrammar" in report["rows"]["tool_call"]:
        assert "lexguide / xgrammar" in stdout
        assert report["rows"]["tool_call"]["xgrammar"]["first_error"] is None


def test_real_shapes_bench_quick(smollm2_file, tmp_path):
    """A tiny random-weight GGUF with SmolLM2's tokenizer, written, loaded and measured."""
    stdout, report = _run([str(BENCH / "real_shapes.py"), "--quick"], tmp_path)
    assert "| tiny/q4_k_m |" in stdout and "| tiny/q4_0 |" in stdout
    (lex,) = report["runs"]["tiny/q4_k_m"]["lexguide"]  # one entry per kernel level run
    assert lex["pp32"] > 0 and lex["pp64"] > 0 and lex["tg8"] > 0 and lex["peak_rss_mb"] > 0
    assert not list(tmp_path.glob("*.gguf"))  # the generated files went to a temporary folder


def test_agents_bench_quick(smollm2_file, tmp_path):
    """Tool-calling and reasoning chats, constrained and not, measured once each."""
    stdout, report = _run([str(BENCH / "agents.py"), "--quick"], tmp_path)
    assert "| tools | constrained |" in stdout and "| reasoning | constrained |" in stdout
    for name in ("tools", "reasoning"):
        med = report["workloads"][name]["median"]
        assert med["plain"]["tok_s"] > 0 and med["constrained"]["tok_s"] > 0
        assert med["constrained"]["forced"] > 0  # tags, keys or the end marker were forced


def test_unique_items_bench_quick(smollm2_file, tmp_path):
    """uniqueItems arrays of strings against the same arrays without it, one walk each."""
    stdout, report = _run([str(BENCH / "unique_items.py"), "--quick"], tmp_path)
    assert "| tags |" in stdout and "| uniqueItems |" in stdout
    modes = {(r["schema"], r["mode"]) for r in report["rows"]}
    assert ("tags", "plain") in modes and ("arrays of arrays", "uniqueItems") in modes
    assert all(r["warm_mask_s"] > 0 and r["tokens"] > 0 for r in report["rows"])
    assert all(r["tight_steps"] > 0 for r in report["budget_rows"])
    assert all(r["complete"] == r["runs"] > 0 for r in report["random_rows"])
    assert not list(tmp_path.glob("*.md"))  # a quick run writes no results file
