"""Vectorised string-array decoding against a plain per-element reference decoder."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from lexguide.errors import GGUFError
from lexguide.gguf.strings import _chain_doubling, read_string_array

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st


def encode(items: list[bytes], prefix: bytes = b"", suffix: bytes = b"") -> bytes:
    return prefix + b"".join(struct.pack("<Q", len(b)) + b for b in items) + suffix


def reference(items: list[bytes]) -> list[str]:
    return [b.decode("utf-8", "surrogateescape") for b in items]


def decode(data: bytes, pos: int, count: int) -> tuple[list[str], int]:
    return read_string_array(np.frombuffer(data, np.uint8), pos, count, "t")


CASES = {
    "plain": [b"<s>", b"hello", "▁wörld".encode(), b"x" * 300],
    "empty strings": [b"", b"", b"a", b"", b""],
    "leading NUL": [b"\x00abc", b"\x00", b"\x00\x00\x00\x00\x00\x00\x00\x00\x00", b"z"],
    "byte 0xFF inside": [b"a\xffb", b"\xff", b"c"],
    "invalid UTF-8": [b"\xe2\x82", b"\x80abc", b"\xed\xa0\x80", "ok€".encode()],
    "zero runs that look like lengths": [bytes(16) + b"\x05" + bytes(7), b"q" * 9, bytes(8)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_known_awkward_arrays(name):
    items = CASES[name]
    data = encode(items, prefix=b"PRE", suffix=b"\x00" * 40 + b"tail")
    got, end = decode(data, 3, len(items))
    assert got == reference(items)
    assert end == len(data) - 44


def test_many_strings_cross_several_windows():
    rng = np.random.default_rng(0)
    items = [bytes(rng.integers(0, 256, size=int(k), dtype=np.uint8))
             for k in rng.integers(0, 40, size=60_000)]
    data = encode(items)
    got, end = decode(data, 0, len(items))
    assert end == len(data) and got == reference(items)


def test_one_huge_string_among_small_ones():
    items = [b"a", b"b" * (3 << 21), b"c", b""]
    got, _ = decode(encode(items), 0, 4)
    assert got == reference(items)


def test_doubling_fallback_agrees_with_the_chain():
    items = [b"", b"\x00", b"ab", b"", b"\x00\x00cd"] * 50
    data = np.frombuffer(encode(items) + bytes(16), np.uint8)
    z = data == 0
    m = len(data) - 7
    c4 = z[4:4 + m] & z[5:5 + m] & z[6:6 + m] & z[7:7 + m]
    starts, lengths = _chain_doubling(data, c4, len(items))
    expected = np.cumsum([0] + [8 + len(b) for b in items[:-1]])
    assert starts.tolist() == expected.tolist()
    assert lengths.tolist() == [len(b) for b in items]


def test_errors_name_the_element_and_offset():
    data = encode([b"ab", b"cd"]) + struct.pack("<Q", 5 << 30) + b"zz"
    with pytest.raises(GGUFError, match=r"t\[2\] has absurd length") as e:
        decode(data, 0, 3)
    assert e.value.offset == 20
    with pytest.raises(GGUFError, match="truncated") as e:
        decode(encode([b"ab", b"cdef"])[:-1], 0, 2)
    with pytest.raises(GGUFError, match=r"truncated: t\[2\]") as e:
        decode(encode([b"ab", b"cd"]), 0, 3)
    assert e.value.offset == 20


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=12), st.text(max_size=6).map(str.encode),
                          st.sampled_from([b"", b"\x00", bytes(9), b"\xff\x00"])),
                max_size=60),
       st.binary(max_size=20))
def test_any_array_decodes_like_the_reference(items, suffix):
    data = encode(items, prefix=b"\x00" * 5, suffix=suffix)
    got, end = decode(data, 5, len(items))
    assert got == reference(items) and end == len(data) - len(suffix)
