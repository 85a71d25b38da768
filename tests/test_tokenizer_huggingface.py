"""``TokenizerInfo.from_huggingface``: token bytes read from a Hugging Face tokenizer's decoder.

Oracle for the real vocabularies: lexguide's own GGUF tokenizer (``Tokenizer.all_token_bytes``,
llama.cpp's ``token_to_piece``) against transformers' independent GGUF → ``tokenizers``
conversion (``tests/data/tokenizer/oracle.py``, cached, shared with the tokenizer tests), for
byte-level BPE (SmolLM2) and SentencePiece with byte fallback (Gemma 3). Small tokenizers built
with the ``tokenizers`` library pin each decoder step and the refusals.
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from lexguide import Grammar, Matcher, TokenizerInfo
from lexguide.errors import TokenizerError
from lexguide.tokenizer import Tokenizer

tokenizers = pytest.importorskip("tokenizers")

_ORACLE = Path(__file__).parent / "data" / "tokenizer" / "oracle.py"


def _oracle(request: pytest.FixtureRequest, path: Path) -> Any:
    pytest.importorskip("transformers")
    cache_dir = request.getfixturevalue("oracle_cache_dir")
    return runpy.run_path(str(_ORACLE))["hf_tokenizer_from_gguf"](path, cache_dir)


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_real_vocabularies_match_lexguides_own_bytes(request: pytest.FixtureRequest,
                                                     model: str) -> None:
    path = Path(request.getfixturevalue(f"{model}_file"))
    ours = Tokenizer.from_gguf(path)
    hf = _oracle(request, path)
    info = TokenizerInfo.from_huggingface(hf, eos_ids=sorted(ours.eog_ids))
    assert info.vocab_size == ours.vocab_size
    want = ours.all_token_bytes()
    bad = [i for i in range(ours.vocab_size) if info.token_bytes[i] != want[i]]
    assert not bad, [(i, info.token_bytes[i], want[i]) for i in bad[:10]]
    assert info.special_ids == ours.special_ids | info.eos_ids
    assert info.eos_ids == ours.eog_ids


def test_transformers_tokenizer_of_smollm2(request: pytest.FixtureRequest,
                                           smollm2_file: Path) -> None:
    transformers = pytest.importorskip("transformers")
    hf = _oracle(request, Path(smollm2_file))
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=hf, eos_token="<|im_end|>")
    info = TokenizerInfo.from_huggingface(tok)
    assert info.eos_ids == {2}
    assert info.special_names["<|im_start|>"] == 1
    assert info.encode is not None and info.encode("Hello world") == tok.encode(
        "Hello world", add_special_tokens=False)
    # a mask built on it: forced text is tokenized canonically by the tokenizer's encode
    m = Matcher(Grammar.from_lark('%llguidance {}\nstart: "Hello world" /[0-9]/'), info)
    forced = m.forced_tokens()
    assert b"".join(info.token_bytes[t] for t in forced) == b"Hello"
    with pytest.raises(TokenizerError, match="smaller"):
        TokenizerInfo.from_huggingface(tok, vocab_size=100)
    wide = TokenizerInfo.from_huggingface(tok, vocab_size=info.vocab_size + 64)
    assert wide.vocab_size == info.vocab_size + 64
    assert set(range(info.vocab_size, wide.vocab_size)) <= wide.special_ids


def _bpe(vocab: dict[str, int], merges: list, **model: Any) -> Any:
    return tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=merges, **model))


def test_byte_level_decoder_maps_the_gpt2_alphabet() -> None:
    vocab = {"a": 0, "Ġ": 1, "Ċ": 2, "Ġa": 3, "Ã©": 4, "ð": 5}
    tok = _bpe(vocab, [("Ġ", "a")])
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens(["<eos>"])
    tok.add_tokens(["  x"])  # a non-special added token contributes its text
    info = TokenizerInfo.from_huggingface(tok, eos_ids=6)
    assert info.token_bytes[:6] == (b"a", b" ", b"\n", b" a", "é".encode(), b"\xf0")
    assert info.token_bytes[6] == b"" and 6 in info.special_ids and 6 in info.eos_ids
    assert info.token_bytes[7] == b"  x" and 7 not in info.special_ids
    assert info.special_names == {"<eos>": 6}


def test_sentencepiece_decoders_space_and_byte_fallback() -> None:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xE2>": 4, "▁": 5, "▁hi": 6,
             "a": 7}
    for decoder in (
        tokenizers.decoders.Sequence([
            tokenizers.decoders.Replace("▁", " "), tokenizers.decoders.ByteFallback(),
            tokenizers.decoders.Fuse(), tokenizers.decoders.Strip(" ", 1, 0)]),
        tokenizers.decoders.Sequence([
            tokenizers.decoders.ByteFallback(), tokenizers.decoders.Metaspace()]),
    ):
        tok = _bpe(vocab, [], byte_fallback=True, unk_token="<unk>")
        tok.decoder = decoder
        tok.add_special_tokens(["<unk>", "<s>", "</s>"])
        info = TokenizerInfo.from_huggingface(tok, eos_ids=[2])
        assert info.token_bytes == (b"", b"", b"", b"\n", b"\xe2", b" ", b" hi", b"a")
        assert info.special_ids == {0, 1, 2}


@pytest.mark.parametrize("decoder,match", [
    (None, "no decoder"),
    ("wordpiece", "WordPiece"),
])
def test_decoders_without_token_bytes_are_refused(decoder: str | None, match: str) -> None:
    tok = _bpe({"a": 0, "b": 1}, [])
    if decoder == "wordpiece":
        tok.decoder = tokenizers.decoders.WordPiece()
    with pytest.raises(TokenizerError, match=match):
        TokenizerInfo.from_huggingface(tok, eos_ids=[0])


def test_eos_ids_are_checked() -> None:
    tok = _bpe({"a": 0, "b": 1}, [])
    tok.decoder = tokenizers.decoders.ByteLevel()
    with pytest.raises(TokenizerError, match="no EOS"):
        TokenizerInfo.from_huggingface(tok)
    with pytest.raises(TokenizerError, match="not a token id"):
        TokenizerInfo.from_huggingface(tok, eos_ids=[5])
    with pytest.raises(TokenizerError, match="empty"):
        TokenizerInfo.from_huggingface(tok, eos_ids=[])


def test_holes_in_the_vocabulary_are_never_allowed() -> None:
    spec = json.loads(_bpe({"a": 0, "b": 1}, []).to_str())
    spec["model"]["vocab"] = {"a": 0, "b": 3, "c": 4}  # ids 1 and 2 unused
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                       "use_regex": True}
    tok = tokenizers.Tokenizer.from_str(json.dumps(spec))
    info = TokenizerInfo.from_huggingface(tok, eos_ids=[4])
    assert info.vocab_size == 5 and {1, 2} <= info.special_ids
    mask = Matcher(Grammar.from_regex("[ab]+"), info).compute_mask()
    assert [(int(mask[0]) >> t) & 1 for t in range(4)] == [1, 0, 0, 1]


class _AddedToken(str):
    """transformers' AddedToken as far as the reader looks: its text and ``special``."""

    def __new__(cls, text: str, special: bool) -> _AddedToken:
        token = super().__new__(cls, text)
        token.special = special
        return token


class _SlowSentencePiece:
    """The surface of a transformers 4 slow SentencePiece tokenizer (``LlamaTokenizer``
    with ``use_fast=False``): pieces by id, ``sp_model``, added tokens, no Rust backend."""

    sp_model = object()
    eos_token_id = 2

    def get_vocab(self) -> dict[str, int]:
        return {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁hi": 4, "é": 5}

    added_tokens_decoder = {0: _AddedToken("<unk>", True), 1: _AddedToken("<s>", True),
                            2: _AddedToken("</s>", True), 6: _AddedToken("<tool>", False)}


class _SlowByteLevel:
    byte_encoder = {}
    eos_token_id = 3
    added_tokens_decoder = {3: _AddedToken("<|endoftext|>", True)}

    def get_vocab(self) -> dict[str, int]:
        return {"Ġhi": 0, "Ċ": 1, "Ã©": 2, "<|endoftext|>": 3}


def test_slow_tokenizers() -> None:
    info = TokenizerInfo.from_huggingface(_SlowSentencePiece())
    assert info.token_bytes == (b"", b"", b"", b"\n", b" hi", "é".encode(), b"<tool>")
    assert info.special_ids == {0, 1, 2} and info.eos_ids == {2}
    info = TokenizerInfo.from_huggingface(_SlowByteLevel())
    assert info.token_bytes == (b" hi", b"\n", "é".encode(), b"")
    with pytest.raises(TokenizerError, match="cannot read token bytes"):
        TokenizerInfo.from_huggingface(object())
