"""The engine's thread pool is sized from Python (``lexguide.engine.set_engine_threads``); the
native core reads no environment: ``LEXGUIDE_ENGINE_THREADS`` is read once, by
``lexguide.engine``'s import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from lexguide import Grammar, Matcher, TokenizerInfo, fill_masks
from lexguide.engine import engine_threads, set_engine_threads

ROOT = Path(__file__).resolve().parents[1]


def _threads_in_child(env_value: str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "LEXGUIDE_ENGINE_THREADS"}
    if env_value is not None:
        env["LEXGUIDE_ENGINE_THREADS"] = env_value
    r = subprocess.run([sys.executable, "-c", "import lexguide.engine as e; print(e.engine_threads())"],
                       env=env, capture_output=True, text=True, timeout=120, check=True)
    return int(r.stdout.strip()), r.stderr


def test_environment_read_once_by_the_python_layer():
    default, _ = _threads_in_child(None)
    assert default >= 1
    assert _threads_in_child("3")[0] == 3
    n, err = _threads_in_child("lots")
    assert n == default and "LEXGUIDE_ENGINE_THREADS='lots' ignored" in err


def test_set_engine_threads_resizes_the_pool_and_masks_agree():
    before = engine_threads()
    info = TokenizerInfo.from_token_bytes([b"<eos>", b"a", b"b", b"ab", b"ba"], eos_ids=[0])
    ms = [Matcher(Grammar.from_regex(rx), info) for rx in ("(ab)+", "a*b", "b(a|b)*", "ab?a")]
    try:
        for n in (3, 1, 0):  # 0 is clamped to 1
            set_engine_threads(n)
            assert engine_threads() == max(1, n)
            out = np.zeros((len(ms), info.n_words), dtype=np.uint32)
            fill_masks(ms, out, n_threads=4)
            assert all(np.array_equal(out[i], m.compute_mask()) for i, m in enumerate(ms))
    finally:
        set_engine_threads(before)


def test_the_core_reads_no_environment():
    sources = [p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".cc", ".h")]
    assert sources
    readers = [str(p.relative_to(ROOT)) for p in sources if "getenv(" in p.read_text()]
    assert readers == []
