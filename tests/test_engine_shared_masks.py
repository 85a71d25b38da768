"""Dense masks shared by content across grammars (``MaskBuffers::share``).

Masks kept as bitmasks by a grammar's mask cache (inside strings, most tokens are allowed) are
registered per vocabulary by a hash of their words: a grammar that computes a mask equal to one
another grammar still keeps gets that same mask, and a mask outlives the grammar that made it
as long as another holds it. Shared masks must be exactly the masks computed without sharing:
equal masks are one buffer, different masks never are, and a shared mask stays intact when the
grammar that made it is freed and its buffers are recycled.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from lexguide import Grammar, Matcher, Tokenizer, TokenizerInfo


@pytest.fixture(scope="module")
def smollm2(smollm2_file):
    info = TokenizerInfo.from_tokenizer(Tokenizer.from_gguf(smollm2_file))
    if info.encode is None:
        pytest.skip("tokenizer without encode")
    return info


def _string_schema(key: str, **string) -> dict:
    return {"type": "object", "properties": {key: {"type": "string", **string}}, "required": [key]}


def _mask_after(info: TokenizerInfo, schema: dict, text: str) -> tuple[Matcher, np.ndarray]:
    m = Matcher(Grammar.from_json_schema(schema), info)
    m.consume_tokens(info.encode(text))
    return m, m.compute_mask()


def _address(mask: np.ndarray) -> int:
    return mask.__array_interface__["data"][0]


def test_equal_dense_masks_of_two_grammars_are_one_buffer(smollm2):
    _, first = _mask_after(smollm2, _string_schema("alpha"), '{"alpha":"hello wor')
    first_bytes = first.tobytes()
    assert int(np.unpackbits(first.view(np.uint8)).sum()) > first.size  # kept as a bitmask
    _, second = _mask_after(smollm2, _string_schema("beta"), '{"beta":"hello wor')
    assert second.tobytes() == first_bytes
    assert _address(second) == _address(first)
    # a different dense mask (letters only) is not merged with it
    _, letters = _mask_after(
        smollm2, _string_schema("gamma", pattern="^[a-z ]*$"), '{"gamma":"hello wor'
    )
    assert letters.tobytes() != first_bytes
    assert _address(letters) != _address(first)
    assert not (np.unpackbits(letters.view(np.uint8)) & ~np.unpackbits(first.view(np.uint8))).any()


def test_shared_mask_outlives_the_grammar_that_made_it(smollm2):
    schema_a, schema_b = _string_schema("made"), _string_schema("kept")
    m_a, mask_a = _mask_after(smollm2, schema_a, '{"made":"xy')
    expected = mask_a.tobytes()
    m_b, mask_b = _mask_after(smollm2, schema_b, '{"kept":"xy')
    assert _address(mask_b) == _address(mask_a)
    del m_a, mask_a, mask_b
    gc.collect()
    # buffers dropped in between are recycled and written with other masks
    for n in range(8):
        _mask_after(smollm2, _string_schema(f"other{n}", maxLength=3 + n), '{"other%d":"x' % n)
        gc.collect()
    again = m_b.compute_mask()  # the cached entry of the grammar that did not make it
    assert again.tobytes() == expected
    _, fresh = _mask_after(smollm2, schema_a, '{"made":"xy')  # a new grammar meets it again
    assert fresh.tobytes() == expected
    assert _address(fresh) == _address(again)
