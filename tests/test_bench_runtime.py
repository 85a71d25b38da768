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


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_runtime", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rss_parts_finds_a_mapped_file(tmp_path):
    """The resident-memory breakdown attributes a mapped, touched file to "model"."""
    import mmap

    bench = _bench_module()
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\x01" * (4 << 20))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert sum(mm[i] for i in range(0, len(mm), 4096)) == 1024  # touch every page
        parts = bench._rss_parts(str(path))
    if parts is None:  # no /proc/self/smaps on this platform
        return
    assert 3.9 <= parts["model"] <= 4.1
    assert parts["libs"] > 0 and parts["anon"] > 0


def test_rss_table_floor_and_peak_ratios():
    bench = _bench_module()
    lg = {"file_mb": 100.0, "rss_python": {"model": 0.0, "libs": 8.0, "anon": 6.0},
          "rss_import": {"model": 0.0, "libs": 16.0, "anon": 19.0},
          "rss_gen_mb": 170.0, "rss_gen_parts": {"model": 98.0, "libs": 20.0, "anon": 50.0},
          "rss_peak_mb": 190.0, "rss_end_parts": {"model": 98.0, "libs": 20.0, "anon": 70.0}}
    table = bench.render_rss({("m", "lexguide"): lg, ("m", "baseline"): lg})
    rows = [r for r in table.splitlines() if r.startswith("| m |")]
    assert rows == [
        "| m | 100 | 14 | 35 | generation | 98 | 20 | 50 | 168 | 170 | 1.35 | 1.70 |",
        "| m | 100 | 14 | 35 | end | 98 | 20 | 70 | 188 | 190 | 1.35 | 1.90 |",
    ]
