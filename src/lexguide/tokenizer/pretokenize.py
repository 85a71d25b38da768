"""Pre-tokenizer splits of byte-level BPE vocabularies, chosen by ``tokenizer.ggml.pre``.

Source: llama.cpp ``llama-vocab.cpp`` (``llm_tokenizer_bpe`` regex lists) and ``unicode.cpp``
(``unicode_regex_split``); spec §4.2. A pre-tokenizer is a *list* of regexes applied one after
the other: each regex re-splits every current piece, and both its matches and the unmatched
stretches between them become pieces (a partition of the text; nothing is dropped).

The regexes run on the stdlib ``re`` module with Unicode classes built from stored code-point
ranges (:mod:`lexguide.tokenizer.unicode_classes`), so no third-party regex engine is needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

from lexguide.errors import TokenizerError
from lexguide.tokenizer.unicode_classes import char_class

__all__ = [
    "SUPPORTED_PRE_TYPES",
    "check_pre_type",
    "pre_type_adds_bos",
    "pre_type_ignores_merges",
    "pretokenizer_for",
]

Splitter = Callable[[str], list[str]]

# pre name -> (regex list name, ignore_merges, add_bos default)
_PRE_TYPES: dict[str, tuple[str, bool, bool]] = {}
for _name in ("default",):
    _PRE_TYPES[_name] = ("default", False, False)
for _name in (
    "gpt-2", "phi-2", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
    "jina-v2-code", "gigachat", "mellum", "modern-bert", "exaone4", "roberta-bpe", "a.x-4.0", "mpt",
    "olmo", "jais",
):
    _PRE_TYPES[_name] = ("gpt2", False, False)
for _name in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
              "lfm2"):
    _PRE_TYPES[_name] = ("llama3", True, True)
for _name in ("dbrx", "smaug-bpe"):
    _PRE_TYPES[_name] = ("llama3", False, False)
for _name in ("qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2", "hunyuan"):
    _PRE_TYPES[_name] = ("qwen2", False, False)
for _name in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"):
    _PRE_TYPES[_name] = ("smollm", False, False)
_PRE_TYPES["falcon"] = ("falcon", False, False)

SUPPORTED_PRE_TYPES: tuple[str, ...] = tuple(sorted(_PRE_TYPES))


def _lookup(pre: str) -> tuple[str, bool, bool]:
    entry = _PRE_TYPES.get(pre)
    if entry is None:
        raise TokenizerError(
            f"pre-tokenizer {pre!r} ('tokenizer.ggml.pre') is not supported; supported: "
            + ", ".join(SUPPORTED_PRE_TYPES)
        )
    return entry


def check_pre_type(pre: str) -> None:
    """Raise TokenizerError if ``pre`` is not a supported pre-tokenizer (cheap, compiles nothing)."""
    _lookup(pre)


def pre_type_adds_bos(pre: str) -> bool:
    """llama.cpp's default for ``add_bos`` under this pre type (before the GGUF flag)."""
    return _lookup(pre)[2]


def pre_type_ignores_merges(pre: str) -> bool:
    """Whether a whole piece that is a vocabulary token is emitted without merging (Llama 3)."""
    return _lookup(pre)[1]


@cache
def _patterns(name: str) -> list[re.Pattern[str]]:
    """Compile one regex list, once per process (~0.1 s: its classes hold ~1000 ranges)."""
    L = char_class("L")
    N = char_class("N")
    s = char_class("s")
    S = char_class("s", negate=True)
    not_sLN = char_class("s", "L", "N", negate=True)
    not_crLN = char_class("L", "N", negate=True, extra="\\r\\n")
    gpt2 = (
        rf"'s|'t|'re|'ve|'m|'ll|'d| ?{L}+| ?{N}+| ?{not_sLN}+|{s}+(?!{S})|{s}+"
    )

    def llama3(digits: str) -> str:
        return (
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
            rf"|{not_crLN}?{L}+|{N}{digits}| ?{not_sLN}+[\r\n]*|{s}*[\r\n]+|{s}+(?!{S})|{s}+"
        )

    # smollm's two-step list (isolate each digit, then GPT-2 on the stretches between digits)
    # as one total regex: digits are single pieces, no alternative may consume a digit, and
    # "\s+(?!\S)" treats a following digit like the end of its stretch
    not_sN = char_class("s", "N", negate=True)
    smollm = (
        rf"'s|'t|'re|'ve|'m|'ll|'d| ?{L}+|{N}| ?{not_sLN}+|{s}+(?!{not_sN})|{s}+"
    )
    punct = char_class("P", extra=r"\$\+<=>\^~\|") + "+"
    lists = {
        "smollm_fused": [smollm],
        "default": [punct, gpt2, f"{N}+", "[0-9][0-9][0-9]"],
        "gpt2": [gpt2],
        "llama3": [llama3("{1,3}")],
        "qwen2": [llama3("")],
        "smollm": [N, gpt2],
        "falcon": [punct, gpt2, "[0-9][0-9][0-9]"],
    }
    return [re.compile(p) for p in lists[name]]


def _resplit(pieces: list[str], rx: re.Pattern[str]) -> list[str]:
    out: list[str] = []
    append = out.append
    for piece in pieces:
        pos = 0
        for m in rx.finditer(piece):
            start, end = m.span()
            if start == end:
                continue
            if start > pos:
                append(piece[pos:start])
            append(piece[start:end])
            pos = end
        if pos < len(piece):
            append(piece[pos:])
    return out


def pretokenizer_for(pre: str, fused: bool = True) -> Splitter:
    """The split function for a ``tokenizer.ggml.pre`` name; raises TokenizerError if unknown.

    The returned function is pure: ``split(text) -> list[str]`` with ``"".join(result) == text``.
    ``fused=False`` applies llama.cpp's regex list literally (tests compare both forms).
    """
    name = _lookup(pre)[0]
    rxs = _patterns(f"{name}_fused" if fused and name == "smollm" else name)
    if len(rxs) == 1:
        # these single patterns are total (every character is matched), so findall partitions
        return rxs[0].findall

    def split(text: str) -> list[str]:
        pieces = [text]
        for rx in rxs:
            pieces = _resplit(pieces, rx)
        return pieces

    return split
