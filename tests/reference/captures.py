"""The test oracle for captures (``lexguide.engine.captures``): the pure-Python two-pass reader
the compiled core (``csrc/engine/captures.cc``) replaced, kept here only to check it.

1. *Lexeme trace*: the input is replayed through the :class:`LexParser` with the same
   decisions it made while matching (greedy and lazy ends, skips, empty lexemes), recording
   every lexeme's byte span and the lexemes that may stand there.
2. *Positional Earley*: an ordinary Earley recognizer over that lexeme sequence, items keyed by
   start position, then a backward pass that keeps only the completions taking part in a parse
   of the whole input (of a complete sentence when the input is final, of a viable prefix
   otherwise). Each kept completion of a captured nonterminal, and each kept captured lexeme,
   reports its bytes.

:func:`capture_spans` gives ``(end, start, name)`` of each capture, ordered by end and then by
start descending; captures with the same span come in no particular order (the core orders
them, see ``csrc/engine/captures.h``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from lexguide.engine.lexparser import DEAD_SET, LexParser, ParseState
from lexguide.errors import MatcherError
from lexguide.grammar.ir import is_lexeme, lexeme_index, lexeme_sym

__all__ = ["Span", "capture_spans", "captures", "lexeme_trace"]


class Span(NamedTuple):
    """One lexeme of the input: bytes ``[start, end)`` and the lexeme indices it may be."""

    start: int
    end: int
    lexemes: frozenset[int]


Piece = tuple[bytes | frozenset[int], ParseState | None]


def lexeme_trace(lp: LexParser, pieces: Sequence[Piece], final: bool) -> list[Span]:
    """Replay ``pieces`` and list the lexemes read. A piece is a byte string (or the
    special-token lexemes of a special token) and the parse state a matcher reached after it,
    if known: replay goes on from that state, which may differ from the replayed one when a
    token budget (``max_tokens``) stopped a lexeme. With ``final``, the pending lexeme is ended
    as at end of input.

    Raises :class:`MatcherError` if the pieces are not a valid prefix (or, with ``final``, not
    a complete sentence).
    """
    lexer, parser = lp.lexer, lp.parser
    spans: list[Span] = []
    pos = start = 0

    def finish(set_id: int, lstate: int, end: int) -> tuple[int, int]:
        nonlocal start
        accepting = lexer.accepting(lstate)
        new_set, lstart = lp.finish_accepted(set_id, accepting)
        if new_set != DEAD_SET:  # a grammar lexeme, or a skip (nothing to record)
            real = _real_lexemes(lp, set_id, accepting)
            if real:
                spans.append(Span(start, end, real))
        start = end
        return new_set, lstart

    set_id, lstate, pending = lp.initial
    for piece, after in pieces:
        if isinstance(piece, frozenset):  # a special token: pending bytes end first
            if pending:
                set_id, lstate = finish(set_id, lstate, pos)
            elif lstate != 0 and lexer.accepts_lazy(lstate):
                set_id, lstate = finish(set_id, lstate, pos)
            seen: set[tuple[int, int]] = set()
            while True:
                if set_id == DEAD_SET:
                    raise MatcherError("captures: the input is not a valid prefix of the grammar")
                new_set = parser.scan(set_id, piece)
                if new_set != DEAD_SET:
                    spans.append(Span(pos, pos, frozenset(piece & parser.expected(set_id))))
                    set_id, lstate, pending = new_set, lp.lexer_start(new_set), False
                    start = pos
                    break
                if lstate == 0 or not lexer.accepting(lstate) or (set_id, lstate) in seen:
                    raise MatcherError("captures: the input is not a valid prefix of the grammar")
                seen.add((set_id, lstate))
                set_id, lstate = finish(set_id, lstate, pos)
        else:
            for byte in piece:
                if not pending and lstate != 0 and lexer.accepts_lazy(lstate):
                    set_id, lstate = finish(set_id, lstate, pos)
                seen = set()
                while True:
                    if set_id == DEAD_SET:
                        raise MatcherError(f"captures: byte {pos} does not continue the grammar")
                    nxt = lexer.next(lstate, byte) if lstate != 0 else 0
                    if nxt != 0:
                        break
                    if lstate == 0 or not lexer.accepting(lstate) or (set_id, lstate) in seen:
                        raise MatcherError(f"captures: byte {pos} does not continue the grammar")
                    seen.add((set_id, lstate))
                    set_id, lstate = finish(set_id, lstate, pos)
                pos += 1
                if lexer.accepts_lazy(nxt):
                    set_id, lstate = finish(set_id, nxt, pos)
                    if set_id == DEAD_SET:
                        raise MatcherError(f"captures: byte {pos - 1} does not continue the grammar")
                    pending = False
                else:
                    lstate, pending = nxt, True
        if after is not None:  # the matcher's own state (a spent budget may have capped it)
            set_id, lstate, pending = after
    if final:
        # as LexParser.is_accepting: the pending lexeme ends, then empty lexemes may
        seen = set()
        must_finish = pending
        while must_finish or not parser.is_accepting(set_id):
            if lstate == 0 or not lexer.accepting(lstate) or (set_id, lstate) in seen:
                raise MatcherError("captures: the input is not a complete sentence of the grammar")
            seen.add((set_id, lstate))
            set_id, lstate = finish(set_id, lstate, pos)
            if set_id == DEAD_SET:
                raise MatcherError("captures: the input is not a complete sentence of the grammar")
            must_finish = False
    return spans


def _real_lexemes(lp: LexParser, set_id: int, accepting: tuple[int, ...]) -> frozenset[int]:
    """The grammar lexemes (not skips) among ``accepting`` that the parser expects here."""
    expected = lp.parser.expected(set_id)
    return frozenset(
        loc for g in accepting for loc in lp.locals_of(g) if not lp.is_skip(loc) and loc in expected
    )


def capture_spans(lp: LexParser, data: bytes, pieces: Sequence[Piece], final: bool
                  ) -> list[tuple[int, int, str]]:
    """``(end, start, name)`` of every capture in ``data`` (the concatenated byte pieces, see
    :func:`lexeme_trace`), ordered by end, then start descending. ``final``: the input is
    complete (EOS was produced, or the text is whole)."""
    ir = lp.ir
    if not ir.has_captures:
        return []
    spans = lexeme_trace(lp, pieces, final)
    used_lexemes, completions = _parse(lp, spans, final)
    names = dict(ir.captures)
    out: list[tuple[int, int, str]] = []
    for k, lex in used_lexemes:
        lx = ir.lexemes[lex]
        if lx.capture is None and lx.stop_capture is None:
            continue
        sp = spans[k]
        value, tail = lx.split_tail(data[sp.start : sp.end], lp.store)
        if lx.capture is not None:
            out.append((sp.start + len(value), sp.start, lx.capture))
        if lx.stop_capture is not None:
            out.append((sp.end, sp.end - len(tail), lx.stop_capture))
    for nt, j, k in completions:
        name = names.get(nt)
        if name is None:
            continue
        if k > j:
            lo, hi = spans[j].start, spans[k - 1].end
        else:  # an empty completion: at the boundary before lexeme j
            lo = hi = spans[j].start if j < len(spans) else (spans[-1].end if spans else 0)
        out.append((hi, lo, name))
    out.sort(key=lambda t: (t[0], -t[1]))  # by end; outer rules after the inner ones
    return out


def captures(lp: LexParser, data: bytes, pieces: Sequence[Piece], final: bool) -> list[tuple[str, bytes]]:
    """``(name, bytes)`` of every capture, ordered as :func:`capture_spans`."""
    return [(name, data[lo:hi]) for hi, lo, name in capture_spans(lp, data, pieces, final)]


def _tables(ir) -> tuple:
    """``(dr_next, dr_lhs, rule_first_dr, rules_of, start_dr, accept_dr)``; dotted rule
    ``dr = rule_first_dr[r] + dot``, numbered as in the core."""
    dr_next: list[int | None] = []  # the symbol after the dot, None when complete
    dr_lhs: list[int] = []
    rule_first_dr: list[int] = []
    rules_of: dict[int, list[int]] = {}
    for rule in ir.rules:
        rule_first_dr.append(len(dr_next))
        rules_of.setdefault(rule.lhs, []).append(len(dr_next))
        for dot in range(len(rule.rhs) + 1):
            dr_next.append(rule.rhs[dot] if dot < len(rule.rhs) else None)
            dr_lhs.append(rule.lhs)
    start_dr = rules_of[ir.start][0]
    top = next(r for r in ir.rules if r.lhs == ir.start)
    return dr_next, dr_lhs, rule_first_dr, rules_of, start_dr, start_dr + len(top.rhs)


def _parse(lp: LexParser, spans: list[Span], final: bool
           ) -> tuple[set[tuple[int, int]], set[tuple[int, int, int]]]:
    """Positional Earley over ``spans``; returns the used ``(span, lexeme)`` pairs and the used
    completions ``(nonterminal, start, end)`` (positions are span indices)."""
    dr_next, dr_lhs, rule_first_dr, rules_of, start_dr, accept_dr = _tables(lp.ir)
    rule_ends: dict[int, list[int]] = {}  # nonterminal -> the completed item of each rule
    for rule, first in zip(lp.ir.rules, rule_first_dr):
        rule_ends.setdefault(rule.lhs, []).append(first + len(rule.rhs))
    n = len(spans)
    sets: list[set[tuple[int, int]]] = []
    # completed[k][nt] = origins j of completed nt items in set k
    completed: list[dict[int, set[int]]] = []
    kernel = {(start_dr, 0)}
    for k in range(n + 1):
        items = set(kernel)
        todo = list(kernel)
        done_here: dict[int, set[int]] = {}
        empty_done: set[int] = set()  # nonterminals completed with origin k
        predicted: set[int] = set()
        while todo:
            dr, origin = todo.pop()
            sym = dr_next[dr]
            if sym is None:  # complete: advance the items waiting for its lhs at the origin
                lhs = dr_lhs[dr]
                done_here.setdefault(lhs, set()).add(origin)
                waiting = sets[origin] if origin < k else items
                if origin == k:
                    empty_done.add(lhs)
                for wdr, worigin in list(waiting):
                    if dr_next[wdr] == lhs:
                        new = (wdr + 1, worigin)
                        if new not in items:
                            items.add(new)
                            todo.append(new)
            elif not is_lexeme(sym):
                if sym not in predicted:
                    predicted.add(sym)
                    for first in rules_of.get(sym, ()):
                        new = (first, k)
                        if new not in items:
                            items.add(new)
                            todo.append(new)
                if sym in empty_done:  # completed empty before this item arrived
                    new = (dr + 1, origin)
                    if new not in items:
                        items.add(new)
                        todo.append(new)
        sets.append(items)
        completed.append(done_here)
        if k == n:
            break
        lexemes = {lexeme_sym(i) for i in spans[k].lexemes}
        kernel = {(dr + 1, origin) for dr, origin in items if dr_next[dr] in lexemes}
        if not kernel:
            raise MatcherError(f"captures: lexeme {k} does not continue the parse")
    # backward: items taking part in a parse of the input
    if final:
        roots = [(accept_dr, 0)] if (accept_dr, 0) in sets[n] else []
        if not roots:
            raise MatcherError("captures: the input is not a complete sentence of the grammar")
    else:
        roots = list(sets[n])
    used_lexemes: set[tuple[int, int]] = set()
    used_completions: set[tuple[int, int, int]] = set()
    seen: set[tuple[int, int, int]] = set()
    stack = [(dr, origin, n) for dr, origin in roots]
    while stack:
        dr, origin, k = stack.pop()
        if (dr, origin, k) in seen:
            continue
        seen.add((dr, origin, k))
        if dr_next[dr] is None:
            used_completions.add((dr_lhs[dr], origin, k))
        if dr == 0 or dr_next[dr - 1] is None:
            continue  # dot at the start of its rule (the dotted rule before ends another)
        prev, sym = dr - 1, dr_next[dr - 1]
        if is_lexeme(sym):
            lex = lexeme_index(sym)
            if k > origin and (prev, origin) in sets[k - 1] and lex in spans[k - 1].lexemes:
                used_lexemes.add((k - 1, lex))
                stack.append((prev, origin, k - 1))
            continue
        for m in completed[k].get(sym, ()):
            if origin <= m <= k and (prev, origin) in sets[m]:
                # the completed items of sym in set k starting at m
                stack.extend((end, m, k) for end in rule_ends.get(sym, ()) if (end, m) in sets[k])
                stack.append((prev, origin, m))
    return used_lexemes, used_completions
