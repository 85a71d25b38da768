"""write_gguf: exact bytes, round trips of every value type and tensor type, gguf-py as oracle."""

from __future__ import annotations

import filecmp

import numpy as np
import pytest

from lexguide.errors import GGUFError
from lexguide.gguf import GGMLType, dequantize, open_gguf, quantize, write_gguf
from lexguide.gguf import GGUFValueType as V

SPEC_EXAMPLE = bytes.fromhex(  # a GGUF v3 file written by hand: 2 key-values, 1 tensor, 168 bytes
    "47475546" "03000000" "0100000000000000" "0200000000000000"
    "1400000000000000" + b"general.architecture".hex() + "08000000"
    "0500000000000000" + b"llama".hex()
    + "1100000000000000" + b"general.alignment".hex() + "04000000" "20000000"
    "0100000000000000" "77" "02000000" "0200000000000000" "0100000000000000"
    "00000000" "0000000000000000" + "00" * 17 + "0000803f" "000000c0"
)

ALL_TYPES_METADATA = {
    "t.u8": np.uint8(200),
    "t.i8": np.int8(-100),
    "t.u16": np.uint16(60000),
    "t.i16": np.int16(-30000),
    "t.u32": 4_000_000_000,
    "t.i32": -2_000_000_000,
    "t.f32": np.float32(1.5e-6),
    "t.bool": True,
    "t.str": "héllo ▁wörld",
    "t.u64": 1 << 40,
    "t.i64": -(1 << 40),
    "t.f64": np.float64(1e300),
    "t.arr.u8": np.arange(5, dtype=np.uint8),
    "t.arr.i8": np.array([-1, 2], dtype=np.int8),
    "t.arr.u16": np.array([1, 65535], dtype=np.uint16),
    "t.arr.i16": np.array([-5], dtype=np.int16),
    "t.arr.u32": np.array([7, 8, 9], dtype=np.uint32),
    "t.arr.i32": np.array([-7, 8], dtype=np.int32),
    "t.arr.f32": np.array([0.25, -1.0], dtype=np.float32),
    "t.arr.bool": np.array([True, False, True]),
    "t.arr.str": ["a", "", "ünïcode", "x y"],
    "t.arr.u64": np.array([1 << 50], dtype=np.uint64),
    "t.arr.i64": np.array([-(1 << 50)], dtype=np.int64),
    "t.arr.f64": np.array([1e-300], dtype=np.float64),
    "t.arr.nested": [[1, 2], [3]],
    "t.arr.empty_str": [],
}
EXPECTED_TYPES = {
    "t.u8": (V.UINT8,), "t.i8": (V.INT8,), "t.u16": (V.UINT16,), "t.i16": (V.INT16,),
    "t.u32": (V.UINT32,), "t.i32": (V.INT32,), "t.f32": (V.FLOAT32,), "t.bool": (V.BOOL,),
    "t.str": (V.STRING,), "t.u64": (V.UINT64,), "t.i64": (V.INT64,), "t.f64": (V.FLOAT64,),
    "t.arr.str": (V.ARRAY, V.STRING), "t.arr.nested": (V.ARRAY, V.ARRAY, V.UINT32),
    "t.arr.bool": (V.ARRAY, V.BOOL),
}


def _equal(a, b) -> bool:
    """``a`` (read back) equals ``b`` (written); arrays must keep their dtype."""
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, np.ndarray):
        return a.tolist() == b
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_equal, a, b))
    return a == b


def test_spec_worked_example_bytes(tmp_path):
    path = write_gguf(
        tmp_path / "w.gguf",
        {"general.architecture": "llama", "general.alignment": 32},
        {"w": np.array([[1.0, -2.0]], dtype=np.float32)},
    )
    data = path.read_bytes()
    assert data[:168] == SPEC_EXAMPLE
    assert len(data) == 192 and data[168:] == bytes(24)  # last tensor padded like ggml's writer
    with open_gguf(path) as f:
        assert f.tensors[0].shape == (1, 2) and f.tensors[0].offset == 160
        assert f.dequantize("w").tolist() == [[1.0, -2.0]]


def test_reader_accepts_the_unpadded_spec_example():
    with open_gguf(SPEC_EXAMPLE) as f:
        assert f.version == 3 and f.alignment == 32 and f.data_offset == 160
        assert f.metadata == {"general.architecture": "llama", "general.alignment": 32}
        assert f.dequantize("w").tolist() == [[1.0, -2.0]]


def test_every_value_type_round_trips(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", ALL_TYPES_METADATA)
    with open_gguf(path) as f:
        assert list(f.metadata) == list(ALL_TYPES_METADATA)
        for key, value in ALL_TYPES_METADATA.items():
            got = f.metadata[key]
            if isinstance(value, np.generic):
                assert got == value.item() and type(got) is type(value.item()), key
            else:
                assert _equal(got, value), key
        for key, sig in EXPECTED_TYPES.items():
            assert f.metadata_types[key] == sig, key
        assert f.tensors == []


def test_gguf_py_reads_our_metadata(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = write_gguf(tmp_path / "m.gguf", ALL_TYPES_METADATA)
    reader = gguf.GGUFReader(path)
    for key, value in ALL_TYPES_METADATA.items():
        if key == "t.arr.nested":
            continue  # gguf-py's contents() flattens nested arrays
        field = reader.fields[key]
        expected = value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value
        assert field.contents() == expected, key
        assert int(field.types[0]) == (
            EXPECTED_TYPES[key][0] if key in EXPECTED_TYPES else field.types[0]
        )


def test_rewrite_with_types_is_lossless(tmp_path):
    path = write_gguf(tmp_path / "a.gguf", ALL_TYPES_METADATA)
    with open_gguf(path) as f:
        copy = write_gguf(tmp_path / "b.gguf", f.metadata, metadata_types=f.metadata_types)
    assert copy.read_bytes() == path.read_bytes()


def test_tensor_types_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 64)).astype(np.float32)
    tensors = {
        "f32": w,
        "f16": w.astype(np.float16),
        "q8_0": (w, GGMLType.Q8_0),
        "q4_0": (w, "Q4_0"),
        "q4_1.raw": (quantize(w, "Q4_1"), GGMLType.Q4_1),
        "i32": np.arange(6, dtype=np.int32).reshape(2, 3),
        "vec": rng.normal(size=64).astype(np.float32),
        "cube": (quantize(w, "Q8_0").reshape(-1), GGMLType.Q8_0, (2, 4, 64)),
    }
    path = write_gguf(tmp_path / "t.gguf", {"general.alignment": 64}, tensors)
    with open_gguf(path) as f:
        assert [t.name for t in f.tensors] == list(tensors)
        assert all(t.offset % 64 == 0 for t in f.tensors)
        assert np.array_equal(f.dequantize("f32"), w)
        assert np.array_equal(f.dequantize("f16"), w.astype(np.float16).astype(np.float32))
        assert np.array_equal(f.dequantize("q8_0"), dequantize(quantize(w, "Q8_0"), "Q8_0"))
        assert np.array_equal(f.dequantize("q4_0"), dequantize(quantize(w, "Q4_0"), "Q4_0"))
        assert np.array_equal(f.raw("q4_1.raw"), quantize(w, "Q4_1"))
        assert f.tensor("i32").ggml_type == GGMLType.I32
        assert f.dequantize("i32").tolist() == [[0, 1, 2], [3, 4, 5]]
        assert f.tensor("vec").shape == (64,)
        assert f.dequantize("cube").shape == (2, 4, 64)
        assert f.tensor("q8_0").ggml_type == GGMLType.Q8_0


def test_gguf_py_reads_our_tensors_and_we_read_theirs(tmp_path):
    gguf = pytest.importorskip("gguf")
    w = np.random.default_rng(1).normal(size=(4, 96)).astype(np.float32)
    ours = write_gguf(tmp_path / "o.gguf", {"general.architecture": "llama"},
                      {"a": w, "b": (w, "Q8_0"), "c": (w, "Q4_0")})
    reader = gguf.GGUFReader(ours)
    for t in reader.tensors:
        want = open_gguf(ours).dequantize(t.name)
        got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(want.shape)
        assert np.array_equal(got, want), t.name

    writer = gguf.GGUFWriter(tmp_path / "g.gguf", arch="llama")
    writer.add_uint32("x.count", 3)
    writer.add_array("x.names", ["p", "q"])
    writer.add_tensor("w", w)
    writer.add_tensor("w8", gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with open_gguf(tmp_path / "g.gguf") as f:
        assert f.metadata["x.count"] == 3 and f.metadata["x.names"] == ["p", "q"]
        assert np.array_equal(f.dequantize("w"), w)
        assert np.array_equal(f.dequantize("w8"), dequantize(quantize(w, "Q8_0"), "Q8_0"))


def test_real_model_rewrites_byte_identically(smollm2_file, tmp_path):
    with open_gguf(smollm2_file) as f:
        tensors = {t.name: (f.raw(t.name), t.ggml_type, t.shape) for t in f.tensors}
        out = write_gguf(tmp_path / "copy.gguf", f.metadata, tensors,
                         metadata_types=f.metadata_types)
    assert filecmp.cmp(out, smollm2_file, shallow=False)


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"general.alignment": 24}, "power of two"),
        ({"general.alignment": np.uint64(32)}, "UINT32"),
        ({"": 1}, "non-empty"),
        ({"k": object()}, "cannot store"),
        ({"k": 1 << 70}, "64-bit range"),
        ({"k": [1, "a"]}, "cannot store"),
        ({"k": np.zeros((2, 2), np.int32)}, "1-D"),
    ],
)
def test_unencodable_metadata_is_rejected(tmp_path, metadata, message):
    with pytest.raises(GGUFError, match=message):
        write_gguf(tmp_path / "x.gguf", metadata)
    assert not (tmp_path / "x.gguf").exists()


def test_explicit_type_out_of_range_is_rejected(tmp_path):
    with pytest.raises(GGUFError, match="out of range for UINT8"):
        write_gguf(tmp_path / "x.gguf", {"k": 300}, metadata_types={"k": V.UINT8})


@pytest.mark.parametrize(
    "tensors, message",
    [
        ({"x" * 64: np.zeros(4, np.float32)}, "at most 63 bytes"),
        ({"u": np.zeros(4, np.uint16)}, "no ggml type"),
        ({"q": (np.zeros((2, 30), np.float32), "Q8_0")}, "multiple of the block size"),
        ({"r": (np.zeros((2, 33), np.uint8), "Q8_0")}, "whole Q8_0 blocks"),
        ({"s": (np.zeros(34, np.uint8), "Q8_0", (2, 32))}, "do not fit"),
        ({"t": np.zeros((1, 1, 1, 1, 2), np.float32)}, "at most 4"),
    ],
)
def test_unencodable_tensors_are_rejected(tmp_path, tensors, message):
    with pytest.raises(GGUFError, match=message):
        write_gguf(tmp_path / "x.gguf", {}, tensors)
