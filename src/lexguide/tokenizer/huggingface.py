"""The raw bytes of every token of a Hugging Face tokenizer, read from its decoder pipeline.

A ``tokenizers`` vocabulary stores token *strings*; what a token contributes to the output is
what the tokenizer's decoder makes of it. The decoders of generative models are short
pipelines of a few steps, applied here to each token alone:

- ``ByteLevel`` (GPT-2, Llama 3, Qwen, SmolLM2): every character stands for one byte in the
  GPT-2 alphabet (:mod:`lexguide.tokenizer.byte_level`);
- ``Replace`` / ``Metaspace`` (SentencePiece: Llama 2, Gemma, Mistral): ``▁`` is a space;
- ``ByteFallback``: a token spelled ``<0xNN>`` is the single byte ``NN``;
- ``Fuse`` and ``Strip`` act on whole outputs (joining, trimming the first space) and change
  no token's bytes.

Added tokens contribute their ``content`` as UTF-8; special added tokens (and ids the
vocabulary leaves unused) contribute ``b""``, as control tokens do in
:meth:`lexguide.Tokenizer.token_bytes`. Decoders that insert text between tokens
(``WordPiece``, ``CTC``) have no per-token bytes and are refused with a ``TokenizerError``.

Works on a ``transformers`` tokenizer (fast, or slow SentencePiece/GPT-2 ones) or on a
``tokenizers.Tokenizer``; imports neither.
"""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass
from typing import Any

from lexguide.errors import TokenizerError
from lexguide.tokenizer.byte_level import CHAR_TO_BYTE

__all__ = ["HFVocab", "huggingface_vocab"]

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPM_SPACE = "\u2581"  # ▁


@dataclass(frozen=True)
class HFVocab:
    """What the engine needs of a Hugging Face tokenizer (see :func:`huggingface_vocab`)."""

    token_bytes: tuple[bytes, ...]
    eos_ids: frozenset[int]
    special_ids: frozenset[int]
    special_names: dict[str, int]
    kind: str  # "byte_level", "sentencepiece" or "raw" (pieces are their text)


def huggingface_vocab(tokenizer: Any, eos_ids: Any = None) -> HFVocab:
    """Token bytes, EOS ids and special tokens of ``tokenizer``.

    Parameters
    ----------
    tokenizer:
        A ``transformers`` tokenizer or a ``tokenizers.Tokenizer``.
    eos_ids:
        End-of-generation ids (an int or several); default: the tokenizer's ``eos_token_id``.

    Costs one pass over the vocabulary (≈0.1 s for 50k tokens). Raises
    :class:`TokenizerError` for a decoder whose tokens have no bytes of their own, or when no
    EOS id is known.
    """
    backend = _backend(tokenizer)
    if backend is not None:
        spec = json.loads(backend.to_str())
        steps = _decoder_steps(spec.get("decoder"))
        pieces = _pieces(backend.get_vocab(with_added_tokens=False))
        added = [(int(a["id"]), a["content"], bool(a.get("special")))
                 for a in spec.get("added_tokens", [])]
    else:
        steps, pieces, added = _slow_tokenizer(tokenizer)
    # transformers keeps its own list of added tokens, which may go beyond the backend's
    decoder_map = getattr(tokenizer, "added_tokens_decoder", None)
    if isinstance(decoder_map, dict):
        known = {i for i, _, _ in added}
        for i, tok in decoder_map.items():
            if int(i) not in known:
                added.append((int(i), str(tok), bool(getattr(tok, "special", False))))
    n = max([len(pieces)] + [i + 1 for i, _, _ in added])
    out: list[bytes] = [b""] * n
    unused = set(range(n))
    for i, piece in enumerate(pieces):
        if piece is not None:
            out[i] = _piece_bytes(piece, steps)
            unused.discard(i)
    special: set[int] = set()
    names: dict[str, int] = {}
    for i, content, is_special in added:
        unused.discard(i)
        if is_special:
            special.add(i)
            out[i] = b""
            names.setdefault(content, i)
        else:
            out[i] = content.encode("utf-8")
    eos = _eos_ids(tokenizer, eos_ids, n)
    names_of_steps = {s[0] for s in steps}
    kind = "byte_level" if "ByteLevel" in names_of_steps else "sentencepiece" if (
        "ByteFallback" in names_of_steps or ("Replace", _SPM_SPACE, " ") in steps) else "raw"
    return HFVocab(tuple(out), eos, frozenset(special | unused), names, kind)


def _backend(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind ``tokenizer`` (itself if it is one), else None."""
    if type(tokenizer).__module__.split(".")[0] == "tokenizers" and hasattr(tokenizer, "to_str"):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend if backend is not None and hasattr(backend, "to_str") else None


def _pieces(vocab: dict[str, int]) -> list[str | None]:
    """Token strings indexed by id (None for ids the vocabulary skips)."""
    if not vocab:
        raise TokenizerError("the Hugging Face tokenizer has an empty vocabulary")
    out: list[str | None] = [None] * (max(vocab.values()) + 1)
    for piece, i in vocab.items():
        out[i] = piece
    return out


def _decoder_steps(decoder: dict | None) -> list[tuple[str, ...]]:
    """The decoder pipeline as steps ``(name, *arguments)``: ``("Replace", pattern, content)``,
    ``("Metaspace", replacement)``, ``("ByteLevel",)``, ``("ByteFallback",)``, ..."""
    if decoder is None:
        raise TokenizerError(
            "the Hugging Face tokenizer has no decoder, so its tokens' bytes are unknown; "
            "build TokenizerInfo.from_token_bytes(...) from the bytes each token decodes to"
        )
    kind = decoder.get("type")
    if kind == "Sequence":
        return [s for d in decoder.get("decoders", []) for s in _decoder_steps(d)]
    if kind in ("ByteLevel", "ByteFallback", "Fuse", "Strip"):
        return [(kind,)]
    if kind == "Metaspace":
        return [("Replace", decoder.get("replacement", _SPM_SPACE), " ")]
    if kind == "Replace":
        pattern = decoder.get("pattern", {})
        if "String" not in pattern:
            raise TokenizerError(f"unsupported Hugging Face decoder: Replace by regex {pattern}")
        return [("Replace", pattern["String"], decoder.get("content", ""))]
    raise TokenizerError(
        f"unsupported Hugging Face decoder {kind!r}: it inserts text between tokens, so a token "
        "has no bytes of its own (byte-level BPE and SentencePiece decoders are supported)"
    )


def _piece_bytes(piece: str, steps: list[tuple[str, ...]]) -> bytes:
    """The bytes one token string decodes to under ``steps``."""
    text: str | bytes = piece
    for step in steps:
        if isinstance(text, bytes):
            break  # ByteLevel or ByteFallback produced bytes: nothing after acts on one token
        if step[0] == "ByteLevel":
            text = _byte_level(text)
        elif step[0] == "ByteFallback":
            m = _BYTE_TOKEN.fullmatch(text)
            if m:
                text = bytes([int(m.group(1), 16)])
        elif step[0] == "Replace":
            text = text.replace(step[1], step[2])
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _byte_level(piece: str) -> bytes:
    """GPT-2 alphabet -> bytes; characters outside the alphabet count as their UTF-8."""
    try:
        return bytes(CHAR_TO_BYTE[c] for c in piece)
    except KeyError:
        return b"".join(bytes([CHAR_TO_BYTE[c]]) if c in CHAR_TO_BYTE else c.encode("utf-8")
                        for c in piece)


def _slow_tokenizer(
    tokenizer: Any,
) -> tuple[list[tuple[str, ...]], list[str | None], list[tuple[int, str, bool]]]:
    """Steps, pieces and added tokens of a ``transformers`` tokenizer without a Rust backend."""
    if hasattr(tokenizer, "sp_model"):  # SentencePiece: ▁ is a space, <0xNN> a byte
        steps = [("ByteFallback",), ("Replace", _SPM_SPACE, " ")]
    elif hasattr(tokenizer, "byte_encoder"):  # GPT-2 style
        steps = [("ByteLevel",)]
    else:
        raise TokenizerError(
            f"cannot read token bytes from {type(tokenizer).__name__}: need a fast tokenizer, "
            "a SentencePiece one or a GPT-2 byte-level one"
        )
    vocab = tokenizer.get_vocab()
    added_map = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    added = [(int(i), str(t), bool(getattr(t, "special", False))) for i, t in added_map.items()]
    added_ids = {i for i, _, _ in added}
    pieces = _pieces({p: i for p, i in vocab.items() if i not in added_ids} or vocab)
    return steps, pieces, added


def _eos_ids(tokenizer: Any, eos_ids: Any, n: int) -> frozenset[int]:
    if eos_ids is None:
        eos_ids = getattr(tokenizer, "eos_token_id", None)
    if eos_ids is None:
        raise TokenizerError(
            "the Hugging Face tokenizer names no EOS token; pass eos_ids=[...] (e.g. the "
            "model's generation_config.eos_token_id)"
        )
    ids = [eos_ids] if hasattr(eos_ids, "__index__") else list(eos_ids)
    if not ids:
        raise TokenizerError("eos_ids is empty: at least one end-of-generation id is needed")
    out = set()
    for i in ids:
        if isinstance(i, bool) or not hasattr(i, "__index__") or not 0 <= operator.index(i) < n:
            raise TokenizerError(f"EOS id {i!r} is not a token id of this vocabulary (0..{n - 1})")
        out.add(operator.index(i))
    return frozenset(out)
