"""Free text that stops at trigger strings, and grammars embedded after a trigger.

Shared by the structural-tag front end (:mod:`lexguide.grammar.structural_tag`) and lazy
grammars (:mod:`lexguide.grammar.lazy`).

Free text is one greedy lexeme per way out of it. A lexeme ends when the next byte cannot
extend it, so free text and the trigger that follows cannot be two lexemes: the free-text
lexeme would swallow all but the trigger's last byte. Instead each exit string ``s`` (a
trigger, or the end string of the enclosing tag) gets the lexeme

    ``(B s) & ~(.* S .+)``

where ``B`` is the UTF-8 text containing no exit and no excluded string, and ``S`` the
alternation of all exits: the text up to and including the *first* exit, which cannot be
extended, so it ends exactly there whatever tokens spell it. Text that reaches the end of the
output without an exit is ``B`` itself (non-empty, optional). The DFA of these regexes is the
Aho-Corasick automaton of the exits, built lazily by derivatives like any other lexeme.

:func:`embed` copies a compiled grammar into a builder; :func:`quotient` builds the grammar of
what may follow a given prefix (Brzozowski derivatives of the CFG, byte by byte, with the
regex derivatives of :mod:`lexguide.regex.nodes` on lexemes), which is how a lazy grammar
continues after a trigger that is already part of its own text.
"""

from __future__ import annotations

from collections.abc import Sequence

from lexguide.grammar.ir import GrammarBuilder, GrammarIR, Lexeme, lexeme_index
from lexguide.regex import nodes as rx

__all__ = ["FreeText", "embed", "quotient"]


def _any() -> int:
    return rx.any_char(True)


def _strings(strings: Sequence[bytes]) -> int:
    return rx.alt(*[rx.literal(s) for s in strings]) if strings else rx.NOTHING


class FreeText:
    """The lexeme regexes of one free-text region.

    ``exits`` are the strings that end the region (each ends it at its first occurrence);
    ``excludes`` may not occur at all; ``max_chars`` bounds the characters before the exit.
    Pure; costs a few regex constructions (their DFA is built lazily on use).
    """

    def __init__(self, exits: Sequence[bytes], excludes: Sequence[bytes] = (),
                 max_chars: int | None = None) -> None:
        if any(not s for s in exits) or any(not s for s in excludes):
            raise ValueError("exits and excludes must be non-empty strings")
        any_char = _any()
        text = rx.star(any_char)
        self._text = text
        self.exits = tuple(exits)
        banned = tuple(exits) + tuple(s for s in excludes if s not in exits)
        body = text
        if banned:
            body = rx.intersect(text, rx.complement(rx.concat(text, _strings(banned), text)))
        if max_chars is not None:
            body = rx.intersect(body, rx.repeat(any_char, 0, max_chars))
        self.body = body
        # text with an exit that ends before its last byte: what no exit lexeme may contain
        self._past_exit = rx.NOTHING
        if exits:
            self._past_exit = rx.concat(text, _strings(self.exits), any_char, text)

    def until(self, exits: Sequence[bytes]) -> int:
        """Free text up to and including the first exit, which is one of ``exits``."""
        return rx.intersect(rx.concat(self.body, _strings(exits)), rx.complement(self._past_exit))

    def to_end(self) -> int:
        """Non-empty free text with no exit (the region at the end of the output)."""
        return rx.intersect(self.body, rx.concat(_any(), self._text))


def _copy_lexeme(builder: GrammarBuilder, lx: Lexeme, classes: dict[int, int],
                 skips: Sequence[int | None], regex: int | None = None) -> int:
    cls = classes.get(lx.lexeme_class)
    if cls is None:
        cls = classes[lx.lexeme_class] = builder.new_lexeme_class(skips[lx.lexeme_class])
    if lx.token_set is not None:
        return builder.token_lexeme(lx.token_set, lexeme_class=cls)
    if regex is not None and regex != lx.rx:  # a derivative: the value split no longer applies
        return builder.lexeme(regex, lx.name, lexeme_class=cls, lazy=lx.lazy,
                              max_tokens=lx.max_tokens)
    split = lx.body_rx is not None
    stop = (lx.body_rx, lx.stop_rx) if split and lx.stop_rx is not None else None
    suffix = (lx.body_rx, lx.suffix_rx) if split and lx.suffix_rx is not None else None
    return builder.lexeme(lx.rx, lx.name, lexeme_class=cls, lazy=lx.lazy,
                          max_tokens=lx.max_tokens, stop=stop, suffix=suffix,
                          capture=lx.capture, stop_capture=lx.stop_capture)


def embed(builder: GrammarBuilder, ir: GrammarIR) -> int:
    """Copy ``ir`` into ``builder`` and return the symbol of its start.

    Each lexeme class of ``ir`` becomes a class of ``builder`` with the same ``%ignore``
    regex; captures are kept. Grammar-wide options (``%llguidance {...}``) are not carried
    over. Mutates ``builder``; linear in the size of ``ir``.
    """
    classes: dict[int, int] = {}
    lexemes: dict[int, int] = {}
    nts: dict[int, int] = {}

    def sym(s: int) -> int:
        if s < 0:
            i = lexeme_index(s)
            if i not in lexemes:
                lexemes[i] = _copy_lexeme(builder, ir.lexemes[i], classes, ir.skips)
            return lexemes[i]
        if s not in nts:
            nts[s] = builder.nonterminal(ir.nonterminals[s])
        return nts[s]

    start = sym(ir.start)
    for r in ir.rules:
        builder.rule(sym(r.lhs), [sym(s) for s in r.rhs])
    for nt, name in ir.captures:
        if nt in nts:
            builder.capture(nts[nt], name)
    return start


# -- derivatives of a CFG by a string -------------------------------------------------------------
# Local symbols: ("L", lexeme index, regex node) for a lexeme, possibly derived;
# ("N", key) for a nonterminal, key an original index or (byte, derived-from key).


def quotient(builder: GrammarBuilder, ir: GrammarIR, prefix: bytes) -> int | None:
    """The symbol of ``{r : prefix + r in L(ir)}`` in ``builder``, or None when no sentence of
    ``ir`` starts with ``prefix``.

    A lexeme that ``prefix`` ends inside continues as a lexeme of its derivative regex (same
    class and attributes), or ends there when the derivative accepts the empty string;
    ``%ignore`` text is not skipped inside ``prefix``, and a special-token lexeme does not
    match bytes. Mutates ``builder``; costs the nonterminals that can start a sentence times
    ``len(prefix)``.
    """
    rules: dict[tuple, list[tuple]] = {}
    for r in ir.rules:
        rules.setdefault(("N", r.lhs), []).append(tuple(_local(s, ir) for s in r.rhs))
    start: tuple = ("N", ir.start)
    nullable = _nullable(rules)
    for b in prefix:
        start = _derive_grammar(rules, nullable, start, b)
        nullable = _nullable(rules)
    return _emit(builder, ir, rules, start)


def _local(s: int, ir: GrammarIR) -> tuple:
    if s < 0:
        i = lexeme_index(s)
        return ("L", i, ir.lexemes[i].rx)
    return ("N", s)


def _nullable(rules: dict[tuple, list[tuple]]) -> set[tuple]:
    out: set[tuple] = set()
    changed = True
    while changed:
        changed = False
        for lhs, alts in rules.items():
            if lhs not in out and any(all(s in out for s in alt) for alt in alts):
                out.add(lhs)
                changed = True
    return out


def _derive_grammar(rules: dict[tuple, list[tuple]], nullable: set[tuple], start: tuple,
                    b: int) -> tuple:
    """Add the rules of D_b(start) and of what it reaches; return D_b(start)."""
    todo = [start]
    seen = {start}
    while todo:
        nt = todo.pop()
        alts: list[tuple] = []
        for alt in rules.get(nt, ()):
            for i, s in enumerate(alt):
                if s[0] == "N" and s not in seen:
                    seen.add(s)
                    todo.append(s)
                alts.extend(head + alt[i + 1 :] for head in _derive_symbol(s, b))
                if s[0] == "L" or s not in nullable:
                    break
        rules[("N", (b, nt))] = alts
    return ("N", (b, start))


def _derive_symbol(s: tuple, b: int) -> list[tuple]:
    """The alternatives (tuples of symbols) of D_b(s)."""
    if s[0] == "N":
        return [(("N", (b, s)),)]
    nxt = rx.derivative(s[2], b)
    if nxt == rx.NOTHING:
        return []
    out: list[tuple] = []
    if rx.nullable(nxt):
        out.append(())
    if nxt != rx.EPSILON:  # the rest of the lexeme, never empty (the empty case is above)
        rest = rx.intersect(nxt, rx.complement(rx.EPSILON)) if out else nxt
        out.append((("L", s[1], rest),))
    return out


def _emit(builder: GrammarBuilder, ir: GrammarIR, rules: dict[tuple, list[tuple]],
          start: tuple) -> int | None:
    # keep what is productive: a derived lexeme whose regex is empty, or a nonterminal
    # whose every alternative contains one, matches nothing
    lexeme_nodes = {s for alts in rules.values() for alt in alts for s in alt if s[0] == "L"}
    ordered = sorted(lexeme_nodes, key=repr)
    alive = {s for s, dead in zip(ordered, rx.empty_among([s[2] for s in ordered])) if not dead
             or ir.lexemes[s[1]].token_set is not None}
    productive: set[tuple] = set()
    changed = True
    while changed:
        changed = False
        for lhs, alts in rules.items():
            if lhs not in productive and any(_usable(alt, alive, productive) for alt in alts):
                productive.add(lhs)
                changed = True
    if start not in productive:
        return None
    classes: dict[int, int] = {}
    syms: dict[tuple, int] = {}
    todo = [start]

    def sym(s: tuple) -> int:
        got = syms.get(s)
        if got is None:
            if s[0] == "L":
                got = _copy_lexeme(builder, ir.lexemes[s[1]], classes, ir.skips, s[2])
            else:
                got = builder.nonterminal(_name(ir, s))
                todo.append(s)
            syms[s] = got
        return got

    top = sym(start)
    done: set[tuple] = set()
    while todo:
        nt = todo.pop()
        if nt in done:
            continue
        done.add(nt)
        for alt in rules.get(nt, ()):
            if _usable(alt, alive, productive):
                builder.rule(syms[nt], [sym(s) for s in alt])
    return top


def _usable(alt: tuple, alive: set[tuple], productive: set[tuple]) -> bool:
    return all(s in alive if s[0] == "L" else s in productive for s in alt)


def _name(ir: GrammarIR, s: tuple) -> str:
    key = s[1]
    depth = 0
    while isinstance(key, tuple):
        key = key[1][1]
        depth += 1
    return ir.nonterminals[key] + "'" * min(depth, 3)
