"""Exactness against an independent reference: Hugging Face ``tokenizers`` built from the same GGUF.

The oracle (``tests/data/tokenizer/oracle.py``) is transformers' own GGUF → ``tokenizers``
conversion, with llama.cpp's digit split added for ``smollm``; converted oracles are cached in
pytest's cache directory (Gemma's takes ~30 s to build once).

The corpus (``tests/data/tokenizer/corpus.py``) has 2400 deterministic strings: prose, code,
JSON, numbers, CJK, emoji, combining marks, whitespace runs, special-token text.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from lexguide.tokenizer import Tokenizer

_DATA = Path(__file__).parent / "data" / "tokenizer"


CORPUS: list[str] = runpy.run_path(str(_DATA / "corpus.py"))["build_corpus"]()


def _oracle(request: pytest.FixtureRequest, path: Path) -> Any:
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    cache_dir = request.getfixturevalue("oracle_cache_dir")
    return runpy.run_path(str(_DATA / "oracle.py"))["hf_tokenizer_from_gguf"](path, cache_dir)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def pair(request: pytest.FixtureRequest) -> tuple[Tokenizer, Any]:
    path = request.getfixturevalue(f"{request.param}_file")
    return Tokenizer.from_gguf(path), _oracle(request, Path(path))


def _mismatches(ours: Tokenizer, hf: Any, parse_special: bool) -> list[str]:
    """Corpus strings whose ids differ (BOS/EOS are left out: the converted oracle has no
    post-processor; BOS placement is pinned by the llama.cpp reference ids elsewhere)."""
    hf.encode_special_tokens = not parse_special
    bad = []
    for text in CORPUS:
        got = ours.encode(text, add_special=False, parse_special=parse_special)
        want = hf.encode(text, add_special_tokens=False).ids
        if got != want:
            bad.append(f"{text!r}: ours {got[:12]} reference {want[:12]}")
    return bad


def test_corpus_is_large_and_varied() -> None:
    assert len(CORPUS) >= 2000 and len(set(CORPUS)) >= 1900
    joined = "".join(CORPUS)
    for probe in ("東", "🙂", "\u0301", "\t\t", "\r\n", "<|im_start|>", "<end_of_turn>", "{\"", "123"):
        assert probe in joined


@pytest.mark.parametrize("parse_special", [False, True])
def test_encode_matches_reference(pair: tuple[Tokenizer, Any], parse_special: bool) -> None:
    ours, hf = pair
    bad = _mismatches(ours, hf, parse_special)
    assert not bad, f"{len(bad)} mismatches, first: " + "\n".join(bad[:5])


def test_roundtrip_and_bytes(pair: tuple[Tokenizer, Any]) -> None:
    ours, _ = pair
    table = ours.all_token_bytes()
    for text in CORPUS:
        ids = ours.encode(text, add_special=False)
        assert b"".join(table[t] for t in ids) == text.encode("utf-8"), text
        assert ours.decode(ids) == text
        assert ours.decode(ours.encode(text)) == text


def test_random_code_points_match_reference(pair: tuple[Tokenizer, Any]) -> None:
    """Random strings over the whole BMP and planes 1–3 (letters, marks, symbols, unassigned
    code points): checks the stored Unicode classes against the reference's own tables."""
    import random

    ours, hf = pair
    hf.encode_special_tokens = True
    rng = random.Random(5)
    bad = []
    for _ in range(2000):
        cps = [rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x3000),
                           rng.randint(0x3000, 0xFFFD), rng.randint(0x10000, 0x3FFFF),
                           ord(rng.choice(" \n\t1a"))]) for _ in range(rng.randint(1, 12))]
        text = "".join(chr(c) for c in cps if not 0xD800 <= c < 0xE000)
        if ours.encode(text, add_special=False) != hf.encode(text, add_special_tokens=False).ids:
            bad.append(text)
    assert not bad, f"{len(bad)} mismatches, first: {bad[:5]!r}"
