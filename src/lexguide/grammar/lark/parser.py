"""Recursive-descent parser for the llguidance Lark variant: tokens → AST (spec §3, §4, §9).

Only syntax is checked here; name resolution, regex compilation and most semantic errors are
left to :mod:`lexguide.grammar.lark.compiler`, which (like llguidance) compiles only what is
reachable from ``start``. Every AST node keeps the character offset of its first token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from lexguide.errors import GrammarError
from lexguide.grammar.lark.lexer import Kind, Token, decode_string, lex_lark
from lexguide.limits import MAX_NESTING_DEPTH

__all__ = [
    "MAX_GROUP_DEPTH",
    "MAX_NESTING",
    "Alias",
    "Atom",
    "CharRange",
    "Expansions",
    "Expr",
    "GrammarRef",
    "Group",
    "Ignore",
    "Import",
    "JsonValue",
    "Literal",
    "Name",
    "NestedLark",
    "Options",
    "ParsedLark",
    "RegexExt",
    "RegexLit",
    "RuleDef",
    "SpecialToken",
    "TermDef",
    "Unsupported",
    "Value",
    "parse_lark",
]  # fmt: skip

MAX_NESTING = 30  # %lark inside %lark (llguidance's limit)
MAX_GROUP_DEPTH = MAX_NESTING_DEPTH  # ( [ nesting inside one expression (lexguide.limits)
MAX_COUNT = 2**31 - 1


# -- values (§5) ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Literal:
    text: str
    case_insensitive: bool
    offset: int
    src: str


@dataclass(frozen=True, slots=True)
class RegexLit:
    pattern: str
    flags: str
    offset: int
    src: str


@dataclass(frozen=True, slots=True)
class CharRange:
    lo: str
    hi: str
    offset: int
    src: str


@dataclass(frozen=True, slots=True)
class Name:
    name: str
    offset: int


@dataclass(frozen=True, slots=True)
class SpecialToken:
    text: str
    offset: int


@dataclass(frozen=True, slots=True)
class GrammarRef:
    name: str
    offset: int


@dataclass(frozen=True, slots=True)
class JsonValue:
    """``%json {...}`` (an inline JSON Schema)."""

    schema: Any
    offset: int


@dataclass(frozen=True, slots=True)
class RegexExt:
    """``%regex {...}`` (substring automata)."""

    spec: Any
    offset: int


@dataclass(frozen=True, slots=True)
class NestedLark:
    grammar: ParsedLark
    offset: int


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A construct that parses but cannot be compiled (template uses)."""

    message: str
    offset: int


_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class ParamExpr:
    """The parameter passed by ``name::expr`` (llguidance's parametric rules): a constant, ``_``
    (the caller's parameter) or a function of it. ``args`` are ints or ``(lo, hi)`` bit ranges."""

    func: str  # "const", "_", "set_bit", "clear_bit", "bit_and", "bit_or", "incr", "decr"
    args: tuple
    offset: int

    @property
    def uses_param(self) -> bool:
        return self.func != "const"

    def evaluate(self, p: int) -> int:
        f, a = self.func, self.args
        if f == "const":
            return a[0]
        if f == "_":
            return p
        if f == "set_bit":
            return p | 1 << a[0]
        if f == "clear_bit":
            return p & ~(1 << a[0]) & _MASK64
        if f == "bit_and":
            return p & a[0]
        if f == "bit_or":
            return p | a[0]
        (lo, hi), = a  # incr / decr: saturating, on the bit field [lo:hi]
        width = (1 << (hi - lo)) - 1
        field = p >> lo & width
        field = min(field + 1, width) if f == "incr" else max(field - 1, 0)
        return (p & ~(width << lo) & _MASK64) | field << lo


@dataclass(frozen=True, slots=True)
class Condition:
    """A ``%if`` guard on an alternative of a parametric rule (§13)."""

    func: str
    args: tuple  # ints, (lo, hi) bit ranges, or Conditions for and/or/not
    offset: int

    def holds(self, p: int) -> bool:
        f, a = self.func, self.args
        if f == "true":
            return True
        if f == "and":
            return a[0].holds(p) and a[1].holds(p)
        if f == "or":
            return a[0].holds(p) or a[1].holds(p)
        if f == "not":
            return not a[0].holds(p)
        if f in ("bit_set", "bit_clear"):
            return bool(p >> a[0] & 1) == (f == "bit_set")
        lo, hi = a[0]
        width = (1 << (hi - lo)) - 1
        field = p >> lo & width
        if f == "is_ones":
            return field == width
        if f == "is_zeros":
            return field == 0
        if f.startswith("bit_count_"):
            return _COMPARE[f[len("bit_count_"):]](bin(field).count("1"), a[1])
        return _COMPARE[f](field, a[1])


_COMPARE = {"eq": int.__eq__, "ne": int.__ne__, "lt": int.__lt__, "le": int.__le__,
            "gt": int.__gt__, "ge": int.__ge__}
# name -> argument kinds: "n" an int, "r" a bit range, "c" a condition
_PARAM_FUNCS = {"set_bit": "n", "clear_bit": "n", "bit_and": "n", "bit_or": "n", "incr": "r", "decr": "r"}
_CONDITIONS = {"true": "", "bit_set": "n", "bit_clear": "n", "is_ones": "r", "is_zeros": "r",
               "and": "cc", "or": "cc", "not": "c",
               **{op: "rn" for op in _COMPARE}, **{f"bit_count_{op}": "rn" for op in _COMPARE}}


@dataclass(frozen=True, slots=True)
class ParamRef:
    """``name::expr``: a parametric rule instantiated with a parameter value."""

    name: str
    param: ParamExpr
    offset: int


Value = Union[
    Literal, RegexLit, CharRange, Name, SpecialToken, GrammarRef, JsonValue, RegexExt,
    NestedLark, Unsupported, ParamRef,
]  # fmt: skip


# -- expressions (§4) ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Group:
    """``( ... )``, or ``[ ... ]`` when ``optional``."""

    body: Expansions
    optional: bool
    offset: int


@dataclass(frozen=True, slots=True)
class Atom:
    inner: Group | Value
    negated: bool  # prefix "~": complement (terminal algebra)
    offset: int


@dataclass(frozen=True, slots=True)
class Expr:
    atom: Atom
    op: str | None  # "*", "+", "?"
    count: tuple[int, int | None] | None  # {n,m}, ~ n..m; None upper bound = unbounded
    offset: int


@dataclass(frozen=True, slots=True)
class Alias:
    """One alternative: ``conjuncts[0] & conjuncts[1] & ...`` (usually one conjunct)."""

    conjuncts: tuple[tuple[Expr, ...], ...]
    offset: int
    condition_offset: int | None = None  # "%if" guard (parametric grammars)
    condition: Condition | None = None


@dataclass(frozen=True, slots=True)
class Expansions:
    alternatives: tuple[Alias, ...]
    offset: int


# -- items (§3) -----------------------------------------------------------------------------
@dataclass(slots=True)
class RuleDef:
    name: str
    offset: int
    body: Expansions
    lazy: bool = False
    stop: Value | None = None
    suffix: Value | None = None
    stop_offset: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    capture: str | None = None
    stop_capture: str | None = None
    stop_capture_offset: int | None = None
    attrs_offset: int | None = None
    parametric: bool = False


@dataclass(slots=True)
class TermDef:
    name: str
    offset: int
    body: Expansions


@dataclass(frozen=True, slots=True)
class Ignore:
    body: Expansions
    offset: int


@dataclass(frozen=True, slots=True)
class Import:
    """``%import path [-> alias]`` or ``%import path (A, B)`` (``names`` = ((name, alias),...))."""

    path: str
    names: tuple[tuple[str, str], ...]
    offset: int


@dataclass(frozen=True, slots=True)
class Options:
    value: Any
    offset: int


@dataclass(slots=True)
class ParsedLark:
    """One (possibly nested) grammar: definitions in source order plus statements."""

    rules: dict[str, RuleDef] = field(default_factory=dict)
    terms: dict[str, TermDef] = field(default_factory=dict)
    ignores: list[Ignore] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    options: list[Options] = field(default_factory=list)


_ATOM_END = {")", "]", "}", "|", "->", "&"}


class _Parser:
    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.toks = tokens
        self.n = len(tokens)
        self.pos = 0
        self.group_depth = 0

    # -- token helpers --------------------------------------------------------------------
    def peek(self, k: int = 0) -> Token:
        i = self.pos + k
        return self.toks[i] if i < self.n else self.toks[-1]

    def at(self, kind: Kind, text: str | None = None, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind is kind and (text is None or tok.text == text)

    def punct(self, text: str, k: int = 0) -> bool:
        tok = self.toks[self.pos] if k == 0 else self.peek(k)
        return tok.kind is Kind.PUNCT and tok.text == text

    def take(self) -> Token:
        tok = self.toks[self.pos]
        if self.pos < self.n - 1:  # never step past EOF
            self.pos += 1
        return tok

    def error(self, message: str, offset: int | None = None) -> GrammarError:
        where = self.peek().offset if offset is None else offset
        return GrammarError(message, text=self.text, offset=where)

    def expect(self, kind: Kind, text: str | None = None, what: str | None = None) -> Token:
        if not self.at(kind, text):
            want = what or (repr(text) if text else kind.value)
            raise self.error(f"Expected {want}, found {self.peek().describe()}")
        return self.take()

    def expect_punct(self, text: str) -> Token:
        return self.expect(Kind.PUNCT, text)

    def number(self) -> int:
        tok = self.expect(Kind.NUMBER)
        try:
            value = int(tok.text)
        except ValueError:
            raise self.error(f"expected an integer, found {tok.text!r}", tok.offset) from None
        if abs(value) > MAX_COUNT:
            raise self.error(f"number {tok.text} is too large", tok.offset)
        return value

    # -- items ----------------------------------------------------------------------------
    def grammar(self, depth: int, closing: str | None, opener: int = 0) -> ParsedLark:
        g = ParsedLark()
        while True:
            while self.at(Kind.NEWLINE):
                self.take()
            if closing is not None and self.punct(closing):
                return g
            if self.at(Kind.EOF):
                if closing is not None:
                    raise self.error("Unmatched %lark { ... }: expected '}'", opener)
                return g
            self.item(g, depth)  # like llguidance, items need no newline between them

    def item(self, g: ParsedLark, depth: int) -> None:
        tok = self.peek()
        if tok.kind is Kind.RULE:
            rule = self.rule_def(depth)
            if rule.name in g.rules:
                raise self.error(f"duplicate rule: {rule.name!r}", tok.offset)
            g.rules[rule.name] = rule
        elif tok.kind is Kind.TOKEN:
            term = self.term_def(depth)
            if term.name in g.terms:
                raise self.error(f"duplicate token: {term.name!r}", tok.offset)
            g.terms[term.name] = term
        elif tok.kind is Kind.KEYWORD:
            self.statement(g, depth)
        else:
            raise self.error(f"expecting rule, token or statement, found {tok.describe()}")

    def _definition_suffixes(self) -> None:
        """Reject template params ``{a,b}`` and priorities ``.N`` on a definition."""
        if self.punct("{"):
            raise self.error("params not supported yet")
        if self.punct("."):
            raise self.error("priority not supported yet")

    def rule_def(self, depth: int) -> RuleDef:
        tok = self.take()
        name = tok.text.lstrip("!").lstrip("?")  # "?x", "!x": tree shaping, no effect here
        parametric = False
        if self.punct("::"):
            self.take()
            self.expect_punct("_")
            parametric = True
        self._definition_suffixes()
        rule = RuleDef(name, tok.offset, Expansions((), tok.offset), parametric=parametric)
        if self.punct("["):
            self.attributes(rule)
        self.expect_punct(":")
        rule.body = self.expansions(depth)
        return rule

    def term_def(self, depth: int) -> TermDef:
        tok = self.take()
        self._definition_suffixes()
        self.expect_punct(":")
        return TermDef(tok.text, tok.offset, self.expansions(depth))

    def attributes(self, rule: RuleDef) -> None:
        rule.attrs_offset = self.take().offset
        while not self.punct("]"):
            key_tok = self.expect(Kind.RULE, what="attribute name")
            key = key_tok.text
            if key not in ("lazy", "capture", "stop", "suffix", "max_tokens", "temperature",
                           "stop_capture"):  # fmt: skip
                raise self.error(f"Unknown attribute: {key}", key_tok.offset)
            if key == "lazy":
                rule.lazy = True
            elif key == "capture" and not self.punct("="):
                rule.capture = rule.name
            else:
                self.expect_punct("=")
                if key in ("stop", "suffix"):
                    if rule.lazy or rule.stop is not None or rule.suffix is not None:
                        raise self.error(
                            "Cannot have multiple stop/suffix conditions", key_tok.offset
                        )
                    rule.stop_offset = key_tok.offset
                    value = self.value(depth=0)
                    if key == "stop":
                        rule.stop = value
                    else:
                        rule.suffix = value
                elif key == "max_tokens":
                    rule.max_tokens = self.number()
                    if rule.max_tokens < 0:
                        raise self.error("max_tokens must be >= 0", key_tok.offset)
                elif key == "temperature":
                    num = self.expect(Kind.NUMBER)
                    rule.temperature = float(num.text)
                else:  # capture=, stop_capture=
                    text, ci = decode_string(self.text, self.expect(Kind.STRING))
                    if ci:
                        raise self.error("flags not allowed in this context", key_tok.offset)
                    if key == "capture":
                        rule.capture = text
                    else:
                        rule.stop_capture = text
                        rule.stop_capture_offset = key_tok.offset
            if not self.punct(","):
                break
            self.take()
        self.expect_punct("]")

    def statement(self, g: ParsedLark, depth: int) -> None:
        tok = self.take()
        kw = tok.text
        if kw == "%ignore":
            g.ignores.append(Ignore(self.expansions(depth), tok.offset))
        elif kw == "%import":
            g.imports.append(self.import_stmt(tok))
        elif kw == "%llguidance":
            g.options.append(Options(tok.value, tok.offset))
        elif kw == "%override":
            raise self.error("override statement not supported yet", tok.offset)
        elif kw == "%declare":
            raise self.error("declare statement not supported yet", tok.offset)
        else:
            raise self.error(f"expecting rule, token or statement, found {tok.text!r}", tok.offset)

    def import_path(self) -> str:
        parts = []
        if self.punct("."):
            parts.append(self.take().text)
        parts.append(self.expect(Kind.RULE, what="module name").text)
        while self.punct("."):
            self.take()
            parts.append(".")
            tok = self.peek()
            if tok.kind not in (Kind.RULE, Kind.TOKEN):
                raise self.error(f"Expected name, found {tok.describe()}")
            parts.append(self.take().text)
        return "".join(parts)

    def import_stmt(self, kw: Token) -> Import:
        path = self.import_path()
        if self.punct("->"):
            self.take()
            tok = self.peek()
            if tok.kind not in (Kind.RULE, Kind.TOKEN):
                raise self.error(f"Expected name after '->', found {tok.describe()}")
            alias = self.take().text
            head, _, last = path.rpartition(".")
            return Import(head, ((last, alias),), kw.offset)
        if self.punct("("):
            self.take()
            names = []
            while True:
                tok = self.peek()
                if tok.kind not in (Kind.RULE, Kind.TOKEN):
                    raise self.error(f"Expected name, found {tok.describe()}")
                names.append((self.take().text,) * 2)
                if not self.punct(","):
                    break
                self.take()
            self.expect_punct(")")
            return Import(path, tuple(names), kw.offset)
        head, _, last = path.rpartition(".")
        return Import(head, ((last, last),), kw.offset)

    # -- expressions ----------------------------------------------------------------------
    def expansions(self, depth: int) -> Expansions:
        offset = self.peek().offset
        alts = [self.alias(depth)]
        while True:
            if self.punct("|"):
                self.take()
            elif self.at(Kind.NEWLINE) and self.punct("|", 1):
                self.take()
                self.take()
            else:
                break
            alts.append(self.alias(depth))
        return Expansions(tuple(alts), offset)

    def alias(self, depth: int) -> Alias:
        offset = self.peek().offset
        conjuncts = [self.expansion(depth)]
        while self.punct("&"):
            self.take()
            conjuncts.append(self.expansion(depth))
        if self.punct("->"):
            self.take()
            self.expect(Kind.RULE, what="alias name")  # tree shaping only: ignored
        cond_offset = cond = None
        if self.at(Kind.KEYWORD, "%if"):
            cond_offset = self.take().offset
            cond = self.condition()
        return Alias(tuple(conjuncts), offset, cond_offset, cond)

    # -- parametric rules (§13) -------------------------------------------------------------
    def _int(self) -> int:
        tok = self.peek()
        if tok.kind is Kind.HEX:
            self.take()
            return int(tok.text, 16)
        if tok.kind is Kind.NUMBER and tok.text.isdigit():
            self.take()
            value = int(tok.text)
            if value > _MASK64:
                raise self.error("parameter value does not fit in 64 bits", tok.offset)
            return value
        raise self.error(f"Expected an unsigned number, found {tok.describe()}", tok.offset)

    def _bit(self) -> int:
        tok = self.peek()
        k = self._int()
        if k >= 64:
            raise self.error(f"bit index {k} out of range 0..63", tok.offset)
        return k

    def _bit_range(self) -> tuple[int, int]:
        """``[x:y]`` (bits x to y-1) or ``_`` (all 64 bits)."""
        tok = self.peek()
        if self.punct("_"):
            self.take()
            return (0, 64)
        self.expect_punct("[")
        lo = self._int()
        self.expect_punct(":")
        hi = self._int()
        self.expect_punct("]")
        if not lo < hi <= 64:
            raise self.error(f"bit range [{lo}:{hi}] must have 0 <= x < y <= 64", tok.offset)
        return (lo, hi)

    def _call_args(self, kinds: str, what: str) -> tuple:
        args: list = []
        self.expect_punct("(")
        for i, kind in enumerate(kinds):
            if i:
                self.expect_punct(",")
            if kind == "n":
                args.append(self._int())
            elif kind == "r":
                args.append(self._bit_range())
            else:
                args.append(self.condition())
        if not self.punct(")"):
            raise self.error(f"{what} takes {len(kinds)} argument(s)")
        self.take()
        return tuple(args)

    def param_expr(self) -> ParamExpr:
        """The parameter after ``name::``: ``_``, a number, or a function call."""
        tok = self.peek()
        if self.punct("_"):
            self.take()
            return ParamExpr("_", (), tok.offset)
        if tok.kind in (Kind.NUMBER, Kind.HEX):
            return ParamExpr("const", (self._int(),), tok.offset)
        if tok.kind is Kind.RULE and tok.text in _PARAM_FUNCS:
            self.take()
            kinds = _PARAM_FUNCS[tok.text]
            args = self._call_args(kinds, tok.text)
            if kinds == "n" and tok.text in ("set_bit", "clear_bit") and args[0] >= 64:
                raise self.error(f"bit index {args[0]} out of range 0..63", tok.offset)
            return ParamExpr(tok.text, args, tok.offset)
        known = ", ".join(sorted(_PARAM_FUNCS))
        raise self.error(f"Expected a parameter (_, a number, or one of {known}), found "
                         f"{tok.describe()}", tok.offset)  # fmt: skip

    def condition(self) -> Condition:
        tok = self.peek()
        if tok.kind is Kind.RULE and tok.text in _CONDITIONS:
            self.take()
            kinds = _CONDITIONS[tok.text]
            args = self._call_args(kinds, tok.text) if kinds else ()
            if tok.text in ("bit_set", "bit_clear") and args[0] >= 64:
                raise self.error(f"bit index {args[0]} out of range 0..63", tok.offset)
            return Condition(tok.text, args, tok.offset)
        raise self.error(f"unknown %if condition {tok.text!r}" if tok.kind is Kind.RULE
                         else f"Expected a condition, found {tok.describe()}", tok.offset)

    def expansion(self, depth: int) -> tuple[Expr, ...]:
        exprs = []
        while True:
            tok = self.peek()
            if tok.kind in (Kind.NEWLINE, Kind.EOF) or tok.is_(Kind.KEYWORD, "%if"):
                break
            if tok.kind is Kind.PUNCT and tok.text in _ATOM_END:
                break
            exprs.append(self.expr(depth))
        return tuple(exprs)

    def expr(self, depth: int) -> Expr:
        offset = self.peek().offset
        atom = self.atom(depth)
        if self.at(Kind.OP):
            return Expr(atom, self.take().text, None, offset)
        if self.punct("~") and self.at(Kind.NUMBER, k=1):
            self.take()
            lo = self.number()
            hi = lo
            if self.punct(".."):
                self.take()
                hi = self.number()
            return Expr(atom, None, (lo, hi), offset)
        if self.punct("{"):
            brace = self.take().offset
            lo = 0 if self.punct(",") else self.number()
            hi: int | None = lo
            if self.punct(","):
                self.take()
                hi = None if self.punct("}") else self.number()
            self.expect_punct("}")
            if hi == 0:
                raise self.error("End number in range cannot be 0", brace)
            return Expr(atom, None, (lo, hi), offset)
        return Expr(atom, None, None, offset)

    def atom(self, depth: int) -> Atom:
        offset = self.peek().offset
        negated = False
        if self.punct("~"):
            self.take()
            negated = True
        if self.punct("(") or self.punct("["):
            opener = self.take()
            self.group_depth += 1
            if self.group_depth > MAX_GROUP_DEPTH:
                raise self.error(f"expression nested more than {MAX_GROUP_DEPTH} levels deep",
                                 opener.offset)  # fmt: skip
            body = self.expansions(depth)
            self.expect_punct(")" if opener.text == "(" else "]")
            self.group_depth -= 1
            return Atom(Group(body, opener.text == "[", opener.offset), negated, offset)
        return Atom(self.value(depth), negated, offset)

    def value(self, depth: int) -> Value:
        tok = self.peek()
        k = tok.kind
        if k is Kind.STRING:
            self.take()
            text, ci = decode_string(self.text, tok)
            if self.punct(".."):
                self.take()
                end_tok = self.expect(Kind.STRING)
                hi, ci2 = decode_string(self.text, end_tok)
                if ci or ci2:
                    raise self.error("flags not allowed in this context", tok.offset)
                return CharRange(text, hi, tok.offset, self.text[tok.offset : end_tok.end])
            return Literal(text, ci, tok.offset, tok.text)
        if k is Kind.REGEX:
            self.take()
            cut = tok.text.rindex("/")
            return RegexLit(tok.text[1:cut], tok.text[cut + 1 :], tok.offset, tok.text)
        if k is Kind.SPECIAL:
            self.take()
            return SpecialToken(tok.text, tok.offset)
        if k is Kind.GREF:
            self.take()
            return GrammarRef(tok.text[1:], tok.offset)
        if tok.is_(Kind.KEYWORD, "%json"):
            self.take()
            return JsonValue(tok.value, tok.offset)
        if tok.is_(Kind.KEYWORD, "%regex"):
            self.take()
            return RegexExt(tok.value, tok.offset)
        if tok.is_(Kind.KEYWORD, "%lark"):
            self.take()
            if depth + 1 > MAX_NESTING:
                raise self.error("lark grammar too deeply nested", tok.offset)
            self.expect_punct("{")
            nested = self.grammar(depth + 1, "}", tok.offset)
            self.expect_punct("}")
            return NestedLark(nested, tok.offset)
        if k in (Kind.RULE, Kind.TOKEN):
            self.take()
            if self.punct("::"):
                self.take()
                return ParamRef(tok.text, self.param_expr(), tok.offset)
            # "{," and "{12" start a repetition; "{anything else" is a Lark template use
            if self.punct("{") and not (self.punct(",", 1) or self.at(Kind.NUMBER, k=1)):
                self.take()
                while not (self.punct("}") or self.at(Kind.EOF) or self.at(Kind.NEWLINE)):
                    self.take()
                self.expect_punct("}")
                return Unsupported("template usage not supported yet", tok.offset)
            return Name(tok.text, tok.offset)
        raise self.error(f"Expected value, found {tok.describe()}")


def parse_lark(text: str) -> ParsedLark:
    """Parse grammar ``text`` into a :class:`ParsedLark`. Raises :class:`GrammarError`."""
    parser = _Parser(text, lex_lark(text))
    return parser.grammar(0, None)
