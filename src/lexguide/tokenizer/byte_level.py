"""The GPT-2 byte ↔ unicode alphabet of byte-level BPE vocabularies (spec §4.1).

Bytes 0x21–0x7E, 0xA1–0xAC and 0xAE–0xFF stand for themselves; the other 68 bytes, in
increasing order, map to U+0100 … U+0143. Vocabulary texts are strings in this alphabet.
"""

from __future__ import annotations

import re

__all__ = [
    "BYTE_LEVEL_DECODE_TABLE",
    "BYTE_LEVEL_ENCODE_TABLE",
    "BYTE_LEVEL_RE",
    "BYTE_TO_CHAR",
    "CHAR_TO_BYTE",
    "bytes_to_alphabet",
]


def _build() -> list[str]:
    direct = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table: list[str] = []
    extra = 0
    for b in range(256):
        if b in direct:
            table.append(chr(b))
        else:
            table.append(chr(0x100 + extra))
            extra += 1
    return table


BYTE_TO_CHAR: tuple[str, ...] = tuple(_build())
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
# str.translate tables: latin-1 text (one char per byte) -> alphabet, and back.
BYTE_LEVEL_ENCODE_TABLE: dict[int, str] = {b: c for b, c in enumerate(BYTE_TO_CHAR)}
BYTE_LEVEL_DECODE_TABLE: dict[int, int] = {ord(c): b for b, c in enumerate(BYTE_TO_CHAR)}
# a whole string made only of alphabet characters
BYTE_LEVEL_RE = re.compile("[" + "".join(re.escape(c) for c in BYTE_TO_CHAR) + "]*")


def bytes_to_alphabet(data: bytes) -> str:
    """Map raw bytes to their alphabet string (pure, O(len))."""
    return data.decode("latin-1").translate(BYTE_LEVEL_ENCODE_TABLE)
