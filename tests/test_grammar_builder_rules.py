"""GrammarBuilder's rule paths: ``rule`` deduplicates against every rule, whichever helper
added it; ``new_rules`` (a caller's own fresh nonterminal) gives the rules ``rule`` would."""

from lexguide.grammar.ir import GrammarBuilder, Rule


def test_rule_deduplicates_against_helper_rules():
    b = GrammarBuilder()
    x = b.nonterminal("x")
    b.rule(x, ())
    seq = b.seq([x, x], "pair")
    alt = b.alt_tuples(((x,), (seq,)), "either")
    star = b.star(x)
    n = len(b._rules)
    b.rule(seq, [x, x])  # each already there, added by a helper
    b.rule(alt, [seq])
    b.rule(star, [])
    b.rule(x, [])
    assert len(b._rules) == n
    b.rule(alt, [x, seq])  # a new one is kept
    assert b._rules[-1] == Rule(alt, (x, seq))


def test_new_rules_match_rule():
    def build(fresh: bool) -> tuple:
        b = GrammarBuilder()
        row = b.nonterminal("row")
        if fresh:
            b.new_rules(row, ((), (-1, row)))
        else:
            b.rule(row, ())
            b.rule(row, (-1, row))
        alts = ((-2, row), (row,), (-2, row))  # a repeated alternative is kept once
        top = b.alt_tuples(alts, "top")
        one = b.alt_tuples(((top,),))
        return top, one, tuple(b._names), tuple(b._rules)

    assert build(True) == build(False)
    top, one, _, rules = build(True)
    assert one == top
    assert [r.rhs for r in rules if r.lhs == top] == [(-2, 0), (0,)]


def test_new_nonterminals_and_add_new_rules():
    b = GrammarBuilder()
    b.nonterminal("before")
    first = b.new_nonterminals("row", 3)
    assert first == 1 and b._names == ["before", "row", "row", "row"]
    b.add_new_rules([(first, (-1,)), (first + 1, (first,)), (first + 2, ())])
    assert b._rules == [Rule(1, (-1,)), Rule(2, (1,)), Rule(3, ())]
    assert all(type(r) is Rule for r in b._rules)
    b.rule(first + 1, [first])  # already there
    assert len(b._rules) == 3
