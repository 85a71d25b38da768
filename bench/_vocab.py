"""Real vocabularies for the engine benchmarks and tests: raw token bytes, EOG and control ids.

* ``smollm2`` (49,152 tokens, byte-level BPE) and ``gemma3`` (262,144 tokens, SentencePiece) are
  read from the installed model GGUFs with :meth:`lexguide.Tokenizer.from_gguf`; their ``encode``
  is lexguide's own tokenizer.
* ``llama3`` (128,256 tokens) is read from the data files of the ``quicktok-v1`` package (a test
  extra in pyproject.toml; ranked file: u32 count, then per entry u16 length, bytes, u32 rank;
  ``.special``: u32 count, then u32 id, u16 length, bytes). Its ``encode`` uses quicktok's BPE when importable (only
  to produce the token sequences a benchmark forces), else :class:`VocabError`.

A :class:`Vocab` pickles without its encoder, so spawned benchmark workers receive only the data.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["VOCABS", "Vocab", "VocabError", "load_vocab", "peer_token_bytes"]

VOCABS = ("smollm2", "gemma3", "llama3")


class VocabError(RuntimeError):
    """A vocabulary cannot be loaded (package missing, malformed data file)."""


@dataclass
class Vocab:
    """One tokenizer's vocabulary as the engine sees it.

    ``token_bytes[i]`` is the exact output of token ``i`` (``b""`` for tokens without text);
    ``eos_ids[0]`` is the primary end-of-sequence id, all of ``eos_ids`` end a generation;
    ``special_ids`` are control tokens (never grammar text); ``special_names`` maps their text
    (``"<|im_end|>"``) to ids for the Lark ``<|name|>`` syntax.
    """

    name: str
    token_bytes: list[bytes]
    eos_ids: tuple[int, ...]
    special_ids: tuple[int, ...]
    special_names: dict[str, int]
    source: str
    encoder_spec: tuple[str, str] | None = None  # ("gguf", path) or ("quicktok", encoding)
    _encoder: Callable[[str], list[int]] | None = field(default=None, repr=False)

    @property
    def n_vocab(self) -> int:
        return len(self.token_bytes)

    @property
    def eos_id(self) -> int:
        return self.eos_ids[0]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without BOS/special parsing (the model's own tokenization)."""
        if self._encoder is None:
            self._encoder = _make_encoder(self.encoder_spec)
        return list(self._encoder(text))

    def decode_bytes(self, ids: list[int]) -> bytes:
        return b"".join(self.token_bytes[i] for i in ids)

    def tokenizer_info(self) -> Any:
        """A :class:`lexguide.TokenizerInfo` for this vocabulary (the engine's preprocessing)."""
        from lexguide import TokenizerInfo

        return TokenizerInfo.from_token_bytes(
            self.token_bytes, self.eos_ids, self.special_ids, special_names=self.special_names
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_encoder"] = None  # rebuilt from encoder_spec on first use
        return state

    def meta(self) -> dict[str, Any]:
        return {"name": self.name, "n_vocab": self.n_vocab, "eos_ids": list(self.eos_ids),
                "n_special": len(self.special_ids), "source": self.source}


def peer_token_bytes(vocab: Vocab) -> tuple[list[bytes], list[int]]:
    """Token bytes and special ids for peer engines (llguidance, xgrammar).

    Control tokens and tokens without text get a unique placeholder and are listed as special,
    so no peer can match them as grammar text.
    """
    specials = set(vocab.special_ids) | set(vocab.eos_ids)
    out = []
    for i, b in enumerate(vocab.token_bytes):
        if i in specials or not b:
            specials.add(i)
            out.append(b"<|lexguide_special_%d|>" % i)
        else:
            out.append(b)
    return out, sorted(specials)


# -- GGUF models (lexguide's own tokenizer) -------------------------------------------------
def _gguf_vocab(name: str, path: Path) -> Vocab:
    try:
        from lexguide import Tokenizer
    except (ImportError, AttributeError) as e:  # the tokenizer layer is not installed
        raise VocabError(f"lexguide.Tokenizer unavailable: {e}") from e
    tok = Tokenizer.from_gguf(str(path))
    specials = sorted(int(i) for i in tok.special_ids)
    eog = sorted(int(i) for i in tok.eog_ids)
    eos = int(tok.eos_id)
    eos_ids = (eos, *[i for i in eog if i != eos])
    names = {tok.token_text(i): i for i in specials}

    return Vocab(name, list(tok.all_token_bytes()), eos_ids, tuple(specials), names, str(path),
                 ("gguf", str(path)), _gguf_encoder(tok))


def _gguf_encoder(tok: Any) -> Callable[[str], list[int]]:
    return lambda text: tok.encode(text, add_special=False)


def _make_encoder(spec: tuple[str, str] | None) -> Callable[[str], list[int]]:
    """Rebuild an encoder (e.g. in a spawned worker) from its picklable description."""
    if spec is None:
        raise VocabError("this vocabulary has no encoder")
    kind, arg = spec
    if kind == "gguf":
        from lexguide import Tokenizer

        return _gguf_encoder(Tokenizer.from_gguf(arg))
    if kind == "quicktok":
        try:
            import quicktok  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError as e:
            raise VocabError(f"{arg} encode needs quicktok: {e}") from e
        return quicktok.get_encoding(arg).encode_ordinary
    raise VocabError(f"unknown encoder kind {kind!r}")


def _model_path(name: str) -> Path:
    from lexguide.model_files import ModelNotInstalled, gemma3_path, smollm2_path

    try:
        return smollm2_path() if name == "smollm2" else gemma3_path()
    except ModelNotInstalled as e:
        raise VocabError(str(e)) from e


# -- Llama-3 from quicktok data files -------------------------------------------------------
def _quicktok_dir() -> Path:
    try:
        dist = importlib.metadata.distribution("quicktok-v1")
    except importlib.metadata.PackageNotFoundError:
        raise VocabError("quicktok-v1 is not installed; run: pip install quicktok-v1==0.4.0") from None
    for f in dist.files or []:
        if f.name == "llama3.vocab":
            return Path(str(f.locate())).parent
    raise VocabError("quicktok-v1 has no data/llama3.vocab")


def _read_ranked(path: Path) -> dict[int, bytes]:
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    off, out = 4, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<H", data, off)
        off += 2
        tok = data[off:off + n]
        off += n
        (rank,) = struct.unpack_from("<I", data, off)
        off += 4
        out[rank] = tok
    if off != len(data):
        raise VocabError(f"{path}: {len(data) - off} trailing bytes after {count} entries")
    return out


def _read_special(path: Path) -> dict[int, bytes]:
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    off, out = 4, {}
    for _ in range(count):
        tid, n = struct.unpack_from("<IH", data, off)
        off += 6
        out[tid] = data[off:off + n]
        off += n
    if off != len(data):
        raise VocabError(f"{path}: {len(data) - off} trailing bytes after {count} entries")
    return out


def _llama3_vocab() -> Vocab:
    folder = _quicktok_dir()
    ranked = _read_ranked(folder / "llama3.vocab")
    special = _read_special(folder / "llama3.special")
    n = max(max(ranked), max(special)) + 1
    token_bytes = [b""] * n
    for i, b in ranked.items():
        token_bytes[i] = b
    names = {b.decode("utf-8"): i for i, b in special.items()}
    eos_ids = tuple(names[t] for t in ("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>") if t in names)

    return Vocab("llama3", token_bytes, eos_ids, tuple(sorted(special)), names,
                 str(folder / "llama3.vocab"), ("quicktok", "llama3"))


def load_vocab(name: str) -> Vocab:
    """Load ``smollm2``, ``gemma3``, ``llama3`` or ``gguf:PATH``. Raises :class:`VocabError`."""
    if name in ("smollm2", "gemma3"):
        return _gguf_vocab(name, _model_path(name))
    if name == "llama3":
        return _llama3_vocab()
    if name.startswith("gguf:"):
        path = Path(name[5:])
        if not path.exists():
            raise VocabError(f"no such GGUF file: {path}")
        return _gguf_vocab(os.path.basename(path), path)
    raise VocabError(f"unknown vocabulary {name!r}; expected one of {', '.join(VOCABS)} or gguf:PATH")


def instance_ids(vocab: Vocab, make_instance: Callable[[Any, str], tuple[bool, Any]], schema: Any,
                 key: str) -> tuple[str, list[int]] | None:
    """One valid instance of ``schema`` (from ``make_instance``, e.g. bench/_instances.py's),
    as compact JSON and in the vocabulary's own encoding; None when there is none, when its
    tokens do not spell it back, or past 1,500 tokens."""
    ok, inst = make_instance(schema, key)
    if not ok:
        return None
    text = json.dumps(inst, separators=(",", ":"), ensure_ascii=False)
    ids = vocab.encode(text)
    if b"".join(vocab.token_bytes[i] for i in ids) != text.encode() or len(ids) > 1500:
        return None
    return text, ids
