"""The top-level public surface is pinned, and every name in it resolves."""

from __future__ import annotations

import lexguide

PUBLIC = {
    "__version__", "LexguideError", "GGUFError", "TokenizerError", "GrammarError", "RegexError",
    "SchemaError", "TokenRejected", "LimitExceeded", "ModelError",
    "GGUFFile", "TensorInfo", "GGMLType", "open_gguf", "write_gguf", "dequantize", "quantize",
    "Tokenizer", "Grammar", "gbnf_to_lark", "Matcher", "TokenizerInfo", "apply_mask", "fill_masks",
    "Model", "SamplerConfig", "Completion",
}  # fmt: skip


def test_public_surface_is_pinned():
    assert set(lexguide.__all__) == PUBLIC


def test_every_public_name_resolves():
    for name in PUBLIC:
        assert getattr(lexguide, name) is not None, name


def test_errors_share_one_root():
    for name in ["GGUFError", "TokenizerError", "GrammarError", "RegexError", "SchemaError",
                 "TokenRejected", "LimitExceeded", "ModelError"]:
        assert issubclass(getattr(lexguide, name), lexguide.LexguideError), name
