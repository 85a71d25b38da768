"""Regex text -> :mod:`lexguide.regex.nodes` nodes: the Rust ``regex`` crate syntax as llguidance
uses it (spec ``lark-syntax.md`` section 5.2).

Unicode mode by default: literals, ``.``, classes and ``\\p{..}`` match whole UTF-8 encoded
characters. The pattern is implicitly anchored; ``^``/``\\A`` where nothing can have been
consumed yet and ``$``/``\\z`` where nothing can follow are accepted and ignored (as in
llguidance). Lookarounds, word boundaries and backreferences raise :class:`RegexError` --
there is no backtracking anywhere. Non-greedy quantifiers are accepted and treated as greedy
(laziness is a lexeme property).

Flags: ``i`` (Unicode simple case folding), ``s`` (``.`` matches ``\\n``), ``m`` (``^``/``$``
become line anchors, hence a lookaround error), ``x`` (whitespace and ``#`` comments are
ignored), ``u`` (Unicode; ``(?-u)`` makes ``\\w\\d\\s`` ASCII and -- only with
``allow_invalid_utf8`` -- lets ``\\xHH``/``.``/classes match raw bytes). ``U`` and ``R`` are
accepted and have no effect here.

Not supported (clear RegexError): Unicode scripts and binary properties other than the general
categories, ``Any``, ``ASCII``, ``Assigned``.
"""

from __future__ import annotations

from lexguide.errors import LimitExceeded, RegexError
from lexguide.limits import MAX_NESTING_DEPTH
from lexguide.regex import nodes as rx
from lexguide.regex import unicode as ut

__all__ = ["MAX_NESTING", "format_regex", "parse_regex"]

#: maximum group/class nesting depth (bounds recursion)
MAX_NESTING = MAX_NESTING_DEPTH

_HEX = "0123456789abcdefABCDEF"
# compiled patterns (emptied when a new generation starts: rx.building)
_memo: dict[tuple[str, str, bool], int] = {}
rx.on_rotate(_memo.clear)
_MEMO_SIZE = 4096
_SIMPLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07}
_LOOKAROUND = "lookarounds not supported"


class _Flags:
    __slots__ = ("i", "m", "s", "u", "x")

    def __init__(
        self, i: bool = False, s: bool = False, x: bool = False, u: bool = True, m: bool = False
    ) -> None:
        self.i, self.s, self.x, self.u, self.m = i, s, x, u, m

    def copy(self) -> _Flags:
        return _Flags(self.i, self.s, self.x, self.u, self.m)


class _Parser:
    def __init__(self, pattern: str, flags: str, allow_invalid_utf8: bool) -> None:
        self.p = pattern
        self.n = len(pattern)
        self.pos = 0
        self.bytes_ok = allow_invalid_utf8
        self.flags = _Flags()
        for c in flags:
            if c == "l":
                raise RegexError("l-flag is not supported in regexes", pattern=pattern)
            if c not in "imsux":
                raise RegexError(f"unknown regex flag {c!r}", pattern=pattern)
            self._set_flag(c, True, 0)
        self.depth = 0
        self.n_anchors = 0
        self.last_end_anchor = -1

    # -- helpers -----------------------------------------------------------------------------
    def err(self, msg: str, offset: int | None = None) -> RegexError:
        return RegexError(msg, pattern=self.p, offset=self.pos if offset is None else offset)

    def _set_flag(self, c: str, on: bool, at: int) -> None:
        if c in "isxum":
            setattr(self.flags, c, on)
        elif c not in "UR":
            raise self.err(f"unrecognized flag {c!r}", at)

    def skip_ws(self) -> None:
        if not self.flags.x:
            return
        p = self.p
        while self.pos < self.n:
            c = p[self.pos]
            if c.isspace():
                self.pos += 1
            elif c == "#":
                while self.pos < self.n and p[self.pos] != "\n":
                    self.pos += 1
            else:
                break

    def peek(self) -> str:
        self.skip_ws()
        return self.p[self.pos] if self.pos < self.n else ""

    def char_node(self, cp: int) -> int:
        if 0xD800 <= cp <= 0xDFFF:
            raise self.err(f"lone surrogate U+{cp:04X} cannot be matched in UTF-8", self.pos - 1)
        if self.flags.i:
            return rx.codepoint_ranges(ut.case_fold_ranges([(cp, cp)]))
        return rx.literal(chr(cp).encode("utf-8"))

    def ranges_node(self, ranges: ut.Ranges, at: int) -> int:
        if self.flags.u:
            return rx.codepoint_ranges(ranges)
        if ranges and ranges[-1][1] > 0x7F:
            if not self.bytes_ok:
                raise self.err("pattern can match invalid UTF-8", at)
            ranges = ut.intersect_ranges(ranges, [(0, 0xFF)])
        return rx.byteset(b for lo, hi in ranges for b in range(lo, hi + 1))

    # -- grammar -----------------------------------------------------------------------------
    def parse(self) -> int:
        node = self.alternation(top=True)
        if self.pos < self.n:
            raise self.err("unopened group: unmatched ')'")
        return node

    def alternation(self, top: bool = False) -> int:
        """Branches separated by ``|``; ``top``: this group can only be entered at offset 0."""
        branches = [self.concatenation(top)]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.concatenation(top))
        return rx.alt(*branches)

    def concatenation(self, at_start: bool) -> int:
        """Items up to ``|``/``)``. Anchors (``^ $ \\A \\z``) are no-ops where llguidance
        accepts them -- ``^`` before anything was consumed, ``$`` after which nothing follows --
        and a lookaround error anywhere else (also when quantified, or ``^``/``$`` under ``m``)."""
        items: list[int] = []
        start_ok = at_start
        end_at: int | None = None  # offset of an end anchor that nothing may follow
        while True:
            c = self.peek()
            if c == "" or c == "|" or c == ")":
                return rx.concat(*items)
            start = self.pos
            p = self.p
            if c == "^" or c == "$" or p.startswith(("\\A", "\\z"), start):
                is_start = c == "^" or p.startswith("\\A", start)
                self.pos += 1 if c in "^$" else 2
                if (c in "^$" and self.flags.m) or (is_start and not start_ok):
                    raise self.err(_LOOKAROUND, start)
                if self.quantifier_ahead():
                    raise self.err(_LOOKAROUND, start)
                self.n_anchors += 1
                if not is_start:
                    end_at = start
                    self.last_end_anchor = start
                continue
            if c in "*+?" or (c == "{" and self.counted_ahead()):
                raise self.err("repetition operator missing expression")
            if end_at is not None:
                raise self.err(_LOOKAROUND + " ($ or \\z must end the regex)", end_at)
            anchors, ends = self.n_anchors, self.last_end_anchor
            atom = self.atom(start_ok)
            if atom is None:  # a flag group such as (?i): affects the rest of this group
                continue
            if self.n_anchors != anchors:
                if self.quantifier_ahead():
                    raise self.err(_LOOKAROUND + " (quantified anchor)", start)
                if self.last_end_anchor != ends:
                    end_at = self.last_end_anchor
            start_ok = False
            items.append(self.quantifiers(atom))

    def quantifier_ahead(self) -> bool:
        c = self.peek()
        return c in ("*", "+", "?") or (c == "{" and self.counted_ahead())

    def counted_ahead(self) -> bool:
        j = self.pos + 1
        while j < self.n and (self.p[j].isdigit() or self.p[j] in ", \t\n\r"):
            j += 1
        return j < self.n and self.p[j] == "}" and j > self.pos + 1

    def quantifiers(self, atom: int) -> int:
        while True:
            c = self.peek()
            start = self.pos
            if c == "*":
                self.pos += 1
                lo, hi = 0, None
            elif c == "+":
                self.pos += 1
                lo, hi = 1, None
            elif c == "?":
                self.pos += 1
                lo, hi = 0, 1
            elif c == "{":
                lo, hi = self.counted()
            else:
                return atom
            if self.pos < self.n and self.p[self.pos] == "?":
                self.pos += 1  # non-greedy: treated as greedy
            try:
                atom = rx.repeat(atom, lo, hi)
            except LimitExceeded as e:
                raise self.err(f"repetition too large ({e})", start) from e

    def counted(self) -> tuple[int, int | None]:
        start = self.pos
        self.pos += 1
        end = self.p.find("}", self.pos)
        if end < 0:
            raise self.err("unclosed counted repetition", start)
        parts = [part.strip(" \t\n\r") for part in self.p[self.pos : end].split(",")]
        ok = len(parts) <= 2 and parts[0].isdigit() and all(p == "" or p.isdigit() for p in parts)
        if not ok or not all(p.isascii() for p in parts):
            raise self.err("invalid counted repetition: expected {n}, {n,} or {n,m}", start)
        lo = int(parts[0])
        hi: int | None = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if hi is not None and hi < lo:
            raise self.err("invalid counted repetition: min is greater than max", start)
        limit = rx.LIMITS["max_repeat"]
        if lo > limit or (hi is not None and hi > limit):
            raise self.err(f"counted repetition exceeds max_repeat={limit}", start)
        self.pos = end + 1
        return lo, hi

    def atom(self, at_start: bool = False) -> int | None:
        c = self.p[self.pos]
        start = self.pos
        if c == "(":
            return self.group(at_start)
        if c == "[":
            return self.char_class()
        if c == ".":
            self.pos += 1
            if not self.flags.u:
                if not self.bytes_ok:
                    raise self.err("pattern can match invalid UTF-8", start)
                return rx.byteset(b for b in range(256) if self.flags.s or b != 10)
            return rx.any_char(self.flags.s)
        if c == "\\":
            return self.escape_atom()
        if c == "{":
            # a literal brace is an error in Rust unless escaped
            raise self.err("invalid counted repetition: unescaped '{'")
        self.pos += 1
        return self.char_node(ord(c))

    def group(self, at_start: bool = False) -> int | None:
        start = self.pos
        self.pos += 1
        saved = self.flags.copy()
        p = self.p
        if p.startswith("?", self.pos):
            self.pos += 1
            rest = p[self.pos : self.pos + 3]
            if rest.startswith(("=", "!", "<=", "<!")):
                raise self.err(_LOOKAROUND, start)
            if rest.startswith(("P<", "<")):
                self.pos += 2 if rest.startswith("P") else 1
                close = p.find(">", self.pos)
                name = p[self.pos : close] if close >= 0 else ""
                if close < 0 or not name or not all(ch.isalnum() or ch in "_.[]" for ch in name):
                    raise self.err("invalid capture group name", self.pos)
                self.pos = close + 1
            elif rest.startswith("P="):
                raise self.err("backreferences not supported", start)
            else:
                on = True
                seen_flags: set[str] = set()
                while True:
                    if self.pos >= self.n:
                        raise self.err("unclosed group", start)
                    ch = p[self.pos]
                    if ch == ")":
                        self.pos += 1
                        return None  # flags apply to the rest of the enclosing group
                    if ch == ":":
                        self.pos += 1
                        break
                    if ch in seen_flags or (ch == "-" and not on):
                        raise self.err(f"duplicate flag {ch!r}", self.pos)
                    seen_flags.add(ch)
                    if ch == "-":
                        on = False
                    else:
                        self._set_flag(ch, on, self.pos)
                    self.pos += 1
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.err(f"regex nested too deeply (limit {MAX_NESTING})", start)
        node = self.alternation(at_start)
        self.depth -= 1
        if self.peek() != ")":
            raise self.err("unclosed group", start)
        self.pos += 1
        self.flags = saved
        return node

    # -- escapes -------------------------------------------------------------------------------
    def escape_atom(self) -> int:
        start = self.pos
        r = self.escape(in_class=False)
        if isinstance(r, int):
            if not self.flags.u and r > 0x7F:
                if not self.bytes_ok:
                    raise self.err("pattern can match invalid UTF-8", start)
                return rx.byteset([r])
            return self.char_node(r)
        if self.flags.i:
            r = ut.case_fold_ranges(r)
        return self.ranges_node(r, start)

    def hex_escape(self, fixed: int) -> int:
        start = self.pos - 2
        p = self.p
        if p.startswith("{", self.pos):
            end = p.find("}", self.pos)
            digits = p[self.pos + 1 : end] if end >= 0 else ""
            if not digits or len(digits) > 8 or any(d not in _HEX for d in digits):
                raise self.err("invalid hexadecimal escape", start)
            self.pos = end + 1
        else:
            digits = p[self.pos : self.pos + fixed]
            if len(digits) != fixed or any(d not in _HEX for d in digits):
                raise self.err(f"invalid hexadecimal escape: expected {fixed} hex digits", start)
            self.pos += fixed
        cp = int(digits, 16)
        if cp > ut.MAX_CP or 0xD800 <= cp <= 0xDFFF:
            raise self.err("hexadecimal escape is not a Unicode scalar value", start)
        return cp

    def escape(self, in_class: bool) -> int | ut.Ranges:
        """Parse ``\\...`` at ``pos``: a code point (int) or a class (ranges)."""
        start = self.pos
        self.pos += 1
        if self.pos >= self.n:
            raise self.err("incomplete escape sequence", start)
        c = self.p[self.pos]
        self.pos += 1
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if c == "x":
            return self.hex_escape(2)
        if c == "u":
            return self.hex_escape(4)
        if c == "U":
            return self.hex_escape(8)
        if c in "dswDSW":
            r = ut.perl_class(c.lower(), self.flags.u)
            return ut.negate(r) if c.isupper() else r
        if c in "pP":
            return self.unicode_class(c == "P", start)
        if c in "bBAzZ<>":
            raise self.err(_LOOKAROUND, start)
        if c.isdigit() or c == "k":
            raise self.err("backreferences not supported", start)
        if c.isascii() and not c.isalnum():
            return ord(c)
        raise self.err(f"unrecognized escape sequence \\{c}", start)

    def unicode_class(self, negated: bool, start: int) -> ut.Ranges:
        p = self.p
        if p.startswith("{", self.pos):
            end = p.find("}", self.pos)
            if end < 0:
                raise self.err("unclosed Unicode class", start)
            name = p[self.pos + 1 : end].strip()
            self.pos = end + 1
        elif self.pos < self.n:
            name = p[self.pos]
            self.pos += 1
        else:
            raise self.err("incomplete Unicode class escape", start)
        if "=" in name or ":" in name:
            prop, _, value = name.replace(":", "=").partition("=")
            if ut._prop_key(prop) not in ("gc", "generalcategory"):
                raise self.err(f"Unicode property {name!r} is not supported", start)
            name = value
        r = ut.general_category(name)
        if r is None:
            raise self.err(
                f"Unicode class \\p{{{name}}} is not supported (only general categories, "
                "Any, ASCII and Assigned; scripts and binary properties are not)",
                start,
            )
        return ut.negate(r) if negated else r

    # -- character classes ---------------------------------------------------------------------
    def char_class(self) -> int:
        start = self.pos
        r = self.class_body()
        return self.ranges_node(r, start)

    def class_body(self) -> ut.Ranges:
        """Parse ``[...]`` at ``pos`` (nested classes, ``&&``, ``--``, ``~~``, ``^``)."""
        start = self.pos
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.err(f"regex nested too deeply (limit {MAX_NESTING})", start)
        self.pos += 1
        negated = False
        if self.pos < self.n and self.p[self.pos] == "^":
            negated = True
            self.pos += 1
        acc = self.class_union(start, first=True)
        while True:
            if self.pos >= self.n:
                raise self.err("unclosed character class", start)
            op = self.p[self.pos : self.pos + 2]
            if op in ("&&", "--", "~~"):
                self.pos += 2
                rhs = self.class_union(start, first=False)
                if op == "&&":
                    acc = ut.intersect_ranges(acc, rhs)
                elif op == "--":
                    acc = ut.difference(acc, rhs)
                else:
                    acc = ut.symmetric_difference(acc, rhs)
            else:  # "]"
                self.pos += 1
                break
        self.depth -= 1
        if self.flags.i:
            acc = ut.case_fold_ranges(acc)
        return ut.negate(acc) if negated else acc

    def class_union(self, start: int, first: bool) -> ut.Ranges:
        p = self.p
        items: ut.Ranges = []
        while True:
            self.skip_ws()
            if self.pos >= self.n:
                raise self.err("unclosed character class", start)
            c = p[self.pos]
            if c == "]" and not (first and not items and self._at_class_start(start)):
                return ut.normalize(items)
            if p.startswith(("&&", "--", "~~"), self.pos):
                return ut.normalize(items)
            if c == "[":
                if p.startswith("[:", self.pos):
                    end = p.find(":]", self.pos + 2)
                    if end >= 0:
                        name = p[self.pos + 2 : end]
                        neg = name.startswith("^")
                        r = ut.posix_class(name[1:] if neg else name)
                        if r is None:
                            raise self.err(f"invalid POSIX class [:{name}:]")
                        self.pos = end + 2
                        items.extend(ut.negate(r) if neg else r)
                        continue
                items.extend(self.class_body())
                continue
            lo_at = self.pos
            lo = self.class_atom()
            if isinstance(lo, list):
                if p.startswith("-", self.pos) and not p.startswith(("-]", "--"), self.pos):
                    raise self.err("invalid character class range: start is a class", lo_at)
                items.extend(lo)
                continue
            self.skip_ws()
            if p.startswith("-", self.pos) and not p.startswith(("-]", "--"), self.pos):
                self.pos += 1
                self.skip_ws()
                hi = self.class_atom()
                if isinstance(hi, list):
                    raise self.err("invalid character class range: end is a class", lo_at)
                if hi < lo:
                    raise self.err("invalid character class range: start > end", lo_at)
                items.append((lo, hi))
            else:
                items.append((lo, lo))

    def _at_class_start(self, start: int) -> bool:
        """Is ``pos`` right after ``[`` or ``[^`` (where ``]`` is a literal)?"""
        return self.pos == start + 1 or (self.pos == start + 2 and self.p[start + 1] == "^")

    def class_atom(self) -> int | ut.Ranges:
        if self.pos >= self.n:
            raise self.err("unclosed character class")
        c = self.p[self.pos]
        if c == "\\":
            at = self.pos
            if self.p.startswith("\\b", self.pos):
                raise self.err("\\b (word boundary) is not allowed in a character class")
            r = self.escape(in_class=True)
            if isinstance(r, int) and not self.flags.u and r > 0x7F and not self.bytes_ok:
                raise self.err("pattern can match invalid UTF-8", at)
            return r
        self.pos += 1
        return ord(c)


def parse_regex(pattern: str, flags: str = "", *, allow_invalid_utf8: bool = False) -> int:
    """Compile ``pattern`` (Rust regex syntax, anchored) to an :mod:`rx` node id.

    Raises RegexError (with offset) for invalid or unsupported syntax, LimitExceeded when the
    regex creates more than ``rx.LIMITS["max_regex_nodes"]`` new nodes.
    """
    key = (pattern, flags, allow_invalid_utf8)
    cached = _memo.get(key)
    if cached is not None:
        return cached
    before = rx.n_nodes()
    node = _Parser(pattern, flags, allow_invalid_utf8).parse()
    created = rx.n_nodes() - before
    if created > rx.LIMITS["max_regex_nodes"]:
        raise LimitExceeded(
            "max_regex_nodes",
            rx.LIMITS["max_regex_nodes"],
            f"resource limit max_regex_nodes={rx.LIMITS['max_regex_nodes']} exceeded by "
            f"regex {pattern[:80]!r} ({created} nodes)",
        )
    if len(_memo) >= _MEMO_SIZE:
        _memo.clear()
    _memo[key] = node
    return node


# -- printing (the inverse direction: nodes -> regex-like text) --------------------------------
def _fmt_bytes(m: int) -> str:
    if m == rx._FULL:
        return "[\\x00-\\xff]"
    parts = []
    b = 0
    while b < 256:
        if (m >> b) & 1:
            e = b
            while e + 1 < 256 and (m >> (e + 1)) & 1:
                e += 1
            parts.append(_fmt_byte(b) if b == e else f"{_fmt_byte(b)}-{_fmt_byte(e)}")
            b = e + 1
        else:
            b += 1
    if len(parts) == 1 and "-" not in parts[0]:
        return parts[0]
    return "[" + "".join(parts) + "]"


def _fmt_byte(b: int) -> str:
    c = chr(b)
    if 0x21 <= b < 0x7F and c not in "\\[]^-.|()*+?{}&~$":
        return c
    return f"\\x{b:02x}"


def format_regex(x: int, max_len: int = 2000) -> str:
    """A readable regex-like rendering of ``x`` (for errors and debugging), truncated."""
    out: list[str] = []
    budget = [max_len]

    def emit(s: str) -> None:
        budget[0] -= len(s)
        out.append(s)

    def go(x: int, prec: int) -> None:
        if budget[0] < 0:
            return
        k, a = rx.kind(x), rx.args(x)
        if k == rx.K_NOTHING:
            emit("[]")
        elif k == rx.K_EPS:
            emit("()")
        elif k == rx.K_BYTES:
            emit(_fmt_bytes(a[0]))
        elif k == rx.K_CONCAT:
            if prec > 1:
                emit("(")
            while rx.kind(x) == rx.K_CONCAT and budget[0] >= 0:  # iterative: long literals
                go(rx.args(x)[0], 2)
                x = rx.args(x)[1]
            go(x, 2)
            if prec > 1:
                emit(")")
        elif k in (rx.K_ALT, rx.K_AND):
            if prec > 0:
                emit("(")
            for i, c in enumerate(a):
                if i:
                    emit("|" if k == rx.K_ALT else "&")
                go(c, 1)
            if prec > 0:
                emit(")")
        elif k == rx.K_NOT:
            emit("~")
            go(a[0], 3)
        else:
            go(a[0], 3)
            if k == rx.K_STAR:
                emit("*")
            else:
                emit(f"{{{a[1]},{'' if a[2] < 0 else a[2]}}}")

    go(x, 0)
    s = "".join(out)
    return s if budget[0] >= 0 else s[:max_len] + "..."
