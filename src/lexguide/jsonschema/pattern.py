"""ECMA-262 ``pattern`` regexes → byte regexes over the *JSON-escaped* text of a string.

Why our own parser: a JSON Schema ``pattern`` constrains the decoded string, but the grammar
sees the JSON text, where ``"`` is written ``\\"``, a newline ``\\n`` or ``\\u000a``, and so on.
Parsing the pattern ourselves lets every character class be mapped straight to the set of JSON
spellings of its characters, so a pattern (and every length limit, which counts characters)
becomes ONE regex over the bytes between the quotes. It also gives ECMA meanings where Rust
regex syntax differs: ``\\d``/``\\w`` are ASCII, ``\\s`` is Unicode, ``.`` excludes line
terminators, and patterns match anywhere (search semantics) unless anchored with ``^``/``$``
(JSON Schema 2020-12 §6.3.3, ECMA-262 §22.2).

Character sets are lists of inclusive code point ranges; the JSON spellings follow the string
grammar of RFC 8259 §7 (escapes as the schema's ``x-guidance`` options allow).

Lookarounds are exact where they stand in the pattern's outermost sequence (or in a branch of
an outermost alternation): there the text they look at is known, so each becomes an
intersection. ``X(?=A)Y`` is ``X·(Y' ∩ A·Σ*)`` where ``Y'`` is the rest of the subject string
(``Y`` and, unless ``$`` ends the pattern, any text); ``(?!A)`` intersects with the complement
instead; ``A`` ending in ``$`` must match the whole rest. ``X(?<=B)Y`` is ``(X' ∩ Σ*·B)·Y``
with ``X'`` the subject up to that point, for any regular ``B`` (so not only fixed widths).
Lookbehinds must come before lookaheads in one sequence (a lookbehind after a lookahead
would constrain both sides of the lookahead's split at once). Lookarounds inside a group,
a quantified group or a nested alternation are a :class:`PatternError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from lexguide.jsonschema.escapes import (
    DEFAULT,
    MAX_CP,
    CharSet,
    Escapes,
    any_json_char,
    json_char,
    json_chars_rx,
    json_literal_body,
)
from lexguide.limits import Nesting
from lexguide.regex import nodes as rx
from lexguide.regex import unicode as _uni

__all__ = [
    "CharSet",
    "Escapes",
    "PatternError",
    "anchored_pattern_rx",
    "any_json_char",
    "json_char",
    "json_chars_rx",
    "json_literal_body",
    "pattern_rx",
]



class PatternError(ValueError):
    """A pattern is malformed or uses an unsupported construct; ``offset`` is the char offset."""

    def __init__(self, message: str, offset: int) -> None:
        self.offset = offset
        super().__init__(f"{message} at offset {offset}")


def normalize(ranges: list[tuple[int, int]]) -> CharSet:
    """Sort and merge ranges (surrogates are kept; they are dropped when converting to bytes)."""
    return tuple(_uni.normalize(ranges))


def negate(cs: CharSet) -> CharSet:
    return tuple(_uni.negate(list(cs)))


DIGIT: CharSet = ((0x30, 0x39),)
WORD: CharSet = normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
SPACE: CharSet = normalize(
    [(9, 13), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
     (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
)
DOT: CharSet = negate(normalize([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]))
ALL: CharSet = ((0, MAX_CP),)

# -- parser -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Piece:
    """A parsed sub-pattern: its regex and whether it is anchored at its start / end."""

    rx: int
    start: bool = False
    end: bool = False
    mixed: tuple[_Piece, ...] = ()  # branches of an alternation anchored differently
    # a lookaround assertion: "=" / "!" ahead, "<=" / "<!" behind; ``look_at`` its offset
    look: str = ""
    look_at: int = 0


def _group_nesting_error(at: int, limit: int) -> PatternError:
    return PatternError(f"groups nested more than {limit} levels deep", at)


class _Parser:
    def __init__(self, src: str, esc: Escapes, *, search: bool = True) -> None:
        self.src = src
        self.esc = esc
        self.search = search  # unanchored ends match any text (pattern_rx) or none
        self.pos = 0
        self.nesting = Nesting(_group_nesting_error)  # (a lambda on self would be a cycle)
        self.depth = 0  # groups open around the current position

    def error(self, message: str, offset: int | None = None) -> PatternError:
        return PatternError(message, self.pos if offset is None else offset)

    def peek(self) -> str:
        return self.src[self.pos] if self.pos < len(self.src) else ""

    def take(self) -> str:
        if self.pos >= len(self.src):
            raise self.error("unexpected end of pattern")
        c = self.src[self.pos]
        self.pos += 1
        return c

    # alternation := concat ('|' concat)*
    def parse_alt(self) -> _Piece:
        branches = [self.parse_concat()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.parse_concat())
        if len(branches) == 1:
            return branches[0]
        s0, e0 = branches[0].start, branches[0].end
        if all(b.start == s0 and b.end == e0 for b in branches):
            return _Piece(rx.alt(*(b.rx for b in branches)), s0, e0)
        # mixed anchoring: expand each branch to full search form, then it is anchored; exact
        # only when nothing but anchors stands next to this alternation (see parse_concat)
        return _Piece(rx.alt(*(_expand(b, self.esc) for b in branches)), True, True,
                      tuple(branches))

    def parse_concat(self) -> _Piece:
        items: list[_Piece] = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.parse_quantified())
        looks = [it for it in items if it.look]
        if looks:
            if self.depth:
                raise self.error("lookaround assertions are supported only in the pattern's "
                                 "outermost sequence, not inside a group", looks[0].look_at)
            return self._with_lookarounds(items)
        if not items:
            return _Piece(rx.EPSILON)
        if len(items) == 1:
            return items[0]
        mixed = [it for it in items if it.mixed]
        if mixed:
            others = [it for it in items if not it.mixed]
            if len(mixed) > 1 or not all(_is_anchor_only(it) for it in others):
                raise self.error("a group mixing anchored and unanchored alternatives is "
                                 "supported only next to anchors")
            start = any(it.start for it in others)
            end = any(it.end for it in others)
            branches = [_Piece(b.rx, b.start or start, b.end or end) for b in mixed[0].mixed]
            return _Piece(rx.alt(*(_expand(b, self.esc) for b in branches)), True, True)
        # "^" asserts the string start: everything before it must match the empty string;
        # "$" likewise for what follows it (no multiline flag in JSON Schema patterns)
        starts = [i for i, it in enumerate(items) if it.start]
        ends = [i for i, it in enumerate(items) if it.end]
        s = starts[-1] if starts else 0
        e = ends[0] if ends else len(items) - 1
        if e < s:
            empty_only = rx.intersect(rx.concat(*(it.rx for it in items)), rx.EPSILON)
            return _Piece(empty_only, True, True)
        parts = [it.rx for it in items[s:e + 1]]
        if s > 0:
            parts.insert(0, rx.intersect(rx.concat(*(it.rx for it in items[:s])), rx.EPSILON))
        if e < len(items) - 1:
            parts.append(rx.intersect(rx.concat(*(it.rx for it in items[e + 1:])), rx.EPSILON))
        return _Piece(rx.concat(*parts), bool(starts), bool(ends))

    def parse_quantified(self) -> _Piece:
        at = self.pos
        atom = self.parse_atom()
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.pos += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{" and self._brace_quantifier() is not None:
                lo, hi = self._brace_quantifier()  # type: ignore[misc]
                self.pos = self.src.index("}", self.pos) + 1
            else:
                return atom
            if atom.look:
                raise self.error("quantified lookaround assertion is not supported", at)
            if atom.start or atom.end:
                if _is_anchor_only(atom):
                    raise self.error("quantified anchor is not supported", at)
                raise self.error("quantified group containing an anchor is not supported", at)
            if self.peek() == "?":  # lazy quantifier: same language
                self.pos += 1
            if hi is not None and hi > 10_000:
                raise self.error(f"repetition bound {hi} is too large (limit 10000)", at)
            atom = _Piece(rx.repeat(atom.rx, lo, hi))

    def _brace_quantifier(self) -> tuple[int, int | None] | None:
        """``{n}``, ``{n,}``, ``{n,m}`` at pos, or None (then ``{`` is a literal, Annex B)."""
        close = self.src.find("}", self.pos)
        if close < 0:
            return None
        body = self.src[self.pos + 1:close]
        lo_s, comma, hi_s = body.partition(",")
        if not lo_s.isdigit() or (hi_s and not hi_s.isdigit()):
            return None
        lo = int(lo_s)
        hi = (int(hi_s) if hi_s else None) if comma else lo
        if hi is not None and hi < lo:
            raise self.error("numbers out of order in {} quantifier")
        return lo, hi

    def parse_atom(self) -> _Piece:
        c = self.take()
        if c == "^":
            return _Piece(rx.EPSILON, start=True)
        if c == "$":
            return _Piece(rx.EPSILON, end=True)
        if c == ".":
            return _Piece(json_chars_rx(DOT, self.esc))
        if c == "(":
            return self.parse_group()
        if c == "[":
            return _Piece(json_chars_rx(self.parse_class(), self.esc))
        if c == "\\":
            return _Piece(json_chars_rx(self.parse_escape(in_class=False), self.esc))
        if c in "*+?":
            raise self.error("nothing to repeat", self.pos - 1)
        if c == ")":
            raise self.error("unmatched ')'", self.pos - 1)
        if c == "{" and self._brace_quantifier_at(self.pos - 1):
            raise self.error("nothing to repeat", self.pos - 1)
        return _Piece(json_char(ord(c), self.esc))

    def _brace_quantifier_at(self, pos: int) -> bool:
        save = self.pos
        self.pos = pos
        try:
            return self._brace_quantifier() is not None
        finally:
            self.pos = save

    def parse_group(self) -> _Piece:
        at = self.pos - 1
        if self.src.startswith("?", self.pos):
            if self.src.startswith("?:", self.pos):
                self.pos += 2
            elif self.src.startswith("?<", self.pos) and self.src[self.pos + 2:self.pos + 3] not in (
                "=", "!",
            ):
                close = self.src.find(">", self.pos)
                if close < 0:
                    raise self.error("unterminated group name")
                self.pos = close + 1
            else:
                kind = next((k for k in ("=", "!", "<=", "<!")
                             if self.src.startswith("?" + k, self.pos)), None)
                if kind is None:
                    raise self.error("unknown group syntax", at)
                self.pos += 1 + len(kind)
                inner = self._group_body(at)
                if inner.mixed:
                    raise self.error("a lookaround mixing anchored and unanchored "
                                     "alternatives is not supported", at)
                if kind[0] != "<" and inner.start or kind[0] == "<" and inner.end:
                    raise self.error("an anchor facing away from a lookaround's text is not "
                                     "supported", at)
                return _Piece(inner.rx, inner.start, inner.end, look=kind, look_at=at)
        return self._group_body(at)

    def _group_body(self, at: int) -> _Piece:
        self.depth += 1
        try:
            with self.nesting(at):
                inner = self.parse_alt()
        finally:
            self.depth -= 1
        if self.peek() != ")":
            raise self.error("missing ')'", at)
        self.pos += 1
        return inner

    def _with_lookarounds(self, items: list[_Piece]) -> _Piece:
        """The subject strings an outermost sequence with lookarounds matches: a piece
        anchored at both ends (its unanchored ends already widened to any text)."""
        starts = [i for i, it in enumerate(items) if it.start and not it.look]
        ends = [i for i, it in enumerate(items) if it.end and not it.look]
        s = starts[-1] if starts else -1
        e = ends[0] if ends else len(items)
        for it in items:
            if it.mixed:
                raise self.error("a group mixing anchored and unanchored alternatives is not "
                                 "supported beside a lookaround", it.look_at)
        for i, it in enumerate(items):
            if it.look and not s < i < e:
                raise self.error("a lookaround outside the pattern's ^...$ is not supported",
                                 it.look_at)
            if not it.look and not (s <= i <= e):
                if not _is_anchor_only(it):
                    raise self.error("text before ^ or after $ beside a lookaround is not "
                                     "supported", it.look_at)
        anything = rx.star(any_json_char(self.esc))
        pad_left = anything if self.search and s < 0 else rx.EPSILON
        pad_right = anything if self.search and e == len(items) else rx.EPSILON
        body = items[s + 1:e]
        # a lookaround at an end of the subject string looks at all of it: a constraint on
        # the whole, whatever stands between (so ^(?!-)...(?<!-)$ needs no ordering)
        whole = []
        while pad_left == rx.EPSILON and body and body[0].look:
            whole.append(self._at_end(body.pop(0), anything, front=True))
        while pad_right == rx.EPSILON and body and body[-1].look:
            whole.append(self._at_end(body.pop(), anything, front=False))
        return _Piece(rx.intersect(self._looks(body, pad_left, pad_right, anything), *whole),
                      True, True)

    @staticmethod
    def _seen(look: _Piece, anything: int) -> int:
        """What the text a lookaround looks at must match (before any negation)."""
        if look.look in ("=", "!"):
            return look.rx if look.end else rx.concat(look.rx, anything)
        return look.rx if look.start else rx.concat(anything, look.rx)

    def _at_end(self, look: _Piece, anything: int, *, front: bool) -> int:
        """The constraint on the whole subject of a lookaround standing at its start
        (``front``) or end: one facing into the subject sees all of it, one facing out sees
        the empty string."""
        seen = self._seen(look, anything)
        facing_in = (look.look in ("=", "!")) == front
        holds = seen if facing_in else (anything if rx.nullable(seen) else rx.NOTHING)
        return rx.complement(holds) if look.look in ("!", "<!") else holds

    def _looks(self, items: list[_Piece], left: int, right: int, anything: int) -> int:
        """``left · items · right`` with the items' lookarounds applied (see the module doc)."""
        behind = [i for i, it in enumerate(items) if it.look in ("<=", "<!")]
        if behind:
            j = behind[-1]
            ahead = [i for i, it in enumerate(items[:j]) if it.look in ("=", "!")]
            if ahead:
                raise self.error("a lookbehind after a lookahead in one sequence is not "
                                 "supported", items[j].look_at)
            look = items[j]
            prefix = self._looks(items[:j], left, rx.EPSILON, anything)
            seen = self._seen(look, anything)
            head = rx.intersect(prefix, rx.complement(seen) if look.look == "<!" else seen)
            return rx.concat(head, self._looks(items[j + 1:], rx.EPSILON, right, anything))
        tail = right
        for it in reversed(items):
            if not it.look:
                tail = rx.concat(it.rx, tail)
                continue
            ahead = self._seen(it, anything)
            tail = rx.intersect(tail, rx.complement(ahead) if it.look == "!" else ahead)
        return rx.concat(left, tail)

    def parse_class(self) -> CharSet:
        at = self.pos - 1
        neg = self.peek() == "^"
        if neg:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while True:
            if self.pos >= len(self.src):
                raise self.error("unterminated character class", at)
            c = self.take()
            if c == "]":  # ECMA: "[]" is the empty class, "[^]" any character
                break
            lo_set = self._class_atom(c)
            if self.peek() == "-" and self.src[self.pos + 1:self.pos + 2] not in ("]", ""):
                self.pos += 1
                hi_set = self._class_atom(self.take())
                if len(lo_set) != 1 or len(hi_set) != 1 or lo_set[0][0] != lo_set[0][1] \
                        or hi_set[0][0] != hi_set[0][1]:
                    raise self.error("character class escape used as a range bound")
                lo, hi = lo_set[0][0], hi_set[0][0]
                if hi < lo:
                    raise self.error("range out of order in character class")
                ranges.append((lo, hi))
            else:
                ranges.extend(lo_set)
        cs = normalize(ranges)
        return negate(cs) if neg else cs

    def _class_atom(self, c: str) -> CharSet:
        if c == "\\":
            return self.parse_escape(in_class=True)
        return ((ord(c), ord(c)),)

    def parse_escape(self, *, in_class: bool) -> CharSet:
        at = self.pos - 1
        c = self.take()
        simple = {"d": DIGIT, "D": negate(DIGIT), "w": WORD, "W": negate(WORD), "s": SPACE,
                  "S": negate(SPACE)}
        if c in simple:
            return simple[c]
        controls = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
        if c in controls:
            return ((controls[c], controls[c]),)
        if c == "b" and in_class:
            return ((8, 8),)
        if c in "bB":
            raise self.error("word boundary assertions are not supported", at)
        if c == "0" and not self.peek().isdigit():
            return ((0, 0),)
        if c.isdigit():
            raise self.error("backreferences are not supported", at)
        if c == "x":
            return self._hex_escape(2, at)
        if c == "u":
            if self.peek() == "{":
                close = self.src.find("}", self.pos)
                if close < 0:
                    raise self.error("unterminated \\u{...}", at)
                try:
                    cp = int(self.src[self.pos + 1:close], 16)
                except ValueError:
                    raise self.error("bad \\u{...} escape", at) from None
                self.pos = close + 1
                if cp > MAX_CP:
                    raise self.error("code point out of range", at)
                return ((cp, cp),)
            cs = self._hex_escape(4, at)
            hi = cs[0][0]
            if 0xD800 <= hi <= 0xDBFF and self.src.startswith("\\u", self.pos):
                save = self.pos
                self.pos += 2
                lo = self._hex_escape(4, at)[0][0]
                if 0xDC00 <= lo <= 0xDFFF:
                    cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    return ((cp, cp),)
                self.pos = save
            return cs
        if c == "c":
            letter = self.take()
            if not letter.isalpha():
                raise self.error("bad \\c escape", at)
            return ((ord(letter) % 32, ord(letter) % 32),)
        if c in "pP":
            raise self.error("unicode property escapes (\\p{...}) are not supported", at)
        if c == "k":
            raise self.error("named backreferences are not supported", at)
        if c.isalnum():
            raise self.error(f"unknown escape \\{c}", at)
        return ((ord(c), ord(c)),)

    def _hex_escape(self, n: int, at: int) -> CharSet:
        digits = self.src[self.pos:self.pos + n]
        if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise self.error(f"bad \\{'x' if n == 2 else 'u'} escape", at)
        self.pos += n
        cp = int(digits, 16)
        return ((cp, cp),)


def _is_anchor_only(p: _Piece) -> bool:
    return p.rx == rx.EPSILON and (p.start or p.end)


def _expand(p: _Piece, esc: Escapes) -> int:
    parts = [p.rx]
    anything = rx.star(any_json_char(esc))
    if not p.start:
        parts.insert(0, anything)
    if not p.end:
        parts.append(anything)
    return rx.concat(*parts)


@lru_cache(maxsize=2048)
def pattern_rx(pattern: str, esc: Escapes = DEFAULT) -> int:
    """Regex over JSON string bodies (spelled as ``esc`` allows) whose decoded text the ECMA
    ``pattern`` *searches*.

    Cost: linear in the pattern (a lookaround adds an intersection); cached. Raises
    :class:`PatternError` (with the offset) for malformed patterns, for lookarounds that are
    not in the outermost sequence (see the module doc), backreferences, ``\\b`` and
    ``\\p{..}``.
    """
    p = _Parser(pattern, esc)
    piece = p.parse_alt()
    if p.pos != len(pattern):
        raise p.error("unmatched ')'")
    return _expand(piece, esc)


@lru_cache(maxsize=2048)
def anchored_pattern_rx(pattern: str, esc: Escapes = DEFAULT) -> int:
    """Like :func:`pattern_rx` but the whole string must match (used for ``format`` regexes)."""
    p = _Parser(pattern, esc, search=False)
    piece = p.parse_alt()
    if p.pos != len(pattern):
        raise p.error("unmatched ')'")
    return piece.rx
