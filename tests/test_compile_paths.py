"""The compile's fast paths give what their slow forms give: GC pause, literal chains, depth
check, fragment references, quoted key regions."""

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
