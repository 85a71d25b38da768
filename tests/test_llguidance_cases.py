"""The llama.cpp llguidance test cases (tests/data/llama.cpp/llguidance-cases.jsonl), run through
lexguide.

Each record has a Lark ``grammar`` or a JSON ``schema`` (wrapped as llama.cpp's ``test_schema``
does: ``%llguidance {}\\nstart: %json <schema>``) plus ``pass`` and ``fail`` strings. As in the C++
test, a string passes when every one of its tokens (the model tokenizer's encoding, no specials)
is allowed by the mask and consumed, and EOS is then allowed; ``fail`` means "not a complete
match", so a fail string must be refused at some token or leave EOS disallowed. Both real
tokenizers (SmolLM2 49k byte-level BPE, Gemma 3 262k SentencePiece) and the byte level
(``Grammar.validate``) are checked.
"""

from __future__ import annotations

import json
from functools import cache
import numpy as np
import pytest

from lexguide import Grammar, Matcher, TokenRejected
from lexguide.errors import LexguideError

from corpora import LLAMA_CPP

CASES_PATH = LLAMA_CPP / "llguidance-cases.jsonl"
RECORDS = [json.loads(line) for line in CASES_PATH.read_text().splitlines() if line.strip()]


def _grammar_text(rec: dict) -> str:
    if rec.get("grammar"):
        return rec["grammar"]
    return "%llguidance {}\nstart: %json " + rec["schema_text"]


def _case_id(i: int) -> str:
    rec = RECORDS[i]
    kind = "lark" if rec.get("grammar") else "schema"
    return f"{i:02d}-{kind}-{rec['group'].removeprefix('test_')}-{rec['name'].strip() or 'unnamed'}"


STRINGS = [
    pytest.param(i, s, expected, id=f"{_case_id(i)}-{key}{k}")
    for i, rec in enumerate(RECORDS)
    for expected, key in ((True, "pass"), (False, "fail"))
    for k, s in enumerate(rec[key])
]
CASE_IDS = [pytest.param(i, id=_case_id(i)) for i in range(len(RECORDS))]


@cache
def _grammar(i: int) -> Grammar:
    """One compiled grammar per record, shared by all its strings (so mask caches are shared)."""
    rec = RECORDS[i]
    text = _grammar_text(rec)
    if rec.get("grammar"):
        return Grammar.from_lark(text)
    try:
        return Grammar.from_lark(text)
    except (ImportError, AssertionError) as e:  # the JSON-schema layer is not installed
        pytest.skip(f"JSON schema compiler unavailable: {e}")


@cache
def _info(model: str):
    from lexguide import Tokenizer, TokenizerInfo
    from lexguide.model_files import ModelNotInstalled, gemma3_path, smollm2_path

    try:
        path = smollm2_path() if model == "smollm2" else gemma3_path()
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    tok = Tokenizer.from_gguf(str(path))
    return tok, TokenizerInfo.from_tokenizer(tok)


def _allowed(mask: np.ndarray, token_id: int) -> bool:
    return bool((int(mask[token_id >> 5]) >> (token_id & 31)) & 1)


def _force(grammar: Grammar, model: str, text: str) -> tuple[bool, str]:
    """Force ``text`` token by token: (complete match?, where it stopped)."""
    tok, info = _info(model)
    ids = tok.encode(text, add_special=False)
    assert b"".join(info.token_bytes[t] for t in ids) == text.encode("utf-8"), "tokenizer round trip"
    m = Matcher(grammar, info)
    for k, t in enumerate(ids):
        mask = m.compute_mask()
        allowed = _allowed(mask, t)
        probe = m.clone()
        try:
            probe.consume(t)
            consumed = True
        except TokenRejected:
            consumed = False
        # the mask and consume must agree on every token
        assert allowed == consumed, f"mask says {allowed}, consume says {consumed} for token {k} ({t})"
        if not allowed:
            return False, f"token {k} {info.token_bytes[t]!r} refused after {text.encode()[:40]!r}"
        m.consume(t)
    mask = m.compute_mask()
    eos_ok = any(_allowed(mask, e) for e in info.eos_ids)
    assert eos_ok == m.is_accepting()
    return eos_ok, "" if eos_ok else "EOS not allowed at the end"


@pytest.mark.parametrize("i,text,expected", STRINGS)
def test_validate_bytes(i: int, text: str, expected: bool) -> None:
    assert _grammar(i).validate(text) is expected


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
@pytest.mark.parametrize("i,text,expected", STRINGS)
def test_tokens(model: str, i: int, text: str, expected: bool) -> None:
    ok, where = _force(_grammar(i), model, text)
    assert ok is expected, where or "accepted a string the case says must fail"


@pytest.mark.parametrize("i", CASE_IDS)
def test_grammar_compiles(i: int) -> None:
    """Every case compiles (a schema case skips only when the JSON layer is absent)."""
    g = _grammar(i)
    assert g.ir.lexemes, "a grammar without lexemes cannot match the case strings"


def test_corpus_shape() -> None:
    """Guard against silently testing nothing: the corpus has the documented 43 cases."""
    assert len(RECORDS) == 43
    assert sum(len(r["pass"]) for r in RECORDS) == 174
    assert sum(len(r["fail"]) for r in RECORDS) == 171
    assert all(r.get("grammar") or r.get("schema") is not None for r in RECORDS)


def test_rejection_leaves_matcher_unchanged() -> None:
    """A refused token raises TokenRejected and the matcher still accepts the valid path."""
    grammar = Grammar.from_lark("%llguidance {}\nstart: /[A-Z ]*/")
    tok, info = _info("smollm2")
    m = Matcher(grammar, info)
    bad = tok.encode("abc", add_special=False)[0]
    with pytest.raises(LexguideError):
        m.consume(bad)
    for t in tok.encode("ALL YOUR BASE", add_special=False):
        m.consume(t)
    assert m.is_accepting()


def test_nullable_lexeme_ends_empty() -> None:
    """Case 11's shape: `ws` may match nothing, so "ab" is a sentence (llguidance accepts it)."""
    g = Grammar.from_lark('start: "a" ws "b"\nws: /[ ]?/\n')
    assert g.validate("ab")


def test_nullable_lexeme_mask_agrees_with_consume() -> None:
    """After "a" an empty `ws` may end: the mask allows "b" and consume takes it."""
    from lexguide import TokenizerInfo

    g = Grammar.from_lark('start: "a" ws "b"\nws: /[ ]?/\n')
    info = TokenizerInfo.from_token_bytes([b"<eos>", b"a", b"b", b" "], [0], [0])
    m = Matcher(g, info)
    m.consume(1)
    assert _allowed(m.compute_mask(), 2)
    m.consume(2)
    assert m.is_accepting()


def test_token_crossing_many_lexeme_boundaries() -> None:
    """A token may end one lexeme per byte: 70 '-' are 70 unary minus signs (Llama-3 has a
    76-dash token, SmolLM2 and Gemma long dash and space runs), which is not an empty-lexeme loop."""
    from lexguide import TokenizerInfo

    g = Grammar.from_lark('start: "-"* "x"\n')
    info = TokenizerInfo.from_token_bytes([b"<eos>", b"-" * 70, b"x"], [0], [0])
    m = Matcher(g, info)
    assert _allowed(m.compute_mask(), 1)
    m.consume(1)
    m.consume(2)
    assert m.is_accepting()
