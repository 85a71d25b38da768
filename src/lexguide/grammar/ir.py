"""The grammar IR every front end compiles to (Lark variant, GBNF, JSON Schema, regex).

A grammar is a CFG over *lexemes*. A lexeme is a regular language over bytes (a node id of the
hash-consed regex algebra in :mod:`lexguide.regex.nodes`), or a set of token ids (special tokens,
which match one vocabulary token and no bytes). Rules are plain BNF; front ends build EBNF
through :class:`GrammarBuilder`, which desugars ``*``/``+`` into left-recursive helper rules
(left recursion keeps the canonical Earley sets of repeated items identical, which is what makes
masks cacheable across list elements).

Symbols are ints: a nonterminal is its index ``>= 0``; lexeme ``i`` is ``-1 - i``.

Lexeme classes: each lexeme belongs to a class with its own skip (``%ignore``) regex. A nested
``%json`` grammar gets a class of its own so the outer ``%ignore`` does not apply inside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

from lexguide import _core
from lexguide.errors import GrammarError, line_col
from lexguide.regex import nodes as rx

__all__ = [
    "UNIQUE_BOUNDED_ITEM_NAME",
    "UNIQUE_ITEM_NAME",
    "CompileNote",
    "GrammarBuilder",
    "GrammarIR",
    "GrammarOptions",
    "Lexeme",
    "Rule",
    "TokenSet",
    "is_lexeme",
    "json_schema_compiler",
    "lexeme_index",
    "lexeme_sym",
    "set_json_schema_compiler",
]


def lexeme_sym(index: int) -> int:
    """The symbol of lexeme ``index``."""
    return -1 - index


def is_lexeme(sym: int) -> bool:
    return sym < 0


def lexeme_index(sym: int) -> int:
    """Inverse of :func:`lexeme_sym`."""
    return -1 - sym


#: the name of every lexeme marked ``unique_item`` (not a valid Lark or GBNF rule name); a
#: string of a bounded language (``maxLength``, a ``pattern`` or ``format``) has
#: :data:`UNIQUE_BOUNDED_ITEM_NAME`
UNIQUE_ITEM_NAME = "string<uniqueItems>"
UNIQUE_BOUNDED_ITEM_NAME = "string<uniqueItems, maxLength>"
_UNIQUE_NAMES = frozenset((UNIQUE_ITEM_NAME, UNIQUE_BOUNDED_ITEM_NAME))


@dataclass(frozen=True, slots=True)
class TokenSet:
    """A set of vocabulary token ids, resolved against a tokenizer when a matcher is built.

    ``ranges`` are inclusive ``(lo, hi)`` id ranges; ``names`` are special-token texts such as
    ``<|eot_id|>`` (looked up among the tokenizer's special tokens); ``negated`` complements the
    union within ``0..vocab_size-1``; ``any`` is ``<[*]>``; ``eos`` is the tokenizer's EOS/EOG
    tokens (the terminator of a Lark ``stop=""`` rule).
    """

    ranges: tuple[tuple[int, int], ...] = ()
    names: tuple[str, ...] = ()
    negated: bool = False
    any: bool = False
    eos: bool = False

    def describe(self) -> str:
        if self.eos:
            return "<EOS>"
        if self.names:
            return "".join(self.names)
        if self.any:
            return "<[*]>"
        parts = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges]
        return "<[" + ("^" if self.negated else "") + ",".join(parts) + "]>"


@dataclass(frozen=True, slots=True)
class Lexeme:
    """One lexeme: a byte regex (``rx`` node id) or a token set (``token_set``).

    ``lazy`` lexemes end at their first (shortest) match; greedy ones when the next byte cannot
    extend them. ``max_tokens`` bounds the LLM tokens spent inside the lexeme (enforced by the
    engine's ``Matcher``; byte-level validation has no tokens and ignores it).

    ``stop_rx`` (Lark ``stop=V``): ``rx`` is ``body V`` and the bytes matching ``V`` at the end
    are *hidden* text -- the model produced them, but they are not part of the rule's value;
    :meth:`split_stop` separates them. ``None`` for every other lexeme (``suffix=`` text is
    visible). ``suffix_rx`` (Lark ``suffix=V``) records the same split for a visible tail.

    ``capture`` names the lexeme's value (its bytes without the stop/suffix tail) and
    ``stop_capture`` the tail, for :mod:`lexguide.engine.captures`.

    ``unique_item`` marks a JSON string lexeme that is an item of a ``uniqueItems`` array the
    engine's ``Matcher`` keeps distinct (:mod:`lexguide.engine.unique_items`); it does not
    change what the lexeme matches. Such a lexeme is named :data:`UNIQUE_ITEM_NAME` (or
    :data:`UNIQUE_BOUNDED_ITEM_NAME` when its length is bounded), and
    :meth:`GrammarBuilder.lexeme` marks every lexeme of those names, so a grammar copied into
    another by name and regex (an embedded grammar) keeps the mark.
    """

    name: str
    rx: int
    lexeme_class: int = 0
    lazy: bool = False
    token_set: TokenSet | None = None
    max_tokens: int | None = None
    stop_rx: int | None = None
    body_rx: int | None = None  # with ``stop_rx``/``suffix_rx``: the regex of the value part
    suffix_rx: int | None = None
    capture: str | None = None
    stop_capture: str | None = None
    unique_item: bool = False

    def split_stop(self, data: bytes, store=None) -> tuple[bytes, bytes]:
        """``(visible, hidden)`` bytes of one match ``data`` of this lexeme.

        For a ``stop=`` lexeme, ``hidden`` is the longest suffix of ``data`` matching the stop
        regex whose remaining prefix matches the body; otherwise (or when no split exists)
        ``hidden`` is empty. Pure; costs O(len(data)^2) regex steps. ``store``: the generation
        the lexeme's regexes live in (a lowered grammar's, ``LexParser.store``; default the
        current one).
        """
        if self.stop_rx is None:
            return data, b""
        return self.split_tail(data, store)

    def split_tail(self, data: bytes, store=None) -> tuple[bytes, bytes]:
        """``(value, tail)`` of one match ``data``: the tail is the ``stop=``/``suffix=`` text
        (the longest suffix matching it whose prefix matches the body; empty if none).
        ``store`` as for :meth:`split_stop`."""
        tail_rx = self.stop_rx if self.stop_rx is not None else self.suffix_rx
        if tail_rx is None or self.body_rx is None:
            return data, b""
        matches = (store or rx.store()).matches
        for k in range(len(data) + 1):
            if matches(tail_rx, data[k:]) and matches(self.body_rx, data[:k]):
                return data[:k], data[k:]
        return data, b""


class Rule(NamedTuple):
    """``lhs -> rhs``: a tuple, so building, hashing and comparing one costs no Python call
    (a grammar builder makes and deduplicates thousands)."""

    lhs: int
    rhs: tuple[int, ...]


# ``_new_rule(Rule, (lhs, rhs))`` builds a Rule without the Python-level ``Rule.__new__``
_new_rule = tuple.__new__
_lhs_of = itemgetter(0)  # a Rule's lhs, as a C-level function


@dataclass(frozen=True, slots=True)
class GrammarOptions:
    """Grammar-wide switches (the ``%llguidance {...}`` options)."""

    allow_initial_skip: bool = False
    ignore_once: bool = False
    no_forcing: bool = False
    allow_invalid_utf8: bool = False


@dataclass(frozen=True, slots=True)
class CompileNote:
    """Something a front end accepted without enforcing it, listed on the compile result.

    ``pointer`` is where (a JSON pointer for schemas), ``keyword`` the keyword concerned,
    ``message`` what was done instead (e.g. an unknown ``format`` accepted as any string,
    a keyword ignored under ``lenient=True``).
    """

    pointer: str
    keyword: str
    message: str

    def __str__(self) -> str:
        return f"at {self.pointer or '#'} ({self.keyword}): {self.message}"


@dataclass(frozen=True, slots=True)
class GrammarIR:
    """A compiled, tokenizer-independent grammar. Immutable; safe to share between matchers."""

    lexemes: tuple[Lexeme, ...]
    nonterminals: tuple[str, ...]
    rules: tuple[Rule, ...]
    start: int
    skips: tuple[int | None, ...]  # per lexeme class: skip regex node id, or None
    options: GrammarOptions = field(default_factory=GrammarOptions)
    captures: tuple[tuple[int, str], ...] = ()  # (nonterminal, capture name)
    notes: tuple[CompileNote, ...] = ()  # what was accepted but not enforced, in order

    @property
    def is_empty(self) -> bool:
        """Whether the grammar matches no input at all: its start symbol can never be
        completed (``GrammarBuilder.build`` then keeps only ``top -> start``, with ``start``
        ruleless). Front ends report this as an error with the start rule's location."""
        return all(r.lhs == self.start for r in self.rules)

    @property
    def has_captures(self) -> bool:
        """Whether any rule or lexeme reports its value (Lark ``capture``/``stop_capture``)."""
        return bool(self.captures) or any(
            lx.capture is not None or lx.stop_capture is not None for lx in self.lexemes
        )

    @property
    def unique_item_lexemes(self) -> frozenset[int]:
        """Indices of the lexemes marked ``unique_item`` (empty for most grammars)."""
        return frozenset(i for i, lx in enumerate(self.lexemes) if lx.unique_item)

    @property
    def bounded_unique_items(self) -> bool:
        """Whether a lexeme marked ``unique_item`` has a bounded length (``maxLength``)."""
        return any(lx.unique_item and lx.name == UNIQUE_BOUNDED_ITEM_NAME for lx in self.lexemes)

    def rebased(self, source) -> GrammarIR:
        """This IR with its regexes, nodes of generation ``source`` (a ``_core.Generation``),
        rebuilt in the current one: a grammar of an older generation reused in a new compile."""
        fields = ("rx", "stop_rx", "body_rx", "suffix_rx")
        roots = [x for lx in self.lexemes for f in fields if (x := getattr(lx, f)) is not None]
        roots += [s for s in self.skips if s is not None]
        new = dict(zip(roots, rx.store().copy_nodes(source, roots)))
        lexemes = tuple(
            replace(lx, **{f: new[x] for f in fields if (x := getattr(lx, f)) is not None})
            for lx in self.lexemes)
        skips = tuple(None if s is None else new[s] for s in self.skips)
        return replace(self, lexemes=lexemes, skips=skips)

    def symbol_name(self, sym: int) -> str:
        if is_lexeme(sym):
            return self.lexemes[lexeme_index(sym)].name
        return self.nonterminals[sym]


# Plain lexemes (no lazy/stop/suffix/capture/budget) by (name, rx, class), shared by every
# grammar: a frozen dataclass costs a few microseconds to construct, and most grammars of a
# process make the same few (punctuation, strings, numbers) again. Holds regex node ids, so
# it is emptied when a new generation starts (lexguide.regex.nodes); bounded by clearing when full.
_PLAIN_LEXEMES: dict[tuple[str, int, int], Lexeme] = {}
_MAX_PLAIN_LEXEMES = 65536
rx.on_rotate(_PLAIN_LEXEMES.clear)


class GrammarBuilder:
    """Accumulates lexemes and rules; every front end goes through it.

    Lexemes are deduplicated by ``(rx, class, lazy, token_set, max_tokens, stop)``; helper
    nonterminals for EBNF operators are memoised so ``x*`` written twice is one rule.
    """

    def __init__(self) -> None:
        self._lexemes: list[Lexeme] = []
        self._lexeme_ids: dict[tuple, int] = {}
        self._names: list[str] = []
        self._rules: list[Rule] = []
        # the rules ``rule`` deduplicates against: ``_rules[:_n_seen]`` (brought up to date by
        # ``rule``; the rules of a fresh nonterminal are new, so the helpers append them alone)
        self._rule_set: set[Rule] = set()
        self._n_seen = 0
        self._helpers: dict[tuple, int] = {}  # EBNF helpers by (kind, operands)
        self._seqs: dict[tuple[int, ...], int] = {}  # seq helpers by their symbols
        self._alts: dict[tuple[tuple[int, ...], ...], int] = {}  # alt helpers by alternatives
        self._skips: list[int | None] = [None]
        self._captures: dict[int, str] = {}
        self.options = GrammarOptions()
        self.notes: list[CompileNote] = []  # appended to by front ends; frozen by build()

    # -- lexeme classes -------------------------------------------------------------------
    def set_skip(self, lexeme_class: int, skip_rx: int | None) -> None:
        """Set the ``%ignore`` regex of a lexeme class (class 0 is the top grammar's)."""
        self._skips[lexeme_class] = skip_rx

    def new_lexeme_class(self, skip_rx: int | None) -> int:
        """A new lexeme class; classes with the same skip regex are shared."""
        for i, s in enumerate(self._skips):
            if i > 0 and s == skip_rx:
                return i
        self._skips.append(skip_rx)
        return len(self._skips) - 1

    # -- symbols --------------------------------------------------------------------------
    def lexeme(
        self,
        rx: int,
        name: str,
        *,
        lexeme_class: int = 0,
        lazy: bool = False,
        max_tokens: int | None = None,
        stop: tuple[int, int] | None = None,
        suffix: tuple[int, int] | None = None,
        capture: str | None = None,
        stop_capture: str | None = None,
        unique_item: bool = False,
    ) -> int:
        """The symbol of a byte-regex lexeme (created on first use).

        ``stop=(body_rx, stop_rx)`` marks the text matching ``stop_rx`` at the end of ``rx``
        as hidden (see :class:`Lexeme`), ``suffix=(body_rx, suffix_rx)`` as a visible tail;
        neither changes what the lexeme matches. ``capture``/``stop_capture`` name its value
        and its tail; ``unique_item`` marks an item of a matcher-enforced ``uniqueItems`` array.
        """
        unique_item = unique_item or name in _UNIQUE_NAMES
        if not (lazy or max_tokens is not None or stop is not None or suffix is not None
                or capture is not None or stop_capture is not None or unique_item):
            return self.plain_lexeme(rx, name, lexeme_class)
        key = (rx, lexeme_class, lazy, None, max_tokens, stop, suffix, capture, stop_capture,
               unique_item)
        idx = self._lexeme_ids.get(key)
        if idx is None:
            idx = len(self._lexemes)
            body_rx, stop_rx = stop if stop is not None else (None, None)
            suffix_rx = None
            if suffix is not None:
                body_rx, suffix_rx = suffix
            self._lexemes.append(Lexeme(name, rx, lexeme_class, lazy, None, max_tokens, stop_rx,
                                        body_rx, suffix_rx, capture, stop_capture, unique_item))
            self._lexeme_ids[key] = idx
        return -1 - idx  # lexeme_sym(idx)

    def plain_lexeme(self, rx: int, name: str, lexeme_class: int) -> int:
        """:meth:`lexeme` without options (almost all lexemes; hot callers call it directly).

        A plain lexeme's key is ``(rx, lexeme_class)``, shorter than any other lexeme's, so
        never equal to one; its (immutable) :class:`Lexeme` is shared across grammars."""
        if name in _UNIQUE_NAMES:  # marked by its name: not plain
            return self.lexeme(rx, name, lexeme_class=lexeme_class)
        key = (rx, lexeme_class)
        ids = self._lexeme_ids
        idx = ids.get(key)
        if idx is None:
            lexemes = self._lexemes
            idx = ids[key] = len(lexemes)
            shared = (name, rx, lexeme_class)
            lx = _PLAIN_LEXEMES.get(shared)
            if lx is None:
                if len(_PLAIN_LEXEMES) >= _MAX_PLAIN_LEXEMES:
                    _PLAIN_LEXEMES.clear()
                lx = _PLAIN_LEXEMES[shared] = Lexeme(name, rx, lexeme_class)
            lexemes.append(lx)
        return -1 - idx

    def token_lexeme(self, token_set: TokenSet, *, lexeme_class: int = 0) -> int:
        """The symbol of a special-token lexeme (matches one token id, no bytes)."""
        key = (None, lexeme_class, False, token_set, None, None)
        idx = self._lexeme_ids.get(key)
        if idx is None:
            idx = len(self._lexemes)
            self._lexemes.append(
                Lexeme(token_set.describe(), rx.NOTHING, lexeme_class, False, token_set, None)
            )
            self._lexeme_ids[key] = idx
        return lexeme_sym(idx)

    def nonterminal(self, name: str) -> int:
        """A fresh nonterminal named ``name`` (names need not be unique)."""
        names = self._names
        names.append(name)
        return len(names) - 1

    def new_nonterminals(self, name: str, count: int) -> int:
        """``count`` fresh nonterminals named ``name``, numbered consecutively; the first."""
        names = self._names
        first = len(names)
        names += [name] * count
        return first

    def capture(self, nonterminal: int, name: str) -> None:
        """Report the bytes each completion of ``nonterminal`` spans under ``name``."""
        self._captures[nonterminal] = name

    def rule(self, lhs: int, rhs: Sequence[int]) -> None:
        """Add ``lhs -> rhs`` (duplicates are ignored)."""
        if lhs < 0:  # a lexeme
            raise ValueError("the left-hand side of a rule must be a nonterminal")
        r = _new_rule(Rule, (lhs, tuple(rhs)))
        seen, rules = self._rule_set, self._rules
        if self._n_seen != len(rules):
            seen.update(rules[self._n_seen:])
        n = len(seen)
        seen.add(r)  # one hash of the rule, where a test and an add would take two
        if len(seen) != n:
            rules.append(r)
        self._n_seen = len(rules)

    # -- EBNF helpers (each returns a symbol) ---------------------------------------------
    def seq(self, syms: Sequence[int], name: str = "seq") -> int:
        if len(syms) == 1:
            return syms[0]
        rhs = tuple(syms)
        seqs = self._seqs
        nt = seqs.get(rhs)
        if nt is None:
            names = self._names
            nt = seqs[rhs] = len(names)
            names.append(name)
            self._rules.append(_new_rule(Rule, (nt, rhs)))  # a fresh nonterminal's: new
        return nt

    def alt(self, alternatives: Iterable[Sequence[int]], name: str = "alt") -> int:
        return self.alt_tuples(tuple(map(tuple, alternatives)), name)

    def alt_tuples(self, alts: tuple[tuple[int, ...], ...], name: str = "alt") -> int:
        """:meth:`alt` of alternatives that are tuples already (no copies; hot callers)."""
        if len(alts) == 1 and len(alts[0]) == 1:
            return alts[0][0]
        choices = self._alts
        nt = choices.get(alts)
        if nt is None:
            names = self._names
            nt = choices[alts] = len(names)
            names.append(name)
            self.new_rules(nt, alts)
        return nt

    def add_new_rules(self, rules: Iterable[tuple[int, tuple[int, ...]]]) -> None:
        """Add each ``(lhs, rhs)`` in order, for a caller that knows none of them is there
        (distinct rules of its own fresh nonterminals): :meth:`new_rules` for many
        nonterminals in one call."""
        self._rules += map(_new_rule, repeat(Rule), rules)

    def new_rules(self, nt: int, alts: tuple[tuple[int, ...], ...]) -> None:
        """Add ``nt -> a`` for each alternative, for a caller that knows ``nt`` has none of
        them (its own fresh nonterminal, to which it gave other alternatives if any): only a
        repeated alternative is a duplicate (kept once, at its first place). :meth:`rule`
        without the search among all rules."""
        rules = self._rules
        if len(alts) == 1:
            rules.append(_new_rule(Rule, (nt, alts[0])))
        elif len(alts) == 2:
            first, second = alts
            rules.append(_new_rule(Rule, (nt, first)))
            if second != first:
                rules.append(_new_rule(Rule, (nt, second)))
        elif not alts or len(set(alts)) == len(alts):
            rules.extend([_new_rule(Rule, (nt, a)) for a in alts])
        else:
            rules.extend([_new_rule(Rule, (nt, a)) for a in dict.fromkeys(alts)])

    def empty(self) -> int:
        """A nonterminal deriving only the empty string."""
        return self._empty()

    def _empty(self) -> int:
        key = ("empty",)
        if key not in self._helpers:
            nt = self.nonterminal("empty")
            self.new_rules(nt, ((),))
            self._helpers[key] = nt
        return self._helpers[key]

    def optional(self, sym: int) -> int:
        key = ("opt", sym)
        if key not in self._helpers:
            nt = self.nonterminal("opt")
            self.new_rules(nt, ((), (sym,)))
            self._helpers[key] = nt
        return self._helpers[key]

    def plus(self, sym: int, separator: int | None = None) -> int:
        """One or more ``sym`` (separated by ``separator``), as a left-recursive rule."""
        key = ("plus", sym, separator)
        nt = self._helpers.get(key)
        if nt is None:
            names = self._names
            nt = self._helpers[key] = len(names)
            names.append("plus")
            self._rules += (_new_rule(Rule, (nt, (sym,))), _new_rule(
                Rule, (nt, (nt, sym) if separator is None else (nt, separator, sym))))
        return nt

    def star(self, sym: int, separator: int | None = None) -> int:
        """Zero or more ``sym``."""
        key = ("star", sym, separator)
        nt = self._helpers.get(key)
        if nt is None:
            names, rules = self._names, self._rules
            nt = len(names)
            names.append("star")
            rules.append(_new_rule(Rule, (nt, ())))
            rules.append(_new_rule(Rule, (nt, (self.plus(sym, separator),))))
            self._helpers[key] = nt
        return nt

    def repeat(self, sym: int, min_count: int, max_count: int | None) -> int:
        """``sym{min,max}`` (``max=None``: unbounded), unambiguous. Counts up to
        :data:`UNROLL_COUNT` are unrolled (O(max) rules); larger ones are built from doubling
        rules ``E[i] -> E[i-1] E[i-1]`` (``sym`` exactly 2**i times), so a bound of 10**6
        costs about 60 rules, not a million."""
        if min_count < 0 or (max_count is not None and max_count < min_count):
            raise ValueError(f"bad repetition bounds {{{min_count},{max_count}}}")
        key = ("rep", sym, min_count, max_count)
        if key in self._helpers:
            return self._helpers[key]
        if max_count is not None and max_count == 0:
            result = self._empty()
        elif max(min_count, (max_count or 0) - min_count) > UNROLL_COUNT:
            parts = [self._exactly(sym, min_count)] if min_count else []
            if max_count is None:
                parts.append(self.star(sym))
            elif max_count > min_count:
                parts.append(self._up_to(sym, max_count - min_count))
            result = self.seq(parts or [self._empty()], name="rep")
        elif max_count is None:
            tail = self.star(sym)
            result = self.seq([sym] * min_count + [tail], name="rep")
        else:
            # upto[k] derives sym{0,k}: upto[k] -> "" | sym upto[k-1]
            upto = self._empty()
            for _ in range(max_count - min_count):
                nt = self.nonterminal("upto")
                self.new_rules(nt, ((), (sym, upto) if upto != self._empty() else (sym,)))
                upto = nt
            parts = [sym] * min_count + ([upto] if max_count > min_count else [])
            result = self.seq(parts or [self._empty()], name="rep")
        self._helpers[key] = result
        return result

    def _power(self, sym: int, i: int) -> int:
        """``sym`` exactly ``2**i`` times."""
        return sym if i == 0 else self.seq([self._power(sym, i - 1)] * 2, name="pow2")

    def _exactly(self, sym: int, n: int) -> int:
        """``sym`` exactly ``n >= 1`` times: one power of two per set bit of ``n``."""
        return self.seq([self._power(sym, i) for i in range(n.bit_length() - 1, -1, -1)
                         if n >> i & 1], name="exactly")

    def _below_power(self, sym: int, j: int) -> int:
        """``sym{0, 2**j - 1}``: ``A[j] -> A[j-1] | E[j-1] A[j-1]`` (the two alternatives
        cover disjoint lengths, so the grammar stays unambiguous)."""
        if j == 0:
            return self._empty()
        below = self._below_power(sym, j - 1)
        return self.alt([[below], [self._power(sym, j - 1), below]], "below_pow2")

    def _up_to(self, sym: int, n: int) -> int:
        """``sym{0,n}``, ``n >= 1``: ``A[k] | E[k] sym{0, n - 2**k}`` with ``2**k <= n``."""
        k = n.bit_length() - 1
        below = self._below_power(sym, k)
        rest = n - (1 << k)
        high = [self._power(sym, k)] + ([self._up_to(sym, rest)] if rest else [])
        return self.alt([[below], high], "up_to")

    # -- result ---------------------------------------------------------------------------
    @property
    def n_lexemes(self) -> int:
        return len(self._lexemes)

    def build(self, start: int) -> GrammarIR:
        """Freeze into a :class:`GrammarIR`; adds a fresh start rule ``start' -> start``.

        Raises :class:`GrammarError` when a nonterminal reachable from ``start`` has no rule.
        """
        if is_lexeme(start):
            nt = self.nonterminal("start")
            self.new_rules(nt, ((start,),))
            start = nt
        top = self.nonterminal("<start>")
        self.new_rules(top, ((start,),))
        has_rule = set(map(_lhs_of, self._rules))
        # a nonterminal reachable from top without a rule is an error; most grammars have
        # none without a rule at all, and then there is nothing to search
        seen = {top}
        todo = [] if has_rule.issuperset(range(len(self._names))) else [top]
        by_lhs: dict[int, list[Rule]] = {}
        for r in self._rules if todo else ():
            by_lhs.setdefault(r.lhs, []).append(r)
        while todo:
            nt = todo.pop()
            if nt not in has_rule:
                raise GrammarError(f"nonterminal {self._names[nt]!r} has no rule")
            for r in by_lhs.get(nt, ()):
                for s in r.rhs:
                    if s >= 0 and s not in seen:
                        seen.add(s)
                        todo.append(s)
        return GrammarIR(
            lexemes=tuple(self._lexemes),
            nonterminals=tuple(self._names),
            rules=self._productive_rules(top, start),
            start=top,
            skips=tuple(self._skips),
            options=self.options,
            captures=tuple(sorted(self._captures.items())),
            notes=tuple(self.notes),
        )


    def _productive_rules(self, top: int, start: int) -> tuple[Rule, ...]:
        """The rules whose symbols can all derive some input (worklist fixpoint).

        A rule through an unproductive symbol (a lexeme matching nothing, a nonterminal that
        never completes) would let a matcher enter a prefix that leads nowhere; dropping it
        keeps masks exact. If nothing is productive the grammar matches no input: only
        ``top -> start`` is kept, with ``start`` ruleless.
        """
        lexemes = self._lexemes
        nothing = rx.NOTHING
        ok = [lx.token_set is not None or lx.rx != nothing for lx in lexemes]
        boolean = [i for i, lx in enumerate(lexemes)
                   if ok[i] and lx.token_set is None and rx.has_boolean(lx.rx)]
        if boolean:  # one export and one core call for every emptiness question
            for i, e in zip(boolean, rx.empty_among([lexemes[i].rx for i in boolean])):
                if e:
                    ok[i] = False
        rules = self._rules
        # the fixpoint runs in the core (one call instead of a Python loop per symbol)
        keep = _core.productive_rules(len(self._names), ok, rules)
        # ``top -> start`` is the last rule and the only one of ``top``
        if not keep or rules[keep[-1]].lhs != top:
            return (Rule(top, (start,)),)
        if len(keep) == len(rules):
            return tuple(rules)
        return tuple([rules[i] for i in keep])

def report_dead_rules(ir: GrammarIR, text: str, offsets: dict[str, int], start: str,
                      reject_empty: bool) -> GrammarIR:
    """Rules of the source (``offsets``: name -> offset of its definition) that can never be
    completed — each alternative needs such a rule, or a lexeme matching nothing — lost their
    rules in :meth:`GrammarBuilder._productive_rules`, so a matcher never enters them. When the
    start rule is among them the grammar matches no input: with ``reject_empty`` a
    GrammarError at ``start`` naming the rules at fault. Otherwise ``ir`` with a
    :class:`CompileNote` (``line L:C``, rule name) per such rule."""
    index: dict[str, int] = {}
    for i, name in enumerate(ir.nonterminals):
        index.setdefault(name, i)
    kept = {r.lhs for r in ir.rules}
    dead = [n for n in offsets if n in index and index[n] not in kept and index[n] != ir.start]
    where = {n: line_col(text, offsets[n]) for n in dead}
    if ir.is_empty:
        if not reject_empty:
            return ir
        others = [f"{n!r} (line {where[n][0]})" for n in dead if n != start][:8]
        why = f"; rules that never complete: {', '.join(others)}" if others else ""
        raise GrammarError(f"the grammar matches no input: rule {start!r} can never be completed "
                           f"(each alternative needs a rule that never ends, or matches "
                           f"nothing){why}", text=text, offset=offsets.get(start, 0))
    notes = tuple(CompileNote(f"line {where[n][0]}:{where[n][1]}", n,
                              f"rule {n!r} can never be completed (each alternative needs a rule "
                              "that never ends, or matches nothing); the alternatives that use "
                              "it are dropped") for n in dead)
    return replace(ir, notes=ir.notes + notes) if notes else ir


#: Largest count :meth:`GrammarBuilder.repeat` unrolls; beyond it, doubling rules count.
UNROLL_COUNT = 256


# -- hook for %json: grammar never imports jsonschema (which builds this IR) ---------------
_JSON_COMPILER: Callable[..., int] | None = None


def set_json_schema_compiler(fn: Callable[..., int]) -> None:
    """Register ``fn(builder, schema, lexeme_class=..., **options) -> symbol``.

    :mod:`lexguide.jsonschema` registers itself on import (``lexguide.engine`` imports it,
    so a :class:`lexguide.Grammar` always finds it); ``%json`` and
    ``Grammar.from_json_schema`` call it.
    """
    global _JSON_COMPILER
    _JSON_COMPILER = fn


def json_schema_compiler() -> Callable[..., int]:
    if _JSON_COMPILER is None:
        raise GrammarError("%json needs the JSON Schema compiler: import lexguide.jsonschema "
                           "(lexguide.Grammar does) before compiling this grammar")
    return _JSON_COMPILER
