"""Tokenizers built from GGUF vocabularies: encode/decode and the raw bytes of every token.

``Tokenizer.from_gguf(path)`` supports the ``llama`` (SentencePiece-style BPE by scores, byte
fallback) and ``gpt2`` (byte-level BPE by merge rank, pre-tokenizer chosen by
``tokenizer.ggml.pre``) vocabularies, following llama.cpp's ``src/llama-vocab.cpp``.
"""

from __future__ import annotations

from lexguide.tokenizer.tokenizer import Tokenizer
from lexguide.tokenizer.vocab import TokenAttr, TokenType

__all__ = ["TokenAttr", "TokenType", "Tokenizer"]
