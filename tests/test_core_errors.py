"""Every error the compiled core raises arrives as a ``lexguide.errors`` class with its
location: a grammar's rule and symbol, a lexeme, a token, a byte, a parser set or lexer
state, a regex node, a buffer row. Each is also the builtin the core raised before its errors
were typed (``ValueError`` / ``IndexError``), so ``except ValueError`` still catches it.
"""

from __future__ import annotations

import numpy as np
import pytest

from lexguide import Grammar, Matcher, TokenizerInfo, _core
from lexguide.errors import (
    CoreArgumentError,
    CoreError,
    CoreGrammarError,
    CoreIndexError,
    CoreRegexError,
    CoreVocabularyError,
    GrammarError,
    LexguideError,
    LimitExceeded,
    MatcherError,
    TokenizerError,
    VocabFileError,
)

VOCAB = [b"<eos>", b"a", b"b", b"ab", b"1"]
INFO = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])


@pytest.fixture(scope="module")
def lp():
    """A lowered grammar's core parser."""
    return Grammar.from_regex("(ab)+").lexparser._core


def _raises(cls, where, fn, *args):
    with pytest.raises(cls) as info:
        fn(*args)
    e = info.value
    assert isinstance(e, CoreError) and isinstance(e, LexguideError), type(e)
    assert e.where == where
    if where:
        assert str(e).startswith(", ".join(f"{k} {v}" for k, v in where.items()))
    return e


def test_grammar_rules_name_the_rule_and_symbol():
    e = _raises(CoreGrammarError, {"rule": 1, "symbol": 7},
                _core.productive_rules, 2, [True], [(0, [-1]), (1, [0, 7])])
    assert isinstance(e, GrammarError) and isinstance(e, ValueError)
    assert e.detail == "nonterminal out of range" and e.line is None and e.excerpt == ""
    _raises(CoreGrammarError, {"rule": 0, "symbol": -3}, _core.productive_rules, 1, [True], [(0, [-3])])
    _raises(CoreGrammarError, {"rule": 0, "symbol": 4}, _core.productive_rules, 2, [], [(4, [])])
    _raises(CoreGrammarError, {"rule": 0}, _core.productive_rules, 1, [], [(0, [2**40])])


def test_lowering_a_bad_grammar():
    gen = _core.generation()
    lexemes = [(0, 0, False, -1, False, False)]  # regex node 0 exists in every store
    # the start symbol has no rule: the core's own check, typed
    with pytest.raises(CoreGrammarError, match="start symbol"):
        _core.LexParser(gen, 2, 1, [(0, [-1])], lexemes, [-1], False, False)
    _raises(CoreGrammarError, {"rule": 0, "symbol": -2},
            _core.LexParser, gen, 1, 0, [(0, [-2])], lexemes, [-1], False, False)
    _raises(CoreGrammarError, {"lexeme": 0, "class": 3},
            _core.LexParser, gen, 1, 0, [(0, [-1])], [(0, 3, False, -1, False, False)], [-1],
            False, False)
    unknown = (gen.tag << 32) | 2**31  # an id of this generation's, naming no node
    _raises(CoreIndexError, {"node": 2**31}, _core.LexParser, gen, 1, 0, [(0, [-1])],
            [(unknown, 0, False, -1, False, False)], [-1], False, False)
    _raises(CoreIndexError, {"node": 2**31}, _core.LexParser, gen, 1, 0, [(0, [-1])],
            lexemes, [unknown], False, False)


def test_parser_calls_name_the_state_byte_and_lexeme(lp):
    st = tuple(lp.initial)
    e = _raises(CoreIndexError, {"set": 10**6}, lp.advance_byte, (10**6, 0, False), 97)
    assert isinstance(e, IndexError) and isinstance(e, MatcherError)
    _raises(CoreIndexError, {"state": 10**6}, lp.lexer_next, 10**6, 97)
    e = _raises(CoreArgumentError, {"byte": 300}, lp.advance_byte, st, 300)
    assert isinstance(e, ValueError) and isinstance(e, MatcherError)
    _raises(CoreArgumentError, {"byte": 256}, lp.lexer_next, st[1], 256)
    _raises(CoreIndexError, {"lexeme": 99}, lp.advance_token_lexeme, st, [0, 99])
    _raises(CoreIndexError, {"lexeme": -1}, lp.scan, st[0], [-1])
    _raises(CoreIndexError, {"lexeme": 5}, lp.lexer_start, st[0], 0, [5])
    _raises(CoreIndexError, {"set": -1}, lp.advance_byte, (-1, 0, False), 97)


def test_regex_nodes():
    gen = _core.generation()
    index = gen.n_nodes + 10
    unknown = (gen.tag << 32) | index  # an id of this generation's, naming no node
    _raises(CoreIndexError, {"node": 2**31}, gen.nonempty, (gen.tag << 32) | 2**31)
    for call, args in [(gen.concat, ([0, unknown],)), (gen.alt, ([unknown],)),
                       (gen.intersect, ([1, unknown],)), (gen.complement, (unknown,)),
                       (gen.star, (unknown,)), (gen.repeat, (unknown, 1, 2)),
                       (gen.derivative, (unknown, 97)), (gen.matches, (unknown, b"a")),
                       (gen.kind, (unknown,)), (gen.args, (unknown,)),
                       (gen.byte_partition, (unknown,)), (gen.nonempty_many, ([0, unknown],))]:
        _raises(CoreIndexError, {"node": index}, call, *args)
    with pytest.raises(CoreRegexError, match="a byte set is 32 bytes") as info:
        gen.bytes(b"x")
    assert isinstance(info.value, ValueError) and isinstance(info.value, GrammarError)
    _raises(CoreRegexError, {}, gen.repeat, 1, 5, 2)
    _raises(CoreRegexError, {}, gen.repeat, 1, -3, 2)
    _raises(CoreRegexError, {}, gen.repeat, 1, 0, 2**33)
    _raises(CoreArgumentError, {"byte": 256}, gen.derivative, 0, 256)


def test_regex_limits_are_the_cores():
    from lexguide.regex import nodes as rx

    x = rx.repeat(rx.literal(b"ab"), 2, 3)
    with pytest.raises(LimitExceeded) as info:
        rx.repeat(x, 10**5, None)  # nested counters: 3 * 10**5 copies
    assert info.value.limit == "max_repeat" and info.value.value == rx.LIMITS["max_repeat"]
    old = rx.LIMITS["max_repeat"]
    rx.LIMITS["max_repeat"] = 10**6
    try:
        y = rx.repeat(x, 10**5, None)
        assert rx.kind(y) == rx.K_REPEAT and not rx.matches(y, b"ab" * 8)
    finally:
        rx.LIMITS["max_repeat"] = old


def test_vocabulary_errors_name_the_token(tmp_path):
    e = _raises(CoreVocabularyError, {"token": 1}, _core.TokenBytes, (b"a", b"x" * 5000))
    assert isinstance(e, TokenizerError) and isinstance(e, ValueError)
    with pytest.raises(TokenizerError, match="token 1 is longer than 4096 bytes"):
        TokenizerInfo.from_token_bytes([b"a", b"x" * 5000], eos_ids=[0])
    tb = _core.TokenBytes((b"a", b"b"))
    with pytest.raises(CoreVocabularyError, match="eos token id outside the vocabulary"):
        _core.Vocab(tb, [7], [])
    _raises(CoreVocabularyError, {}, _core.Vocab.load, str(tmp_path / "v"), tb, [0], [], b"short")
    with pytest.raises(VocabFileError, match="not-there") as info:
        _core.Vocab.load(str(tmp_path / "not-there"), tb, [0], [], bytes(32))
    assert isinstance(info.value, TokenizerError) and _core.VocabFileError is VocabFileError


def test_mask_buffers_name_the_row():
    ms = [Matcher(Grammar.from_regex("(ab)+"), INFO) for _ in range(2)]
    items = [(m._engine._core, m.state) for m in ms]
    _raises(CoreArgumentError, {"rows": 1}, _core.fill_masks, items,
            np.zeros((1, INFO.n_words), dtype=np.uint32))
    _raises(CoreArgumentError, {"row": 0}, _core.fill_masks, items,
            np.zeros((2, INFO.n_words + 1), dtype=np.uint32))
    _raises(CoreArgumentError, {"length": 3}, ms[0]._engine._core.fill, ms[0].state,
            np.zeros(3, dtype=np.uint32))
    _raises(CoreArgumentError, {"row": 5}, _core.mask_logits, np.zeros((2, 8), dtype=np.float32),
            np.zeros((1, 1), dtype=np.uint32), [5])
    _raises(CoreArgumentError, {}, _core.mask_logits, np.zeros((2, 8), dtype=np.float64),
            np.zeros((2, 1), dtype=np.uint32), [])


def test_mask_engine_token_lexemes(lp):
    vocab = INFO._vocab
    _raises(CoreGrammarError, {"lexeme": 0}, _core.MaskEngine, lp, vocab, [(0, [1])])
    _raises(CoreGrammarError, {"lexeme": 7}, _core.MaskEngine, lp, vocab, [(7, [1])])
    g = Grammar.from_lark('%llguidance {}\nstart: <[1]> "a"\n')
    tok = sorted(g.lexparser.token_lexemes)
    _raises(CoreVocabularyError, {"lexeme": tok[0], "token": 99}, _core.MaskEngine,
            g.lexparser._core, vocab, [(tok[0], [99])])
