"""`lexguide inspect`: text and JSON reports of a GGUF file, errors as exit status 1."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lexguide.cli import build_parser, main
from lexguide.gguf import write_gguf


@pytest.fixture()
def tiny(tmp_path):
    rng = np.random.default_rng(0)
    return write_gguf(
        tmp_path / "tiny.gguf",
        {
            "general.architecture": "llama",
            "general.file_type": 7,
            "llama.attention.layer_norm_rms_epsilon": 1e-5,
            "tokenizer.ggml.tokens": [f"tok{i}" for i in range(20)],
            "tokenizer.ggml.scores": np.arange(20, dtype=np.float32) / 10,
            "tokenizer.chat_template": "x" * 300,
            "general.tags": ["a", "b"],
        },
        {
            "token_embd.weight": (rng.normal(size=(20, 64)).astype(np.float32), "Q8_0"),
            "blk.0.attn_norm.weight": np.ones(64, np.float32),
            "output.weight": (rng.normal(size=(20, 64)).astype(np.float32), "Q4_0"),
        },
    )


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_json_report(tiny, capsys):
    status, out, _ = run(capsys, "inspect", str(tiny), "--json", "--tensors")
    assert status == 0
    report = json.loads(out)
    assert report["version"] == 3 and report["architecture"] == "llama"
    assert report["file_type"] == "MOSTLY_Q8_0"
    assert report["metadata"]["tokenizer.ggml.tokens"] == {
        "length": 20, "head": [f"tok{i}" for i in range(8)]}
    assert report["metadata"]["general.tags"] == ["a", "b"]
    assert report["metadata"]["llama.attention.layer_norm_rms_epsilon"] == 1e-5
    assert report["metadata"]["tokenizer.ggml.scores"]["head"][:3] == [0.0, 0.1, 0.2]
    assert report["metadata_types"]["tokenizer.ggml.tokens"] == "string[]"
    assert report["n_parameters"] == 20 * 64 * 2 + 64
    assert report["types"]["Q8_0"] == {"tensors": 1, "parameters": 1280, "bytes": 20 * 2 * 34}
    assert report["types"]["Q4_0"]["bytes"] == 20 * 2 * 18
    assert [t["name"] for t in report["tensors"]] == [
        "token_embd.weight", "blk.0.attn_norm.weight", "output.weight"]
    assert report["tensors"][0]["shape"] == [20, 64]


def test_json_without_tensors_has_totals_only(tiny, capsys):
    status, out, _ = run(capsys, "inspect", "-m", str(tiny), "--json")
    report = json.loads(out)
    assert status == 0 and "tensors" not in report and report["n_tensors"] == 3


def test_text_report(tiny, capsys):
    status, out, _ = run(capsys, "inspect", str(tiny), "--tensors")
    assert status == 0
    assert "GGUF v3  architecture=llama" in out
    assert "[20 items]" in out and "(300 chars)" in out
    assert "parameters: 2,624" in out
    assert "token_embd.weight" in out and "20×64" in out


def test_default_model_is_smollm2(smollm2_file, capsys):
    status, out, _ = run(capsys, "inspect", "--json")
    report = json.loads(out)
    assert status == 0 and report["path"] == str(smollm2_file)
    assert report["n_tensors"] == 272 and report["types"]["Q4_1"]["tensors"] == 210
    assert report["metadata"]["tokenizer.ggml.tokens"]["length"] == 49152


def test_bad_files_exit_1_with_the_offset(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    status, _, err = run(capsys, "inspect", str(bad))
    assert status == 1 and "at byte 4" in err and "version 1" in err
    status, _, err = run(capsys, "inspect", str(tmp_path / "missing.gguf"))
    assert status == 1 and "cannot open" in err


def test_no_command_prints_help_and_exits_2(capsys):
    status, _, err = run(capsys)
    assert status == 2 and "inspect" in err


def test_every_registered_command_has_a_handler():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert callable(p.get_default("handler")), name
