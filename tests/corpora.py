"""Test data that is not code: the vendored data sets and the external corpora.

Small public data sets under a free license are vendored in ``tests/data`` (each folder has its
license and a README naming the source): :data:`LLAMA_CPP` (llama.cpp's grammar test cases and
grammars), :data:`LLGUIDANCE` (llguidance's sample grammars and documents) and
``json-schema-test-suite`` (read by ``suite_runner.py``).

The others (JSONSchemaBench, llguidance's recorded results) are in the folder named by
``LEXGUIDE_CORPORA`` (layout and public sources in docs/bench.md). There is no default path; a
test that needs a corpus skips, naming the variable, when it is not set or lacks the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "LEXGUIDE_CORPORA"
DATA = Path(__file__).resolve().parent / "data"
LLAMA_CPP = DATA / "llama.cpp"  # gbnf-cases.jsonl, llguidance-cases.jsonl, grammars/*.gbnf
LLGUIDANCE = DATA / "llguidance"  # rfc.lark, rfc.xml, blog.schema.json, blog.sample.json


def find(rel: str) -> Path | None:
    """``rel`` inside the corpora folder, or None when the variable is unset or it is absent."""
    base = os.environ.get(ENV)
    if not base or not (Path(base) / rel).exists():
        return None
    return Path(base) / rel


def why_missing(rel: str) -> str:
    base = os.environ.get(ENV)
    if not base:
        return f"{rel} needs the external corpora: set {ENV} (see docs/bench.md)"
    return f"{rel} not found under {ENV}={base} (see docs/bench.md)"


def require(rel: str) -> Path:
    """``rel`` inside the corpora folder; skips the calling test when it is not there."""
    path = find(rel)
    if path is None:
        pytest.skip(why_missing(rel))
    return path
