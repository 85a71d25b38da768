"""Masks agree with brute force: a token is allowed iff its bytes keep the parse alive."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from reference import recognizer

from lexguide import Grammar, Matcher, TokenizerInfo, TokenRejected, apply_mask
from lexguide.grammar.ir import GrammarBuilder
from lexguide.regex.syntax import parse_regex

ALPHABET = b"ab0 ,"
LEXEME_POOL = ["a", "ab", "b", "[ab]+", "a*b", "[0-9]+", "0", " ", ",", "(ab)+", "b?a", "[a0]{2,3}", "b*", "(a0)?"]


def _vocab(seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    toks = [b"<eos>", b"<ctl>"]
    for n in (1, 2, 3):
        toks += [bytes(p) for p in itertools.product(ALPHABET, repeat=n)]
    toks += [bytes(rng.choice(ALPHABET) for _ in range(rng.randint(4, 9))) for _ in range(200)]
    return toks


VOCAB = _vocab()
INFO = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0], special_ids=[1])


def _random_grammar(rng: random.Random) -> Grammar:
    b = GrammarBuilder()
    lexemes = [b.lexeme(parse_regex(p), f"/{p}/", lazy=rng.random() < 0.1) for p in rng.sample(LEXEME_POOL, 5)]
    nts = [b.nonterminal(f"r{i}") for i in range(3)]
    for i, nt in enumerate(nts):
        for _ in range(rng.randint(1, 3)):
            rhs = []
            for _ in range(rng.randint(0, 3)):
                if rng.random() < 0.25 and i + 1 < len(nts):
                    rhs.append(rng.choice(nts[i + 1 :]))
                elif rng.random() < 0.15:
                    rhs.append(nt)  # recursion
                else:
                    rhs.append(rng.choice(lexemes))
            b.rule(nt, rhs)
    if rng.random() < 0.5:
        b.set_skip(0, parse_regex(" +"))
    return Grammar(b.build(nts[0]))


def _mask_ids(mask: np.ndarray) -> set[int]:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return set(np.nonzero(bits[: INFO.vocab_size])[0].tolist())


def _consumed(m: Matcher) -> bytes:
    return b"".join(m.info.token_bytes[t] for t in m._tokens)


def _brute_force(m: Matcher, vocab: list[bytes] = VOCAB) -> set[int]:
    """Every token's bytes through the reference recogniser (tests/reference), plus EOS."""
    ref = recognizer(m.grammar)
    prefix = _consumed(m)
    allowed = ref.allowed(prefix, vocab, skip=m.info.special_ids)
    if ref.is_accepting(prefix):
        allowed.add(0)
    return allowed


@pytest.fixture(autouse=True, params=["direct", "cached"])
def walk_path(request, monkeypatch):
    """Run every test twice: subtrees below lexeme boundaries walked directly with the parser
    (what small vocabularies get), and through the cached walks (what large subtrees get)."""
    if request.param == "cached":
        from lexguide.engine import mask as mask_module

        original = mask_module.MaskEngine.__init__

        def init(self, *args, **kw):
            original(self, *args, **kw)
            self._core.direct_walk_nodes = 0

        monkeypatch.setattr(mask_module.MaskEngine, "__init__", init)
        from lexguide.engine import matcher as matcher_module

        monkeypatch.setattr(matcher_module, "engine_for", lambda g, info: mask_module.MaskEngine(g, info))
    return request.param


def _walk_randomly_checking_masks(grammar: Grammar, info: TokenizerInfo, rng, steps: int) -> None:
    """Consume random allowed tokens; at every step the mask and the allowed bytes must equal
    brute force over the vocabulary and over all 256 bytes."""
    m = Matcher(grammar, info)
    lp = m._lp
    for _ in range(steps):
        mask_ids = _mask_ids(m.compute_mask())
        expected = _brute_force(m)
        if lp.chain_limit_hits:
            return  # endless empty lexemes: both paths cut the chain, at different depths
        assert mask_ids == expected
        by_byte = recognizer(grammar).allowed_bytes(_consumed(m))
        assert lp.allowed_bytes(m.state).tolist() == by_byte
        choices = sorted(mask_ids - {0})
        if not choices:
            break
        m.consume(rng.choice(choices))


@pytest.mark.parametrize("seed", range(40))
def test_mask_equals_brute_force_on_random_grammars(seed):
    rng = random.Random(seed)
    _walk_randomly_checking_masks(_random_grammar(rng), INFO, rng, steps=12)


def test_consume_rejects_and_leaves_state():
    b = GrammarBuilder()
    g = Grammar(b.build(b.lexeme(parse_regex("ab"), "ab")))
    m = Matcher(g, INFO)
    before = m.state
    with pytest.raises(TokenRejected):
        m.consume(VOCAB.index(b"b"))
    assert m.state == before
    m.consume(VOCAB.index(b"a"))
    assert not m.is_accepting()
    m.consume(VOCAB.index(b"b"))
    assert m.is_accepting() and m.is_stopped()
    assert _mask_ids(m.compute_mask()) == {0}
    m.consume(0)
    assert m.is_stopped()
    with pytest.raises(TokenRejected):
        m.consume(VOCAB.index(b"a"))
    m.rollback(2)
    assert _mask_ids(m.compute_mask()) == _brute_force(m)
    assert m.n_consumed == 1


def test_clone_is_independent_and_reset():
    g = Grammar.from_regex("(ab)+")
    m = Matcher(g, INFO)
    m.consume(VOCAB.index(b"ab"))
    twin = m.clone()
    twin.consume(VOCAB.index(b"a"))
    assert m.n_consumed == 1 and twin.n_consumed == 2
    twin.reset()
    assert twin.n_consumed == 0 and not twin.is_accepting()


def test_forced_tokens_follow_fixed_text():
    g = Grammar.from_regex("ab0ab0[ab]")
    m = Matcher(g, INFO)
    assert m.forced_bytes() == b"ab0ab0"
    forced = m.forced_tokens()
    assert b"".join(VOCAB[t] for t in forced) == b"ab0ab0"[: len(b"".join(VOCAB[t] for t in forced))]
    m.consume_tokens(forced)  # all forced tokens are allowed


def test_apply_mask_sets_minus_inf():
    g = Grammar.from_regex("a")
    m = Matcher(g, INFO)
    logits = np.zeros(INFO.vocab_size, dtype=np.float32)
    apply_mask(logits, m.compute_mask())
    allowed = np.isfinite(logits)
    assert set(np.nonzero(allowed)[0].tolist()) == _mask_ids(m.compute_mask())
    assert allowed[VOCAB.index(b"a")] and not allowed[VOCAB.index(b"b")]


@pytest.mark.parametrize("seed", range(40, 90))
def test_mask_equals_brute_force_on_more_random_grammars(seed):
    info = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0], special_ids=[1])
    rng = random.Random(seed)
    _walk_randomly_checking_masks(_random_grammar(rng), info, rng, steps=10)


JSON_ALPHABET = b'{}":,ab\\u0'


def _json_vocab(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    toks = [b"<eos>", b"<ctl>"]
    for n in (1, 2):
        toks += [bytes(p) for p in itertools.product(JSON_ALPHABET, repeat=n)]
    toks += [b'"ab"', b'"a', b'ab":', b'":"', b'b":{"', b'\\u0061', b'aab', b'"aab":', b'ab":{', b'"ab":{}']
    toks += [bytes(rng.choice(JSON_ALPHABET) for _ in range(rng.randint(3, 7))) for _ in range(300)]
    return list(dict.fromkeys(toks))


KEY_SCHEMAS = [
    {"type": "object", "properties": {"ab": {"const": 0}, "aab": {"type": "object"}, "b": {},
                                      "ba": {"type": "string", "maxLength": 6}}},
    # names that are prefixes of each other, need escapes, or are empty
    {"type": "object", "properties": {"a": {"const": 0}, "a\"b": {}, "": {"type": "object"},
                                      "ab\\": {"type": "array"}}},
]


@pytest.mark.parametrize("schema", [0, 1])
@pytest.mark.parametrize("seed", range(12))
def test_property_key_masks_equal_brute_force(seed, schema):
    """Keys that may be a declared name or any other string (the complement of the declared
    names: a boolean regex in the lexer)."""
    vocab = _json_vocab(seed)
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0], special_ids=[1])
    grammar = Grammar.from_json_schema(KEY_SCHEMAS[schema], whitespace="compact")
    rng = random.Random(seed)
    m = Matcher(grammar, info)
    for _ in range(14):
        bits = np.unpackbits(m.compute_mask().view(np.uint8), bitorder="little")
        got = set(np.nonzero(bits[: info.vocab_size])[0].tolist())
        assert got == _brute_force(m, vocab)
        choices = sorted(got - {0})
        if not choices:
            break
        m.consume(rng.choice(choices))



def _inside_string_checking_masks(m: Matcher, info: TokenizerInfo, vocab: list[bytes], rng,
                                  steps: int) -> None:
    """Masks equal brute force while random tokens without a quote are consumed (the
    matcher stays inside the string or key it is in)."""
    for _ in range(steps):
        got = _mask_ids_of(m.compute_mask(), info)
        assert got == _brute_force(m, vocab)
        choices = sorted(t for t in got - {0} if b'"' not in vocab[t])
        if not choices:
            break
        m.consume(rng.choice(choices))


@pytest.mark.parametrize("additional", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_other_keys_take_every_slice_by_structure(seed, additional):
    """Inside a key that may be any undeclared name (quoted strings minus the declared names'
    spellings), no plain string ends the lexeme: the state takes every slice from the
    structure of that lexeme's regex, without a search over its successors. Without other
    keys (additionalProperties false) the search decides. Masks equal brute force."""
    vocab = _json_vocab(seed) + [b"ab" * 20, b"ba" * 40, b"a0" * 9]
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0], special_ids=[1])
    schema = dict(KEY_SCHEMAS[0], additionalProperties=additional)
    m = Matcher(Grammar.from_json_schema(schema, whitespace="compact"), info)
    m.consume(vocab.index(b"{"))
    m.consume(vocab.index(b'"'))
    _inside_string_checking_masks(m, info, vocab, random.Random(seed), steps=3)
    assert (m._engine._core.stats["eternal_states"] > 0) == additional


@pytest.mark.parametrize("max_length", [9, 12, 31, 40])
@pytest.mark.parametrize("seed", range(3))
def test_counted_strings_take_slices_by_structure(seed, max_length):
    """A string of at most N characters survives any plain string of at most N remaining
    bytes (a byte string has no more characters than bytes): its states take the slices that
    fit by the regex's structure, and the walk of the other tokens takes whole every subtree
    of plain tokens that fit. Tokens at the edges (one byte more or less than what is left,
    multi-byte characters, a plain prefix then a quote or escape) must come out as brute force
    says."""
    rng = random.Random(seed)
    vocab = [b"<eos>", b"<ctl>", b"[", b'["', b'"', b'"]', b'",', b',"', b"]", "é".encode()]
    for n in (1, 2, 3, 8, 9, 10, 11, 12, 13, 29, 30, 31, 32, 39, 40, 41):
        words = [bytes(rng.choice(b"ab c") for _ in range(n)) for _ in range(3)]
        vocab += words
        vocab.append(("é" * (n // 2)).encode())
        # below a plain word, tokens that are not plain (a quote, an escape, a control byte,
        # half a character): the subtree is no longer plain as a whole
        vocab += [words[0] + rng.choice([b'"', b"\\n", b"\x01", b"\xc3", b'",'])]
    vocab = list(dict.fromkeys(vocab))
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0], special_ids=[1])
    schema = {"type": "array", "items": {"type": "string", "maxLength": max_length}}
    m = Matcher(Grammar.from_json_schema(schema, whitespace="compact"), info)
    m.consume(vocab.index(b'["'))
    _inside_string_checking_masks(m, info, vocab, rng, steps=8)
    stats = m._engine._core.stats
    assert stats["bounded_states"] > 0
    # plain subtrees no longer than what is left taken without stepping (TokenTrie::plain_len)
    assert stats["plain_walks"] > 0


def test_a_declared_name_is_no_other_key_after_its_turn():
    """After ``"ab"`` was written, the key position accepts any other string but not "ab"
    again: tokens spelling ``ab"`` must be masked."""
    vocab = _json_vocab(1) + [b'ab"', b'ab":', b'ab":1', b'ab":"', b'aab"', b'abb":']
    vocab = list(dict.fromkeys(vocab))
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0], special_ids=[1])
    schema = {"type": "object", "properties": {"ab": {"const": 0}, "b": {"type": "integer"}}}
    m = Matcher(Grammar.from_json_schema(schema, whitespace="compact"), info)
    for piece in (b'{"', b'ab":', b"0", b',"'):
        m.consume(vocab.index(piece))
    got = _mask_ids_of(m.compute_mask(), info)
    assert got == _brute_force(m, vocab)
    assert vocab.index(b'ab"') not in got and vocab.index(b'ab":1') not in got
    assert vocab.index(b'abb":') in got and vocab.index(b'aab"') in got


def _mask_ids_of(mask: np.ndarray, info: TokenizerInfo) -> set[int]:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return set(np.nonzero(bits[: info.vocab_size])[0].tolist())


@pytest.mark.parametrize("pattern", ["[ab0]{0,30},", "[ab0]{0,12},", "[ab0]{2,7},", "([ab]{0,20}0){1,2},"])
@pytest.mark.parametrize("seed", range(3))
def test_counter_walks_equal_brute_force(seed, pattern):
    """Counted repetitions: every counter position is its own lexer state."""
    info = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0], special_ids=[1])
    rng = random.Random(seed)
    grammar = Grammar.from_lark(f"start: X+\nX: /{pattern}/")
    _walk_randomly_checking_masks(grammar, info, rng, steps=12)


@pytest.mark.parametrize("n_keys", [40, 70, 130])
def test_key_masks_with_many_declared_names(n_keys):
    """Many declared names: a crossing token must name the exact key it ends (its value
    decides what may follow)."""
    alphabet = b'k0123456789":,{}'
    rng = random.Random(n_keys)
    vocab = [b"<eos>", b"<ctl>"] + [bytes([c]) for c in alphabet]
    vocab += [b'k%02d":' % i for i in range(0, n_keys, 3)] + [b'%d":' % i for i in range(10)]
    vocab += [b'k%d' % i for i in range(10)] + [b'":1', b'":"', b',"k', b'{"']
    vocab += [bytes(rng.choice(alphabet) for _ in range(rng.randint(2, 6))) for _ in range(200)]
    vocab = list(dict.fromkeys(vocab))
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0], special_ids=[1])
    props = {f"k{i:02d}": ({"const": i} if i % 2 else {"type": "string"}) for i in range(n_keys)}
    m = Matcher(Grammar.from_json_schema({"type": "object", "properties": props}, whitespace="compact"), info)
    for piece in (b'{"', b"k", b"0"):
        got = _mask_ids_of(m.compute_mask(), info)
        assert got == _brute_force(m, vocab)
        m.consume(vocab.index(piece))


@pytest.mark.parametrize("seed", range(4))
def test_mask_of_parametric_grammar_equals_brute_force(seed):
    grammar = Grammar.from_lark(
        'start: p::0\np::_: "" %if is_ones([0:3])\n | "a" p::set_bit(0) %if bit_clear(0)\n'
        ' | "b" p::set_bit(1) %if bit_clear(1)\n | "0" p::set_bit(2) %if bit_clear(2)\n'
        ' | " " p::_ %if bit_count_lt([0:3], 2)')
    _walk_randomly_checking_masks(grammar, INFO, random.Random(seed), steps=8)


def test_declared_json_keys_are_forced_text():
    # one spelling per declared key by default, so the key and its separator are forced;
    # with general escapes every spelling of the key is valid and nothing past the quote is
    schema = {"type": "object", "properties": {"ab": {"type": "integer"}}, "required": ["ab"],
              "additionalProperties": False}
    m = Matcher(Grammar.from_json_schema(schema, whitespace="compact"), INFO)
    assert m.forced_bytes() == b'{"ab":'
    general = Grammar.from_json_schema(schema, whitespace="compact",
                                       json_allow_general_unicode_escapes=True)
    assert Matcher(general, INFO).forced_bytes() == b'{"'



def _loop_vocab(seed: int) -> list[bytes]:
    """Words of one byte class (whole subtrees that a state looping on letters keeps) mixed
    with words that leave the class deep inside a subtree: a byte of another bucket, a quote,
    a space, UTF-8."""
    rng = random.Random(seed)
    letters = b"abcdefghijklmnopqrstuvwxyz"
    vocab = [b"<eos>", b"<ctl>"] + [bytes([c]) for c in letters + b'@."_-0Z ']
    vocab += [bytes(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(300)]
    for _ in range(200):
        word = bytearray(rng.choice(letters) for _ in range(rng.randint(2, 8)))
        word.insert(rng.randint(1, len(word)), rng.choice(b'@._-0Z" ') if rng.random() < 0.9 else 0xC3)
        vocab.append(bytes(word))
    vocab += ["é".encode(), "aé".encode()]
    return list(dict.fromkeys(vocab))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("pattern", "loops"), [
    ("[a-z]+@[a-z]+\\\\.[a-z]{2,3}", True), ("[a-z_]*", True), ("[a-zA-Z]+[0-9]", True),
    # buckets only partly looping ('a' and 'x' may end the lexeme; 'a' and n..z leave
    # [b-m]): no shortcut
    ("[a-z0-9._-]+[ax]", False), ("[b-m]+@[n-z]+", False),
])
def test_looping_subtrees_taken_whole_equal_brute_force(seed, pattern, loops):
    """A state that loops on every byte below a trie node takes that subtree's tokens without
    visiting it (TokenTrie::below, LexerDFA::loop_buckets): masks stay those of brute force,
    and the shortcut is taken where the state loops on whole buckets."""
    stats = _random_walk_checking_masks(_loop_vocab(seed), f"start: X\nX: /{pattern}/", seed, 6)
    assert (stats["loop_walks"] > 0) == loops


def _random_walk_checking_masks(vocab: list[bytes], grammar_text: str, seed: int,
                                steps: int) -> dict:
    """Consume random allowed tokens, checking every mask against brute force; the core's
    statistics at the end."""
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0], special_ids=[1])
    rng = random.Random(seed)
    m = Matcher(Grammar.from_lark(grammar_text), info)
    for _ in range(steps):
        got = _mask_ids_of(m.compute_mask(), info)
        assert got == _brute_force(m, vocab)
        choices = sorted(got - {0})
        if not choices:
            break
        m.consume(rng.choice(choices))
    return m._engine._core.stats


def _class_vocab(seed: int) -> list[bytes]:
    """Pieces of texts of tests/test_lexer_dfa.py's MANY_CLASSES lexeme (states of many byte
    classes) cut anywhere, and the same with one byte changed."""
    rng = random.Random(seed)
    units = [b"a0", b"c3", b"d4", b"e56", b"g77", b"h.", b"k.", b"l-p", b"o-s", b"t_", b"z_", b"AN",
             b"MZ", "é".encode(), b" ", b"\x01!"]
    vocab = [b"<eos>", b"<ctl>"]
    for _ in range(150):
        text = bytearray(b"".join(rng.choice(units) for _ in range(6)))
        cut = rng.randint(0, len(text) - 1)
        piece = text[cut:cut + rng.randint(1, 8)]
        vocab.append(bytes(piece))
        piece[rng.randrange(len(piece))] = rng.choice(b"abdgkmqtzAZ059._-! \x01\xc3")
        vocab.append(bytes(piece))
    return list(dict.fromkeys(vocab))


@pytest.mark.parametrize("seed", range(3))
def test_many_class_rows_equal_brute_force(seed):
    """Walks through lexer states whose rows hold many byte classes (each leading elsewhere):
    a walk steps each state on bytes of several classes, filled one by one as it goes."""
    from test_lexer_dfa import MANY_CLASSES

    pattern = MANY_CLASSES + f"{seed}?"  # (a lexeme of its own per seed)
    _random_walk_checking_masks(_class_vocab(seed), f"start: X\nX: /{pattern}/", seed, 10)


def _run_vocab(seed: int) -> list[bytes]:
    """Short words of letters and digits (subtrees that a count keeps whole while it has
    room), longer ones (a count runs out inside them) and words leaving the class."""
    rng = random.Random(seed)
    alnum = b"abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = [b"<eos>", b"<ctl>"] + [bytes([c]) for c in alnum + b'"._- ']
    vocab += [bytes(rng.choice(alnum[:6]) for _ in range(rng.randint(2, 5))) for _ in range(300)]
    vocab += [bytes(rng.choice(alnum) for _ in range(rng.randint(2, 12))) for _ in range(300)]
    for _ in range(100):
        word = bytearray(rng.choice(alnum) for _ in range(rng.randint(2, 6)))
        word.insert(rng.randint(1, len(word)), rng.choice(b'"._- '))
        vocab.append(bytes(word))
    vocab += ["é".encode(), "aé".encode(), b"ab\\", b'ab"']
    return list(dict.fromkeys(vocab))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("grammar_text", "shortcut"), [
    ("start: X\nX: /[a-z0-9]{4,9}/", "run_walks"),
    ("start: X \"!\"\nX: /[a-f0-9]{12}/", "run_walks"),
    ("start: X\nX: /[a-z]{2}[0-9a-z]{10}x/", "run_walks"),
    ('%llguidance {}\nstart: %json {"type": "string", "maxLength": 11, "pattern": "[0-9a-f]"}',
     "run_walks"),
    # a JSON string of at most 9 characters survives every plain string that fits: its plain
    # subtrees are taken whole before the run is asked (TokenTrie::plain_len)
    ('%llguidance {}\nstart: %json {"type": "string", "minLength": 9, "maxLength": 9}',
     "plain_walks"),
])
def test_counted_runs_taken_whole_equal_brute_force(seed, grammar_text, shortcut):
    """A counted repetition steps from count to count on its class's buckets: a subtree whose
    bytes lie in them and whose tokens fit in the count left is taken whole
    (LexerDFA::run_buckets, TokenTrie::height). Masks stay those of brute force all along,
    as the count runs out, and the shortcut is taken."""
    assert _random_walk_checking_masks(_run_vocab(seed), grammar_text, seed, 14)[shortcut] > 0
