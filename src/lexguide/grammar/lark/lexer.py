"""Tokeniser for the llguidance Lark variant (spec ``lark-syntax.md`` §2).

Longest match over the token kinds of §2, with two llguidance quirks kept on purpose:
``NEWLINE`` (``(\\r?\\n)+[ \\t]*``) is significant (it ends a definition), and after
``%json``, ``%regex`` and ``%llguidance`` exactly one JSON value is read from the raw text
(it may span lines; ``#`` and ``//`` inside it are JSON content). Consecutive newlines
separated only by comments are merged into one ``NEWLINE`` token so a ``|`` continuation line
may follow a comment line. Every token carries its character offset so errors can show a caret.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from lexguide.errors import GrammarError
from lexguide.limits import MAX_JSON_DEPTH, json_text_too_deep

__all__ = ["Kind", "Token", "decode_string", "lex_lark"]


class Kind(Enum):
    """Token kinds of the grammar text."""

    NEWLINE = "newline"
    RULE = "rule name"
    TOKEN = "terminal name"
    STRING = "string"
    REGEX = "regex"
    NUMBER = "number"
    HEX = "hex number"
    SPECIAL = "special token"
    GREF = "grammar reference"
    KEYWORD = "keyword"
    PUNCT = "punctuation"
    OP = "operator"
    EOF = "end of input"


@dataclass(frozen=True, slots=True)
class Token:
    """One token; ``text`` is the raw source slice, ``value`` the parsed JSON after a keyword."""

    kind: Kind
    text: str
    offset: int
    end: int
    value: Any = None

    def is_(self, kind: Kind, text: str | None = None) -> bool:
        return self.kind is kind and (text is None or self.text == text)

    def describe(self) -> str:
        if self.kind is Kind.EOF:
            return "end of input"
        if self.kind is Kind.NEWLINE:
            return "newline"
        return f"{self.text!r}"


KEYWORDS = (
    "%ignore", "%import", "%override", "%declare", "%json", "%regex", "%llguidance", "%lark",
    "%if",
)  # fmt: skip
JSON_KEYWORDS = frozenset({"%json", "%regex", "%llguidance"})
# longest first so "::" wins over ":" and ".." over "."
PUNCTUATION = ("->", "::", "..", ":", "=", ",", ".", "(", ")", "{", "}", "[", "]", "~", "|", "&",
               "_")  # fmt: skip

_PATTERNS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    (Kind.OP, re.compile(r"[+*?]")),
    (Kind.RULE, re.compile(r"!?[_?]?[a-z][_a-z0-9\-]*")),
    (Kind.TOKEN, re.compile(r"_?[A-Z][_A-Z0-9\-]*")),
    (
        Kind.STRING,
        re.compile(
            r'"(?:\\(?:["\\/bfnrt]|u[a-fA-F0-9]{4}|x[a-fA-F0-9]{2})|[^"\\\x00-\x1f\x7f])*"i?'
        ),
    ),
    (Kind.REGEX, re.compile(r"/(?:\\[^\n]|[^/\\])+/[imslux]*")),
    # a '.' directly followed by another '.' is a range "..", not a decimal point: "~ 2..3"
    (Kind.NUMBER, re.compile(r"[+-]?[0-9]+(?:\.(?!\.)[0-9]*)?(?:[eE][+-]?[0-9]+)?")),
    (Kind.HEX, re.compile(r"0[xX][0-9a-fA-F]+")),
    (Kind.SPECIAL, re.compile(r"<[^<>\s]+>")),
    (Kind.GREF, re.compile(r"@[a-zA-Z0-9_\-]+")),
)
_BLANK = re.compile(r"[ \t]+")
_COMMENT = re.compile(r"(?:#|//)[^\n]*")
_NEWLINE = re.compile(r"(?:\r?\n)+[ \t]*")
_JSON_WS = re.compile(r"[ \t\r\n]*")
_JSON = json.JSONDecoder(parse_constant=lambda name: _reject_constant(name))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _error(text: str, offset: int, message: str) -> GrammarError:
    return GrammarError(message, text=text, offset=offset)


def _first_chars(kind: Kind) -> str:
    lower, upper, digits = "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789"
    return {
        Kind.OP: "+*?", Kind.RULE: "!_?" + lower, Kind.TOKEN: "_" + upper, Kind.STRING: '"',
        Kind.REGEX: "/", Kind.NUMBER: "+-" + digits, Kind.HEX: "0", Kind.SPECIAL: "<",
        Kind.GREF: "@",
    }[kind]  # fmt: skip


# first character -> the patterns that can start there (keeps lexing linear and cheap)
_BY_FIRST: dict[str, list[tuple[Kind, re.Pattern[str]]]] = {}
for _kind, _rx in _PATTERNS:
    for _c in _first_chars(_kind):
        _BY_FIRST.setdefault(_c, []).append((_kind, _rx))
_PUNCT_BY_FIRST: dict[str, list[str]] = {}
for _p in PUNCTUATION:  # keeps the longest-first order
    _PUNCT_BY_FIRST.setdefault(_p[0], []).append(_p)


def _longest(text: str, pos: int) -> tuple[Kind, int] | None:
    """The longest token at ``pos`` (ties: keywords, punctuation, then table order)."""
    best: tuple[Kind, int] | None = None
    first = text[pos]
    if first == "%":
        for kw in KEYWORDS:
            if text.startswith(kw, pos) and (best is None or len(kw) > best[1] - pos):
                best = (Kind.KEYWORD, pos + len(kw))
    for p in _PUNCT_BY_FIRST.get(first, ()):
        if text.startswith(p, pos):
            best = (Kind.PUNCT, pos + len(p))
            break
    for kind, rx in _BY_FIRST.get(first, ()):
        m = rx.match(text, pos)
        if m is not None and m.end() > pos and (best is None or m.end() > best[1]):
            best = (kind, m.end())
    return best


def _lexer_error(text: str, pos: int) -> GrammarError:
    ch = text[pos]
    if ch == '"':
        return _error(text, pos, "lexer error: unterminated or malformed string literal "
                      "(only JSON escapes and \\xHH; control characters must be escaped)")
    if ch == "'":
        return _error(text, pos, 'lexer error: single-quoted strings are not supported; use "..."')
    if ch == "/":
        return _error(text, pos, "lexer error: unterminated or empty /regex/")
    if ch == "<":
        return _error(text, pos, "lexer error: malformed special token (expected <name> or <[ids]>"
                      " without spaces)")
    return _error(text, pos, f"lexer error: unexpected character {ch!r}")


def _read_json(text: str, pos: int, keyword: str, kw_offset: int) -> tuple[Any, int]:
    """Read one JSON value starting at ``pos`` (after optional whitespace)."""
    start = _JSON_WS.match(text, pos).end()  # type: ignore[union-attr]
    if start >= len(text):
        raise _error(text, kw_offset, f"failed to parse {keyword}: expected a JSON value")
    deep = json_text_too_deep(text[start:])
    if deep is not None:
        raise _error(text, start + deep, f"failed to parse {keyword}: JSON nested more than "
                     f"{MAX_JSON_DEPTH} levels deep")
    try:
        value, end = _JSON.raw_decode(text, start)
    except json.JSONDecodeError as e:
        raise _error(text, e.pos, f"failed to parse {keyword}: {e.msg}") from None
    except ValueError as e:
        raise _error(text, start, f"failed to parse {keyword}: {e}") from None
    return value, end


def lex_lark(text: str) -> list[Token]:
    """Split grammar ``text`` into tokens, ending with one ``EOF`` token.

    Pure; linear in ``len(text)``. Raises :class:`GrammarError` ("lexer error ...") with the
    location of the first character no token kind can start with.
    """
    tokens: list[Token] = []
    pos = 0
    n = len(text)
    while pos < n:
        c = text[pos]
        if c == " " or c == "\t":
            pos = _BLANK.match(text, pos).end()  # type: ignore[union-attr]
            continue
        if c == "#" or (c == "/" and text.startswith("//", pos)):
            pos = _COMMENT.match(text, pos).end()  # type: ignore[union-attr]
            continue
        m = _NEWLINE.match(text, pos) if c == "\n" or c == "\r" else None
        if m is not None:
            if tokens and tokens[-1].kind is Kind.NEWLINE:
                prev = tokens.pop()
                merged = text[prev.offset : m.end()]
                tokens.append(Token(Kind.NEWLINE, merged, prev.offset, m.end()))
            else:
                tokens.append(Token(Kind.NEWLINE, m.group(), pos, m.end()))
            pos = m.end()
            continue
        found = _longest(text, pos)
        if found is None:
            raise _lexer_error(text, pos)
        kind, end = found
        raw = text[pos:end]
        if kind is Kind.KEYWORD and raw in JSON_KEYWORDS:
            value, end = _read_json(text, end, raw, pos)
            tokens.append(Token(kind, raw, pos, end, value))
        else:
            tokens.append(Token(kind, raw, pos, end))
        pos = end
    tokens.append(Token(Kind.EOF, "", n, n))
    return tokens


_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t"}  # fmt: skip


def decode_string(text: str, tok: Token) -> tuple[str, bool]:
    """Decode a ``STRING`` token to ``(value, case_insensitive)``.

    JSON escapes plus ``\\xHH`` (the code point U+00HH, as llguidance does); surrogate pairs
    written as two ``\\uXXXX`` combine, a lone surrogate is an error.
    """
    raw = tok.text
    ci = raw.endswith("i")
    body = raw[1 : -2 if ci else -1]
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
            i += 2
        elif e == "x":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        else:  # "u": the lexer guarantees 4 hex digits
            cp = int(body[i + 2 : i + 6], 16)
            i += 6
            if 0xD800 <= cp < 0xDC00 and body.startswith("\\u", i):
                lo = int(body[i + 2 : i + 6], 16)
                if 0xDC00 <= lo < 0xE000:
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                    i += 6
            if 0xD800 <= cp < 0xE000:
                raise _error(text, tok.offset, "error parsing string: lone surrogate \\u%04X" % cp)
            out.append(chr(cp))
    return "".join(out), ci
