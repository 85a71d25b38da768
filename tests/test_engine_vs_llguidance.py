"""Differential test of lexguide's token masks against llguidance (optional oracle).

Valid texts are forced token by token (SmolLM2 vocabulary, the model's own tokenization) through
a lexguide ``Matcher`` and an llguidance ``LLMatcher`` built from the same Lark text and the same
token bytes. At sampled steps:

* no token llguidance allows is masked out by lexguide;
* every token lexguide allows beyond llguidance's mask is byte-valid: its bytes keep the output a
  valid prefix (checked one byte at a time with the matcher's lexer/parser). llguidance narrows
  text the grammar forces to its canonical tokenization, so lexguide's exact byte-valid mask may
  be larger there, never smaller;
* EOS is allowed by both or by neither.

Grammars: tests/data/grammars/*.lark (with their sample texts), the Lark grammars and JSON
schemas of tests/data/llama.cpp/llguidance-cases.jsonl (with their pass strings), llguidance's
rfc.lark (with rfc.xml) and blog schema (with its sample) from tests/data/llguidance, and
llama.cpp's grammars (tests/data/llama.cpp/grammars) converted with ``lexguide.gbnf_to_lark``
(with tests/data/grammars/gbnf_samples.json).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from corpora import LLAMA_CPP, LLGUIDANCE

llg = pytest.importorskip("llguidance")

from lexguide import Grammar, Matcher, TokenizerInfo

DATA = Path(__file__).parent / "data" / "grammars"
CASES_PATH = LLAMA_CPP / "llguidance-cases.jsonl"
GBNF_DIR = LLAMA_CPP / "grammars"
LLG_DATA = LLGUIDANCE
MAX_STEPS = 12  # sampled steps per text (always the first and the last)
MAX_TEXTS = 2  # shortest texts per grammar


def _own_cases() -> list[tuple[str, str, list[str]]]:
    out = []
    for path in sorted(DATA.glob("*.lark")):
        samples = json.loads(path.with_suffix(".samples.json").read_text())["valid"]
        out.append((path.stem, path.read_text(), samples))
    return out


def _corpus_cases() -> list[tuple[str, str, list[str]]]:
    """llama.cpp's llguidance cases (schemas wrapped as its test_schema does) and llguidance's
    own sample grammars with their sample documents."""
    out = []
    for i, line in enumerate(CASES_PATH.read_text(encoding="utf-8").splitlines()):
        rec = json.loads(line)
        if not rec["pass"]:
            continue
        name = rec["name"].strip().replace(" ", "_").replace("/", "") or "unnamed"
        if rec.get("grammar"):
            out.append((f"llg{i:02d}-{name}", rec["grammar"], rec["pass"]))
        else:
            text = "%llguidance {}\nstart: %json " + rec["schema_text"]
            out.append((f"llg{i:02d}-schema-{name}", text, rec["pass"]))
    out.append(("llg-rfc-xml", (LLG_DATA / "rfc.lark").read_text(encoding="utf-8"),
                [(LLG_DATA / "rfc.xml").read_text(encoding="utf-8")]))
    schema = (LLG_DATA / "blog.schema.json").read_text(encoding="utf-8")
    sample = json.loads((LLG_DATA / "blog.sample.json").read_text(encoding="utf-8"))
    out.append(("llg-blog-schema", "%llguidance {}\nstart: %json " + schema,
                [json.dumps(sample), json.dumps(sample, indent=2)]))
    return out


def _gbnf_cases() -> list[tuple[str, str, list[str]]]:
    samples = json.loads((DATA / "gbnf_samples.json").read_text())
    return [(f"gbnf-{name.removesuffix('.gbnf')}", f"GBNF:{name}", texts)
            for name, texts in sorted(samples.items())]


CASES = [pytest.param(*c, id=c[0]) for c in _own_cases() + _corpus_cases() + _gbnf_cases()]


@lru_cache(maxsize=1)
def _vocab():
    """SmolLM2 via lexguide's tokenizer; llguidance gets the same bytes and the same encode."""
    from lexguide import Tokenizer
    from lexguide.model_files import ModelNotInstalled, smollm2_path

    try:
        path = smollm2_path()
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    tok = Tokenizer.from_gguf(str(path))
    info = TokenizerInfo.from_tokenizer(tok)
    specials = sorted(info.special_ids)
    tokens = [b"<|special_%d|>" % i if (i in info.special_ids or not b) else b
              for i, b in enumerate(info.token_bytes)]
    specials = sorted(set(specials) | {i for i, b in enumerate(info.token_bytes) if not b})

    class Wrapped:
        eos_token_id = tok.eos_id
        bos_token_id = None
        special_token_ids = specials

        def __init__(self) -> None:
            self.tokens = tokens

        def __call__(self, s: str | bytes) -> list[int]:
            text = s.decode("utf-8", "replace") if isinstance(s, bytes) else s
            return tok.encode(text, add_special=False)

    llt = llg.LLTokenizer(llg.TokenizerWrapper(Wrapped()), n_vocab=tok.vocab_size,
                          eos_token=sorted(info.eos_ids))
    return tok, info, llt


def _lark_text(source: str) -> str:
    if source.startswith("GBNF:"):
        from lexguide import gbnf_to_lark

        return gbnf_to_lark((GBNF_DIR / source[5:]).read_text())
    return source


def _bits(mask: np.ndarray, n: int) -> np.ndarray:
    """Allowed token ids of a packed little-endian 32-bit mask."""
    flat = np.ascontiguousarray(mask).reshape(-1).view(np.uint32)
    bits = np.unpackbits(flat.view(np.uint8), bitorder="little")[:n]
    return np.flatnonzero(bits)


def _steps(n: int) -> set[int]:
    if n + 1 <= MAX_STEPS:
        return set(range(n + 1))
    return {round(k * n / (MAX_STEPS - 1)) for k in range(MAX_STEPS)}


_LEAP_SECOND_AT = re.compile(rb"T(\d\d):(\d\d):$")


def _stricter_by_design(done: bytes, token: bytes) -> bool:
    """Tokens llguidance allows and lexguide masks on purpose (documented departures).

    ``date-time``: a second of 60 exists only at 23:59 UTC (RFC 3339 section 5.7; the
    JSON-Schema-Test-Suite's optional date-time tests reject 22:59:60Z); llguidance takes 60 at
    any minute.
    """
    m = _LEAP_SECOND_AT.search(done)
    return bool(m and token[:1] == b"6" and m.groups() != (b"23", b"59"))


@pytest.mark.parametrize("name,source,texts", CASES)
def test_mask_vs_llguidance(name: str, source: str, texts: list[str]) -> None:
    tok, info, llt = _vocab()
    lark = _lark_text(source)
    grammar = Grammar.from_lark(lark)
    n = info.vocab_size
    eos = sorted(info.eos_ids)
    checked = 0
    for text in sorted(texts, key=len)[:MAX_TEXTS]:
        ids = tok.encode(text, add_special=False)
        ours = Matcher(grammar, info)
        theirs = llg.LLMatcher(llt, llg.LLMatcher.grammar_from_lark(lark), log_level=0)
        assert not theirs.is_error(), theirs.get_error()
        buf = np.zeros((n + 31) // 32, dtype=np.int32)
        sample = _steps(len(ids))
        for k in range(len(ids) + 1):
            if k in sample:
                theirs.unsafe_compute_mask_ptr(buf.ctypes.data, buf.nbytes)
                assert not theirs.is_error(), theirs.get_error()
                llg_ids = _bits(buf, n)
                our_ids = _bits(ours.compute_mask(), n)
                done = b"".join(info.token_bytes[t] for t in ids[:k])
                where = f"{name} step {k} after ...{done[-50:]!r}"
                missing = np.setdiff1d(llg_ids, our_ids)
                missing = np.array([t for t in missing if not _stricter_by_design(done, info.token_bytes[t])],
                                   dtype=np.int64)
                assert not len(missing), (
                    f"{where}: llguidance allows {len(missing)} tokens we mask out, e.g. "
                    f"{[info.token_bytes[t] for t in missing[:8]]}")
                extra = np.setdiff1d(our_ids, llg_ids)
                for t in extra.tolist():
                    if t in info.eos_ids:
                        continue
                    assert t not in info.special_ids, f"{where}: special token {t} allowed"
                    assert ours._lp.advance_bytes(ours.state, info.token_bytes[t]) is not None, (
                        f"{where}: we allow {info.token_bytes[t]!r}, which is not byte-valid")
                assert np.isin(eos, our_ids).any() == np.isin(eos, llg_ids).any(), f"{where}: EOS"
                checked += 1
            if k < len(ids):
                ours.consume(ids[k])
                assert theirs.consume_token(ids[k]), f"llguidance refused token {k} of {text!r}"
        assert ours.is_accepting()
    assert checked > 0
