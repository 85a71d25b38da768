"""Structural tags and lazy grammars: structure inside free text.

Oracles: an independent backtracking matcher of triggered-tag languages written from
xgrammar's docs (free text until the first trigger, then a tag, then free text again), run on
every string of a small alphabet up to a length; brute-force masks (every token's bytes through
the reference recogniser of tests/reference); the base grammar itself for lazy grammars (what
follows a trigger is exactly what the grammar accepts after the trigger's text).
"""

from __future__ import annotations

import itertools
import json
import random
import re

import numpy as np
import pytest
from reference import recognizer

from lexguide import Grammar, GrammarError, Matcher, SchemaError, TokenizerInfo

# -- an independent oracle of triggered_tags ---------------------------------------------------


def _first_trigger(s: str, pos: int, triggers: list[str]) -> tuple[int, str] | None:
    """(start, trigger) of the trigger occurrence ending first at or after ``pos``."""
    best = None
    for t in triggers:
        i = s.find(t, pos)
        if i >= 0 and (best is None or i + len(t) < best[0] + len(best[1])):
            best = (i, t)
    return best


def _tag_ends(s: str, pos: int, tag: dict) -> list[int]:
    """Offsets where ``tag`` (content: const_string or regex) can end when it starts at pos."""
    begin, end, content = tag["begin"], tag["end"], tag["content"]
    if not s.startswith(begin, pos):
        return []
    pos += len(begin)
    out = []
    for k in range(pos, len(s) + 1):
        mid = s[pos:k]
        ok = mid == content["value"] if content["type"] == "const_string" else \
            re.fullmatch(content["pattern"], mid) is not None
        if ok and s.startswith(end, k):
            out.append(k + len(end))
    return out


def oracle_triggered(s: str, fmt: dict) -> bool:
    triggers, tags = fmt["triggers"], fmt["tags"]

    def free_from(pos: int, n_tags: int) -> bool:
        if n_tags and fmt.get("stop_after_first"):
            return pos == len(s)
        hit = _first_trigger(s, pos, triggers)
        if hit is None:
            return True
        start, t = hit
        return any(free_from(e, n_tags + 1) for tag in tags if tag["begin"].startswith(t)
                   for e in _tag_ends(s, start, tag))

    if fmt.get("at_least_one"):
        return any(free_from(e, 1) for tag in tags for e in _tag_ends(s, 0, tag))
    return free_from(0, 0)


def _tag(begin: str, content: dict, end: str) -> dict:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _const(v: str) -> dict:
    return {"type": "const_string", "value": v}


TAG_X = _tag("<a>", _const("x"), "/")
TAG_Y = _tag("<ab", {"type": "regex", "pattern": "x+"}, ">")
SPECS = {
    "plain": {"type": "triggered_tags", "triggers": ["<a"], "tags": [TAG_X]},
    "two_tags_one_trigger": {"type": "triggered_tags", "triggers": ["<a"], "tags": [TAG_X, TAG_Y]},
    "two_triggers": {"type": "triggered_tags", "triggers": ["<a>", "b>"],
                     "tags": [TAG_X, _tag("b>", _const("a"), "/")]},
    "at_least_one": {"type": "triggered_tags", "triggers": ["<a"], "tags": [TAG_X, TAG_Y],
                     "at_least_one": True},
    "stop_after_first": {"type": "triggered_tags", "triggers": ["<a"], "tags": [TAG_X, TAG_Y],
                         "stop_after_first": True},
    "both": {"type": "triggered_tags", "triggers": ["<a"], "tags": [TAG_X], "at_least_one": True,
             "stop_after_first": True},
    "overlapping_trigger": {"type": "triggered_tags", "triggers": ["aa>"],
                            "tags": [_tag("aa>", _const("x"), "/")]},
}
ALPHABET = "<ab>x/"


def _strings(max_len: int):
    for n in range(max_len + 1):
        for p in itertools.product(ALPHABET, repeat=n):
            yield "".join(p)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_language_equals_the_oracle_on_every_short_string(name):
    fmt = SPECS[name]
    grammar = Grammar.from_structural_tag({"type": "structural_tag", "format": fmt})
    n_accepted = 0
    for s in _strings(6):
        expected = oracle_triggered(s, fmt)
        assert grammar.validate(s) == expected, s
        n_accepted += expected
    assert n_accepted  # the language is not empty on these strings
    # longer strings built around tags, where the short ones hold none or one
    rng = random.Random(0)
    pieces = ["<a>x/", "<abxx>", "b>a/", "<a", "<ab", "x", "a", "/", ">", "aa>x/"]
    for _ in range(400):
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        assert grammar.validate(s) == oracle_triggered(s, fmt), s


# -- masks against brute force ----------------------------------------------------------------


def _vocab() -> list[bytes]:
    toks = [b"<eos>"]
    toks += [bytes(p) for n in (1, 2) for p in itertools.product(b"<ab>x/", repeat=n)]
    # triggers and begins split every way, plus tokens running past them
    toks += [b"<a>", b"<ab", b"a>x", b">x/", b"x/<", b"/<a", b"<a>x/", b"xx>", b"aa>", b"x/x",
             b"<tool", b"tool", b"_call", b"call>", b"<tool_call>", b'{"', b'":', b'"}', b"}",
             b"{", b"1",
             b' "', b'"a', b"l>", b"l>x", b"ol_", b"</tool_call>", b"</", b"tool_call>", b"\xc3",
             b"\xa9", b"\xc3\xa9"]
    return toks


VOCAB = _vocab()
INFO = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])
TOOL = _tag('<tool_call>', {"type": "json_schema", "json_schema": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
    "additionalProperties": False}}, "</tool_call>")
MASK_SPECS = dict(SPECS)
MASK_SPECS["json_tool"] = {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [TOOL]}
MASK_SPECS["nested"] = _tag("<a>", {"type": "triggered_tags", "triggers": ["<tool_call>"],
                                    "tags": [TOOL]}, "/")
MASK_SPECS["any_text_in_tag"] = {"type": "sequence", "elements": [
    _tag("<a>", {"type": "any_text", "excludes": ["xx"]}, "/"), TAG_X]}
MASK_SPECS["dispatch"] = {"type": "dispatch", "rules": [["<a>", _const("x/")], ["b>", TOOL]]}
MASK_SPECS["separator"] = {"type": "tags_with_separator", "tags": [TAG_X, TAG_Y], "separator": "a",
                           "at_least_one": True}


def _ids(mask: np.ndarray) -> set[int]:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits[: len(VOCAB)]).tolist())


def _brute_force(grammar: Grammar, prefix: bytes) -> set[int]:
    ref = recognizer(grammar)
    allowed = ref.allowed(prefix, VOCAB, skip=INFO.special_ids)
    if ref.is_accepting(prefix):
        allowed.add(0)
    return allowed


def _walk(grammar: Grammar, seed: int, steps: int = 25) -> bytes:
    """A random walk checking every mask against brute force; tokens with ``<`` or ``>``
    (the pieces of triggers and tags) are preferred, so walks enter tags."""
    rng = random.Random(seed)
    m = Matcher(grammar, INFO)
    out = b""
    for _ in range(steps):
        allowed = _ids(m.compute_mask())
        assert allowed == _brute_force(grammar, out), out
        choices = sorted(allowed - {0})
        if not choices or (0 in allowed and rng.random() < 0.05):
            break
        marked = [t for t in choices if b"<" in VOCAB[t] or b">" in VOCAB[t]]
        t = rng.choice(marked if marked and rng.random() < 0.4 else choices)
        m.consume(t)
        out += VOCAB[t]
    return out


@pytest.mark.parametrize("name", sorted(MASK_SPECS))
def test_masks_equal_brute_force_on_random_walks(name):
    grammar = Grammar.from_structural_tag(MASK_SPECS[name])
    walked = [_walk(grammar, seed) for seed in range(8)]
    begin = json.dumps(MASK_SPECS[name]).split('"begin": ')[1].split('"')[1].encode()
    assert any(begin in w for w in walked), walked  # the walks went into a tag


def test_lazy_masks_equal_brute_force():
    grammar = Grammar.from_lazy('root ::= "<tool_call>" "{" [a-z]+ "}" | "b>x" [ab]* "/"',
                                ["<tool_call>", "b>x"])
    assert any(_walk(grammar, seed) for seed in range(6))


# -- triggers ---------------------------------------------------------------------------------


def _consume_all(m: Matcher, pieces: list[bytes]) -> None:
    for p in pieces:
        m.consume(VOCAB.index(p))


@pytest.mark.parametrize("pieces", [[b"<tool", b"_call", b">"], [b"<", b"tool", b"_call", b">"],
                                    [b"<tool", b"_call", b">"], [b"<", b"tool_call>"]])
def test_a_trigger_split_across_tokens_starts_the_tag(pieces):
    grammar = Grammar.from_structural_tag(MASK_SPECS["json_tool"])
    m = Matcher(grammar, INFO)
    _consume_all(m, [b"x", b"a"] + pieces)
    allowed = {VOCAB[t] for t in _ids(m.compute_mask())}
    assert allowed and all(t.startswith(b"{") for t in allowed), allowed  # JSON now
    assert 0 not in _ids(m.compute_mask())  # the tag must complete


def test_a_token_spelling_a_trigger_and_more_text_is_refused():
    grammar = Grammar.from_structural_tag(MASK_SPECS["json_tool"])
    m = Matcher(grammar, INFO)
    _consume_all(m, [b"<tool", b"_call"])
    allowed = _ids(m.compute_mask())
    assert VOCAB.index(b">") in allowed
    assert VOCAB.index(b"l>x") in allowed  # "<tool_calll>x" has no trigger: free text
    assert VOCAB.index(b">x/") not in allowed  # ">" completes the trigger: no free text after


def test_a_trigger_inside_a_json_string_of_free_text_is_a_trigger():
    grammar = Grammar.from_structural_tag(MASK_SPECS["json_tool"])
    assert grammar.validate('{"a": "tool"}')
    assert not grammar.validate('{"a": "<tool_call>"}')
    assert grammar.validate('{"a": "<tool_call>{"a": 1}</tool_call>"}')


def test_text_after_a_tag_is_free_and_triggers_again():
    grammar = Grammar.from_structural_tag(MASK_SPECS["json_tool"])
    ok = 'hi <tool_call>{"a": 1}</tool_call> so <tool_call>{"a": 2}</tool_call> bye'
    assert grammar.validate(ok)
    assert not grammar.validate(ok + " <tool_call>{}</tool_call>")


def test_nested_tags():
    inner = {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [TOOL]}
    grammar = Grammar.from_structural_tag(
        {"type": "structural_tag", "format": {"type": "sequence", "elements": [
            _tag("<think>", {"type": "any_text"}, "</think>"),
            _tag("<out>", inner, "</out>")]}})
    assert grammar.validate('<think>a <tool_call> b</think>'
                            '<out>x<tool_call>{"a": 1}</tool_call>y</out>')
    assert grammar.validate("<think></think><out></out>")
    assert not grammar.validate("<think></think><out><tool_call>{}</out>")
    assert not grammar.validate("<think></think><out>x</out>y")  # nothing after the outer tag
    assert not grammar.validate("<think>a</think>b</think><out></out>")


def test_at_least_one_means_a_tag_comes_first_and_always_appears():
    fmt = dict(SPECS["at_least_one"])
    grammar = Grammar.from_structural_tag(fmt)
    assert not grammar.validate("") and not grammar.validate("hello")
    assert not grammar.validate("hi<a>x/")  # no leading free text (xgrammar's semantics)
    assert grammar.validate("<a>x/ then <abxx>")
    for seed in range(20):  # every complete output of a random walk holds a tag
        out = _walk(grammar, seed, steps=40)
        if Grammar.validate(grammar, out):
            assert oracle_triggered(out.decode(), fmt) and out.startswith(b"<a")


def test_stop_after_first_ends_the_output_after_one_tag():
    grammar = Grammar.from_structural_tag(SPECS["stop_after_first"])
    m = Matcher(grammar, INFO)
    _consume_all(m, [b"x", b"<a>x/"])
    assert _ids(m.compute_mask()) == {0}  # only EOS
    assert m.is_stopped()


def test_several_tags_per_trigger():
    grammar = Grammar.from_structural_tag(SPECS["two_tags_one_trigger"])
    assert grammar.validate("q<a>x/q<abxxx>q")
    m = Matcher(grammar, INFO)
    _consume_all(m, [b"<a"])
    allowed = {VOCAB[t] for t in _ids(m.compute_mask())}
    assert b">" in allowed and b"b" in allowed and b"x" not in allowed


def test_legacy_shape_is_triggered_tags_of_json_schemas():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    legacy = Grammar.from_structural_tag({"type": "structural_tag", "structures": [
        {"begin": "<function=get_weather>", "schema": schema, "end": "</function>"}],
        "triggers": ["<function="]})
    current = Grammar.from_structural_tag({"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<function="], "tags": [
            _tag("<function=get_weather>", {"type": "json_schema", "json_schema": schema},
                 "</function>")]}})
    texts = ["I'll check. <function=get_weather>{\"city\": \"Paris\"}</function> done", "",
             "no call", "<function=get_time>{}</function>",
             '<function=get_weather>{"town": "x"}</function>',
             "<function=get_weather>{\"city\": \"a\"}</function><function="]
    assert [legacy.validate(t) for t in texts] == [current.validate(t) for t in texts] \
        == [True, True, True, False, False, False]
    assert not Grammar.from_structural_tag({"structures": legacy_structures(schema),
                                            "triggers": ["<f"], "at_least_one": True}).validate("x")


def legacy_structures(schema: dict) -> list[dict]:
    return [{"begin": "<f>", "schema": schema, "end": "</f>"}]


def test_bare_format_and_json_text_are_accepted():
    fmt = SPECS["plain"]
    a = Grammar.from_structural_tag(fmt)
    b = Grammar.from_structural_tag(json.dumps({"type": "structural_tag", "format": fmt}))
    assert a.validate("z<a>x/") and b.validate("z<a>x/") and not b.validate("<a>y/")


def test_grammar_and_regex_formats():
    grammar = Grammar.from_structural_tag({"type": "sequence", "elements": [
        {"type": "grammar", "grammar": 'root ::= "n=" [0-9]+'},
        {"type": "grammar", "grammar": "%llguidance {}\nstart: \";\" /[a-z]+/"},
        {"type": "regex", "pattern": "[A-Z]{2}"}]})
    assert grammar.validate("n=42;abcXY")
    assert not grammar.validate("n=42;abcX")


# -- errors -----------------------------------------------------------------------------------

BAD = [
    ({"type": "structural_tag", "format": {"type": "nope"}}, "$.format.type",
     "unknown format type 'nope'"),
    ({"type": "structural_tag"}, "$", "missing field 'format'"),
    ({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<a"],
                                           "tags": [_tag("<b>", _const("x"), "/")]}},
     "$.format.tags[0].begin", "exactly one trigger"),
    ({"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "content": _const("x"),
                                           "end": 3}}, "$.format.end", "expected a string"),
    ({"type": "sequence", "elements": [{"type": "any_text"}, {"type": "regex", "pattern": "a"}]},
     "$.elements[0]", "must be the content of a tag"),
    ({"type": "sequence", "elements": [_const("a"), {"type": "regex", "pattern": "("}]},
     "$.elements[1].pattern", "invalid regex"),
    ({"type": "qwen_xml_parameter", "json_schema": {}}, "$.type", "not supported"),
    ({"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}, "$.style", "not supported"),
    (_tag("<a>", {"type": "any_tokens"}, "/"), "$.content", "cannot end at a string"),
    ({"type": "token_triggered_tags", "trigger_tokens": [1], "tags": [
        {"type": "tag", "begin": {"type": "token", "token": 2}, "content": _const("a"),
         "end": "/"}]}, "$.tags[0].begin", "one of trigger_tokens"),
    ({"type": "dispatch", "rules": [["<a>"]]}, "$.rules[0]", "[pattern, format] pair"),
    ({"type": "tag", "begin": "<a>", "content": _const("x"), "end": "/", "extra": 1}, "$",
     "unknown field 'extra'"),
    ({"structures": [{"begin": "<a>", "end": "/"}], "triggers": ["<a"]}, "$.structures[0]",
     "missing field 'schema'"),
    ({"type": "or", "elements": [{"type": "grammar", "grammar": "root ::= x"}]},
     "$.elements[0].grammar", "x"),
    ([1], "$", "a JSON object"),
]


@pytest.mark.parametrize("spec,path,message", BAD)
def test_bad_specs_are_located_grammar_errors(spec, path, message):
    with pytest.raises(GrammarError) as e:
        Grammar.from_structural_tag(spec)
    assert f"at {path}:" in str(e.value) and message in str(e.value)


def test_a_bad_schema_inside_is_a_schema_error_naming_the_field():
    with pytest.raises(SchemaError) as e:
        Grammar.from_structural_tag({"type": "tag", "begin": "<a>", "end": "/", "content": {
            "type": "json_schema", "json_schema": {"type": "object", "minProperties": "x"}}})
    assert "$.content.json_schema" in str(e.value)


def test_bad_json_text_is_a_grammar_error():
    with pytest.raises(GrammarError, match="not valid JSON"):
        Grammar.from_structural_tag('{"type": "structural_tag", ')


# -- lazy grammars ----------------------------------------------------------------------------

BASE = 'root ::= "<tool_call>" ("{" [ab]+ "}")? "!"'


@pytest.mark.parametrize("triggers", [["<tool_call>"], [{"type": "word", "value": "<tool_call>"}],
                                      [{"type": 2, "value": "[\\s\\S]*?(<tool_call>)"}],
                                      [{"type": "pattern", "value": "<tool_call>|<tool_calx>"}]])
def test_lazy_grammar_is_free_text_then_the_grammar_from_the_trigger(triggers):
    base = Grammar.from_gbnf(BASE)
    lazy = Grammar.from_lazy(base, triggers)
    prefixes = ["", "hi ", "<tool", "a<tool_cal", "<tool_calx>"]
    tails = ["", "!", "{ab}!", "{a}", "{}!", "x", "<tool_call>!"]
    for p in prefixes:
        # a pattern that also fires on "<tool_calx>", after which the grammar cannot go on
        dead = "<tool_calx>" in p and "calx" in json.dumps(triggers)
        assert lazy.validate(p) != dead  # no trigger yet: free text may end the output
        for t in tails:
            expected = not dead and base.validate("<tool_call>" + t)
            assert lazy.validate(p + "<tool_call>" + t) == expected, (p, t)


def test_lazy_pattern_full_and_token_triggers():
    base = Grammar.from_gbnf(BASE)
    full = Grammar.from_lazy(base, [{"type": "pattern_full",
                                     "value": "^think[a-z ]*(<tool_call>)$"}])
    assert full.validate("think ok<tool_call>{a}!") and full.validate("whatever")
    assert not full.validate("think ok<tool_call>zz")
    assert full.validate("x<tool_call>zz")  # the whole text must match: this prefix does not
    vocab = [b"<eos>", b"<tool_call>", b"{", b"a", b"}", b"!", b"hi"]
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0], special_ids=[1])
    tok = Grammar.from_lazy(base, [{"type": "token", "token": 1, "value": "<tool_call>"}])
    m = Matcher(tok, info)
    m.consume(6)
    m.consume(1)  # the special token fires the trigger
    allowed = np.flatnonzero(np.unpackbits(m.compute_mask().view(np.uint8), bitorder="little")[:7])
    assert allowed.tolist() == [2, 5]


def test_lazy_grammar_errors():
    with pytest.raises(GrammarError, match="no sentence of the grammar starts with .*'<f'"):
        Grammar.from_lazy(BASE, ["<f"])
    with pytest.raises(GrammarError, match="finite set"):
        Grammar.from_lazy(BASE, [{"type": "pattern", "value": "<tool_call>[a-z]*"}])
    with pytest.raises(GrammarError, match="unknown trigger type"):
        Grammar.from_lazy(BASE, [{"type": "regexp", "value": "x"}])
    with pytest.raises(GrammarError, match="non-empty list"):
        Grammar.from_lazy(BASE, [])


# -- token begin/end and budgets --------------------------------------------------------------

TOKEN_VOCAB = [b"<eos>", b"<|start|>", b"<|end|>", b"a", b"b", b"{", b"}", b"ab", b"a}"]
TOKEN_INFO = TokenizerInfo.from_token_bytes(TOKEN_VOCAB, eos_ids=[0], special_ids=[1, 2],
                                            special_names={"<|start|>": 1, "<|end|>": 2})


def _accepts_tokens(grammar: Grammar, ids: list[int], info: TokenizerInfo = TOKEN_INFO) -> bool:
    m = Matcher(grammar, info)
    for t in ids:
        mask = m.compute_mask()
        if not (int(mask[t >> 5]) >> (t & 31)) & 1:
            return False
        m.consume(t)
    return m.is_accepting()


@pytest.mark.parametrize("content,accepted", [
    ({"type": "any_text"}, [[1, 3, 4, 2, 4], [1, 2, 4], [1, 5, 6, 2, 4]]),
    (_const("ab"), [[1, 3, 4, 2, 4], [1, 7, 2, 4]]),
    ({"type": "triggered_tags", "triggers": ["{"], "tags": [_tag("{", _const("a"), "}")]},
     [[1, 3, 5, 8, 4, 2, 4], [1, 2, 4]]),
])
def test_tags_with_token_begin_and_end(content, accepted):
    grammar = Grammar.from_structural_tag({"type": "sequence", "elements": [
        {"type": "tag", "begin": {"type": "token", "token": "<|start|>"}, "content": content,
         "end": {"type": "token", "token": 2}}, _const("b")]})
    for ids in accepted:
        assert _accepts_tokens(grammar, ids), ids
    assert not _accepts_tokens(grammar, [3, 2, 4])  # no begin token
    assert not _accepts_tokens(grammar, [1, 3, 4])  # no end token
    if content["type"] == "triggered_tags":
        assert not _accepts_tokens(grammar, [1, 5, 4, 6, 2, 4])  # the trigger starts a tag


def test_any_text_token_budget_ends_the_text():
    grammar = Grammar.from_structural_tag({"type": "tag", "begin": "{",
                                           "end": {"type": "token", "token": 2},
                                           "content": {"type": "any_text", "max_tokens": 2}})
    assert _accepts_tokens(grammar, [5, 3, 4, 2])
    m = Matcher(grammar, TOKEN_INFO)
    for t in (5, 3, 4):
        m.consume(t)
    allowed = np.flatnonzero(np.unpackbits(m.compute_mask().view(np.uint8), bitorder="little")[:9])
    assert allowed.tolist() == [2]  # two tokens of text: only the end token is left


TOOL_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "enum": ["get", "put"]},
    "arguments": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    "required": ["name", "arguments"], "additionalProperties": False}
CALLS = ['{"name": "get", "arguments": {"x": 12}}', '{"name":"put","arguments":{}}',
         '{"name":"get","arguments":{"x":123}}', '{"name": "get", "arguments": {}}']


@pytest.mark.parametrize("trigger", ['{', '{"', '{"name', '{"name": "g',
                                     '{"name":"get","arguments":{"x":1'])
def test_lazy_grammar_after_a_trigger_ending_inside_a_lexeme_is_the_grammar(trigger):
    """The trigger ends inside JSON lexemes (a key, a string, an integer): what may follow it
    is exactly what the schema's grammar accepts after it, on mutated tool calls."""
    base = Grammar.from_json_schema(TOOL_SCHEMA)
    lazy = Grammar.from_lazy(base, [trigger])
    rng = random.Random(trigger)
    n_checked = n_valid = 0
    for call in CALLS:
        for _ in range(60):
            t = list(call)
            i = rng.randrange(len(t) + 1)
            kind = rng.randrange(4)
            if kind == 0:
                del t[min(i, len(t) - 1)]
            elif kind == 1:
                t.insert(i, rng.choice(' {}":,x1ga'))
            elif kind == 2:
                t = t[:i]
            text = "".join(t)
            if not text.startswith(trigger):
                continue
            expected = base.validate(text)
            assert lazy.validate("so: " + text) == lazy.validate(text) == expected, text
            n_checked += 1
            n_valid += expected
    assert n_checked > 15 and 0 < n_valid < n_checked


def test_lazy_quotient_goes_past_nullable_symbols_only():
    """``o`` is nullable (the quotient goes past it to ``a``); ``a`` is not (it must not skip
    to ``b``)."""
    grammar = Grammar.from_lark('%llguidance {}\nstart: o a b\no: "q"?\na: "<t" "x"\n'
                                'b: "<t" "y"')
    lazy = Grammar.from_lazy(grammar, ["<t"])
    for text in ["<tx<ty", "<ty", "<t<ty", "<tx", "<txy"]:
        assert lazy.validate("so " + text) == grammar.validate(text), text
    assert lazy.validate("so <tx<ty") and lazy.validate("q<tx<ty") and not lazy.validate("<ty")


START, END = {"type": "token", "token": "<|start|>"}, {"type": "token", "token": 2}
TOKEN_TAG = {"type": "tag", "begin": START, "content": _const("ab"), "end": END}


@pytest.mark.parametrize("fmt,accepted,refused", [
    ({"type": "token_triggered_tags", "trigger_tokens": ["<|start|>"], "tags": [TOKEN_TAG]},
     [[], [3, 4], [2, 5], [3, 1, 7, 2, 5], [1, 3, 4, 2, 1, 7, 2]], [[1, 3, 2], [1, 7], [1, 3, 4]]),
    ({"type": "token_triggered_tags", "trigger_tokens": ["<|start|>"], "tags": [TOKEN_TAG],
      "at_least_one": True, "stop_after_first": True},
     [[1, 7, 2]], [[], [3, 1, 7, 2], [1, 7, 2, 3]]),
    ({"type": "token_triggered_tags", "trigger_tokens": ["<|start|>"], "tags": [TOKEN_TAG],
      "exclude_tokens": [5]}, [[3, 1, 7, 2, 6]], [[5], [1, 7, 2, 5]]),
    ({"type": "token_dispatch", "rules": [["<|start|>", _const("ab")]], "loop": False},
     [[3, 1, 7], [1, 3, 4], [8]], [[1, 7, 3], [1, 8]]),
    # control tokens are tokens too: only EOS ends token-level text
    ({"type": "any_tokens", "max_tokens": 2}, [[], [3], [7, 8], [1, 2]], [[3, 4, 5]]),
    ({"type": "sequence", "elements": [{"type": "exclude_token", "exclude_tokens": [3]},
                                       {"type": "token", "token": 2}]},
     [[4, 2], [1, 2]], [[3, 2], [4]]),
    ({"type": "tag", "begin": START, "end": END,
      "content": {"type": "any_tokens", "exclude_tokens": [5]}},
     [[1, 2], [1, 3, 6, 2]], [[1, 5, 2], [1, 3]]),
])
def test_token_level_formats(fmt, accepted, refused):
    grammar = Grammar.from_structural_tag(fmt)
    for ids in accepted:
        assert _accepts_tokens(grammar, ids), ids
    for ids in refused:
        assert not _accepts_tokens(grammar, ids), ids


# -- malformed input: located errors, never a traceback -----------------------------------------

JUNK = [None, 1, -1, 2.5, True, "", "x", [], {}, [1], ["a"], {"type": "x"}, {"type": "tag"},
        [[1]], [["a", 1]]]


def _mutate(v, rng: random.Random):
    """``v`` with one field somewhere replaced by junk or removed."""
    if isinstance(v, dict) and v and rng.random() < 0.8:
        v = dict(v)
        k = rng.choice(list(v))
        r = rng.random()
        if r < 0.3:
            del v[k]
        else:
            v[k] = rng.choice(JUNK) if r < 0.6 else _mutate(v[k], rng)
        return v
    if isinstance(v, list) and v and rng.random() < 0.8:
        v = list(v)
        i = rng.randrange(len(v))
        v[i] = _mutate(v[i], rng) if rng.random() < 0.7 else rng.choice(JUNK)
        return v
    return rng.choice(JUNK)


def test_mutated_specs_and_triggers_raise_only_lexguide_errors():
    from lexguide import LexguideError

    rng = random.Random(0)
    seeds = list(MASK_SPECS.values()) + [
        {"type": "structural_tag", "structures": legacy_structures({"type": "object"}),
         "triggers": ["<f"]},
        {"type": "structural_tag", "format": SPECS["plain"]},
        {"type": "token_triggered_tags", "trigger_tokens": ["<|start|>"], "tags": [TOKEN_TAG]},
        {"type": "token_dispatch", "rules": [[1, _const("a")]], "loop": False}]
    n_errors = 0
    for _ in range(600):
        try:
            Grammar.from_structural_tag(_mutate(rng.choice(seeds), rng))
        except LexguideError:
            n_errors += 1
    triggers = [["<t"], [{"type": "pattern", "value": "(<t)"}],
                [{"type": 0, "token": 1, "value": "<t"}],
                [{"type": "pattern_full", "value": "^a(<t)$"}]]
    for _ in range(300):
        try:
            Grammar.from_lazy('root ::= "<t" [a-z]*', _mutate(rng.choice(triggers), rng))
        except LexguideError:
            n_errors += 1
    assert n_errors > 300  # most mutations are errors; none escaped as another exception


def test_any_text_token_budget_before_an_end_string_forces_the_end():
    """A thinking budget: ``tag("<a>", any_text(max_tokens=3), "/")``; when three tokens of
    text are spent the end string is all that may follow (at byte level nothing changes)."""
    grammar = Grammar.from_structural_tag({"type": "sequence", "elements": [
        _tag("<a>", {"type": "any_text", "max_tokens": 3}, "/"), _const("x")]})
    assert grammar.validate("<a>" + "ab" * 20 + "/x") and not grammar.validate("<a>a/b/x")
    n_cut = 0
    for seed in range(12):
        rng = random.Random(seed)
        m = Matcher(grammar, INFO)
        pieces: list[bytes] = []
        while not m.is_stopped():
            allowed = sorted(_ids(m.compute_mask()) - {0})
            assert allowed, pieces
            t = rng.choice(allowed)
            m.consume(t)
            pieces.append(VOCAB[t])
        out = b"".join(pieces)
        assert grammar.validate(out) and out.endswith(b"/x"), out
        # tokens holding bytes of the text: at most 3
        start, end = 3, len(out) - 2
        pos, holding = 0, 0
        for p in pieces:
            if pos < end and pos + len(p) > start:
                holding += 1
            pos += len(p)
        assert holding <= 3, pieces
        n_cut += holding >= 3
    assert n_cut  # some walks ran into the budget


def test_a_non_ascii_trigger_split_inside_its_character():
    grammar = Grammar.from_structural_tag({"type": "triggered_tags", "triggers": ["é!"],
                                           "tags": [_tag("é!", _const("x"), "/")]})
    assert grammar.validate("aé!x/é") and grammar.validate("éé") and not grammar.validate("é!y")
    vocab = [b"<eos>", b"\xc3", b"\xa9", b"\xc3\xa9", b"!", b"x", b"/", b"\xa9!", b"a"]
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0])
    m = Matcher(grammar, info)
    for t in (8, 1, 7):  # "a", half of "é", its other half and "!"
        m.consume(t)
    bits = np.unpackbits(m.compute_mask().view(np.uint8), bitorder="little")[: len(vocab)]
    assert np.flatnonzero(bits).tolist() == [5]  # inside the tag: only "x"


def test_gbnf_content_may_run_up_to_the_tag_end():
    """The GBNF content is compiled together with the tag's end, so a last rule that can read
    the end's first bytes (``[a-z<]*`` before ``</t>``) still ends before it."""
    grammar = Grammar.from_structural_tag(_tag("<t>", {"type": "grammar",
                                                       "grammar": "root ::= [a-z<]*"}, "</t>"))
    assert grammar.validate("<t>ab</t>") and grammar.validate("<t>a<b</t>")
    assert grammar.validate("<t></t>") and not grammar.validate("<t>a</t")
    quoted = Grammar.from_structural_tag(_tag("<t>", {"type": "grammar",
                                                      "grammar": 'root ::= [a-z"]*'},
                                              ['"\n</t>', "!"]))
    assert quoted.validate('<t>a"\n</t>') and quoted.validate('<t>a"b!')


def test_free_text_before_an_or_of_tags_ends_at_the_first_begin_and_picks_that_tag():
    a, b = _tag("<a>", _const("x"), "/"), _tag("<b>", {"type": "regex", "pattern": "y+"}, "/")
    grammar = Grammar.from_structural_tag({"type": "sequence", "elements": [
        {"type": "any_text"}, {"type": "or", "elements": [a, b]}, _const("!")]})
    for text, ok in [("<a>x/!", True), ("hi<b>yy/!", True), ("hi<a>x/", False),
                     ("hi<a>y/!", False), ("h<b>i<a>x/!", False), ("<a>x/<b>y/!", False)]:
        assert grammar.validate(text) == ok, text
    after_tags = Grammar.from_structural_tag({"type": "sequence", "elements": [
        SPECS["plain"], {"type": "or", "elements": [_tag("<b>", _const("z"), "/"), b]}]})
    assert after_tags.validate("t<a>x/u<b>z/") and after_tags.validate("<b>yy/")
    assert not after_tags.validate("t<b>q/") and not after_tags.validate("t<b>z/<a>x/")


def test_json_options_apply_to_every_json_schema_inside():
    spec = _tag("<j>", {"type": "json_schema", "json_schema": {"type": "object"}}, "</j>")
    assert not Grammar.from_structural_tag(spec).validate("<j>{\n\n  }</j>")
    assert Grammar.from_structural_tag(spec, whitespace="flexible").validate("<j>{\n\n  }</j>")
    capped = dict(spec, content={"type": "json_schema", "json_schema": {"type": "object"},
                                 "max_whitespace_cnt": 1})
    flexible = Grammar.from_structural_tag(capped, whitespace="flexible")
    assert flexible.validate("<j>{ }</j>") and not flexible.validate("<j>{  }</j>")
