"""``uniqueItems`` of strings kept distinct by the matcher (``lexguide.engine.unique_items``).

Oracles: the ``jsonschema`` validator for whole texts; for masks, a brute force that extends a
prefix by a bounded search over a few bytes and asks ``jsonschema`` whether some completion is
valid (independent of the matcher's bookkeeping); the JSON-Schema-Test-Suite's
``uniqueItems`` cases; random constrained walks for dead ends; SmolLM2 for a real generation.
"""

from __future__ import annotations

import decimal
import json
import random

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")

import suite_runner as sr
from test_jsonschema_walks import EOS, INFO, TOKENS, random_walk

from lexguide.engine import Matcher, TokenizerInfo, fill_masks
from lexguide.engine.grammar import Grammar
from lexguide.errors import SchemaError, TokenRejected
from lexguide.jsonschema.unique import UNIQUE_ARRAY_NAME

STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
GENERAL = {"json_allow_general_unicode_escapes": True}


def _valid(schema: dict, text: str | bytes) -> bool | None:
    """jsonschema's verdict with numbers read exactly (``int``/``Decimal``, the schema's too);
    None when a number is out of ``Decimal``'s range (the oracle cannot say)."""
    try:
        value = json.loads(text.decode() if isinstance(text, bytes) else text,
                           parse_float=decimal.Decimal)
    except decimal.InvalidOperation:
        return None
    except ValueError:
        return False
    exact = json.loads(json.dumps(schema), parse_float=decimal.Decimal)  # 0.5 as a Decimal
    return jsonschema.Draft202012Validator(exact).is_valid(value)


def _allowed(mask: np.ndarray, n: int) -> set[int]:
    bits = np.unpackbits(np.ascontiguousarray(mask).view(np.uint8), bitorder="little")
    return {int(i) for i in np.nonzero(bits[:n])[0]}


def _agrees_with_jsonschema(g: Grammar, schema: dict, texts) -> None:
    """``g.validate`` gives jsonschema's verdict on each of ``texts``, at least 20 of them
    valid and 20 not (so both sides are tried)."""
    n_valid = n_invalid = 0
    for text in texts:
        want = _valid(schema, text)
        assert g.validate(text) == want, text
        n_valid += want
        n_invalid += not want
    assert n_valid >= 20 and n_invalid >= 20


# -- which item schemas the matcher takes ------------------------------------------------------
@pytest.mark.parametrize("items", [
    {"type": "string"},
    {"type": "string", "minLength": 3},
    {"type": "string", "not": {"const": "x"}},
    {"$ref": "#/$defs/s"},
    {"type": "string", "format": "no-such-format"},  # an unknown format is any string
])
def test_string_items_compile_with_a_marked_item_lexeme(items):
    g = Grammar.from_json_schema({"$defs": {"s": {"type": "string"}}, "type": "array",
                                  "items": items, "uniqueItems": True})
    [i] = g.ir.unique_item_lexemes
    assert g.ir.lexemes[i].unique_item
    assert g.validate('["abc","abd"]') and not g.validate('["abc","abd","abc"]')


def test_the_mark_survives_embedding():
    """A Lark grammar with %json, embedded by a structural tag, keeps its marked items."""
    schema = json.dumps(STRINGS)
    for g in (Grammar.from_lark(f"start: %json {schema}"),
              Grammar.from_structural_tag({"type": "structural_tag", "format": {
                  "type": "grammar", "grammar": f"%llguidance {{}}\nstart: %json {schema}"}}),
              Grammar.from_structural_tag({"type": "structural_tag", "format": {
                  "type": "json_schema", "json_schema": STRINGS}})):
        assert g.ir.unique_item_lexemes
        assert g.validate('["a","b"]') and not g.validate('["a","a"]')


def test_grammars_without_such_arrays_have_no_tracker():
    for schema in ({"type": "array", "items": {"type": "string"}},
                   {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True}):
        g = Grammar.from_json_schema(schema)
        assert not g.ir.unique_item_lexemes
        assert Matcher(g, INFO)._unique is None


def test_bounded_strings_compile_with_or_without_max_items():
    schema = {**STRINGS, "maxItems": 50, "items": {"type": "string", "maxLength": 2}}
    g = Grammar.from_json_schema(schema)
    assert g.ir.unique_item_lexemes and g.ir.bounded_unique_items
    assert not Grammar.from_json_schema(STRINGS).ir.bounded_unique_items
    assert g.validate('["ab","a",""]') and not g.validate('["ab","a","ab"]')
    with pytest.raises(SchemaError, match="several ways"):
        Grammar.from_json_schema({**schema, "x-guidance": GENERAL})
    unlimited = {k: v for k, v in schema.items() if k != "maxItems"}
    for big in ({**schema, "maxItems": 1_000_001}, unlimited):
        assert Grammar.from_json_schema(big).ir.bounded_unique_items


@pytest.mark.parametrize("items, why", [
    ({"type": "string", "pattern": "^[ab]$"}, "several ways"),
    ({"type": "string", "format": "date"}, "several ways"),
    ({"type": "string", "not": {"pattern": "^$|[^a]|aa"}}, "several ways"),  # only "a"
])
def test_bounded_strings_with_general_escapes_stay_an_error(items, why):
    with pytest.raises(SchemaError, match=why):
        Grammar.from_json_schema({**STRINGS, "items": items, "x-guidance": GENERAL},
                                 strict_formats=True)
    Grammar.from_json_schema({**STRINGS, "items": items}, strict_formats=True)


@pytest.mark.parametrize("items, why", [
    ({"type": "object", "maxProperties": 3, "propertyNames": {"maxLength": 2}}, "fresh key"),
    ({"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer"}]}, "maxLength"),
])
def test_other_items_stay_a_schema_error_naming_why(items, why):
    schema = {"type": "object", "properties": {"t": {"type": "array", "items": items,
                                                      "uniqueItems": True}}}
    with pytest.raises(SchemaError) as e:
        Grammar.from_json_schema(schema, strict_formats=True)
    assert e.value.pointer == "/properties/t/uniqueItems" and e.value.keyword == "uniqueItems"
    assert why in str(e.value)


CONTAINS = {**STRINGS, "contains": {"const": "a"}}


def test_contains_with_one_matching_item_is_kept_distinct():
    g = Grammar.from_json_schema(CONTAINS)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [UNIQUE_ARRAY_NAME]
    assert g.validate('["b","a"]') and not g.validate('["a","a"]')
    assert not g.validate('["b","b","a"]') and not g.validate('["b"]')
    for more in ({"minContains": 2}, {"maxContains": 1}):
        with pytest.raises(SchemaError, match="could be used up"):
            Grammar.from_json_schema({**CONTAINS, **more})


@pytest.mark.parametrize("seed", range(3))
def test_contains_masks_equal_brute_force(seed):
    # the item that must match is forced only while none does: "a" is then fresh
    schema = {**CONTAINS, "maxItems": 3}
    assert _walk_against_brute_force(schema, seed, 14, _TAILS, _STEER) >= 1


# -- whole texts against jsonschema ------------------------------------------------------------
_ATOMS = ["a", "b", "A", "", "ab", " ", "é", "\"", "\\", "\n", "😀", "x,y", "]"]


def _spell(s: str, rng: random.Random, general: bool) -> str:
    """A JSON spelling of ``s``: minimal escapes, or (``general``) some \\uXXXX ones."""
    if not general:
        return json.dumps(s, ensure_ascii=False)
    out = []
    for ch in s:
        if ord(ch) < 0x10000 and rng.random() < 0.5:
            out.append(f"\\u{ord(ch):04x}" if rng.random() < 0.5 else f"\\u{ord(ch):04X}")
        else:
            out.append(json.dumps(ch, ensure_ascii=False)[1:-1])
    return '"' + "".join(out) + '"'


def _array(rng: random.Random, general: bool) -> str:
    n = rng.randint(0, 5)
    values = [rng.choice(_ATOMS) for _ in range(n)]
    sep = rng.choice([",", ", "]) if general else ","
    return "[" + sep.join(_spell(v, rng, general) for v in values) + "]"


SCHEMAS = [
    STRINGS,
    {**STRINGS, "minItems": 1, "maxItems": 4, "items": {"type": "string", "minLength": 1}},
    {"type": "object", "properties": {"a": STRINGS, "b": STRINGS}, "required": ["a", "b"],
     "additionalProperties": False},
    {"type": "array", "items": STRINGS},  # nested: each inner array has its own set
]


def _instance(i: int, rng: random.Random, general: bool) -> str:
    if i == 2:
        return f'{{"a":{_array(rng, general)},"b":{_array(rng, general)}}}'
    if i == 3:
        return "[" + ",".join(_array(rng, general) for _ in range(rng.randint(0, 3))) + "]"
    return _array(rng, general)


@pytest.mark.parametrize("general", [False, True])
@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_validate_agrees_with_jsonschema(i, general):
    schema = SCHEMAS[i]
    g = Grammar.from_json_schema({**schema, "x-guidance": GENERAL} if general else schema)
    rng = random.Random(i * 2 + general)
    n_dup = n_valid = 0
    for _ in range(400):
        text = _instance(i, rng, general)
        want = _valid(schema, text)
        if i != 2 or (json.loads(text)["a"] and json.loads(text)["b"]):
            n_valid += want
        if not want and g.lexparser.accepts(text.encode()):
            n_dup += 1  # a duplicate is the only reason left
        assert g.validate(text) == want, text
    assert n_dup > 20 and n_valid > 20


@pytest.mark.parametrize("options", [{"whitespace": "flexible"}, {"indent": 2}])
def test_validate_with_other_layouts(options):
    g = Grammar.from_json_schema(SCHEMAS[2], **options)
    rng = random.Random(7)
    n_dup = 0
    for _ in range(200):
        value = {"a": [rng.choice(_ATOMS) for _ in range(rng.randint(0, 4))],
                 "b": [rng.choice(_ATOMS) for _ in range(rng.randint(0, 4))]}
        text = json.dumps(value, ensure_ascii=False, indent=options.get("indent"))
        want = _valid(SCHEMAS[2], text)
        n_dup += not want
        assert g.validate(text) == want, text
    assert n_dup > 20


def test_equality_is_after_decoding_escapes():
    g = Grammar.from_json_schema({**STRINGS, "x-guidance": GENERAL})
    assert not g.validate('["\\u0041","A"]') and not g.validate('["A","\\u0041"]')
    assert not g.validate('["\\ud83d\\ude00","😀"]') and not g.validate('["\\"","\\u0022"]')
    assert g.validate('["\\u0041","B"]') and g.validate('["a","A"]')


def test_a_union_with_an_array_allowing_duplicates_is_held_to_uniqueness():
    """Documented departure: stricter than the schema there, never looser."""
    schema = {"anyOf": [STRINGS, {"type": "array", "items": {"type": "string"},
                                  "maxItems": 2}]}
    g = Grammar.from_json_schema(schema)
    assert _valid(schema, '["a","a"]') and not g.validate('["a","a"]')  # stricter
    assert not _valid(schema, '["a","a","b"]') and not g.validate('["a","a","b"]')
    assert g.validate('["a","b","c"]') and g.validate('["a","b"]')


def test_nested_arrays_keep_their_own_sets():
    g = Grammar.from_json_schema({"type": "array", "items": STRINGS})
    assert g.validate('[["a","b"],["a","b"],["b","a"]]')
    assert not g.validate('[["a"],["b","b"]]') and not g.validate('[["a","b","a"],[]]')


# -- masks: brute force over a small vocabulary ------------------------------------------------
VOCAB = [b"[", b"]", b",", b'"', b"a", b"b", b"\\", b'"a"', b'"a', b'a"', b'","', b'"]',
         b'"],["', b'""', b'"",""', b'\\"', b'a","a"', b'"a",', b" ", b""]
V_EOS = len(VOCAB) - 1
V_INFO = TokenizerInfo.from_token_bytes(VOCAB, [V_EOS])
_TAILS = [b'"', b"]", b",", b"b", b"a", b"["]


def _completable(schema: dict, g: Grammar, text: bytes, depth: int = 6,
                 tails: list[bytes] = _TAILS) -> bool:
    """Whether some completion of at most ``depth`` pieces of ``tails`` makes ``text`` valid
    for ``jsonschema`` (pieces the grammar rejects are pruned: that part is not on trial)."""
    lp = g.lexparser
    frontier = {text}
    for _ in range(depth + 1):
        nxt = set()
        for t in frontier:
            if lp.accepts(t) and _valid(schema, t):
                return True
            nxt.update(t + b for b in tails if lp.advance_bytes(lp.initial, t + b) is not None)
        frontier = nxt
    return False


def _walk_against_brute_force(schema: dict, seed: int, steps: int, tails: list[bytes],
                              steer: tuple[bytes, ...], vocab: list[bytes] = VOCAB,
                              depth: int = 6) -> int:
    """Walk ``vocab`` (its last token is EOS) under ``schema`` comparing every mask with brute
    force (completions of at most ``depth`` pieces of ``tails``) and checking that every masked
    token is rejected; returns the steps where brute force masked a token the grammar alone
    allows."""
    g = Grammar.from_json_schema(schema)
    rng = random.Random(seed)
    eos = len(vocab) - 1
    m = Matcher(g, V_INFO if vocab is VOCAB else TokenizerInfo.from_token_bytes(vocab, [eos]))
    out = b""
    seen_masked = 0
    for _ in range(steps):
        got = _allowed(m.compute_mask(), len(vocab))
        want, grammar_ok = set(), set()
        for t, tb in enumerate(vocab):
            if t == eos:
                if g.validate(out):
                    want.add(t)
            elif g.lexparser.advance_bytes(g.lexparser.initial, out + tb) is not None:
                grammar_ok.add(t)
                if _completable(schema, g, out + tb, depth, tails):
                    want.add(t)
        assert got == want, (out, sorted(vocab[t] for t in got ^ want))
        seen_masked += bool(grammar_ok - want)
        choices = [t for t in got if t != eos]
        if not choices:
            break
        steered = [c for c in choices if vocab[c] in steer]
        t = rng.choice(steered if steered and rng.random() < 0.8 else choices)
        m.consume(t)
        out += vocab[t]
        for bad in set(range(len(vocab))) - _allowed(m.compute_mask(), len(vocab)) - {eos}:
            probe = m.clone()
            with pytest.raises(TokenRejected):
                probe.consume(bad)
    return seen_masked


_STEER = (b"[", b'"a"', b'"a', b",", b'"a",', b'a"', b'""')


@pytest.mark.parametrize("schema", [STRINGS, {"type": "array", "items": STRINGS}])
@pytest.mark.parametrize("seed", range(4))
def test_masks_equal_brute_force(schema, seed):
    assert _walk_against_brute_force(schema, seed, 18, _TAILS, _STEER) >= 1


def test_masks_remove_exactly_the_duplicate_closes():
    g = Grammar.from_json_schema(STRINGS)
    m = Matcher(g, V_INFO)
    for tb in (b"[", b'"a",'):
        m.consume(VOCAB.index(tb))
    got = {VOCAB[t] for t in _allowed(m.compute_mask(), len(VOCAB))}
    assert b'"a"' not in got and b'"a",' not in got and b'"' in got and b'""' in got
    m.consume(VOCAB.index(b'"a'))  # an open item equal so far to "a"
    got = {VOCAB[t] for t in _allowed(m.compute_mask(), len(VOCAB))}
    assert b'"' not in got and b'"]' not in got and b'","' not in got and b'a"' in got
    with pytest.raises(TokenRejected, match="uniqueItems"):
        m.consume(VOCAB.index(b'"]'))
    m.consume(VOCAB.index(b'a"'))
    assert b'"' not in VOCAB[0] and m.validate_tokens([VOCAB.index(b'"]')]) == 0
    assert m.validate_tokens([VOCAB.index(b","), VOCAB.index(b'"a"')]) == 1
    assert m.validate_tokens([VOCAB.index(b","), VOCAB.index(b'"a",')]) == 1
    # two equal items inside one token
    m2 = Matcher(g, V_INFO)
    m2.consume(VOCAB.index(b"["))
    assert VOCAB.index(b'"",""') not in _allowed(m2.compute_mask(), len(VOCAB))


@pytest.mark.parametrize("general", [False, True])
def test_items_split_inside_a_character_or_an_escape(general):
    """An open item ending inside a UTF-8 sequence or an escape is decided byte by byte."""
    vocab = [b"[", b"]", b",", b'"', b"\xc3", b"\xa9", b'\xa9"', b'\xa9",', b"\\", b"u00e9",
             b'u00e9"', b"\\u00", b'e9"', b'"\xc3\xa9"', b""]
    info = TokenizerInfo.from_token_bytes(vocab, [len(vocab) - 1])
    g = Grammar.from_json_schema({**STRINGS, "x-guidance": GENERAL} if general else STRINGS)
    ids = {tb: i for i, tb in enumerate(vocab)}
    m = Matcher(g, info)
    m.consume_tokens([ids[b"["], ids[b'"\xc3\xa9"'], ids[b","], ids[b'"'], ids[b"\xc3"]])
    got = _allowed(m.compute_mask(), len(vocab))
    assert ids[b'\xa9"'] not in got and ids[b'\xa9",'] not in got and ids[b"\xa9"] in got
    if general:  # "\u00e9" is "é" too
        m.rollback(1)
        m.consume(ids[b"\\"])
        got = _allowed(m.compute_mask(), len(vocab))
        assert ids[b'u00e9"'] not in got and ids[b"u00e9"] in got
        m.consume(ids[b"u00e9"])
        assert ids[b'"'] not in _allowed(m.compute_mask(), len(vocab))
        m.rollback(2)
        m.consume(ids[b"\\u00"])
        assert ids[b'e9"'] not in _allowed(m.compute_mask(), len(vocab))


BOUNDED = {**STRINGS, "maxItems": 80, "items": {"type": "string", "maxLength": 2}}


def test_bounded_items_never_reach_a_used_up_prefix():
    """With maxLength 2, "a" then "b" is the whole item "ab": once "ab" is written, the
    token "b" after an open "a" leads to a state whose only completion is a duplicate."""
    vocab = [b"[", b"]", b",", b'"', b"a", b"b", b"c", b'b"', b'"ab', b"ab", b'"a', b""]
    info = TokenizerInfo.from_token_bytes(vocab, [len(vocab) - 1])
    ids = {tb: i for i, tb in enumerate(vocab)}
    g = Grammar.from_json_schema(BOUNDED)
    m = Matcher(g, info)
    m.consume_tokens([ids[b"["], ids[b'"ab'], ids[b'"'], ids[b","]])
    got = _allowed(m.compute_mask(), len(vocab))
    assert ids[b'"ab'] not in got and ids[b'"a'] in got and ids[b'"'] in got
    m.consume(ids[b'"a'])
    got = _allowed(m.compute_mask(), len(vocab))
    assert ids[b"b"] not in got and ids[b'b"'] not in got and ids[b"c"] in got
    with pytest.raises(TokenRejected, match="can only become one"):
        m.consume(ids[b"b"])
    m.rollback(1)
    m.consume(ids[b'"'])
    got = _allowed(m.compute_mask(), len(vocab))
    assert ids[b"ab"] not in got and ids[b"a"] in got  # "ab" would be whole again


def test_a_used_up_last_character_is_masked_at_its_first_byte():
    """64 one-character items U+00C0..U+00FF use every completion of the byte C3."""
    schema = {**STRINGS, "maxItems": 70, "items": {"type": "string", "maxLength": 1}}
    vocab = [b"[", b"]", b",", b'"', b"\xc3", b"\xc4"] + [bytes([b]) for b in range(0x80, 0xC0)]
    vocab += [b"a", b""]
    info = TokenizerInfo.from_token_bytes(vocab, [len(vocab) - 1])
    ids = {tb: i for i, tb in enumerate(vocab)}
    g = Grammar.from_json_schema(schema)
    m = Matcher(g, info)
    m.consume(ids[b"["])
    for k, cont in enumerate(range(0x80, 0xC0)):
        if k:
            m.consume(ids[b","])
        m.consume(ids[b'"'])
        got = _allowed(m.compute_mask(), len(vocab))
        assert ids[b"\xc3"] in got
        m.consume_tokens([ids[b"\xc3"], ids[bytes([cont])], ids[b'"']])
    m.consume_tokens([ids[b","], ids[b'"']])
    got = _allowed(m.compute_mask(), len(vocab))
    assert ids[b"\xc3"] not in got and ids[b"\xc4"] in got and ids[b"a"] in got
    with pytest.raises(TokenRejected):
        m.consume(ids[b"\xc3"])
    text = "[" + ",".join(json.dumps(chr(c), ensure_ascii=False) for c in range(0xC0, 0x100))
    assert g.validate(text + ',"a"]') and not g.validate(text + ',"À"]')


@pytest.mark.parametrize("seed", range(4))
def test_bounded_masks_equal_brute_force(seed):
    schema = {**STRINGS, "maxItems": 6, "items": {"type": "string", "maxLength": 2}}
    assert _walk_against_brute_force(schema, seed, 16, [*_TAILS, b"c"],
                                     (*_STEER, b"a", b"b")) >= 1


def test_rollback_clone_reset_follow_the_history():
    g = Grammar.from_json_schema(STRINGS)
    m = Matcher(g, V_INFO)
    a_item = VOCAB.index(b'"a"')
    m.consume_tokens([VOCAB.index(b"["), a_item, VOCAB.index(b",")])
    assert a_item not in _allowed(m.compute_mask(), len(VOCAB))
    twin = m.clone()
    m.rollback(2)  # back to "[": "a" was never written
    assert a_item in _allowed(m.compute_mask(), len(VOCAB))
    assert a_item not in _allowed(twin.compute_mask(), len(VOCAB))
    m.consume(a_item)
    m.consume(VOCAB.index(b","))
    with pytest.raises(TokenRejected):
        m.consume(a_item)
    m.reset()
    m.consume(VOCAB.index(b"["))
    m.consume(a_item)  # a fresh array after reset


def test_fill_masks_rows_equal_compute_mask():
    g = Grammar.from_json_schema(STRINGS)
    plain = Grammar.from_json_schema({"type": "array", "items": {"type": "string"}})
    a, b, c = Matcher(g, V_INFO), Matcher(g, V_INFO), Matcher(plain, V_INFO)
    for m in (a, c):
        m.consume_tokens([VOCAB.index(b"["), VOCAB.index(b'"a"'), VOCAB.index(b",")])
    out = np.zeros((3, V_INFO.n_words), dtype=np.uint32)
    fill_masks([a, b, c], out, n_threads=1)
    for row, m in zip(out, (a, b, c)):
        assert np.array_equal(row, m.compute_mask())
    assert not np.array_equal(out[0], out[2])  # the duplicate is masked in a's row only
    fill_masks([a, c], out, n_threads=1, remaining=[2, None])
    assert np.array_equal(out[0], a.compute_mask(2))


def test_budget_mask_never_leads_into_a_dead_end():
    """``["",`` then an open item: the shortest completion (``"]``) closes a duplicate of
    ``""``; the budget-aware mask falls back to the plain mask less the duplicates."""
    g = Grammar.from_json_schema(STRINGS)
    m = Matcher(g, V_INFO)
    m.consume_tokens([VOCAB.index(b"["), VOCAB.index(b'""'), VOCAB.index(b","),
                      VOCAB.index(b'"')])
    for remaining in (1, 2, 3, None):
        got = {VOCAB[t] for t in _allowed(m.compute_mask(remaining), len(VOCAB))}
        assert got and b'"' not in got and b'"]' not in got, remaining
    rng = random.Random(0)
    for _ in range(20):  # walks under a tight budget end complete, with no duplicate
        w = Matcher(g, V_INFO)
        out, left = b"", 12
        while True:
            allowed = _allowed(w.compute_mask(left), len(VOCAB))
            assert allowed, out
            if V_EOS in allowed:
                break
            t = rng.choice(sorted(allowed))
            w.consume(t)
            out, left = out + VOCAB[t], left - 1
        assert _valid(STRINGS, out.decode())


# -- the test suite, random walks, a real model ------------------------------------------------
@pytest.mark.parametrize("draft", sorted(sr.DRAFTS))
def test_suite_unique_items_cases_agree(draft):
    if not sr.available(draft):
        pytest.skip("JSON-Schema-Test-Suite not present")
    n_compiled = n_tracked = 0
    for file, case in sr.cases(draft):
        if file != "uniqueItems.json":
            continue
        try:
            g = Grammar.from_json_schema(case["schema"], **sr.options(draft, file))
        except SchemaError:
            continue
        n_compiled += 1
        names = {g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes}
        n_tracked += UNIQUE_ARRAY_NAME in names  # items of any values
        for t in case["tests"]:
            got = g.validate(json.dumps(t["data"], ensure_ascii=False))
            assert got == t["valid"], (case["description"], t["description"])
    assert n_compiled >= 3 and n_tracked >= 1


WALK_SCHEMAS = [
    STRINGS,
    {**STRINGS, "minItems": 2, "maxItems": 12, "items": {"type": "string", "maxLength": 1}},
    {**BOUNDED, "minItems": 3},
    {**STRINGS, "minItems": 3},
    {"type": "object", "properties": {"tags": STRINGS, "globs": {**STRINGS, "minItems": 2}},
     "required": ["tags", "globs"]},
    {"type": "array", "items": STRINGS, "maxItems": 3},
]


@pytest.mark.parametrize("whitespace", ["bounded", "compact", "flexible"])
@pytest.mark.parametrize("i", range(len(WALK_SCHEMAS)))
def test_random_walks_never_stop_in_a_dead_end(i, whitespace):
    schema = WALK_SCHEMAS[i]
    g = Grammar.from_json_schema(schema, whitespace=whitespace)
    assert g.ir.unique_item_lexemes
    rng = random.Random(i)
    n_done = 0
    for _ in range(40):
        out = random_walk(g, rng)  # asserts a non-empty mask at every step
        if out is None:
            continue
        n_done += 1
        assert _valid(schema, out.decode()), out
    assert n_done >= 10


def test_walk_vocabulary_masks_a_duplicate():
    g = Grammar.from_json_schema(STRINGS)
    m = Matcher(g, INFO)
    ids = {tb: i for i, tb in enumerate(TOKENS)}
    m.consume_tokens([ids[b"["], ids[b'"'], ids[b"a"], ids[b"b"], ids[b'",'], ids[b'"'],
                      ids[b"a"], ids[b"b"]])
    allowed = _allowed(m.compute_mask(), len(TOKENS))
    assert ids[b'"'] not in allowed and ids[b'",'] not in allowed and ids[b"a"] in allowed
    assert EOS not in allowed


@pytest.mark.parametrize("items", [{"type": "string"}, {"type": "string", "maxLength": 5}])
def test_smollm2_generates_distinct_strings(smollm2_file, items):
    import lexguide

    model = lexguide.Model.from_gguf(smollm2_file)
    schema = {"type": "array", "items": items, "uniqueItems": True, "minItems": 6, "maxItems": 8}
    prompt = "A JSON list of the word \"apple\" repeated eight times: "
    out = model.generate(prompt, json_schema=schema, max_tokens=120, temperature=0.0)
    text = out.text
    assert out.finish_reason == "stop", text
    value = json.loads(text)
    assert len(value) == len(set(value)) >= 6
    assert _valid(schema, text)
