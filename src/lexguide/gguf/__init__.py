"""GGUF layer: read (memory-mapped, validated), write, and (de)quantise ggml tensors.

Format: ggml's GGUF specification (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
Everything above this layer (tokenizer, runtime) uses
:func:`open_gguf` and :func:`dequantize`.
"""

from __future__ import annotations

from lexguide.gguf.constants import GGMLType, GGUFValueType, TypeTraits, type_traits
from lexguide.gguf.quants import DEQUANTIZABLE_TYPES, QUANTIZABLE_TYPES, dequantize, quantize
from lexguide.gguf.reader import GGUFFile, TensorInfo, open_gguf
from lexguide.gguf.writer import TensorSource, write_gguf

__all__ = [
    "DEQUANTIZABLE_TYPES",
    "QUANTIZABLE_TYPES",
    "GGMLType",
    "GGUFFile",
    "GGUFValueType",
    "TensorInfo",
    "TensorSource",
    "TypeTraits",
    "dequantize",
    "open_gguf",
    "quantize",
    "type_traits",
    "write_gguf",
]
