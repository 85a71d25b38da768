"""The reader and dequantisers against gguf-py on every tensor of both real models."""

from __future__ import annotations

import numpy as np
import pytest

from lexguide.gguf import dequantize, open_gguf

gguf = pytest.importorskip("gguf")


def _reference_metadata(reader) -> dict:
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def _same_value(ours, theirs) -> bool:
    if isinstance(ours, np.ndarray):
        return ours.tolist() == theirs
    return type(ours) is type(theirs) and ours == theirs


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model_pair(request):
    path = request.getfixturevalue(f"{request.param}_file")
    with open_gguf(path) as ours:
        yield ours, gguf.GGUFReader(path)


def test_metadata_identical_to_gguf_py(model_pair):
    ours, reader = model_pair
    expected = _reference_metadata(reader)
    assert list(ours.metadata) == list(expected)
    bad = [k for k in expected if not _same_value(ours.metadata[k], expected[k])]
    assert bad == []


def test_string_and_numeric_arrays_have_contract_types(model_pair):
    ours, _ = model_pair
    tokens = ours.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, list) and all(isinstance(t, str) for t in tokens[:100])
    assert isinstance(ours.metadata["tokenizer.ggml.token_type"], np.ndarray)
    assert ours.metadata["tokenizer.ggml.token_type"].dtype == np.int32


def test_tensor_infos_match_gguf_py(model_pair):
    ours, reader = model_pair
    assert ours.data_offset == reader.data_offset
    assert [t.name for t in ours.tensors] == [t.name for t in reader.tensors]
    for mine, ref in zip(ours.tensors, reader.tensors):
        assert mine.ggml_type == int(ref.tensor_type)
        assert mine.ne == tuple(int(x) for x in ref.shape)
        assert (mine.offset, mine.nbytes) == (ref.data_offset, ref.n_bytes)


def test_every_tensor_dequantizes_bit_exactly(model_pair):
    ours, reader = model_pair
    for ref in reader.tensors:
        got = ours.dequantize(ref.name)
        want = gguf.quants.dequantize(ref.data, ref.tensor_type).reshape(got.shape)
        assert got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), ref.name


def test_row_slice_dequantizes_like_gguf_py(model_pair):
    ours, reader = model_pair
    first_of_type = {}
    for ref in reader.tensors:
        if len(ref.data.shape) == 2:
            first_of_type.setdefault(int(ref.tensor_type), ref)
    for ref in first_of_type.values():
        info = ours.tensor(ref.name)
        part = dequantize(ours.raw(info.name)[3:7], info.ggml_type)
        want = gguf.quants.dequantize(ref.data[3:7], ref.tensor_type)
        assert part.shape == (4, info.shape[-1])
        assert np.array_equal(part.view(np.uint32), want.view(np.uint32)), ref.name


def test_opening_maps_but_does_not_copy(smollm2_file):
    with open_gguf(smollm2_file) as f:
        raw = f.raw("token_embd.weight")
        assert not raw.flags.writeable and not raw.flags.owndata
        assert raw.shape == (49152, 576 // 32 * 34)
