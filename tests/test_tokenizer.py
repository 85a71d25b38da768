"""Tokenizer unit tests on synthetic vocabularies (no model files needed)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import lexguide
from lexguide import TokenizerError
from lexguide.tokenizer import Tokenizer, TokenType
from lexguide.tokenizer.byte_level import BYTE_TO_CHAR
from lexguide.tokenizer.pretokenize import SUPPORTED_PRE_TYPES, pretokenizer_for
from lexguide.tokenizer.unicode_classes import UNICODE_VERSION, generate

N, C, U, B, UD, UNUSED = (TokenType.NORMAL, TokenType.CONTROL, TokenType.UNKNOWN, TokenType.BYTE,
                          TokenType.USER_DEFINED, TokenType.UNUSED)


def gpt2_metadata(
    extra: list[tuple[str, int]] = (),  # type: ignore[assignment]
    merges: list[str] = (),  # type: ignore[assignment]
    pre: str = "gpt-2",
    **keys: Any,
) -> dict[str, Any]:
    """A byte-level vocabulary: ``extra`` tokens first, then the 256 alphabet characters, then
    one token per merge result."""
    tokens = [t for t, _ in extra] + list(BYTE_TO_CHAR)
    types = [ty for _, ty in extra] + [N] * 256
    for m in merges:
        left, right = m.split(" ")
        if left + right not in tokens:
            tokens.append(left + right)
            types.append(N)
    md = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": np.array(types, dtype=np.int32),
        "tokenizer.ggml.merges": list(merges),
    }
    md.update({f"tokenizer.ggml.{k}": v for k, v in keys.items()})
    return md


def spm_metadata(pieces: list[tuple[str, float, int]], **keys: Any) -> dict[str, Any]:
    """An SPM vocabulary: ``<unk> <s> </s>``, the given ``(text, score, type)`` pieces, then the
    256 byte tokens ``<0xHH>``."""
    rows = [("<unk>", 0.0, U), ("<s>", 0.0, C), ("</s>", 0.0, C), *pieces]
    rows += [(f"<0x{b:02X}>", 0.0, B) for b in range(256)]
    md = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [r[0] for r in rows],
        "tokenizer.ggml.scores": np.array([r[1] for r in rows], dtype=np.float32),
        "tokenizer.ggml.token_type": np.array([r[2] for r in rows], dtype=np.int32),
    }
    md.update({f"tokenizer.ggml.{k}": v for k, v in keys.items()})
    return md


def texts_of(tok: Tokenizer, ids: list[int]) -> list[str]:
    return [tok.token_text(i) for i in ids]


# ------------------------------------------------------------------------------------ surface


def test_public_surface() -> None:
    import lexguide.tokenizer as mod

    assert sorted(mod.__all__) == ["TokenAttr", "TokenType", "Tokenizer"]
    assert lexguide.Tokenizer is Tokenizer


def test_unicode_table_matches_interpreter() -> None:
    import unicodedata

    if unicodedata.unidata_version != UNICODE_VERSION:
        pytest.skip(f"tables built from Unicode {UNICODE_VERSION}, running {unicodedata.unidata_version}")
    from pathlib import Path

    import lexguide.tokenizer.unicode_classes as uc

    stored = Path(uc.__file__).with_name("_unicode_ranges.py").read_text(encoding="utf-8")
    assert generate() == stored


# ------------------------------------------------------------------------------ pre-tokenizers


@pytest.mark.parametrize(
    ("pre", "text", "pieces"),
    [
        ("gpt-2", "Hello  world!!", ["Hello", " ", " world", "!!"]),
        ("gpt-2", "don't DON'T", ["don", "'t", " DON", "'", "T"]),
        ("gpt-2", "a  \n b", ["a", "  \n", " b"]),
        ("gpt-2", "x = 12.5;", ["x", " =", " 12", ".", "5", ";"]),
        ("llama-bpe", "12345", ["123", "45"]),
        ("llama-bpe", "DON'T stop", ["DON", "'T", " stop"]),
        ("llama-bpe", "a\n\n  b", ["a", "\n\n", " ", " b"]),
        ("llama-bpe", "(x)\n", ["(x", ")\n"]),
        ("llama-bpe", "  hello", [" ", " hello"]),
        ("qwen2", "12345", ["1", "2", "3", "4", "5"]),
        ("qwen2", "٣٤", ["٣", "٤"]),  # Arabic-Indic digits are \p{N}
        ("smollm", " 123", [" ", "1", "2", "3"]),
        ("smollm", "a1b", ["a", "1", "b"]),
        ("smollm", "x  2", ["x", "  ", "2"]),
        ("default", "a+=b", ["a", "+=", "b"]),
        ("default", "1234567", ["123", "456", "7"]),
        ("falcon", "a,b 1234", ["a", ",", "b", " ", "123", "4"]),
    ],
)
def test_pretokenizer_splits(pre: str, text: str, pieces: list[str]) -> None:
    assert pretokenizer_for(pre)(text) == pieces


def test_pretokenizer_unicode_classes() -> None:
    split = pretokenizer_for("gpt-2")
    assert split("café 東京 naïve") == ["café", " 東京", " naïve"]
    # U+3000 is White_Space; U+001C is not (Python's own \s would say it is)
    assert split("a\u3000\u3000b") == ["a", "\u3000", "\u3000", "b"]
    assert split("a\x1cb") == ["a", "\x1c", "b"]
    # combining marks are not letters: they split off like punctuation does
    assert split("e\u0301x") == ["e", "\u0301", "x"]


@pytest.mark.parametrize("pre", ["default", "gpt-2", "llama-bpe", "qwen2", "smollm", "falcon"])
def test_pretokenizer_is_a_partition(pre: str) -> None:
    rng = random.Random(pre)
    alphabet = "ab Z9٣'s\n\r\t  .,!é\u0301東🙂_-\u3000$+<=|"
    split = pretokenizer_for(pre)
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        pieces = split(text)
        assert "".join(pieces) == text and all(pieces)


def test_missing_pre_tokenizer_warns_and_uses_default() -> None:
    md = gpt2_metadata()
    del md["tokenizer.ggml.pre"]
    with pytest.warns(UserWarning, match="tokenizer.ggml.pre"):
        tok = Tokenizer.from_metadata(md)
    assert tok.pre == "default"


def test_unknown_pre_tokenizer_is_an_error() -> None:
    with pytest.raises(TokenizerError, match="not supported"):
        pretokenizer_for("tekken-9000")
    with pytest.raises(TokenizerError, match="'tekken-9000'"):
        Tokenizer.from_metadata(gpt2_metadata(pre="tekken-9000"))
    assert "smollm" in SUPPORTED_PRE_TYPES and "llama-bpe" in SUPPORTED_PRE_TYPES


# ------------------------------------------------------------------------------- byte-level BPE


def test_bpe_lowest_rank_first() -> None:
    # rank 0 "b c" beats rank 1 "a b" although "a b" is further left
    tok = Tokenizer.from_metadata(gpt2_metadata(merges=["b c", "a b"]))
    assert texts_of(tok, tok.encode("abc")) == ["a", "bc"]
    tok = Tokenizer.from_metadata(gpt2_metadata(merges=["a b", "b c"]))
    assert texts_of(tok, tok.encode("abc")) == ["ab", "c"]


def test_bpe_equal_pairs_merge_leftmost_first() -> None:
    tok = Tokenizer.from_metadata(gpt2_metadata(merges=["a a", "aa a"]))
    # "aaa": leftmost "a a" first -> "aa","a" -> "aaa"
    assert texts_of(tok, tok.encode("aaa")) == ["aaa"]
    # "aaaa": "aa","a","a" -> rank 0 "a a" again beats rank 1 "aa a" -> "aa","aa"
    assert texts_of(tok, tok.encode("aaaa")) == ["aa", "aa"]


def test_bpe_maps_bytes_through_the_alphabet() -> None:
    tok = Tokenizer.from_metadata(gpt2_metadata(merges=["Ġ w", "Ġw o"]))
    ids = tok.encode(" wo\n", add_special=False)
    assert texts_of(tok, ids) == ["Ġwo", "Ċ"]
    assert [tok.token_bytes(i) for i in ids] == [b" wo", b"\n"]
    assert tok.decode(tok.encode("é🙂")) == "é🙂"


def test_bpe_ignore_merges_for_llama3() -> None:
    # "xyz" is a token but no merge chain builds it; Llama-3 emits whole-piece tokens directly
    md = gpt2_metadata(extra=[("xyz", N)], merges=["x y"], pre="llama-bpe")
    tok = Tokenizer.from_metadata(md)
    assert texts_of(tok, tok.encode("xyz", add_special=False)) == ["xyz"]
    md = gpt2_metadata(extra=[("xyz", N)], merges=["x y"], pre="gpt-2")
    tok = Tokenizer.from_metadata(md)
    assert texts_of(tok, tok.encode("xyz")) == ["xy", "z"]


def test_bpe_defaults_and_bos() -> None:
    md = gpt2_metadata(extra=[("<|begin|>", C)] * 1, pre="llama-bpe", bos_token_id=0)
    tok = Tokenizer.from_metadata(md)
    assert tok.add_bos and tok.encode("a")[0] == 0  # llama-bpe adds BOS by default
    md["tokenizer.ggml.add_bos_token"] = False
    assert Tokenizer.from_metadata(md).encode("a") == [Tokenizer.from_metadata(md).encode("a")[0]]
    plain = Tokenizer.from_metadata(gpt2_metadata())
    assert plain.bos_id == 11 and plain.eos_id == 11 and not plain.add_bos  # llama.cpp defaults


def test_bpe_missing_alphabet_character_is_an_error() -> None:
    md = gpt2_metadata()
    md["tokenizer.ggml.tokens"][4] = "[removed]"  # the character for byte 0x04
    tok = Tokenizer.from_metadata(md)
    with pytest.raises(TokenizerError, match="no token"):
        tok.encode("a\x04")


# ------------------------------------------------------------------------------------------ SPM


def _brute_force_spm(text: str, vocab: dict[str, tuple[int, float]]) -> list[str]:
    """Reference: repeatedly merge the best adjacent pair (highest score, then leftmost)."""
    syms = list(text)
    while True:
        best = None
        for i in range(len(syms) - 1):
            entry = vocab.get(syms[i] + syms[i + 1])
            if entry is not None and (best is None or entry[1] > best[1]):
                best = (i, entry[1])
        if best is None:
            return syms
        i = best[0]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]


SPM_PIECES = [
    ("▁", -1.0, N), ("▁H", -5.0, N), ("▁He", -4.0, N), ("ll", -2.0, N), ("▁Hell", -3.0, N),
    ("▁Hello", -1.5, N), ("o", -6.0, N), ("▁w", -4.5, N), ("or", -3.5, N), ("▁wor", -3.2, N),
    ("ld", -3.0, N), ("▁world", -1.2, N), ("H", -9.0, N), ("e", -9.0, N), ("l", -9.0, N),
    ("w", -9.0, N), ("r", -9.0, N), ("d", -9.0, N), ("x▁y", -0.5, N), ("x▁", -0.7, N), ("x", -9.0, N), ("y", -9.0, N),
    ("▁▁", -2.5, N), ("a", -9.0, N), ("b", -9.0, N), ("ab", -7.0, N), ("ba", -6.5, N),
    ("<tag>", 0.0, UD), ("<|ctl|>", 0.0, C), ("<unused7>", 0.0, C), ("[pad]", 0.0, UNUSED),
]


def test_spm_basic_and_space_prefix() -> None:
    tok = Tokenizer.from_metadata(spm_metadata(SPM_PIECES))
    assert tok.bos_id == 1 and tok.eos_id == 2 and tok.add_bos and tok.add_space_prefix
    ids = tok.encode("Hello world")
    assert ids[0] == 1 and texts_of(tok, ids[1:]) == ["▁Hello", "▁world"]
    assert tok.decode(ids) == "Hello world"
    assert tok.decode(ids, strip_space_prefix=False) == " Hello world"
    no_prefix = Tokenizer.from_metadata(spm_metadata(SPM_PIECES, add_space_prefix=False))
    assert texts_of(no_prefix, no_prefix.encode("Hello", add_special=False))[0] == "H"


def test_spm_byte_fallback() -> None:
    tok = Tokenizer.from_metadata(spm_metadata(SPM_PIECES, add_space_prefix=False))
    ids = tok.encode("\U0002a6d6", add_special=False)
    assert texts_of(tok, ids) == ["<0xF0>", "<0xAA>", "<0x9B>", "<0x96>"]
    assert tok.decode(ids) == "\U0002a6d6"
    assert tok.decode(ids[:2]) == "\ufffd"  # truncated UTF-8 -> replacement character


def test_spm_tokens_spanning_a_space() -> None:
    # "x▁y" contains a space in the middle: the chunking speed-up must not cut before that ▁
    tok = Tokenizer.from_metadata(spm_metadata(SPM_PIECES, add_space_prefix=False))
    assert texts_of(tok, tok.encode("x y", add_special=False)) == ["x▁y"]
    assert texts_of(tok, tok.encode("a y", add_special=False)) == ["a", "▁", "y"]


def test_spm_matches_brute_force() -> None:
    md = spm_metadata(SPM_PIECES, add_space_prefix=False)
    tok = Tokenizer.from_metadata(md)
    vocab = {t: (i, float(s)) for i, (t, s) in enumerate(zip(md["tokenizer.ggml.tokens"],
                                                            md["tokenizer.ggml.scores"]))}
    rng = random.Random(3)
    for _ in range(500):
        text = "".join(rng.choice("Helo wrdxyab ") for _ in range(rng.randrange(1, 25)))
        want = _brute_force_spm(text.replace(" ", "▁"), vocab)
        got = texts_of(tok, tok.encode(text, add_special=False))
        assert got == want, text


def test_spm_space_prefix_after_special_tokens() -> None:
    tok = Tokenizer.from_metadata(spm_metadata(SPM_PIECES))
    ids = tok.encode("Hello<tag>Hello", add_special=False)
    # llama.cpp prefixes a space to every fragment that follows a special/user-defined token
    assert texts_of(tok, ids) == ["▁Hello", "<tag>", "▁Hello"]


# -------------------------------------------------------------------------- special partitioning


def test_partition_user_defined_always_control_only_when_parsing() -> None:
    tok = Tokenizer.from_metadata(spm_metadata(SPM_PIECES, add_space_prefix=False))
    ctl = tok.encode("<|ctl|>", add_special=False, parse_special=True)
    tag = [tok.token_text(i) for i in range(tok.vocab_size)].index("<tag>")
    assert texts_of(tok, ctl) == ["<|ctl|>"]
    plain = tok.encode("<|ctl|>", add_special=False)
    assert len(plain) > 1 and tok.decode(plain) == "<|ctl|>"
    assert tok.encode("a<tag>b", add_special=False) == [tok.encode("a", False)[0], tag,
                                                       tok.encode("b", False)[0]]


def test_partition_longest_candidate_first() -> None:
    # llama.cpp extracts the longest candidate everywhere before shorter ones: in "abcd" the
    # longer "bcd" wins over "ab" although "ab" starts earlier
    md = gpt2_metadata(extra=[("ab", UD), ("bcd", UD)])
    tok = Tokenizer.from_metadata(md)
    assert texts_of(tok, tok.encode("abcd")) == ["a", "bcd"]
    assert texts_of(tok, tok.encode("abab")) == ["ab", "ab"]


def test_phi3_special_tokens_swallow_following_whitespace() -> None:
    # llama.cpp gives every special/added token of a Phi-3 model RSTRIP, except <unk> <s>
    pieces = [("<|user|>", 0.0, C), ("<|end|>", 0.0, C), *SPM_PIECES]
    md = spm_metadata(pieces, add_space_prefix=False)
    md["general.name"] = "Phi-3 mini"
    tok = Tokenizer.from_metadata(md)
    ids = tok.encode("<|user|> \n Hello<|end|>", add_special=False, parse_special=True)
    assert texts_of(tok, ids) == ["<|user|>", "H", "e", "ll", "o", "<|end|>"]
    ids = tok.encode("<s>  x", add_special=False, parse_special=True)
    assert texts_of(tok, ids) == ["<s>", "▁▁", "x"]  # <s> keeps the whitespace
    plain = Tokenizer.from_metadata(spm_metadata(pieces, add_space_prefix=False))
    ids = plain.encode("<|user|> x", add_special=False, parse_special=True)
    assert texts_of(plain, ids) == ["<|user|>", "▁", "x"]


def test_jina_mask_swallows_preceding_whitespace() -> None:
    md = gpt2_metadata(extra=[("<mask>", C)], pre="jina-v2-es")
    tok = Tokenizer.from_metadata(md)
    ids = tok.encode("a \t<mask> b", parse_special=True)
    assert texts_of(tok, ids) == ["a", "<mask>", "Ġ", "b"]


# ------------------------------------------------------------------------------ bytes and specials


def test_token_bytes_by_type() -> None:
    md = gpt2_metadata(extra=[("<|endoftext|>", C), ("<think>", UD), ("[UNUSED]", UNUSED)],
                       merges=["Ġ Ġ"])
    tok = Tokenizer.from_metadata(md)
    assert tok.token_bytes(0) == b"" and tok.token_bytes(1) == b"<think>" and tok.token_bytes(2) == b""
    table = tok.all_token_bytes()
    assert table[3:3 + 256] == [bytes([b]) for b in range(256)]
    assert table[-1] == b"  "
    assert tok.special_ids == frozenset({0}) and 0 in tok.eog_ids

    spm = Tokenizer.from_metadata(spm_metadata(SPM_PIECES))
    sb = spm.all_token_bytes()
    texts = [spm.token_text(i) for i in range(spm.vocab_size)]
    assert sb[texts.index("▁Hello")] == b" Hello"
    assert sb[texts.index("x▁y")] == b"x y"
    assert sb[texts.index("<0x0A>")] == b"\n"
    assert sb[texts.index("<tag>")] == b"<tag>"
    for name in ("<unk>", "<s>", "</s>", "<|ctl|>", "<unused7>", "[pad]"):
        assert sb[texts.index(name)] == b""
    assert spm.special_ids == {texts.index(t) for t in ("<unk>", "<s>", "</s>", "<|ctl|>", "<unused7>")}


def test_eog_detection() -> None:
    extra = [("<|im_end|>", C), ("<|endoftext|>", C), ("<|fim_pad|>", C), ("<|eot_id|>", N),
             ("</s>", UD), ("<|end|>", C), ("<|return|>", C), ("<|call|>", C)]
    tok = Tokenizer.from_metadata(gpt2_metadata(extra=extra, eos_token_id=1))
    texts = [t for t, _ in extra]
    eog = {texts[i] for i in tok.eog_ids}
    # <|end|> is dropped when <|return|> and <|call|> exist; a USER_DEFINED </s> stays plain text
    assert eog == {"<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|eot_id|>", "<|return|>", "<|call|>"}
    # a mistyped NORMAL <|eot_id|> is forced to CONTROL (special, emits no text)
    assert 3 in tok.special_ids and tok.token_bytes(3) == b""
    assert tok.eos_id == 1 and tok.eot_id == 3  # first EOT text in llama.cpp's list order
    assert 4 not in tok.special_ids and tok.token_bytes(4) == b"</s>"
    assert 5 not in tok.special_ids and tok.token_bytes(5) == b"<|end|>"


def test_out_of_range_special_ids_keep_defaults() -> None:
    tok = Tokenizer.from_metadata(spm_metadata(SPM_PIECES, bos_token_id=10**6, eos_token_id=5))
    assert tok.bos_id == 1 and tok.eos_id == 5


# ---------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda md: md.pop("tokenizer.ggml.model"), "tokenizer.ggml.model"),
        (lambda md: md.update({"tokenizer.ggml.model": "bert"}), "'bert' is not supported"),
        (lambda md: md.pop("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens"),
        (lambda md: md.update({"tokenizer.ggml.tokens": []}), "empty"),
        (lambda md: md.update({"tokenizer.ggml.tokens": [1, 2]}), "array of strings"),
        (lambda md: md.pop("tokenizer.ggml.merges"), "merges"),
        (lambda md: md.update({"tokenizer.ggml.merges": ["nospace"]}), r"merges'\[0\] = 'nospace'"),
        (lambda md: md.update({"tokenizer.ggml.token_type": np.ones(3, np.int32)}), "one per token"),
        (lambda md: md["tokenizer.ggml.token_type"].__setitem__(7, 9), "invalid type 9 at id 7"),
        (lambda md: md.update({"tokenizer.ggml.add_bos_token": "yes"}), "must be a bool"),
        (lambda md: md.update({"tokenizer.ggml.bos_token_id": "1"}), "must be an integer"),
        (lambda md: md.update({"tokenizer.ggml.pre": 3}), "must be a string"),
    ],
)
def test_malformed_metadata(mutate: Any, message: str) -> None:
    md = gpt2_metadata(merges=["a b"])
    mutate(md)
    with pytest.raises(TokenizerError, match=message):
        Tokenizer.from_metadata(md).encode("ab")


def test_nan_score_is_an_error() -> None:
    md = spm_metadata(SPM_PIECES)
    md["tokenizer.ggml.scores"][4] = np.nan
    with pytest.raises(TokenizerError, match="NaN at id 4"):
        Tokenizer.from_metadata(md)


def test_duplicate_texts_are_reported() -> None:
    md = gpt2_metadata(extra=[("dup", N), ("dup", N)])
    with pytest.raises(TokenizerError, match="duplicate text 'dup' at ids 0 and 1"):
        Tokenizer.from_metadata(md).encode("x")


def test_empty_token_text_is_renamed() -> None:
    md = gpt2_metadata(extra=[("", N)])
    tok = Tokenizer.from_metadata(md)
    assert tok.token_text(0) == "[EMPTY_0]"


def test_invalid_encode_and_decode_arguments() -> None:
    tok = Tokenizer.from_metadata(gpt2_metadata())
    with pytest.raises(TokenizerError, match="expects str"):
        tok.encode(None)  # type: ignore[arg-type]
    with pytest.raises(TokenizerError, match="character 1"):
        tok.encode("a\udc80")
    with pytest.raises(TokenizerError, match=r"ids\[1\] = 256 is out of range"):
        tok.decode([0, 256])
    with pytest.raises(TokenizerError, match=r"ids\[0\] is not an integer"):
        tok.decode(["a"])  # type: ignore[list-item]
    with pytest.raises(TokenizerError, match="integer"):
        tok.token_bytes(True)
    assert tok.decode(np.array([104, 105], dtype=np.int64)) == "hi"
    assert tok.encode("") == [] and tok.decode([]) == ""


def test_fused_smollm_split_equals_the_literal_regex_list() -> None:
    fused, literal = pretokenizer_for("smollm"), pretokenizer_for("smollm", fused=False)
    rng = random.Random(11)
    alphabet = "ab Z9٣'s\n\r\t  .,!é\u0301東🙂_-\u3000$+<=|1234"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))
        assert fused(text) == literal(text), text


def _literal_partition(text: str, cands: list[tuple[str, int]]) -> list[str | int]:
    """llama.cpp's tokenizer_st_partition, literally: every candidate, longest first."""
    frags: list[str | int] = [text]
    for word, tid in sorted(cands, key=lambda c: (-len(c[0]), c[1])):
        new: list[str | int] = []
        for frag in frags:
            if isinstance(frag, int):
                new.append(frag)
                continue
            for j, part in enumerate(frag.split(word)):
                if j:
                    new.append(tid)
                if part:
                    new.append(part)
        frags = new
    return frags


def test_special_matcher_equals_literal_llama_cpp_loop() -> None:
    from lexguide.tokenizer.special import SpecialMatcher

    rng = random.Random(7)
    for _ in range(300):
        words = {"".join(rng.choice("ab<>|") for _ in range(rng.randrange(1, 5))) for _ in range(6)}
        cands = [(w, i) for i, w in enumerate(sorted(words))]
        matcher = SpecialMatcher(cands)
        for _ in range(10):
            text = "".join(rng.choice("ab<>|x") for _ in range(rng.randrange(0, 16)))
            assert matcher.partition(text) == _literal_partition(text, cands), (text, cands)


def test_tokenizer_pickles_with_its_caches() -> None:
    import pickle

    for md in (gpt2_metadata(merges=["a b"]), spm_metadata(SPM_PIECES)):
        tok = Tokenizer.from_metadata(md)
        ids = tok.encode("ab Hello<tag>", parse_special=True)
        copy = pickle.loads(pickle.dumps(tok))
        assert copy.encode("ab Hello<tag>", parse_special=True) == ids
        assert copy.all_token_bytes() == tok.all_token_bytes()
        assert copy.eog_ids == tok.eog_ids and copy.special_ids == tok.special_ids


def test_bpe_heap_merge_equals_scan_merge() -> None:
    # long words take the heap path; it must reproduce the plain lowest-rank-leftmost scan
    rng = random.Random(4)
    pieces = ["a", "b", "c"]
    merges = []
    for _ in range(40):
        left, right = rng.choice(pieces), rng.choice(pieces)
        if f"{left} {right}" not in merges:
            merges.append(f"{left} {right}")
            pieces.append(left + right)
    from lexguide.tokenizer.bpe import ByteLevelBPE
    from lexguide.tokenizer.pieces import merge_by_priority

    md = gpt2_metadata(merges=merges)
    bpe = ByteLevelBPE(Tokenizer.from_metadata(md)._vocab)
    for _ in range(200):
        word = "".join(rng.choice("abc") for _ in range(rng.randrange(2, 120)))
        want = _scan_merge(bpe.ranks, word)
        assert merge_by_priority(list(word), lambda a, b: bpe.ranks.get((a, b))) == want, word
        assert bpe._merge(word) == want, word


def _scan_merge(ranks: dict[tuple[str, str], int], word: str) -> list[str]:
    syms = list(word)
    while True:
        cands = [(ranks[(syms[i], syms[i + 1])], i) for i in range(len(syms) - 1)
                 if (syms[i], syms[i + 1]) in ranks]
        if not cands:
            return syms
        _, i = min(cands)
        syms[i:i + 2] = [syms[i] + syms[i + 1]]


def test_long_words_encode_in_near_linear_time() -> None:
    tok = Tokenizer.from_metadata(gpt2_metadata(merges=["a a", "aa aa", "aaaa aaaa"]))
    ids = tok.encode("a" * 200_000)  # one pre-tokenizer piece; a quadratic merge would hang
    assert len(ids) == 25_000 and tok.decode(ids) == "a" * 200_000
