"""``Grammar``: the tokenizer-independent, reusable result of every front end."""

from __future__ import annotations

import functools
import gc
import json
import marshal
import threading
from collections import OrderedDict
from typing import Any

import lexguide.jsonschema  # noqa: F401  (registers the %json / from_json_schema compiler)
from lexguide.engine.captures import captures
from lexguide.engine.lexparser import LexParser
from lexguide.engine.unique_items import EMPTY, UniqueItems
from lexguide.errors import RegexError, SchemaError
from lexguide.grammar.gbnf import compile_gbnf
from lexguide.grammar.ir import CompileNote, GrammarBuilder, GrammarIR, json_schema_compiler
from lexguide.grammar.lark import compile_grammar_list, compile_lark
from lexguide.grammar.lazy import compile_lazy
from lexguide.grammar.structural_tag import compile_structural_tag, compile_text_grammar
from lexguide.regex.nodes import building as rx_building
from lexguide.regex.nodes import store as rx_store
from lexguide.regex.syntax import parse_regex

__all__ = ["Grammar"]

LLGUIDANCE_MARKER = "%llguidance"

#: compiled grammars kept per process, by constructor and input (the most recent ones): a
#: repeated schema or grammar gets the same Grammar, hence its parser and cached masks
MAX_CACHED_GRAMMARS = 64
_compiled: OrderedDict[tuple[str, bytes | str], Grammar] = OrderedDict()
_compiled_lock = threading.Lock()


def _memoized(kind: str):
    """Cache a ``from_*`` constructor by its arguments: their ``marshal`` bytes (format 2, no
    back-references, so equal arguments give equal bytes; several times cheaper than JSON text,
    ~0.1 ms for a 160 kB schema) for plain dicts, lists, strings and numbers, else their JSON
    text; arguments that are neither compile uncached. The whole call, lookup included, is
    one compile for the garbage collector (:class:`_GcPaused`)."""

    def wrap(build):
        @functools.wraps(build)
        def cached(cls, *args: Any, **kwargs: Any) -> Grammar:
            with _GcPaused():
                return _cached(build, cls, args, kwargs)

        return cached

    def _cached(build, cls, args, kwargs) -> Grammar:
        key: tuple[str, bytes | str]
        try:
            key = (kind, marshal.dumps((args, kwargs), 2))
        except ValueError:  # e.g. a dict subclass: its JSON text
            try:
                key = (kind, json.dumps([args, kwargs], sort_keys=False))
            except (TypeError, ValueError, RecursionError):  # not JSON data: uncached
                return _build_and_lower(build, cls, args, kwargs)
        with _compiled_lock:
            hit = _compiled.get(key)
            if hit is not None:
                _compiled.move_to_end(key)
                return hit
        grammar = _build_and_lower(build, cls, args, kwargs)
        with _compiled_lock:
            _compiled[key] = grammar
            while len(_compiled) > MAX_CACHED_GRAMMARS:
                _compiled.popitem(last=False)
        return grammar

    return wrap


class _GcPaused:
    """No cyclic garbage collection while a compile runs, from the constructor's memo lookup
    on (nested and concurrent compiles share one pause; a collector the application turned
    off stays off).

    A compile allocates tens of thousands of containers (rules, regex node records, schema
    nodes) and makes no reference cycles (finished compilers break theirs; see
    ``SchemaCompiler.release``), so collections during it find nothing to free. Run anyway
    they cost ~10% of a compile, and when the process holds a large heap a full collection
    landing inside one compile costs more than the compile itself. The allocations still
    count towards the next collection, which runs once the compile is over; so does a
    collection the caller's own allocations made due (the schema it just parsed, say), which
    would otherwise run at the compile's first allocation."""

    _lock = threading.Lock()
    _depth = 0
    _disabled = False  # whether the outermost pause turned the collector off

    def __enter__(self) -> None:
        cls = _GcPaused
        with cls._lock:
            if cls._depth == 0:
                cls._disabled = gc.isenabled()
                if cls._disabled:
                    gc.disable()
            cls._depth += 1

    def __exit__(self, *exc: object) -> None:
        cls = _GcPaused
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0 and cls._disabled:
                cls._disabled = False
                gc.enable()


def _build_and_lower(build, cls, args, kwargs) -> Grammar:
    """Compile and lower into the core in one ``building()`` scope: no new generation starts
    between the two (lexguide.regex.nodes). The cyclic garbage collector pauses
    meanwhile (:class:`_GcPaused`)."""
    with _GcPaused(), rx_building():
        grammar = build(cls, *args, **kwargs)
        grammar.lexparser  # noqa: B018 - lowered now, while its regex nodes are current
    return grammar


class Grammar:
    """A compiled grammar: lexemes (byte regexes) plus CFG rules over them.

    Build with one of the ``from_*`` constructors. A ``Grammar`` is immutable and may be shared
    by any number of matchers and threads; its parser tables are built lazily and cached.
    """

    __slots__ = ("_lexparser", "_store", "ir", "source")

    def __init__(self, ir: GrammarIR, source: str = "") -> None:
        self.ir = ir
        self.source = source
        self._lexparser = None
        self._store = rx_store()  # the generation its regexes live in (kept alive with it)

    # -- constructors ---------------------------------------------------------------------
    @classmethod
    @_memoized("lark")
    def from_lark(cls, text: str) -> Grammar:
        """Parse the llguidance Lark variant (see docs). Raises ``GrammarError`` with line:col,
        also for a grammar that matches no input at all."""
        return cls(compile_lark(text, reject_empty=True), "lark")

    @classmethod
    @_memoized("gbnf")
    def from_gbnf(cls, text: str) -> Grammar:
        """Parse a llama.cpp GBNF grammar. Raises ``GrammarError`` with line:col, also for a
        grammar that matches no input at all."""
        return cls(compile_gbnf(text, reject_empty=True), "gbnf")

    @classmethod
    @_memoized("json")
    def from_json_schema(cls, schema: dict[str, Any] | str | bool, **options: Any) -> Grammar:
        """Compile a JSON Schema (dict or JSON text). Raises ``SchemaError`` with a JSON pointer.

        Options: ``whitespace`` ("bounded" default: at most one space, or one newline and up
        to 24 spaces/tabs, between tokens; "flexible": any JSON whitespace; "compact"),
        ``whitespace_flexible`` (bool), ``whitespace_pattern`` (regex), ``indent``,
        ``item_separator``, ``key_separator``, ``lenient`` (keywords that cannot be enforced
        are ignored instead of raising, and listed on :attr:`notes`), ``strict_formats``
        (unknown ``format`` values raise instead of being annotations listed on
        :attr:`notes`), ``refs`` ({uri: schema} documents ``$ref`` may reach; the draft
        metaschemas are bundled; nothing is fetched), ``json_allowed_escapes`` and
        ``json_allow_general_unicode_escapes``; see :mod:`lexguide.jsonschema` for the rest.
        """
        builder = GrammarBuilder()
        start = json_schema_compiler()(builder, schema, lexeme_class=0, **options)
        ir = builder.build(start)
        if ir.is_empty:  # contradictions the schema compiler could not see (regex & and ~)
            raise SchemaError("Unsatisfiable schema: no JSON value matches it (its string "
                              "patterns/formats exclude one another)")
        return cls(ir, "json_schema")

    @classmethod
    @_memoized("regex")
    def from_regex(cls, pattern: str, flags: str = "") -> Grammar:
        """A grammar of one lexeme: full match of ``pattern`` (Rust-regex syntax, anchored).
        Raises ``RegexError`` (with the offset) for a malformed regex or one matching nothing."""
        builder = GrammarBuilder()
        sym = builder.lexeme(parse_regex(pattern, flags), f"/{pattern}/")
        ir = builder.build(sym)
        if ir.is_empty:
            raise RegexError("the regex matches no string", pattern=pattern, offset=0)
        return cls(ir, "regex")

    @classmethod
    @_memoized("llg")
    def from_llguidance(cls, spec: dict[str, Any] | str) -> Grammar:
        """llguidance's grammar input: a grammar list ``{"grammars": [...]}`` (dict or JSON
        text; entries are Lark text or JSON Schemas, ``@name`` refers between them) or, for
        text not starting with ``{``, one Lark-variant grammar. Raises ``GrammarError``."""
        if isinstance(spec, str) and not spec.lstrip().startswith("{"):
            return cls.from_lark(spec)
        return cls(compile_grammar_list(spec, reject_empty=True), "lark")

    @classmethod
    @_memoized("structural_tag")
    def from_structural_tag(cls, spec: dict[str, Any] | str, **json_options: Any) -> Grammar:
        """Structure inside free text, from xgrammar's structural-tag JSON (dict or text).

        ``{"type": "structural_tag", "format": {...}}``, the legacy ``{"structures": [{"begin",
        "schema", "end"}], "triggers": [...]}``, or a bare format object. Free text never
        contains a trigger (each one starts a tag); ``docs/structural_tags.md`` lists the
        formats and where lexguide differs from xgrammar. ``json_options`` apply to every
        ``json_schema`` inside, as :meth:`from_json_schema` takes them (``whitespace=
        "flexible"`` allows any JSON whitespace, as xgrammar does). Raises ``GrammarError``
        naming the JSON path of the bad field (``$.format.tags[0].end``), ``SchemaError`` for
        a bad JSON Schema inside; unknown and unsupported format types are errors.
        """
        return cls(compile_structural_tag(spec, **json_options), "structural_tag")

    @classmethod
    def from_lazy(cls, grammar: Grammar | str, triggers: list[Any]) -> Grammar:
        """llama.cpp's lazy grammar: free text until a trigger fires, then ``grammar``.

        ``grammar`` is a ``Grammar`` or any text :meth:`parse` accepts. ``triggers`` are
        strings (words) or llama.cpp ``grammar_triggers`` objects ``{"type": "word" |
        "pattern" | "pattern_full" | "token" (or 1, 2, 3, 0), "value": str, "token": int}``.
        As in llama.cpp the grammar receives the text from the trigger on (a word, a pattern's
        match from its first capture group, a token's ``value``), so it must start with it.
        Free text is any text in which no trigger fires; with no trigger at all the output may
        be free text to the end. Raises ``GrammarError`` for a bad trigger, a pattern that
        hands the grammar an unbounded text, or a grammar that cannot start with a trigger.
        """
        if isinstance(grammar, Grammar):
            return _build_and_lower(lambda c, g: c(compile_lazy(g._current_ir(), triggers), "lazy"),
                                    cls, (grammar,), {})
        if not isinstance(grammar, str):
            raise TypeError("grammar must be a Grammar or grammar text")
        return cls._from_lazy_text(grammar, triggers)

    @classmethod
    @_memoized("lazy")
    def _from_lazy_text(cls, text: str, triggers: list[Any]) -> Grammar:
        return cls(compile_lazy(compile_text_grammar(text), triggers), "lazy")

    @classmethod
    def parse(cls, text: str) -> Grammar:
        """Route by format: text starting with ``%llguidance`` is the Lark variant, text
        starting with ``{`` a grammar list (:meth:`from_llguidance`), anything else GBNF."""
        stripped = text.lstrip()
        if stripped.startswith(LLGUIDANCE_MARKER):
            return cls.from_lark(text)
        if stripped.startswith("{"):
            return cls.from_llguidance(text)
        return cls.from_gbnf(text)

    # -- use ------------------------------------------------------------------------------
    @property
    def notes(self) -> tuple[CompileNote, ...]:
        """What the front end accepted without enforcing it: ``CompileNote(pointer, keyword,
        message)`` per unknown ``format`` (an annotation: any string) and per keyword relaxed
        under ``lenient=True``. Empty when the grammar enforces everything it was given."""
        return self.ir.notes

    @property
    def lexparser(self):
        """The shared lexer/parser (built on first use)."""
        if self._lexparser is None:
            self._lexparser = LexParser(self.ir, self._store)  # into its own generation
        return self._lexparser

    def _current_ir(self) -> GrammarIR:
        """The IR with its regexes in the current generation (rebuilt there when the grammar
        is of an older one), for a compile that builds on it."""
        return self.ir if self._store is rx_store() else self.ir.rebased(self._store)

    def validate(self, text: str | bytes) -> bool:
        """Whether the whole of ``text`` (UTF-8 bytes) is a sentence of the grammar (with
        the items of marked ``uniqueItems`` arrays distinct, see
        :mod:`lexguide.engine.unique_items`)."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        lp = self.lexparser
        if not lp.accepts(data):
            return False
        marked = self.ir.unique_item_lexemes
        if not marked:
            return True
        return UniqueItems(lp, marked).feed(EMPTY, lp.initial, data) is not None

    def captures(self, text: str | bytes) -> list[tuple[str, bytes]]:
        """``(name, bytes)`` of the Lark ``capture``/``stop_capture`` rules in a complete
        sentence ``text``, ordered by end position (see :mod:`lexguide.engine.captures`).

        Raises :class:`~lexguide.errors.MatcherError` (``CoreArgumentError``, naming the byte)
        if ``text`` does not match the grammar, :class:`~lexguide.errors.LimitExceeded` past the
        core's bounds on the parse of a long, highly ambiguous text.
        """
        data = text.encode() if isinstance(text, str) else bytes(text)
        lp = self.lexparser
        pieces: list = [(data, None)]
        if lp.eos_lexemes:  # a ``stop=""`` lexeme ends at the end of the input (the EOS)
            state = lp.advance_bytes(lp.initial, data)
            if state is not None and not lp.is_accepting(state):
                pieces.append((lp.eos_lexemes, None))
        return captures(lp, data, pieces, final=True)

    def __repr__(self) -> str:
        return (
            f"Grammar(source={self.source!r}, lexemes={len(self.ir.lexemes)}, "
            f"rules={len(self.ir.rules)})"
        )
