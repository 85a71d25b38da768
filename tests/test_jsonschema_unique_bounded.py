"""``uniqueItems`` of strings from a bounded language (``maxLength``, ``pattern``, ``format``)
kept distinct by the matcher, which counts the values an open item can still complete
(``lexguide.jsonschema.unique_count``: canonical spellings, so ``"\\n"`` and ``"\\u000a"`` are
one value) and masks the tokens after which every completion is recorded, and a ``,`` after
which no fresh item is left.

Oracles: an exact completability test for arrays of distinct strings of a small finite
language spelled one way, the ``jsonschema`` validator for whole texts, random byte walks for
dead ends, and a mutation (counting spellings instead of values) that the value tests catch.
"""

from __future__ import annotations

import json
import random

import pytest

jsonschema = pytest.importorskip("jsonschema")

from test_jsonschema_unique_any import _agrees_with_jsonschema, _allowed, _valid
from test_jsonschema_unique_counted import oracle_walks
from test_jsonschema_unique_values import walks_end_valid

from lexguide.engine import Matcher, TokenizerInfo
from lexguide.engine.grammar import Grammar
from lexguide.errors import SchemaError, TokenRejected
from lexguide.grammar.ir import UNIQUE_BOUNDED_ITEM_NAME
from lexguide.jsonschema import unique_count
from lexguide.jsonschema.unique_count import regex_value_count


def strings(items: dict, **kw) -> dict:
    return {"type": "array", "items": {"type": "string", **items}, "uniqueItems": True, **kw}


DATES = strings({"format": "date"})
UUIDS = strings({"format": "uuid"})
CODES = strings({"pattern": "^[a-z]{1,3}$"})
AB = strings({"pattern": "^[ab]{1,2}$"})  # six values
SHORT = strings({"maxLength": 2, "pattern": "^[a-c]*$"})  # 13 values
CONTROL = strings({"pattern": '^[\n\t"]$'})  # three values, each with several spellings

BYTES = [bytes([b]) for b in range(256)] + [b""]
B_INFO = TokenizerInfo.from_token_bytes(BYTES, [256])


def _bytes_allowed(m: Matcher) -> set[bytes]:
    return {BYTES[t] for t in _allowed(m.compute_mask(), len(BYTES))} - {b" ", b"\n", b"\r",
                                                                         b"\t"}


def _write(g: Grammar, text: bytes) -> Matcher:
    m = Matcher(g, B_INFO)
    for b in text:
        m.consume(b)
    return m


@pytest.mark.parametrize("schema", [DATES, UUIDS, CODES, AB, SHORT, CONTROL,
                                    strings({"maxLength": 4}, minItems=30)])
def test_bounded_strings_compile_with_a_counted_item_lexeme(schema):
    g = Grammar.from_json_schema(schema, strict_formats=True)
    [i] = g.ir.unique_item_lexemes
    assert g.ir.lexemes[i].name == UNIQUE_BOUNDED_ITEM_NAME


def test_min_items_beyond_the_language_is_a_located_error():
    for schema, n in ((AB, 6), (CONTROL, 3), (strings({"maxLength": 0}), 1)):
        Grammar.from_json_schema({**schema, "minItems": n})
        with pytest.raises(SchemaError, match=f"minItems {n + 1} needs more than the {n} "
                                              "strings") as e:
            Grammar.from_json_schema({"type": "object", "properties": {
                "t": {**schema, "minItems": n + 1}}})
        assert e.value.pointer == "/properties/t/uniqueItems"


def test_the_compile_time_count_is_of_values():
    g = Grammar.from_json_schema(CONTROL)
    [i] = g.ir.unique_item_lexemes
    x = g.ir.lexemes[i].rx
    assert regex_value_count(x, 100) == 3
    assert regex_value_count(x, 2) == 2  # saturates at the cap


def test_a_used_up_language_masks_the_comma():
    g = Grammar.from_json_schema(AB)
    m = _write(g, b'["a","b","aa","ab","ba"')
    assert _bytes_allowed(m) == {b",", b"]"}
    m.consume(ord(","))
    m.consume(ord('"'))
    assert _bytes_allowed(m) == {b"b"}
    m.consume(ord("b"))
    assert _bytes_allowed(m) == {b"b"}  # "b" and "ba" are written
    m.consume_tokens(b'b"')
    assert _bytes_allowed(m) == {b"]"}  # all six written: no ","
    with pytest.raises(TokenRejected, match="uniqueItems"):
        m.clone().consume(ord(","))


def test_several_spellings_of_one_value_count_once():
    """\n, \u000a and \u000A are one value: with "\n" and "\t" written (in any
    spelling) only "\"" is fresh, and once it is written no "," is left."""
    g = Grammar.from_json_schema(CONTROL)
    assert g.validate('["\\u000A"]') and not g.validate('["\\u0022"]')  # the grammar's
    m = _write(g, b'["\\u000A","\\t",')
    m.consume(ord('"'))
    assert _bytes_allowed(m) == {b"\\"}
    m.consume(ord("\\"))
    assert _bytes_allowed(m) == {b'"'}  # not n, t, nor u (\u000a, \u0009 are written)
    m.consume_tokens(b'""')
    assert _bytes_allowed(m) == {b"]"}
    m = _write(g, b'["\\n","\\"","\\u00')
    assert _bytes_allowed(m) == {b"0"}
    m.consume(ord("0"))
    assert _bytes_allowed(m) == {b"9"}  # not a or A: "\n" is written
    assert g.validate('["\\n","\\"","\\t"]')
    assert not g.validate('["\\n","\\"","\\u000a"]')


def test_counting_spellings_instead_of_values_is_caught(monkeypatch):
    """The mutation: uppercase hex digits counted beside lowercase ones (two spellings of one
    value). The comma after three values is then allowed: a dead end the test above sees."""
    real = unique_count.ValueCounter._children

    def spellings(self, node):
        out = real(self, node)
        state, esc, _ = node
        if esc.startswith(b"\\u"):
            for b in b"ABCDEF":
                nxt = self._step(state, b)
                if nxt != self._dead:
                    out.append((b, (nxt, esc + bytes((b,)) if len(esc) < 5 else b"",
                                    frozenset())))
        return out

    monkeypatch.setattr(unique_count.ValueCounter, "_children", spellings)
    # the same language in another schema: a matcher whose counts are not memoised yet
    g = Grammar.from_json_schema(strings({"pattern": '^(?:[\n\t"])$'}))
    m = _write(g, b'["\\n","\\t","\\""')
    assert b"," in _bytes_allowed(m)  # wrong: no fourth value exists


def _completable(prefix: bytes, spellings: list[str], min_items: int) -> bool:
    """Exact: whether ``prefix`` (compact JSON) extends to an array of at least ``min_items``
    distinct values spelled as in ``spellings`` (JSON texts holding no ``,`` or ``]``, one
    per value)."""
    text = prefix.decode()
    if not text.startswith("["):
        return False
    body = text[1:]

    def values(parts):
        return parts if all(p in spellings for p in parts) and len(set(parts)) == len(
            parts) else None

    if "]" in body:
        done = values(body[:-1].split(",") if body != "]" else [])
        return body.index("]") == len(body) - 1 and done is not None and len(done) >= min_items
    parts = body.split(",")
    done = values(parts[:-1])
    if done is None:
        return False
    cur = parts[-1]
    fresh = [w for w in spellings if w not in done]
    if body == "":
        return min_items == 0 or len(fresh) >= min_items
    return len(fresh) >= max(1, min_items - len(done)) and any(w.startswith(cur) for w in fresh)


VOCAB = [b"[", b"]", b",", b'"', b"a", b"b", b'"a', b'a"', b'b"', b'"ab"', b'",', b'","', b'"]',
         b"ab", b'"b",', b"c", b'c"', b'"c', b""]


def _oracle_walks(schema: dict, lang: list, seeds: range,
                  vocab: list[bytes] = VOCAB) -> tuple[int, int]:
    spellings = [json.dumps(v) for v in lang]
    min_items = schema.get("minItems", 0)
    return oracle_walks(schema, vocab, lambda text: _completable(text, spellings, min_items),
                        seeds, 60, 0.95)


@pytest.mark.parametrize("schema, lang", [
    (AB, ["a", "b", "aa", "ab", "ba", "bb"]),
    ({**AB, "minItems": 6}, ["a", "b", "aa", "ab", "ba", "bb"]),
    ({**SHORT, "minItems": 4}, [""] + [x + y for x in "abc" for y in ["", *"abc"]]),
])
def test_masks_equal_the_exact_oracle(schema, lang):
    g = Grammar.from_json_schema(schema)
    [i] = g.ir.unique_item_lexemes
    assert regex_value_count(g.ir.lexemes[i].rx, 100) == len(lang)
    bad, masked = _oracle_walks(schema, lang, range(4))
    assert bad == 0
    assert masked >= 5  # the counting was needed


def test_a_walk_without_the_comma_check_is_caught(monkeypatch):
    """The mutation: no "," is ever masked. The oracle then disagrees (a dead end)."""
    from lexguide.engine.unique_items import UniqueItems

    monkeypatch.setattr(UniqueItems, "_no_fresh_string", lambda self, values, after: False)
    bad, _ = _oracle_walks({**AB, "minItems": 6}, ["a", "b", "aa", "ab", "ba", "bb"], range(2))
    assert bad >= 1


@pytest.mark.parametrize("layout", [{}, {"whitespace": "flexible"}, {"indent": 2}])
@pytest.mark.parametrize("schema, prefer", [
    ({**AB, "minItems": 6}, b'ab",'), ({**CONTROL, "minItems": 3}, b'\\ntu0,"'),
    ({**SHORT, "minItems": 13}, b'abc",'), (strings({"pattern": "^[0-2]{2}$"}, minItems=9),
                                            b'012",'),
    (strings({"maxLength": 1}, minItems=2, maxItems=4), b'a",'),
])
def test_byte_walks_never_stop_in_a_dead_end(schema, prefer, layout):
    walks_end_valid(schema, layout, prefer, 3)


def _date(rng: random.Random) -> str:
    return f"20{rng.randint(20, 21)}-0{rng.randint(1, 2)}-{rng.randint(10, 12)}"


def _spell(s: str, rng: random.Random) -> str:
    """A JSON spelling of ``s`` the default escapes allow: short or \\u escapes at random."""
    out = json.dumps(s)
    if rng.random() < 0.5:
        out = out.replace("\\n", rng.choice(["\\u000a", "\\u000A", "\\n"]))
    return out


@pytest.mark.parametrize("schema, make", [
    (DATES, _date),
    (strings({"pattern": "^[a\n]{1,2}$"}),
     lambda rng: "".join(rng.choice("a\n") for _ in range(rng.randint(1, 2)))),
    (CODES, lambda rng: "".join(rng.choice("ab") for _ in range(rng.randint(1, 3)))),
])
def test_validate_agrees_with_jsonschema(schema, make):
    g = Grammar.from_json_schema(schema)
    rng = random.Random(11)

    def text() -> str:
        items = [make(rng) for _ in range(rng.randint(0, 6))]
        if items and rng.random() < 0.3:
            items.append(rng.choice(items))  # a duplicate, maybe spelled otherwise
        return "[" + ",".join(_spell(s, rng) for s in items) + "]"

    _agrees_with_jsonschema(g, schema, (text() for _ in range(300)))


def test_dates_near_exhaustion():
    """A month of one day: "2024-02-2x" once 20..29 are written leaves no "2" there."""
    g = Grammar.from_json_schema(strings({"format": "date", "pattern": "^2024-02-2"}))
    days = [f"2024-02-2{d}" for d in range(10) if d != 9]
    m = _write(g, ("[" + ",".join(f'"{d}"' for d in days) + ',"2024-02-2').encode())
    assert _bytes_allowed(m) == {b"9"}  # 2024-02-29: a leap year
    m.consume_tokens(b'9"')
    assert _bytes_allowed(m) == {b"]"}


# -- finite sets of strings, integers, booleans and null ----------------------------------------
MIXED_VALUES = ["a", "b", "ab", 1, 10, 11, 0, -1, True, False, None, "c", "\n", "t"]
MIXED = {"type": "array", "items": {"enum": MIXED_VALUES}, "uniqueItems": True}


def test_mixed_finite_sets_compile_with_a_finite_bracket():
    from lexguide.jsonschema.unique import UNIQUE_STRINGS_ARRAY_NAME

    g = Grammar.from_json_schema(MIXED)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [
        UNIQUE_STRINGS_ARRAY_NAME]
    assert g.validate('[1,"a",true,"t",null,0,-1]')
    assert not g.validate('[1,"a",true,1]') and not g.validate('["\\n","\\u000a"]')
    for values, why in ((["x", 2.5, *MIXED_VALUES], "number 2.5 spelled in several ways"),
                        ([1.0, *MIXED_VALUES[:3], *MIXED_VALUES[4:]], "spelled in several")):
        with pytest.raises(SchemaError, match=why):
            Grammar.from_json_schema({**MIXED, "items": {"enum": values}})
    with pytest.raises(SchemaError, match="minItems 15 needs more than the 14 values"):
        Grammar.from_json_schema({**MIXED, "minItems": 15})


MIXED_VOCAB = [b"[", b"]", b",", b'"', b"a", b"b", b'"a"', b"1", b"0", b"10", b"true", b"t",
               b"rue", b"null", b"-", b"-1", b'",', b"1,", b"0]", b"false", b'"t"', b'"\\n"',
               b'"c"', b""]


@pytest.mark.parametrize("min_items", [0, 14])
def test_mixed_masks_equal_the_exact_oracle(min_items):
    bad, masked = _oracle_walks({**MIXED, "minItems": min_items}, MIXED_VALUES, range(4),
                                MIXED_VOCAB)
    assert bad == 0
    assert masked >= 5  # the finite-values check was needed


def test_mixed_without_the_used_up_check_is_caught(monkeypatch):
    """The mutation: an open item or a "," never counts as used up."""
    from lexguide.engine.unique_items import UniqueItems

    monkeypatch.setattr(UniqueItems, "_value_used_up", lambda self, values, item, after: False)
    bad, _ = _oracle_walks({**MIXED, "minItems": 14}, MIXED_VALUES, range(2), MIXED_VOCAB)
    assert bad >= 1


def test_a_used_up_number_prefix_is_masked():
    g = Grammar.from_json_schema(MIXED)
    m = _write(g, b"[1,10,")
    m.consume(ord("1"))
    assert _bytes_allowed(m) == {b"1"}  # 1 and 10 written: only 11
    m.consume_tokens(b"1,true,false,")
    assert b"t" not in _bytes_allowed(m) and b'"' in _bytes_allowed(m)


@pytest.mark.parametrize("layout", [{}, {"whitespace": "flexible"}, {"indent": 2}])
def test_mixed_byte_walks_never_stop_in_a_dead_end(layout):
    walks_end_valid({**MIXED, "minItems": 14}, layout, b'01-abtrufalsen",\\', 4)


def test_mixed_validate_agrees_with_jsonschema():
    g = Grammar.from_json_schema(MIXED)
    rng = random.Random(5)

    def text() -> str:  # spelled as the grammar spells them: integers by their digits
        items = [rng.choice(MIXED_VALUES) for _ in range(rng.randint(0, 6))]
        if items and rng.random() < 0.3:
            items.append(rng.choice(items))
        return "[" + ",".join(_spell(v, rng) if isinstance(v, str) else json.dumps(v)
                              for v in items) + "]"

    _agrees_with_jsonschema(g, MIXED, (text() for _ in range(300)))



def test_an_escape_after_non_ascii_text_is_checked():
    """"é" then "é\n": once "é\n" is written, a backslash after "é leads only to it."""
    g = Grammar.from_json_schema(strings({"pattern": "^é\n?$"}))
    m = _write(g, '["é\\n","'.encode())
    m.consume_tokens("é".encode())
    assert _bytes_allowed(m) == {b'"'}  # not "\\": \n and \u000a are "é\n" again
    with pytest.raises(TokenRejected):
        m.clone().consume(ord("\\"))


@pytest.mark.parametrize("schema", [
    strings({"pattern": "^[ab]{1,3}$"}, minItems=14),  # all 14 values
    strings({"maxLength": 1, "pattern": "^[a-e\n]*$"}, minItems=7),  # "\n" in any spelling
    {**MIXED, "minItems": 14},
    {"type": "array", "items": {"type": "number", "minimum": -1, "maximum": 1,
                                "multipleOf": 0.5}, "uniqueItems": True, "minItems": 5},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 40,
                                "multipleOf": 3}, "uniqueItems": True, "minItems": 14},
    {"type": "array", "items": {"type": "object", "maxProperties": 1,
                                "propertyNames": {"pattern": "^[ab]+$"},
                                "additionalProperties": {"type": "boolean"}},
     "uniqueItems": True, "minItems": 6},
    strings({"format": "date", "pattern": "^2024-01-0"}, minItems=9),  # all nine days
])
def test_smollm2_vocabulary_walks_use_up_the_domains(smollm2_file, schema):
    """Random walks over SmolLM2's whole vocabulary (short tokens preferred, so the domains
    get used up): every allowed token is consumed without a rejection (the candidate filters
    of the masks agree with the exact check of consume), no mask is empty, and every text
    ended is valid."""
    import lexguide

    info = TokenizerInfo.from_tokenizer(lexguide.Tokenizer.from_gguf(smollm2_file))
    g = Grammar.from_json_schema(schema, strict_formats=True)
    n_done = 0
    for seed in range(2):
        rng = random.Random(seed)
        m = Matcher(g, info)
        out = b""
        for _ in range(400):
            ids = sorted(_allowed(m.compute_mask(), info.vocab_size))
            assert ids, out
            choices = [i for i in ids if i not in info.eos_ids]
            if len(choices) < len(ids) and (not choices or rng.random() < 0.5):
                break  # the end is allowed
            short = [i for i in choices if len(info.token_bytes[i]) <= 2]
            t = rng.choice(short if short and rng.random() < 0.8 else choices)
            m.consume(t)
            out += info.token_bytes[t]
        else:
            continue
        n_done += 1
        assert g.validate(out) and _valid(schema, out), out
    assert n_done >= 1
