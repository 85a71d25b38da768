"""Which GBNF fragments may be lexemes: a conflict analysis on Glushkov automata.

GBNF has no lexer; the IR's lexer is greedy (maximal munch, no backtracking). A
multi-character lexeme is therefore only safe where greediness never loses a parse
(``root ::= word "b"``, ``word ::= [a-z]+`` accepts ``xb`` only if ``word`` is no lexeme).
:func:`find_conflicts` checks this on the lexeme-level grammar actually
built: the lexer goes wrong only when, at a position where lexemes E are expected, a lexeme V
has matched ``v`` and the first byte of what follows V in the intended parse lets the lexer
continue into some Z in E (``v`` followed by that byte is a prefix of a Z string). E and what
may follow V come from an abstract interpretation of the parser whose stacks are cut to their
top few items (:class:`_Contexts`: shared helpers such as ``space`` keep their calling context),
or, past its budget, from FOLLOW sets; both over-approximate, so the check is sound. The search
itself runs exactly on the product of the Glushkov position automata (Glushkov 1961) of V and
Z over code-point classes, with the continuation compared by UTF-8 lead byte. One-character
lexemes can never be extended (UTF-8 is prefix-free), so only multi-character Z are checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from lexguide.grammar.ir import GrammarIR, Rule, is_lexeme, lexeme_index

__all__ = [
    "MAX_PRODUCT_STATES",
    "CodepointClasses",
    "PositionAutomaton",
    "TooBig",
    "find_conflicts",
]

#: A conflict search visiting more position pairs gives up and reports a conflict (the
#: fragment then stays rules: exact, only slower).
MAX_PRODUCT_STATES = 100_000


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


class CodepointClasses:
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


class PositionAutomaton:
    """Glushkov automaton over code-point classes: ``first``/``last`` positions, ``follow``.

    ``cls[p]`` is the interned class id of position ``p``; ``next_lead[p]`` the UTF-8 lead
    bytes of the characters that may come after ``p``.
    """

    __slots__ = ("cls", "first", "follow", "key", "last", "multi", "next_lead", "nullable")

    def __init__(self) -> None:
        self.cls: list[int] = []
        self.follow: list[set[int]] = []
        self.first: set[int] = set()
        self.last: set[int] = set()
        self.nullable = False
        self.multi = False  # can match two or more code points
        self.next_lead: list[int] = []
        self.key = 0  # the lexeme's rx id: equal keys, equal languages

    def finish(self, classes: CodepointClasses) -> PositionAutomaton:
        self.multi = any(self.follow)
        leads = classes.leads
        self.next_lead = []
        for f in self.follow:
            m = 0
            for q in f:
                m |= leads[self.cls[q]]
            self.next_lead.append(m)
        return self


class TooBig(Exception):
    """An automaton or a search exceeds its limit."""


def _iter_bits(m: int) -> Iterator[int]:
    while m:
        low = m & -m
        yield low.bit_length() - 1
        m ^= low


def _worklist(rules: tuple[Rule, ...], update: Callable[[Rule], list[int]]) -> None:
    """Run ``update`` on every rule, then again on the rules it reports dirty, until none."""
    todo = list(range(len(rules)))
    queued = [True] * len(rules)
    while todo:
        ri = todo.pop()
        queued[ri] = False
        for rj in update(rules[ri]):
            if not queued[rj]:
                queued[rj] = True
                todo.append(rj)


def _first_follow(ir: GrammarIR) -> tuple[int, list[int]]:
    """(FIRST of the start symbol, FOLLOW of every lexeme) as bitsets over lexeme indices.

    Worklist fixed points (a rule is re-examined only when a symbol it reads changed), so long
    chains of helper rules (``x{0,5000}``) cost linear, not quadratic, time.
    """
    rules = ir.rules
    n_nt = len(ir.nonterminals)
    nullable = [False] * n_nt
    first = [0] * n_nt
    used_in: list[list[int]] = [[] for _ in range(n_nt)]  # nonterminal -> rules reading it
    rules_of: list[list[int]] = [[] for _ in range(n_nt)]
    for ri, r in enumerate(rules):
        rules_of[r.lhs].append(ri)
        for s in set(r.rhs):
            if not is_lexeme(s):
                used_in[s].append(ri)

    def sym_first(s: int) -> int:
        return 1 << lexeme_index(s) if is_lexeme(s) else first[s]

    def sym_null(s: int) -> bool:
        return False if is_lexeme(s) else nullable[s]

    def update_first(r: Rule) -> list[int]:
        f, null = first[r.lhs], True
        for s in r.rhs:
            f |= sym_first(s)
            if not sym_null(s):
                null = False
                break
        if f == first[r.lhs] and (nullable[r.lhs] or not null):
            return []
        first[r.lhs] = f
        nullable[r.lhs] = nullable[r.lhs] or null
        return used_in[r.lhs]

    follow_nt = [0] * n_nt

    def update_follow(r: Rule) -> list[int]:
        dirty: list[int] = []
        tail = follow_nt[r.lhs]
        for s in reversed(r.rhs):
            if not is_lexeme(s) and follow_nt[s] | tail != follow_nt[s]:
                follow_nt[s] |= tail
                dirty += rules_of[s]
            tail = sym_first(s) | (tail if sym_null(s) else 0)
        return dirty

    _worklist(rules, update_first)
    _worklist(rules, update_follow)
    follow_lex = [0] * len(ir.lexemes)
    for r in rules:
        tail = follow_nt[r.lhs]
        for s in reversed(r.rhs):
            if is_lexeme(s):
                follow_lex[lexeme_index(s)] |= tail
            tail = sym_first(s) | (tail if sym_null(s) else 0)
    return first[ir.start], follow_lex


def _product_search(
    v: PositionAutomaton,
    z: PositionAutomaton,
    classes: CodepointClasses,
    want_overlap: bool,
    follow_bytes: int,
) -> bool:
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
            raise TooBig
    return False


class _Contexts:
    """Abstract parser states: sets of parse stacks cut to their top ``depth`` items.

    A real parse configuration is a stack of dotted rules; scanning, predicting (push) and
    completing (pop) move it. Keeping only the top ``depth`` items (a pop below the cut returns
    to every caller) gives finitely many abstract states, each a superset of the truncated real
    configurations reachable by the same lexemes, so the lexemes it expects over-approximate
    what the Earley parser can expect at once -- much tighter than FOLLOW sets, because the
    stack remembers which rule a shared helper (``space``, a comma) was called from.
    """

    def __init__(self, ir: GrammarIR, depth: int, budget: int) -> None:
        self.depth, self.budget = depth, budget
        self.base: list[int] = []
        self.next_sym: list[int | None] = []
        self.lhs: list[int] = []
        for r in ir.rules:
            self.base.append(len(self.next_sym))
            for dot in range(len(r.rhs) + 1):
                self.next_sym.append(r.rhs[dot] if dot < len(r.rhs) else None)
                self.lhs.append(r.lhs)
        # left-recursive rules (the IR's repetition helpers, X -> X y) are never pushed;
        # completing an X instead may continue as X -> X . y in place (Earley's treatment)
        self.rules_of: dict[int, list[int]] = {}
        self.left_rec: dict[int, list[int]] = {}
        self.callers: dict[int, list[int]] = {}
        for ri, r in enumerate(ir.rules):
            if r.rhs and r.rhs[0] == r.lhs:
                self.left_rec.setdefault(r.lhs, []).append(self.base[ri] + 1)
            else:
                self.rules_of.setdefault(r.lhs, []).append(ri)
        for item, sym in enumerate(self.next_sym):
            if sym is not None and sym >= 0:
                self.callers.setdefault(sym, []).append(item)
        self.n_configs = 0
        self._reach: dict[tuple[bool, tuple[int, ...]], frozenset] = {}
        top = next(ri for ri, r in enumerate(ir.rules) if r.lhs == ir.start)
        self.start = self.closure([(False, (self.base[top],))])

    def closure(self, configs: list[tuple[bool, tuple[int, ...]]]) -> frozenset:
        """The configurations about to scan a lexeme that ``configs`` lead to (a state)."""
        out: set[tuple[bool, tuple[int, ...]]] = set()
        for c in configs:
            hit = self._reach.get(c)
            if hit is None:
                hit = self._reach[c] = self._closure1(c)
            out |= hit
        return frozenset(out)

    def _closure1(self, config: tuple[bool, tuple[int, ...]]) -> frozenset:
        seen = {config}
        todo = [config]
        ready = []
        next_sym, depth = self.next_sym, self.depth
        while todo:
            cut, stack = todo.pop()
            top = stack[-1]
            sym = next_sym[top]
            new: list[tuple[bool, tuple[int, ...]]] = []
            if sym is None:  # complete: return to the caller
                again = self.left_rec.get(self.lhs[top], ())
                new.extend((cut, stack[:-1] + (item,)) for item in again)
                if len(stack) >= 2:
                    new.append((cut, stack[:-2] + (stack[-2] + 1,)))
                elif cut:  # the caller was cut off: any caller
                    new.extend((True, (item + 1,)) for item in self.callers.get(self.lhs[top], ()))
            elif sym >= 0:  # predict
                for ri in self.rules_of.get(sym, ()):
                    pushed = stack + (self.base[ri],)
                    new.append((True, pushed[1:]) if len(pushed) > depth else (cut, pushed))
            else:
                ready.append((cut, stack))
            for c in new:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        self.n_configs += len(seen)
        if self.n_configs > self.budget:
            raise TooBig
        return frozenset(ready)

    def expected(self, state: frozenset) -> int:
        m = 0
        for _, stack in state:
            m |= 1 << lexeme_index(self.next_sym[stack[-1]])  # type: ignore[arg-type]
        return m

    def scan(self, state: frozenset, group: int) -> frozenset:
        self.n_configs += len(state)
        if self.n_configs > self.budget:
            raise TooBig
        moved = [(cut, stack[:-1] + (stack[-1] + 1,)) for cut, stack in state
                 if (group >> lexeme_index(self.next_sym[stack[-1]])) & 1]  # type: ignore[arg-type]
        return self.closure(moved)


def _context_pairs(
    ir: GrammarIR, overlap: list[int], fb: list[int], multi: int, depth: int = 4,
    budget: int = 60_000,
) -> dict[tuple[int, int], int] | None:
    """``{(v, zs): follow bytes}``: lexeme v and the multi-character lexemes of bitset zs can
    be expected at once, and after v the next lexeme may start with one of those bytes.
    ``None`` when the abstraction exceeds ``budget``."""
    try:
        ctx = _Contexts(ir, depth, budget)
        info: dict[frozenset, tuple[int, int]] = {}  # state -> (expected, their first bytes)

        def describe(state: frozenset) -> tuple[int, int]:
            hit = info.get(state)
            if hit is None:
                exp = ctx.expected(state)
                first = 0
                for x in _iter_bits(exp):
                    first |= fb[x]
                hit = info[state] = (exp, first)
            return hit

        todo = [ctx.start]
        describe(ctx.start)
        pairs: dict[tuple[int, int], int] = {}
        while todo:
            state = todo.pop()
            exp, _ = info[state]
            for v in _iter_bits(exp):
                succ = ctx.scan(state, exp & overlap[v])
                if succ not in info:
                    todo.append(succ)
                follow = describe(succ)[1]
                key = (v, exp & multi)
                pairs[key] = pairs.get(key, 0) | follow
    except TooBig:
        return None
    return pairs


def find_conflicts(
    ir: GrammarIR,
    autos: dict[int, PositionAutomaton | None],
    classes: CodepointClasses,
    memo: dict[tuple[int, int, int, bool], bool],
    *,
    contexts: bool = True,
) -> tuple[set[int], bool]:
    """Lexeme indices that greedy lexing could run past (see the module docstring), and
    whether the context analysis was used (``contexts=False`` or past its budget: FOLLOW sets).

    ``autos`` maps each byte lexeme to its automaton (``None``: too big, reported as a
    conflict); token-set lexemes are absent. ``memo`` caches searches between calls (keyed by
    the lexemes' regex ids). Which lexemes can be expected together comes from
    :class:`_Contexts`, or from FOLLOW sets when that abstraction grows past its budget.
    Cost: quadratic in the lexemes that can be expected together.
    """
    n = len(ir.lexemes)

    def search(v: PositionAutomaton, z: PositionAutomaton, overlap: bool, follow: int) -> bool:
        key = (v.key, z.key, follow, overlap)
        hit = memo.get(key)
        if hit is None:
            try:
                hit = _product_search(v, z, classes, overlap, follow)
            except TooBig:
                hit = True
            memo[key] = hit
        return hit

    fb = [0] * n  # lead bytes a lexeme can start with
    first_cls: list[tuple[tuple[int, int], ...]] = [()] * n
    for i in range(n):
        a = autos.get(i)
        if a is not None:
            ranges = sorted({r for p in a.first for r in classes.ranges[a.cls[p]]})
            first_cls[i] = tuple(ranges)
            fb[i] = _lead_mask(first_cls[i])
    byte_lex = [i for i in range(n) if autos.get(i) is not None]
    bad = {i for i in range(n) if ir.lexemes[i].token_set is None and autos.get(i) is None}
    # lexemes that can accept the same text (the lexer hands them to the parser together)
    overlap = [1 << i for i in range(n)]
    for x, i in enumerate(byte_lex):
        for j in byte_lex[x + 1 :]:
            if _intersects(first_cls[i], first_cls[j]) and search(
                autos[i], autos[j], True, 0  # type: ignore[arg-type]
            ):
                overlap[i] |= 1 << j
                overlap[j] |= 1 << i
    multi = 0
    for i in byte_lex:
        if autos[i].multi:  # type: ignore[union-attr]
            multi |= 1 << i
    pairs = _context_pairs(ir, overlap, fb, multi) if contexts else None
    used_contexts = pairs is not None
    if pairs is None:
        pairs = _follow_pairs(ir, overlap, fb, multi)
    for (v, zs), follow in pairs.items():
        av = autos.get(v)
        if av is None:
            continue
        for z in _iter_bits(zs):
            if z not in bad and _intersects(first_cls[v], first_cls[z]) and search(
                av, autos[z], False, follow  # type: ignore[arg-type]
            ):
                bad.add(z)
    return bad, used_contexts


def _follow_pairs(
    ir: GrammarIR, overlap: list[int], fb: list[int], multi: int
) -> dict[tuple[int, int], int]:
    """The coarse version of :func:`_context_pairs`: lexemes that can follow the previous
    lexeme (or one accepting the same text) may be expected together; FOLLOW(v) follows v."""
    n = len(ir.lexemes)
    first_start, follow = _first_follow(ir)
    nxt = [0] * n
    for i in range(n):
        for j in _iter_bits(overlap[i]):
            nxt[i] |= follow[j]
    pairs: dict[tuple[int, int], int] = {}
    for group in {first_start, *nxt}:
        for v in _iter_bits(group):
            follow_bytes = 0
            for j in _iter_bits(follow[v]):
                follow_bytes |= fb[j]
            key = (v, group & multi)
            pairs[key] = pairs.get(key, 0) | follow_bytes
    return pairs
