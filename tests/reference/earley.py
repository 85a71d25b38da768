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


class _Predictions:
    """The items predicted in a set (origin ``SELF``) for one set of predicted nonterminals.

    They depend only on which nonterminals are predicted, not on the kernel, so sets that
    predict the same nonterminals (every statement of a C-like program predicts the whole
    expression grammar) share one block instead of each re-deriving hundreds of items.
    """

    __slots__ = ("expected", "n_items", "waiting")

    def __init__(self, waiting: dict[int, list[int]], n_items: int) -> None:
        self.waiting = waiting  # symbol -> dotted rules (origin SELF) whose next symbol it is
        self.n_items = n_items
        self.expected = frozenset(lexeme_index(s) for s in waiting if s < 0)


class _EarleySet:
    __slots__ = ("accepting", "expected", "last_classes", "n_items", "predictions", "scans", "waiting")

    def __init__(self) -> None:
        self.n_items = 0
        # symbol -> items (dotted_rule, origin) whose next symbol it is; origin is never SELF
        # here: predicted items live in ``predictions``
        self.waiting: dict[int, list[tuple[int, int]]] = {}
        self.predictions: _Predictions | None = None
        self.expected: frozenset[int] = frozenset()  # lexeme indices that some item expects
        self.accepting = False
        self.scans: dict[frozenset[int], int] = {}
        self.last_classes: frozenset[int] = frozenset()  # lexeme classes of the lexeme just scanned

    def waiting_for(self, sym: int, set_id: int) -> list[tuple[int, int]]:
        """Items waiting for ``sym``, predicted ones with their origin resolved to ``set_id``."""
        own = self.waiting.get(sym, [])
        pred = self.predictions.waiting.get(sym) if self.predictions is not None else None
        if not pred:
            return own
        return own + [(dr, set_id) for dr in pred]


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
        self._predicts: dict[int, frozenset[int]] = {}  # nonterminal -> nonterminals it predicts
        self._nt_items: dict[int, list[tuple[int, int]]] = {}  # nonterminal -> (symbol, dr)
        self._predictions: dict[frozenset[int], _Predictions] = {}
        self._lock = threading.RLock()
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
            for dr, origin in eset.waiting_for(-1 - lex, set_id):
                kernel.add((dr + 1, origin))
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
                id(eset.predictions),
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
        """Completion and nullable advances of the kernel's items; predictions are one shared
        :class:`_Predictions` block per set of predicted nonterminals."""
        dr_next = self._dr_next
        dr_lhs = self._dr_lhs
        nullable = self._nullable
        sets = self._sets
        eset = _EarleySet()
        waiting = eset.waiting
        seen: set[tuple[int, int]] = set()
        predicted: set[int] = set()
        todo = list(kernel)
        while todo:
            item = todo.pop()
            if item in seen:
                continue
            seen.add(item)
            if len(seen) > DEFAULT_MAX_ITEMS_PER_SET:
                raise LimitExceeded("max_items_per_set", DEFAULT_MAX_ITEMS_PER_SET)
            dr, origin = item
            sym = dr_next[dr]
            if sym is None:
                # completion: advance the items of the origin set that wait for our lhs
                if origin >= 0:
                    todo.extend((pdr + 1, porigin) for pdr, porigin in sets[origin].waiting_for(dr_lhs[dr], origin))
                elif origin == ROOT:
                    eset.accepting = True
                continue
            waiting.setdefault(sym, []).append(item)
            if sym >= 0:
                if sym not in predicted:
                    predicted |= self._predicted_by(sym)
                if sym in nullable:
                    todo.append((dr + 1, origin))
        preds = self._predictions_for(frozenset(predicted))
        eset.predictions = preds
        eset.n_items = len(seen) + preds.n_items
        if eset.n_items > DEFAULT_MAX_ITEMS_PER_SET:
            raise LimitExceeded("max_items_per_set", DEFAULT_MAX_ITEMS_PER_SET)
        eset.expected = frozenset(lexeme_index(s) for s in waiting if s < 0) | preds.expected
        return eset

    def _predicted_by(self, nt: int) -> frozenset[int]:
        """Nonterminals predicted, transitively, when ``nt`` is (memoised)."""
        hit = self._predicts.get(nt)
        if hit is None:
            found = {nt}
            todo = [nt]
            while todo:
                for _, dr in self._items_of(todo.pop()):
                    sym = self._dr_next[dr]
                    if sym is not None and sym >= 0 and sym not in found:
                        found.add(sym)
                        todo.append(sym)
            hit = frozenset(found)
            self._predicts[nt] = hit
        return hit

    def _items_of(self, nt: int) -> list[tuple[int, int]]:
        """``(next symbol, dotted rule)`` of the items predicting ``nt`` adds to a set: each
        rule at its start and past every nullable prefix (Aycock–Horspool); completed ones
        are left out (the nullable advance of the waiting item covers them)."""
        hit = self._nt_items.get(nt)
        if hit is None:
            hit = []
            for dr in self._rules_of.get(nt, ()):
                while True:
                    sym = self._dr_next[dr]
                    if sym is None:
                        break
                    hit.append((sym, dr))
                    if sym < 0 or sym not in self._nullable:
                        break
                    dr += 1
            self._nt_items[nt] = hit
        return hit

    def _predictions_for(self, nts: frozenset[int]) -> _Predictions:
        hit = self._predictions.get(nts)
        if hit is None:
            waiting: dict[int, list[int]] = {}
            n = 0
            for nt in sorted(nts):
                for sym, dr in self._items_of(nt):
                    waiting.setdefault(sym, []).append(dr)
                    n += 1
            hit = _Predictions(waiting, n)
            self._predictions[nts] = hit
        return hit
