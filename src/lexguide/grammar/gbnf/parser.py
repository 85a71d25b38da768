"""GBNF (llama.cpp grammar format) parser: text → an AST of rules over code points.

Follows llama.cpp ``src/llama-grammar.cpp`` (``parse_space``, ``parse_sequence``,
``parse_char``, ``parse_token``) and its ``grammars/README.md``, including its line structure:
a newline ends a rule except after ``::=``, after ``|`` and inside ``( … )``. Checks that need
the whole grammar (undefined references, missing root, left recursion as llama.cpp detects it)
are in :func:`check_grammar`. Every error is a :class:`GrammarError` with line:col and caret.

The AST is plain data; :mod:`lexguide.grammar.gbnf` compiles it to the grammar IR and
:mod:`lexguide.grammar.gbnf.to_lark` prints it as Lark-variant text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from lexguide.errors import GrammarError
from lexguide.grammar.ir import TokenSet
from lexguide.limits import Nesting
from lexguide.regex.unicode import negate, normalize

__all__ = [
    "MAX_CODEPOINT",
    "MAX_REPETITION",
    "Alt",
    "Chars",
    "GbnfGrammar",
    "Lit",
    "Node",
    "Ref",
    "Rep",
    "RuleDef",
    "Seq",
    "Tok",
    "check_grammar",
    "parse_gbnf",
]

MAX_CODEPOINT = 0x10FFFF
#: Largest repetition bound accepted in ``x{m,n}`` (llama.cpp's own limit is lower: it refuses
#: repetitions that expand to 2000 rules).
MAX_REPETITION = 100_000


# -- AST (eq=False: nodes are compared and hashed by identity, one node = one occurrence) ----
@dataclass(frozen=True, slots=True, eq=False)
class Chars:
    """One code point out of ``items`` (inclusive ranges), or out of their complement."""

    items: tuple[tuple[int, int], ...]
    negated: bool = False
    dot: bool = False  # written as ``.`` (printing only)

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The matched code points as sorted, disjoint inclusive ranges."""
        merged = normalize(self.items)
        return tuple(negate(merged) if self.negated else merged)


@dataclass(frozen=True, slots=True, eq=False)
class Lit:
    """A string literal; each character is one code point; ``""`` is epsilon."""

    text: str


@dataclass(frozen=True, slots=True, eq=False)
class Ref:
    name: str
    offset: int


@dataclass(frozen=True, slots=True, eq=False)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Alt:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Rep:
    """``item{lo,hi}``; ``hi=None`` is unbounded (``*``, ``+``, ``?`` are ``{0,}``, ``{1,}``,
    ``{0,1}``)."""

    item: Node
    lo: int
    hi: int | None


@dataclass(frozen=True, slots=True, eq=False)
class Tok:
    """A token element ``<[N]>`` / ``<text>`` or its negation ``!<…>``: one vocabulary token."""

    token_set: TokenSet
    source: str  # as written, for printing


Node = Union[Chars, Lit, Ref, Seq, Alt, Rep, Tok]


@dataclass(frozen=True, slots=True)
class RuleDef:
    name: str
    body: Node
    offset: int  # of the rule name
    comments: tuple[str, ...] = ()  # ``#`` comment lines just above the rule (printing only)


@dataclass(frozen=True, slots=True)
class GbnfGrammar:
    """Parsed GBNF: rules in definition order (a later definition of a name replaces it)."""

    text: str
    rules: dict[str, RuleDef]
    refs: tuple[Ref, ...]  # every reference, for the undefined-rule check


# -- parser ------------------------------------------------------------------------------------
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_HEX_LEN = {"x": 2, "u": 4, "U": 8}
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")


def _is_word_char(c: str) -> bool:
    # llama.cpp is_word_char: ASCII letters, digits and '-' (not '_')
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "-"


def _class_end(text: str, pos: int) -> int:
    """Offset of the ``]`` closing a class whose items start at ``pos`` (escapes skipped),
    or -1 when the text ends first."""
    while pos < len(text):
        c = text[pos]
        if c == "]":
            return pos
        pos += 2 if c == "\\" else 1
    return -1


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.refs: list[Ref] = []
        self.nesting = Nesting(
            lambda at, limit: self.error(f"groups nested more than {limit} levels deep", at))

    def error(self, message: str, offset: int | None = None) -> GrammarError:
        at = self.pos if offset is None else offset
        if at >= len(self.text):  # at the end: point just after the last visible character
            at = len(self.text.rstrip("\r\n"))
        return GrammarError(message, text=self.text, offset=at)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def space(self, newline_ok: bool) -> list[str]:
        """Skip blanks and ``#`` comments (and newlines if ``newline_ok``); returns the comments."""
        comments: list[str] = []
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c == " " or c == "\t" or (newline_ok and (c == "\n" or c == "\r")):
                self.pos += 1
            elif c == "#":
                end = self.pos
                while end < n and text[end] not in "\r\n":
                    end += 1
                comments.append(text[self.pos + 1 : end].strip())
                self.pos = end
            else:
                break
        return comments

    def name(self) -> str:
        start = self.pos
        while self.pos < len(self.text) and _is_word_char(self.text[self.pos]):
            self.pos += 1
        if self.pos == start:
            raise self.error("expecting name")
        return self.text[start : self.pos]

    def integer(self) -> int:
        start = self.pos
        while self.peek().isascii() and self.peek().isdigit():
            self.pos += 1
        if self.pos == start:
            raise self.error("expecting integer")
        return int(self.text[start : self.pos])

    def char(self, what: str) -> int:
        """One code point of a literal or class (handles escapes)."""
        c = self.peek()
        if c == "":
            raise self.error(f"unterminated {what}: unexpected end of input")
        if c != "\\":
            self.pos += 1
            return ord(c)
        start = self.pos
        e = self.peek(1)
        if e in _HEX_LEN:
            n = _HEX_LEN[e]
            digits = self.text[self.pos + 2 : self.pos + 2 + n]
            if len(digits) != n or not set(digits) <= _HEXDIGITS:
                raise self.error(f"expecting {n} hex chars after \\{e}", start)
            cp = int(digits, 16)
            if cp > MAX_CODEPOINT:
                raise self.error(f"code point U+{cp:X} is beyond U+10FFFF", start)
            self.pos += 2 + n
            return cp
        if e in _ESCAPES:
            self.pos += 2
            return ord(_ESCAPES[e])
        if e == "":
            raise self.error(f"unterminated {what}: unexpected end of input")
        raise self.error(f"unknown escape \\{e}", start)

    def token(self) -> Tok:
        start = self.pos
        negated = self.peek() == "!"
        if negated:
            self.pos += 1
        if self.peek() != "<":
            raise self.error("expecting '<' after '!'")
        if self.peek(1) == "[":
            self.pos += 2
            if not (self.peek().isascii() and self.peek().isdigit()):
                raise self.error("expecting a token id in <[...]>")
            tid = self.integer()
            if self.peek() != "]" or self.peek(1) != ">":
                raise self.error("expecting ']>' after the token id", self.pos)
            self.pos += 2
            ts = TokenSet(ranges=((tid, tid),), negated=negated)
        else:
            end = self.text.find(">", self.pos + 1)
            ends = (self.text.find("\n", self.pos), self.text.find("\r", self.pos))
            nl = min((i for i in ends if i >= 0), default=-1)
            if end < 0 or (0 <= nl < end):
                raise self.error("unterminated token: expecting '>'", start)
            piece = self.text[self.pos : end + 1]
            if len(piece) <= 2:
                raise self.error("empty token text", start)
            self.pos = end + 1
            ts = TokenSet(names=(piece,), negated=negated)
        return Tok(ts, self.text[start : self.pos])

    def sequence(self, nested: bool) -> Node:
        items: list[Node] = []
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            start = self.pos
            if c == '"':
                self.pos += 1
                chars: list[str] = []
                while self.peek() != '"':
                    if self.peek() == "":
                        raise self.error("unterminated string literal", start)
                    chars.append(chr(self.char("string literal")))
                self.pos += 1
                items.append(Lit("".join(chars)))
            elif c == "[":
                if _class_end(text, self.pos + 1) < 0:
                    raise self.error("unterminated character class: expecting ']'", start)
                self.pos += 1
                negated = self.peek() == "^"
                if negated:
                    self.pos += 1
                ranges: list[tuple[int, int]] = []
                while self.peek() != "]":
                    if self.peek() == "":
                        raise self.error("unterminated character class", start)
                    lo_at = self.pos
                    lo = self.char("character class")
                    hi = lo
                    if self.peek() == "-" and self.peek(1) not in ("]", ""):
                        self.pos += 1
                        hi_at = self.pos
                        hi = self.char("character class")
                        if hi in (0x0A, 0x0D) and text[hi_at] in "\r\n":
                            raise self.error("unterminated character class: the range "
                                             "runs into the next line", start)
                        if hi < lo:
                            raise self.error(f"character range {chr(lo)!r}-{chr(hi)!r} is out "
                                             "of order (the end is below the start)", lo_at)
                    ranges.append((lo, hi))
                self.pos += 1
                items.append(Chars(tuple(ranges), negated))
            elif _is_word_char(c):
                name = self.name()
                ref = Ref(name, start)
                self.refs.append(ref)
                items.append(ref)
            elif c == "(":
                self.pos += 1
                self.space(True)
                with self.nesting(start):
                    inner = self.alternates(True)
                if self.peek() != ")":
                    raise self.error("expecting ')' to close the group" if self.peek() else
                                     "unterminated group: expecting ')'")
                self.pos += 1
                items.append(inner)
            elif c == ".":
                self.pos += 1
                items.append(Chars((), True, dot=True))
            elif c == "<" or c == "!":
                items.append(self.token())
            elif c in "*+?":
                if not items:
                    raise self.error(f"{c!r} has nothing to repeat: expecting an item before it")
                self.pos += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                items[-1] = Rep(items[-1], lo, hi)
            elif c == "{":
                if not items:
                    raise self.error("'{m,n}' has nothing to repeat: expecting an item before it")
                self.pos += 1
                self.space(nested)
                lo = self.integer()
                self.space(nested)
                hi: int | None
                if self.peek() == "}":
                    hi = lo
                elif self.peek() == ",":
                    self.pos += 1
                    self.space(nested)
                    hi = self.integer() if self.peek().isascii() and self.peek().isdigit() else None
                    self.space(nested)
                    if self.peek() != "}":
                        raise self.error("expecting '}'")
                else:
                    raise self.error("expecting ',' or '}'")
                if max(lo, hi or 0) > MAX_REPETITION:
                    raise self.error(f"repetition count above the limit of {MAX_REPETITION}", start)
                if hi is not None and hi < lo:
                    raise self.error(
                        f"repetition {{{lo},{hi}}}: the maximum is below the minimum", start)
                self.pos += 1
                items[-1] = Rep(items[-1], lo, hi)
            else:
                break
            self.space(nested)
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def alternates(self, nested: bool) -> Node:
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return alts[0] if len(alts) == 1 else Alt(tuple(alts))

    def grammar(self) -> GbnfGrammar:
        rules: dict[str, RuleDef] = {}
        comments = self.space(True)
        while self.pos < len(self.text):
            start = self.pos
            if self.peek() == "|":
                raise self.error("a line cannot start with '|': a rule continues on the next line "
                                 "only after '::=' or '|', or inside parentheses (end the "
                                 "previous line with '|')")
            if not _is_word_char(self.peek()):
                raise self.error(f"expecting a rule name (name ::= ...), found {self.peek()!r}")
            name = self.name()
            self.space(False)
            if self.text.startswith("::=", self.pos):
                self.pos += 3
            else:
                raise self.error("expecting ::=")
            self.space(True)
            body = self.alternates(False)
            c = self.peek()
            if c == "\r":
                self.pos += 2 if self.peek(1) == "\n" else 1
            elif c == "\n":
                self.pos += 1
            elif c != "":
                hint = " (a continuation line must follow a trailing '|')" if c == "|" else ""
                raise self.error(f"expecting newline or end{hint}")
            rules[name] = RuleDef(name, body, start, tuple(comments))
            comments = self.space(True)
        return GbnfGrammar(self.text, rules, tuple(self.refs))


def parse_gbnf(text: str) -> GbnfGrammar:
    """Parse GBNF text. Raises :class:`GrammarError` (line:col, caret) on a syntax error."""
    return _Parser(text).grammar()


# -- whole-grammar checks ------------------------------------------------------------------------
def nullable_rules(g: GbnfGrammar) -> set[str]:
    """Names of the rules that derive the empty string (fixed point)."""
    result: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, rd in g.rules.items():
            if name not in result and node_nullable(rd.body, result):
                result.add(name)
                changed = True
    return result


def node_nullable(node: Node, nullable: set[str]) -> bool:
    if isinstance(node, Lit):
        return node.text == ""
    if isinstance(node, (Chars, Tok)):
        return False
    if isinstance(node, Ref):
        return node.name in nullable
    if isinstance(node, Seq):
        return all(node_nullable(x, nullable) for x in node.items)
    if isinstance(node, Alt):
        return any(node_nullable(x, nullable) for x in node.items)
    assert isinstance(node, Rep)
    return node.lo == 0 or node.hi == 0 or node_nullable(node.item, nullable)


def _left_refs(node: Node, nullable: set[str], out: set[str]) -> None:
    """Rule names that can start ``node`` (reachable in leftmost position through nullables)."""
    if isinstance(node, Ref):
        out.add(node.name)
    elif isinstance(node, Seq):
        for x in node.items:
            _left_refs(x, nullable, out)
            if not node_nullable(x, nullable):
                break
    elif isinstance(node, Alt):
        for x in node.items:
            _left_refs(x, nullable, out)
    elif isinstance(node, Rep) and node.hi != 0:
        _left_refs(node.item, nullable, out)


def check_grammar(g: GbnfGrammar, root: str = "root") -> None:
    """Whole-grammar checks llama.cpp makes when parsing and initialising a grammar.

    Raises :class:`GrammarError` for an undefined rule (at the reference), a missing start rule,
    and left recursion (llama.cpp's pushdown matcher refuses it).
    """
    for ref in g.refs:
        if ref.name not in g.rules:
            raise GrammarError(f"undefined rule identifier {ref.name!r}", text=g.text,
                               offset=ref.offset)
    if root not in g.rules:
        raise GrammarError(f"grammar does not contain a {root!r} rule", text=g.text,
                           offset=len(g.text.rstrip()))
    nullable = nullable_rules(g)
    left: dict[str, set[str]] = {}
    for name, rd in g.rules.items():
        out: set[str] = set()
        _left_refs(rd.body, nullable, out)
        left[name] = out
    cyclic = _on_cycles(left)  # linear: a search per rule was quadratic in a chain of rules
    for name, rd in g.rules.items():
        if name in cyclic:
            raise GrammarError(
                f"left recursion: rule {name!r} can derive itself in leftmost position "
                "(llama.cpp refuses left-recursive grammars; rewrite with repetition)",
                text=g.text, offset=rd.offset)


def _on_cycles(edges: dict[str, set[str]]) -> set[str]:
    """The nodes of ``edges`` (node -> successors) that lie on a cycle: those of strongly
    connected components with more than one node or a self-loop. Tarjan's algorithm, iterative
    (any depth), linear in nodes plus edges."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: set[str] = set()
    for start, successors in edges.items():
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(successors))]
        while work:
            v, succ = work[-1]
            for w in succ:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1 or v in edges[v]:
                        out.update(component)
    return out
