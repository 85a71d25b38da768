"""The matcher of the compiled core (``csrc/engine/matcher.h``) behind ``lexguide.Matcher``.

The oracle is :class:`Reference`, a brute-force matcher written here: it steps every token
byte by byte through ``LexParser.advance_byte``, applies token budgets itself, and computes a
mask by trying every token of the (small) vocabulary. Random walks of consumes, rejections,
rollbacks, clones and resets compare the two after every step.
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from lexguide import Grammar, Matcher, TokenizerInfo
from lexguide.engine.lexparser import ParseState
from lexguide.engine.matcher import MAX_FORCED_BYTES, fill_masks
from lexguide.errors import MatcherError, TokenRejected

EOS = 0
VOCAB = [b"</s>", b"a", b"b", b"c", b"ab", b"abc", b"ba", b"cab", b"x", b"xa", b"1", b"12", b"0",
         b",", b", ", b" ", b"a,", b"b, ", b"1,", b",x", b"a,1", b"aa", b"bcb", b"xx", b"q", b"qa",
         b"aq", b"qabq", b"bq,"]
INFO = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[EOS])
# three budgeted lexemes (one that cannot end inside: its last token must close it), a plain
# one, and tokens that cross lexeme ends
BUDGETS = Grammar.from_lark(
    'start: item ("," " "? item)*\n'
    "item: word | tag | quoted | NUM\n"
    "word[max_tokens=2]: /[a-c]+/\n"
    "tag[max_tokens=1]: /x[a-c]*/\n"
    "quoted[max_tokens=3]: /q[a-c]+q/\n"
    "NUM: /[0-9]+/\n")
PLAIN = Grammar.from_lark('start: "x" WORD ("," " "? (WORD | NUM))*\nWORD: /[a-c]+/\nNUM: /[0-9]+/')
# special tokens: a separator that is a control token, and a token set of ordinary tokens
S_VOCAB = VOCAB + [b"<sep>"]
S_INFO = TokenizerInfo.from_token_bytes(S_VOCAB, eos_ids=[EOS], special_ids=[len(VOCAB)],
                                        special_names={"<sep>": len(VOCAB)})
SPECIAL = Grammar.from_lark(
    'start: item (("," | <sep>) item)* <[10,11]>?\n'
    "item: word | NUM\n"
    "word[max_tokens=2]: /[a-c]+/\n"
    "NUM: /[0-9]+/\n")
GRAMMARS = {"budgets": (BUDGETS, INFO), "plain": (PLAIN, INFO), "special": (SPECIAL, S_INFO)}


def _ids(mask: np.ndarray, n: int = len(VOCAB)) -> list[int]:
    """The token ids ``mask`` allows among the first ``n``."""
    return np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:n]).tolist()


class Reference:
    """A brute-force matcher: bytes through ``lp.advance_byte``, budgets applied per token,
    special-token lexemes through ``lp.advance_token_lexeme``, masks by trying every token."""

    def __init__(self, grammar: Grammar, info: TokenizerInfo) -> None:
        self.lp = grammar.lexparser
        self.info = info
        self.token_lexemes = Matcher(grammar, info)._engine.token_lexemes_of
        self.budgets = self.lp.budgets
        self.history: list[tuple[ParseState, int]] = [(self.lp.initial, 0)]
        self.tokens: list[int] = []
        self.stopped = False

    def clone(self) -> Reference:
        twin = Reference.__new__(Reference)
        twin.__dict__.update(self.__dict__)
        twin.history, twin.tokens = list(self.history), list(self.tokens)
        return twin

    @property
    def state(self) -> ParseState:
        return self.history[-1][0]

    def _cap(self, state: ParseState, count: int) -> ParseState:
        """``state`` with the lexemes whose budget ``count`` spent unable to take more bytes."""
        if not state.pending or state.lexer_state == 0:
            return state
        lexer = self.lp.lexer
        spent = [g for g in lexer.alive_lexemes(state.lexer_state)
                 if g in self.budgets and self.budgets[g] <= count]
        if not spent:
            return state
        return ParseState(state.set_id, lexer.without_extensions(state.lexer_state, spent), True)

    def _next(self, t: int) -> tuple[ParseState, int] | None:
        state, count = self.history[-1]
        data = self.info.token_bytes[t]
        lexemes, special = self.token_lexemes(t), t in self.info.special_ids
        if lexemes or special or not data:  # a whole token: its lexemes, else its bytes
            nxt = self.lp.advance_token_lexeme(state, lexemes) if lexemes else None
            if nxt is None and not special:
                nxt = self.lp.advance_bytes(state, data)
            if nxt is None:
                return None
            c = count if nxt.pending and nxt == state else 0
            return self._cap(nxt, c), c
        lexer = self.lp.lexer
        same = True  # every byte extended the lexeme being read
        for b in data:
            if same and not (state.pending and lexer.next(state.lexer_state, b) != 0):
                same = False
            state = self.lp.advance_byte(state, b)
            if state is None:
                return None
        if not state.pending:
            return state, 0
        c = count + 1 if same else 1
        return self._cap(state, c), c

    def _stays_inside(self, lexer_state: int, data: bytes) -> int | None:
        """The lexer state a token ends in when its bytes stay inside the lexeme, else None."""
        lexer, s = self.lp.lexer, lexer_state
        for b in data:
            s = lexer.next(s, b)
            if s == 0 or lexer.accepts_lazy(s):
                return None
        return s

    def allowed(self) -> list[int]:
        if self.stopped:
            return []
        state, count = self.history[-1]
        count = count if state.pending else 0
        lexer = self.lp.lexer
        last = state.lexer_state != 0 and any(
            self.budgets.get(g) == count + 1 for g in lexer.alive_lexemes(state.lexer_state))
        out = []
        for t, data in enumerate(self.info.token_bytes):
            if t in self.info.eos_ids:
                if self.lp.is_accepting(state):
                    out.append(t)
                continue
            if self._next(t) is None:
                continue
            if last and data and t not in self.info.special_ids:
                # the last token of a budget may not leave the lexeme unable to end
                end = self._stays_inside(state.lexer_state, data)
                if end is not None and self._cap(ParseState(state.set_id, end, True),
                                                 count + 1).lexer_state == 0:
                    continue
            out.append(t)
        return out

    def consume(self, t: int) -> bool:
        if self.stopped or t not in self.allowed():
            return False
        nxt = self._next(t)
        if nxt is None:
            self.stopped = True  # EOS (allowed only when accepting)
            return True
        self.history.append(nxt)
        self.tokens.append(t)
        return True

    def rollback(self, n: int) -> None:
        if n and self.stopped:
            self.stopped, n = False, n - 1
        if n:
            del self.history[-n:], self.tokens[-n:]

    def n_consumed(self) -> int:
        return len(self.tokens) + self.stopped

    def forced_bytes(self) -> bytes:
        if self.stopped:
            return b""
        state, out = self.state, bytearray()
        while (len(out) < MAX_FORCED_BYTES and not self.lp.is_accepting(state)
               and not self.lp.expected_token_lexemes(state)):
            allowed = np.flatnonzero(self.lp.allowed_bytes(state))
            if len(allowed) != 1:
                break
            out.append(int(allowed[0]))
            state = self.lp.advance_byte(state, int(allowed[0]))
        return bytes(out)


def _same(m: Matcher, ref: Reference) -> None:
    assert _ids(m.compute_mask(), len(ref.info.token_bytes)) == ref.allowed()
    assert m.state == ref.state
    assert m.n_consumed == ref.n_consumed()
    assert m._tokens == ref.tokens
    assert m.is_accepting() == (ref.stopped or ref.lp.is_accepting(ref.state))
    assert m.is_stopped() == (ref.stopped or not ref.lp.can_continue(ref.state))
    assert m.forced_bytes() == ref.forced_bytes()


@pytest.mark.parametrize("name", GRAMMARS)
@pytest.mark.parametrize("seed", range(8))
def test_random_walk_equals_the_brute_force_reference(name, seed):
    grammar, info = GRAMMARS[name]
    vocab = info.token_bytes
    rng = random.Random(seed)
    m, ref = Matcher(grammar, info), Reference(grammar, info)
    _same(m, ref)
    for _ in range(120):
        op = rng.random()
        allowed = ref.allowed()
        if op < 0.6 and allowed:
            t = rng.choice(allowed)
            m.consume(t)
            assert ref.consume(t)
        elif op < 0.75:
            t = rng.randrange(len(vocab))
            if t in allowed:
                continue
            before = (m.state, m.n_consumed, m._tokens)
            with pytest.raises(TokenRejected):
                m.consume(t)
            assert (m.state, m.n_consumed, m._tokens) == before
        elif op < 0.87:
            k = rng.randint(0, m.n_consumed)
            m.rollback(k)
            ref.rollback(k)
        elif op < 0.95:
            twin, twin_ref = m.clone(), ref.clone()
            if twin_ref.allowed():  # the clone moves on; the original must not
                t = rng.choice(twin_ref.allowed())
                twin.consume(t)
                twin_ref.consume(t)
                _same(twin, twin_ref)
        else:
            m.reset()
            ref.rollback(ref.n_consumed())
        _same(m, ref)


def test_clones_are_independent():
    m = Matcher(BUDGETS, INFO)
    m.consume_tokens([1, 2])  # "a" "b": the word's budget of 2 is spent
    twin = m.clone()
    twin.consume(13)  # ","
    twin.consume(10)  # "1"
    assert m.n_consumed == 2 and twin.n_consumed == 4
    assert m._tokens == [1, 2] and twin._tokens == [1, 2, 13, 10]
    m.rollback(2)
    assert twin._tokens == [1, 2, 13, 10] and twin.state != m.state
    twin.reset()
    assert twin.n_consumed == 0 and m.n_consumed == 0 and twin.state == m.state


def test_rollback_across_a_spent_budget_and_eos():
    m = Matcher(BUDGETS, INFO)
    start = _ids(m.compute_mask())
    m.consume(1)  # "a": one token of the word's two
    one_left = _ids(m.compute_mask())
    m.consume(1)  # "aa" so far: the budget is spent, the word must end
    spent = _ids(m.compute_mask())
    assert 1 in one_left and 1 not in spent and 13 in spent and EOS in spent
    with pytest.raises(TokenRejected):
        m.consume(2)  # "b" would be a third token of the word
    m.consume(EOS)
    assert m.n_consumed == 3 and m.is_stopped() and m.is_accepting()
    assert not m.compute_mask().any() and m.forced_bytes() == b"" and m.min_completion() == 0
    with pytest.raises(TokenRejected, match="stopped"):
        m.consume(1)
    m.rollback(1)  # EOS
    assert not m.is_stopped() and _ids(m.compute_mask()) == spent
    m.rollback(1)
    assert _ids(m.compute_mask()) == one_left
    m.consume(4)  # "ab" after "a": two tokens, spent again
    assert _ids(m.compute_mask()) == spent
    m.rollback(2)
    assert _ids(m.compute_mask()) == start and m.n_consumed == 0
    with pytest.raises(MatcherError, match="cannot roll back 1 tokens; 0 consumed"):
        m.rollback(1)
    with pytest.raises(MatcherError):
        m.rollback(-1)


def test_last_token_of_a_budget_cannot_stay_inside_a_lexeme_it_cannot_end():
    m, ref = Matcher(BUDGETS, INFO), Reference(BUDGETS, INFO)
    q, qa, a, aq, bq_comma = (VOCAB.index(b) for b in (b"q", b"qa", b"a", b"aq", b"bq,"))
    for t in (q, a):  # two of the quoted lexeme's three tokens: the third must close it
        m.consume(t)
        ref.consume(t)
    allowed = _ids(m.compute_mask())
    assert allowed == ref.allowed()
    assert aq in allowed and bq_comma in allowed and a not in allowed and qa not in allowed
    with pytest.raises(TokenRejected):
        m.consume(a)
    m.consume(aq)
    assert m.is_accepting()
    # the tag's one token: "x" may go on only by ending at the next byte
    m.reset()
    m.consume(VOCAB.index(b"x"))
    assert a not in _ids(m.compute_mask()) and VOCAB.index(b",") in _ids(m.compute_mask())


@pytest.mark.parametrize("grammar", [BUDGETS, PLAIN], ids=["budgets", "plain"])
@pytest.mark.parametrize("seed", range(6))
def test_validate_tokens_equals_consuming_one_by_one(grammar, seed):
    rng = random.Random(seed)
    m = Matcher(grammar, INFO)
    for _ in range(40):
        draft = [rng.randrange(len(VOCAB)) for _ in range(rng.randint(0, 6))]
        if rng.random() < 0.5:  # mostly allowed tokens, so drafts get long
            probe, draft = m.clone(), []
            for _ in range(rng.randint(1, 6)):
                ids = _ids(probe.compute_mask())
                if not ids:
                    break
                draft.append(rng.choice(ids))
                probe.consume(draft[-1])
            draft.append(rng.randrange(len(VOCAB)))
        before = (m.state, m.n_consumed, m._tokens, _ids(m.compute_mask()))
        n = m.validate_tokens(draft)
        assert (m.state, m.n_consumed, m._tokens, _ids(m.compute_mask())) == before
        probe, k = m.clone(), 0
        for t in draft:
            try:
                probe.consume(t)
            except TokenRejected:
                break
            k += 1
        assert n == k
        assert m.validate_tokens(iter(draft)) == k  # any iterable
        allowed = _ids(m.compute_mask())
        if allowed and allowed != [EOS]:
            m.consume(rng.choice([t for t in allowed if t != EOS]))
        else:
            m.reset()


def test_validate_tokens_stops_after_eos_and_rejects_outside_the_vocabulary():
    m = Matcher(BUDGETS, INFO)
    assert m.validate_tokens([1, EOS, 1]) == 2
    assert m.validate_tokens([1, len(VOCAB)]) == 1
    assert m.validate_tokens(np.array([1, -1])) == 1
    assert m.n_consumed == 0
    with pytest.raises(TokenRejected, match="outside vocabulary"):
        m.consume(len(VOCAB))


def test_forced_bytes_stop_at_the_limit():
    n = MAX_FORCED_BYTES + 88
    g = Grammar.from_lark(f'start: "{"q" * n}" "!" WORD\nWORD: /[a-c]+/')
    info = TokenizerInfo.from_token_bytes([b"</s>", b"q", b"!", b"a", b"qq"], eos_ids=[0])
    m = Matcher(g, info)
    ref = Reference(g, info)
    assert MAX_FORCED_BYTES == 512
    assert m.forced_bytes() == ref.forced_bytes() == b"q" * MAX_FORCED_BYTES
    assert m.forced_tokens() == [4] * (MAX_FORCED_BYTES // 2 - 1)  # the last token is held back
    m.consume_tokens([4] * (MAX_FORCED_BYTES // 2))
    assert m.forced_bytes() == b"q" * 88 + b"!"
    m.consume_tokens([1] * 88)
    assert m.forced_bytes() == b"!"
    m.consume(2)
    assert m.forced_bytes() == b""  # a choice of letters


def test_forced_bytes_stop_where_a_special_token_is_allowed():
    g = Grammar.from_lark('start: "ab" ("c" | <sep>) "ca"')
    m, ref = Matcher(g, S_INFO), Reference(g, S_INFO)
    assert m.forced_bytes() == ref.forced_bytes() == b"ab"
    for t in (VOCAB.index(b"ab"), len(VOCAB)):  # "ab", then <sep> where "c" is the only byte
        m.consume(t)
        ref.consume(t)
        assert m.forced_bytes() == ref.forced_bytes()
    assert m.forced_bytes() == b"ca" and m.forced_tokens() == [VOCAB.index(b"c")]
    m.rollback(1)
    assert m.forced_bytes() == b"" and m.forced_tokens() == []


def test_compute_mask_remaining_is_the_engines_budget_mask():
    m = Matcher(PLAIN, INFO)
    m.consume_tokens([8, 1])  # "x" "a"
    core = m._engine._core
    for remaining in (1, 2, 3, 500, 0, -4):
        narrowed = core.budget_mask(m.state, max(0, remaining - 1))
        expect = m.compute_mask() if narrowed is None else narrowed
        assert np.array_equal(m.compute_mask(remaining), expect)
        out = np.zeros((2, INFO.n_words), dtype=np.uint32)
        fill_masks([m, m.clone()], out, n_threads=2, remaining=[remaining, None])
        assert np.array_equal(out[0], expect) and np.array_equal(out[1], m.compute_mask())
    assert not m.compute_mask().flags.writeable


def test_fill_masks_rows_of_budgets_eos_and_plain_states():
    ms = [Matcher(BUDGETS, INFO) for _ in range(4)] + [Matcher(PLAIN, INFO)]
    ms[1].consume_tokens([1, 1])
    ms[2].consume_tokens([1, EOS])
    ms[3].consume_tokens([8])
    ms[4].consume_tokens([8, 4])
    out = np.full((5, INFO.n_words), 0xFFFFFFFF, dtype=np.uint32)
    fill_masks(ms, out, n_threads=2)
    for i, m in enumerate(ms):
        assert np.array_equal(out[i], m.compute_mask()), i
        row = np.zeros(INFO.n_words, dtype=np.uint32)
        m.fill_mask(row)
        assert np.array_equal(row, m.compute_mask())


def test_clones_on_threads_match_a_sequential_run():
    rng = random.Random(7)
    base = Matcher(BUDGETS, INFO)
    base.consume_tokens([1, 13])
    walks = []
    for _ in range(8):  # walks of allowed tokens, found sequentially
        probe, walk = base.clone(), []
        for _ in range(30):
            ids = [t for t in _ids(probe.compute_mask()) if t != EOS]
            if not ids:
                break
            walk.append(rng.choice(ids))
            probe.consume(walk[-1])
        walks.append(walk)

    def run(m: Matcher, walk: list[int]) -> list:
        seen = []
        for t in walk:
            seen.append((_ids(m.compute_mask()), m.forced_bytes(), m.validate_tokens(walk)))
            m.consume(t)
        return seen + [(m.state, m._tokens)]

    expected = [run(base.clone(), w) for w in walks]
    got: list = [None] * len(walks)
    clones = [base.clone() for _ in walks]

    def worker(i: int) -> None:
        for _ in range(5):
            c = clones[i].clone()
            got[i] = run(c, walks[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(walks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected
    assert base._tokens == [1, 13] and all(c._tokens == [1, 13] for c in clones)


def test_unique_items_layer_leaves_a_rejected_token_unconsumed():
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True})
    vocab = [b"</s>", b"[", b'"a"', b",", b'"b"', b"]", b'"a', b'"']
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0])
    m = Matcher(g, info)
    assert m._unique is not None
    m.consume_tokens([1, 2, 3])  # ["a",
    before = (m.state, m.n_consumed, m._tokens, len(m._uniq))
    assert 2 not in _ids(m.compute_mask(), len(vocab))
    with pytest.raises(TokenRejected, match="uniqueItems"):
        m.consume(2)  # "a" again
    assert (m.state, m.n_consumed, m._tokens, len(m._uniq)) == before
    assert m.validate_tokens([4, 3, 2]) == 2 and m.validate_tokens([6, 7]) == 1  # '"a' '"' closes "a"
    assert (m.state, m.n_consumed, m._tokens, len(m._uniq)) == before
    m.consume_tokens([4, 5, 0])
    assert m.is_stopped() and m.n_consumed == 6
    m.rollback(3)
    assert (m.state, m.n_consumed, m._tokens, len(m._uniq)) == before
    twin = m.clone()
    twin.consume(4)
    assert m.n_consumed == 3 and len(m._uniq) == 4 and len(twin._uniq) == 5


def test_hostile_arguments_raise_typed_errors():
    from lexguide import _core
    from lexguide.errors import CoreArgumentError

    m = Matcher(PLAIN, INFO)
    core = m._core
    for t in (-1, len(VOCAB), 2**40, -2**63):
        with pytest.raises(TokenRejected, match="outside vocabulary"):
            core.consume(t)
    with pytest.raises(TypeError):
        core.consume(2**70)
    for n in (-5, 1, 2**40):
        with pytest.raises(MatcherError, match="cannot roll back"):
            core.rollback(n)
    assert core.validate_tokens([2**63 - 1, -2**63]) == 0 and not core.is_allowed(2**62)
    plain = m.compute_mask()
    for remaining in (2**63 - 1, -2**63, 0):  # no overflow: the plain or a narrowed mask
        assert core.compute_mask(remaining).shape == plain.shape
    with pytest.raises(CoreArgumentError):
        core.fill_mask(np.zeros(INFO.n_words + 2, dtype=np.uint32))
    with pytest.raises(TypeError):
        core.fill_mask(np.zeros(INFO.n_words, dtype=np.int64))
    out = np.zeros((2, INFO.n_words), dtype=np.uint32)
    with pytest.raises(TypeError, match=r"matchers\[1\]"):
        _core.fill_matcher_masks([core, 3], out)
    with pytest.raises(CoreArgumentError, match="fewer rows"):
        _core.fill_matcher_masks([core] * 3, out)
    with pytest.raises(CoreArgumentError, match="one remaining budget per matcher"):
        _core.fill_matcher_masks([core], out, 1, [1, 2])
    with pytest.raises(TypeError):
        _core.Matcher(3)
    assert m.n_consumed == 0 and np.array_equal(m.compute_mask(), plain)


def test_captures_read_special_tokens_as_the_matcher_consumed_them():
    from lexguide.engine.captures import captures

    g = Grammar.from_lark('start: lst\nlst[capture="all"]: item (<sep> item)* <[10,11]>?\n'
                          'item[capture]: /[a-c]+/ | /[0-9]+/')
    lp, sep = g.lexparser, len(VOCAB)
    m = Matcher(g, S_INFO)

    def oracle(final: bool) -> list:
        """The pieces built token by token (special-token lexemes where they scan)."""
        engine = m._engine
        states, pieces, data = [lp.initial], [], b""
        for t in m._tokens:
            lexemes = engine.token_lexemes_of(t)
            after = lp.advance_token_lexeme(states[-1], lexemes) if lexemes else None
            if after is None:
                after = lp.advance_bytes(states[-1], S_VOCAB[t])
                data += S_VOCAB[t]
                pieces.append((S_VOCAB[t], after))
            else:
                pieces.append((lexemes, after))
            states.append(after)
        assert states[-1] == m.state
        return captures(lp, data, pieces, final)

    for t in (VOCAB.index(b"ab"), sep, VOCAB.index(b"12"), sep, VOCAB.index(b"c")):
        m.consume(t)
        assert m.captures() == oracle(False)
    m.consume(VOCAB.index(b"1"))  # "1": a byte of the item, or the token set at the end
    m.consume(EOS)
    assert m.captures() == oracle(True)
    assert m.captures()[-1][0] == "all" and ("item", b"ab") in m.captures()
