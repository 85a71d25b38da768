"""Exactness against an independent reference: Hugging Face ``tokenizers`` built from the same GGUF.

The oracle is transformers' own GGUF → ``tokenizers`` conversion (Rust BPE, Oniguruma regexes,
its own Unicode tables). One correction: for ``tokenizer.ggml.pre == "smollm"`` transformers keeps
only the GPT-2 split, while llama.cpp (and SmolLM2's original ``tokenizer.json``) first isolate
every digit, so the oracle gets ``Digits(individual_digits=True)`` in front of ``ByteLevel``.
Converted oracles are cached in pytest's cache directory (Gemma's takes ~30 s to build once).

The corpus (``tests/data/tokenizer/corpus.py``) has 2400 deterministic strings: prose, code,
JSON, numbers, CJK, emoji, combining marks, whitespace runs, special-token text.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from lexguide.tokenizer import Tokenizer

_CORPUS = Path(__file__).parent / "data" / "tokenizer" / "corpus.py"


def _load_corpus_module() -> Any:
    spec = importlib.util.spec_from_file_location("lexguide_tokenizer_corpus", _CORPUS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CORPUS: list[str] = _load_corpus_module().build_corpus()


def _convert(path: Path) -> Any:
    """transformers' GGUF tokenizer conversion → a ``tokenizers.Tokenizer``."""
    pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    try:  # fast path: feed metadata we already parsed (transformers >= 5 internals)
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )
    except ImportError:  # public (slower) path of any version with GGUF support
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer
    from lexguide.gguf import open_gguf

    with open_gguf(path) as gguf:
        md = gguf.metadata
        arch = md["general.architecture"]
        fields = {
            name: md[f"tokenizer.{key}"]
            for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
            if f"tokenizer.{key}" in md
        }
    for key in ("scores", "token_type"):
        if key in fields:
            fields[key] = fields[key].tolist()
    backend, _ = convert_gguf_tokenizer(arch, fields)
    assert isinstance(backend, tokenizers.Tokenizer)
    return backend


def _oracle(request: pytest.FixtureRequest, path: Path, pre: str) -> Any:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    cache_dir = Path(request.config.cache.mkdir("lexguide-tokenizer-oracle"))
    cached = cache_dir / f"{path.stem}-{path.stat().st_size}-tf{transformers.__version__}.json"
    if cached.exists():
        hf = tokenizers.Tokenizer.from_file(str(cached))
    else:
        hf = _convert(path)
        hf.save(str(cached))
    if pre == "smollm":
        from tokenizers import pre_tokenizers

        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    return hf


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def pair(request: pytest.FixtureRequest) -> tuple[Tokenizer, Any]:
    path = request.getfixturevalue(f"{request.param}_file")
    ours = Tokenizer.from_gguf(path)
    return ours, _oracle(request, Path(path), ours.pre)


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
