"""The exclusion's shortcuts give what its general path gives: the same IR, the same number of
intersection steps (budgets and their messages depend on it) and the same errors.

``Difference._other_consts`` answers "string constant minus another string constant" in place;
patched to answer nothing, every pair takes the general path, which is the reference here.
"""

from __future__ import annotations

import pytest

from lexguide.errors import SchemaError
from lexguide.jsonschema.build import SchemaBuilder
from lexguide.jsonschema.difference import Difference
from lexguide.jsonschema.schema import (
    EVERY_TYPE,
    AnyOfSchema,
    Intersector,
    NullSchema,
    RefSchema,
    StringSchema,
)


def _build(schema: dict) -> tuple[str, int]:
    """repr of the root IR (or of the error) and the intersection steps taken."""
    b = SchemaBuilder(schema)
    try:
        out = repr(b.build_root())
    except SchemaError as e:
        out = f"SchemaError: {e}"
    return out, b.intersect.steps


def _general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Difference, "_other_consts", lambda self, c, options, start, depth: 0)


def _enums(n_a: int, n_b: int, shared: int) -> dict:
    """oneOf of two objects whose "kind" enums share ``shared`` values."""
    a = [f"a{i}" for i in range(n_a)]
    b = [f"b{i}" for i in range(n_b - shared)] + a[:shared]
    return {"type": "object", "oneOf": [
        {"properties": {"kind": {"type": "string", "enum": a}, "n": {"type": "integer"}}},
        {"properties": {"kind": {"enum": b}, "s": {"type": "string"}}, "required": ["kind"]},
    ]}


@pytest.mark.parametrize("shape", [(5, 4, 0), (30, 20, 3), (12, 12, 12), (1, 40, 1)])
def test_enum_minus_enum_matches_the_general_path(shape, monkeypatch) -> None:
    fast = _build(_enums(*shape))
    _general_path(monkeypatch)
    assert fast == _build(_enums(*shape))


def test_budget_running_out_inside_an_enum_product(monkeypatch) -> None:
    """The product needs more steps than the exact oneOf may take: the shortcut stops where
    the budget would run out and the error (whose text holds the step limit) is the same."""
    schema = _enums(400, 300, 50)
    fast = _build(schema)
    assert fast[0].startswith("SchemaError") and "intersection steps" in fast[0]
    _general_path(monkeypatch)
    assert fast == _build(schema)


def test_enum_minus_constant_keeps_every_other_value(monkeypatch) -> None:
    consts = tuple(StringSchema(const=c) for c in ("x", "y", "z", "w"))

    def run() -> tuple[tuple, int]:
        b = SchemaBuilder({})
        out = b.diff(AnyOfSchema(consts), StringSchema(const="y"))
        assert isinstance(out, AnyOfSchema)
        return out.options, b.intersect.steps

    fast = run()
    assert fast[0] == (consts[0], consts[2], consts[3])  # the very nodes, kept whole
    _general_path(monkeypatch)
    assert fast == run()


def test_types_of_a_reference_under_construction_are_not_memoised() -> None:
    """json_types of a reference whose target is still being built is "anything"; once built,
    its real types (the memo keeps only the answers that cannot change)."""
    built: dict[str, object] = {}

    def resolve(key: str):
        if key not in built:
            raise SchemaError("circular references with sibling keywords are not supported")
        return built[key]

    diff = Difference(Intersector(resolve, lambda s, v: True))
    ref = RefSchema("#/definitions/x")
    assert diff._types(ref) == EVERY_TYPE
    built[ref.key] = NullSchema()
    assert diff._types(ref) == frozenset({"null"})
    assert diff._types(AnyOfSchema((ref, StringSchema()))) == frozenset({"null", "string"})


def test_slots_constructors_build_what_the_dataclass_builds() -> None:
    """The intersector's positional constructors set every field, in the dataclass's order."""
    from dataclasses import fields

    from lexguide.jsonschema import schema as sc

    for cls, make in ((sc.NumberSchema, sc._new_number), (sc.StringSchema, sc._new_string),
                      (sc.ArraySchema, sc._new_array), (sc.ObjectSchema, sc._new_object)):
        values = [f"v{i}" for i in range(len(fields(cls)))]
        built = make(*values)
        assert type(built) is cls and repr(built) == repr(cls(*values))
        with pytest.raises(AttributeError):  # still frozen
            built.pointer = "x"


@pytest.mark.parametrize("n", [2, 9, 40])
def test_union_of_keyword_lists_keeps_order_and_repeats(n) -> None:
    """``_union`` (required names, patterns, ...): x, then y's values not in x, in order; the
    hashed lookup for long lists answers as the tuple scan does."""
    from lexguide.jsonschema.schema import _union

    x = tuple(f"k{i}" for i in range(n))
    y = tuple(f"k{i}" for i in range(n // 2, n + 3)) + ("k1", f"k{n + 1}")
    assert _union(x, y) == x + tuple(v for v in y if v not in x)
    assert _union(x, x) is x and _union((), y) is y and _union(x, ()) is x


def _plain_product(self, xs, ys, depth):
    from lexguide.jsonschema.schema import any_of

    return any_of([self(x, y, depth) for x in xs for y in ys],
                  "no branch of anyOf is compatible with the other constraints")


def _meet(a, b, limit: int | None = None) -> tuple[str, int]:
    """repr of a ∩ b (or of the error) and the steps taken, on a fresh intersector."""
    inter = SchemaBuilder({}).intersect
    if limit is not None:
        inter.limit = limit
    try:
        out = repr(inter(a, b))
    except SchemaError as e:
        out = f"SchemaError: {e}"
    return out, inter.steps


def _unions():
    from lexguide.jsonschema.schema import (
        ANY,
        ArraySchema,
        BoolSchema,
        NumberSchema,
        ObjectSchema,
        Unsat,
    )

    obj = ObjectSchema(properties=(("a", NumberSchema(True)),), required=("a",))
    mixed = AnyOfSchema((NullSchema(), StringSchema(min_length=2), NumberSchema(False), obj,
                         ArraySchema(items=StringSchema()), BoolSchema(True)))
    return [
        (mixed, AnyOfSchema((StringSchema(max_length=1), NumberSchema(True), BoolSchema(False)))),
        (mixed, AnyOfSchema((ObjectSchema(), Unsat("x"), ANY))),
        (AnyOfSchema((NullSchema(),)), StringSchema()),  # one pair, of two types: its reason
        (AnyOfSchema((NullSchema(), BoolSchema())), AnyOfSchema((StringSchema(),
                                                                 NumberSchema(False)))),
        (AnyOfSchema((NullSchema(), StringSchema(min_length=3))), StringSchema(max_length=2)),
        (mixed, mixed),
    ]


@pytest.mark.parametrize("case", range(6))
@pytest.mark.parametrize("limit", [None, 3, 9, 20])
def test_union_product_matches_the_pairwise_meets(case, limit, monkeypatch) -> None:
    """Pairs of two different JSON types in a union product are answered in place: the same
    union, Unsat reason, step count and budget error as meeting every pair."""
    a, b = _unions()[case]
    fast = _meet(a, b, limit)
    monkeypatch.setattr(Intersector, "_product", _plain_product)
    assert fast == _meet(a, b, limit)
