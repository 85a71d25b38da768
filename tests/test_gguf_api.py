"""The public surface of lexguide.gguf and the GGUFFile life cycle."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import lexguide
import lexguide.gguf as lg
from lexguide.errors import GGUFError


def test_public_names_are_pinned():
    assert set(lg.__all__) == {
        "GGUFFile", "TensorInfo", "GGMLType", "GGUFValueType", "TypeTraits", "type_traits",
        "open_gguf", "write_gguf", "TensorSource", "dequantize", "quantize",
        "DEQUANTIZABLE_TYPES", "QUANTIZABLE_TYPES",
    }
    for name in ("GGUFFile", "TensorInfo", "GGMLType", "open_gguf", "write_gguf", "dequantize",
                 "quantize"):
        assert getattr(lexguide, name) is getattr(lg, name)


@pytest.fixture()
def small(tmp_path):
    w = np.arange(64, dtype=np.float32).reshape(2, 32)
    return lg.write_gguf(tmp_path / "s.gguf", {"general.architecture": "llama"},
                         {"w": w, "q": (w, "Q8_0")})


def test_tensor_info_is_an_immutable_record(small):
    with lg.open_gguf(small) as f:
        info = f.tensor("q")
        assert info == lg.TensorInfo("q", (2, 32), lg.GGMLType.Q8_0, info.offset, 68)
        assert info.ne == (32, 2) and info.n_elements == 64 and info.row_bytes == 34
        with pytest.raises(dataclasses.FrozenInstanceError):
            info.name = "x"  # type: ignore[misc]
        assert "q" in f and "nope" not in f and [t.name for t in f] == ["w", "q"]
        with pytest.raises(KeyError, match="no tensor named 'nope'"):
            f.tensor("nope")


def test_close_keeps_handed_out_views_valid(small):
    f = lg.open_gguf(small)
    raw = f.raw("w")
    f.close()
    assert raw.view("<f4").reshape(2, 32)[1, 0] == 32.0  # still mapped
    with pytest.raises(GGUFError, match="closed"):
        f.raw("w")
    with pytest.raises(GGUFError, match="closed"):
        f.dequantize("q")


def test_raw_views_are_read_only_even_over_writable_memory(small):
    data = bytearray(small.read_bytes())
    with lg.open_gguf(data) as f:
        raw = f.raw("w")
        with pytest.raises(ValueError):
            raw[0, 0] = 1
        assert f.path is None and "<memory>" in repr(f)


def test_rows_of_raw_dequantize_lazily(small):
    with lg.open_gguf(small) as f:
        info = f.tensor("q")
        row = lg.dequantize(f.raw("q")[1:2], info.ggml_type)
        assert np.array_equal(row, f.dequantize("q")[1:2])
        picked = lg.dequantize(f.raw("q")[[1, 0, 1]], "Q8_0")  # embedding lookup by ids
        assert np.array_equal(picked, f.dequantize("q")[[1, 0, 1]])
