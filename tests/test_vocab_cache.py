"""The on-disk vocabulary cache: a loaded file equals a fresh build (tables and masks), every
damaged, foreign or stale file is detected and rebuilt, the native loader survives any bytes,
opt-outs and unusable folders work, concurrent writers leave one whole file."""

from __future__ import annotations

import itertools
import os
import random
import struct
import threading

import numpy as np
import pytest

from lexguide import Grammar, LexguideError, Matcher, TokenizerError, TokenizerInfo, _core
from lexguide.engine import vocab_cache

ALPHABET = b'ab{}":, 0\\\xc3\xa9'


def _vocab(seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    toks = [b"<eos>", b"<ctl>", b""]
    for n in (1, 2):
        toks += [bytes(p) for p in itertools.product(ALPHABET, repeat=n)]
    toks += [bytes(rng.choice(ALPHABET) for _ in range(rng.randint(3, 14))) for _ in range(300)]
    toks += [b"ab" * 20, b"x" * 40]  # longer than every slice level but the last
    return toks


VOCAB = _vocab()
EOS, SPECIAL = [0], [1]
GRAMMARS = [
    Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"},
                                                               "b": {"type": "integer"}},
                              "required": ["a"]}),
    Grammar.from_lark('start: "{" item ("," item)* "}"\nitem: /[ab]+/ | ESC\nESC: /"(\\\\.|[^"\\\\])*"/'),
    Grammar.from_regex(r'(ab|é)+[0-9]{0,3}'),
]

# FileHeader of csrc/engine/vocab.cc
HEADER = struct.Struct("<8sIIII96s32sQQ17Q17QQ")
N_SECTIONS = 17


def _info(cache, vocab=VOCAB):
    return TokenizerInfo.from_token_bytes(vocab, EOS, SPECIAL, cache=cache)


def _masks_along(info: TokenizerInfo, grammar: Grammar, seed: int, steps: int = 12,
                 tolerant: bool = False) -> list[bytes]:
    """Masks along a walk that takes a pseudo-random allowed token each step (``tolerant``: a
    token the parser then refuses ends the walk; masks of a forged vocabulary may be wrong)."""
    rng = random.Random(seed)
    m, out = Matcher(grammar, info), []
    for _ in range(steps):
        mask = m.compute_mask()
        out.append(mask.tobytes())
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: info.vocab_size]
        allowed = [int(i) for i in np.nonzero(bits)[0] if int(i) not in info.eos_ids]
        if not allowed:
            break
        try:
            m.consume(rng.choice(allowed))
        except LexguideError:
            if not tolerant:
                raise
            break
    return out


# -- XXH64 (the files' checksum), to craft files whose checksums hold -----------------------
_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                           0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
_M = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, v):
    return _rotl((acc + v * _P2) & _M, 31) * _P1 & _M


def xxh64(data: bytes) -> int:
    n, p = len(data), 0
    if n >= 32:
        v = [(_P1 + _P2) & _M, _P2, 0, (-_P1) & _M]
        words = np.frombuffer(data[: n - n % 32], dtype="<u8").tolist()
        for i in range(0, len(words), 4):
            v = [_round(v[j], words[i + j]) for j in range(4)]
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for x in v:
            h = ((h ^ _round(0, x)) * _P1 + _P4) & _M
        p = n - n % 32
    else:
        h = _P5
    h = (h + n) & _M
    while p + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[p:p + 8], "little")), 27) * _P1 + _P4) & _M
        p += 8
    if p + 4 <= n:
        h = (_rotl(h ^ (int.from_bytes(data[p:p + 4], "little") * _P1 & _M), 23) * _P2 + _P3) & _M
        p += 4
    while p < n:
        h = (_rotl(h ^ (data[p] * _P5 & _M), 11) * _P1) & _M
        p += 1
    h ^= h >> 33
    h = h * _P2 & _M
    h ^= h >> 29
    h = h * _P3 & _M
    return h ^ (h >> 32)


def test_xxh64_reference_values():
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc") == 0x44BC2CF5AD770999
    assert xxh64(b"1234") == 0xD8316E61D84F6BA4
    assert xxh64(b"12345678") == 0xD2D02F08CF7CFD4A
    assert xxh64(b"123456789012345") == 0xC377D78ADE001A3C
    assert xxh64(b"1234567890123456") == 0xB61C33DC6C59F270
    assert xxh64(bytes(range(100))) == 0x6AC1E58032166597


def test_core_checksums_are_xxh64(written):
    """Re-sealing an unchanged file with the reference checksum gives back the same bytes."""
    info, path, data = written
    assert CacheFile(data).seal() == data


class CacheFile:
    """A cache file split into header fields and sections, re-sealed with valid checksums."""

    def __init__(self, data: bytes):
        self.fields = list(HEADER.unpack_from(data))
        sizes = self.fields[9:9 + N_SECTIONS]
        self.sections, at = [], HEADER.size
        for n in sizes:
            self.sections.append(bytearray(data[at:at + n]))
            at += n

    def seal(self) -> bytes:
        f = self.fields
        f[9:9 + N_SECTIONS] = [len(s) for s in self.sections]
        f[9 + N_SECTIONS:9 + 2 * N_SECTIONS] = [xxh64(bytes(s)) for s in self.sections]
        f[-1] = xxh64(HEADER.pack(*f)[:-8])
        return HEADER.pack(*f) + b"".join(bytes(s) for s in self.sections)


@pytest.fixture
def written(tmp_path):
    info = _info(tmp_path)
    assert info.cache_status == "written"
    return info, info.cache_file, info.cache_file.read_bytes()


def _load(path):
    tb = _core.TokenBytes(tuple(VOCAB))
    key = vocab_cache.vocab_key(tb, EOS, SPECIAL)
    return _core.Vocab.load(str(path), tb, EOS, SPECIAL, key)


# -- round trip ------------------------------------------------------------------------------
def test_round_trip_equals_fresh_build(written, tmp_path):
    info, path, data = written
    assert path.parent == tmp_path and path.name.endswith(".vocab") and len(data) > HEADER.size
    loaded, fresh = _info(tmp_path), _info(False)
    assert loaded.cache_status == "loaded" and fresh.cache_status == "off"
    assert loaded._vocab.same_as(fresh._vocab) and loaded._vocab.same_as(info._vocab)
    assert loaded._vocab.n_trie_nodes == fresh._vocab.n_trie_nodes > 1
    for i, g in enumerate(GRAMMARS):
        for seed in range(3):
            assert _masks_along(loaded, g, seed) == _masks_along(fresh, g, seed)
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left


def test_loaded_vocabulary_takes_plain_subtrees_whole(tmp_path):
    """Which subtrees hold only plain tokens is derived from the bytes, not stored: a loaded
    vocabulary's walks take them whole as a fresh build's do."""
    # plain tokens longer than the first slice level and shorter than what is left
    vocab = VOCAB + [b"ab" * 8, b"ba" * 9 + b"b", b"0a" * 6]
    g = Grammar.from_json_schema({"type": "string", "maxLength": 25})
    taken = []
    for info in (_info(tmp_path, vocab), _info(tmp_path, vocab), _info(False, vocab)):
        m = Matcher(g, info)
        m.consume(vocab.index(b'"'))
        m.compute_mask()
        taken.append((info.cache_status, m._engine._core.stats["plain_walks"]))
    assert [status for status, _ in taken] == ["written", "loaded", "off"]
    assert taken[0][1] == taken[1][1] == taken[2][1] > 0


def test_round_trip_real_vocabulary(smollm2_file, tmp_path):
    from lexguide import Tokenizer

    tok = Tokenizer.from_gguf(str(smollm2_file))
    first = TokenizerInfo.from_tokenizer(tok, cache=tmp_path)
    fresh = TokenizerInfo.from_tokenizer(tok, cache=False)
    assert (first.cache_status, fresh.cache_status) == ("written", "off")
    again = TokenizerInfo.from_tokenizer(tok, cache=tmp_path)
    assert again.cache_status == "loaded" and again._vocab.same_as(fresh._vocab)
    g = Grammar.from_json_schema({"type": "object", "properties": {"name": {"type": "string"},
                                                                   "n": {"type": "number"}}})
    for seed in range(2):
        assert _masks_along(again, g, seed, steps=8) == _masks_along(fresh, g, seed, steps=8)


def test_different_vocabularies_and_ids_get_different_files(tmp_path):
    a = _info(tmp_path)
    b = TokenizerInfo.from_token_bytes(VOCAB, [0], [], cache=tmp_path)  # same bytes, other ids
    c = _info(tmp_path, VOCAB[:-1] + [b"zz"])
    # the boundaries are part of the key: the same concatenated bytes split differently
    d = _info(tmp_path, VOCAB[:-2] + [VOCAB[-2] + VOCAB[-1][:1], VOCAB[-1][1:]])
    assert len({a.cache_file, b.cache_file, c.cache_file, d.cache_file}) == 4
    assert all(i.cache_status == "written" for i in (a, b, c, d))
    assert _info(tmp_path).cache_status == "loaded"


# -- damaged, foreign, stale files ----------------------------------------------------------
def test_every_changed_byte_is_detected(written):
    info, path, data = written
    rng = random.Random(0)
    offsets = list(range(HEADER.size)) + sorted(rng.sample(range(HEADER.size, len(data)), 300))
    for at in offsets:
        bad = bytearray(data)
        bad[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(bad))
        with pytest.raises(_core.VocabFileError):
            _load(path)


def test_truncated_and_extended_files_are_detected(written):
    info, path, data = written
    rng = random.Random(1)
    for n in [0, 1, 7, 8, HEADER.size - 1, HEADER.size, len(data) - 1] + rng.sample(range(len(data)), 100):
        path.write_bytes(data[:n])
        with pytest.raises(_core.VocabFileError):
            _load(path)
    path.write_bytes(data + b"\0")
    with pytest.raises(_core.VocabFileError, match="size"):
        _load(path)
    path.write_bytes(data)
    assert _load(path).same_as(info._vocab)


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty", "directory", "fifo"])
def test_tokenizer_info_rebuilds_and_rewrites(written, tmp_path, damage):
    info, path, data = written
    if damage == "flip":
        path.write_bytes(data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:])
    elif damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "fifo":  # must neither block the open nor stay: replaced by the file
        path.unlink()
        os.mkfifo(path)
    else:
        path.unlink()
        path.mkdir()
    again = _info(tmp_path)
    if damage == "directory":  # cannot be replaced by a file: built, not cached, still right
        assert again.cache_status == "unwritable"
    else:
        assert again.cache_status == "written" and path.read_bytes() == data
        assert _info(tmp_path).cache_status == "loaded"
    assert again._vocab.same_as(info._vocab)


def test_stale_and_foreign_files(written, tmp_path):
    info, path, data = written
    f = CacheFile(data)
    f.fields[5] = b"lexguide-vocab/1/0000000000000000/".ljust(96, b"\0")  # another core build
    path.write_bytes(f.seal())
    with pytest.raises(_core.VocabFileError, match="stale"):
        _load(path)
    f = CacheFile(data)
    f.fields[2] += 1  # a future format
    path.write_bytes(f.seal())
    with pytest.raises(_core.VocabFileError, match="format"):
        _load(path)
    f = CacheFile(data)
    f.fields[1] = 0x04030201  # the other byte order
    path.write_bytes(f.seal())
    with pytest.raises(_core.VocabFileError, match="byte order"):
        _load(path)
    # another vocabulary's file under this name (copied by hand): key mismatch, rebuilt
    other = _info(path.parent / "other", VOCAB + [b"extra"])
    path.write_bytes(other.cache_file.read_bytes())
    with pytest.raises(_core.VocabFileError, match="key|size"):
        _load(path)
    assert _info(tmp_path).cache_status == "written"
    assert path.read_bytes() == data
    path.write_bytes(f.seal())
    assert _info(tmp_path).cache_status == "written"


def _trie_sections(f: CacheFile, t: int):
    bytes_, depth, lo, ids = f.sections[4 * t:4 * t + 4]
    return bytes_, depth, lo, ids


@pytest.mark.parametrize("craft", ["depth-jump", "depth-zero", "root-depth", "lo-down", "lo-cover",
                                   "id-range", "slice-tail", "size-mismatch", "plain-len", "n-tokens"])
def test_crafted_files_with_valid_checksums_are_rejected(written, craft):
    """Checksums hold, but the structure would let a walk leave its arrays: refused."""
    info, path, data = written
    f = CacheFile(data)
    b, depth, lo, ids = _trie_sections(f, 0)
    d = np.frombuffer(depth, dtype="<u2").copy()
    lo_a = np.frombuffer(lo, dtype="<u4").copy()
    ids_a = np.frombuffer(ids, dtype="<u4").copy()
    if craft == "depth-jump":
        d[5] = d[4] + 2
    elif craft == "depth-zero":
        d[7] = 0
    elif craft == "root-depth":
        d[0] = 1
    elif craft == "lo-down":
        lo_a[10] = lo_a[11] + 1
    elif craft == "lo-cover":
        lo_a[-1] += 1
    elif craft == "id-range":
        ids_a[3] = len(VOCAB)
    elif craft == "slice-tail":
        words = bytearray(f.sections[-1])
        words[-1] |= 0x80  # bit 31 of the last word: beyond the vocabulary when V % 32 != 0
        f.sections[-1] = words
        assert len(VOCAB) % 32 != 0
    elif craft == "size-mismatch":
        f.sections[1] = depth[:-2]
    elif craft == "plain-len":
        f.fields[8] = 10_000
    elif craft == "n-tokens":
        f.fields[7] += 1
    if craft not in ("slice-tail", "size-mismatch"):
        f.sections[1], f.sections[2], f.sections[3] = (bytearray(d.tobytes()), bytearray(lo_a.tobytes()),
                                                       bytearray(ids_a.tobytes()))
    path.write_bytes(f.seal())
    with pytest.raises(_core.VocabFileError):
        _load(path)


def test_loader_survives_arbitrary_contents_with_valid_checksums(written):
    """Random section contents (checksums re-sealed): the loader refuses them or yields tries
    that walks stay inside; masks are then computed without a crash."""
    info, path, data = written
    rng = random.Random(2)
    loaded_any = 0
    for trial in range(60):
        f = CacheFile(data)
        t = rng.randrange(4)
        b, depth, lo, ids = _trie_sections(f, t)
        d = np.frombuffer(depth, dtype="<u2").copy()
        ids_a = np.frombuffer(ids, dtype="<u4").copy()
        kind = trial % 4
        if kind == 0:  # plausible depths: each node at most one deeper than the one before
            for i in range(1, len(d)):
                d[i] = rng.randint(1, d[i - 1] + 1)
        elif kind == 1:
            rng.shuffle(ids_a)  # a permutation: valid ids at the wrong nodes
        elif kind == 2:
            i = rng.randrange(len(d))
            d[i] = rng.randrange(1 << 16)
        else:
            f.sections[4 * t] = bytearray([0] + [rng.randrange(256) for _ in range(len(b) - 1)])
        f.sections[4 * t + 1], f.sections[4 * t + 3] = bytearray(d.tobytes()), bytearray(ids_a.tobytes())
        path.write_bytes(f.seal())
        try:
            vocab = _load(path)
        except _core.VocabFileError:
            continue
        loaded_any += 1
        # walk it: wrap the loaded core vocabulary in a TokenizerInfo
        forged = _info(False)
        forged._vocab = vocab
        for g in GRAMMARS:
            _masks_along(forged, g, trial, steps=4, tolerant=True)
    assert loaded_any >= 30  # kinds 0, 1 and 3 are structurally valid


def test_token_bytes_types_and_limits():
    info = TokenizerInfo([b"a", bytearray(b"b"), memoryview(b"cd")], [0], cache=False)
    assert info.token_bytes == (b"a", b"b", b"cd") and all(type(b) is bytes for b in info.token_bytes)
    assert info.max_len == 2
    with pytest.raises(TokenizerError, match="token 1 is longer than 4096 bytes"):
        TokenizerInfo([b"a", b"x" * 4097], [0], cache=False)
    with pytest.raises(TypeError):
        TokenizerInfo([b"a", "text"], [0], cache=False)


# -- settings ----------------------------------------------------------------------------------
def test_opt_out(tmp_path, monkeypatch):
    assert _info(False).cache_status == "off"
    monkeypatch.setenv("LEXGUIDE_VOCAB_CACHE", str(tmp_path / "env"))
    big = [b"%d" % i for i in range(vocab_cache.MIN_CACHED_TOKENS)]
    assert TokenizerInfo(big, [0]).cache_status == "written"
    assert (tmp_path / "env").is_dir()
    assert TokenizerInfo(big, [0], cache=False).cache_status == "off"
    assert TokenizerInfo(big[:-1], [0]).cache_status == "off"  # small: built faster than loaded
    for off in ("0", "off", "false", ""):
        monkeypatch.setenv("LEXGUIDE_VOCAB_CACHE", off)
        assert TokenizerInfo(big, [0]).cache_status == "off"
        assert vocab_cache.cache_folder() is None
    assert _info(tmp_path / "explicit").cache_status == "written"  # a directory wins
    assert vocab_cache.cache_folder(True) is not None


def test_default_location(tmp_path, monkeypatch):
    for var in ("LEXGUIDE_VOCAB_CACHE", "LEXGUIDE_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert vocab_cache.cache_folder() == tmp_path / "home" / ".cache" / "lexguide" / "vocab"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert vocab_cache.cache_folder() == tmp_path / "home" / ".cache" / "lexguide" / "vocab"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert vocab_cache.cache_folder() == tmp_path / "xdg" / "lexguide" / "vocab"
    monkeypatch.setenv("LEXGUIDE_CACHE", str(tmp_path / "lg"))
    assert vocab_cache.cache_folder() == tmp_path / "lg" / "vocab"
    monkeypatch.setenv("LEXGUIDE_VOCAB_CACHE", str(tmp_path / "v"))
    assert vocab_cache.cache_folder() == tmp_path / "v"
    assert vocab_cache.cache_folder(tmp_path / "arg") == tmp_path / "arg"
    assert not (tmp_path / "home").exists()


def test_unusable_folder_still_works(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a folder")
    for folder in (blocker, blocker / "below"):
        info = _info(folder)
        assert info.cache_status == "unwritable"
        assert info._vocab.same_as(_info(False)._vocab)
        assert _masks_along(info, GRAMMARS[0], 0, steps=3)
    assert blocker.read_bytes() == b"not a folder"


def test_concurrent_writers_leave_one_whole_file(tmp_path):
    """Threads build and write the same vocabulary at once (the core releases the GIL while it
    builds and writes): every one gets a right vocabulary, one whole file remains."""
    results, barrier = [], threading.Barrier(6)

    def build():
        barrier.wait()
        results.append(_info(tmp_path))

    threads = [threading.Thread(target=build) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh = _info(False)
    assert len(results) == 6 and all(r._vocab.same_as(fresh._vocab) for r in results)
    assert {r.cache_status for r in results} <= {"written", "loaded"}
    files = os.listdir(tmp_path)
    assert len(files) == 1 and files[0].endswith(".vocab")
    assert _info(tmp_path).cache_status == "loaded"
