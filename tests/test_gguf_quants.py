"""Dequantisers and quantisers against gguf-py (bit-exact) and against the spec formulas."""

from __future__ import annotations

import numpy as np
import pytest

from lexguide.errors import GGUFError
from lexguide.gguf import (
    DEQUANTIZABLE_TYPES,
    QUANTIZABLE_TYPES,
    GGMLType,
    dequantize,
    quantize,
    type_traits,
)

gguf = pytest.importorskip("gguf")

# byte offsets of the ggml_half scale fields of each block format
HALF_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0], "TQ1_0": [52], "TQ2_0": [64], "MXFP4": [], "BF16": [],
}


def random_blocks(name: str, n_blocks: int, seed: int = 0) -> np.ndarray:
    """Random bytes with every half-float scale replaced by a finite random value."""
    traits = type_traits(GGMLType[name])
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_blocks, traits.type_size), dtype=np.uint8)
    for off in HALF_FIELDS[name]:
        halves = rng.normal(scale=0.05, size=n_blocks).astype(np.float16)
        halves[::7] = -halves[::7]
        blocks[:, off : off + 2] = halves.view(np.uint8).reshape(n_blocks, 2)
    return blocks


@pytest.mark.parametrize("name", sorted(HALF_FIELDS))
def test_random_blocks_match_gguf_py_bit_exactly(name):
    gtype = GGMLType[name]
    traits = type_traits(gtype)
    blocks = random_blocks(name, 700, seed=len(name))
    rows = blocks.reshape(7, -1)  # 7 rows of 100 blocks
    got = dequantize(rows, gtype)
    want = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType[name])
    assert got.shape == (7, 100 * traits.block_size)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_f16_and_f32_elements():
    values = np.random.default_rng(1).normal(size=(3, 64)).astype(np.float16)
    assert np.array_equal(dequantize(values.view(np.uint8), GGMLType.F16), values.astype(np.float32))
    f32 = values.astype(np.float32)
    assert np.array_equal(dequantize(f32.tobytes(), "F32", (3, 64)), f32)


def test_q8_k_follows_the_spec_formula():
    rng = np.random.default_rng(2)
    blocks = rng.integers(0, 256, size=(5, 292), dtype=np.uint8)
    blocks[:, 0:4] = rng.normal(size=(5, 1)).astype("<f4").view(np.uint8)
    got = dequantize(blocks, GGMLType.Q8_K)
    for b in range(5):
        d = blocks[b, 0:4].view("<f4")[0]
        qs = blocks[b, 4:260].view(np.int8)
        assert np.array_equal(got[b], d * qs.astype(np.float32))


def test_q8_1_follows_the_spec_formula():
    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 256, size=(4, 36), dtype=np.uint8)
    blocks[:, 0:2] = rng.normal(size=(4, 1)).astype("<f2").view(np.uint8)
    got = dequantize(blocks, GGMLType.Q8_1)
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)
    assert np.array_equal(got, blocks[:, 4:].view(np.int8).astype(np.float32) * d)


def test_q4_0_hand_computed_block():
    d = np.float16(0.5)
    qs = np.arange(16, dtype=np.uint8) | (np.uint8(15) << 4)
    block = np.concatenate([np.array([d]).view(np.uint8), qs])
    expected = np.concatenate([(np.arange(16) - 8) * 0.5, np.full(16, (15 - 8) * 0.5)])
    assert np.array_equal(dequantize(block.tobytes(), "Q4_0"), expected.astype(np.float32))


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16"])
def test_quantizers_equal_gguf_py(name):
    rng = np.random.default_rng(4)
    data = rng.normal(size=(6, 512)).astype(np.float32)
    data[0, :32] = 0.0  # an all-zero block (scale 0)
    data[1, :32] = np.linspace(-1, 1, 32)  # exact ties for the rounding
    data[2, 5] = 40.0  # one outlier
    got = quantize(data, name)
    want = gguf.quants.quantize(data, gguf.GGMLQuantizationType[name])
    assert got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_quantize_dequantize_error_is_bounded(name):
    data = np.random.default_rng(5).uniform(-1, 1, size=(4, 256)).astype(np.float32)
    back = dequantize(quantize(data, name), name)
    bits = {"Q8_0": 8, "Q4_0": 4, "Q4_1": 4, "Q5_0": 5, "Q5_1": 5}[name]
    assert np.abs(back - data).max() <= 2.0 / 2 ** (bits - 1)
    assert np.abs(back - data).max() > 0


def test_round_half_away_from_zero_like_c_roundf():
    # x * (127 / amax) lands exactly on .5 for these values
    block = np.zeros(32, np.float32)
    block[:4] = [127.0, 0.5, -0.5, 2.5]
    q = quantize(block, "Q8_0")[2:].view(np.int8)
    assert q[:4].tolist() == [127, 1, -1, 3]


def test_out_parameter_is_filled_without_allocation():
    blocks = random_blocks("Q4_K", 3)
    out = np.empty((3, 256), np.float32)
    result = dequantize(blocks, GGMLType.Q4_K, out=out)
    assert result is out
    assert np.array_equal(out, dequantize(blocks, GGMLType.Q4_K))
    with pytest.raises(GGUFError, match="out must be"):
        dequantize(blocks, GGMLType.Q4_K, out=np.empty((3, 255), np.float32))


def test_explicit_shape_and_mismatches():
    blocks = random_blocks("Q8_0", 8)
    assert dequantize(blocks, "Q8_0", (2, 2, 64)).shape == (2, 2, 64)
    with pytest.raises(GGUFError, match="needs 340 bytes"):
        dequantize(blocks, "Q8_0", (5, 64))
    with pytest.raises(GGUFError, match="not a multiple of the block size 32"):
        dequantize(blocks, "Q8_0", (16, 16))
    with pytest.raises(GGUFError, match="not a multiple of the 34-byte block"):
        dequantize(np.zeros((2, 35), np.uint8), "Q8_0")


def test_unsupported_types_raise_naming_the_type():
    with pytest.raises(GGUFError, match="dequantization of IQ2_XXS is not supported"):
        dequantize(np.zeros(66, np.uint8), GGMLType.IQ2_XXS)
    with pytest.raises(GGUFError, match="quantization to Q4_K is not supported"):
        quantize(np.zeros(256, np.float32), "Q4_K")
    with pytest.raises(GGUFError, match="unknown ggml type id 4"):
        dequantize(np.zeros(18, np.uint8), 4)
    with pytest.raises(GGUFError, match="not a multiple of the block size"):
        quantize(np.zeros(40, np.float32), "Q8_0")


def test_type_table_matches_gguf_py():
    for gtype in GGMLType:
        ref = getattr(gguf.GGMLQuantizationType, gtype.name, None)
        if ref is None or gtype == GGMLType.Q8_1:  # gguf-py's Q8_1 size (40) is wrong, see spec
            continue
        traits = type_traits(gtype)
        assert int(ref) == int(gtype)
        assert (traits.block_size, traits.type_size) == gguf.GGML_QUANT_SIZES[ref], gtype.name


def test_supported_sets_cover_the_issue_list():
    required = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"]
    assert {GGMLType[n] for n in required} <= DEQUANTIZABLE_TYPES
    assert {GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1} <= QUANTIZABLE_TYPES
