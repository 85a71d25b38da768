"""GBNF front end: llama.cpp grammars compiled to the grammar IR, exactly (spec/gbnf.md).

GBNF is a CFG over code points with no lexer: every alternative is explored, nothing is
greedy (``root ::= word "b"``, ``word ::= [a-z]+`` accepts ``xb``). The IR's lexer is greedy
(maximal munch, spec/lark-syntax.md §8.2), so turning a regular GBNF fragment into one lexeme
can change the language (spec/gbnf.md §4.1). This module turns a fragment into a lexeme only
when it can prove that greediness never loses a parse, and otherwise compiles it as rules
over smaller lexemes, down to one lexeme per code point, which is always exact (UTF-8 is
prefix-free, so a one-character lexeme can never be extended).

The proof (:func:`_conflicts`), on the lexeme-level grammar actually built: the lexer goes
wrong only when, at a position where lexemes E are expected, a lexeme V has matched ``v`` and
the next character ``c`` (the start of what follows V in the intended parse) lets the lexer
continue into some Z in E (``v·c`` is a prefix of a Z string, byte-wise). We over-approximate
E by "lexemes that can follow the previous lexeme (or any lexeme matching the same text)"
and what follows V by FOLLOW(V); a multi-character Z found in such a conflict is demoted (split
into its parts) and the check runs again until no conflict is left. Each side is computed on
Glushkov position automata over code-point classes (Glushkov 1961), exactly.

Semantics kept from llama.cpp: ``.`` and negated classes match any code point including newline;
left recursion is refused (as llama.cpp does); a later definition of a rule replaces an earlier
one. Differences: texts must be valid UTF-8 (llama.cpp decodes invalid bytes leniently);
repetition bounds are kept exactly as written, also above llama.cpp's 2000-rule limit (which
llama.cpp refuses); ``<text>`` token elements match the vocabulary's *special* token with that
text (llama.cpp tokenises the text and requires exactly one token).
"""

from __future__ import annotations

from lexguide.errors import GrammarError
from lexguide.grammar import rx
from lexguide.grammar.gbnf_parser import (
    Alt,
    Chars,
    GbnfGrammar,
    Lit,
    Node,
    Ref,
    Rep,
    Seq,
    Tok,
    check_grammar,
    node_nullable,
    nullable_rules,
    parse_gbnf,
)
from lexguide.grammar.ir import GrammarBuilder, GrammarIR, is_lexeme, lexeme_index

__all__ = ["compile_gbnf", "gbnf_to_lark", "GbnfPlan"]

#: Analysis limits: a unit whose automaton or conflict search is bigger is not made a lexeme
#: (it stays exact as rules; only speed is lost).
MAX_UNIT_POSITIONS = 4000
MAX_PRODUCT_STATES = 100_000
_MAX_ROUNDS = 200




# -- code-point classes and their UTF-8 lead bytes ----------------------------------------------
def _intersects(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


def _lead(cp: int) -> int:
    if cp < 0x80:
        return cp
    if cp < 0x800:
        return 0xC0 | (cp >> 6)
    if cp < 0x10000:
        return 0xE0 | (cp >> 12)
    return 0xF0 | (cp >> 18)


_LEN_BOUNDS = ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, 0x10FFFF))


def _lead_mask(ranges: tuple[tuple[int, int], ...]) -> int:
    """Bit b set when some code point of ``ranges`` is UTF-8 encoded with first byte b."""
    m = 0
    for lo, hi in ranges:
        for blo, bhi in _LEN_BOUNDS:
            a, z = max(lo, blo), min(hi, bhi)
            if a <= z:
                m |= ((1 << (_lead(z) + 1)) - 1) ^ ((1 << _lead(a)) - 1)
    return m


class _Classes:
    """Interned code-point classes with memoised intersection tests and UTF-8 lead bytes."""

    def __init__(self) -> None:
        self.ids: dict[tuple[tuple[int, int], ...], int] = {}
        self.ranges: list[tuple[tuple[int, int], ...]] = []
        self.leads: list[int] = []
        self._meet: dict[tuple[int, int], bool] = {}

    def intern(self, ranges: tuple[tuple[int, int], ...]) -> int:
        cid = self.ids.get(ranges)
        if cid is None:
            cid = self.ids[ranges] = len(self.ranges)
            self.ranges.append(ranges)
            self.leads.append(_lead_mask(ranges))
        return cid

    def meet(self, a: int, b: int) -> bool:
        """Whether classes ``a`` and ``b`` share a code point."""
        if a == b:
            return True
        key = (a, b) if a < b else (b, a)
        hit = self._meet.get(key)
        if hit is None:
            hit = self._meet[key] = _intersects(self.ranges[a], self.ranges[b])
        return hit


class _Auto:
    """Glushkov automaton over code-point classes: ``first``/``last`` positions, ``follow``.

    ``cls[p]`` is the interned class id of position ``p``; ``next_lead[p]`` the UTF-8 lead
    bytes of the characters that may come after ``p``.
    """

    __slots__ = ("cls", "first", "last", "follow", "nullable", "multi", "next_lead", "key")

    def __init__(self) -> None:
        self.cls: list[int] = []
        self.follow: list[set[int]] = []
        self.first: set[int] = set()
        self.last: set[int] = set()
        self.nullable = False
        self.multi = False  # can match two or more code points
        self.next_lead: list[int] = []
        self.key = 0  # the lexeme's rx id: equal keys, equal languages

    def finish(self, classes: _Classes) -> "_Auto":
        self.multi = any(self.follow)
        leads = classes.leads
        self.next_lead = []
        for f in self.follow:
            m = 0
            for q in f:
                m |= leads[self.cls[q]]
            self.next_lead.append(m)
        return self


class _TooBig(Exception):
    pass


# -- the plan: which fragments become lexemes -------------------------------------------------
class GbnfPlan:
    """Parsed grammar plus the lexeme decisions shared by :func:`compile_gbnf` and
    :func:`gbnf_to_lark`. ``demoted`` holds ids of fragments that must not be one lexeme."""

    def __init__(self, g: GbnfGrammar, root: str) -> None:
        self.g = g
        self.root = root
        self.nullable_rules = nullable_rules(g)
        self.regular_rules = self._regular_rules()
        self.demoted: set[int] = set()
        self._ne: dict[int, Node | None] = {}
        self._rx: dict[int, int] = {}
        self._keep: list[Node] = []  # keeps derived nodes alive so their ids stay unique
        self.classes = _Classes()
        self.search_memo: dict[tuple[int, int, int, bool], bool] = {}

    def _regular_rules(self) -> set[str]:
        # llguidance's fixed point (spec/gbnf.md §4 step 5): recursive rules never qualify
        reg: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, rd in self.g.rules.items():
                if name not in reg and self._regular(rd.body, reg):
                    reg.add(name)
                    changed = True
        return reg

    def _regular(self, node: Node, reg: set[str]) -> bool:
        if isinstance(node, (Chars, Lit)):
            return True
        if isinstance(node, Tok):
            return False
        if isinstance(node, Ref):
            return node.name in reg
        items = (node.item,) if isinstance(node, Rep) else node.items
        return all(self._regular(x, reg) for x in items)

    # -- node properties ----------------------------------------------------------------
    def resolve(self, node: Node) -> Node:
        """Follow rule references to the body they stand for."""
        seen = 0
        while isinstance(node, Ref):
            node = self.g.rules[node.name].body
            seen += 1
            if seen > len(self.g.rules):  # a cycle of bare references
                break
        return node

    def is_regular(self, node: Node) -> bool:
        return self._regular(node, self.regular_rules)

    def nullable(self, node: Node) -> bool:
        return node_nullable(node, self.nullable_rules)

    def single_char(self, node: Node) -> tuple[tuple[int, int], ...] | None:
        """The code-point class if ``node`` always matches exactly one code point."""
        node = self.resolve(node)
        if isinstance(node, Chars):
            return node.ranges()
        if isinstance(node, Lit) and len(node.text) == 1:
            cp = ord(node.text)
            return ((cp, cp),)
        return None

    def is_unit(self, node: Node) -> bool:
        """Whether ``node`` is compiled as one multi-character lexeme."""
        return (self.is_regular(node) and self.single_char(node) is None
                and id(self.resolve(node)) not in self.demoted)

    def non_empty(self, node: Node) -> Node | None:
        """A node for L(node) minus the empty string (``None`` if nothing is left)."""
        key = id(node)
        if key not in self._ne:
            self._ne[key] = out = self._non_empty(node)
            if out is not None:
                self._keep.append(out)
        return self._ne[key]

    def _non_empty(self, node: Node) -> Node | None:
        if not self.nullable(node):
            return node
        if isinstance(node, Lit):
            return None
        if isinstance(node, Ref):
            return self.non_empty(self.g.rules[node.name].body)
        if isinstance(node, Alt):
            alts = [x if not self.nullable(x) else self.non_empty(x) for x in node.items]
            alts = [a for a in alts if a is not None]
            return None if not alts else alts[0] if len(alts) == 1 else Alt(tuple(alts))
        if isinstance(node, Seq):  # all items nullable: the first non-empty one is item i
            alts = []
            for i, x in enumerate(node.items):
                head = self.non_empty(x)
                if head is not None:
                    rest = node.items[i + 1 :]
                    alts.append(head if not rest else Seq((head, *rest)))
            return None if not alts else alts[0] if len(alts) == 1 else Alt(tuple(alts))
        assert isinstance(node, Rep)
        if node.hi == 0:
            return None
        if not self.nullable(node.item):
            return Rep(node.item, 1, node.hi)
        head = self.non_empty(node.item)
        if head is None:
            return None
        if node.hi == 1:
            return head
        return Seq((head, Rep(node.item, 0, None if node.hi is None else node.hi - 1)))

    # -- regexes and automata ---------------------------------------------------------------
    def regex(self, node: Node) -> int:
        """The byte regex (rx node) of a regular ``node``."""
        key = id(node)
        r = self._rx.get(key)
        if r is None:
            r = self._regex(node)
            self._rx[key] = r
        return r

    def _regex(self, node: Node) -> int:
        if isinstance(node, Chars):
            return rx.codepoint_ranges(node.ranges())
        if isinstance(node, Lit):
            try:
                return rx.literal(node.text.encode("utf-8"))
            except UnicodeEncodeError:  # a surrogate: no UTF-8 text contains it
                return rx.NOTHING
        if isinstance(node, Ref):
            return self.regex(self.g.rules[node.name].body)
        if isinstance(node, Seq):
            return rx.concat(*[self.regex(x) for x in node.items])
        if isinstance(node, Alt):
            return rx.alt(*[self.regex(x) for x in node.items])
        if isinstance(node, Rep):
            return rx.repeat(self.regex(node.item), node.lo, node.hi)
        raise GrammarError("token elements cannot be part of a lexeme")  # never: not regular

    def automaton(self, node: Node) -> _Auto:
        """The Glushkov automaton of a regular ``node``; raises ``_TooBig`` past the limit."""
        a = _Auto()
        a.first, a.last, a.nullable = self._glushkov(node, a)
        return a.finish(self.classes)

    def single_automaton(self, ranges: tuple[tuple[int, int], ...]) -> _Auto:
        a = _Auto()
        a.cls, a.follow, a.first, a.last = [self.classes.intern(ranges)], [set()], {0}, {0}
        return a.finish(self.classes)

    def _glushkov(self, node: Node, a: _Auto) -> tuple[set[int], set[int], bool]:
        if isinstance(node, (Chars, Lit)) and self.single_char(node) is not None:
            cls = self.single_char(node)
            assert cls is not None
            if not cls:  # an empty class matches nothing: a dead position
                return set(), set(), False
            a.cls.append(self.classes.intern(cls))
            a.follow.append(set())
            if len(a.cls) > MAX_UNIT_POSITIONS:
                raise _TooBig
            p = len(a.cls) - 1
            return {p}, {p}, False
        if isinstance(node, Lit):
            return self._glushkov(Seq(tuple(Lit(c) for c in node.text)), a)
        if isinstance(node, Ref):
            return self._glushkov(self.g.rules[node.name].body, a)
        if isinstance(node, Alt):
            first, last, null = set(), set(), False
            for x in node.items:
                f, l, n = self._glushkov(x, a)
                first |= f
                last |= l
                null = null or n
            return first, last, null
        if isinstance(node, Seq):
            return self._seq([lambda x=x: self._glushkov(x, a) for x in node.items], a)
        assert isinstance(node, Rep)
        parts = [lambda: self._glushkov(node.item, a)] * node.lo
        if node.hi is None:
            parts.append(lambda: self._star(node.item, a))
        elif self.nullable(node.item):
            parts += [lambda: self._opt(node.item, a)] * (node.hi - node.lo)
        elif node.hi > node.lo:
            n_opt = node.hi - node.lo
            parts.append(lambda: self._upto(node.item, n_opt, a))
        return self._seq(parts, a)

    def _upto(self, item: Node, n: int, a: _Auto) -> tuple[set[int], set[int], bool]:
        # (x (x (x)?)?)? rather than x? x? x?: after k characters the automaton is in copy k
        # only, which keeps the product searches linear in n
        first, last, prev = set(), set(), set()
        for k in range(n):
            f, l, _ = self._glushkov(item, a)
            if k == 0:
                first = f
            for p in prev:
                a.follow[p] |= f
            last |= l
            prev = l
        return first, last, True

    def _star(self, item: Node, a: _Auto) -> tuple[set[int], set[int], bool]:
        f, l, _ = self._glushkov(item, a)
        for p in l:
            a.follow[p] |= f
        return f, l, True

    def _opt(self, item: Node, a: _Auto) -> tuple[set[int], set[int], bool]:
        f, l, _ = self._glushkov(item, a)
        return f, l, True

    @staticmethod
    def _seq(parts, a: _Auto) -> tuple[set[int], set[int], bool]:
        first: set[int] = set()
        last: set[int] = set()
        null = True
        for part in parts:
            f, l, n = part()
            for p in last:
                a.follow[p] |= f
            if null:
                first |= f
            last = (last | l) if n else l
            null = null and n
        return first, last, null


# -- compilation to the IR ---------------------------------------------------------------------
class _Compiler:
    """One build of the IR for the plan's current decisions; records an automaton per lexeme."""

    def __init__(self, plan: GbnfPlan) -> None:
        self.plan = plan
        self.b = GrammarBuilder()
        self.rule_nt: dict[str, int] = {}
        self.autos: dict[int, _Auto | None] = {}  # lexeme index -> automaton (None: token)
        self.units: dict[int, set[int]] = {}  # lexeme index -> ids of the fragments it came from
        self.too_big: set[int] = set()
        self.rule_name = ""

    def build(self) -> GrammarIR:
        start = self._one(self.syms(Ref(self.plan.root, 0)))
        return self.b.build(start)

    def _one(self, syms: list[int]) -> int:
        if not syms:
            return self.b.empty()
        return syms[0] if len(syms) == 1 else self.b.seq(syms)

    def _record(self, sym: int, rx_id: int, make_auto, unit: int | None) -> None:
        idx = lexeme_index(sym)
        if idx not in self.autos:
            try:
                self.autos[idx] = auto = make_auto()
                auto.key = rx_id
            except _TooBig:
                self.autos[idx] = None
                if unit is not None:
                    self.too_big.add(unit)
        if unit is not None:
            self.units.setdefault(idx, set()).add(unit)

    def char(self, ranges: tuple[tuple[int, int], ...], name: str) -> int:
        rx_id = rx.codepoint_ranges(ranges)
        sym = self.b.lexeme(rx_id, name)
        self._record(sym, rx_id, lambda: self.plan.single_automaton(ranges), None)
        return sym

    def unit(self, node: Node) -> list[int]:
        plan = self.plan
        target = plan.resolve(node)
        ne = plan.non_empty(target)
        if ne is None:
            return []
        if isinstance(node, Ref):
            name = node.name.upper()
        elif isinstance(target, Lit):
            name = repr(target.text)
        else:
            name = f"{self.rule_name.upper()}_PART"
        rx_id = plan.regex(ne)
        sym = self.b.lexeme(rx_id, name)
        self._record(sym, rx_id, lambda: plan.automaton(ne), id(target))
        return [self.b.optional(sym)] if plan.nullable(target) else [sym]

    def syms(self, node: Node) -> list[int]:
        """The symbols ``node`` stands for in a sequence."""
        plan = self.plan
        cls = plan.single_char(node) if plan.is_regular(node) else None
        if cls is not None:
            return [self.char(cls, _describe_class(cls))]
        if plan.is_unit(node):
            return self.unit(node)
        if isinstance(node, Lit):  # a literal split into characters
            return [self.char(((ord(c), ord(c)),), repr(c)) for c in node.text]
        if isinstance(node, Seq):
            return [s for x in node.items for s in self.syms(x)]
        if isinstance(node, Alt):
            return [self.b.alt([self.syms(x) for x in node.items], name=self.rule_name)]
        if isinstance(node, Rep):
            if node.hi == 0:
                return []
            item = self._one(self.syms(node.item))
            return [self.b.repeat(item, node.lo, node.hi)]
        if isinstance(node, Tok):
            return [self.b.token_lexeme(node.token_set)]
        assert isinstance(node, Ref)
        return [self.rule(node.name)]

    def rule(self, name: str) -> int:
        nt = self.rule_nt.get(name)
        if nt is None:
            nt = self.rule_nt[name] = self.b.nonterminal(name)
            outer, self.rule_name = self.rule_name, name
            body = self.plan.g.rules[name].body
            for alt in body.items if isinstance(body, Alt) else (body,):
                self.b.rule(nt, self.syms(alt))
            self.rule_name = outer
        return nt


def _describe_class(ranges: tuple[tuple[int, int], ...]) -> str:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return repr(chr(ranges[0][0]))
    parts = [f"{lo:X}" if lo == hi else f"{lo:X}-{hi:X}" for lo, hi in ranges[:4]]
    return "[" + ",".join(parts) + (",…" if len(ranges) > 4 else "") + "]"


# -- the conflict analysis -------------------------------------------------------------------------
def _iter_bits(m: int):
    while m:
        low = m & -m
        yield low.bit_length() - 1
        m ^= low


def _first_follow(ir: GrammarIR) -> tuple[int, list[int]]:
    """(FIRST of the start symbol, FOLLOW of every lexeme) as bitsets over lexeme indices."""
    n_nt = len(ir.nonterminals)
    nullable = [False] * n_nt
    first = [0] * n_nt

    def sym_first(s: int) -> int:
        return 1 << lexeme_index(s) if is_lexeme(s) else first[s]

    def sym_null(s: int) -> bool:
        return False if is_lexeme(s) else nullable[s]

    changed = True
    while changed:
        changed = False
        for r in ir.rules:
            f, null = first[r.lhs], True
            for s in r.rhs:
                f |= sym_first(s)
                if not sym_null(s):
                    null = False
                    break
            if f != first[r.lhs] or (null and not nullable[r.lhs]):
                first[r.lhs] = f
                nullable[r.lhs] = nullable[r.lhs] or null
                changed = True
    follow_nt = [0] * n_nt
    follow_lex = [0] * len(ir.lexemes)
    changed = True
    while changed:
        changed = False
        for r in ir.rules:
            tail = follow_nt[r.lhs]
            for s in reversed(r.rhs):
                if is_lexeme(s):
                    follow_lex[lexeme_index(s)] |= tail
                elif follow_nt[s] | tail != follow_nt[s]:
                    follow_nt[s] |= tail
                    changed = True
                tail = sym_first(s) | (tail if sym_null(s) else 0)
    return first[ir.start], follow_lex


def _product_search(v: _Auto, z: _Auto, classes: _Classes, want_overlap: bool,
                    follow_bytes: int) -> bool:
    """Search pairs of positions reading one string in ``v`` and ``z`` at once.

    ``want_overlap``: is there a string both accept? Otherwise: is there ``s`` accepted by
    ``v`` such that ``z`` can continue ``s`` with a character whose first byte is in
    ``follow_bytes`` (the lexer would then run past the end of ``v``)?
    """
    meet, vcls, zcls = classes.meet, v.cls, z.cls
    todo = [(p, q) for p in v.first for q in z.first if meet(vcls[p], zcls[q])]
    seen = set(todo)
    vlast, zlast, vfollow, zfollow, znext = v.last, z.last, v.follow, z.follow, z.next_lead
    while todo:
        p, q = todo.pop()
        if p in vlast:
            if want_overlap:
                if q in zlast:
                    return True
            elif znext[q] & follow_bytes:
                return True
        for p2 in vfollow[p]:
            c = vcls[p2]
            for q2 in zfollow[q]:
                if (p2, q2) not in seen and meet(c, zcls[q2]):
                    seen.add((p2, q2))
                    todo.append((p2, q2))
        if len(seen) > MAX_PRODUCT_STATES:
            raise _TooBig
    return False


def _search(plan: GbnfPlan, v: _Auto, z: _Auto, want_overlap: bool, follow_bytes: int) -> bool:
    """:func:`_product_search`, memoised across rounds; too big counts as a conflict."""
    key = (v.key, z.key, follow_bytes, want_overlap)
    hit = plan.search_memo.get(key)
    if hit is None:
        try:
            hit = _product_search(v, z, plan.classes, want_overlap, follow_bytes)
        except _TooBig:
            hit = True
        plan.search_memo[key] = hit
    return hit


def _conflicts(plan: GbnfPlan, ir: GrammarIR, autos: dict[int, _Auto | None]) -> set[int]:
    """Lexeme indices that greedy lexing could run past (see the module docstring)."""
    n = len(ir.lexemes)
    classes = plan.classes
    first_start, follow = _first_follow(ir)
    fb = [0] * n  # lead bytes a lexeme can start with
    first_cls: list[tuple[tuple[int, int], ...]] = [()] * n
    for i in range(n):
        a = autos.get(i)
        if a is not None:
            ranges = sorted({r for p in a.first for r in classes.ranges[a.cls[p]]})
            first_cls[i] = tuple(ranges)
            fb[i] = _lead_mask(first_cls[i])
    follow_bytes = [0] * n
    for i in range(n):
        for j in _iter_bits(follow[i]):
            follow_bytes[i] |= fb[j]
    byte_lex = [i for i in range(n) if autos.get(i) is not None]
    bad = {i for i in range(n) if ir.lexemes[i].token_set is None and autos.get(i) is None}
    # NEXT(w): what may be expected after scanning w, or any lexeme accepting the same text
    nxt = list(follow)
    for x, i in enumerate(byte_lex):
        for j in byte_lex[x + 1 :]:
            if _intersects(first_cls[i], first_cls[j]) and _search(
                plan, autos[i], autos[j], True, 0  # type: ignore[arg-type]
            ):
                nxt[i] |= follow[j]
                nxt[j] |= follow[i]
    multi = 0
    for i in byte_lex:
        if autos[i].multi:  # type: ignore[union-attr]
            multi |= 1 << i
    coexp: dict[int, int] = {}
    for group in [first_start, *nxt]:
        for z in _iter_bits(group & multi):
            coexp[z] = coexp.get(z, 0) | group
    for z, group in coexp.items():
        az = autos[z]
        for v in _iter_bits(group):
            av = autos.get(v)
            if av is not None and _intersects(first_cls[v], first_cls[z]) and _search(
                plan, av, az, False, follow_bytes[v]  # type: ignore[arg-type]
            ):
                bad.add(z)
                break
    return bad


def plan_gbnf(text: str, root: str = "root") -> tuple[GbnfPlan, GrammarIR]:
    """Parse, check, and decide the lexemes; returns the plan and the final IR."""
    g = parse_gbnf(text)
    check_grammar(g, root)
    plan = GbnfPlan(g, root)
    for _ in range(_MAX_ROUNDS):
        comp = _Compiler(plan)
        ir = comp.build()
        bad = _conflicts(plan, ir, comp.autos)
        demote = {u for i in bad for u in comp.units.get(i, ())} | comp.too_big
        if not demote - plan.demoted:
            if bad - set(comp.units):  # a conflict on a lexeme that is not a unit: impossible
                raise GrammarError("internal error: GBNF lexeme analysis did not converge")
            return plan, ir
        plan.demoted |= demote
    raise GrammarError("internal error: GBNF lexeme analysis did not converge")


def compile_gbnf(text: str, root: str = "root") -> GrammarIR:
    """Compile a llama.cpp GBNF grammar to the grammar IR, with GBNF's exact language.

    ``root`` names the start rule (llama.cpp's default is ``root``). Regular fragments become
    lexemes only where greedy lexing provably accepts the same strings (module docstring).
    Raises :class:`GrammarError` with line:col and caret for syntax errors, an undefined
    rule, a missing start rule or left recursion. Cost: a few ms for the llama.cpp sample
    grammars; the analysis is quadratic in the number of lexemes in the worst case.
    """
    return plan_gbnf(text, root)[1]


def gbnf_to_lark(text: str, root: str = "root") -> str:
    """The GBNF grammar as llguidance Lark-variant text accepting the same strings.

    Fragments that ``compile_gbnf`` makes lexemes are printed as UPPERCASE terminals (rules)
    or string literals; everything else stays rules, with multi-character literals split into
    one-character strings where greedy lexing would change the language. Differences from
    llguidance's own converter are listed in spec/gbnf.md §4.1; this one keeps the language.
    Raises :class:`GrammarError` like :func:`compile_gbnf`, and for ``!<text>`` (no Lark form).
    """
    from lexguide.grammar.gbnf_to_lark import emit_lark

    plan, _ = plan_gbnf(text, root)
    return emit_lark(plan)
