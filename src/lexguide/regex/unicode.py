"""Code-point range sets and the Unicode tables the regex syntax needs.

A *range set* is a sorted list of disjoint, non-adjacent inclusive ``(lo, hi)`` code-point
pairs. Tables come from :mod:`unicodedata` (the Unicode version of this Python) and are built
lazily on first use, then cached for the process: general categories (one scan of all code
points, ~0.3 s, also cached on disk in ``$LEXGUIDE_CACHE`` or ``~/.cache/lexguide``), simple
case-folding orbits (a scan of planes 0-1, cached on disk likewise). ``White_Space`` and the
``Other_Alphabetic`` symbols that Rust's ``\\w`` includes are not exposed by ``unicodedata`` and are
listed here from the Unicode Character Database (PropList.txt).
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import unicodedata
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "CATEGORY_ALIASES",
    "MAX_CP",
    "Ranges",
    "case_fold_ranges",
    "difference",
    "general_category",
    "intersect_ranges",
    "negate",
    "normalize",
    "perl_class",
    "posix_class",
    "symmetric_difference",
    "utf8_sequences",
]

Ranges = list[tuple[int, int]]
MAX_CP = 0x10FFFF


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sort, clip to 0..MAX_CP and merge overlapping/adjacent ranges."""
    out: Ranges = []
    for lo, hi in sorted((max(lo, 0), min(hi, MAX_CP)) for lo, hi in ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def negate(ranges: Ranges) -> Ranges:
    """Complement within 0..MAX_CP (input must be normalised)."""
    out: Ranges = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return out


def intersect_ranges(a: Ranges, b: Ranges) -> Ranges:
    """Intersection of two normalised range sets."""
    out: Ranges = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def difference(a: Ranges, b: Ranges) -> Ranges:
    return intersect_ranges(a, negate(b))


def symmetric_difference(a: Ranges, b: Ranges) -> Ranges:
    return normalize(difference(a, b) + difference(b, a))


# -- general categories -------------------------------------------------------------------------
_lock = threading.Lock()
_categories: dict[str, Ranges] | None = None

#: long names and one-letter groups of the Unicode general categories (UAX #44)
CATEGORY_ALIASES: dict[str, tuple[str, ...]] = {
    "letter": ("Lu", "Ll", "Lt", "Lm", "Lo"),
    "casedletter": ("Lu", "Ll", "Lt"),
    "lc": ("Lu", "Ll", "Lt"),
    "uppercaseletter": ("Lu",),
    "lowercaseletter": ("Ll",),
    "titlecaseletter": ("Lt",),
    "modifierletter": ("Lm",),
    "otherletter": ("Lo",),
    "mark": ("Mn", "Mc", "Me"),
    "combiningmark": ("Mn", "Mc", "Me"),
    "nonspacingmark": ("Mn",),
    "spacingmark": ("Mc",),
    "enclosingmark": ("Me",),
    "number": ("Nd", "Nl", "No"),
    "decimalnumber": ("Nd",),
    "digit": ("Nd",),
    "letternumber": ("Nl",),
    "othernumber": ("No",),
    "punctuation": ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"),
    "punct": ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"),
    "connectorpunctuation": ("Pc",),
    "dashpunctuation": ("Pd",),
    "openpunctuation": ("Ps",),
    "closepunctuation": ("Pe",),
    "initialpunctuation": ("Pi",),
    "finalpunctuation": ("Pf",),
    "otherpunctuation": ("Po",),
    "symbol": ("Sm", "Sc", "Sk", "So"),
    "mathsymbol": ("Sm",),
    "currencysymbol": ("Sc",),
    "modifiersymbol": ("Sk",),
    "othersymbol": ("So",),
    "separator": ("Zs", "Zl", "Zp"),
    "spaceseparator": ("Zs",),
    "lineseparator": ("Zl",),
    "paragraphseparator": ("Zp",),
    "other": ("Cc", "Cf", "Cs", "Co", "Cn"),
    "control": ("Cc",),
    "cntrl": ("Cc",),
    "format": ("Cf",),
    "surrogate": ("Cs",),
    "privateuse": ("Co",),
    "unassigned": ("Cn",),
}
_ALL_CATS = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"]
for _c in _ALL_CATS:
    CATEGORY_ALIASES[_c.lower()] = (_c,)
for _g in "LMNPSZC":
    CATEGORY_ALIASES[_g.lower()] = tuple(c for c in _ALL_CATS if c[0] == _g)


def _cache_file(what: str) -> Path:
    folder = Path(os.environ.get("LEXGUIDE_CACHE", Path.home() / ".cache" / "lexguide"))
    return folder / f"unicode-{what}-{unicodedata.unidata_version}.json"


def _load_cached_categories() -> dict[str, Ranges] | None:
    try:
        raw = json.loads(_cache_file("categories").read_text())
        table = {c: [(int(lo), int(hi)) for lo, hi in raw[c]] for c in _ALL_CATS}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    total = sum(hi - lo + 1 for rs in table.values() for lo, hi in rs)
    return table if total == MAX_CP + 1 else None


def _save_cache(what: str, data: object) -> None:
    """Best effort: the cache only saves a scan of ``unicodedata``; failing changes nothing."""
    path = _cache_file(what)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass


def _scan_categories() -> dict[str, Ranges]:
    """General-category ranges of every code point: from the disk cache (keyed by the Unicode
    version) or one scan of :func:`unicodedata.category` over all code points."""
    global _categories
    if _categories is None:
        with _lock:
            if _categories is None:
                table = _load_cached_categories()
                if table is None:
                    cat = unicodedata.category
                    table = {c: [] for c in _ALL_CATS}
                    start, cur = 0, cat("\x00")
                    for cp in range(1, MAX_CP + 1):
                        c = cat(chr(cp))
                        if c != cur:
                            table[cur].append((start, cp - 1))
                            start, cur = cp, c
                    table[cur].append((start, MAX_CP))
                    _save_cache("categories", table)
                _categories = table
    return _categories


def _prop_key(name: str) -> str:
    return name.replace("_", "").replace(" ", "").replace("-", "").lower()


def general_category(name: str) -> Ranges | None:
    """Ranges of a general category (``L``, ``Lu``, ``Letter``, ``Uppercase_Letter``, ...),
    also ``Any``, ``ASCII`` and ``Assigned``; None for unknown names (e.g. scripts)."""
    key = _prop_key(name)
    if key == "any":
        return [(0, MAX_CP)]
    if key == "ascii":
        return [(0, 0x7F)]
    if key == "assigned":
        return negate(general_category("Cn") or [])
    cats = CATEGORY_ALIASES.get(key)
    if cats is None:
        return None
    table = _scan_categories()
    return normalize(r for c in cats for r in table[c])


# -- Perl and POSIX classes ---------------------------------------------------------------------
_WHITE_SPACE: Ranges = [
    (0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
]  # fmt: skip
# Other_Alphabetic code points outside categories L*, M*, Nl (circled / squared letters)
_EXTRA_ALPHABETIC: Ranges = [(0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169),
                             (0x1F170, 0x1F189)]  # fmt: skip
_perl_cache: dict[tuple[str, bool], Ranges] = {}


def perl_class(letter: str, unicode: bool = True) -> Ranges:
    """``\\d``, ``\\s``, ``\\w`` (lowercase letter) as ranges: Unicode or ASCII versions."""
    key = (letter, unicode)
    r = _perl_cache.get(key)
    if r is None:
        if not unicode:
            r = list(_POSIX[{"d": "digit", "s": "space", "w": "word"}[letter]])
        elif letter == "d":
            r = general_category("Nd") or []
        elif letter == "s":
            r = list(_WHITE_SPACE)
        else:  # Alphabetic + M + Nd + Pc + Join_Control, as Rust's \w
            table = _scan_categories()
            cats = ("Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Mn", "Mc", "Me", "Nd", "Pc")
            r = normalize(
                [x for c in cats for x in table[c]] + _EXTRA_ALPHABETIC + [(0x200C, 0x200D)]
            )
        _perl_cache[key] = r
    return r


_POSIX: dict[str, Ranges] = {
    "alnum": [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)],
    "alpha": [(0x41, 0x5A), (0x61, 0x7A)],
    "ascii": [(0, 0x7F)],
    "blank": [(9, 9), (32, 32)],
    "cntrl": [(0, 0x1F), (0x7F, 0x7F)],
    "digit": [(0x30, 0x39)],
    "graph": [(0x21, 0x7E)],
    "lower": [(0x61, 0x7A)],
    "print": [(0x20, 0x7E)],
    "punct": [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)],
    "space": [(9, 13), (32, 32)],
    "upper": [(0x41, 0x5A)],
    "word": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "xdigit": [(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
}


def posix_class(name: str) -> Ranges | None:
    """An ASCII POSIX class (``alpha``, ``digit``, ...) or None when unknown."""
    r = _POSIX.get(name)
    return None if r is None else list(r)


# -- simple case folding ------------------------------------------------------------------------
_fold_keys: list[int] | None = None
_fold_orbit: dict[int, tuple[int, ...]] = {}


def _load_cached_orbits() -> list[list[int]] | None:
    try:
        raw = json.loads(_cache_file("folds").read_text())
        orbits = [[int(c) for c in orbit] for orbit in raw]
    except (OSError, ValueError, TypeError):
        return None
    return orbits if orbits and all(len(o) > 1 for o in orbits) else None


def _simple_fold(ch: str) -> str:
    """Unicode simple case folding (CaseFolding.txt statuses C+S) of one character.

    ``str.casefold`` is the full folding (C+F); where it yields several characters the S
    mapping, when there is one, equals the simple lowercase mapping (e.g. U+1E9E -> U+00DF).
    """
    cf = ch.casefold()
    if len(cf) == 1:
        return cf
    lw = ch.lower()
    return lw if len(lw) == 1 else ch


def _build_folds() -> list[int]:
    """Orbits of simple case folding: characters with the same fold match each other."""
    global _fold_keys
    if _fold_keys is None:
        with _lock:
            if _fold_keys is None:
                orbits = _load_cached_orbits()
                if orbits is None:
                    groups: dict[str, list[int]] = {}
                    for cp in range(0x20000):  # every cased character is below U+20000
                        if 0xD800 <= cp <= 0xDFFF:
                            continue
                        ch = chr(cp)
                        f = _simple_fold(ch)
                        if f != ch:
                            groups.setdefault(f, [ord(f)]).append(cp)
                    orbits = [sorted(set(members)) for members in groups.values()]
                    _save_cache("folds", orbits)
                for members in orbits:
                    orbit = tuple(members)
                    for m in orbit:
                        _fold_orbit[m] = orbit
                _fold_keys = sorted(_fold_orbit)
    return _fold_keys


def case_fold_ranges(ranges: Ranges) -> Ranges:
    """Close a range set under Unicode simple case folding (``(?i)``)."""
    keys = _build_folds()
    extra: Ranges = []
    for lo, hi in ranges:
        i = bisect.bisect_left(keys, lo)
        j = bisect.bisect_right(keys, hi)
        for cp in keys[i:j]:
            extra.extend((o, o) for o in _fold_orbit[cp])
    return normalize(list(ranges) + extra)


# -- UTF-8 ---------------------------------------------------------------------------------------
def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """Split code points ``lo..hi`` into UTF-8 byte-range sequences (surrogates excluded).

    Each sequence is a tuple of inclusive byte ranges, one per byte of the encoding; together
    they match exactly the UTF-8 encodings of the code points (Rust ``utf8-ranges`` algorithm).
    """
    out: list[tuple[tuple[int, int], ...]] = []
    stack = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        if lo > hi:
            continue
        if lo <= 0xDFFF and hi >= 0xD800:
            stack.append((lo, 0xD7FF))
            stack.append((0xE000, hi))
            continue
        for m in (0x7F, 0x7FF, 0xFFFF):
            if lo <= m < hi:
                stack.append((lo, m))
                stack.append((m + 1, hi))
                break
        else:
            if hi <= 0x7F:
                out.append(((lo, hi),))
                continue
            n = 2 if hi <= 0x7FF else 3 if hi <= 0xFFFF else 4
            for i in range(1, n):
                m = (1 << (6 * i)) - 1
                if lo & ~m != hi & ~m:
                    if lo & m != 0:
                        stack.append((lo, lo | m))
                        stack.append(((lo | m) + 1, hi))
                        break
                    if hi & m != m:
                        stack.append((lo, (hi & ~m) - 1))
                        stack.append((hi & ~m, hi))
                        break
            else:
                a = chr(lo).encode("utf-8")
                z = chr(hi).encode("utf-8")
                out.append(tuple(zip(a, z)))
    return out
