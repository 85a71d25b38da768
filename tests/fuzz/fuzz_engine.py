#!/usr/bin/env python3
"""Fuzz target for the engine: grammar text, schema JSON and token sequences from random bytes.

Each input picks a front end (Lark variant, GBNF, JSON Schema, regex) and a text, compiles it,
then drives a matcher over a small vocabulary with tokens chosen by the remaining bytes
(allowed ones mostly, arbitrary ones sometimes), checking masks against consume, and reads the
captures of the text and of the output. Only ``lexguide.LexguideError`` may escape a call;
anything else — or a crash of the process — is a bug.

    python tests/fuzz/fuzz_engine.py -max_total_time=600      # atheris (pip install atheris)

``tests/test_fuzz.py`` runs the same body over a fixed number of seeded inputs without atheris.
"""

from __future__ import annotations

import sys

import numpy as np

VOCAB = [b"<eos>"] + [bytes([c]) for c in b'{}[]":,ab01 -.\\ue\n'] + [
    b'{"', b'":', b'"a', b"ab", b"01", b'", "', b"[1", b"],", b'": "', b"true", b"null", b"10",
    b"\xc3\xa9", b"\xc3", b"\xa9", b"aaaa", b"((", b"))", b"::=", b"root"]
_INFO = None


def info():
    global _INFO
    if _INFO is None:
        from lexguide import TokenizerInfo

        _INFO = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])
    return _INFO


def compile_input(kind: int, text: str):
    import json

    from lexguide import Grammar

    if kind == 0:
        return Grammar.from_lark(text)
    if kind == 1:
        return Grammar.from_gbnf(text)
    if kind == 2:
        try:
            schema = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(schema, (dict, bool)):
            return None
        return Grammar.from_json_schema(schema)
    return Grammar.from_regex(text)


def one_input(data: bytes) -> None:
    """The fuzz body: any LexguideError is fine, every other exception propagates."""
    from lexguide import LexguideError, Matcher

    if len(data) < 2:
        return
    kind, n_text = data[0] % 4, data[1]
    text = data[2 : 2 + n_text].decode("utf-8", errors="replace")
    steps = data[2 + n_text :]
    try:
        g = compile_input(kind, text)
        if g is None:
            return
        m = Matcher(g, info())
        g.validate(text)
        try:
            g.captures(text)  # the text itself is rarely a sentence: a typed error then
        except LexguideError:
            pass
        for b in steps[:64]:
            mask = m.compute_mask()
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[: len(VOCAB)])
            if b & 0x80 or len(allowed) == 0:
                tok = b % len(VOCAB)  # maybe disallowed: must raise TokenRejected, not crash
            else:
                tok = int(allowed[b % len(allowed)])
            ok = bool((mask[tok >> 5] >> (tok & 31)) & 1)
            try:
                m.consume(tok)
                assert ok, f"consume accepted token {tok} outside the mask"
            except LexguideError:
                assert not ok, f"consume rejected token {tok} inside the mask"
            if m.is_stopped():
                break
        m.forced_tokens()
        m.captures()
        m.rollback(min(2, m.n_consumed))
    except LexguideError:
        pass


def main() -> None:
    import atheris

    import lexguide  # noqa: F401
    import lexguide.engine.matcher  # noqa: F401
    import lexguide.grammar.gbnf  # noqa: F401
    import lexguide.grammar.lark  # noqa: F401
    import lexguide.jsonschema  # noqa: F401

    # every loaded function: atheris' import hook misses modules that an editable install's
    # loader brings in, which left the fuzzer without coverage feedback
    atheris.instrument_all()
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
