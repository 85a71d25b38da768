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
