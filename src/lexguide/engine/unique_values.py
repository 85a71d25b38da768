"""What the ``uniqueItems`` tracker (:mod:`lexguide.engine.unique_items`) keeps and compares:
the immutable states beside each history entry (:class:`UniqueState`, :class:`Arrays`,
:class:`Frame`), the equality keys of JSON values (:func:`value_key`: JSON Schema's equality,
numbers by exact value at any exponent, objects regardless of member order, strings after
unescaping) and the byte-level helpers over raw item text and mask words the tracker's parts
share. Pure functions of their arguments; nothing here queries the parser.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from typing import NamedTuple

import numpy as np

from lexguide.jsonschema.unique import MAX_BOUNDED_ITEMS

__all__ = ["EMPTY", "NO_ARRAYS", "Arrays", "Frame", "UniqueState", "completions_recorded",
           "decode_item", "value_key"]

_QUOTE, _CLOSE, _A = 0x22, 0x5D, 0x61
_OPEN, _BRACE, _END_BRACE, _COMMA, _BACKSLASH = 0x5B, 0x7B, 0x7D, 0x2C, 0x5C
#: integer completions counted up to this many
#: (:data:`lexguide.jsonschema.unique.MAX_BOUNDED_ITEMS`)
PLENTY = MAX_BOUNDED_ITEMS
#: nodes :meth:`UniqueItems.closed_exhausted` walks at most (past them it answers that a
#: fresh value exists: the admitted finite rests, at most 64 values, stay far below)
MAX_WALK = 100_000
_WHITESPACE = frozenset(b" \t\n\r")


class Frame(NamedTuple):
    """One open array whose items are kept distinct as JSON values (a marked ``[``)."""

    values: frozenset  # equality keys (:func:`value_key`) of its completed items
    item: bytes | None  # raw bytes of the item being read, from its first byte; None between
    level: int  # brackets open inside it: 0 between items or inside a scalar or string item
    need: bool = False  # a "," was read at level 0 and no item started since


class Arrays(NamedTuple):
    """The open marked arrays, innermost last, and where the text is lexically."""

    frames: tuple[Frame, ...] = ()
    in_str: bool = False  # inside a JSON string (only tracked while a frame is open)
    esc: bool = False  # after a backslash inside it


NO_ARRAYS = Arrays()


class UniqueState(NamedTuple):
    """What the matcher remembers of the marked arrays being written. Immutable: one per
    consumed token, so rollback and clone cost nothing more."""

    values: frozenset[str]  # decoded values of its completed items
    item: bytes | None  # raw bytes of the item being read, from its opening quote; None outside
    after_item: bool  # an item just ended: whitespace, then "," or "]"
    raws: frozenset[bytes] = frozenset()  # the completed items as written (quotes included)
    arrays: Arrays = NO_ARRAYS  # arrays of any items (a marked opening bracket)
    need: bool = False  # a "," after an item was read and no item started since


EMPTY = UniqueState(frozenset(), None, False)


def decode_item(raw: bytes) -> str:
    """The value of a complete JSON string ``raw`` (quotes included); escapes decoded, lone
    surrogates kept as such."""
    return json.loads(raw.decode("utf-8", errors="surrogatepass"))


_ZERO = ("n", False, "", 0)
_LITERAL_KEYS = frozenset((True, False, None))


def _number(text: str) -> tuple:
    """The key of a JSON number: ``("n", negative, significant digits, exponent)`` with no
    leading or trailing zero digit (zero: no digits, not negative). Exact at any exponent."""
    mantissa, _, exp = text.lower().partition("e")
    negative = mantissa.startswith("-")
    whole, _, frac = mantissa.lstrip("-").partition(".")
    digits = (whole + frac).lstrip("0")
    if not digits:
        return _ZERO
    significant = digits.rstrip("0")
    return ("n", negative, significant,
            (_integer(exp) if exp else 0) - len(frac) + len(digits) - len(significant))


def _integer(text: str) -> int:
    """``int(text)`` for a decimal of any length (``int`` refuses more than a few thousand
    digits)."""
    digits = text.lstrip("+-")
    if len(digits) <= 1000:
        return int(text)
    half = len(digits) // 2
    value = _integer(digits[:-half]) * 10 ** half + _integer(digits[-half:])
    return -value if text.startswith("-") else value


_DECODER = json.JSONDecoder(parse_float=_number, parse_int=_number)


def _key(v):
    if isinstance(v, list):
        return ("a", tuple(_key(x) for x in v))
    if isinstance(v, dict):
        return ("o", frozenset((k, _key(x)) for k, x in v.items()))
    return v  # str, bool, None, or a number's key already


def value_key(raw: bytes):
    """A hashable key of the complete JSON value ``raw`` under JSON equality: numbers by exact
    value (``1``, ``1.0`` and ``1e0`` are one key; never a bool's), strings after unescaping,
    arrays by their items in order, objects by their members regardless of order (a repeated
    key keeps its last value, as a JSON parser reads it)."""
    return _key(_DECODER.decode(raw.decode("utf-8", errors="surrogatepass")))


_LITERALS = {0x74: True, 0x66: False, 0x6E: None}  # t, f, n


def completions_recorded(counter, lstate: int, item: bytes, values: frozenset, key) -> bool:
    """Whether every value the open item ``item`` (lexer state ``lstate``) can still complete
    is in ``values``: listed by ``counter``
    (:class:`~lexguide.jsonschema.unique_count.ValueCounter`, one canonical spelling each)
    when there are no more than ``values``, each looked up as ``key(item + tail)``."""
    tails = counter.tails(counter.node(lstate, item), len(values))
    if tails is None:
        return False
    try:
        return all(key(item + t) in values for t in tails)
    except ValueError:
        return False


def _escaped(raw: bytes) -> bool:
    """Whether a byte after ``raw`` (an open string) is escaped: an odd run of backslashes."""
    return (len(raw) - len(raw.rstrip(b"\\"))) % 2 == 1


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _closers(raw: bytes) -> bytes:
    """The closing brackets, innermost first, of the brackets ``raw`` leaves open (a JSON
    text outside strings at its end)."""
    stack = []
    for b in _STRING.sub(b"", raw):
        if b == _BRACE or b == _OPEN:
            stack.append(_END_BRACE if b == _BRACE else _CLOSE)
        elif (b == _END_BRACE or b == _CLOSE) and stack:
            stack.pop()
    return bytes(reversed(stack))


def _target(a: Arrays) -> int:
    """The index of the frame whose open item a dead check is about: the innermost, or the one
    around it when the innermost array has no item open (its ``]`` would help end that
    item)."""
    d = len(a.frames) - 1
    f = a.frames[d]
    if f.item is None and f.level == 0 and d > 0:
        d -= 1
    return d


def _number_tail(canon: bytes) -> bytes:
    """The number ``canon`` (a JSON text outside strings) ends with, or b""."""
    n = len(canon)
    while n and canon[n - 1] in _NUMBER_BYTES:
        n -= 1
    return canon[n:]


def _in_key(raw: bytes) -> bool:
    """Whether the string ``raw`` ends inside (a JSON text inside a string) is not a member's
    value (a key, or an array's item): no ``:`` before its opening quote."""
    at = len(raw)
    while True:
        at = raw.rfind(b'"', 0, at)
        if at < 0:
            return False
        if not _escaped(raw[:at]):
            return raw[:at].rstrip(b" \t\n\r")[-1:] != b":"


def _zero_mantissa(item: bytes) -> bool:
    """Whether the open number ``item`` has no digit 1-9 before its exponent (if any)."""
    return not any(0x31 <= c <= 0x39 for c in item.lower().partition(b"e")[0])


def _close(frame: list, data: bytes, end: int) -> bool:
    """Record the item of ``frame`` (a frame of :meth:`UniqueItems._feed_arrays`) ending at
    ``data[end]``; False when its value is recorded already."""
    key = value_key(frame[1] + data[frame[3]:end])
    if key in frame[0]:
        return False
    frame[0] = frame[0] | {key}
    frame[1], frame[3] = None, -1
    return True


_LANES = np.arange(32, dtype=np.int64)


def _ids_of(words: np.ndarray) -> np.ndarray:
    """The token ids whose bits are set in the mask words ``words`` (cost: the nonzero words)."""
    nz = np.flatnonzero(words)
    if not len(nz):
        return nz
    bits = (words[nz, None] >> _LANES.astype(np.uint32)) & 1
    return (nz[:, None] * 32 + _LANES)[bits.astype(bool)]


def _begins_one(ordered: list[str], prefix: str) -> bool:
    """Whether ``prefix`` begins one of the sorted strings ``ordered``."""
    i = bisect_left(ordered, prefix)
    return i < len(ordered) and ordered[i].startswith(prefix)


def _split_partial(item: bytes) -> tuple[str, bytes] | None:
    """``(characters, bytes of an unfinished UTF-8 character)`` of the open item ``item``
    (outside an escape), or None when it does not decode so."""
    for k in range(4):
        try:
            return decode_item(item[:len(item) - k] + b'"'), item[len(item) - k:]
        except ValueError:
            continue
    return None


def _allowed(mask: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """bool per id in ``ids``: whether ``mask`` allows it."""
    return ((mask[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1).astype(bool)


def _decoded_prefix(item: bytes) -> str | None:
    """The value of the open item ``item`` so far, or None when it ends inside an escape or a
    UTF-8 sequence (its next bytes do not simply append characters)."""
    if _escaped(item):
        return None
    try:
        return decode_item(item + b'"')
    except ValueError:
        return None


def _quotes_needed(st: UniqueState) -> int:
    """The fewest ``"`` bytes a token needs to close an item equal to another from ``st``: the
    close of the open item against a recorded value (1), a whole item against one (2), or two
    equal items inside the token (3 when one is open, else 4)."""
    if st.item is not None:
        return 1 if st.values else 3
    return 2 if st.values else 4


_NUMBER_BYTES = frozenset(b"0123456789.eE+-")
#: the first bytes of a scalar JSON value
_VALUE_FIRSTS = b'"-0123456789tfn'
