"""GGUF constants: value types and the ggml tensor type table, kept as data.

Source: ggml ``include/ggml.h`` / ``src/ggml.c`` type traits and the GGUF specification
(https://github.com/ggml-org/ggml/blob/master/docs/gguf.md: file layout, value types, ggml_type).
This module imports nothing from lexguide except errors.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ELEMENT_DTYPES",
    "GGUF_DEFAULT_ALIGNMENT",
    "GGUF_MAGIC",
    "GGUF_SUPPORTED_VERSIONS",
    "LLAMA_FTYPE_NAMES",
    "MAX_ARRAY_ELEMENTS",
    "MAX_DIMS",
    "MAX_STRING_BYTES",
    "MAX_TENSOR_NAME_BYTES",
    "REMOVED_TYPES",
    "SCALAR_VALUE_DTYPES",
    "TYPE_TRAITS",
    "GGMLType",
    "GGUFValueType",
    "TypeTraits",
    "type_traits",
]

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
GGUF_SUPPORTED_VERSIONS = (2, 3)
#: ggml's reader caps (gguf.cpp): one string at most 1 GiB, one array at most 1 Gi elements.
MAX_STRING_BYTES = 1 << 30
MAX_ARRAY_ELEMENTS = 1 << 30
#: GGML_MAX_NAME is 64 bytes including the terminating NUL.
MAX_TENSOR_NAME_BYTES = 63
MAX_DIMS = 4


class GGUFValueType(enum.IntEnum):
    """Type tag of a metadata value (spec §1, "Value types")."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


#: Little-endian numpy dtype of every fixed-size value type (BOOL is read as uint8).
SCALAR_VALUE_DTYPES: dict[GGUFValueType, np.dtype] = {
    GGUFValueType.UINT8: np.dtype("u1"),
    GGUFValueType.INT8: np.dtype("i1"),
    GGUFValueType.UINT16: np.dtype("<u2"),
    GGUFValueType.INT16: np.dtype("<i2"),
    GGUFValueType.UINT32: np.dtype("<u4"),
    GGUFValueType.INT32: np.dtype("<i4"),
    GGUFValueType.FLOAT32: np.dtype("<f4"),
    GGUFValueType.BOOL: np.dtype("u1"),
    GGUFValueType.UINT64: np.dtype("<u8"),
    GGUFValueType.INT64: np.dtype("<i8"),
    GGUFValueType.FLOAT64: np.dtype("<f8"),
}


class GGMLType(enum.IntEnum):
    """ggml tensor element type ids as stored in GGUF tensor infos (spec §2)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42


@dataclass(frozen=True, slots=True)
class TypeTraits:
    """Block geometry of one ggml type: ``block_size`` elements are stored in ``type_size`` bytes."""

    ggml_type: GGMLType
    block_size: int
    type_size: int

    @property
    def is_quantized(self) -> bool:
        """True for block formats (anything that is not a plain scalar element type)."""
        return self.block_size > 1

    def row_bytes(self, n_elements: int) -> int:
        """Bytes used by ``n_elements`` consecutive elements (a multiple of ``block_size``)."""
        return n_elements // self.block_size * self.type_size


_T = GGMLType
#: (block elements, bytes per block) of every type ggml can store in a file.
_GEOMETRY: dict[GGMLType, tuple[int, int]] = {
    _T.F32: (1, 4), _T.F16: (1, 2), _T.Q4_0: (32, 18), _T.Q4_1: (32, 20),
    _T.Q5_0: (32, 22), _T.Q5_1: (32, 24), _T.Q8_0: (32, 34), _T.Q8_1: (32, 36),
    _T.Q2_K: (256, 84), _T.Q3_K: (256, 110), _T.Q4_K: (256, 144), _T.Q5_K: (256, 176),
    _T.Q6_K: (256, 210), _T.Q8_K: (256, 292), _T.IQ2_XXS: (256, 66), _T.IQ2_XS: (256, 74),
    _T.IQ3_XXS: (256, 98), _T.IQ1_S: (256, 50), _T.IQ4_NL: (32, 18), _T.IQ3_S: (256, 110),
    _T.IQ2_S: (256, 82), _T.IQ4_XS: (256, 136), _T.I8: (1, 1), _T.I16: (1, 2), _T.I32: (1, 4),
    _T.I64: (1, 8), _T.F64: (1, 8), _T.IQ1_M: (256, 56), _T.BF16: (1, 2),
    _T.TQ1_0: (256, 54), _T.TQ2_0: (256, 66), _T.MXFP4: (32, 17), _T.NVFP4: (64, 36),
    _T.Q1_0: (128, 18), _T.Q2_0: (64, 18),
}
TYPE_TRAITS: dict[int, TypeTraits] = {
    int(t): TypeTraits(t, bs, ts) for t, (bs, ts) in _GEOMETRY.items()
}

#: Type ids ggml once had and removed; files using them cannot be loaded by any current ggml.
REMOVED_TYPES: dict[int, str] = {
    4: "Q4_2", 5: "Q4_3", 31: "Q4_0_4_4", 32: "Q4_0_4_8", 33: "Q4_0_8_8",
    36: "IQ4_NL_4_4", 37: "IQ4_NL_4_8", 38: "IQ4_NL_8_8",
}


#: Little-endian numpy dtype of the plain (one element per "block") ggml types except BF16,
#: which numpy lacks.
ELEMENT_DTYPES: dict[GGMLType, np.dtype] = {
    _T.F32: np.dtype("<f4"),
    _T.F16: np.dtype("<f2"),
    _T.F64: np.dtype("<f8"),
    _T.I8: np.dtype("i1"),
    _T.I16: np.dtype("<i2"),
    _T.I32: np.dtype("<i4"),
    _T.I64: np.dtype("<i8"),
}


def type_traits(type_id: int) -> TypeTraits:
    """Traits of ggml type ``type_id``; raises ``KeyError`` naming removed ids too."""
    traits = TYPE_TRAITS.get(int(type_id))
    if traits is None:
        removed = REMOVED_TYPES.get(int(type_id))
        if removed is not None:
            raise KeyError(f"ggml type {type_id} ({removed}) was removed from ggml")
        raise KeyError(f"unknown ggml type {type_id}")
    return traits


#: ``general.file_type`` (llama_ftype) id → name, for display.
LLAMA_FTYPE_NAMES: dict[int, str] = {
    0: "ALL_F32", 1: "MOSTLY_F16", 2: "MOSTLY_Q4_0", 3: "MOSTLY_Q4_1", 7: "MOSTLY_Q8_0",
    8: "MOSTLY_Q5_0", 9: "MOSTLY_Q5_1", 10: "MOSTLY_Q2_K", 11: "MOSTLY_Q3_K_S",
    12: "MOSTLY_Q3_K_M", 13: "MOSTLY_Q3_K_L", 14: "MOSTLY_Q4_K_S", 15: "MOSTLY_Q4_K_M",
    16: "MOSTLY_Q5_K_S", 17: "MOSTLY_Q5_K_M", 18: "MOSTLY_Q6_K", 19: "MOSTLY_IQ2_XXS",
    20: "MOSTLY_IQ2_XS", 21: "MOSTLY_Q2_K_S", 22: "MOSTLY_IQ3_XS", 23: "MOSTLY_IQ3_XXS",
    24: "MOSTLY_IQ1_S", 25: "MOSTLY_IQ4_NL", 26: "MOSTLY_IQ3_S", 27: "MOSTLY_IQ3_M",
    28: "MOSTLY_IQ2_S", 29: "MOSTLY_IQ2_M", 30: "MOSTLY_IQ4_XS", 31: "MOSTLY_IQ1_M",
    32: "MOSTLY_BF16", 36: "MOSTLY_TQ1_0", 37: "MOSTLY_TQ2_0", 38: "MOSTLY_MXFP4_MOE",
    39: "MOSTLY_NVFP4", 40: "MOSTLY_Q1_0", 1024: "GUESSED",
}
