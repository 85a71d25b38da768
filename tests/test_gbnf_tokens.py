"""GBNF grammars token by token through the engine's Matcher.

A synthetic vocabulary carries llama.cpp's token markers (``<[N]>``, ``!<[N]>``); the real
SmolLM2 tokenizer checks the string cases of gbnf-cases.jsonl and sentences of the corpus
grammars, through ``compile_gbnf`` and through ``gbnf_to_lark`` → ``compile_lark``. Each
consumed token must also be set in the mask computed just before it.
"""

from __future__ import annotations

import random

import pytest
from test_gbnf import GBNF_FILES, GRAMMAR_CASES, oracle_accepts, random_sentence

from lexguide.engine.grammar import Grammar
from lexguide.errors import TokenRejected
from lexguide.grammar.gbnf import compile_gbnf, gbnf_to_lark

engine = pytest.importorskip("lexguide.engine")
lark = pytest.importorskip("lexguide.grammar.lark")

MARKERS = (10, 11, 12, 13, 14, 20, 21)
EOS = 0


def both_front_ends(gbnf: str) -> list[tuple[str, Grammar]]:
    return [("gbnf", Grammar(compile_gbnf(gbnf))),
            ("lark", Grammar(lark.compile_lark(gbnf_to_lark(gbnf))))]


def run(matcher, tokens: list[int], check_masks: bool) -> bool:
    """Consume ``tokens``; True when all were allowed and the grammar may end there."""
    for t in tokens:
        if check_masks:
            allowed = matcher.is_allowed(t)
        try:
            matcher.consume(t)
        except TokenRejected:
            if check_masks:
                assert not allowed, f"token {t} in the mask but rejected by consume"
            return False
        if check_masks:
            assert allowed, f"token {t} consumed but missing from the mask"
    return matcher.is_accepting()


# -- synthetic vocabulary with token markers ------------------------------------------------------
def marker_vocab() -> tuple[object, dict[str, int]]:
    toks = [f"<s{i}>".encode() for i in range(22)]  # 0 = EOS, 1..21 control tokens
    text_ids: dict[str, int] = {}
    pieces = [chr(c) for c in range(32, 127)] + ["\n", "hello", " world", "ing", "re", "ab", "abc"]
    for p in pieces:
        text_ids[p] = len(toks)
        toks.append(p.encode())
    info = engine.TokenizerInfo.from_token_bytes(toks, eos_ids=[EOS], special_ids=range(1, 22))
    return info, text_ids


def encode_greedy(text: str, text_ids: dict[str, int]) -> list[int]:
    out, i = [], 0
    while i < len(text):
        piece = max((p for p in text_ids if text.startswith(p, i)), key=len)
        out.append(text_ids[piece])
        i += len(piece)
    return out


TOKEN_CASES = [c for c in GRAMMAR_CASES
               if any(isinstance(s, dict) for s in c["pass"] + c["fail"])]


@pytest.mark.parametrize("case", TOKEN_CASES, ids=lambda c: f"{c['line']}-{c['name']}")
def test_token_marker_cases(case: dict) -> None:
    info, text_ids = marker_vocab()
    for kind, grammar in both_front_ends(case["gbnf"]):
        for strings, want in ((case["pass"], True), (case["fail"], False)):
            for s in strings:
                parts = s["parts"] if isinstance(s, dict) else [s]
                tokens: list[int] = []
                for part in parts:
                    is_marker = isinstance(part, dict)
                    tokens += [part["token"]] if is_marker else encode_greedy(part, text_ids)
                m = engine.Matcher(grammar, info)
                assert run(m, tokens, check_masks=True) == want, f"{kind}: {parts!r}"


# -- the real SmolLM2 tokenizer ---------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2_info(smollm2_file):
    from lexguide.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(smollm2_file)
    return tok, engine.TokenizerInfo.from_tokenizer(tok)


STRING_CASES = [c for c in GRAMMAR_CASES if c not in TOKEN_CASES]


@pytest.mark.parametrize("case", STRING_CASES, ids=lambda c: f"{c['line']}-{c['name']}")
def test_cases_with_real_tokenizer(case: dict, smollm2_info) -> None:
    tok, info = smollm2_info
    for kind, grammar in both_front_ends(case["gbnf"]):
        for s in case["pass"]:
            m = engine.Matcher(grammar, info)
            assert run(m, tok.encode(s, add_special=False), check_masks=True), f"{kind}: {s!r}"
            eos = next(iter(info.eos_ids))
            assert m.is_allowed(eos), f"{kind}: EOS must be allowed after {s!r}"
        for s in case["fail"]:
            m = engine.Matcher(grammar, info)
            assert not run(m, tok.encode(s, add_special=False), check_masks=False), f"{kind}: {s!r}"


@pytest.mark.parametrize("path", GBNF_FILES, ids=lambda p: p.name)
def test_corpus_sentences_with_real_tokenizer(path, smollm2_info) -> None:
    tok, info = smollm2_info
    gbnf = path.read_text(encoding="utf-8")
    rng = random.Random(3)
    sentences: list[str] = []
    while len(sentences) < 4:
        s = random_sentence(gbnf, rng, max_depth=8)
        if s is not None and len(s) < 120:
            sentences.append(s)
            sentences.append(s[: len(s) // 2])  # usually an incomplete prefix
    for kind, grammar in both_front_ends(gbnf):
        for s in sentences:
            m = engine.Matcher(grammar, info)
            got = run(m, tok.encode(s, add_special=False), check_masks=len(s) < 40)
            assert got == oracle_accepts(s, gbnf), f"{kind}: {s!r}"


def test_negated_token_is_not_eos() -> None:
    info, _ = marker_vocab()
    for kind, grammar in both_front_ends("root ::= <[10]> (!<[11]>)* <[11]>\n"):
        m = engine.Matcher(grammar, info)
        m.consume(10)
        assert not m.is_allowed(EOS), f"{kind}: EOS allowed before the grammar is complete"
