"""Earley parser over lexemes with canonical, hash-consed parser states.

A parser state is one Earley set, identified by an int. Items are ``(dotted_rule, origin)``
where ``origin`` is the id of the set the item started in, ``SELF`` for items predicted in the
set itself, or ``ROOT`` for the start item. A set is interned by its *kernel* (the items
produced by scanning); the closure (prediction + completion, with the Aycock–Horspool
treatment of nullable nonterminals) is a function of the kernel, and two closures whose
incomplete items (and acceptance) agree are the same state, since completed items play no
further part. Because origins refer to canonical ids, the whole remaining parse behaviour of a set is
determined by its id: masks and transitions can be memoised per id, across steps and across
matchers of the same grammar. Repetitions are left-recursive (see ``ir.GrammarBuilder``), so the
set reached after list element *n* is the same as after element *n+1*.

Reference: J. Aycock and R. N. Horspool, "Practical Earley Parsing", The Computer Journal 45(6), 2002.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from lexguide.errors import LimitExceeded
from lexguide.grammar.ir import GrammarIR, is_lexeme, lexeme_index

__all__ = ["DEAD_SET", "ROOT", "SELF", "EarleyParser"]

SELF = -1  # origin: predicted in the set that holds the item
ROOT = -2  # origin of the start item
DEAD_SET = -1  # scan result when no item accepts the lexeme

DEFAULT_MAX_SETS = 200_000
DEFAULT_MAX_ITEMS_PER_SET = 200_000


class _EarleySet:
    __slots__ = ("accepting", "expected", "items", "last_classes", "scans", "waiting")

    def __init__(self) -> None:
        self.items: list[tuple[int, int]] = []
        # symbol -> items (dotted_rule, origin) whose next symbol it is
        self.waiting: dict[int, list[tuple[int, int]]] = {}
        self.expected: frozenset[int] = frozenset()  # lexeme indices that some item expects
        self.accepting = False
        self.scans: dict[frozenset[int], int] = {}
        self.last_classes: frozenset[int] = frozenset()  # lexeme classes of the lexeme just scanned


class EarleyParser:
    """Lazily built graph of canonical Earley sets for one grammar. Thread-safe; shared.

    Cost: a new set costs one closure (Python, proportional to its items); a known
    ``scan`` is a dict lookup. ``max_sets`` bounds memory (``LimitExceeded``).
    """

    def __init__(self, ir: GrammarIR, *, max_sets: int = DEFAULT_MAX_SETS) -> None:
        self.ir = ir
        self.max_sets = max_sets
        # dotted rules: dr = rule_start[r] + dot
        self._dr_next: list[int | None] = []  # next symbol after the dot, None if complete
        self._dr_lhs: list[int] = []
        self._rule_first_dr: list[int] = []
        for rule in ir.rules:
            self._rule_first_dr.append(len(self._dr_next))
            for dot in range(len(rule.rhs) + 1):
                self._dr_next.append(rule.rhs[dot] if dot < len(rule.rhs) else None)
                self._dr_lhs.append(rule.lhs)
        self._rules_of: dict[int, list[int]] = {}
        for i, rule in enumerate(ir.rules):
            self._rules_of.setdefault(rule.lhs, []).append(self._rule_first_dr[i])
        self._nullable = self._compute_nullable()
        top_rule = next(i for i, r in enumerate(ir.rules) if r.lhs == ir.start)
        self._start_dr = self._rule_first_dr[top_rule]
        self._accept_dr = self._start_dr + len(ir.rules[top_rule].rhs)
        self._sets: list[_EarleySet] = []
        self._by_kernel: dict[frozenset[tuple[int, int]], int] = {}
        self._by_signature: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self.initial = self._intern(frozenset([(self._start_dr, ROOT)]))

    def _compute_nullable(self) -> set[int]:
        nullable: set[int] = set()
        changed = True
        while changed:
            changed = False
            for rule in self.ir.rules:
                if rule.lhs not in nullable and all(
                    (not is_lexeme(s)) and s in nullable for s in rule.rhs
                ):
                    nullable.add(rule.lhs)
                    changed = True
        return nullable

    @property
    def n_sets(self) -> int:
        return len(self._sets)

    # -- queries --------------------------------------------------------------------------
    def expected(self, set_id: int) -> frozenset[int]:
        """Lexeme indices some item of the set expects next."""
        return self._sets[set_id].expected

    def last_classes(self, set_id: int) -> frozenset[int]:
        """Lexeme classes of the lexeme whose scan produced this set (empty at the start)."""
        return self._sets[set_id].last_classes

    def is_accepting(self, set_id: int) -> bool:
        """Whether the input so far is a complete sentence of the grammar."""
        return self._sets[set_id].accepting

    def scan(self, set_id: int, lexemes: Iterable[int]) -> int:
        """The set after scanning one lexeme that is any of ``lexemes`` (lexeme indices).

        Returns ``DEAD_SET`` if no item expects any of them. Memoised per (set, lexemes).
        """
        key = lexemes if isinstance(lexemes, frozenset) else frozenset(lexemes)
        eset = self._sets[set_id]
        hit = eset.scans.get(key)
        if hit is not None:
            return hit
        kernel = set()
        for lex in key:
            for dr, origin in eset.waiting.get(-1 - lex, ()):
                kernel.add((dr + 1, set_id if origin == SELF else origin))
        result = self._intern(frozenset(kernel)) if kernel else DEAD_SET
        eset.scans[key] = result
        return result

    # -- construction ---------------------------------------------------------------------
    def _intern(self, kernel: frozenset[tuple[int, int]]) -> int:
        sid = self._by_kernel.get(kernel)
        if sid is not None:
            return sid
        with self._lock:
            sid = self._by_kernel.get(kernel)
            if sid is not None:
                return sid
            if len(self._sets) >= self.max_sets:
                raise LimitExceeded(
                    "max_parser_states",
                    self.max_sets,
                    f"grammar parser exceeded max_parser_states={self.max_sets} "
                    "(deeply nested or highly ambiguous input)",
                )
            eset = self._closure(kernel)
            eset.last_classes = self._scanned_classes(kernel)
            # Completed items have no future: two closures with the same waiting items (and
            # acceptance) behave identically, whatever their kernels. Share their id.
            signature = (
                frozenset(it for items in eset.waiting.values() for it in items),
                eset.accepting,
                eset.last_classes,
            )
            sid = self._by_signature.get(signature)
            if sid is None:
                self._sets.append(eset)
                sid = len(self._sets) - 1
                self._by_signature[signature] = sid
            self._by_kernel[kernel] = sid
            return sid

    def _scanned_classes(self, kernel: frozenset[tuple[int, int]]) -> frozenset[int]:
        classes = set()
        for dr, _ in kernel:
            sym = self._dr_next[dr - 1] if dr > 0 else None
            if sym is not None and sym < 0 and self._dr_lhs[dr - 1] == self._dr_lhs[dr]:
                classes.add(self.ir.lexemes[-1 - sym].lexeme_class)
        return frozenset(classes)

    def _closure(self, kernel: frozenset[tuple[int, int]]) -> _EarleySet:
        dr_next = self._dr_next
        dr_lhs = self._dr_lhs
        rules_of = self._rules_of
        nullable = self._nullable
        sets = self._sets
        eset = _EarleySet()
        waiting = eset.waiting
        seen: set[tuple[int, int]] = set()
        predicted: set[int] = set()
        todo = list(kernel)
        items = eset.items
        while todo:
            item = todo.pop()
            if item in seen:
                continue
            seen.add(item)
            items.append(item)
            if len(items) > DEFAULT_MAX_ITEMS_PER_SET:
                raise LimitExceeded("max_items_per_set", DEFAULT_MAX_ITEMS_PER_SET)
            dr, origin = item
            sym = dr_next[dr]
            if sym is None:
                # completion: advance the items of the origin set that wait for our lhs
                if origin >= 0:
                    lhs = dr_lhs[dr]
                    for pdr, porigin in sets[origin].waiting.get(lhs, ()):
                        todo.append((pdr + 1, origin if porigin == SELF else porigin))
                elif origin == ROOT:
                    eset.accepting = True
                # origin SELF: covered by the nullable advance at prediction time
                continue
            waiting.setdefault(sym, []).append(item)
            if sym >= 0:
                if sym not in predicted:
                    predicted.add(sym)
                    for first in rules_of.get(sym, ()):
                        todo.append((first, SELF))
                if sym in nullable:
                    todo.append((dr + 1, origin))
        eset.expected = frozenset(lexeme_index(s) for s in waiting if s < 0)
        return eset
