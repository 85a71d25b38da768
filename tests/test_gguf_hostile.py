"""Malformed GGUF files: every defect is a GGUFError naming the byte offset; nothing else escapes.

Files are built byte by byte here (independently of lexguide's writer) so offsets are known.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from lexguide.errors import GGUFError
from lexguide.gguf import open_gguf, write_gguf

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def s(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return s(key) + struct.pack("<I", vtype) + payload


def tinfo(name: str, ne: tuple[int, ...], gtype: int = 0, offset: int = 0) -> bytes:
    return s(name) + struct.pack(f"<I{len(ne)}q", len(ne), *ne) + struct.pack("<IQ", gtype, offset)


def gguf_bytes(kvs: list[bytes], infos: list[bytes], data: bytes = b"", version: int = 3,
               n_tensors: int | None = None, n_kv: int | None = None) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(infos)
    if infos:
        body += bytes(-len(body) % 32)
    return body + data


ARCH = kv("general.architecture", 8, s("llama"))


def error_of(data: bytes) -> GGUFError:
    with pytest.raises(GGUFError) as info:
        open_gguf(data)
    return info.value


def test_valid_handmade_file_opens():
    data = gguf_bytes([ARCH], [tinfo("w", (2, 1))], struct.pack("<2f", 1.0, -2.0))
    with open_gguf(data) as f:
        assert f.dequantize("w").tolist() == [[1.0, -2.0]]


def test_version_2_has_the_same_layout():
    data = gguf_bytes([ARCH], [tinfo("w", (2, 1))], struct.pack("<2f", 1.0, -2.0), version=2)
    with open_gguf(data) as f:
        assert f.version == 2 and f.metadata["general.architecture"] == "llama"
        assert f.dequantize("w").tolist() == [[1.0, -2.0]]


@pytest.mark.parametrize(
    "data, offset, message",
    [
        (b"GGUX" + bytes(20), 0, "bad magic"),
        (b"", 0, "truncated: magic"),
        (b"GGUF" + struct.pack("<I", 1) + bytes(16), 4, "version 1 is obsolete"),
        (b"GGUF" + struct.pack("<I", 0) + bytes(16), 4, "unknown GGUF version 0"),
        (b"GGUF" + struct.pack("<I", 7) + bytes(16), 4, "unknown GGUF version 7"),
        (b"GGUF" + struct.pack(">I", 3) + bytes(16), 4, "byte-swapped"),
        (gguf_bytes([], [], n_tensors=1 << 62), 8, "tensor count 4611686018427387904 cannot fit"),
        (gguf_bytes([], [], n_kv=1 << 60), 16, "metadata count 1152921504606846976 cannot fit"),
    ],
)
def test_header_defects(data, offset, message):
    err = error_of(data)
    assert err.offset == offset and message in str(err)


def test_absurd_string_length_does_not_allocate():
    data = gguf_bytes([struct.pack("<Q", 1 << 60) + b"general.x"], [])
    err = error_of(data)
    assert err.offset == 24 and "absurd length" in str(err)


def test_string_longer_than_the_file_is_truncation():
    data = gguf_bytes([struct.pack("<Q", 1000) + b"abc" + bytes(20)], [])
    err = error_of(data)
    assert err.offset == 32 and "truncated" in str(err)


def test_unknown_value_type():
    data = gguf_bytes([ARCH, kv("x.y", 99, b"")], [])
    err = error_of(data)
    assert err.offset == 24 + len(ARCH) + 8 + 3 and "unknown value type 99" in str(err)


def test_unknown_array_element_type():
    data = gguf_bytes([kv("x.y", 9, struct.pack("<IQ", 13, 1))], [])
    err = error_of(data)
    assert err.offset == 24 + 8 + 3 + 4 and "unknown value type 13" in str(err)


def test_absurd_array_counts():
    huge = gguf_bytes([kv("x.y", 9, struct.pack("<IQ", 4, 1 << 40))], [])
    err = error_of(huge)
    assert "absurd element count" in str(err) and err.offset == 24 + 8 + 3 + 4 + 4
    big = gguf_bytes([kv("x.y", 9, struct.pack("<IQ", 4, 1000) + bytes(12))], [])
    assert "declares 1000 elements" in str(error_of(big))


def test_hostile_string_array_elements():
    good = s("a") + s("bc")
    long = struct.pack("<Q", 1 << 60) + b"x"
    data = gguf_bytes([kv("t.toks", 9, struct.pack("<IQ", 8, 3) + good + long)], [])
    err = error_of(data)
    assert "t.toks'[2] has absurd length" in str(err)
    assert err.offset == 24 + 8 + 6 + 4 + 12 + len(good)
    short = gguf_bytes([kv("t.toks", 9, struct.pack("<IQ", 8, 3) + good + s("xyz")[:-1])], [])
    assert "truncated" in str(error_of(short))


def test_duplicate_key_and_non_utf8_key():
    dup = gguf_bytes([ARCH, ARCH], [])
    err = error_of(dup)
    assert err.offset == 24 + len(ARCH) and "duplicate metadata key" in str(err)
    bad = gguf_bytes([kv(b"gen\xffx", 4, struct.pack("<I", 1))], [])
    err = error_of(bad)
    assert err.offset == 24 + 8 + 3 and "not valid UTF-8" in str(err)


def test_arrays_nested_too_deep():
    payload = struct.pack("<IQ", 9, 1) * 12 + struct.pack("<IQ", 4, 0)
    err = error_of(gguf_bytes([kv("x.deep", 9, payload)], []))
    assert "nested deeper" in str(err)


@pytest.mark.parametrize(
    "value_type, payload, message",
    [
        (10, struct.pack("<Q", 32), "must be a UINT32"),
        (4, struct.pack("<I", 0), "not a power of two"),
        (4, struct.pack("<I", 48), "not a power of two"),
    ],
)
def test_bad_alignment(value_type, payload, message):
    err = error_of(gguf_bytes([kv("general.alignment", value_type, payload)], []))
    assert err.offset == 24 + 8 + 17 + 4 and message in str(err)


INFO_AT = 24 + len(ARCH)


@pytest.mark.parametrize(
    "info, offset, message",
    [
        (tinfo("w", (2, 1), gtype=99), INFO_AT + 9 + 4 + 16, "unknown ggml type 99"),
        (tinfo("w", (2, 1), gtype=4), INFO_AT + 9 + 4 + 16, "(Q4_2) was removed"),
        (tinfo("w", (1, 1, 1, 1, 1)), INFO_AT + 9, "5 dimensions"),
        (tinfo("w", (2, -1)), INFO_AT + 9 + 4 + 8, "dimension 1 is negative"),
        (tinfo("w", (1 << 40, 1 << 40)), INFO_AT + 9 + 4 + 8, "overflows int64"),
        (tinfo("w", (16, 1), gtype=8), INFO_AT + 9 + 4, "not a multiple of the Q8_0 block size"),
        (tinfo("w", (2, 1), offset=8), INFO_AT + 9 + 4 + 16 + 4, "not a multiple of the alignment"),
        (tinfo("w", (2, 1), offset=1 << 20), INFO_AT + 9 + 4 + 16 + 4, "outside the file"),
        (tinfo("w", (64, 1)), INFO_AT + 9 + 4 + 16 + 4, "outside the file"),
        (tinfo("x" * 64, (2, 1)), INFO_AT, "longer than 63 bytes"),
    ],
)
def test_tensor_info_defects(info, offset, message):
    err = error_of(gguf_bytes([ARCH], [info], bytes(8)))
    assert err.offset == offset and message in str(err)


def test_duplicate_tensor_names():
    first = tinfo("w", (2, 1))
    err = error_of(gguf_bytes([ARCH], [first, tinfo("w", (2, 1), offset=32)], bytes(64)))
    assert err.offset == INFO_AT + len(first) and "duplicate tensor name" in str(err)


def test_empty_and_missing_files(tmp_path):
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert "empty" in str(error_of_path(tmp_path / "empty.gguf"))
    assert "cannot open" in str(error_of_path(tmp_path / "missing.gguf"))


def error_of_path(path) -> GGUFError:
    with pytest.raises(GGUFError) as info:
        open_gguf(path)
    return info.value


@pytest.fixture(scope="module")
def small_file(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("h") / "small.gguf"
    rng = np.random.default_rng(0)
    write_gguf(
        path,
        {
            "general.architecture": "llama",
            "tok.tokens": ["<s>", "", "▁the", "a\x00b", "z" * 40] * 3,
            "tok.scores": rng.normal(size=15).astype(np.float32),
            "tok.flag": True,
            "tok.nested": [[1, 2], [3]],
            "general.alignment": 32,
        },
        {"a": rng.normal(size=(2, 32)).astype(np.float32), "b": (rng.normal(size=(2, 64)), "Q8_0")},
    )
    return path.read_bytes()


def test_truncation_anywhere_is_reported(small_file):
    with open_gguf(small_file) as f:
        end_of_data = f.tensors[-1].offset + f.tensors[-1].nbytes
    for cut in range(end_of_data):
        err = error_of(small_file[:cut])
        assert err.offset is not None and err.offset <= cut, cut
        assert any(m in str(err) for m in ("truncated", "outside the file", "cannot fit")), cut


def _mutate(data: bytearray, edits: list[tuple[int, bytes]], limit: int) -> None:
    for pos, patch in edits:
        pos %= limit
        data[pos : pos + len(patch)] = patch[: len(data) - pos]


_EDIT = st.tuples(
    st.integers(0, 1 << 30),
    st.one_of(
        st.binary(min_size=1, max_size=4),
        st.sampled_from([0, 1, 8, 31, 32, 255, 1 << 31, 1 << 32, 1 << 62, (1 << 64) - 1]).map(
            lambda v: struct.pack("<Q", v)
        ),
    ),
)


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(_EDIT, min_size=1, max_size=4))
def test_mutated_small_files_raise_only_gguf_error(small_file, edits):
    data = bytearray(small_file)
    _mutate(data, edits, len(data))
    try:
        with open_gguf(bytes(data)) as f:
            for t in f.tensors:
                f.dequantize(t.name)
    except GGUFError as e:
        assert e.offset is None or 0 <= e.offset <= len(data)


@pytest.fixture(scope="module")
def real_header(smollm2_file):
    with open_gguf(smollm2_file) as f:
        header_end = f.data_offset
    return bytearray(smollm2_file.read_bytes()), header_end


@settings(max_examples=60, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(_EDIT, min_size=1, max_size=3))
def test_mutated_real_headers_raise_only_gguf_error(real_header, edits):
    data, header_end = real_header
    saved = [(pos % header_end, bytes(data[pos % header_end : pos % header_end + len(p)]))
             for pos, p in edits]
    _mutate(data, edits, header_end)
    try:
        with open_gguf(memoryview(data)) as f:
            assert f.metadata is not None
    except GGUFError as e:
        assert e.offset is None or 0 <= e.offset <= len(data)
    finally:
        for pos, old in reversed(saved):
            data[pos : pos + len(old)] = old


@pytest.mark.parametrize("shape", [(2**62, 0), (0, 2**62), (2**40, 2**30, 0)])
def test_empty_shape_with_a_huge_dimension_is_a_gguf_error(shape):
    """numpy refuses such shapes even when empty; a tensor claiming one must fail as GGUFError
    (found by the mutation test above: a dimension zeroed, another made huge)."""
    from lexguide.gguf.quants import dequantize

    with pytest.raises(GGUFError, match="too large"):
        dequantize(np.zeros(0, np.uint8), "F32", shape=shape)
