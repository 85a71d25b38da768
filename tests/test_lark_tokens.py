"""Lark special tokens end to end: ``<|name|>`` / ``<[ids]>`` match token ids, never text.

A synthetic vocabulary (one token per byte, a few multi-byte words, control tokens, EOS)
drives a :class:`Matcher` token by token (spec §5.4, §8.6, §17 ``<think>`` example).
"""

from __future__ import annotations

import pytest

from lexguide.errors import LexguideError, TokenRejected

engine = pytest.importorskip("lexguide.engine")
Grammar = pytest.importorskip("lexguide.engine.grammar").Grammar

WORDS = [b"hello", b"<think>", b"ab"]  # ordinary text tokens, including the text "<think>"
SPECIALS = ["<think>", "</think>", "<|eot_id|>"]
EOS = 256 + len(WORDS) + len(SPECIALS)
THINK, END_THINK, EOT = (256 + len(WORDS) + i for i in range(3))
TEXT_THINK = 256 + 1  # the ordinary token whose bytes are "<think>"


@pytest.fixture(scope="module")
def info():
    token_bytes = [bytes([i]) for i in range(256)] + WORDS + [s.encode() for s in SPECIALS]
    token_bytes.append(b"")  # EOS
    names = {s: THINK + i for i, s in enumerate(SPECIALS)}
    return engine.TokenizerInfo.from_token_bytes(
        token_bytes, [EOS], [THINK, END_THINK, EOT], special_names=names
    )


def run(grammar: str, info, tokens: list[int]) -> bool:
    """Consume ``tokens``; True iff all are allowed and EOS is allowed at the end."""
    m = engine.Matcher(Grammar.from_lark(grammar), info)
    for t in tokens:
        mask = m.compute_mask()
        allowed = bool(mask[t >> 5] >> (t & 31) & 1)
        try:
            m.consume(t)
        except TokenRejected:
            assert not allowed, f"token {t} was in the mask but consume rejected it"
            return False
        assert allowed, f"token {t} was consumed but not in the mask"
    mask = m.compute_mask()
    return bool(mask[EOS >> 5] >> (EOS & 31) & 1)


def text(s: str) -> list[int]:
    return list(s.encode())


THINK_GRAMMAR = 'start: <think> /(.|\\n)*/ </think> "x"'


def test_think_block_with_special_tokens(info):
    assert run(THINK_GRAMMAR, info, [THINK, *text("hello"), END_THINK, ord("x")])
    assert run(THINK_GRAMMAR, info, [THINK, 256, END_THINK, ord("x")])  # "hello" word token


def test_special_token_text_does_not_match(info):
    assert not run(THINK_GRAMMAR, info, [*text("<think>"), *text("hi"), END_THINK, ord("x")])
    assert not run(THINK_GRAMMAR, info, [TEXT_THINK, END_THINK, ord("x")])


def test_special_tokens_never_match_grammar_text(info):
    # inside /(.|\n)*/ a control token is not text
    assert not run(THINK_GRAMMAR, info, [THINK, EOT, END_THINK, ord("x")])


@pytest.mark.parametrize(
    "token_syntax,token,ok",
    [
        (f"<[{EOT}]>", EOT, True),
        (f"<[{THINK}-{EOT}]>", END_THINK, True),
        (f"<[{THINK}-{END_THINK}]>", EOT, False),
        (f"<[{THINK},{EOT}]>", EOT, True),
        (f"<[^{EOT}]>", THINK, True),
        (f"<[^{EOT}]>", EOT, False),
        ("<[*]>", EOT, True),
        ("<[97]>", ord("a"), True),
        ("<|eot_id|>", EOT, True),
        ("<|eot_id|>", THINK, False),
    ],
)
def test_token_id_sets(info, token_syntax, token, ok):
    assert run(f'start: "a" {token_syntax} "b"', info, [ord("a"), token, ord("b")]) is ok


def test_unknown_special_token_is_an_error(info):
    with pytest.raises(LexguideError, match="<\\|nope\\|>"):
        engine.Matcher(Grammar.from_lark('start: "a" <|nope|>'), info)


# -- the llama.cpp llguidance corpus, token by token with the real tokenizers ------------------
def _corpus() -> list[tuple[str, list[str], list[str]]]:
    import json
    from pathlib import Path

    # vendored from llama.cpp (MIT): tests/data/llama.cpp/README.md
    path = Path(__file__).resolve().parent / "data" / "llama.cpp" / "llguidance-cases.jsonl"
    cases = [json.loads(line) for line in path.read_text().splitlines()]
    return [(c["grammar"], c["pass"], c["fail"]) for c in cases if c["grammar"] is not None]


def _token_run(matcher, tokens: list[int], eos_ids) -> bool:
    """Like llama.cpp's test: every token allowed by the mask, then EOS allowed."""
    for t in tokens:
        mask = matcher.compute_mask()
        if not mask[t >> 5] >> (t & 31) & 1:
            return False
        matcher.consume(t)
    mask = matcher.compute_mask()
    return any(mask[e >> 5] >> (e & 31) & 1 for e in eos_ids)


@pytest.mark.parametrize("model", ["smollm2_file", "gemma3_file"])
def test_corpus_token_by_token_with_real_tokenizers(request, model):
    from lexguide import Tokenizer

    cases = _corpus()
    assert len(cases) >= 10  # the 11 Lark grammar cases of llama.cpp's llguidance test
    tok = Tokenizer.from_gguf(request.getfixturevalue(model))
    tinfo = engine.TokenizerInfo.from_tokenizer(tok)
    for grammar, good, bad in cases:
        compiled = Grammar.from_lark(grammar)
        for s in good + bad:
            ids = tok.encode(s, add_special=False)
            ok = _token_run(engine.Matcher(compiled, tinfo), ids, tok.eog_ids)
            assert ok is (s in good), (grammar, s, ids)
