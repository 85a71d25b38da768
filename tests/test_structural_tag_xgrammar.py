"""Structural tags: lexguide and xgrammar accept and reject the same strings.

xgrammar is an optional test dependency (``pip install xgrammar``); without it these skip.
Strings: every string of a small alphabet up to a length, plus random concatenations of
pieces that spell tags, triggers and their fragments. JSON inside tags is written with at most
one space between tokens (lexguide's default layout; xgrammar allows any whitespace).
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

xgr = pytest.importorskip("xgrammar")
testing = pytest.importorskip("xgrammar.testing")

from lexguide import Grammar  # noqa: E402
from test_structural_tag import _accepts_tokens  # noqa: E402


def _tag(begin, content, end):
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _const(v):
    return {"type": "const_string", "value": v}


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}
X = _tag("<a>", _const("x"), "/")
Y = _tag("<ab", {"type": "regex", "pattern": "x+"}, ">")
SCHEMA_FMT = {"type": "json_schema", "json_schema": SCHEMA}
J = _tag("<j>", SCHEMA_FMT, "</j>")
SPECS = {
    "triggered": {"type": "triggered_tags", "triggers": ["<a"], "tags": [X, Y]},
    "at_least_one": {"type": "triggered_tags", "triggers": ["<a"], "tags": [X, Y],
                     "at_least_one": True},
    "stop_after_first": {"type": "triggered_tags", "triggers": ["<a"], "tags": [X, Y],
                         "stop_after_first": True},
    "two_triggers": {"type": "triggered_tags", "triggers": ["<a", "<j"], "tags": [X, J]},
    "separator": {"type": "tags_with_separator", "tags": [X, Y], "separator": "a"},
    "any_text_in_tag": _tag("<a>", {"type": "any_text"}, "/"),
    "excludes": {"type": "triggered_tags", "triggers": ["<a"], "tags": [X], "excludes": ["xx"]},
    "nested": _tag("<j>", {"type": "triggered_tags", "triggers": ["<a"], "tags": [X]}, "</j>"),
    "dispatch": {"type": "dispatch", "rules": [["<a>", _const("x/")], ["<j>", SCHEMA_FMT]]},
    "dispatch_once": {"type": "dispatch", "rules": [["<a", _const(">x/")]], "loop": False},
    "dispatch_in_tag": _tag("<j>", {"type": "dispatch", "rules": [["<a>", _const("x/")]],
                                    "excludes": ["</j>"]}, "</j>"),
    "sequence_or": {"type": "sequence", "elements": [
        {"type": "or", "elements": [X, Y]}, _const("b"), J]},
}
PIECES = ["<a>x/", "<abxx>", "<a", "<ab", "<j>", '<j>{"a": 1}</j>', '{"a": 2}', "</j>", "x", "a",
          "b", "/", ">", "xx", "<", "j"]
EXTRA = ['<a>x/b<j>{"a": 1}</j>', '<abx>b<j>{"a":-3}</j>', '<abx>b<j>{"a": 3, "a": 3}</j>',
         '<j>{"a": 1}</j>', '<j><a>x/</j>', '<j>q<a>x/<ab</j>', '<a>x/b<j>{"b": 1}</j>']


def _xgrammar_accepts(fmt: dict):
    spec = {"type": "structural_tag", "format": fmt}
    compiled = xgr.Grammar.from_structural_tag(json.dumps(spec))
    return lambda s: testing._is_grammar_accept_string(compiled, s)


def _strings(rng: random.Random) -> list[str]:
    out = ["".join(p) for n in range(5) for p in itertools.product("<a>x/", repeat=n)]
    out += ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6))) for _ in range(600)]
    return out + EXTRA


@pytest.mark.parametrize("name", sorted(SPECS))
def test_lexguide_and_xgrammar_agree(name):
    fmt = SPECS[name]
    ours = Grammar.from_structural_tag({"type": "structural_tag", "format": fmt})
    theirs = _xgrammar_accepts(fmt)
    strings = _strings(random.Random(name))
    disagree = [s for s in strings if ours.validate(s) != theirs(s)]
    assert not disagree, disagree[:10]
    assert any(ours.validate(s) for s in strings) and not all(ours.validate(s) for s in strings)


def test_a_known_difference_any_text_before_a_literal_ends_at_its_first_occurrence():
    """xgrammar lets ``any_text`` before a literal run past earlier occurrences of it; lexguide
    ends it at the first one (a generator cannot know that a later one will come)."""
    fmt = {"type": "sequence", "elements": [{"type": "any_text"}, _const("END")]}
    ours = Grammar.from_structural_tag(fmt)
    theirs = _xgrammar_accepts(fmt)
    assert ours.validate("abEND") and theirs("abEND")
    assert theirs("aENDbEND") and not ours.validate("aENDbEND")


# -- token-level formats, on a tiny vocabulary ---------------------------------------------------

TOKENS = ["<eos>", "<|start|>", "<|end|>", "a", "b", "{", "}", "ab", "a}"]
START, END = {"type": "token", "token": "<|start|>"}, {"type": "token", "token": 2}
TOKEN_TAG = {"type": "tag", "begin": START, "content": _const("ab"), "end": END}
TOKEN_SPECS = {
    "token_triggered": {"type": "token_triggered_tags", "trigger_tokens": ["<|start|>"],
                        "tags": [TOKEN_TAG]},
    "token_triggered_once": {"type": "token_triggered_tags", "trigger_tokens": ["<|start|>"],
                             "tags": [TOKEN_TAG], "stop_after_first": True, "exclude_tokens": [5]},
    "token_triggered_first": {"type": "token_triggered_tags", "trigger_tokens": ["<|start|>"],
                              "tags": [TOKEN_TAG], "at_least_one": True},
    "token_dispatch": {"type": "token_dispatch", "rules": [["<|start|>", _const("ab")]]},
    "any_tokens_in_tag": {"type": "tag", "begin": START, "end": END,
                          "content": {"type": "any_tokens", "exclude_tokens": [5]}},
    "exclude_token": {"type": "sequence", "elements": [
        {"type": "exclude_token", "exclude_tokens": [3, 1]}, {"type": "token", "token": 2}]},
}


@pytest.fixture(scope="module")
def token_engines():
    from lexguide import TokenizerInfo

    info = xgr.TokenizerInfo(TOKENS, xgr.VocabType.RAW, vocab_size=len(TOKENS),
                             stop_token_ids=[0], add_prefix_space=False)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    ours_info = TokenizerInfo.from_token_bytes([t.encode() for t in TOKENS], eos_ids=[0],
                                               special_ids=[1, 2],
                                               special_names={"<|start|>": 1, "<|end|>": 2})

    def theirs(fmt):
        compiled = compiler.compile_structural_tag(json.dumps({"type": "structural_tag",
                                                               "format": fmt}))

        def accepts(ids):
            m = xgr.GrammarMatcher(compiled)
            return all(m.accept_token(t) for t in ids) and m.accept_token(0)
        return accepts

    def ours(fmt):
        grammar = Grammar.from_structural_tag(fmt)

        return lambda ids: _accepts_tokens(grammar, ids, ours_info)

    return ours, theirs


@pytest.mark.parametrize("name", sorted(TOKEN_SPECS))
def test_token_level_formats_agree_with_xgrammar(name, token_engines):
    ours, theirs = (make(TOKEN_SPECS[name]) for make in token_engines)
    rng = random.Random(name)
    seqs = [list(p) for n in range(4) for p in itertools.product(range(1, 9), repeat=n)]
    seqs += [[rng.choice([1, 2, 3, 4, 7]) for _ in range(rng.randint(4, 8))] for _ in range(300)]
    disagree = [s for s in seqs if ours(s) != theirs(s)]
    assert not disagree, disagree[:10]
    assert any(ours(s) for s in seqs) and not all(ours(s) for s in seqs)


QWEN3 = {"type": "sequence", "elements": [
    {"type": "sequence", "elements": [_tag("", {"type": "any_text"}, "</think>"), _const("\n\n")]},
    {"type": "triggered_tags", "triggers": ["<tool_call>"], "excludes": ["<think>", "</think>"],
     "tags": [_tag('<tool_call>\n{"name": "get_weather", "arguments": ',
                   {"type": "json_schema", "json_schema": {}}, "}\n</tool_call>")]}]}


def test_the_qwen3_builtin_shape_agrees():
    """xgrammar's Qwen3 tool-calling structural tag (thinking, then text with tool calls)."""
    ours, theirs = Grammar.from_structural_tag(QWEN3), _xgrammar_accepts(QWEN3)
    call = '<tool_call>\n{"name": "get_weather", "arguments": ARGS}\n</tool_call>'
    texts = ["hmm</think>\n\nok", "</think>\n\n", "a</think>\n\n<think>", "a</think>b</think>\n\n",
             "a</think>\n\nx", "a</think>\n", "a</think>\n\n<tool_call>\n{\"name\": \"x\""]
    for args in ['{"a": 1}', "[]", "{}", '{"a": [1, {"b": null}]}', "{", '"s"', "1 2"]:
        texts += [f"t</think>\n\n{call.replace('ARGS', args)}",
                  f"t</think>\n\nsay {call.replace('ARGS', args)} more"]
    results = [(t, ours.validate(t), theirs(t)) for t in texts]
    assert all(a == b for _, a, b in results), [r for r in results if r[1] != r[2]]
    assert sum(a for _, a, _ in results) >= 8


def test_flexible_json_layout_agrees():
    fmt = SPECS["two_triggers"]
    ours = Grammar.from_structural_tag(fmt, whitespace="flexible")
    theirs = _xgrammar_accepts(fmt)
    bodies = ['{"a":1}', '{ "a" : 1 }', '{\n  "a": 1\n}', '{\t"a"\r\n:\n-2 }', '{"a": 1 ,}',
              '{ }', '{"a": 1, "a": 2}', '{"a":1.5}', '{"a": 1}  ', '  {"a": 1}']
    texts = [f"x<j>{b}</j>y" for b in bodies]
    results = [(t, ours.validate(t), theirs(t)) for t in texts]
    assert all(a == b for _, a, b in results), [r for r in results if r[1] != r[2]]
    assert 3 <= sum(a for _, a, _ in results) < len(texts)
