"""``uniqueItems`` of integers from a bounded range too large for the grammar: kept distinct by
the matcher, which counts the completions of an open item (``lexguide.engine.unique_items``,
``UniqueItems._integers_dead``) and masks the tokens after which every completion is recorded,
and a ``,`` after which no fresh integer is left.

Oracles: an exact completability test for arrays of distinct integers of a range (each value
has one spelling: decimal digits), the ``jsonschema`` validator for whole texts, random walks
for dead ends.
"""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal

import pytest

jsonschema = pytest.importorskip("jsonschema")

from test_jsonschema_unique_any import _agrees_with_jsonschema, _allowed, _valid
from test_jsonschema_unique_values import walks_end_valid

from lexguide.engine import Matcher, TokenizerInfo
from lexguide.engine.grammar import Grammar
from lexguide.engine.unique_values import value_key
from lexguide.errors import SchemaError
from lexguide.jsonschema.unique import UNIQUE_INTEGERS_ARRAY_NAME, UNIQUE_NUMBERS_ARRAY_NAME


def ints(lo: int, hi: int, step: int | float | None = None, **kw) -> dict:
    items = {"type": "integer", "minimum": lo, "maximum": hi}
    return {"type": "array", "items": items if step is None else {**items, "multipleOf": step},
            "uniqueItems": True, **kw}


BYTES = [bytes([b]) for b in range(256)] + [b""]
B_INFO = TokenizerInfo.from_token_bytes(BYTES, [256])


def _write(g: Grammar, items: list[int], info=B_INFO) -> Matcher:
    m = Matcher(g, info)
    text = json.dumps(items, separators=(",", ":")).encode()[:-1]
    for b in text:
        m.consume(b)
    return m


def _bytes_allowed(m: Matcher) -> set[bytes]:
    """The one-byte tokens allowed, whitespace aside."""
    return {BYTES[t] for t in _allowed(m.compute_mask(), len(BYTES))} - {b" ", b"\n", b"\r",
                                                                         b"\t"}


@pytest.mark.parametrize("schema", [
    ints(1, 65535), ints(1, 300), ints(-3, 12), ints(0, 100, minItems=101),
    {"type": "array", "items": {"type": "integer", "minimum": 0, "exclusiveMaximum": 1000},
     "uniqueItems": True},
])
def test_integer_ranges_compile_with_a_counted_bracket(schema):
    g = Grammar.from_json_schema(schema)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [
        UNIQUE_INTEGERS_ARRAY_NAME]
    n = schema.get("minItems", 3)
    lo = schema["items"]["minimum"]
    assert g.validate(json.dumps(list(range(lo, lo + n))))
    assert not g.validate(json.dumps([*range(lo, lo + n - 1), lo]))


@pytest.mark.parametrize("items, why", [
    ({"type": "integer", "minimum": 1, "maximum": 300, "not": {"multipleOf": 3}}, "uniqueItems"),
    ({"anyOf": [{"type": "number", "maximum": 1}, {"type": "string", "maxLength": 2}]},
     "uniqueItems"),
])
def test_ranges_not_counted_stay_a_located_error(items, why):
    with pytest.raises(SchemaError, match=why):
        Grammar.from_json_schema({"type": "array", "items": items, "uniqueItems": True})
    with pytest.raises(SchemaError, match="minItems 302"):
        Grammar.from_json_schema(ints(1, 300, minItems=302))


@pytest.mark.parametrize("step, size", [(3, 100), (7, 9362), (2.5, 60), (0.5, 300)])
def test_ranges_with_multiple_of_are_counted(step, size):
    g = Grammar.from_json_schema(ints(1, 300 if size <= 300 else 65535, step))
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [
        UNIQUE_INTEGERS_ARRAY_NAME]
    first = 5 if step == 2.5 else int(step) if step >= 1 else 1
    assert g.validate(f"[{first},{2 * first}]") and not g.validate(f"[{first},{first}]")
    assert not g.validate(f"[{first}.0]") and not g.validate(f"[{first + 1}]") == (step != 0.5)
    with pytest.raises(SchemaError, match=f"minItems {size + 1} needs more than the {size}"):
        Grammar.from_json_schema(ints(1, 300 if size <= 300 else 65535, step,
                                      minItems=size + 1))
    Grammar.from_json_schema(ints(1, 300 if size <= 300 else 65535, step, minItems=size))


def test_a_used_up_multiple_is_masked():
    g = Grammar.from_json_schema(ints(1, 300, 3))
    m = _write(g, [3, 30, 33, 36, 300])
    m.consume_tokens(b",3")
    assert _bytes_allowed(m) == {b"9"}  # 3, 30, 33, 36 and 300 written: 39 is left
    m.consume(ord("9"))
    assert _bytes_allowed(m) == {b",", b"]"}
    m.consume(ord(","))
    assert b"3" not in _bytes_allowed(m)  # every multiple of 3 starting with 3 is written
    m = _write(g, [v for v in range(3, 301, 3) if v != 150])
    m.consume(ord(","))
    assert _bytes_allowed(m) == {b"1"}
    m.consume_tokens(b"150")
    assert _bytes_allowed(m) == {b"]"}


def test_the_range_is_spelled_one_way():
    # the count is of spellings: each value must have exactly one for it to count values
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer", "minimum": -5,
                                                            "maximum": 300}})
    for text in ("[1.0]", "[-0]", "[1e0]", "[01]", "[1E0]", "[301]", "[-6]"):
        assert not g.validate(text), text
    assert g.validate("[-5,0,300]")


def test_a_near_exhausted_range_leaves_only_its_fresh_values():
    g = Grammar.from_json_schema(ints(1, 300))
    left = [v for v in range(1, 301) if v not in (7, 250)]
    m = _write(g, left)
    assert _bytes_allowed(m) == {b",", b"]"}
    m.consume(ord(","))
    assert _bytes_allowed(m) == {b"2", b"7"}  # 1..., 3..., 4..., all written
    m.consume(ord("2"))
    assert _bytes_allowed(m) == {b"5"}  # 2, 2x and 2xx written but for 250
    m.consume(ord("5"))
    assert _bytes_allowed(m) == {b"0"}
    m.consume(ord("0"))
    assert _bytes_allowed(m) == {b",", b"]"}
    m.consume(ord(","))
    assert _bytes_allowed(m) == {b"7"}
    m.consume(ord("7"))
    assert _bytes_allowed(m) == {b"]"}  # all 300 written: no "," and no more digits
    m.consume(ord("]"))
    assert m.is_accepting()


def test_unique_ports_mask_a_used_up_prefix():
    g = Grammar.from_json_schema(ints(1, 65535))
    m = _write(g, [65535, 6553, 65530, 65531, 65532, 65533])
    m.consume_tokens(b",6553")
    assert _bytes_allowed(m) == {b"4"}  # 6553, 65530..65533 and 65535 written
    m = _write(g, [1, 2])
    m.consume_tokens(b",")
    assert {b"1", b"2", b"3", b"9"} <= _bytes_allowed(m)  # 10, 20, ... are fresh


def test_the_boundary_of_a_small_range():
    # minItems equal to the range's size: every value must be written, in any order
    schema = ints(0, 3, minItems=4)
    g = Grammar.from_json_schema(schema)
    m = _write(g, [3, 0, 2])
    m.consume(ord(","))
    assert _bytes_allowed(m) == {b"1"}
    # a range of 20 values, all needed (counted by the matcher, not built by the grammar)
    schema = ints(-3, 16, minItems=20)
    g = Grammar.from_json_schema(schema)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [
        UNIQUE_INTEGERS_ARRAY_NAME]
    m = _write(g, [v for v in range(-3, 17) if v != -2])
    assert _bytes_allowed(m) == {b","}  # 19 items < minItems 20
    m.consume(ord(","))
    assert _bytes_allowed(m) == {b"-"}
    m.consume(ord("-"))
    assert _bytes_allowed(m) == {b"2"}


def _completable(prefix: bytes, lo: int, hi: int, min_items: int, step: int = 1) -> bool:
    """Exact: whether ``prefix`` (compact JSON) extends to an array of at least ``min_items``
    distinct integers of ``lo..hi``, each written as decimal digits."""
    text = prefix.decode()
    if not text.startswith("["):
        return False
    body = text[1:]
    domain = {str(v): v for v in range(lo, hi + 1) if v % step == 0}
    if "]" in body:
        items = body[:-1].split(",") if body != "]" else []
        return body.index("]") == len(body) - 1 and all(p in domain for p in items) and \
            len(set(items)) == len(items) >= min_items
    parts = body.split(",")
    done, cur = parts[:-1], parts[-1]
    if any(p not in domain for p in done) or len(set(done)) < len(done):
        return False
    fresh = [s for s in domain if s not in done]
    if body == "":
        return min_items == 0 or len(fresh) >= min_items
    need = max(1, min_items - len(done))
    return any(s.startswith(cur) for s in fresh) and len(fresh) >= need


VOCAB = [b"[", b"]", b",", b"-", *(bytes([c]) for c in b"0123456789"), b"1,", b"12", b"0]",
         b"10", b"2,1", b",1", b"3]", b"-1", b"16", b""]


def oracle_walks(schema: dict, vocab: list[bytes], completable, seeds: range, steps: int,
                 going: float) -> tuple[int, int]:
    """Walks ``vocab`` (its last token EOS) under ``schema``, comparing every mask with the
    exact oracle ``completable(text)``; ``(masks that differ, steps where the oracle masked a
    token the grammar alone allows)``. Steered away from ``]`` with probability ``going``, so
    the items are used up."""
    g = Grammar.from_json_schema(schema)
    info = TokenizerInfo.from_token_bytes(vocab, [len(vocab) - 1])
    eos = len(vocab) - 1
    bad = masked = 0
    for seed in seeds:
        rng = random.Random(seed)
        m = Matcher(g, info)
        out = b""
        for _ in range(steps):
            got = _allowed(m.compute_mask(), len(vocab))
            want = {t for t, tb in enumerate(vocab) if t != eos and completable(out + tb)}
            if g.validate(out) and _valid(schema, out):
                want.add(eos)
            grammar_ok = {t for t, tb in enumerate(vocab[:-1])
                          if g.lexparser.advance_bytes(g.lexparser.initial, out + tb)}
            masked += bool(grammar_ok - want)
            bad += got != want
            choices = sorted(got - {eos})
            if not choices:
                break
            ahead = [t for t in choices if b"]" not in vocab[t]]
            t = rng.choice(ahead if ahead and rng.random() < going else choices)
            m.consume(t)
            out += vocab[t]
    return bad, masked


@pytest.mark.parametrize("lo, hi, min_items, step", [
    (-3, 16, 0, 1), (-3, 16, 20, 1), (0, 40, 12, 1), (5, 30, 26, 1),
    (-3, 40, 0, 3), (-3, 40, 15, 3), (-20, 100, 13, 10)])
def test_masks_equal_the_exact_oracle(lo, hi, min_items, step):
    bad, masked = oracle_walks(ints(lo, hi, None if step == 1 else step, minItems=min_items),
                               VOCAB, lambda text: _completable(text, lo, hi, min_items, step),
                               range(4), 200, 0.97)
    assert bad == 0
    assert masked >= 5  # the counting was needed


@pytest.mark.parametrize("layout", [{}, {"whitespace": "flexible"}, {"indent": 2}])
@pytest.mark.parametrize("schema", [ints(1, 300, minItems=40), ints(-3, 16, minItems=20),
                                    ints(0, 3, minItems=4), ints(1, 65535, minItems=30)])
def test_byte_walks_never_stop_in_a_dead_end(schema, layout):
    walks_end_valid(schema, layout, b"-0123456789,", 3)


@pytest.mark.parametrize("schema", [ints(-3, 300), ints(1, 65535, minItems=2)])
def test_validate_agrees_with_jsonschema(schema):
    g = Grammar.from_json_schema(schema)
    rng = random.Random(7)

    def text() -> str:
        items = [rng.choice((rng.randint(-5, 305), rng.randint(0, 70000), rng.randint(-3, 12)))
                 for _ in range(rng.randint(0, 8))]
        if items and rng.random() < 0.4:
            items.append(rng.choice(items))  # a duplicate
        return json.dumps(items, separators=(",", ":"))

    _agrees_with_jsonschema(g, schema, (text() for _ in range(300)))


def test_a_union_with_an_array_that_can_run_out_is_an_error():
    with pytest.raises(SchemaError, match="union"):
        Grammar.from_json_schema({"anyOf": [ints(1, 300), {"type": "array", "items": {
            "type": "boolean"}}]})


# -- numbers with a bound or a multipleOf: values listed by value ------------------------------
def nums(**items) -> dict:
    return {"type": "array", "items": {"type": "number", **items}, "uniqueItems": True}


HALVES = nums(minimum=-1, maximum=1, multipleOf=0.5)  # five values, each spelled many ways


@pytest.mark.parametrize("schema", [HALVES, nums(minimum=0, maximum=1), nums(maximum=1),
                                    nums(minimum=-5, exclusiveMaximum=3.5)])
def test_bounded_numbers_compile_with_their_bracket(schema):
    g = Grammar.from_json_schema(schema)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [
        UNIQUE_NUMBERS_ARRAY_NAME]
    assert g.validate("[0.5,1]") and not g.validate("[0.5,0.50]")
    assert not g.validate("[1,1.0]")


@pytest.mark.parametrize("items", [{"type": "integer", "maximum": 1000},
                                   {"type": "integer", "minimum": -5},
                                   {"type": "number", "multipleOf": 0.5},
                                   {"type": "number", "multipleOf": 2}])
def test_numbers_with_one_bound_or_a_step_are_listed_by_value(items):
    schema = {"type": "array", "items": items, "uniqueItems": True, "minItems": 12}
    g = Grammar.from_json_schema(schema)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [
        UNIQUE_NUMBERS_ARRAY_NAME]
    assert g.validate("[2,4,6,8,10,12,14,16,18,20,22,24]")
    assert not g.validate("[2,4,6,8,10,12,14,16,18,20,22,2]")
    walks_end_valid(schema, {}, b"-.0125,", 8)


def test_bounded_numbers_refused_or_counted():
    with pytest.raises(SchemaError, match="minItems 6 needs more than the 5 numbers"):
        Grammar.from_json_schema({**HALVES, "minItems": 6})
    Grammar.from_json_schema({**HALVES, "minItems": 5})
    Grammar.from_json_schema(nums(minimum=0, maximum=100, multipleOf=0.01))  # 10,001 values
    micro = nums(minimum=0, maximum=100, multipleOf=0.0001)  # 1,000,001 values
    with pytest.raises(SchemaError, match="1000001 numbers in an array without a maxItems"):
        Grammar.from_json_schema(micro)
    Grammar.from_json_schema({**micro, "maxItems": 999_999})
    with pytest.raises(SchemaError, match="numbers with a not"):
        Grammar.from_json_schema(nums(maximum=1, **{"not": {"multipleOf": 0.5}}))


def test_a_used_up_value_is_masked_in_any_spelling():
    g = Grammar.from_json_schema(HALVES)
    m = _write_text(g, b"[1,-0.5,0,0.5,")
    assert _bytes_allowed(m) == {b"-"}  # only -1 is left
    m.consume(ord("-"))
    assert _bytes_allowed(m) == {b"1"}
    m = _write_text(g, b"[0.5,0")
    assert b"." in _bytes_allowed(m)  # 0.0 is 0: fresh
    m.consume(ord("."))
    assert _bytes_allowed(m) == {b"0"}  # 0.5 written: 0.0 (zero) only
    m = _write_text(Grammar.from_json_schema(nums(minimum=0, maximum=1)), b"[1,")
    assert _bytes_allowed(m) == {b"0"}  # 1, 1.0, 1.00 ... are all 1


def _write_text(g: Grammar, text: bytes) -> Matcher:
    m = Matcher(g, B_INFO)
    for b in text:
        m.consume(b)
    return m


def _half_completable(prefix: bytes, min_items: int) -> bool:
    """Exact for HALVES: ``prefix`` (compact) extends to at least ``min_items`` distinct
    values of -1, -0.5, 0, 0.5, 1 spelled as the grammar spells them (no exponent, no
    leading zero, no -0; trailing fraction zeros allowed)."""
    spelling = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")
    domain = {Decimal(v) for v in ("-1", "-0.5", "0", "0.5", "1")}

    def value(p: str):
        if not spelling.fullmatch(p) or p.startswith("-0") and not p.strip("-0."):
            return None
        v = Decimal(p)
        return v if v in domain else None

    text = prefix.decode()
    if not text.startswith("["):
        return False
    body = text[1:]
    if "]" in body:
        parts = body[:-1].split(",") if body != "]" else []
        vs = [value(p) for p in parts]
        return body.index("]") == len(body) - 1 and None not in vs and \
            len(set(vs)) == len(vs) >= min_items
    parts = body.split(",")
    vs = [value(p) for p in parts[:-1]]
    if None in vs or len(set(vs)) < len(vs):
        return False
    fresh = domain - set(vs)
    need = max(1 if body else 0, min_items - len(vs))
    if len(fresh) < need:
        return False
    cur = parts[-1]
    if not cur:
        return True
    # some fresh value has a spelling (canonical, then maybe zeros) beginning with cur
    for v in fresh:
        canon = format(v.normalize(), "f") if v else "0"
        if canon.startswith(cur):
            return True
        rest = cur[len(canon):] if cur.startswith(canon) else None
        if rest is not None and (rest.strip("0") == "" if "." in canon else
                                 rest.startswith(".") and rest[1:].strip("0") == ""):
            return True
    return False


HALF_VOCAB = [b"[", b"]", b",", b"-", b".", b"0", b"1", b"5", b"0.5", b"-1", b"1,", b"0,",
              b".5", b"-0.5", b"00", b""]


@pytest.mark.parametrize("min_items", [0, 5])
def test_bounded_number_masks_equal_the_exact_oracle(min_items):
    bad, masked = oracle_walks({**HALVES, "minItems": min_items}, HALF_VOCAB,
                               lambda text: _half_completable(text, min_items), range(4), 40,
                               0.97)
    assert bad == 0
    assert masked >= 3  # the value walk was needed


def test_bounded_numbers_without_the_walk_are_caught(monkeypatch):
    """The mutation: an open number always counts as able to become a fresh value."""
    from lexguide.engine.unique_items import UniqueItems

    monkeypatch.setattr(UniqueItems, "_number_open", lambda self, values, item, after: True)
    bad, _ = oracle_walks({**HALVES, "minItems": 5}, HALF_VOCAB,
                          lambda text: _half_completable(text, 5), range(2), 40, 0.97)
    assert bad >= 1


@pytest.mark.parametrize("layout", [{}, {"whitespace": "flexible"}, {"indent": 2}])
@pytest.mark.parametrize("schema", [{**HALVES, "minItems": 5}, nums(minimum=0, maximum=1,
                                                                    minItems=6),
                                    nums(minimum=0, maximum=2, multipleOf=0.25, minItems=9)])
def test_bounded_number_walks_never_stop_in_a_dead_end(schema, layout):
    walks_end_valid(schema, layout, b"-.0125,", 6)


def test_bounded_numbers_validate_agrees_with_jsonschema():
    rng = random.Random(9)

    def text() -> str:  # values in several spellings: 0.5 and 0.50 are one
        items = [rng.choice(["0.5", "0.50", "1", "1.0", "0", "0.0", "-1", "-0.5", "0.75", "2"])
                 for _ in range(rng.randint(0, 5))]
        return "[" + ",".join(items) + "]"

    _agrees_with_jsonschema(Grammar.from_json_schema(HALVES), HALVES,
                            (text() for _ in range(300)))


def _number_prefixes(g: Grammar, depth: int) -> list:
    """(bytes, parse state) of every open number item of ``g``'s array up to ``depth``
    bytes, read after ``[``."""
    lp = g.lexparser
    start = lp.advance_bytes(lp.initial, b"[")
    out, frontier = [], [b""]
    for _ in range(depth):
        grown = []
        for p in frontier:
            for c in b"-.0123456789":
                q = p + bytes([c])
                st = lp.advance_bytes(start, q)
                if st is not None and st.pending:
                    out.append((q, st))
                    grown.append(q)
        frontier = grown
    return out


@pytest.mark.parametrize("items", [
    {"minimum": -1, "maximum": 1, "multipleOf": 0.5},
    {"minimum": 0, "maximum": 3, "multipleOf": 0.25},
    {"minimum": 0, "maximum": 2, "multipleOf": 0.1},
    {"minimum": -2, "maximum": 2.5, "multipleOf": 0.5, "exclusiveMaximum": 2.5},
    {"type": "integer", "minimum": -30, "maximum": 120},
])
def test_the_value_count_agrees_with_the_value_walk(items):
    """Whether an open bounded number can still become a fresh value: counted over the
    automaton (number_value_count against the recorded values completing it) and walked
    value by value (number_fresh, the independent oracle), on random prefixes and records
    that leave few values fresh."""
    g = Grammar.from_json_schema({**nums(**items), "maxItems": 50})
    unique = Matcher(g, B_INFO)._unique
    prefixes = _number_prefixes(g, 5)
    domain = sorted({value_key(q) for q, st in prefixes if g.lexparser.lexer.accepting(
        st.lexer_state)}, key=repr)
    rng = random.Random(0)
    answers = set()
    for _ in range(300):
        k = rng.choice([0, 1, 2, len(domain) // 2])
        recorded = frozenset(rng.sample(domain, len(domain) - k))
        q, st = rng.choice(prefixes)
        got = unique._number_open(recorded, q, st)
        assert got == unique.number_fresh(recorded, q, st.lexer_state), (q, recorded)
        answers.add(got)
    assert answers == {True, False}


def test_a_large_domain_without_max_items_is_counted():
    """Prices 0..100 step 0.01 (10,001 values, no maxItems): the prefix 99.9 is used up once
    99.9, 99.91, ..., 99.99 are written, in any spelling."""
    schema = nums(minimum=0, maximum=100, multipleOf=0.01)
    g = Grammar.from_json_schema(schema)
    written = b"[99.90," + b",".join(b"99.9%d" % d for d in range(1, 10)) + b","
    m = _write_text(g, written + b"99.")
    assert b"9" not in _bytes_allowed(m) and b"8" in _bytes_allowed(m)
    m = _write_text(g, written[:-len(b",99.99,")] + b",99.")
    assert b"9" in _bytes_allowed(m)  # 99.99 is fresh
    walks_end_valid(schema, {}, b"-.0125,", 3)
