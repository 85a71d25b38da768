"""Masks through boundary groups and recycled mask buffers equal the recorded masks.

A walk's boundaries are grouped by (state, kind); a group is walked with the parser in the loop
when its subtrees are small (the default for most groups), else through a cached walk of all
its subtrees from the restart state (``Walker::group_walk``). Both ways must give the recorded
masks (``tests/data/engine/mask_hashes.json``, see ``test_engine_recorded.py``) on a real
vocabulary, where groups hold hundreds of boundaries. Mask buffers are recycled once dropped
(``MaskBuffers``): masks read while the earlier arrays are dropped must equal masks read while
every array is kept.
"""

from __future__ import annotations

import gc
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from lexguide import Grammar, Matcher, Tokenizer, TokenizerInfo
from lexguide.engine import mask as mask_module
from lexguide.engine import matcher as matcher_module

DATA = json.loads((Path(__file__).parent / "data" / "engine" / "mask_hashes.json").read_text())
N_CASES = 60


@pytest.fixture(scope="module")
def smollm2(smollm2_file):
    return TokenizerInfo.from_tokenizer(Tokenizer.from_gguf(smollm2_file))


def _fresh_engines(monkeypatch, direct_walk_nodes: int | None) -> None:
    """Every new Matcher gets an engine of its own (no masks cached by earlier tests)."""

    def engine(grammar, info):
        e = mask_module.MaskEngine(grammar, info)
        if direct_walk_nodes is not None:
            e._core.direct_walk_nodes = direct_walk_nodes
        return e

    monkeypatch.setattr(matcher_module, "engine_for", engine)


def _digest(m: Matcher, tokens: list[int]) -> str:
    """SHA-1 over the masks before every token and after the last (the recording's digest)."""
    masks = []
    for t in tokens:
        masks.append(m.compute_mask().tobytes())
        m.consume(t)
    masks.append(m.compute_mask().tobytes())
    return hashlib.sha1(b"".join(masks)).hexdigest()


@pytest.mark.parametrize("direct_walk_nodes", [0, 2**31])
def test_boundary_groups_reproduce_recorded_masks(smollm2, monkeypatch, direct_walk_nodes):
    """0: every group through its cached group walk; 2**31: every group with the parser in the
    loop. The group walks of one lexer state are shared by the cases' parse states."""
    from tools.record_mask_hashes import compile_case

    _fresh_engines(monkeypatch, direct_walk_nodes)
    digests = DATA["digests"]["smollm2"]
    mismatched = [
        cid
        for cid in sorted(digests)[:N_CASES]
        if _digest(Matcher(compile_case(DATA["cases"][cid]), smollm2), digests[cid]["tokens"])
        != digests[cid]["sha1"]
    ]
    assert not mismatched, f"{len(mismatched)} cases differ, e.g. {mismatched[:5]}"


def test_recycled_mask_buffers_keep_masks_exact(smollm2, monkeypatch):
    """Masks of few tokens (numbers, keys) and of many (inside strings), read once with every
    array dropped at once (their buffers come back and are written again: a mask of few tokens
    clears only its own words as it returns) and once with every array kept, on engines of
    their own."""
    _fresh_engines(monkeypatch, None)
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "n": {"type": "integer"},
            "tags": {"type": "array"},
        },
        "required": ["name", "n"],
    }
    text = '{"name":"a b\\"c","n":-120,"tags":["x",1,{"y":null}]}'
    if smollm2.encode is None:
        pytest.skip("tokenizer without encode")
    tokens = smollm2.encode(text)

    def masks(keep: bool) -> list[bytes]:
        m = Matcher(Grammar.from_json_schema(schema), smollm2)
        kept, out = [], []
        for t in tokens:
            mask = m.compute_mask()
            out.append(mask.tobytes())
            if keep:
                kept.append(mask)
            del mask
            gc.collect()
            m.consume(t)
        out.append(m.compute_mask().tobytes())
        return out

    dropped, held = masks(False), masks(True)
    assert dropped == held
    assert any(np.frombuffer(x, np.uint32).any() for x in dropped)
