"""``bench/integrations.py --quick`` runs and prints its table (the transformers part here; the
vLLM part needs the vLLM tier's venv and is run by hand, see docs/integrations.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "integrations.py"


def test_quick_transformers_part(smollm2_file, tmp_path) -> None:
    for module in ("torch", "transformers", "gguf", "accelerate", "jsonschema"):
        pytest.importorskip(module)
    result = subprocess.run([sys.executable, str(BENCH), "--quick", "--part", "transformers",
                             "--torch-threads", "1", "--json", str(tmp_path / "out.json")],
                            capture_output=True, text=True, timeout=900, check=False,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if "ms/token plain" in line)
    rows = [line.split() for line in lines[header + 1: header + 3]]
    assert [r[0] for r in rows] == ["1", "2"]
    for row in rows:
        plain, constrained, per_call, ratio = map(float, row[1:])
        assert plain > 0 and constrained > 0 and 0 < per_call < constrained
        assert ratio == pytest.approx(constrained / plain, rel=0.02)


def test_the_vllm_table_from_recorded_runs() -> None:
    """The vLLM part's table (its runs need the vLLM tier's venv): ratios, valid shares and the
    constraint cost per step, from a synthetic result."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_integrations", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def run(wall, tokens, valid, constraint=0.0, steps=0):
        return {"wall_s": wall, "tokens": tokens, "valid": valid, "requests": 4,
                "constraint_s": constraint, "constraint_cpu_s": constraint / 2,
                "constrained_steps": steps}

    data = {"vllm": "0.32.0", "requests": 4, "rounds": 2, "max_tokens": 64, "runs": {
        "lexguide@xgrammar": [run(10, 100, 4, 0.02, 10), run(10, 100, 4, 0.02, 10)],
        "xgrammar": [run(20, 100, 3, 0.08, 20), run(20, 100, 4, 0.08, 20)],
        "none@xgrammar": [run(5, 100, 0), run(5, 100, 0)]}}
    rows = {line.split()[0]: line.split() for line in bench._summarise_vllm(data)[2:5]}
    assert rows["lexguide@xgrammar"][1:] == ["10.0", "8/8", "2.00", "0.50", "2.00", "1.00",
                                             "0.2%"]
    assert rows["xgrammar"][1:] == ["5.0", "7/8", "1.00", "0.25", "4.00", "2.00", "0.4%"]
    assert rows["none@xgrammar"][1:3] == ["(no", "schema)"]
