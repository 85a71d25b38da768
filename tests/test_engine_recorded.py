"""The compiled core reproduces the masks the pure-Python engine computed, exactly.

``tests/data/engine/mask_hashes.json`` was written by ``tests/tools/record_mask_hashes.py``
with the Python engine before the core replaced it: for 500 JSONSchemaBench schemas (a valid
instance each, compact whitespace) and the corpus Lark/GBNF grammars (their passing strings),
on both real vocabularies, a SHA-1 over the mask before every forced token and at the end.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lexguide import Matcher, TokenizerInfo, Tokenizer

DATA = json.loads((Path(__file__).parent / "data" / "engine" / "mask_hashes.json").read_text())


def _compile(case: dict):
    from tools.record_mask_hashes import compile_case

    return compile_case(case)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def vocab(request):
    path = request.getfixturevalue(f"{request.param}_file")
    return request.param, TokenizerInfo.from_tokenizer(Tokenizer.from_gguf(path))


def test_recorded_masks_are_reproduced(vocab):
    name, info = vocab
    digests = DATA["digests"][name]
    assert len(digests) > 500
    mismatched = []
    for cid, rec in digests.items():
        grammar = _compile(DATA["cases"][cid])
        m = Matcher(grammar, info)
        h = hashlib.sha1()
        for t in rec["tokens"]:
            h.update(m.compute_mask().tobytes())
            m.consume(t)
        h.update(m.compute_mask().tobytes())
        if h.hexdigest() != rec["sha1"]:
            mismatched.append(cid)
    assert not mismatched, f"{len(mismatched)} cases differ, e.g. {mismatched[:5]}"
