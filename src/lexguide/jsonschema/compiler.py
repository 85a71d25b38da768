"""Phase 2: typed schema IR → grammar IR (rules over JSON lexemes).

Lexemes are whole JSON tokens: punctuation, ``true``/``false``/``null``, one number regex per
numeric schema, one string regex per string schema (length limits, ``pattern`` and ``format``
intersected into a single regex over the escaped text), one key regex per property name or
key region. Whitespace is the lexeme class's skip regex (flexible mode) or nothing (compact);
with ``indent`` the newline and indentation are part of the punctuation lexemes, so output is
byte-exact ``json.dumps(indent=...)`` form, and rules are compiled per nesting depth (deeper
than ``max_indent_depth`` levels the layout is compact).

Objects: properties in schema order, each optional one skippable, then any number of extra
members whose keys exclude every declared name (by regex complement) and are split into
regions by ``patternProperties`` (keys matching several patterns must satisfy all of their
schemas). ``minProperties``/``maxProperties`` are enforced by counting members in the rules.
References become one nonterminal per target, so recursion needs no inlining.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from json.encoder import encode_basestring
from operator import itemgetter
from typing import NamedTuple

from lexguide.errors import LimitExceeded, SchemaError
from lexguide.grammar.ir import UNIQUE_BOUNDED_ITEM_NAME, UNIQUE_ITEM_NAME, GrammarBuilder
from lexguide.jsonschema.build import SchemaBuilder, nesting_error
from lexguide.jsonschema.escapes import DEFAULT, Escapes
from lexguide.jsonschema.formats import filter_rx, format_rx
from lexguide.jsonschema.negate import NotSupported
from lexguide.jsonschema.numeric import (
    NON_INTEGER_RX,
    NUMBER_RX,
    PLAIN_NUMBER_RX,
    NumericError,
    number_rx,
)
from lexguide.jsonschema.pattern import any_json_char, json_literal_body, pattern_rx
from lexguide.jsonschema.schema import (
    AnyOfSchema,
    AnySchema,
    ArraySchema,
    BoolSchema,
    NullSchema,
    NumberSchema,
    ObjectSchema,
    RefSchema,
    Schema,
    SomeMember,
    StringSchema,
    Unsat,
)
from lexguide.jsonschema.unique import (
    UNIQUE_ARRAY_NAME,
    UNIQUE_CLOSED_ARRAY_NAME,
    UNIQUE_FINITE_REST_ARRAY_NAME,
    UNIQUE_INTEGERS_ARRAY_NAME,
    UNIQUE_NUMBERS_ARRAY_NAME,
    UNIQUE_STRINGS_ARRAY_NAME,
    bounded_numbers_problem,
    bounded_strings,
    closed_objects,
    deref,
    distinct_subsets,
    finite_rests,
    finite_strings_problem,
    finite_values,
    integer_range_problem,
    matcher_items_problem,
    tracked_items_problem,
    union_problem,
    unique_items_problem,
)
from lexguide.limits import Nesting
from lexguide.regex import nodes as rx

__all__ = ["WHITESPACE_RX", "LayoutOptions", "SchemaCompiler"]

WHITESPACE_RX = rx.plus(rx.byteset(b" \t\n\r"))
QUOTE = rx.literal(b'"')
_NULL_RX, _TRUE_RX, _FALSE_RX = rx.literal(b"null"), rx.literal(b"true"), rx.literal(b"false")
_ANY_BYTES = rx.star(rx.byte_range(0, 255))
#: the bytes of an opening bracket's layout (ASCII): a third node with its language
_ASCII_BYTES = rx.star(rx.byte_range(0, 0x7F))
_SOME_BYTES = rx.alt(_ANY_BYTES, rx.literal(b"\0"))  # all bytes again, as another node
_MORE_BYTES = rx.alt(_ANY_BYTES, rx.literal(b"\1"))  # and again
_OTHER_BYTES = rx.alt(_ANY_BYTES, rx.literal(b"\2"))  # and again
# distinct sets of patternProperties that keys of one object can match (each needs a rule)
MAX_PATTERN_REGIONS = 64
# regex node ids are hash-consed, so this cache is valid across grammars until the store is cut
# back (lexguide.regex.nodes.building), which empties it
_STRING_CACHE: dict[tuple, int] = {}  # _string_key -> the string's regex
rx.on_rotate(_STRING_CACHE.clear)  # its values are regex nodes


def _string_key(s: StringSchema, esc: Escapes) -> tuple:
    """What the regex of ``s``'s JSON strings depends on: every field of ``s`` but its
    pointer, and the escapes they are spelled with."""
    return (s.const, s.min_length, s.max_length, s.patterns, s.formats, s.rx_filters, esc)


MAX_COUNT_RULES = 50_000

_first, _second = itemgetter(0), itemgetter(1)  # of a pair, as C-level functions
# schema nodes that compile to one lexeme or a fixed alternation: no nested compiles
_SCALARS = frozenset((NullSchema, BoolSchema, NumberSchema, StringSchema))


@dataclass(frozen=True, slots=True)
class LayoutOptions:
    """Where whitespace goes. ``skip_rx``: skip regex (None = none); separators are regexes."""

    skip_rx: int | None = WHITESPACE_RX
    item_separator: int = rx.literal(b",")
    key_separator: int = rx.literal(b":")
    indent: str | None = None
    max_indent_depth: int = 32
    # x-guidance whitespace_pattern: matched at most once at each place JSON allows whitespace,
    # so it is folded into the punctuation lexemes instead of being a (repeatable) skip regex
    explicit_ws: int | None = None
    # the escapes string values and object keys may use (x-guidance json_allowed_escapes,
    # json_allow_general_unicode_escapes; lexguide.jsonschema.escapes)
    escapes: Escapes = DEFAULT


class _Marked(NamedTuple):
    """The item lexeme (marked ``unique_item``) of a ``uniqueItems`` array the matcher keeps
    distinct."""

    symbol: int


class _Tracked(NamedTuple):
    """The opening bracket lexeme (marked ``unique_item``) of a ``uniqueItems`` array whose
    items, any JSON values, the matcher keeps distinct."""

    symbol: int


class _Layout:
    """Punctuation lexeme symbols for one nesting depth, and the symbols of the schema nodes
    compiled at it (``compiled``: ``id(node)`` -> symbol; the compiler keeps the nodes alive)."""

    def __init__(self, comp: SchemaCompiler, depth: int) -> None:
        o = comp.layout
        self.depth = depth
        self.compiled: dict[int, int] = {}
        self._child: _Layout | None = None
        key = (o, depth)
        nodes = _LAYOUT_CACHE.get(key)
        if nodes is None:
            nodes = _LAYOUT_CACHE[key] = _layout_nodes(o, depth)
        lex = comp.lex
        (obj_open, obj_close, arr_open, arr_close, obj_empty, arr_empty, sep, colon,
         self.next_depth) = nodes
        self.obj_open, self.obj_close = lex(obj_open, "{"), lex(obj_close, "}")
        self.arr_open, self.arr_close = lex(arr_open, "["), lex(arr_close, "]")
        # with the compact layout an empty object is its two brackets, else one lexeme
        self.obj_empty: tuple[int, ...] = (
            (self.obj_open, self.obj_close) if obj_empty is None else (lex(obj_empty, "{}"),))
        self.arr_empty: tuple[int, ...] = (
            (self.arr_open, self.arr_close) if arr_empty is None else (lex(arr_empty, "[]"),))
        self.sep = lex(sep, ",")
        self.colon = lex(colon, ":")
        self.comp = comp

    @property
    def child(self) -> _Layout:
        """The layout one nesting level deeper (this one past the indented depths)."""
        child = self._child
        if child is None:
            child = self._child = self.comp.layout_at(self.next_depth)
        return child


# (LayoutOptions, depth) -> the regexes of _Layout; regex node ids, so emptied with the store
_LAYOUT_CACHE: dict[tuple, tuple] = {}
rx.on_rotate(_LAYOUT_CACHE.clear)


def _layout_nodes(o: LayoutOptions, depth: int) -> tuple:
    """The punctuation regexes of nesting depth ``depth`` under ``o``: ``(obj_open, obj_close,
    arr_open, arr_close, obj_empty, arr_empty, sep, colon, next_depth)``; ``obj_empty`` /
    ``arr_empty`` are None when an empty object/array is its two bracket lexemes."""
    if o.indent is not None and depth < o.max_indent_depth:
        inner = ("\n" + o.indent * (depth + 1)).encode()
        outer = ("\n" + o.indent * depth).encode()
        return (rx.literal(b"{" + inner), rx.literal(outer + b"}"), rx.literal(b"[" + inner),
                rx.literal(outer + b"]"), rx.literal(b"{}"), rx.literal(b"[]"),
                rx.concat(o.item_separator, rx.literal(inner)), o.key_separator, depth + 1)
    if o.explicit_ws is not None:
        ws = rx.opt(o.explicit_ws)

        def punct(text: bytes, before: bool, after: bool) -> int:
            parts = [ws] if before else []
            parts.append(rx.literal(text))
            return rx.concat(*parts, *([ws] if after else []))

        return (punct(b"{", False, True), punct(b"}", True, False), punct(b"[", False, True),
                punct(b"]", True, False), rx.concat(rx.literal(b"{"), ws, rx.literal(b"}")),
                rx.concat(rx.literal(b"["), ws, rx.literal(b"]")),
                rx.concat(ws, o.item_separator, ws), rx.concat(ws, o.key_separator, ws), depth)
    return (rx.literal(b"{"), rx.literal(b"}"), rx.literal(b"["), rx.literal(b"]"), None, None,
            o.item_separator, o.key_separator, depth if o.indent is None else o.max_indent_depth)


class SchemaCompiler:
    """Emits the rules of one schema document into a :class:`GrammarBuilder` (mutates it)."""

    def __init__(self, builder: GrammarBuilder, schemas: SchemaBuilder, layout: LayoutOptions,
                 *, lenient: bool = False) -> None:
        self.b = builder
        self.schemas = schemas
        self.layout = layout
        self.lenient = lenient
        self.cls = builder.new_lexeme_class(layout.skip_rx)
        self._layouts: dict[int, _Layout] = {}
        self._keep: list[Schema] = []  # the nodes compiled, so their ids stay theirs
        self._key_lexemes: dict[str, int] = {}  # declared key -> its lexeme
        self._string_lexemes: dict[tuple, int] = {}  # string constraints -> their lexeme
        self._bools: dict[bool | None, int] = {}  # BoolSchema value -> its symbol
        self._refs: dict[tuple[str, int], int] = {}
        self._any: dict[int, int] = {}
        self.dead = self.lex(rx.NOTHING, "<unsatisfiable>")
        self.nesting = Nesting(nesting_error)
        self._where = [""]  # pointers of the schemas being compiled (for errors)

    def lex(self, node: int, name: str) -> int:
        return self.b.plain_lexeme(node, name, self.cls)

    def key_lexeme(self, name: str) -> int:
        """The lexeme of the declared key ``name`` (every spelling the escapes allow), named
        by its JSON text; one lookup when met again in this document."""
        got = self._key_lexemes.get(name)
        if got is None:
            got = self._key_lexemes[name] = self.lex(
                _quoted_literal(name, self.layout.escapes), encode_basestring(name))
        return got

    def release(self) -> None:
        """Drop the layouts (each refers back to this compiler, and may be its own child), so
        a finished compiler is freed by reference counting instead of waiting for a cyclic
        collection."""
        for lay in self._layouts.values():
            lay._child = None
        self._layouts.clear()

    def layout_at(self, depth: int) -> _Layout:
        lay = self._layouts.get(depth)
        if lay is None:
            lay = self._layouts[depth] = _Layout(self, depth)
        return lay

    def compile_root(self, s: Schema) -> int:
        if isinstance(s, Unsat):
            raise SchemaError(f"Unsatisfiable schema: {s.reason}")
        return self.compile(s, self.layout_at(0))

    def compile(self, s: Schema, lay: _Layout) -> int:
        key = id(s)
        compiled = lay.compiled
        got = compiled.get(key)
        if got is not None:
            return got
        nesting = self.nesting
        if nesting.depth < nesting.limit:
            # a leaf compiles nothing nested, nor does a reference whose rule exists: no
            # pointer or nesting bookkeeping (a third of the schemas a large object compiles
            # are scalars)
            kind = type(s)
            if kind in _SCALARS:
                got = _BY_TYPE[kind](self, s, lay)
            elif kind is RefSchema:
                got = self._refs.get((s.key, lay.depth))
            if got is not None:
                self._keep.append(s)
                compiled[key] = got
                return got
        where = s.key if type(s) is RefSchema else getattr(s, "pointer", "")
        where = where or self._where[-1]
        if nesting.depth >= nesting.limit:
            raise nesting.make_error(where, nesting.limit)
        nesting.depth += 1
        self._where.append(where)
        try:
            self._keep.append(s)
            got = compiled[key] = self._compile(s, lay)
        finally:
            self._where.pop()
            nesting.depth -= 1
        return got

    def _compile(self, s: Schema, lay: _Layout) -> int:
        """The symbol of ``s``, by the compile method of its node type (:data:`_BY_TYPE`)."""
        by_type = _BY_TYPE.get(type(s))
        if by_type is None:
            raise TypeError(f"not a schema node: {s!r}")
        return by_type(self, s, lay)

    def _unsat(self, s: Unsat, lay: _Layout) -> int:
        return self.dead

    def _null(self, s: NullSchema, lay: _Layout) -> int:
        return self.lex(_NULL_RX, "null")

    def _bool(self, s: BoolSchema, lay: _Layout) -> int:
        got = self._bools.get(s.value)  # one symbol per value (None: either) in a document
        if got is None:
            if s.value is None:
                got = self.b.alt([[self.lex(_TRUE_RX, "true")], [self.lex(_FALSE_RX, "false")]],
                                 "boolean")
            else:
                got = self.lex(_TRUE_RX if s.value else _FALSE_RX, str(s.value).lower())
            self._bools[s.value] = got
        return got

    def _number(self, s: NumberSchema, lay: _Layout) -> int:
        return self.lex(self.number(s), "integer" if s.integer else "number")

    def _string(self, s: StringSchema, lay: _Layout) -> int:
        return self.string_lexeme(s)

    def string_lexeme(self, s: StringSchema) -> int:
        """The lexeme of ``s``'s JSON strings; one lookup for constraints met before in this
        document, unless making it could note something (lenient lengths), which is noted
        at each schema."""
        esc = self.layout.escapes
        key = _string_key(s, esc)
        got = self._string_lexemes.get(key)
        if got is None:
            got = self.lex(self.string(s, esc), "string")
            if not self.lenient or (s.min_length == 0 and s.max_length is None):
                self._string_lexemes[key] = got
        return got

    def _any_of(self, s: AnyOfSchema, lay: _Layout) -> int:
        s = self.unique_union(s)
        live = [sym for sym in (self.option(o, lay) for o in s.options) if sym != self.dead]
        return self.b.alt([[sym] for sym in live], "anyOf") if live else self.dead

    def option(self, s: Schema, lay: _Layout) -> int:
        """:meth:`compile` of a union's option. A string constant (an enum's value) is its
        lexeme at once: what ``compile`` gives, without its memo, pointer and nesting
        bookkeeping (a union of 1,500 constants spent a third of its compile there); at the
        nesting limit ``compile`` raises as it would."""
        if isinstance(s, StringSchema) and s.const is not None \
                and self.nesting.depth < self.nesting.limit:
            return self.string_lexeme(s)
        return self.compile(s, lay)

    # -- scalars ------------------------------------------------------------------------------
    def number(self, s: NumberSchema) -> int:
        try:
            node = number_rx(integer=s.integer, minimum=s.minimum, maximum=s.maximum,
                             exclusive_minimum=s.exclusive_minimum,
                             exclusive_maximum=s.exclusive_maximum, multiple_of=s.multiple_of)
            if (s.not_multiples or s.non_integer) and node == NUMBER_RX:
                node = PLAIN_NUMBER_RX  # constrained numbers are written without exponent
            if s.non_integer:
                node = rx.intersect(node, NON_INTEGER_RX)
            if s.not_multiples:
                excluded = [number_rx(integer=s.integer, multiple_of=m) for m in s.not_multiples]
                node = rx.intersect(node, *(rx.complement(x) for x in excluded))
            return node
        except NumericError as e:
            if not self.lenient:
                raise SchemaError(str(e), pointer=s.pointer, keyword="multipleOf") from None
            self.schemas.note(s.pointer, "multipleOf", f"{e} (multipleOf ignored: lenient)")
            return self.number(replace(s, multiple_of=None))

    def string_body(self, s: StringSchema, esc: Escapes) -> int:
        """Regex of what goes between the quotes (spelled as ``esc`` allows): lengths,
        patterns, formats and filters intersected."""
        if s.const is not None:
            return json_literal_body(s.const, esc)
        parts = []
        if s.min_length or s.max_length is not None:
            parts.append(rx.repeat(any_json_char(esc), s.min_length, s.max_length))
        parts += [pattern_rx(p, esc) for p in s.patterns]
        parts += [format_rx(f, esc) for f in s.formats]
        parts += [filter_rx(kind, x, esc) for want, kind, x in s.rx_filters if want]
        negated = [rx.complement(filter_rx(kind, x, esc))
                   for want, kind, x in s.rx_filters if not want]
        if negated:  # a complement also contains non-JSON byte strings: intersect with bodies
            parts = (parts or [any_body(esc)]) + negated
        if not parts:
            return any_body(esc)
        return rx.intersect(*parts) if len(parts) > 1 else parts[0]

    def string(self, s: StringSchema, esc: Escapes) -> int:
        key = _string_key(s, esc)
        got = _STRING_CACHE.get(key)
        if got is not None:
            return got
        if len(_STRING_CACHE) > 65536:
            _STRING_CACHE.clear()
        try:
            got = _STRING_CACHE[key] = rx.concat(QUOTE, self.string_body(s, esc), QUOTE)
            return got
        except LimitExceeded as e:
            if not self.lenient or (s.min_length == 0 and s.max_length is None):
                raise SchemaError(f"string constraints too large to enforce: {e}",
                                  pointer=s.pointer, keyword="maxLength") from None
            self.schemas.note(s.pointer, "maxLength", f"{e} (length limits ignored: lenient)")
            return self.string(replace(s, min_length=0, max_length=None), esc)

    def string_rx(self, s: StringSchema) -> int:
        """The regex of ``s``'s JSON strings under the layout's escapes."""
        return self.string(s, self.layout.escapes)

    def any_value(self, lay: _Layout) -> int:
        """Any JSON value (recursive rules, one set per layout depth)."""
        got = self._any.get(lay.depth)
        if got is not None:
            return got
        b = self.b
        value = self._any[lay.depth] = b.nonterminal("json_value")
        child = lay.child
        inner = self.any_value(child)
        string = self.lex(rx.concat(QUOTE, any_body(self.layout.escapes), QUOTE), "string")
        key = self.lex(rx.concat(QUOTE, any_body(self.layout.escapes), QUOTE), "key")
        member = b.seq([key, lay.colon, inner], "json_member")
        obj = b.alt([[lay.obj_open, b.plus(member, lay.sep), lay.obj_close], list(lay.obj_empty)],
                    "json_object")
        arr = b.alt([[lay.arr_open, b.plus(inner, lay.sep), lay.arr_close], list(lay.arr_empty)],
                    "json_array")
        b.new_rules(value, tuple((alt,) for alt in (
            obj, arr, string, self.lex(number_rx(integer=False), "number"),
            self.lex(rx.literal(b"true"), "true"), self.lex(rx.literal(b"false"), "false"),
            self.lex(rx.literal(b"null"), "null"))))
        return value

    def ref(self, s: RefSchema, lay: _Layout) -> int:
        key = (s.key, lay.depth)
        nt = self._refs.get(key)
        if nt is None:
            if isinstance(self.schemas.resolve(s.key), Unsat):
                return self.dead
            nt = self._refs[key] = self.b.nonterminal(f"ref:{s.key or '#'}")
            self.b.new_rules(nt, ((self.compile(self.schemas.resolve(s.key), lay),),))
        return nt

    # -- arrays -------------------------------------------------------------------------------
    def array(self, s: ArraySchema, lay: _Layout) -> int:
        b = self.b
        child = lay.child
        lo, hi = s.min_items, s.max_items
        empty = list(lay.arr_empty)
        if hi == 0:
            return b.seq(empty, "array")
        marked = None  # the item lexeme, when the matcher keeps the items distinct
        opener = lay.arr_open
        if s.unique:
            got = self.unique_array(s, lay)
            if isinstance(got, int):
                return got
            if isinstance(got, _Tracked):
                opener = got.symbol
            else:
                marked = got
        if s.contains is not None:
            if s.prefix:
                raise SchemaError("contains together with prefixItems is not supported",
                                  pointer=s.pointer, keyword="contains")
            return self.array_contains(s, lay, opener)
        k = len(s.prefix) if hi is None else min(len(s.prefix), hi)
        prefix = [self.compile(p, child) for p in s.prefix[:k]] if k else []
        if k and self.dead in prefix:  # positions from the first impossible one on cannot exist
            k = prefix.index(self.dead)
            prefix, hi = prefix[:k], k if hi is None else min(hi, k)
            if lo > k:
                return self.dead
        if marked is not None:
            item = marked.symbol
        else:
            item = None if isinstance(s.items, Unsat) else self.compile(s.items, child)
        if item == self.dead or (hi is not None and hi <= k):
            item = None
        if item is None and lo > k:
            return self.dead
        sep = lay.sep
        if k == 0:
            if item is None:
                return b.seq(empty, "array")
            body = b.seq((item, self._more_items(item, sep, lo, hi, 1)), "array_items")
        else:
            rest = self._more_items(item, sep, lo, hi, k)  # continuation after k items
            for i in range(k - 1, 0, -1):
                alts = [[sep, prefix[i], rest]]
                if i >= lo:
                    alts.append([])
                rest = b.alt(alts, "array_rest")
            body = b.seq([prefix[0], rest], "array_items")
        close = (opener, body, lay.arr_close)
        return b.alt_tuples((close, lay.arr_empty) if lo == 0 else (close,), "array")

    def _more_items(self, item: int | None, sep: int, lo: int, hi: int | None,
                    n_done: int) -> int:
        """Further items (``item``, None: none) after ``n_done`` of an array of ``lo`` to
        ``hi`` items, each preceded by the separator ``sep``."""
        b = self.b
        if item is None:
            return b.empty()
        more_hi = None if hi is None else hi - n_done
        return b.repeat(b.seq((sep, item), "array_more"), max(lo - n_done, 0), more_hi)

    def _tracked(self, lay: _Layout, name: str, same_bytes: int | None = None) -> _Tracked:
        """The :class:`_Tracked` opening bracket named ``name``. With ``same_bytes`` (a node
        holding every byte string of the bracket) the bracket is met with it: the same bytes
        as another node, so that each kind of tracked array is a lexeme of its own (the
        builder shares a lexeme between equal regexes, whatever their names)."""
        opener = _LAYOUT_CACHE[(self.layout, lay.depth)][2]
        if same_bytes is not None:
            opener = rx.intersect(opener, same_bytes)
        return _Tracked(self.b.lexeme(opener, name, lexeme_class=self.cls, unique_item=True))

    def unique_array(self, s: ArraySchema, lay: _Layout) -> int | _Marked | _Tracked | None:
        """``uniqueItems`` by construction (:mod:`lexguide.jsonschema.unique`): the array's
        symbol; or a :class:`_Marked` item lexeme for an ordinary array whose items the matcher
        keeps distinct (strings), or a :class:`_Tracked` opening bracket (other items); None
        when it cannot be and ``lenient`` (noted). Raises SchemaError when it cannot be
        otherwise."""
        values = finite_values(s.items, self.schemas.resolve)
        problem = unique_items_problem(s, values)
        at = f"{s.pointer}/uniqueItems"
        if problem is not None and (isinstance(values, str) or s.prefix):
            by_matcher = matcher_items_problem(s, self.schemas.resolve,
                                               self.layout.escapes.general, self.string_rx)
            items = deref(s.items, self.schemas.resolve)
            if by_matcher is None and isinstance(items, StringSchema):
                name = UNIQUE_BOUNDED_ITEM_NAME if bounded_strings(items) else UNIQUE_ITEM_NAME
                return _Marked(self.b.lexeme(self.string(items, self.layout.escapes), name,
                                             lexeme_class=self.cls, unique_item=True))
            tracked = tracked_items_problem(s, self.schemas.resolve, self.string_rx)
            if tracked is None:
                parts = (*s.prefix, s.items)
                if any(finite_rests(p, self.schemas.resolve) for p in parts):
                    return self._tracked(lay, UNIQUE_FINITE_REST_ARRAY_NAME, _ASCII_BYTES)
                if any(closed_objects(p, self.schemas.resolve) for p in parts):
                    return self._tracked(lay, UNIQUE_CLOSED_ARRAY_NAME, _ANY_BYTES)
                return self._tracked(lay, UNIQUE_ARRAY_NAME)
            if s.contains is not None:
                problem = tracked
            elif isinstance(items, StringSchema) and by_matcher:
                problem = by_matcher
            elif not (isinstance(items, NumberSchema) and items.maximum is not None
                      and items.minimum is not None):
                problem = tracked  # else the size of the integer range is the reason
        # why the items cannot be counted as an integer range (None: they can)
        counted = None if problem is None else integer_range_problem(s, self.schemas.resolve)
        if problem is not None and not isinstance(values, str) and not s.prefix and \
                counted is not None:  # else counted
            strings = finite_strings_problem(s, values, self.layout.escapes.general)
            if strings is None:
                return self._tracked(lay, UNIQUE_STRINGS_ARRAY_NAME, _SOME_BYTES)
            problem = strings
        if problem is not None:  # an integer range, counted by the matcher
            if counted is None:
                return self._tracked(lay, UNIQUE_INTEGERS_ARRAY_NAME, _MORE_BYTES)
            if counted.startswith("minItems"):
                problem = counted
            else:  # numbers with a bound or a multipleOf: their values listed by the matcher
                numbers = bounded_numbers_problem(s, self.schemas.resolve)
                if numbers is None:
                    return self._tracked(lay, UNIQUE_NUMBERS_ARRAY_NAME, _OTHER_BYTES)
                if numbers.startswith("minItems") or isinstance(
                        deref(s.items, self.schemas.resolve), NumberSchema):
                    problem = numbers
        if problem is not None:
            if self.lenient:
                self.schemas.note(at, "uniqueItems", f"not enforced: {problem} (lenient)")
                return None
            raise SchemaError(
                f"uniqueItems cannot be enforced: {problem}. It is enforced for items with a "
                "small finite set of values (enum, const, boolean, null, small integer "
                "ranges), strings (bounded ones without general unicode escapes), integer "
                "ranges, numbers without maximum or multipleOf, objects open to more members, "
                "arrays without maxItems, and unions of these; lenient=True (CLI --lenient) "
                "compiles the array without it and lists it on Grammar.notes",
                pointer=at, keyword="uniqueItems")
        assert not isinstance(values, str)
        b, child = self.b, lay.child
        syms = [sym for sym in (self.compile(v, child) for _, v in values) if sym != self.dead]
        nts: dict[tuple[int, ...], int] = {}

        def nt(used: tuple[int, ...]) -> int:
            got = nts.get(used)
            if got is None:
                got = nts[used] = b.nonterminal("unique_items")
            return got

        for used, can_end, moves in distinct_subsets(len(syms), s.min_items, s.max_items):
            if used and can_end:
                b.rule(nt(used), [])
            for i in moves:
                nxt = tuple(sorted((*used, i)))
                b.rule(nt(used), ([lay.sep] if used else []) + [syms[i], nt(nxt)])
        alts = [[lay.arr_open, nts[()], lay.arr_close]] if () in nts else []
        if s.min_items == 0:
            alts.append(list(lay.arr_empty))
        return b.alt(alts, "array") if alts else self.dead

    def unique_union(self, s: AnyOfSchema) -> AnyOfSchema:
        """``s``, or, when one of its options is a ``uniqueItems`` array the matcher cannot
        keep apart from another option's array (:func:`~lexguide.jsonschema.unique.union_problem`)
        and ``lenient``, ``s`` with that array allowing duplicates (noted). Raises SchemaError
        when it is not lenient."""
        got = union_problem(s.options, self.schemas.resolve, self.string_rx)
        if got is None:
            return s
        i, problem = got
        array = deref(s.options[i], self.schemas.resolve)
        assert isinstance(array, ArraySchema)
        at = f"{array.pointer}/uniqueItems"
        if not self.lenient:
            raise SchemaError(f"uniqueItems cannot be enforced: {problem}; lenient=True (CLI "
                              "--lenient) compiles the array without it and lists it on "
                              "Grammar.notes", pointer=at, keyword="uniqueItems")
        self.schemas.note(at, "uniqueItems", f"not enforced: {problem} (lenient)")
        options = list(s.options)
        options[i] = replace(array, unique=False)
        return self.unique_union(AnyOfSchema(tuple(options)))

    def array_contains(self, s: ArraySchema, lay: _Layout, opener: int | None = None) -> int:
        """Items counted by ``contains``: state (items so far, matching items so far), capped.
        ``opener``: the array's opening bracket (a marked one for ``uniqueItems``)."""
        b = self.b
        inter = self.schemas.intersect
        assert s.contains is not None and not s.prefix
        lo, hi, lo_c, hi_c = s.min_items, s.max_items, s.min_contains, s.max_contains
        hit = self.compile(inter(s.items, s.contains), lay.child)
        if hi_c is None:
            miss = self.compile(s.items, lay.child)  # any item; the count is a lower bound
        else:
            try:
                other = self.schemas.diff(s.items, s.contains)
            except NotSupported as e:
                raise SchemaError(f"maxContains needs the items that fail contains: {e}",
                                  pointer=s.pointer, keyword="maxContains") from None
            miss = self.compile(other, lay.child)
        n_cap = hi if hi is not None else max(lo, 1)
        c_cap = hi_c if hi_c is not None else lo_c
        if (n_cap + 1) * (c_cap + 1) > MAX_COUNT_RULES:
            raise SchemaError("contains/minItems/maxItems bounds are too large to enforce",
                              keyword="contains")
        # transitions (n, c) -> [(item symbol, next state)]; keep only states that can end
        moves: dict[tuple[int, int], list[tuple[int, tuple[int, int]]]] = {}
        for n in range(n_cap + 1):
            for c in range(c_cap + 1):
                out_moves = []
                if hi is None or n + 1 <= hi:
                    n2 = min(n + 1, n_cap)
                    if hit != self.dead and (hi_c is None or c + 1 <= hi_c):
                        out_moves.append((hit, (n2, min(c + 1, c_cap))))
                    if miss != self.dead:
                        out_moves.append((miss, (n2, c)))
                moves[(n, c)] = out_moves
        ok = {st for st in moves if st[0] >= lo and st[1] >= lo_c and st[0] > 0}
        changed = True
        while changed:
            changed = False
            for st, mv in moves.items():
                if st not in ok and any(nxt in ok for _, nxt in mv):
                    ok.add(st)
                    changed = True
        if (0, 0) not in ok:
            return b.seq(list(lay.arr_empty), "array") if lo == 0 and lo_c == 0 else self.dead
        nts = {st: b.nonterminal("contains_rest") for st in ok}
        for (n, c), nt in nts.items():
            if n >= lo and c >= lo_c and n > 0:
                b.rule(nt, [])
            for sym, nxt in moves[(n, c)]:
                if nxt in ok:
                    b.rule(nt, ([lay.sep] if n > 0 else []) + [sym, nts[nxt]])
        out = [[lay.arr_open if opener is None else opener, nts[(0, 0)], lay.arr_close]]
        if lo == 0 and lo_c == 0:
            out.append(list(lay.arr_empty))
        return b.alt(out, "array")

    # -- objects ------------------------------------------------------------------------------
    def object(self, s: ObjectSchema, lay: _Layout) -> int:
        b = self.b
        child = lay.child
        names_rx = None if type(s.property_names) is AnySchema else self.key_constraint(
            s.property_names, self.layout.escapes)  # any key (most objects): None at once
        names_ok = None if names_rx is None else self.key_constraint(s.property_names, DEFAULT)
        inter = self.schemas.intersect
        props = list(s.properties)
        declared = list(map(_first, props))
        for r in s.required:
            if r not in declared:
                props.append((r, inter.extra_schema(s, r)))
                declared.append(r)
        required = set(s.required)
        some = s.some_members
        entries: list[tuple[int, bool, dict[int, int]]] = []
        pats = s.pattern_properties
        keyed = bool(pats) or names_ok is not None or bool(some)  # does a key's body matter
        body = b""
        dead, compile, colon = self.dead, self.compile, lay.colon
        listed = set(map(_first, s.properties)) if keyed else ()  # not only required
        for name, sch in props:
            if keyed:  # as json.dumps(name, ensure_ascii=False)
                body = encode_basestring(name)[1:-1].encode()
                if name in listed:
                    for p, ps in pats:
                        if rx.matches(pattern_rx(p), body):
                            sch = inter(sch, ps)
                if names_ok is not None and not rx.matches(names_ok, body):
                    sch = Unsat(f"property name {name!r} violates propertyNames")
            value = dead if isinstance(sch, Unsat) else compile(sch, child)
            if value == dead:  # unsatisfiable: absent if optional, else no object at all
                if name in required:
                    return dead
                continue
            key = self.key_lexeme(name)
            member = b.seq((key, colon, value), "member")
            witnesses: dict[int, int] = {}
            if not some:  # no member needs a witness (most objects)
                entries.append((member, name in required, witnesses))
                continue
            fits = sum(1 << i for i, w in enumerate(some)
                       if _some_key(w, name, body, self.rejected_keys(w, DEFAULT)))
            for mask in _submasks(fits):
                w_sch = sch
                for i in _bits(mask):
                    w_sch = inter(w_sch, some[i].value)
                w_value = self.dead if isinstance(w_sch, Unsat) else self.compile(w_sch, child)
                if w_value != self.dead:
                    witnesses[mask] = b.seq([key, lay.colon, w_value], "some_member")
            entries.append((member, name in required, witnesses))
        extras, w_extras = self.extra_members(s, lay, declared, names_rx)
        extra = None if not extras else extras[0] if len(extras) == 1 else b.alt(
            [[m] for m in extras], "extra_member")
        w_extra = {mask: b.alt([[m] for m in ms], "some_extra_member")
                   for mask, ms in w_extras.items() if ms} if w_extras else {}
        return self.members(s, lay, entries, extra, w_extra, any(map(_second, entries)))

    def members(self, s: ObjectSchema, lay: _Layout,
                entries: list[tuple[int, bool, dict[int, int]]], extra: int | None,
                w_extra: dict[int, int], has_required: bool) -> int:
        """Ordered optional/required members then extras, counting up to the property bounds
        and, when ``s`` needs some additional members, which are still to come (a state is
        ``(count, need)``, ``need`` a bit set over ``s.some_members``; an entry's third item
        and ``w_extra`` map a bit set to the member symbols that witness all of it)."""
        b = self.b
        lo, hi = s.min_properties, s.max_properties
        need0 = (1 << len(s.some_members)) - 1
        alts_top = []
        if lo == 0 and not has_required and not need0:
            alts_top.append(list(lay.obj_empty))
        if hi == 0:
            return b.alt(alts_top, "object") if alts_top else self.dead
        lo1 = max(lo, 1)
        cap = hi if hi is not None else lo1
        n = len(entries)
        if (n + 1) * (cap + 1) * (need0 + 1) * (need0 + 1) > MAX_COUNT_RULES:
            raise SchemaError(f"minProperties/maxProperties {lo}/{hi} with {n} properties is too "
                              "large to enforce", pointer=s.pointer, keyword="maxProperties")
        sep = lay.sep
        if not need0 and hi is None and lo <= 1:
            return self.members_uncounted(lay, entries, extra, alts_top)

        def sat(c: int) -> int:
            return min(c, cap)

        def fits(c: int) -> bool:
            return hi is None or c + 1 <= hi

        if hi is not None and lo1 > hi:
            return b.alt(alts_top, "object") if alts_top else self.dead
        needs = range(need0 + 1)

        def moves(w: int, plain: int | None, by_mask: dict[int, int]) -> list[tuple[int, int]]:
            """(symbol, need after it) for one more member when ``w`` is still needed."""
            out = [] if plain is None else [(plain, w)]
            return out + [(sym, w & ~mask) for mask, sym in by_mask.items()
                          if mask and mask & w == mask]

        # ext[c, w]: extra members after c members, w: the witnesses still to come; only states
        # that can still reach an end (enough members, within the bound, every witness
        # written) get rules, so no prefix leads to a dead end
        ok = {(c, 0) for c in range(cap + 1) if c >= lo1}
        changed = True
        while changed:
            changed = False
            for c in range(cap + 1):
                for w in needs:
                    if (c, w) in ok or not fits(c):
                        continue
                    if any((sat(c + 1), w2) in ok for _, w2 in moves(w, extra, w_extra)):
                        ok.add((c, w))
                        changed = True
        ext = {st: b.nonterminal("object_extra") for st in sorted(ok)}
        for (c, w), nt in ext.items():
            lead = [sep] if c > 0 else []
            if hi is None and c == cap and extra is not None and not w:
                b.rule(nt, [b.star(b.seq([sep, extra], "extra_more"))])
                continue
            if c >= lo1 and not w:
                b.rule(nt, [])
            for sym, w2 in moves(w, extra, w_extra):
                if fits(c) and (sat(c + 1), w2) in ext:
                    b.rule(nt, lead + [sym, ext[(sat(c + 1), w2)]])
        row: dict[tuple[int, int], int] = dict(ext)
        for i in range(n - 1, -1, -1):
            member, req, witnesses = entries[i]
            new_row: dict[tuple[int, int], int] = {}
            for c in range(cap + 1):
                lead = [sep] if c > 0 else []
                for w in needs:
                    alts = []
                    for sym, w2 in moves(w, member, witnesses):
                        if fits(c) and (sat(c + 1), w2) in row:
                            alts.append(lead + [sym, row[(sat(c + 1), w2)]])
                    if not req and (c, w) in row:
                        alts.append([row[(c, w)]])
                    if alts:
                        new_row[(c, w)] = b.alt(alts, "members")
            row = new_row
        if (0, need0) not in row:
            return b.alt(alts_top, "object") if alts_top else self.dead
        alts_top.append([lay.obj_open, row[(0, need0)], lay.obj_close])
        return b.alt(alts_top, "object")

    def members_uncounted(self, lay: _Layout, entries: list[tuple[int, bool, dict[int, int]]],
                          extra: int | None, alts_top: list[list[int]]) -> int:
        """:meth:`members` without bounds (at most ``minProperties: 1``) or needed members,
        most objects: the same rules in the same order, without its bookkeeping. The states
        are "no member yet" (``row0``) and "one or more" (``row1``); None when no rule is left."""
        b = self.b
        sep = lay.sep
        # the rows after the last member, then two fresh nonterminals per member (rows 0 and
        # 1 before it) and the object's own, their rules made here in order: every
        # alternative holds rows after the member, nonterminals of this object alone
        rules: list[tuple[int, tuple[int, ...]]]
        if extra is not None:
            row0 = b.new_nonterminals("object_extra", 2)
            row1 = row0 + 1
            b.new_rules(row0, ((extra, row1),))
            rules = [(row1, (b.star(b.seq((sep, extra), "extra_more")),))]
        else:
            row0, row1 = None, b.new_nonterminals("object_extra", 1)
            rules = [(row1, ())]
        nt = b.new_nonterminals("members", 2 * len(entries))
        add = rules.append
        for member, req, _ in reversed(entries):
            add((nt, (member, row1)))
            if not req and row0 is not None:
                add((nt, (row0,)))
            add((nt + 1, (sep, member, row1)))
            if not req:
                add((nt + 1, (row1,)))
            row0, row1 = nt, nt + 1
            nt += 2
        if row0 is None:
            b.add_new_rules(rules)
            return b.alt(alts_top, "object") if alts_top else self.dead
        top = b.new_nonterminals("object", 1)
        for alt in alts_top:  # the empty object's, if any
            add((top, tuple(alt)))
        add((top, (lay.obj_open, row0, lay.obj_close)))
        b.add_new_rules(rules)
        return top

    def extra_members(self, s: ObjectSchema, lay: _Layout, declared: list[str],
                      names_rx: int | None) -> tuple[list[int], dict[int, list[int]]]:
        """Member symbols for keys not declared: one per patternProperties region + additional;
        then, per bit set over ``s.some_members``, those that witness all of the set at once
        (a region narrowed to their keys, a value to their schemas)."""
        b = self.b
        child = lay.child
        esc = self.layout.escapes
        pats = s.pattern_properties
        plain = not pats and not s.some_members  # one region, no witnesses (most objects)
        if plain and isinstance(s.additional, Unsat):  # closed: no extra member at all
            return [], {}
        # key regions are regexes over whole quoted keys: the declared names' key lexemes are
        # then the excluded spellings, so no second chain per name is made (nor exported)
        base = _undeclared_keys(tuple(sorted(declared)), esc)
        if names_rx is not None:
            base = rx.intersect(base, _quoted(names_rx))
        if plain:
            value = self.compile(s.additional, child)
            if value == self.dead:
                return [], {}
            return [b.seq((self.lex(base, "additional_key"), lay.colon, value),
                          "additional_member")], {}
        prx = [_quoted(pattern_rx(p, esc)) for p, _ in pats]
        kinds: list[tuple[int, Schema, str]] = []
        for region, inside in self.key_regions(base, prx, s.pointer):
            if not inside:
                continue  # the additional members' keys: below
            sch: Schema = pats[inside[0]][1]
            for i in inside[1:]:
                sch = self.schemas.intersect(sch, pats[i][1])
            kinds.append((region, sch, "pattern"))
        if not isinstance(s.additional, Unsat):
            region = rx.intersect(base, *(rx.complement(p) for p in prx)) if prx else base
            kinds.append((region, s.additional, "additional"))
        out: list[int] = []
        some = s.some_members
        witnesses: dict[int, list[int]] = {mask: [] for mask in _submasks((1 << len(some)) - 1)}
        w_keys = [_some_keys(w, esc, self.rejected_keys(w, esc)) for w in some]
        for region, sch, kind in kinds:
            if isinstance(sch, Unsat):
                continue
            value = self.compile(sch, child)
            if value == self.dead:
                continue
            out.append(b.seq([self.lex(region, f"{kind}_key"), lay.colon, value],
                             f"{kind}_member"))
            for mask in witnesses:
                w_region = rx.intersect(region, *(w_keys[i] for i in _bits(mask)))
                w_sch = sch
                for i in _bits(mask):
                    w_sch = self.schemas.intersect(w_sch, some[i].value)
                if isinstance(w_sch, Unsat) or rx.empty_among([w_region])[0]:
                    continue
                w_value = self.compile(w_sch, child)
                if w_value != self.dead:
                    witnesses[mask].append(b.seq(
                        [self.lex(w_region, "some_key"), lay.colon, w_value], "some_member"))
        return out, witnesses

    def rejected_keys(self, some: SomeMember, esc: Escapes) -> int | None:
        """Key bodies ``some.names_rejected`` rejects, spelled as ``esc`` allows (None: no
        such constraint)."""
        if some.names_rejected is None:
            return None
        accepted = self.key_constraint(some.names_rejected, esc)
        if accepted is None:
            return rx.NOTHING
        return rx.intersect(any_body(esc), rx.complement(accepted))

    @staticmethod
    def key_regions(base: int, prx: list[int], pointer: str) -> list[tuple[int, tuple[int, ...]]]:
        """The keys of ``base`` split by which of the quoted key patterns ``prx`` they match:
        ``(region, indices matched)`` for every region that is not provably empty, ordered
        by the set of patterns (as bits, the region matching none first). Splitting one
        pattern at a time and dropping empty regions keeps this linear in the patterns
        when they are disjoint, as they mostly are; more than :data:`MAX_PATTERN_REGIONS`
        overlapping regions is a :class:`SchemaError`."""

        regions: list[tuple[int, tuple[int, ...]]] = [(base, ())]
        for i, p in enumerate(prx):
            split = [part for region, inside in regions
                     for part in ((rx.intersect(region, p), inside + (i,)),
                                  (rx.intersect(region, rx.complement(p)), inside))]
            regions = [part for part, empty in zip(split, rx.empty_among([r for r, _ in split]))
                       if not empty]
            if len(regions) > MAX_PATTERN_REGIONS:
                raise SchemaError(
                    f"the patternProperties overlap in more than {MAX_PATTERN_REGIONS} ways "
                    "(each set of patterns a key can match needs its own member rule)",
                    pointer=pointer, keyword="patternProperties")
        return sorted(regions, key=lambda r: sum(1 << i for i in r[1]))

    def key_constraint(self, s: Schema, esc: Escapes, depth: int = 0) -> int | None:
        """``propertyNames`` as a regex over key bodies spelled as ``esc`` allows (None: any
        key)."""
        if isinstance(s, AnySchema):
            return None
        if isinstance(s, RefSchema) and depth < 64:
            return self.key_constraint(self.schemas.resolve(s.key), esc, depth + 1)
        if isinstance(s, StringSchema):
            return self.string_body(s, esc)
        if isinstance(s, AnyOfSchema):
            parts = [self.key_constraint(o, esc, depth + 1) for o in s.options]
            return None if any(p is None for p in parts) else rx.alt(*parts)
        return rx.NOTHING


#: the compile method of each schema node type (:meth:`SchemaCompiler._compile`)
_BY_TYPE = {
    AnySchema: lambda comp, s, lay: comp.any_value(lay),
    Unsat: SchemaCompiler._unsat,
    NullSchema: SchemaCompiler._null,
    BoolSchema: SchemaCompiler._bool,
    NumberSchema: SchemaCompiler._number,
    StringSchema: SchemaCompiler._string,
    AnyOfSchema: SchemaCompiler._any_of,
    RefSchema: SchemaCompiler.ref,
    ArraySchema: SchemaCompiler.array,
    ObjectSchema: SchemaCompiler.object,
}


@lru_cache(maxsize=4096)
def _undeclared_keys(declared: tuple[str, ...], esc: Escapes) -> int:
    """Quoted keys (quotes included) that spell none of the declared names in any escaped
    form: the same language as ``"`` (bodies minus the names' spellings) ``"``, built from
    the names' key lexemes (:func:`_quoted_literal`)."""
    if not declared:
        return _quoted(any_body(esc))
    spellings = rx.alt(*(_quoted_literal(name, esc) for name in declared))
    return rx.intersect(_quoted(any_body(esc)), rx.complement(spellings))


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _submasks(mask: int) -> list[int]:
    """The non-empty bit sets inside ``mask``."""
    return [m for m in range(1, mask + 1) if m & mask == m]


def _some_key(some: SomeMember, name: str, body: bytes, rejected: int | None) -> bool:
    """Does the key ``name`` (JSON body ``body``) belong to the witness keys of ``some``
    (``rejected``: the bodies its ``names_rejected`` rejects)?"""
    if name in some.names or any(rx.matches(pattern_rx(p), body) for p in some.excluded):
        return False
    if rejected is not None and not rx.matches(rejected, body):
        return False
    return some.pattern is None or rx.matches(pattern_rx(some.pattern), body)


def _some_keys(some: SomeMember, esc: Escapes, rejected: int | None) -> int:
    """The quoted keys of the witness members of ``some``, spelled as ``esc`` allows."""
    keys = _undeclared_keys(tuple(sorted(some.names)), esc)
    parts = [rx.complement(_quoted(pattern_rx(p, esc))) for p in some.excluded]
    if some.pattern is not None:
        parts.append(_quoted(pattern_rx(some.pattern, esc)))
    if rejected is not None:
        parts.append(_quoted(rejected))
    return rx.intersect(keys, *parts) if parts else keys


def _quoted(body: int) -> int:
    """``"`` body ``"``."""
    return rx.concat(QUOTE, body, QUOTE)


@lru_cache(maxsize=16)
def any_body(esc: Escapes) -> int:
    """Every string body ``esc`` allows (any characters, any allowed spelling)."""
    return rx.star(any_json_char(esc))


@lru_cache(maxsize=65536)
def _quoted_literal(name: str, esc: Escapes) -> int:
    if not esc.general and name.isascii() and name.isprintable() and '"' not in name \
            and "\\" not in name:  # one spelling: the same node as concat(QUOTE, body, QUOTE)
        return rx.literal(b'"' + name.encode() + b'"')
    return rx.concat(QUOTE, json_literal_body(name, esc), QUOTE)
