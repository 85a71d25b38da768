"""The on-disk cache of the core's preprocessed vocabulary (docs/engine.md, "Vocabulary cache").

Building the token tries and JSON-string slices of a 262k vocabulary takes ~0.2 s; loading them
back from a flat binary file (``csrc/engine/vocab.cc``) takes a few milliseconds, hashing the
token bytes for the key included.

* Key: SHA-256 of every token's bytes (with their boundaries), the EOS ids and the control ids.
  It names the file (``<key hex>.vocab``) and is stored in its header beside the core's ABI
  string (format version, a hash of the sources that build the tables, the limits they obey).
* Location: ``cache=`` of :class:`~lexguide.TokenizerInfo` (a directory), else
  ``$LEXGUIDE_VOCAB_CACHE``, else ``$LEXGUIDE_CACHE/vocab``, else ``$XDG_CACHE_HOME/lexguide/vocab``,
  else ``~/.cache/lexguide/vocab``. ``cache=False`` or ``LEXGUIDE_VOCAB_CACHE=0`` turns it off.
  By default only vocabularies of at least :data:`MIN_CACHED_TOKENS` tokens use it (smaller ones
  build faster than a file loads); ``cache=True`` or a directory caches any size.
* Safety: the core checks a file completely before using it (sizes against the file, a checksum
  per section and for the header, magic, byte order, format, ABI, key, vocabulary size, and the
  tries' structure, so that no content can make a walk leave its arrays); a file that fails any
  check is rebuilt and rewritten. Files are written to a temporary name in the same directory and
  renamed into place, so readers (other processes included) see a whole file or none. A directory
  that cannot be created or written leaves the vocabulary built and uncached.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lexguide import _core

__all__ = ["MIN_CACHED_TOKENS", "cache_folder", "load_or_build", "vocab_key"]

MIN_CACHED_TOKENS = 8192
_OFF = ("0", "off", "false", "no", "none")
log = logging.getLogger("lexguide.engine")

CacheSetting = bool | str | os.PathLike | None


def cache_folder(cache: CacheSetting = None) -> Path | None:
    """The directory of the vocabulary cache for a ``cache=`` setting, or None when it is off.

    An explicit directory or ``cache=True`` wins over ``LEXGUIDE_VOCAB_CACHE=0``; the default
    (``None``) obeys it."""
    if cache is False:
        return None
    if cache is not None and cache is not True:
        return Path(os.fspath(cache))
    env = os.environ.get("LEXGUIDE_VOCAB_CACHE")
    if env is not None and env.strip().lower() in _OFF + ("",):
        if cache is None:
            return None
        env = None
    if env:
        return Path(env)
    base = os.environ.get("LEXGUIDE_CACHE")
    if base:
        return Path(base) / "vocab"
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return root / "lexguide" / "vocab"


def vocab_key(tokens: _core.TokenBytes, eos_ids: Sequence[int], special_ids: Sequence[int]) -> bytes:
    """SHA-256 of the tokens' bytes and boundaries, the EOS ids and the control ids (32 bytes)."""
    h = hashlib.sha256(f"lexguide-vocab {len(tokens)} {len(eos_ids)} {len(special_ids)}\n".encode())
    h.update(np.asarray(eos_ids, dtype="<u4").tobytes())
    h.update(np.asarray(special_ids, dtype="<u4").tobytes())
    h.update(tokens.offsets)
    h.update(tokens.blob)
    return h.digest()


def load_or_build(
    tokens: _core.TokenBytes, eos_ids: list[int], special_ids: list[int], cache: CacheSetting = None
) -> tuple[_core.Vocab, Path | None, str]:
    """The core's vocabulary for these tokens: loaded from the cache when a valid file is there,
    else built (and written to the cache when it is on).

    Returns ``(vocab, file, status)``; status is ``"off"`` (no cache for this vocabulary),
    ``"loaded"``, ``"written"`` (built, then stored) or ``"unwritable"`` (built; the file could
    not be written: the reason is logged at debug level on ``lexguide.engine``)."""
    folder = cache_folder(cache)
    if folder is None or (cache is None and len(tokens) < MIN_CACHED_TOKENS):
        return _core.Vocab(tokens, eos_ids, special_ids), None, "off"
    key = vocab_key(tokens, eos_ids, special_ids)
    path = folder / f"{key.hex()}.vocab"
    try:
        return _core.Vocab.load(str(path), tokens, eos_ids, special_ids, key), path, "loaded"
    except _core.VocabFileError as e:
        if path.exists():
            log.debug("vocabulary cache file unusable, rebuilding: %s", e)
    vocab = _core.Vocab(tokens, eos_ids, special_ids)
    return vocab, path, "written" if _store(vocab, path, key) else "unwritable"


def _store(vocab: _core.Vocab, path: Path, key: bytes) -> bool:
    """Write the file under a temporary name beside it, then rename it into place (atomic: a
    reader sees the old file, the new one or none; two writers each rename a whole file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    except OSError as e:
        log.debug("vocabulary cache directory %s unusable: %s", path.parent, e)
        return False
    try:
        try:
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        vocab.save(tmp, key)
        os.replace(tmp, path)
        return True
    except (OSError, _core.VocabFileError) as e:
        log.debug("vocabulary cache file %s not written: %s", path, e)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
