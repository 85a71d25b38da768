"""``bench/runtime.py --quick --batched-only`` runs and prints its table (a smoke test: the
figures themselves belong to the benchmark, not to tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "runtime.py"


def test_batched_quick_mode_prints_its_table(smollm2_file, tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--batched-only", "--no-peer",
                           "--models", "smollm2", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "| smollm2 | 8 |" in proc.stdout
    rates = json.loads(out.read_text())["results"]["smollm2/lexguide"]["batched_tok_s"]
    assert set(rates) == {"1", "2", "4", "8"} and all(v > 0 for v in rates.values())
