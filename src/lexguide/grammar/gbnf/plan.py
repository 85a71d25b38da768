"""GBNF front end: llama.cpp grammars compiled to the grammar IR, exactly.

GBNF is a CFG over code points with no lexer: every alternative is explored, nothing is
greedy (``root ::= word "b"``, ``word ::= [a-z]+`` accepts ``xb``). The IR's lexer is greedy,
so turning a regular GBNF fragment into one lexeme can change the language.
:func:`plan_gbnf` makes the largest regular fragments lexemes, asks
:func:`lexguide.grammar.gbnf.lexemes.find_conflicts` which of them greedy lexing could run
past, splits those into their parts and repeats until no conflict is left; at worst every
code point is its own lexeme, which is always exact (UTF-8 is prefix-free). A regular root
(chess.gbnf) becomes a single lexeme: inside one regex nothing is greedy.

Semantics kept from llama.cpp: ``.`` and negated classes match any code point including newline;
left recursion is refused (as llama.cpp does); a later definition of a rule replaces an earlier
one. Differences: texts must be valid UTF-8 (llama.cpp decodes invalid bytes leniently);
repetition bounds are kept exactly as written up to ``parser.MAX_REPETITION`` (llama.cpp
refuses repetitions expanding to 2000 rules or more); ``<text>`` token elements match the
vocabulary's *special* token with that text (llama.cpp tokenises the text and requires exactly
one token).
"""

from __future__ import annotations

from lexguide.errors import GrammarError, LimitExceeded
from lexguide.grammar.gbnf.lexemes import (
    CodepointClasses,
    PositionAutomaton,
    TooBig,
    find_conflicts,
)
from lexguide.grammar.gbnf.parser import (
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
from lexguide.grammar.ir import GrammarBuilder, GrammarIR, lexeme_index
from lexguide.limits import MAX_NESTING_DEPTH
from lexguide.regex import nodes as rx

__all__ = ["GbnfPlan", "plan_gbnf"]

#: A fragment whose position automaton is bigger is not made a lexeme (it stays exact as rules;
#: only speed is lost).
MAX_UNIT_POSITIONS = 4000
_MAX_ROUNDS = 200

#: Analysis limits: a unit whose automaton or conflict search is bigger is not made a lexeme
#: (it stays exact as rules; only speed is lost).


#: Deepest node tree (references inlined) made one lexeme; deeper regular rules stay rules.
MAX_INLINE_DEPTH = 2 * MAX_NESTING_DEPTH


def _inline_depth(node: Node, depth: dict[str, int]) -> int | None:
    """Node depth of ``node`` with the rules of ``depth`` inlined; None if it is not regular
    over them (a token, or a reference to a rule not in ``depth``). Iterative."""
    best = 0
    todo: list[tuple[Node, int]] = [(node, 1)]
    while todo:
        n, d = todo.pop()
        if isinstance(n, Tok):
            return None
        if isinstance(n, Ref):
            if n.name not in depth:
                return None
            d += depth[n.name]
        elif isinstance(n, Rep):
            todo.append((n.item, d + 1))
        elif isinstance(n, (Seq, Alt)):
            todo.extend((x, d + 1) for x in n.items)
        best = max(best, d)
    return best


def _refs(node: Node) -> set[str] | None:
    """Names of the rules ``node`` refers to, or None if it holds a token. Iterative."""
    out: set[str] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, Tok):
            return None
        if isinstance(n, Ref):
            out.add(n.name)
        elif isinstance(n, Rep):
            todo.append(n.item)
        elif isinstance(n, (Seq, Alt)):
            todo.extend(n.items)
    return out


# -- the plan: which fragments become lexemes -------------------------------------------------
class GbnfPlan:
    """Parsed grammar plus the lexeme decisions shared by :func:`compile_gbnf` and
    :func:`gbnf_to_lark`. ``demoted`` holds ids of fragments that must not be one lexeme."""

    def __init__(self, g: GbnfGrammar, root: str) -> None:
        self.g = g
        self.root = root
        self.nullable_rules = nullable_rules(g)
        self.regular_rules = self._regular_rules()  # regular rule -> inlined node depth
        self._regular: dict[int, bool] = {}  # id(node) -> is_regular(node)
        self.demoted: set[int] = set()
        self._ne: dict[int, Node | None] = {}
        self._rx: dict[int, int] = {}
        self._keep: list[Node] = []  # keeps derived nodes alive so their ids stay unique
        self.classes = CodepointClasses()
        self.search_memo: dict[tuple[int, int, int, bool], bool] = {}
        self.use_contexts = True  # off once the context analysis exceeded its budget

    def _regular_rules(self) -> dict[str, int]:
        # llguidance's fixed point (gbnf_to_lark.py): recursive rules never qualify, nor
        # rules whose body with references inlined nests deeper than MAX_INLINE_DEPTH nodes
        # (they stay rules, which is exact; it keeps the recursive passes over units bounded)
        # Decided in dependency order (a rule once every rule it refers to is regular), so a
        # chain of n rules costs O(n), not the O(n * depth) of repeated sweeps
        rules = self.g.rules
        waiting: dict[str, int] = {}  # name -> referenced rules not yet known regular
        users: dict[str, list[str]] = {}
        ready = []
        for name, rd in rules.items():
            refs = _refs(rd.body)
            if refs is None:  # holds a token: never regular
                continue
            waiting[name] = len(refs)
            for r in refs:
                users.setdefault(r, []).append(name)
            if not refs:
                ready.append(name)
        depth: dict[str, int] = {}
        while ready:
            name = ready.pop()
            d = _inline_depth(rules[name].body, depth)
            if d is None or d > MAX_INLINE_DEPTH:
                continue
            depth[name] = d
            for user in users.get(name, ()):
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.append(user)
        return depth


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
        if isinstance(node, Ref):
            return node.name in self.regular_rules
        got = self._regular.get(id(node))
        if got is None:
            d = _inline_depth(node, self.regular_rules)
            got = self._regular[id(node)] = d is not None and d <= MAX_INLINE_DEPTH
            self._keep.append(node)  # the id stays this node's
        return got

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

    def automaton(self, node: Node) -> PositionAutomaton:
        """The Glushkov automaton of a regular ``node``; raises ``TooBig`` past the limit."""
        a = PositionAutomaton()
        a.first, a.last, a.nullable = self._glushkov(node, a)
        return a.finish(self.classes)

    def single_automaton(self, ranges: tuple[tuple[int, int], ...]) -> PositionAutomaton:
        a = PositionAutomaton()
        a.cls, a.follow, a.first, a.last = [self.classes.intern(ranges)], [set()], {0}, {0}
        return a.finish(self.classes)

    def _glushkov(self, node: Node, a: PositionAutomaton) -> tuple[set[int], set[int], bool]:
        if isinstance(node, (Chars, Lit)) and self.single_char(node) is not None:
            cls = self.single_char(node)
            assert cls is not None
            if not cls:  # an empty class matches nothing: a dead position
                return set(), set(), False
            a.cls.append(self.classes.intern(cls))
            a.follow.append(set())
            if len(a.cls) > MAX_UNIT_POSITIONS:
                raise TooBig
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

    def _upto(self, item: Node, n: int, a: PositionAutomaton) -> tuple[set[int], set[int], bool]:
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

    def _star(self, item: Node, a: PositionAutomaton) -> tuple[set[int], set[int], bool]:
        f, l, _ = self._glushkov(item, a)
        for p in l:
            a.follow[p] |= f
        return f, l, True

    def _opt(self, item: Node, a: PositionAutomaton) -> tuple[set[int], set[int], bool]:
        f, l, _ = self._glushkov(item, a)
        return f, l, True

    @staticmethod
    def _seq(parts, a: PositionAutomaton) -> tuple[set[int], set[int], bool]:
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
        # lexeme index -> automaton (None: too big); token lexemes have none
        self.autos: dict[int, PositionAutomaton | None] = {}
        self.units: dict[int, set[int]] = {}  # lexeme index -> ids of the fragments it came from
        self.too_big: set[int] = set()
        self.rule_name = ""
        self._todo: list[str] = []  # rules whose nonterminal exists but whose body does not yet

    def build(self) -> GrammarIR:
        start = self._one(self.syms(Ref(self.plan.root, 0)))
        while self._todo:  # rule bodies, compiled one at a time (no recursion across rules)
            name = self._todo.pop()
            self.rule_name = name
            body = self.plan.g.rules[name].body
            for alt in body.items if isinstance(body, Alt) else (body,):
                self.b.rule(self.rule_nt[name], self.syms(alt))
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
            except TooBig:
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
        try:
            rx_id = plan.regex(ne)
        except LimitExceeded:  # too big a regex (nested counts): keep it as rules instead
            plan.demoted.add(id(target))
            return self.syms(node)
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
        """The nonterminal of rule ``name``; its body is compiled later, by :meth:`build`."""
        nt = self.rule_nt.get(name)
        if nt is None:
            nt = self.rule_nt[name] = self.b.nonterminal(name)
            self._todo.append(name)
        return nt


def _describe_class(ranges: tuple[tuple[int, int], ...]) -> str:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return repr(chr(ranges[0][0]))
    parts = [f"{lo:X}" if lo == hi else f"{lo:X}-{hi:X}" for lo, hi in ranges[:4]]
    return "[" + ",".join(parts) + (",…" if len(ranges) > 4 else "") + "]"


def plan_gbnf(text: str, root: str = "root") -> tuple[GbnfPlan, GrammarIR]:
    """Parse, check, and decide the lexemes; returns the plan and the final IR."""
    g = parse_gbnf(text)
    check_grammar(g, root)
    plan = GbnfPlan(g, root)
    for _ in range(_MAX_ROUNDS):
        comp = _Compiler(plan)
        ir = comp.build()
        bad, plan.use_contexts = find_conflicts(
            ir, comp.autos, plan.classes, plan.search_memo, contexts=plan.use_contexts
        )
        demote = {u for i in bad for u in comp.units.get(i, ())} | comp.too_big
        if not demote - plan.demoted:
            if bad - set(comp.units):  # a conflict on a lexeme that is not a unit: impossible
                raise GrammarError("internal error: GBNF lexeme analysis did not converge")
            return plan, ir
        plan.demoted |= demote
    raise GrammarError("internal error: GBNF lexeme analysis did not converge")
