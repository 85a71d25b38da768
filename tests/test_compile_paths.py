"""The compile's fast paths give what their slow forms give: GC pause, literal chains, depth
check, fragment references, quoted key regions, the core's productive-rules pass, the key scan
of $id/$anchor, the module listing of the regex store's base, shared plain lexemes, the
core's export of the Python regex store."""

from __future__ import annotations

import gc
import json

import pytest

from lexguide import Grammar
from lexguide.errors import SchemaError
from lexguide.jsonschema.refs import _defrag
from lexguide.limits import _path_too_deep, json_value_too_deep
from lexguide.regex import nodes as rx


def _fresh_schema(tag: str) -> dict:
    # a schema no other test compiles, so the process-wide grammar cache does not answer
    return {"type": "object", "properties": {f"k_{tag}": {"type": "integer"}}, "required": [f"k_{tag}"]}


def test_compile_restores_an_enabled_collector():
    assert gc.isenabled()
    Grammar.from_json_schema(_fresh_schema("gc_on"))
    assert gc.isenabled()


def test_compile_leaves_a_disabled_collector_off():
    gc.disable()
    try:
        Grammar.from_json_schema(_fresh_schema("gc_off"))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_failed_compile_restores_the_collector():
    with pytest.raises(SchemaError):
        Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "nope"}}})
    assert gc.isenabled()


@pytest.mark.parametrize("data", [b"a", b"ab", b"hello world", b"\x00\xff\"\\", b"paths_fast_xyzzy"])
def test_literal_is_the_chain_concat_builds(data):
    chain = rx.concat(*(rx.byteset([b]) for b in data))
    assert rx.literal(data) == chain
    assert rx.literal_bytes(rx.literal(data)) == data
    # a suffix already in the store, a new head
    assert rx.literal(b"new_head_" + data) == rx.concat(rx.literal(b"new_head_"), chain)


@pytest.mark.parametrize("value, limit", [
    ({"a": [1, {"b": 2}]}, 2), ({"a": [1, {"b": 2}]}, 3), ([[[[]]]], 3), ([[[[]]]], 4),
    ({"x": {"y": {}}, "z": [[{}]]}, 2), ("text", 0), ([], 0), ({"k": 1}, 1),
])
def test_depth_check_matches_its_slow_path(value, limit):
    assert json_value_too_deep(value, limit) == _path_too_deep(value, limit)


@pytest.mark.parametrize("base", ["https://lexguide.invalid/root.json", "urn:example:a", "http://a/b?",
                                  "http://x.org/s.json#frag", "", "//host/x"])
@pytest.mark.parametrize("ref", ["#/definitions/a", "#", "#name", "#/a/b#c", "#/%7Ba%7D", "#x:y", "#?q"])
def test_fragment_reference_resolves_as_urldefrag_does(base, ref):
    from urllib.parse import urldefrag

    slow = tuple(urldefrag(_defrag(base)[0] + ref))
    assert (_defrag(_defrag(base)[0] + "#")[0], ref[1:]) == slow


def test_key_regions_keep_their_languages():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "q\"x": {"type": "null"}},
              "patternProperties": {"^p": {"type": "string"}}, "additionalProperties": {"type": "boolean"},
              "propertyNames": {"maxLength": 4}}
    g = Grammar.from_json_schema(schema, whitespace="compact")
    for doc, ok in [({"a": 1}, True), ({"q\"x": None}, True), ({"pq": "s"}, True), ({"pq": 1}, False),
                    ({"zz": True}, True), ({"zz": 1}, False), ({"a": True}, False),
                    ({"toolong": True}, False), ({"ptoolong": "s"}, False)]:
        assert g.validate(json.dumps(doc, separators=(",", ":"))) is ok, doc


def _productive_reference(n_nt: int, lexeme_ok: list[bool], rules: list) -> list[int]:
    """The productive rules by the textbook fixpoint: repeat until no nonterminal is added."""
    ok = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if lhs not in ok and all(lexeme_ok[-1 - x] if x < 0 else x in ok for x in rhs):
                ok.add(lhs)
                changed = True
    return [i for i, (lhs, rhs) in enumerate(rules)
            if lhs in ok and all(lexeme_ok[-1 - x] if x < 0 else x in ok for x in rhs)]


@pytest.mark.parametrize("seed", range(40))
def test_core_productive_rules_match_the_fixpoint(seed):
    import random

    from lexguide import _core
    from lexguide.grammar.ir import Rule

    r = random.Random(seed)
    n_nt, n_lex = r.randint(1, 12), r.randint(1, 5)
    lexeme_ok = [r.random() < 0.7 for _ in range(n_lex)]
    rules = [Rule(r.randrange(n_nt), tuple(r.choice([r.randrange(n_nt), -1 - r.randrange(n_lex)])
                                           for _ in range(r.randint(0, 3))))
             for _ in range(r.randint(0, 3 * n_nt))]
    got = _core.productive_rules(n_nt, lexeme_ok, rules)
    assert got == _productive_reference(n_nt, lexeme_ok, rules)
    # lists, plain tuples and the IR's Rules read alike
    assert _core.productive_rules(n_nt, lexeme_ok, [(a, list(b)) for a, b in rules]) == got


@pytest.mark.parametrize("rules, error", [
    ([(0, (5,))], ValueError), ([(0, (-9,))], ValueError), ([(3, ())], ValueError),
    ([(0,)], TypeError), ([(0, ("a",))], TypeError), ([(0.5, ())], TypeError),
    ([(0, 3)], TypeError), (5, TypeError), ([(2**40, ())], ValueError),
])
def test_core_productive_rules_reject_bad_rules(rules, error):
    from lexguide import _core

    with pytest.raises(error):
        _core.productive_rules(1, [True], rules)


def test_has_key_finds_keys_anywhere_and_only_keys():
    from lexguide.jsonschema.refs import _has_key

    keys = frozenset(("$id", "$anchor"))
    assert _has_key({"a": [{"b": {"$anchor": "x"}}]}, keys)
    assert _has_key([1, {"$id": "u"}], keys)
    assert not _has_key({"enum": ["$id", "$anchor"], "const": "$id"}, keys)  # values, not keys
    assert not _has_key({"a": {"b": [1, 2, {"c": None}]}}, keys)
    assert not _has_key("$id", keys)


@pytest.mark.parametrize("package", ["lexguide", "lexguide.grammar", "lexguide.jsonschema",
                                     "lexguide.regex"])
def test_front_end_modules_are_listed_as_pkgutil_lists_them(package):
    import importlib
    import pkgutil

    pkg = importlib.import_module(package)
    want = sorted(i.name for i in pkgutil.iter_modules(pkg.__path__, package + "."))
    assert sorted(rx._submodules(package, pkg.__path__)) == want


def test_plain_lexemes_are_shared_between_grammars_and_others_are_not():
    from lexguide.grammar.ir import GrammarBuilder

    node = rx.literal(b"shared_lexeme_paths")
    a, b = GrammarBuilder(), GrammarBuilder()
    la, lb = a.lexeme(node, "x", lexeme_class=0), b.lexeme(node, "x", lexeme_class=0)
    assert a._lexemes[-1 - la] is b._lexemes[-1 - lb]
    c = GrammarBuilder()
    other = c._lexemes[-1 - c.lexeme(node, "y")]  # another name: another lexeme
    assert other.name == "y" and a._lexemes[-1 - la].name == "x"
    ca, cb = a.lexeme(node, "x", capture="c"), b.lexeme(node, "x", capture="c")
    assert a._lexemes[-1 - ca] is not b._lexemes[-1 - cb]
    assert a._lexemes[-1 - ca].capture == "c" and a._lexemes[-1 - la].capture is None


@pytest.mark.parametrize("pattern", [b"abc", b"", b"\x00\xff"])
def test_transport_rebuilds_the_same_node(pattern):
    node = rx.intersect(rx.concat(rx.literal(pattern), rx.star(rx.byteset(b"xy"))),
                        rx.complement(rx.repeat(rx.literal(b"x"), 2, 5)))
    nodes, roots = rx.export_nodes([node, rx.literal(pattern)])
    assert len(nodes) > 3 and rx.import_nodes((nodes, roots)) == [node, rx.literal(pattern)]

