"""A vocabulary read from GGUF ``tokenizer.ggml.*`` metadata, post-processed like llama.cpp.

Source: ggml-org/llama.cpp ``src/llama-vocab.cpp`` (``llama_vocab::impl::load``): token types
become attribute bits, special ids get per-model defaults then GGUF overrides, EOT/EOM/FIM tokens
are auto-detected by text, and the end-of-generation (EOG) set is built from ids and texts.

Deliberate deviation: a token the file marks ``USER_DEFINED`` (plain-text added token) is never
forced to CONTROL or put in the EOG set because of its text. llama.cpp does so for ``</s>`` (for
PaddleOCR), which would turn Gemma 3's HTML strike-through tag ``</s>`` into an
end-of-generation token that text can never produce.
"""

from __future__ import annotations

import enum
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from lexguide.errors import TokenizerError
from lexguide.tokenizer.byte_level import BYTE_LEVEL_DECODE_TABLE, BYTE_LEVEL_RE

__all__ = ["SUPPORTED_MODELS", "TokenAttr", "TokenType", "Vocab", "load_vocab"]

SUPPORTED_MODELS = ("llama", "gpt2")


class TokenType(enum.IntEnum):
    """``tokenizer.ggml.token_type`` values (llama.cpp ``llama_token_type``)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


class TokenAttr(enum.IntFlag):
    """llama.cpp ``llama_token_attr`` bits; a token type maps to one of the first seven."""

    UNDEFINED = 0
    UNKNOWN = 1
    UNUSED = 2
    NORMAL = 4
    CONTROL = 8
    USER_DEFINED = 16
    BYTE = 32
    NORMALIZED = 64
    LSTRIP = 128
    RSTRIP = 256
    SINGLE_WORD = 512


# token type -> attribute bit (index = TokenType value)
_TYPE_TO_ATTR = np.array([0, 4, 1, 8, 16, 2, 32], dtype=np.int32)

# Texts llama.cpp recognises when the file does not store the id (checked in this order;
# llama.cpp iterates an unordered map, we take the first text of the list that exists).
_EOT_TEXTS = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>",
)
_AUTO_TEXTS: dict[str, tuple[str, ...]] = {
    "eot": _EOT_TEXTS,
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>",
                "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>",
                "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>",
                "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
_EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
))
_FORCED_USER_DEFINED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")

# GGUF key suffix (tokenizer.ggml.<suffix>_token_id) -> our special-id name
_ID_KEYS = {
    "bos": "bos", "eos": "eos", "eot": "eot", "eom": "eom", "unknown": "unk", "seperator": "sep",
    "padding": "pad", "mask": "mask", "fim_pre": "fim_pre", "fim_suf": "fim_suf",
    "fim_mid": "fim_mid", "fim_pad": "fim_pad", "fim_rep": "fim_rep", "fim_sep": "fim_sep",
    # deprecated spellings of the FIM ids (llama.cpp still reads them)
    "prefix": "fim_pre", "suffix": "fim_suf", "middle": "fim_mid",
}

_BYTE_TOKEN_RE = re.compile(r"<0x([0-9A-Fa-f]{2})>\Z")


@dataclass(slots=True)
class Vocab:
    """Everything the encoders need, read once from metadata (mutable only during load).

    ``attrs`` holds :class:`TokenAttr` bits per id after llama.cpp's post-processing;
    ``special`` maps names (``bos``, ``eos``, ``eot``, ``unk``, ``fim_pad`` ...) to ids.
    """

    model: str
    pre: str
    texts: tuple[str, ...]  # tuples: the garbage collector need not traverse them
    attrs: npt.NDArray[np.int32]
    scores: npt.NDArray[np.float32]
    merges: tuple[str, ...] | None
    special: dict[str, int]
    eog_ids: frozenset[int]
    add_bos: bool
    add_eos: bool
    add_sep: bool
    add_space_prefix: bool
    _text_to_id: dict[str, int] | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.texts)

    @property
    def text_to_id(self) -> dict[str, int]:
        """Text → id, built on first use (the encoders need it; token bytes do not).

        Raises TokenizerError if two ids share a text (llama.cpp refuses such files too).
        """
        if self._text_to_id is None:
            texts = self.texts
            table = dict(zip(texts, range(len(texts))))
            if len(table) != len(texts):
                seen: dict[str, int] = {}
                for i, t in enumerate(texts):
                    if t in seen:
                        raise TokenizerError(
                            f"'tokenizer.ggml.tokens' has duplicate text {t!r} at ids {seen[t]} and {i}"
                        )
                    seen[t] = i
            self._text_to_id = table
        return self._text_to_id

    def has_attr(self, token_id: int, attr: TokenAttr) -> bool:
        return bool(int(self.attrs[token_id]) & attr)

    def compute_token_bytes(self) -> list[bytes]:
        """Raw output bytes of every token (spec §5); ``b""`` for tokens that emit no text.

        NORMAL: SPM ``▁`` → space / byte-level alphabet → bytes; BYTE ``<0xHH>`` → that byte;
        USER_DEFINED → UTF-8 text; CONTROL, UNKNOWN, UNUSED, UNDEFINED → ``b""`` (control
        tokens are listed in ``special_ids`` instead). Costs one pass over the vocabulary.
        """
        attrs = self.attrs
        texts = self.texts
        out: list[bytes] = [b""] * len(texts)
        normal_mask = (attrs & (TokenAttr.CONTROL | TokenAttr.UNKNOWN | TokenAttr.UNUSED)) == 0
        normal_ids = np.nonzero(normal_mask & ((attrs & TokenAttr.NORMAL) != 0))[0].tolist()
        if self.model == "gpt2":
            valid = BYTE_LEVEL_RE.fullmatch
            for i in normal_ids:
                t = texts[i]
                out[i] = (
                    t.translate(BYTE_LEVEL_DECODE_TABLE).encode("latin-1")
                    if valid(t) else t.encode("utf-8")
                )
        else:
            for i in normal_ids:
                out[i] = texts[i].replace("\u2581", " ").encode("utf-8")
        user_ids = np.nonzero(normal_mask & ((attrs & TokenAttr.USER_DEFINED) != 0))[0].tolist()
        for i in user_ids:
            out[i] = texts[i].encode("utf-8")
        byte_ids = np.nonzero(normal_mask & ((attrs & TokenAttr.BYTE) != 0))[0].tolist()
        for i in byte_ids:
            m = _BYTE_TOKEN_RE.match(texts[i])
            if m is None:
                raise TokenizerError(f"byte token {i} has text {texts[i]!r}, expected '<0xHH>'")
            out[i] = bytes((int(m.group(1), 16),))
        return out


def _get(md: Mapping[str, Any], key: str, default: Any = None) -> Any:
    return md.get(key, default)


def _as_array(value: Any, n: int, key: str, dtype: type) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise TokenizerError(
            f"metadata {key!r} has {arr.shape[0] if arr.ndim == 1 else arr.shape} entries, "
            f"expected one per token ({n})"
        )
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TokenizerError(f"metadata {key!r} must be numeric, got dtype {arr.dtype}")
    return arr.astype(dtype, copy=False)


def _flag(md: Mapping[str, Any], key: str, default: bool) -> bool:
    value = md.get(key)
    if value is None:
        return default
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return bool(value)
    raise TokenizerError(f"metadata {key!r} must be a bool, got {type(value).__name__}")


def load_vocab(md: Mapping[str, Any]) -> Vocab:
    """Build a :class:`Vocab` from GGUF metadata (``GGUFFile.metadata``).

    Raises :class:`TokenizerError` naming the key for a missing or malformed entry or an
    unsupported ``tokenizer.ggml.model`` (duplicate texts are reported by ``text_to_id``).
    Costs a few vectorised passes over the vocabulary; no per-token Python work.
    """
    model = _get(md, "tokenizer.ggml.model")
    if model is None:
        raise TokenizerError("metadata has no 'tokenizer.ggml.model'; the file carries no vocabulary")
    if not isinstance(model, str):
        raise TokenizerError(f"'tokenizer.ggml.model' must be a string, got {type(model).__name__}")
    if model not in SUPPORTED_MODELS:
        raise TokenizerError(
            f"tokenizer model {model!r} is not supported (supported: {', '.join(SUPPORTED_MODELS)})"
        )
    texts = _get(md, "tokenizer.ggml.tokens")
    if texts is None:
        raise TokenizerError("metadata has no 'tokenizer.ggml.tokens'")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts[:1]):
        raise TokenizerError("'tokenizer.ggml.tokens' must be an array of strings")
    n = len(texts)
    if n == 0:
        raise TokenizerError("'tokenizer.ggml.tokens' is empty")
    if "" in texts:
        texts = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(texts)]

    raw_scores = _get(md, "tokenizer.ggml.scores")
    scores = (
        np.zeros(n, dtype=np.float32) if raw_scores is None
        else _as_array(raw_scores, n, "tokenizer.ggml.scores", np.float32)
    )
    nan = np.flatnonzero(np.isnan(scores))
    if nan.size:
        raise TokenizerError(f"'tokenizer.ggml.scores' is NaN at id {int(nan[0])}")
    raw_types = _get(md, "tokenizer.ggml.token_type")
    if raw_types is None:
        types = np.full(n, TokenType.NORMAL, dtype=np.int32)
    else:
        types = _as_array(raw_types, n, "tokenizer.ggml.token_type", np.int32)
        bad = np.nonzero((types < 0) | (types > 6))[0]
        if bad.size:
            raise TokenizerError(
                f"'tokenizer.ggml.token_type' has invalid type {int(types[bad[0]])} "
                f"at id {int(bad[0])} (valid: 0..6)"
            )
    attrs = _TYPE_TO_ATTR[types].copy()

    merges = None
    if model == "gpt2":
        merges = _get(md, "tokenizer.ggml.merges")
        if merges is None:
            raise TokenizerError("a 'gpt2' tokenizer needs 'tokenizer.ggml.merges'; it is missing")
        if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
            raise TokenizerError("'tokenizer.ggml.merges' must be an array of strings")

    pre = _get(md, "tokenizer.ggml.pre")
    if pre is None:
        pre = "default"
        if model == "gpt2":  # llama.cpp warns too: old conversions lack the key
            warnings.warn(
                "GGUF has no 'tokenizer.ggml.pre'; using the 'default' pre-tokenizer, which may "
                "not split text the way the model was trained",
                stacklevel=3,
            )
    if not isinstance(pre, str):
        raise TokenizerError(f"'tokenizer.ggml.pre' must be a string, got {type(pre).__name__}")

    # per-model defaults (llama.cpp), then the file's overrides
    if model == "llama":
        special = {"bos": 1, "eos": 2, "unk": 0}
        add_bos, add_space_prefix = True, True
    else:
        special = {"bos": 11, "eos": 11}
        from lexguide.tokenizer.pretokenize import pre_type_adds_bos

        add_bos, add_space_prefix = pre_type_adds_bos(pre), False
    for suffix, name in _ID_KEYS.items():
        value = md.get(f"tokenizer.ggml.{suffix}_token_id")
        if value is None:
            continue
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TokenizerError(
                f"'tokenizer.ggml.{suffix}_token_id' must be an integer, got {value!r}"
            )
        if 0 <= int(value) < n:  # llama.cpp ignores out-of-range ids and keeps the default
            special[name] = int(value)
    special = {k: v for k, v in special.items() if 0 <= v < n}
    add_bos = _flag(md, "tokenizer.ggml.add_bos_token", add_bos)
    add_eos = _flag(md, "tokenizer.ggml.add_eos_token", False)
    add_sep = _flag(md, "tokenizer.ggml.add_sep_token", False)
    add_space_prefix = _flag(md, "tokenizer.ggml.add_space_prefix", add_space_prefix)

    eog = _post_process(texts, attrs, special)
    _strip_rules(md, pre, texts, attrs)
    return Vocab(
        model=model, pre=pre, texts=tuple(texts), attrs=attrs, scores=scores,
        merges=tuple(merges) if merges is not None else None,
        special=special, eog_ids=eog, add_bos=add_bos, add_eos=add_eos, add_sep=add_sep,
        add_space_prefix=add_space_prefix,
    )


_CONTROL = int(TokenAttr.CONTROL)
_USER_DEFINED = int(TokenAttr.USER_DEFINED)
_UNUSED = int(TokenAttr.UNUSED)
_KNOWN_TEXTS = frozenset(
    {t for texts in _AUTO_TEXTS.values() for t in texts} | _EOG_TEXTS | set(_FORCED_USER_DEFINED)
)


def _force_control(attrs: np.ndarray, token_id: int) -> bool:
    """Give ``token_id`` the CONTROL bit as llama.cpp does; refuse for USER_DEFINED (see module doc)."""
    if attrs[token_id] & _USER_DEFINED:
        return False
    attrs[token_id] |= _CONTROL
    return True


def _post_process(texts: list[str], attrs: np.ndarray, special: dict[str, int]) -> frozenset[int]:
    """llama.cpp's load-time fixes: auto-detected ids, UNUSED marks, EOG set. Mutates ``attrs``.

    Only the few texts llama.cpp looks for are located (one set intersection over the
    vocabulary), so no full text → id table is needed at load.
    """
    present = _KNOWN_TEXTS.intersection(texts)
    found = {t: texts.index(t) for t in present}
    for name, candidates in _AUTO_TEXTS.items():
        if name in special:
            continue
        for text in candidates:
            tid = found.get(text)
            if tid is not None and _force_control(attrs, tid):
                special[name] = tid
                break
    control = np.nonzero(attrs & _CONTROL)[0].tolist()
    for tid in control:
        if "unused" in texts[tid]:
            attrs[tid] |= _UNUSED
    eog: set[int] = {special[k] for k in ("fim_pad", "fim_rep", "fim_sep") if k in special}
    for text in _EOG_TEXTS:
        tid = found.get(text)
        if tid is not None and _force_control(attrs, tid):
            eog.add(tid)
    for text in _FORCED_USER_DEFINED:
        tid = found.get(text)
        if tid is not None:
            attrs[tid] = _USER_DEFINED
    eog.update(special[k] for k in ("eos", "eot", "eom") if k in special)
    by_text = {texts[t]: t for t in eog}
    if "<|end|>" in by_text and (
        ("<|return|>" in by_text and "<|call|>" in by_text)
        or ("<|calls|>" in by_text and "<|flush|>" in by_text)
    ):
        end_id = by_text["<|end|>"]
        eog.discard(end_id)
        attrs[end_id] = _USER_DEFINED
    if "<|tool_response>" in by_text and "</s>" in by_text:
        s_id = by_text["</s>"]
        eog.discard(s_id)
        attrs[s_id] = int(TokenAttr.NORMAL)
    return frozenset(eog)


_ASCII_STRIP_WORDS = ("<mask>", "[MASK]", "</s>", "<unk>", "<s>", "<|endoftext|>")


def _strip_rules(md: Mapping[str, Any], pre: str, texts: list[str], attrs: np.ndarray) -> None:
    """llama.cpp's per-model LSTRIP/RSTRIP attributes (GGUF cannot store them). Mutates ``attrs``.

    Jina v2 vocabularies: ``<mask>`` swallows whitespace on its left; Phi-3: every special or
    added token except ``<unk> <s> <|endoftext|>`` swallows whitespace on its right.
    """
    name = str(md.get("general.name", "")).lower()
    arch = str(md.get("general.architecture", ""))
    jina = any(k in pre for k in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        k in arch for k in ("nomic-bert-moe", "jina-bert-v3")
    )
    phi3 = "phi-3" in name or "phi3" in name
    if not (jina or phi3 or "modern-bert" in name):
        return
    found = {t: texts.index(t) for t in set(_ASCII_STRIP_WORDS).intersection(texts)}
    lstrip, rstrip = int(TokenAttr.LSTRIP), int(TokenAttr.RSTRIP)
    if jina:
        if "<mask>" in found:
            attrs[found["<mask>"]] |= lstrip
    elif phi3:
        candidates = (attrs & (_CONTROL | _USER_DEFINED | int(TokenAttr.UNKNOWN))) != 0
        attrs[candidates] |= rstrip
        if "</s>" in found:
            attrs[found["</s>"]] |= rstrip
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            if text in found:
                attrs[found[text]] &= ~rstrip
    elif "modern-bert" in name and "[MASK]" in found:
        attrs[found["[MASK]"]] |= lstrip
