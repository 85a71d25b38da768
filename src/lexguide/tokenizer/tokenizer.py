"""``Tokenizer``: encode/decode and raw token bytes from a GGUF vocabulary alone.

Behaviour follows llama.cpp (``llama_vocab::impl::tokenize`` / ``token_to_piece``), spec
``tokenizers.md``: special-token partitioning (§2), then SPM (§3) or byte-level BPE (§4) on the
remaining text fragments, then BOS/EOS according to the file's flags.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from lexguide.errors import TokenizerError
from lexguide.tokenizer.bpe import ByteLevelBPE
from lexguide.tokenizer.pretokenize import check_pre_type
from lexguide.tokenizer.special import SpecialMatcher
from lexguide.tokenizer.spm import SentencePieceBPE
from lexguide.tokenizer.vocab import TokenAttr, Vocab, load_vocab

__all__ = ["Tokenizer"]

_PARSE_ALWAYS = int(TokenAttr.USER_DEFINED)
_PARSE_SPECIAL = int(TokenAttr.CONTROL | TokenAttr.UNKNOWN)


class Tokenizer:
    """A tokenizer built from ``tokenizer.ggml.*`` metadata (models ``llama`` and ``gpt2``).

    Build with :meth:`from_gguf` (a path or an open ``GGUFFile``) or :meth:`from_metadata`.
    Instances are immutable apart from internal caches and may be shared between threads.

    Attributes
    ----------
    vocab_size : number of tokens (ids are ``0 .. vocab_size-1``).
    bos_id, eos_id, eot_id : special ids, ``None`` when the vocabulary has none.
    eog_ids : every end-of-generation id (EOS, EOT, EOM, ``<|im_end|>``, ``<end_of_turn>`` ...).
    special_ids : control/unknown tokens: they emit no text and no text ever encodes to them
        unless ``parse_special=True``.
    """

    def __init__(self, vocab: Vocab) -> None:
        self._vocab = vocab
        self._encoder: ByteLevelBPE | SentencePieceBPE | None = None  # built on first encode
        if vocab.model == "gpt2":
            check_pre_type(vocab.pre)  # an unsupported pre-tokenizer fails at load, not later
        attrs = vocab.attrs
        texts = vocab.texts
        self.vocab_size: int = vocab.n_tokens
        self.model: str = vocab.model
        self.pre: str = vocab.pre
        self.bos_id: int | None = vocab.special.get("bos")
        self.eos_id: int | None = vocab.special.get("eos")
        self.eot_id: int | None = vocab.special.get("eot")
        self.eog_ids: frozenset[int] = vocab.eog_ids
        self.add_bos: bool = vocab.add_bos
        self.add_eos: bool = vocab.add_eos
        self.add_space_prefix: bool = vocab.add_space_prefix
        self.special_ids: frozenset[int] = frozenset(
            (attrs & _PARSE_SPECIAL).nonzero()[0].tolist()
        )
        # partition candidates (spec §2): USER_DEFINED always, CONTROL/UNKNOWN when parsing
        cand = (attrs & (_PARSE_ALWAYS | _PARSE_SPECIAL)).nonzero()[0].tolist()
        lstrip = frozenset((attrs & int(TokenAttr.LSTRIP)).nonzero()[0].tolist())
        rstrip = frozenset((attrs & int(TokenAttr.RSTRIP)).nonzero()[0].tolist())
        self._special_all = SpecialMatcher([(texts[i], i) for i in cand], lstrip, rstrip)
        self._special_user = SpecialMatcher(
            [(texts[i], i) for i in cand if not attrs[i] & _PARSE_SPECIAL], lstrip, rstrip
        )
        self._token_bytes: tuple[bytes, ...] | None = None

    # ----------------------------------------------------------------------------- construction
    @classmethod
    def from_gguf(cls, source: str | os.PathLike[str] | Any) -> Tokenizer:
        """Build from a GGUF file path or an already open ``lexguide.gguf.GGUFFile``.

        Reads only metadata (no tensor data). Raises :class:`TokenizerError` for a missing or
        unsupported vocabulary (the GGUF reader raises ``GGUFError`` for a malformed file).
        """
        metadata = getattr(source, "metadata", None)
        if metadata is not None:
            return cls.from_metadata(metadata)
        from lexguide.gguf import open_gguf

        with open_gguf(source) as gguf:
            return cls.from_metadata(gguf.metadata)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> Tokenizer:
        """Build from a GGUF metadata mapping (keys ``tokenizer.ggml.*``); see ``load_vocab``."""
        return cls(load_vocab(metadata))

    # ----------------------------------------------------------------------------- token table
    def token_text(self, token_id: int) -> str:
        """The vocabulary string of ``token_id`` (e.g. ``"Ġworld"``, ``"▁world"``, ``"<0x0A>"``)."""
        return self._vocab.texts[self._check_id(token_id)]

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes ``token_id`` contributes to decoded output; ``b""`` for control,
        unknown and unused tokens. Raises TokenizerError for an id out of range."""
        return self._bytes()[self._check_id(token_id)]

    def all_token_bytes(self) -> list[bytes]:
        """``token_bytes`` of every id (index = id), as a new list; computed once (O(vocab))."""
        return list(self._bytes())

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is a control/unknown token (in ``special_ids``)."""
        return self._check_id(token_id) in self.special_ids

    def _bytes(self) -> tuple[bytes, ...]:
        if self._token_bytes is None:
            # a tuple of bytes is untracked by the garbage collector; a 262k-entry list would
            # be traversed by every full collection (~5 ms each)
            self._token_bytes = tuple(self._vocab.compute_token_bytes())
        return self._token_bytes

    def _check_id(self, token_id: Any) -> int:
        if isinstance(token_id, bool) or not hasattr(token_id, "__index__"):
            raise TokenizerError(f"token id must be an integer, got {token_id!r}")
        tid = int(token_id)
        if not 0 <= tid < self.vocab_size:
            raise TokenizerError(f"token id {tid} is out of range (vocabulary size {self.vocab_size})")
        return tid

    # ----------------------------------------------------------------------------- encode
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``, exactly as llama.cpp's ``llama_tokenize``.

        ``add_special`` adds BOS/EOS when the vocabulary's ``add_bos``/``add_eos`` flags say so.
        ``parse_special`` recognises control-token text such as ``<|im_start|>``; plain-text added
        tokens (USER_DEFINED, e.g. Gemma's newline runs) are always recognised.
        Raises TokenizerError if ``text`` is not a ``str`` or holds a lone surrogate (not UTF-8
        encodable). Cost: linear in the text plus one merge per new word (cached per word).
        """
        if not isinstance(text, str):
            raise TokenizerError(f"encode expects str, got {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise TokenizerError(
                f"text is not valid Unicode at character {e.start}: lone surrogate "
                f"{text[e.start]!r} cannot be encoded as UTF-8"
            ) from None
        out: list[int] = []
        bos = self.bos_id
        if add_special and self.add_bos and bos is not None:
            out.append(bos)
        matcher = self._special_all if parse_special else self._special_user
        fragments = matcher.partition(text) if text else []
        encoder = self._encoder
        if encoder is None:
            vocab = self._vocab
            encoder = ByteLevelBPE(vocab) if vocab.model == "gpt2" else SentencePieceBPE(vocab)
            self._encoder = encoder
        encode_text = encoder.encode_text
        if self.model == "llama":
            prev_special = True
            prefix = self.add_space_prefix
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                    prev_special = True
                else:
                    encode_text(" " + frag if prefix and prev_special else frag, out)
                    prev_special = False
        else:
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                else:
                    encode_text(frag, out)
        if add_special and self.add_eos and self.eos_id is not None:
            out.append(self.eos_id)
        return out

    # ----------------------------------------------------------------------------- decode
    def decode_bytes(self, ids: Iterable[int], strip_space_prefix: bool = True) -> bytes:
        """Concatenated ``token_bytes`` of ``ids``.

        When the vocabulary adds a space prefix (SPM ``add_space_prefix``) and
        ``strip_space_prefix`` is true, one leading space is removed from the first
        text-producing token — the space ``encode`` added. Control tokens emit nothing.
        Raises TokenizerError naming the position of an invalid id.
        """
        table = self._bytes()
        n = self.vocab_size
        parts: list[bytes] = []
        strip = strip_space_prefix and self.add_space_prefix
        for pos, tid in enumerate(ids):
            if isinstance(tid, bool) or not hasattr(tid, "__index__"):
                raise TokenizerError(f"ids[{pos}] is not an integer token id: {tid!r}")
            t = int(tid)
            if not 0 <= t < n:
                raise TokenizerError(f"ids[{pos}] = {t} is out of range (vocabulary size {n})")
            b = table[t]
            if strip and b:
                strip = False
                if b[:1] == b" ":
                    b = b[1:]
            parts.append(b)
        return b"".join(parts)

    def decode(self, ids: Iterable[int], strip_space_prefix: bool = True) -> str:
        """Text of ``ids``: ``decode_bytes`` decoded as UTF-8 with invalid sequences replaced by
        U+FFFD (a token sequence may end inside a multi-byte character; use ``decode_bytes`` to
        stream). Unlike llama.cpp's ``detokenize`` no space clean-up (``" ,"`` → ``","``) is
        applied, so ``decode(encode(s)) == s`` for every ``s`` — except, with SPM
        ``add_space_prefix``, the spaces ``encode`` inserts after special tokens inside the text.
        Raises TokenizerError for invalid ids."""
        return self.decode_bytes(ids, strip_space_prefix).decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return (
            f"Tokenizer(model={self.model!r}, pre={self.pre!r}, vocab_size={self.vocab_size}, "
            f"bos_id={self.bos_id}, eos_id={self.eos_id}, eog_ids={sorted(self.eog_ids)})"
        )
