"""lexguide: local GGUF models whose output is guaranteed to match a JSON Schema, a grammar or a regex.

The public API is the names in ``__all__``; each is imported from its layer on first use, so
``import lexguide`` stays cheap (the runtime does not load unless asked for).
"""

from __future__ import annotations

import importlib
from typing import Any

from lexguide.errors import (
    GGUFError,
    GrammarError,
    LexguideError,
    LimitExceeded,
    ModelError,
    RegexError,
    SchemaError,
    TokenizerError,
    TokenRejected,
)

__version__ = "0.1.0"

_LAZY = {
    # gguf
    "GGUFFile": "lexguide.gguf",
    "TensorInfo": "lexguide.gguf",
    "GGMLType": "lexguide.gguf",
    "open_gguf": "lexguide.gguf",
    "write_gguf": "lexguide.gguf",
    "dequantize": "lexguide.gguf",
    "quantize": "lexguide.gguf",
    # tokenizer
    "Tokenizer": "lexguide.tokenizer",
    # grammar
    "gbnf_to_lark": "lexguide.grammar",
    # engine
    "Grammar": "lexguide.engine",
    "Matcher": "lexguide.engine",
    "TokenizerInfo": "lexguide.engine",
    "apply_mask": "lexguide.engine",
    "fill_masks": "lexguide.engine",
    # runtime
    "Model": "lexguide.runtime",
    "SamplerConfig": "lexguide.runtime",
    "Completion": "lexguide.runtime",
}

__all__ = [
    "__version__",
    "LexguideError",
    "GGUFError",
    "TokenizerError",
    "GrammarError",
    "RegexError",
    "SchemaError",
    "TokenRejected",
    "LimitExceeded",
    "ModelError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lexguide' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
