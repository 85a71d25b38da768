"""The JSON spellings of characters inside a string, under an escape policy (RFC 8259 §7).

A character may be written raw (UTF-8) unless it must be escaped (``"``, ``\\``, U+0000–U+001F
and, as llguidance does, U+007F); escapes are ``\\"``, ``\\\\``, ``\\b \\f \\n \\r \\t`` and
``\\uXXXX`` (hex digits in either case, the ``u`` lowercase). :class:`Escapes` says which of
them a grammar accepts, following llguidance's ``x-guidance`` options:

``short``    the escape letters allowed after ``\\`` among ``"\\bfnrt`` (``json_allowed_escapes``
             without ``u``);
``unicode``  ``u`` is allowed: characters that must be escaped may be written ``\\u00XX``;
``general``  ``\\uXXXX`` is also allowed for every other character
             (``json_allow_general_unicode_escapes``): any non-surrogate BMP code point, and
             a character above U+FFFF as its UTF-16 surrogate pair ``\\uD8xx\\uDCxx``. A pair
             is one character (for ``minLength``/``maxLength`` and patterns alike); a lone
             surrogate is no character and is never accepted.

Because patterns, formats and lengths are compiled through :func:`json_chars_rx`, every
policy applies to them exactly (unlike llguidance, which allows general escapes only in strings
without ``pattern``/``format``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from lexguide.regex import nodes as rx

__all__ = ["DEFAULT", "MAX_CP", "CharSet", "Escapes", "any_json_char",
           "escapes_from_options", "json_char", "json_chars_rx", "json_literal_body"]

MAX_CP = 0x10FFFF
CharSet = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive code point ranges
_SHORT = {0x22: '"', 0x5C: "\\", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_LETTERS = frozenset('"\\bfnrt')


@dataclass(frozen=True, slots=True, eq=False)
class Escapes:
    """Which escapes a JSON string lexeme accepts (see the module docstring).

    One instance per policy (:func:`escapes_from_options` hands out :data:`DEFAULT` or the
    one made first), so instances compare and hash by identity: the caches keyed by a
    policy (string regexes, key literals, layouts) hash it without a Python call."""

    short: frozenset[str] = _LETTERS
    unicode: bool = True
    general: bool = False


#: llguidance's default, for string values and object keys alike: ``\\uXXXX`` only for
#: characters that must be escaped. Every text then has one spelling, so a declared key is
#: forced text during generation; ``json_allow_general_unicode_escapes`` admits every spelling
#: (a key is its decoded string, RFC 8259 §4: ``"\\u0041b"`` is then the key ``"Ab"``).
DEFAULT = Escapes()


def escapes_from_options(allowed: str | None, general: bool | None) -> Escapes:
    """The policy of strings and keys from ``json_allowed_escapes`` (letters of ``nrbtf\\"u``,
    default all) and ``json_allow_general_unicode_escapes`` (default off; applies to strings and
    keys alike). Raises ValueError naming a bad letter."""
    letters = '"\\bfnrtu' if allowed is None else allowed
    for c in letters:
        if c not in _LETTERS and c != "u":
            raise ValueError(f"invalid escape character in allowed_escapes: {c}")
    short = frozenset(letters) - {"u"}
    unicode = "u" in letters
    # one instance per policy (see Escapes)
    key = (short, unicode, bool(general))
    esc = _POLICIES.get(key)
    if esc is None:
        esc = _POLICIES[key] = Escapes(short, unicode, bool(general))
    return esc


_POLICIES: dict[tuple[frozenset[str], bool, bool], Escapes] = {
    (DEFAULT.short, DEFAULT.unicode, DEFAULT.general): DEFAULT}


def _hex_digit(lo: int, hi: int) -> int:
    """One hex digit with a value in ``lo..hi`` (letters in either case)."""
    chars = set()
    for v in range(lo, hi + 1):
        chars.add(ord(f"{v:x}"))
        chars.add(ord(f"{v:X}"))
    return rx.byteset(chars)


def _hex_range(lo: int, hi: int, n: int) -> int:
    """``n`` hex digits whose value lies in ``lo..hi`` (digit by digit, like a numeric range)."""
    if n == 0:
        return rx.EPSILON
    shift = 4 * (n - 1)
    top_lo, top_hi = lo >> shift, hi >> shift
    mask = (1 << shift) - 1
    if top_lo == top_hi:
        return rx.concat(_hex_digit(top_lo, top_lo), _hex_range(lo & mask, hi & mask, n - 1))
    alts = [rx.concat(_hex_digit(top_lo, top_lo), _hex_range(lo & mask, mask, n - 1)),
            rx.concat(_hex_digit(top_hi, top_hi), _hex_range(0, hi & mask, n - 1))]
    if top_hi - top_lo > 1:
        alts.append(rx.concat(_hex_digit(top_lo + 1, top_hi - 1), _hex_range(0, mask, n - 1)))
    return rx.alt(*alts)


def _u_escape(lo: int, hi: int) -> int:
    """``\\uXXXX`` for the BMP code points ``lo..hi``."""
    return rx.concat(rx.literal(b"\\u"), _hex_range(lo, hi, 4))


def _surrogate_pairs(lo: int, hi: int) -> int:
    """``\\uD8xx\\uDCxx`` spellings of the supplementary code points ``lo..hi``."""
    def pair(h: int, l_lo: int, l_hi: int) -> int:
        return rx.concat(_u_escape(h, h), _u_escape(l_lo, l_hi))

    a, b = lo - 0x10000, hi - 0x10000
    h_lo, h_hi = 0xD800 + (a >> 10), 0xD800 + (b >> 10)
    l_lo, l_hi = 0xDC00 + (a & 0x3FF), 0xDC00 + (b & 0x3FF)
    if h_lo == h_hi:
        return pair(h_lo, l_lo, l_hi)
    alts = [pair(h_lo, l_lo, 0xDFFF), pair(h_hi, 0xDC00, l_hi)]
    if h_hi - h_lo > 1:
        alts.append(rx.concat(_u_escape(h_lo + 1, h_hi - 1), _u_escape(0xDC00, 0xDFFF)))
    return rx.alt(*alts)


def _must_escape(cp: int) -> bool:
    return cp < 0x20 or cp in (0x22, 0x5C, 0x7F)


def _special(cp: int, esc: Escapes) -> int:
    """The spellings of a character that must be escaped."""
    parts = []
    letter = _SHORT.get(cp)
    if letter is not None and letter in esc.short:
        parts.append(rx.literal(b"\\" + letter.encode()))
    if esc.unicode and (cp not in (0x22, 0x5C) or esc.general):  # \u0022: a general escape
        parts.append(_u_escape(cp, cp))
    return rx.alt(*parts) if parts else rx.NOTHING


def _plain(lo: int, hi: int, esc: Escapes) -> int:
    """Code points lo..hi that may be written raw: UTF-8 (surrogates excluded), and with
    ``general`` also their ``\\uXXXX`` forms or surrogate pairs."""
    pieces = []
    if lo < 0xD800:
        pieces.append(rx.codepoint_range(lo, min(hi, 0xD7FF)))
    if hi > 0xDFFF:
        pieces.append(rx.codepoint_range(max(lo, 0xE000), hi))
    if esc.general and esc.unicode:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), min(hi, 0xFFFF))):
            if a <= b:
                pieces.append(_u_escape(a, b))
        if hi >= 0x10000:
            pieces.append(_surrogate_pairs(max(lo, 0x10000), hi))
    return rx.alt(*pieces) if pieces else rx.NOTHING


_SPECIALS = (*range(0x20), 0x22, 0x5C, 0x7F)


@lru_cache(maxsize=4096)
def json_chars_rx(cs: CharSet, esc: Escapes = DEFAULT) -> int:
    """Regex matching one JSON spelling (inside a string) of exactly one character of ``cs``."""
    parts: list[int] = []
    for lo, hi in cs:
        cur = lo  # specials inside the range get their escaped forms, the rest is plain
        for sp in _SPECIALS:
            if sp < cur or sp > hi:
                continue
            if cur < sp:
                parts.append(_plain(cur, sp - 1, esc))
            parts.append(_special(sp, esc))
            cur = sp + 1
        if cur <= hi:
            parts.append(_plain(cur, hi, esc))
    return rx.alt(*parts) if parts else rx.NOTHING


def json_char(cp: int, esc: Escapes = DEFAULT) -> int:
    """The JSON spellings of one character."""
    return json_chars_rx(((cp, cp),), esc)


def any_json_char(esc: Escapes = DEFAULT) -> int:
    return json_chars_rx(((0, MAX_CP),), esc)


@lru_cache(maxsize=65536)
def json_literal_body(text: str, esc: Escapes = DEFAULT) -> int:
    """All JSON spellings of the string ``text`` (without the quotes)."""
    if not esc.general and text.isascii() and text.isprintable() and '"' not in text \
            and "\\" not in text:  # printable ASCII, no quote or backslash: one spelling
        return rx.literal(text.encode())
    if not esc.general and not any(_must_escape(ord(c)) or 0xD800 <= ord(c) <= 0xDFFF
                                   for c in text):
        return rx.literal(text.encode())  # the only spelling: no character needs escaping
    return rx.concat(*(json_char(ord(c), esc) for c in text)) if text else rx.EPSILON
