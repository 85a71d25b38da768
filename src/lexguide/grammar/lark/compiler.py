"""Lark-variant AST → grammar IR (spec ``lark-syntax.md`` §5–§12).

Two compilation contexts, as in llguidance's ``lark/compiler.rs``:

* *terminal context* (UPPERCASE definitions, ``%ignore``, attribute rules, anything written
  inline in a rule that is not a rule reference): expressions become one regex-algebra node
  (:mod:`lexguide.regex.nodes`); concatenation admits no skip in between; ``&`` and ``~`` are
  intersection and complement.
* *rule context*: expressions become CFG symbols through :class:`GrammarBuilder`; every literal,
  regex or terminal reference is a lexeme of the current lexeme class (deduplicated by regex).

Rules are compiled lazily from ``start`` (a worklist), so errors in unreachable rules are not
reported — the same texts are accepted as by llguidance. ``%json`` and ``%lark`` open a new
lexeme class with its own skip regex (§8.5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lexguide.errors import GrammarError, LimitExceeded, RegexError, SchemaError
from lexguide.grammar.ir import GrammarBuilder, GrammarIR, GrammarOptions, TokenSet
from lexguide.grammar.lark.parser import (
    Atom,
    CharRange,
    Expansions,
    Expr,
    GrammarRef,
    Group,
    JsonValue,
    Literal,
    Name,
    NestedLark,
    ParamRef,
    ParsedLark,
    RegexExt,
    RegexLit,
    RuleDef,
    SpecialToken,
    TermDef,
    Unsupported,
    Value,
    parse_lark,
)  # fmt: skip
from lexguide.limits import MAX_NESTING_DEPTH
from lexguide.regex import nodes as rx
from lexguide.regex.syntax import parse_regex

__all__ = ["COMMON_REGEXES", "LarkCompiler", "chunk_words", "substring_rx"]

_FLOAT = r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
_NUMBER = rf"[0-9]+|{_FLOAT}"
#: §11: the names ``%import common.X`` knows, as Rust-regex text.
COMMON_REGEXES: dict[str, str] = {
    "DIGIT": r"[0-9]",
    "HEXDIGIT": r"[a-fA-F0-9]",
    "INT": r"[0-9]+",
    "SIGNED_INT": r"[+-]?[0-9]+",
    "DECIMAL": r"[0-9]+\.[0-9]*|\.[0-9]+",
    "_EXP": r"[eE][+-]?[0-9]+",
    "FLOAT": _FLOAT,
    "SIGNED_FLOAT": rf"[+-]?(?:{_FLOAT})",
    "NUMBER": _NUMBER,
    "SIGNED_NUMBER": rf"[+-]?(?:{_NUMBER})",
    "ESCAPED_STRING": r'"(?:[^"\\]|\\.)*"',
    "LCASE_LETTER": r"[a-z]",
    "UCASE_LETTER": r"[A-Z]",
    "LETTER": r"[A-Za-z]",
    "WORD": r"[A-Za-z]+",
    "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
    "WS_INLINE": r"[ \t]+",
    "WS": r"[ \t\f\r\n]+",
    "CR": r"\r",
    "LF": r"\n",
    "NEWLINE": r"(?:\r?\n)+",
    "SH_COMMENT": r"#[^\n]*",
    "CPP_COMMENT": r"//[^\n]*",
    "C_COMMENT": r"/\*[^*]*\*+(?:[^/*][^*]*\*+)*/",
    "SQL_COMMENT": r"--[^\n]*",
}
BOOL_OPTIONS = ("no_forcing", "allow_invalid_utf8", "allow_initial_skip", "ignore_once")
JSON_WHITESPACE = r"[\x20\x0A\x0D\x09]+"
_SUBSTRING_FIELDS = ("substring_chunks", "substring_words", "substring_chars")
_TERMINAL_HINT = "; temperature= and max_tokens= only supported on TERMINALS and @subgrammars"
#: terminals may reference terminals this deep (keeps the recursion bounded)
MAX_TERMINAL_DEPTH = MAX_NESTING_DEPTH
#: above this many optional copies, rule repetition uses the O(log n) construction
_LINEAR_REPEAT_MAX = 16


# -- %regex substring automata (§5.6) --------------------------------------------------------
def _char_class(c: str) -> int:
    if c.isspace() and c not in "\x1c\x1d\x1e\x1f":  # Rust char::is_whitespace
        return 0
    return 1 if c.isalnum() or c == "_" else 2


def chunk_words(text: str) -> list[str]:
    """Cut ``text`` into maximal runs of whitespace / word characters / other characters."""
    chunks: list[str] = []
    for c in text:
        if chunks and _char_class(chunks[-1][-1]) == _char_class(c):
            chunks[-1] += c
        else:
            chunks.append(c)
    return chunks


def substring_rx(chunks: list[str]) -> int:
    """Regex for ``"".join(chunks[i:j])`` over all ``0 <= i <= j <= len(chunks)``.

    ``P_i`` = the chunk-prefixes starting at chunk ``i`` (``"" | c_i P_{i+1}``); hash-consing
    shares the tails so the node count is linear in the number of chunks.
    """
    tail = rx.EPSILON
    starts = [rx.EPSILON]
    for chunk in reversed([c for c in chunks if c]):
        tail = rx.opt(rx.concat(rx.literal(chunk.encode("utf-8")), tail))
        starts.append(tail)
    return rx.alt(*starts)


def _merge_json(dst: dict[str, Any], src: dict[str, Any]) -> None:
    """Deep-merge ``src`` into ``dst`` (objects merge recursively, other values replace)."""
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge_json(dst[k], v)
        else:
            dst[k] = v


@dataclass(eq=False)
class _Scope:
    """One (sub)grammar: its definitions, lexeme class and caches."""

    parsed: ParsedLark
    offset: int | None
    terms: dict[str, TermDef | str] = field(default_factory=dict)  # str: imported regex text
    lexeme_class: int = 0
    term_rx: dict[str, int] = field(default_factory=dict)
    in_progress: set[str] = field(default_factory=set)
    rule_syms: dict[str, tuple[int, ...]] = field(default_factory=dict)
    param_syms: dict[tuple[str, int], int] = field(default_factory=dict)  # (rule, p) -> nt


#: bound on the instances (rule, parameter value) of parametric rules in one grammar
MAX_PARAM_INSTANCES = 10_000


def _uses_param(exps: Expansions) -> bool:
    """Whether a rule body reads its parameter: a ``%if`` guard, or ``name::expr`` with an
    expression of ``_``."""
    for alias in exps.alternatives:
        if alias.condition is not None:
            return True
        for conj in alias.conjuncts:
            for e in conj:
                inner = e.atom.inner
                if isinstance(inner, Group) and _uses_param(inner.body):
                    return True
                if isinstance(inner, ParamRef) and inner.param.uses_param:
                    return True
    return False


@dataclass(frozen=True)
class GrammarEntry:
    """One grammar of a grammar list (``{"grammars": [...]}``): Lark text or a JSON Schema."""

    name: str | None
    lark: str | None = None
    json_schema: Any = None


class LarkCompiler:
    """Compile one parsed grammar text into a :class:`GrammarIR` (single use).

    With ``grammars`` (a grammar list's entries by name), ``@name`` in a rule refers to
    another entry: a Lark entry is compiled by a child compiler into the same builder (its
    errors point into its own text), a JSON entry as ``%json``. Each referenced entry becomes
    one nonterminal, so grammars may refer to each other recursively.
    """

    def __init__(self, text: str, *, grammars: dict[str, GrammarEntry] | None = None,
                 name: str | None = None, parent: LarkCompiler | None = None) -> None:
        self.text = text
        self.name = name
        self._pending: list[tuple[_Scope, RuleDef, int, int | None]] = []
        self._json_skip: int | None = None
        self._param: int | None = None  # the parameter of the parametric rule being compiled
        self._n_instances = 0
        if parent is None:
            self.builder = GrammarBuilder()
            self.options = GrammarOptions()
            self._top_skip: int | None = None
            self.grammars = grammars
            self._refs: dict[str, int] = {}
        else:
            self.builder = parent.builder
            self.options = parent.options
            self._top_skip = parent._top_skip
            self.grammars = parent.grammars
            self._refs = parent._refs

    # -- errors ---------------------------------------------------------------------------
    def error(self, message: str, offset: int | None) -> GrammarError:
        return GrammarError(message, text=self.text, offset=offset)

    def _guard(self, offset: int, fn: Callable[[], int], what: str) -> int:
        """Run an rx constructor, turning its errors into located grammar errors."""
        try:
            return fn()
        except RegexError as e:
            at = offset if e.offset is None or not what.startswith("/") else offset + 1 + e.offset
            raise self.error(f"invalid regex {what}: {e.detail}", at) from None
        except LimitExceeded as e:
            raise LimitExceeded(e.limit, e.value, str(self.error(str(e), offset))) from None

    # -- entry ----------------------------------------------------------------------------
    def compile(self, parsed: ParsedLark) -> GrammarIR:
        """Compile the top-level grammar; raises :class:`GrammarError` with a location."""
        self.options = self._parse_options(parsed)
        self.builder.options = self.options
        start = self._open_scope(parsed, None)
        if self.name is not None and self.grammars is not None:
            # other grammars of the list may refer to this one
            nt = self.builder.nonterminal(f"@{self.name}")
            self.builder.rule(nt, start)
            self._refs[self.name] = nt
        self._drain()
        if not start:
            start = (self.builder.empty(),)
        return self.builder.build(start[0] if len(start) == 1 else self.builder.seq(start))

    def _drain(self) -> None:
        """Compile the bodies of the rules referenced so far (they may reference more)."""
        while self._pending:
            scope, rule, nt, param = self._pending.pop()
            self._param = param
            try:
                for alt in self.rule_expansions(scope, rule.body):
                    self.builder.rule(nt, alt)
            finally:
                self._param = None

    def _grammar_ref(self, v: GrammarRef) -> int:
        """``@name``: the nonterminal of another grammar of the list (compiled once)."""
        if v.name.isdigit():
            raise self.error("numeric grammar references no longer supported", v.offset)
        if self.grammars is None:
            raise self.error(f"grammar reference @{v.name} outside a grammar list: @name refers "
                             'to an entry of {"grammars": [...]} (Grammar.from_llguidance)',
                             v.offset)  # fmt: skip
        entry = self.grammars.get(v.name)
        if entry is None:
            known = ", ".join(f"@{n}" for n in self.grammars) or "none"
            raise self.error(f"unknown grammar @{v.name} (named grammars: {known})", v.offset)
        nt = self._refs.get(v.name)
        if nt is not None:
            return nt
        nt = self.builder.nonterminal(f"@{v.name}")
        self._refs[v.name] = nt
        if entry.lark is None:
            self.builder.rule(nt, [self._json(JsonValue(entry.json_schema, v.offset))])
            return nt
        child = LarkCompiler(entry.lark, name=v.name, parent=self)
        try:
            syms = child._open_scope(parse_lark(entry.lark), 0)
            child._drain()
        except GrammarError as e:
            raise GrammarError(f"in grammar @{v.name}: {e.detail}", text=entry.lark, offset=e.offset,
                               line=e.line, col=e.col) from None
        self.builder.rule(nt, list(syms))
        return nt

    def _parse_options(self, parsed: ParsedLark) -> GrammarOptions:
        merged: dict[str, Any] = {}
        for opt in parsed.options:
            if not isinstance(opt.value, dict):
                raise self.error(
                    "failed to parse %llguidance declaration: expected a JSON object", opt.offset
                )
            for key in BOOL_OPTIONS:
                if key in opt.value and not isinstance(opt.value[key], bool):
                    raise self.error(
                        f"failed to parse %llguidance declaration: {key!r} must be a boolean, "
                        f"got {opt.value[key]!r}",
                        opt.offset,
                    )
            _merge_json(merged, opt.value)
        return GrammarOptions(**{k: merged[k] for k in BOOL_OPTIONS if k in merged})

    def _open_scope(self, parsed: ParsedLark, offset: int | None) -> tuple[int, ...]:
        """Set up a (sub)grammar and return the symbols of its ``start`` rule."""
        scope = _Scope(parsed, offset, dict(parsed.terms))
        for imp in parsed.imports:
            for name, alias in imp.names:
                qualified = f"{imp.path}.{name}" if imp.path else name
                if imp.path != "common" or name not in COMMON_REGEXES:
                    known = ", ".join(f"common.{n}" for n in COMMON_REGEXES)
                    raise self.error(
                        f"Unknown common regex: {qualified}; following are available: {known}",
                        imp.offset,
                    )
                if alias in scope.terms:
                    raise self.error(f"duplicate token (in import): {alias!r}", imp.offset)
                scope.terms[alias] = COMMON_REGEXES[name]
        if offset is not None and parsed.options:
            nested = self._parse_options(parsed)
            if nested != self.options:
                raise self.error(
                    "%llguidance options inside a nested %lark grammar that differ from the "
                    "top-level ones are not supported yet",
                    parsed.options[0].offset,
                )
        if "start" not in parsed.rules:
            raise self.error("no start rule found", offset)
        skips = [self.term_expansions(scope, ig.body) for ig in parsed.ignores]
        skip = rx.alt(*skips) if skips else None
        if offset is None:
            self.builder.set_skip(0, skip)
            self._top_skip = skip
        elif skip != self._top_skip:
            scope.lexeme_class = self.builder.new_lexeme_class(skip)
        # else: same skip as the top grammar: share class 0 (as llguidance does, §8.5)
        return self.rule_ref(scope, "start", offset)

    # -- terminal context: expressions → one regex -----------------------------------------
    def term_expansions(self, scope: _Scope, exps: Expansions) -> int:
        alts = []
        for alias in exps.alternatives:
            if alias.condition_offset is not None:
                raise self.error("%if conditions are only allowed in parametric rules, not in "
                                 "terminals", alias.condition_offset)  # fmt: skip
            parts = [
                rx.concat(*[self.term_expr(scope, e) for e in conj]) for conj in alias.conjuncts
            ]
            alts.append(rx.intersect(*parts) if len(parts) > 1 else parts[0])
        return rx.alt(*alts)

    def term_expr(self, scope: _Scope, e: Expr) -> int:
        x = self.term_atom(scope, e.atom)
        if e.op is not None:
            return {"*": rx.star, "+": rx.plus, "?": rx.opt}[e.op](x)
        if e.count is not None:
            lo, hi = self._check_count(e)
            return self._guard(e.offset, lambda: rx.repeat(x, lo, hi), "repetition")
        return x

    def _check_count(self, e: Expr) -> tuple[int, int | None]:
        assert e.count is not None
        lo, hi = e.count
        if lo < 0:
            raise self.error(f"range start must be >= 0, got {lo}", e.offset)
        if hi is not None and hi < lo:
            raise self.error(f"range end must be >= start, got {{{lo},{hi}}}", e.offset)
        return lo, hi

    def term_atom(self, scope: _Scope, atom: Atom) -> int:
        inner = atom.inner
        if isinstance(inner, Group):
            x = self.term_expansions(scope, inner.body)
            if inner.optional:
                x = rx.opt(x)
        else:
            x = self.term_value(scope, inner)
        return rx.complement(x) if atom.negated else x

    def term_value(self, scope: _Scope, v: Value) -> int:
        if isinstance(v, Literal):
            return self._guard(v.offset, lambda: rx.from_literal(v.text, v.case_insensitive), v.src)
        if isinstance(v, RegexLit):
            if "l" in v.flags:
                raise self.error("l-flag is not supported in regexes", v.offset)
            return self._guard(
                v.offset,
                lambda: parse_regex(
                    v.pattern, v.flags, allow_invalid_utf8=self.options.allow_invalid_utf8
                ),
                v.src,
            )
        if isinstance(v, CharRange):
            return self._char_range(v)
        if isinstance(v, Name):
            return self.terminal(scope, v.name, v.offset)
        if isinstance(v, RegexExt):
            return self._regex_ext(v)
        if isinstance(v, SpecialToken):
            raise self.error(f"special tokens (like {v.text!r}) cannot be used in terminals",
                             v.offset)  # fmt: skip
        if isinstance(v, JsonValue):
            raise self.error("%json literals cannot be used in terminals", v.offset)
        if isinstance(v, NestedLark):
            raise self.error("%lark grammars cannot be used in terminals", v.offset)
        if isinstance(v, ParamRef):
            raise self.error(f"parametric rules ({v.name}::...) cannot be used in terminals",
                             v.offset)  # fmt: skip
        return self._unsupported(v)

    def _unsupported(self, v: Value) -> int:
        if isinstance(v, GrammarRef):
            raise self.error(f"grammar references (@{v.name}) cannot be used in terminals", v.offset)
        assert isinstance(v, Unsupported)
        raise self.error(v.message, v.offset)

    def _char_range(self, v: CharRange) -> int:
        if len(v.lo) != 1:
            raise self.error("range start must be a single character", v.offset)
        if len(v.hi) != 1:
            raise self.error("range end must be a single character", v.offset)
        if v.lo > v.hi:
            raise self.error(f"invalid range order: {v.lo!r}..{v.hi!r}", v.offset)
        return rx.codepoint_range(ord(v.lo), ord(v.hi))

    def _regex_ext(self, v: RegexExt) -> int:
        spec = v.spec
        if not isinstance(spec, dict):
            raise self.error("failed to parse %regex: expected a JSON object", v.offset)
        for key in spec:
            if key not in _SUBSTRING_FIELDS:
                raise self.error(
                    f"failed to parse %regex: unknown field `{key}`, expected one of "
                    + ", ".join(f"`{f}`" for f in _SUBSTRING_FIELDS),
                    v.offset,
                )
        given = [f for f in _SUBSTRING_FIELDS if spec.get(f) is not None]
        if not given:
            raise self.error("no fields set on %regex", v.offset)
        if len(given) > 1:
            raise self.error(f"only one field can be set on %regex; got {given}", v.offset)
        value = spec[given[0]]
        if given[0] == "substring_chunks":
            if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
                raise self.error("failed to parse %regex: substring_chunks must be a list of "
                                 "strings", v.offset)  # fmt: skip
            chunks = value
        elif not isinstance(value, str):
            raise self.error(f"failed to parse %regex: {given[0]} must be a string", v.offset)
        else:
            chunks = chunk_words(value) if given[0] == "substring_words" else list(value)
        return self._guard(v.offset, lambda: substring_rx(chunks), "%regex")

    def terminal(self, scope: _Scope, name: str, offset: int) -> int:
        """The regex of terminal ``name`` (compiled once; cycles are errors)."""
        cached = scope.term_rx.get(name)
        if cached is not None:
            return cached
        if name in scope.in_progress:
            raise self.error(f"circular reference in token {name!r} definition", offset)
        definition = scope.terms.get(name)
        if definition is None:
            raise self.error(f'unknown name: "{name}"', offset)
        if len(scope.in_progress) >= MAX_TERMINAL_DEPTH:
            raise self.error(f"terminal definitions nested more than {MAX_TERMINAL_DEPTH} deep",
                             offset)  # fmt: skip
        scope.in_progress.add(name)
        if isinstance(definition, str):
            x = self._guard(offset, lambda: parse_regex(definition), f"common.{name}")
        else:
            x = self.term_expansions(scope, definition.body)
        scope.in_progress.discard(name)
        scope.term_rx[name] = x
        return x

    # -- rule context: expressions → CFG symbols -------------------------------------------
    def rule_expansions(self, scope: _Scope, exps: Expansions) -> list[tuple[int, ...]]:
        alts = []
        for alias in exps.alternatives:
            if len(alias.conjuncts) > 1:
                raise self.error(
                    "& is only supported for tokens, not rules; try renaming the rule to "
                    "UPPERCASE",
                    alias.offset,
                )
            if alias.condition is not None:
                if self._param is None:
                    raise self.error("%if conditions are only allowed in parametric rules "
                                     "(name::_)", alias.condition_offset)  # fmt: skip
                if not alias.condition.holds(self._param):
                    continue
            syms: list[int] = []
            for e in alias.conjuncts[0]:
                syms.extend(self.rule_expr(scope, e))
            alts.append(tuple(syms))
        return alts

    def _as_symbol(self, alts: list[tuple[int, ...]]) -> int:
        if len(alts) == 1:
            return self.builder.seq(alts[0]) if alts[0] else self.builder.empty()
        return self.builder.alt(alts)

    def rule_expr(self, scope: _Scope, e: Expr) -> tuple[int, ...]:
        seq = self.rule_atom(scope, e.atom)
        if e.op is None and e.count is None:
            return seq
        if not seq:  # any repetition of epsilon is epsilon
            if e.count is not None:
                self._check_count(e)
            return ()
        sym = seq[0] if len(seq) == 1 else self.builder.seq(seq)
        b = self.builder
        if e.op == "*":
            return (b.star(sym),)
        if e.op == "+":
            return (b.plus(sym),)
        if e.op == "?":
            return (b.optional(sym),)
        lo, hi = self._check_count(e)
        if hi == 0:
            return ()
        return (self._repeat(sym, lo, hi),)

    def _repeat(self, sym: int, lo: int, hi: int | None) -> int:
        """``sym{lo,hi}``: short counts via the builder, long ones in O(log n) rules."""
        b = self.builder
        if lo <= _LINEAR_REPEAT_MAX and (hi is None or hi - lo <= _LINEAR_REPEAT_MAX):
            return b.repeat(sym, lo, hi)
        fixed = self._power(sym, lo)
        rest = b.star(sym) if hi is None else self._upto(sym, hi - lo, {})
        parts = [p for p in (fixed, rest) if p is not None]
        return b.seq(parts) if parts else b.empty()

    def _power(self, sym: int, n: int) -> int | None:
        """Exactly ``n`` copies, by binary decomposition (unambiguous)."""
        result: int | None = None
        square = sym
        while n:
            if n & 1:
                result = square if result is None else self.builder.seq([result, square])
            n >>= 1
            if n:
                square = self.builder.seq([square, square])
        return result

    def _upto(self, sym: int, k: int, memo: dict[int, int | None]) -> int | None:
        """0..k copies, unambiguously: ``{0,k} = {0,m} | sym^(m+1) {0,k-m-1}``, m = k//2."""
        if k == 0:
            return None
        if k in memo:
            return memo[k]
        if k == 1:
            res = self.builder.optional(sym)
        else:
            m = k // 2
            low = self._upto(sym, m, memo)
            parts = (self._power(sym, m + 1), self._upto(sym, k - m - 1, memo))
            high = [p for p in parts if p is not None]
            res = self.builder.alt([(low,) if low is not None else (), tuple(high)], name="upto")
        memo[k] = res
        return res

    def rule_atom(self, scope: _Scope, atom: Atom) -> tuple[int, ...]:
        inner = atom.inner
        if atom.negated:
            x = rx.complement(self.term_atom(scope, Atom(inner, False, atom.offset)))
            src = self.text[atom.offset : self._atom_end(atom)]
            return (self.builder.lexeme(x, src, lexeme_class=scope.lexeme_class),)
        if isinstance(inner, Group):
            alts = self.rule_expansions(scope, inner.body)
            if inner.optional:
                if all(not a for a in alts):
                    return ()
                return (self.builder.optional(self._as_symbol(alts)),)
            return alts[0] if len(alts) == 1 else (self.builder.alt(alts),)
        return self.rule_value(scope, inner)

    def _atom_end(self, atom: Atom) -> int:
        """End offset of the source text of an atom (for lexeme names)."""
        inner = atom.inner
        src = getattr(inner, "src", None)
        if src is not None:
            return inner.offset + len(src)  # type: ignore[union-attr]
        end = self.text.find("\n", atom.offset)
        return min(end if end >= 0 else len(self.text), atom.offset + 40)

    def rule_value(self, scope: _Scope, v: Value) -> tuple[int, ...]:
        b = self.builder
        cls = scope.lexeme_class
        if isinstance(v, Name):
            if v.name in scope.parsed.rules:
                return self.rule_ref(scope, v.name, v.offset)
            return (b.lexeme(self.terminal(scope, v.name, v.offset), v.name, lexeme_class=cls),)
        if isinstance(v, ParamRef):
            return (self.param_ref(scope, v),)
        if isinstance(v, Literal) and v.text == "":
            return ()
        if isinstance(v, (Literal, RegexLit, CharRange)):
            return (b.lexeme(self.term_value(scope, v), v.src, lexeme_class=cls),)
        if isinstance(v, RegexExt):
            return (b.lexeme(self.term_value(scope, v), "%regex", lexeme_class=cls),)
        if isinstance(v, SpecialToken):
            return (b.token_lexeme(self._token_set(v), lexeme_class=cls),)
        if isinstance(v, JsonValue):
            return (self._json(v),)
        if isinstance(v, NestedLark):
            return self._open_scope(v.grammar, v.offset)
        if isinstance(v, GrammarRef):
            return (self._grammar_ref(v),)
        self._unsupported(v)
        raise AssertionError("unreachable")

    def _token_set(self, v: SpecialToken) -> TokenSet:
        """``<name>`` or ``<[ids]>`` (§5.4)."""
        if not (v.text.startswith("<[") and v.text.endswith("]>")):
            return TokenSet(names=(v.text,))
        body = v.text[2:-2]
        negated = body.startswith("^")
        if negated:
            body = body[1:]
        if "*" in body:
            if negated:
                raise self.error("negated wildcard token <[^*]> is not supported", v.offset)
            if body != "*":
                raise self.error("wildcard token range '*' must not contain additional tokens",
                                 v.offset)  # fmt: skip
            return TokenSet(any=True)
        ranges = []
        for part in body.split(","):
            if part == "":
                continue
            ends = part.split("-")
            if len(ends) > 2 or not all(x.isascii() and x.isdigit() for x in ends):
                raise self.error(f"invalid token range: {part!r}", v.offset)
            lo, hi = int(ends[0]), int(ends[-1])
            if lo > hi:
                raise self.error(f"invalid token range: {part!r}", v.offset)
            ranges.append((lo, hi))
        if not ranges:
            raise self.error("empty token range", v.offset)
        return TokenSet(ranges=tuple(ranges), negated=negated)

    def _json(self, v: JsonValue) -> int:
        """``%json {schema}``: the JSON compiler in a lexeme class of its own (§5.5, §8.5)."""
        from lexguide.grammar.ir import json_schema_compiler

        try:
            compile_schema = json_schema_compiler()
        except (ImportError, AssertionError):
            raise self.error("%json needs the JSON Schema compiler (lexguide.jsonschema), "
                             "which is not available", v.offset) from None  # fmt: skip
        if self._json_skip is None:
            self._json_skip = parse_regex(JSON_WHITESPACE)
        cls = self.builder.new_lexeme_class(self._json_skip)
        try:
            # llguidance's default layout (any JSON whitespace); x-guidance may change it
            return compile_schema(self.builder, v.schema, lexeme_class=cls, whitespace="flexible")
        except (SchemaError, GrammarError) as e:
            raise self.error(f"failed to compile JSON schema: {e}", v.offset) from None

    # -- rules ----------------------------------------------------------------------------
    def rule_ref(self, scope: _Scope, name: str, offset: int | None) -> tuple[int, ...]:
        """The symbols of rule ``name`` (a nonterminal, or a lexeme for attribute rules)."""
        syms = scope.rule_syms.get(name)
        if syms is not None:
            return syms
        rule = scope.parsed.rules[name]
        if rule.parametric:
            raise self.error(f"parametric rule {name!r} needs a parameter: {name}::0, "
                             f"{name}::_ ...", offset)  # fmt: skip
        if _uses_param(rule.body):
            raise self.error(f"rule {name!r} uses a parameter (_ or %if) but is not "
                             f"parametric: declare it as {name}::_", rule.offset)  # fmt: skip
        if rule.stop_capture is not None and rule.suffix is None and rule.stop is None:
            raise self.error("stop_capture_name requires stop= or suffix=",
                             rule.stop_capture_offset)  # fmt: skip
        if rule.lazy or rule.suffix is not None or rule.stop is not None or self._lexeme_attrs(rule):
            syms = self._lexeme_rule(scope, rule)
        else:
            nt = self.builder.nonterminal(name)
            if rule.capture is not None:
                self.builder.capture(nt, rule.capture)
            self._pending.append((scope, rule, nt, None))
            syms = (nt,)
        scope.rule_syms[name] = syms
        return syms

    def param_ref(self, scope: _Scope, v: ParamRef) -> int:
        """``name::expr``: the nonterminal of rule ``name`` for the parameter value ``expr``
        evaluates to. Instances are made for every value reached from the grammar's
        constants, at most :data:`MAX_PARAM_INSTANCES`."""
        rule = scope.parsed.rules.get(v.name)
        if rule is None:
            raise self.error(f'rule "{v.name}" not found', v.offset)
        if not rule.parametric:
            raise self.error(f"rule {v.name!r} is not parametric (declare it as {v.name}::_)",
                             v.offset)  # fmt: skip
        if v.param.uses_param and self._param is None:
            raise self.error("the parameter _ is only defined inside a parametric rule (name::_)",
                             v.param.offset)  # fmt: skip
        value = v.param.evaluate(self._param if self._param is not None else 0)
        nt = scope.param_syms.get((v.name, value))
        if nt is None:
            if rule.lazy or rule.stop is not None or rule.suffix is not None or (
                    rule.max_tokens is not None or rule.temperature is not None):
                raise self.error("parametric rules cannot have lazy, stop=, suffix=, "
                                 "max_tokens= or temperature=", rule.attrs_offset)  # fmt: skip
            if not _uses_param(rule.body):
                raise self.error(f"parametric rule {v.name!r} does not use its parameter "
                                 "(no _ and no %if in its body)", rule.offset)  # fmt: skip
            self._n_instances += 1
            if self._n_instances > MAX_PARAM_INSTANCES:
                raise self.error(f"parametric rules reach more than {MAX_PARAM_INSTANCES} "
                                 f"parameter values (at {v.name}::{value:#x})", v.offset)  # fmt: skip
            nt = self.builder.nonterminal(f"{v.name}::{value:#x}")
            if rule.capture is not None:
                self.builder.capture(nt, rule.capture)
            scope.param_syms[(v.name, value)] = nt
            self._pending.append((scope, rule, nt, value))
        return nt

    def _lexeme_attrs(self, rule: RuleDef) -> bool:
        """Whether ``max_tokens``/``temperature`` turn the rule into a lexeme."""
        if rule.max_tokens is None and rule.temperature is None:
            return False
        alts = rule.body.alternatives
        single = (
            alts[0].conjuncts[0][0].atom.inner
            if len(alts) == 1 and len(alts[0].conjuncts) == 1 and len(alts[0].conjuncts[0]) == 1
            and alts[0].conjuncts[0][0].op is None and alts[0].conjuncts[0][0].count is None
            else None
        )  # fmt: skip
        if isinstance(single, (JsonValue, NestedLark, GrammarRef)):
            if rule.max_tokens is not None:
                raise self.error("max_tokens= on %json/%lark/@grammar bodies is not supported yet",
                                 rule.attrs_offset)  # fmt: skip
            return False  # temperature is a sampling hint only: compile as a plain rule
        return True

    def _lexeme_rule(self, scope: _Scope, rule: RuleDef) -> tuple[int, ...]:
        """A rule with ``lazy``/``stop=``/``suffix=``/``max_tokens=``/``temperature=``: one
        lexeme (llguidance's lexeme options and lazy lexemes).

        ``suffix=V`` and ``stop=V`` both compile to the lazy lexeme ``body V``; ``stop=`` also
        records ``(body, V)`` so the stop text can be told apart as hidden (the bytes matched
        are the same). ``stop=""`` is a greedy ``body`` followed by the EOS token-set lexeme:
        the lexeme can only end where the model emits EOS.
        """
        try:
            body = self.term_expansions(scope, rule.body)
        except GrammarError as e:
            if rule.max_tokens is None and rule.temperature is None:
                raise
            raise GrammarError(e.detail + _TERMINAL_HINT, text=self.text, offset=e.offset) from None
        stop = suffix = None
        eos_stop = False
        if rule.suffix is not None:
            suffix_rx = self.term_value(scope, rule.suffix)
            suffix = (body, suffix_rx)
            body = rx.concat(body, suffix_rx)
        elif rule.stop is not None:
            stop_rx = self.term_value(scope, rule.stop)
            if stop_rx == rx.EPSILON:
                eos_stop = True
            else:
                stop = (body, stop_rx)
                body = rx.concat(body, stop_rx)
        if rule.max_tokens == 0:
            return ()
        lazy = rule.lazy or rule.suffix is not None or stop is not None
        cls = scope.lexeme_class
        sym = self.builder.lexeme(
            body, rule.name, lexeme_class=cls, lazy=lazy, max_tokens=rule.max_tokens, stop=stop,
            suffix=suffix, capture=rule.capture, stop_capture=rule.stop_capture,
        )  # fmt: skip
        if eos_stop:
            return (sym, self.builder.token_lexeme(TokenSet(eos=True), lexeme_class=cls))
        return (sym,)
