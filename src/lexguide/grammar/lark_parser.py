"""Recursive-descent parser for the llguidance Lark variant: tokens → AST (spec §3, §4, §9).

Only syntax is checked here; name resolution, regex compilation and most semantic errors are
left to :mod:`lexguide.grammar.lark_compiler`, which (like llguidance) compiles only what is
reachable from ``start``. Every AST node keeps the character offset of its first token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from lexguide.errors import GrammarError
from lexguide.grammar.lark_lexer import Kind, Token, decode_string, lex_lark

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
MAX_GROUP_DEPTH = 100  # ( [ nesting inside one expression; keeps recursion bounded
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
    """A construct that parses but cannot be compiled (templates, parametric references)."""

    message: str
    offset: int


Value = Union[
    Literal, RegexLit, CharRange, Name, SpecialToken, GrammarRef, JsonValue, RegexExt,
    NestedLark, Unsupported,
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
        cond = None
        if self.at(Kind.KEYWORD, "%if"):
            cond = self.take().offset
            self.skip_condition()
        return Alias(tuple(conjuncts), offset, cond)

    def skip_condition(self) -> None:
        """Skip a ``%if`` condition (balanced parentheses); it is rejected at compile time."""
        level = 0
        while not self.at(Kind.EOF):
            if self.punct("("):
                level += 1
            elif self.punct(")"):
                if level == 0:
                    return
                level -= 1
            elif level == 0 and (self.at(Kind.NEWLINE) or self.punct("|")):
                return
            self.take()

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
                self.skip_param_expr()
                msg = "parametric rules (name::param) are not supported yet"
                return Unsupported(msg, tok.offset)
            # "{," and "{12" start a repetition; "{anything else" is a Lark template use
            if self.punct("{") and not (self.punct(",", 1) or self.at(Kind.NUMBER, k=1)):
                self.take()
                while not (self.punct("}") or self.at(Kind.EOF) or self.at(Kind.NEWLINE)):
                    self.take()
                self.expect_punct("}")
                return Unsupported("template usage not supported yet", tok.offset)
            return Name(tok.text, tok.offset)
        raise self.error(f"Expected value, found {tok.describe()}")

    def skip_param_expr(self) -> None:
        """Skip a parametric argument: ``_``, a number, or ``fn(...)``."""
        self.take()
        if self.punct("("):
            level = 0
            while not self.at(Kind.EOF):
                t = self.take()
                if t.is_(Kind.PUNCT, "("):
                    level += 1
                elif t.is_(Kind.PUNCT, ")"):
                    level -= 1
                    if level == 0:
                        return


def parse_lark(text: str) -> ParsedLark:
    """Parse grammar ``text`` into a :class:`ParsedLark`. Raises :class:`GrammarError`."""
    parser = _Parser(text, lex_lark(text))
    return parser.grammar(0, None)
