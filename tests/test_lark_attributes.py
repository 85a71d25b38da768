"""Lark rule attributes ``max_tokens=N`` and ``stop=V`` (llguidance's lexeme options).

Byte-level acceptance goes through ``Grammar.validate``; token budgets exist only per token, so
they are driven through a :class:`Matcher` over a synthetic vocabulary (one token per printable
byte plus a few multi-byte words) and, when installed, the SmolLM2 tokenizer. Every step checks
that the mask and ``consume`` agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from lexguide import Grammar, Matcher, TokenizerInfo
from lexguide.errors import GrammarError, TokenRejected
from lexguide.regex import nodes as rx

WORDS = [b"ab", b"abc", b"cd", b"a!", b"xa", b"<end>", b"o<e", b"nd>"]
TOKENS = [bytes([c]) for c in range(32, 127)] + WORDS + [b""]
EOS = len(TOKENS) - 1
ID = {t: i for i, t in enumerate(TOKENS)}


@pytest.fixture(scope="module")
def info():
    return TokenizerInfo.from_token_bytes(TOKENS, eos_ids=[EOS])


def allowed(m: Matcher) -> set[bytes | None]:
    """The mask as token texts (``None`` for EOS)."""
    mask = m.compute_mask()
    ids = [t for t in range(len(TOKENS)) if mask[t >> 5] >> (t & 31) & 1]
    return {None if t == EOS else TOKENS[t] for t in ids}


def step(m: Matcher, tok: bytes | None) -> bool:
    """Consume one token; checks the mask agreed. False if rejected."""
    t = EOS if tok is None else ID[tok]
    in_mask = bool(m.compute_mask()[t >> 5] >> (t & 31) & 1)
    try:
        m.consume(t)
    except TokenRejected:
        assert not in_mask, f"{tok!r} in the mask but rejected"
        return False
    assert in_mask, f"{tok!r} consumed but not in the mask"
    return True


def run(grammar: Grammar, info, toks: list[bytes | None]) -> str:
    """'accept' (EOS allowed after the tokens), 'prefix', or 'reject'."""
    m = Matcher(grammar, info)
    for tok in toks:
        if not step(m, tok):
            return "reject"
    return "accept" if None in allowed(m) else "prefix"


# -- max_tokens ---------------------------------------------------------------------------
SPEC_MAX = Grammar.from_lark("start: foo\nfoo[max_tokens=2]: /[a-z]+/")


@pytest.mark.parametrize(
    "toks,result",
    [
        ([b"a", b"b"], "accept"),  # spec §17: with one token per byte ab ✓
        ([b"a", b"b", b"c"], "reject"),  # abc ✗
        ([b"a"], "accept"),
        ([b"abc"], "accept"),  # one token holding three bytes counts once
        ([b"ab", b"cd"], "accept"),
        ([b"ab", b"cd", b"a"], "reject"),
    ],
)
def test_max_tokens_counts_tokens_not_bytes(info, toks, result):
    assert run(SPEC_MAX, info, toks) == result


def test_max_tokens_is_not_enforced_at_byte_level():
    # no tokens exist in ``validate``: the budget cannot apply
    assert SPEC_MAX.validate("abcdef")


def test_spent_budget_allows_only_tokens_ending_the_lexeme_at_their_first_byte(info):
    g = Grammar.from_lark('start: foo "!"\nfoo[max_tokens=2]: /[a-z]+/')
    m = Matcher(g, info)
    assert step(m, b"a") and step(m, b"b")
    assert allowed(m) == {b"!"}  # not "a!" (its "a" would be a third token of foo)
    assert run(g, info, [b"a", b"a!"]) == "accept"  # "a!" ends foo inside its second token
    assert run(g, info, [b"a", b"b", b"a!"]) == "reject"


def test_spent_budget_at_an_accepting_end_allows_eos(info):
    m = Matcher(SPEC_MAX, info)
    assert step(m, b"ab") and step(m, b"c")
    assert allowed(m) == {None}
    assert m.is_accepting() and m.is_stopped()


def test_last_token_must_leave_the_lexeme_able_to_end(info):
    """With one token left, tokens after which the lexeme could neither go on nor end are
    masked out (the look-ahead of the budget)."""
    g = Grammar.from_lark('start: foo "!"\nfoo[max_tokens=2]: /[a-z]{3}/')
    m = Matcher(g, info)
    assert step(m, b"a")
    assert allowed(m) == {b"ab", b"cd", b"xa"}  # "b" would leave "ab" with no token left
    assert step(m, b"cd")
    assert allowed(m) == {b"!"}
    # max_tokens=1: the first token must hold the whole lexeme
    g1 = Grammar.from_lark('start: foo "!"\nfoo[max_tokens=1]: /[a-z]{3}/')
    assert {t for t in allowed(Matcher(g1, info)) if t and t[0:1].isalpha()} == {b"abc"}


def test_budget_does_not_cut_other_lexemes_alive_at_the_same_bytes(info):
    g = Grammar.from_lark("start: foo | BAR\nfoo[max_tokens=2]: /[a-z]+/\nBAR: /[a-z]+X/")
    assert run(g, info, [b"a", b"b"]) == "accept"
    assert run(g, info, [b"a", b"b", b"c"]) == "prefix"  # foo is spent, BAR goes on
    assert run(g, info, [b"a", b"b", b"c", b"X"]) == "accept"


def test_budget_restarts_with_each_lexeme(info):
    g = Grammar.from_lark('start: foo ("," foo)*\nfoo[max_tokens=2]: /[a-z]+/')
    assert run(g, info, [b"a", b"b", b",", b"c", b"d", b",", b"ab", b"cd"]) == "accept"
    assert run(g, info, [b"a", b"b", b",", b"c", b"d", b"a"]) == "reject"


def test_max_tokens_zero_makes_the_rule_epsilon(info):
    g = Grammar.from_lark('start: "x" foo "y"\nfoo[max_tokens=0]: /[a-z]+/')
    assert g.validate("xy") and not g.validate("xay")
    assert run(g, info, [b"x", b"y"]) == "accept"


def test_max_tokens_with_a_lazy_stop(info):
    g = Grammar.from_lark('start: foo "!"\nfoo[max_tokens=3, stop="."]: /[a-z]*/')
    assert run(g, info, [b"a", b"b", b".", b"!"]) == "accept"
    assert run(g, info, [b"a", b"b", b"c", b"."]) == "reject"  # the stop is a 4th token


def test_rollback_clone_and_reset_keep_the_token_count(info):
    m = Matcher(SPEC_MAX, info)
    assert step(m, b"a") and step(m, b"b")
    assert not step(m, b"c")  # budget spent
    m.rollback(1)  # back to one token inside foo
    assert b"c" in allowed(m)
    twin = m.clone()
    assert step(twin, b"c") and not step(twin, b"d")
    assert step(m, b"cd") and allowed(m) == {None}  # the original kept its own count
    twin.rollback(2)
    assert twin.n_consumed == 0
    assert step(twin, b"a") and step(twin, b"b") and not step(twin, b"c")
    m.reset()
    assert step(m, b"ab") and step(m, b"c") and not step(m, b"d")
    m.rollback(2)
    assert step(m, b"a") and step(m, b"b") and not step(m, b"a")
    m.consume(EOS)
    m.rollback(1)  # EOS rolled back: the count is still two
    assert not step(m, b"a") and step(m, None)


def test_budget_states_do_not_leak_into_unbudgeted_grammars(info):
    """The capped lexer state is a state of its own: a grammar with the same regex and no
    budget, compiled in the same process and tokenizer, keeps extending the lexeme."""
    budgeted = Grammar.from_lark('start: foo "!"\nfoo[max_tokens=2]: /[a-z]+/')
    free = Grammar.from_lark('start: foo "!"\nfoo: /[a-z]+/')
    assert run(budgeted, info, [b"a", b"b", b"c"]) == "reject"
    assert run(free, info, [b"a", b"b", b"c", b"d", b"!"]) == "accept"
    assert run(budgeted, info, [b"a", b"b", b"!"]) == "accept"
    # the same matcher state reached again gives the same (cached) mask as a fresh matcher
    m1, m2 = Matcher(budgeted, info), Matcher(budgeted, info)
    for t in [b"a", b"b"]:
        step(m1, t)
        step(m2, t)
    assert np.array_equal(m1.compute_mask(), m2.compute_mask())


def test_token_that_starts_a_budgeted_lexeme_it_cannot_finish_is_a_dead_end(info):
    """Documented limit: the look-ahead covers tokens inside the lexeme being read, not a
    lexeme that starts inside a token ending another one."""
    g = Grammar.from_lark('start: "x" foo\nfoo[max_tokens=1]: /[a-z]{3}/')
    m = Matcher(g, info)
    assert step(m, b"xa")  # "x", then foo's first byte: its one token is spent
    assert allowed(m) == set()
    assert m.is_stopped() and not m.is_accepting()


def test_forced_tokens_respect_the_budget(info):
    g = Grammar.from_lark('start: foo "!abc"\nfoo[max_tokens=1]: /[a-z]+/')
    m = Matcher(g, info)
    assert step(m, b"a")
    forced = m.forced_tokens()
    assert b"".join(TOKENS[t] for t in forced) in (b"!", b"!a", b"!ab")
    for t in forced:
        m.consume(t)


# -- stop= --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "grammar,good,bad",
    [
        # spec §9: the body is lazy and must be followed by the stop text
        ('start: foo\nfoo[stop="<end>"]: /.*/', ["foo<end>", "<end>"],
         ["foo", "foo<end>bar<end>", "foo<end><end>"]),
        ('start: foo "x"\nfoo[stop=/[.!]/]: /[a-z]+/', ["abc!x", "a.x"], ["abcx", "ab!!x", "!x"]),
        ('start: foo\nfoo[stop=END]: /[a-z]*/\nEND: "<end>"', ["ab<end>", "<end>"], ["ab<en"]),
        ('start: foo\nfoo[stop=".", lazy]: /[0-9]+/', ["1.", "12."], ["1", "1.2"]),  # stop=, lazy: ok
        ('start: foo\nfoo[stop=/[.!]/, stop_capture="s"]: /[a-z]+/', ["abc!"], ["abc"]),
    ],
)  # fmt: skip
def test_stop_validate(grammar, good, bad):
    g = Grammar.from_lark(grammar)
    for s in good:
        assert g.validate(s), s
    for s in bad:
        assert not g.validate(s), s


def test_stop_text_is_marked_hidden_in_the_ir():
    g = Grammar.from_lark('start: foo bar\nfoo[stop="<end>"]: /.*/\nbar[suffix="!"]: /[a-z]+/')
    foo = next(lx for lx in g.ir.lexemes if lx.name == "foo")
    bar = next(lx for lx in g.ir.lexemes if lx.name == "bar")
    assert foo.lazy and rx.matches(foo.rx, b"abc<end>") and not rx.matches(foo.rx, b"abc")
    assert foo.split_stop(b"abc<end>") == (b"abc", b"<end>")
    assert foo.split_stop(b"<end>") == (b"", b"<end>")
    assert bar.stop_rx is None and bar.split_stop(b"ab!") == (b"ab!", b"")  # suffix is visible


def test_stop_and_suffix_with_the_same_text_are_different_lexemes():
    g = Grammar.from_lark('start: a | b\na[stop="!"]: /[a-z]+/\nb[suffix="!"]: /[a-z]+/')
    named = {lx.name: lx for lx in g.ir.lexemes}
    assert named["a"].stop_rx is not None and named["b"].stop_rx is None
    assert g.validate("ab!")


def test_stop_token_by_token(info):
    g = Grammar.from_lark('start: foo "!"\nfoo[stop="<end>"]: /[a-z ]*/')
    assert run(g, info, [b"f", b"o", b"<end>", b"!"]) == "accept"
    assert run(g, info, [b"f", b"o<e", b"nd>", b"!"]) == "accept"  # stop split across tokens
    assert run(g, info, [b"f", b"o", b"!"]) == "reject"
    m = Matcher(g, info)
    assert step(m, b"<end>")
    assert allowed(m) == {b"!"}  # lazy: the lexeme ended at the first stop


def test_stop_empty_string_ends_only_at_eos(info):
    g = Grammar.from_lark('start: foo\nfoo[stop=""]: /[a-z]*/')
    assert g.validate("abc") and g.validate("") and not g.validate("ab1")
    m = Matcher(g, info)
    assert None in allowed(m)
    assert step(m, b"a") and step(m, b"b")
    assert None in allowed(m) and b"!" not in allowed(m)
    assert step(m, None)  # EOS ends foo and the grammar
    assert m.is_accepting() and m.is_stopped()


def test_stop_empty_string_eos_is_a_terminator_mid_grammar(info):
    """``stop=""``: the EOS token is the terminator, consumed like a special token; the grammar
    goes on after it (byte-level validation sees EOS only at the end of the input)."""
    g = Grammar.from_lark('start: foo "x"\nfoo[stop=""]: /[a-z]*/')
    m = Matcher(g, info)
    assert step(m, b"a") and step(m, b"b")
    letters = {bytes([c]) for c in range(ord("a"), ord("z") + 1)}
    assert allowed(m) == letters | {b"ab", b"abc", b"cd", b"xa", None}  # "x" is foo's text
    assert step(m, None) and not m.is_stopped() and not m.is_accepting()
    assert allowed(m) == {b"x"}
    assert step(m, b"x") and None in allowed(m)
    assert not g.validate("abx")


def test_stop_eos_rollback(info):
    g = Grammar.from_lark('start: foo "x"\nfoo[stop=""]: /[a-z]*/')
    m = Matcher(g, info)
    assert step(m, b"a") and step(m, None) and step(m, b"x")
    m.rollback(2)
    assert None in allowed(m) and b"b" in allowed(m)


# -- errors (spec §9, §15) -----------------------------------------------------------------
@pytest.mark.parametrize(
    "grammar,message",
    [
        ('start: foo\nfoo[suffix="a", stop="b"]: "x"', "Cannot have multiple stop/suffix"),
        ('start: foo\nfoo[stop="a", suffix="b"]: "x"', "Cannot have multiple stop/suffix"),
        ('start: foo\nfoo[lazy, stop="x"]: "a"', "Cannot have multiple stop/suffix"),
        ('start: foo\nfoo[stop="a", stop="b"]: "x"', "Cannot have multiple stop/suffix"),
        ('start: foo\nfoo[stop_capture="x"]: "a"', "stop_capture_name requires stop="),
        ('start: foo\nfoo[stop="b"]: "x" bar\nbar: "y"', "unknown name"),
        ('start: foo\nfoo[max_tokens=3]: "a" bar\nbar: "x"', "only supported on TERMINALS"),
        ('start: foo\nfoo[max_tokens=3]: %json {"type": "string"}', "not supported yet"),
        ('start: foo\nfoo[max_tokens=-1]: "a"', "max_tokens must be >= 0"),
        ('start: foo\nfoo[stop=<|x|>]: "a"', "special tokens"),
    ],
)
def test_attribute_errors(grammar, message):
    with pytest.raises(GrammarError, match=message):
        Grammar.from_lark(grammar)


# -- the real tokenizer ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def smol_info(smollm2_file):
    from lexguide import Tokenizer

    return TokenizerInfo.from_tokenizer(Tokenizer.from_gguf(smollm2_file))


def _ids_of(mask: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return np.flatnonzero(bits)


def test_max_tokens_with_smollm2(smol_info):
    info = smol_info
    g = Grammar.from_lark('start: foo "."\nfoo[max_tokens=3]: /[a-z ]+/')
    ids = info.encode(" the cat sat on the mat")
    assert len(ids) > 3
    m = Matcher(g, info)
    for t in ids[:3]:
        m.consume(t)
    with pytest.raises(TokenRejected):
        m.consume(ids[3])
    allowed_ids = _ids_of(m.compute_mask())
    texts = [info.token_bytes[t] for t in allowed_ids if t < info.vocab_size]
    assert texts and all(t.startswith(b".") for t in texts)
    m.consume(info.encode(".")[0])
    assert m.is_accepting()
    # a fresh matcher: the same three tokens, then rolled back to two, may go on
    m2 = Matcher(g, info)
    m2.consume_tokens(ids[:3])
    m2.rollback(1)
    m2.consume(ids[2])
    assert not m2.is_allowed(ids[3])


def test_stop_with_smollm2(smol_info):
    info = smol_info
    g = Grammar.from_lark('start: foo\nfoo[stop="</a>"]: /[^<]*/')
    m = Matcher(g, info)
    m.consume_tokens(info.encode("Hello world</a>"))
    assert m.is_accepting() and m.is_stopped()
    assert g.validate("Hello world</a>") and not g.validate("Hello world")
    eos = next(iter(info.eos_ids))
    g2 = Grammar.from_lark('start: foo\nfoo[stop=""]: /[^<]*/')
    m2 = Matcher(g2, info)
    m2.consume_tokens(info.encode("Hello world"))
    assert m2.is_allowed(eos)
    m2.consume(eos)
    assert m2.is_accepting()
