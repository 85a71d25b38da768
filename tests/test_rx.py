"""The hash-consed regex algebra: canonical forms, derivatives per byte class, UTF-8, limits."""

from __future__ import annotations

import itertools
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lexguide.errors import LimitExceeded, RegexError
from lexguide.regex import nodes as rx
from lexguide.regex.syntax import format_regex, parse_regex
from reference.derivative import derive



def _abc() -> tuple[int, int, int]:
    """Three small regexes, built in the current generation of the store. Node ids made outside
    a compile are not part of the kept base, so a test builds its own rather than holding ids
    made at import across the other tests' compiles (a new generation refuses those ids)."""
    return rx.literal(b"a"), rx.literal(b"b"), rx.literal(b"cd")


def test_canonical_alternation() -> None:
    A, B, C = _abc()
    assert rx.alt(A, B) == rx.alt(B, A)
    assert rx.alt(A, rx.alt(B, C)) == rx.alt(rx.alt(A, B), C) == rx.alt(C, B, A, A)
    assert rx.alt(A, A) == A
    assert rx.alt(A, rx.NOTHING) == A
    assert rx.alt() == rx.NOTHING
    # byte sets merge: a|b is the byte set [ab]
    assert rx.alt(A, B) == rx.byteset(b"ab") == parse_regex("[ab]") == parse_regex("a|b")
    # EPSILON is dropped next to a nullable alternative
    assert rx.alt(rx.EPSILON, rx.star(A)) == rx.star(A)
    assert rx.alt(rx.ANY_BYTES, A) == rx.ANY_BYTES


def test_canonical_concat_and_repeat() -> None:
    A, B, C = _abc()
    assert rx.concat(A, rx.concat(B, C)) == rx.concat(rx.concat(A, B), C) == rx.literal(b"abcd")
    assert rx.concat(A, rx.EPSILON, B) == rx.literal(b"ab")
    assert rx.concat(A, rx.NOTHING) == rx.NOTHING
    assert rx.concat() == rx.EPSILON
    assert rx.star(rx.star(A)) == rx.star(A)
    assert rx.star(rx.opt(A)) == rx.star(A)
    assert rx.star(rx.EPSILON) == rx.star(rx.NOTHING) == rx.EPSILON
    assert rx.plus(A) == rx.concat(A, rx.star(A)) == parse_regex("a+") == parse_regex("aa*")
    assert rx.repeat(A, 0, 1) == rx.opt(A) == parse_regex("a?")
    assert rx.repeat(A, 1, 1) == A
    assert rx.repeat(A, 0, 0) == rx.EPSILON
    assert rx.repeat(A, 0, None) == rx.star(A)
    assert rx.repeat(rx.NOTHING, 2, 3) == rx.NOTHING
    assert rx.repeat(rx.star(A), 2, 5) == rx.repeat(rx.star(A), 0, 5)
    with pytest.raises(RegexError):
        rx.repeat(A, 3, 2)


def test_canonical_intersection_and_complement() -> None:
    A, B, C = _abc()
    assert rx.intersect(A, B) == rx.NOTHING  # byte sets intersect directly
    assert rx.intersect(rx.byteset(b"ab"), rx.byteset(b"bc")) == B
    assert rx.intersect(C, rx.ANY_BYTES) == C
    assert rx.intersect() == rx.ANY_BYTES
    assert rx.intersect(C, rx.NOTHING) == rx.NOTHING
    x = rx.intersect(rx.star(A), rx.complement(C))
    assert x == rx.intersect(rx.complement(C), rx.star(A), rx.star(A))
    assert rx.complement(rx.complement(C)) == C
    assert rx.complement(rx.NOTHING) == rx.ANY_BYTES
    assert rx.intersect(rx.EPSILON, rx.star(A)) == rx.EPSILON
    assert rx.intersect(rx.EPSILON, A) == rx.NOTHING


def test_same_regex_same_id_and_shared_derivatives() -> None:
    s1 = parse_regex(r'"(\\.|[^"\\])*"')
    s2 = parse_regex(r'"(?:[^"\\]|\\.)*"')
    assert s1 == s2
    # the state "inside the string" is the same node as in another regex with the same tail
    d1 = rx.derivative(s1, ord('"'))
    wrapped = rx.concat(rx.literal(b"x"), s1)
    assert rx.derivative(rx.derivative(wrapped, ord("x")), ord('"')) == d1
    assert rx.derivative(d1, ord("a")) == d1


def test_nullable() -> None:
    A, B, C = _abc()
    assert rx.nullable(rx.EPSILON) and not rx.nullable(rx.NOTHING)
    assert rx.nullable(rx.star(A)) and not rx.nullable(rx.plus(A))
    assert rx.nullable(rx.complement(A)) and not rx.nullable(rx.complement(rx.EPSILON))
    assert rx.nullable(rx.repeat(A, 0, 4)) and not rx.nullable(rx.repeat(A, 2, 4))


# -- derivatives per byte class are sound ----------------------------------------------------
SMALL = ["a", "b", "ab", "[ab]", "[^a]", "a*", "(ab|b)+", "a{2,3}", ".", r"\d", "é", "(?s:.*)"]
_nodes = st.recursive(
    st.sampled_from(SMALL).map(parse_regex),
    lambda ch: st.one_of(
        st.tuples(ch, ch).map(lambda t: rx.concat(*t)),
        st.tuples(ch, ch).map(lambda t: rx.alt(*t)),
        st.tuples(ch, ch).map(lambda t: rx.intersect(*t)),
        ch.map(rx.complement),
        ch.map(rx.star),
        st.tuples(ch, st.integers(0, 3), st.integers(0, 3)).map(
            lambda t: rx.repeat(t[0], t[1], t[1] + t[2])
        ),
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(_nodes)
def test_byte_classes_have_equal_derivatives(x: int) -> None:
    labels, reps = rx.byte_partition(x)
    by_class: dict[int, int] = {}
    for b in range(256):
        d = derive(x, b)  # the reference: by byte b, no classes
        assert rx.derivative(x, b) == d
        assert by_class.setdefault(labels[b], d) == d, (format_regex(x), b)
        assert labels[reps[b]] == labels[b]


@settings(max_examples=150, deadline=None)
@given(_nodes, _nodes)
def test_boolean_algebra_by_enumeration(x: int, y: int) -> None:
    inter, union, comp = rx.intersect(x, y), rx.alt(x, y), rx.complement(x)
    for n in range(4):
        for t in itertools.product([b"a", b"b", b"\xc3", b"\xa9"], repeat=n):
            s = b"".join(t)
            mx, my = rx.matches(x, s), rx.matches(y, s)
            assert rx.matches(inter, s) == (mx and my)
            assert rx.matches(union, s) == (mx or my)
            assert rx.matches(comp, s) == (not mx)


# -- UTF-8 automata ------------------------------------------------------------------------
_cps = st.integers(0, 0x10FFFF).filter(lambda c: not 0xD800 <= c <= 0xDFFF)


@settings(max_examples=200, deadline=None)
@given(_cps, _cps, st.lists(_cps, min_size=1, max_size=10))
def test_codepoint_range_matches_exactly(a: int, b: int, probes: list[int]) -> None:
    lo, hi = min(a, b), max(a, b)
    node = rx.codepoint_range(lo, hi)
    for c in probes + [lo, hi, max(lo - 1, 0), min(hi + 1, 0x10FFFF)]:
        if 0xD800 <= c <= 0xDFFF:
            continue
        assert rx.matches(node, chr(c).encode("utf-8")) == (lo <= c <= hi), (lo, hi, c)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=4))
def test_any_char_is_exactly_one_valid_utf8_char(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
        expected = len(text) == 1
    except UnicodeDecodeError:
        expected = False
    assert rx.matches(rx.any_char(), data) == expected


def test_from_literal_case_insensitive() -> None:
    x = rx.from_literal("Ωk", case_insensitive=True)
    for s in ["Ωk", "ωK", "\u2126\u212a"]:
        assert rx.matches(x, s.encode())
    assert not rx.matches(x, "Ωx".encode())
    assert rx.from_literal("abc") == rx.literal(b"abc")


def test_to_string() -> None:
    A, B, C = _abc()
    assert format_regex(parse_regex("ab*")) == "ab*"
    assert format_regex(parse_regex("x{2,5}")) == "x{2,5}"
    assert format_regex(rx.intersect(rx.star(A), rx.complement(C))) in ("a*&~(cd)", "~(cd)&a*")
    assert len(format_regex(parse_regex(r"\w+"), max_len=50)) <= 53


# -- limits ------------------------------------------------------------------------------------
def test_nested_repeat_limit() -> None:
    t0 = time.perf_counter()
    with pytest.raises(LimitExceeded) as ei:
        rx.repeat(rx.repeat(rx.literal(b"x"), 1000, 1000), 1000, 1000)
    assert ei.value.limit == "max_repeat"
    assert time.perf_counter() - t0 < 1.0
    rx.repeat(rx.any_char(), 1000, 3000)  # the spec's bounded-thinking example is fine


def test_store_limit() -> None:
    old = rx.LIMITS["max_rx_nodes"]
    rx.LIMITS["max_rx_nodes"] = rx.n_nodes() + 5
    try:
        with pytest.raises(LimitExceeded) as ei:
            rx.literal(b"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a zyxwvu" * 3 + b"limit-test")
        assert ei.value.limit == "max_rx_nodes"
    finally:
        rx.LIMITS["max_rx_nodes"] = old


def test_per_regex_node_limit() -> None:
    old = rx.LIMITS["max_regex_nodes"]
    rx.LIMITS["max_regex_nodes"] = 50
    try:
        with pytest.raises(LimitExceeded) as ei:
            parse_regex("qwertyuiopasdfghjklzxcvbnm" * 4 + "QWERTY[0-9]{3}")
        assert ei.value.limit == "max_regex_nodes"
    finally:
        rx.LIMITS["max_regex_nodes"] = old


def test_exponential_regex_is_lazy() -> None:
    """(a|b)*a(a|b){20} has 2**21 DFA states; matching one string builds only its path."""
    x = parse_regex("(a|b)*a(a|b){20}")
    t0 = time.perf_counter()
    s = ("ab" * 40).encode()
    assert rx.matches(x, s + b"a" + b"b" * 20)
    assert not rx.matches(x, s + b"b" * 21)
    assert time.perf_counter() - t0 < 5.0


def test_matches_agrees_with_re_on_common_regexes() -> None:
    pattern = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
    node = parse_regex(pattern)
    for s in ["0", "-0.5", "12e-3", "01", "1.", "-", "1E+10", "3.14159"]:
        assert rx.matches(node, s.encode()) == (re.fullmatch(pattern, s) is not None), s


def test_export_import_roundtrip() -> None:
    A, B, C = _abc()
    roots = [parse_regex(r'"(\\.|[^"\\])*"'), rx.intersect(rx.star(A), rx.complement(C)),
             rx.repeat(rx.any_char(), 2, 7), rx.EPSILON, rx.NOTHING]  # fmt: skip
    data = rx.export_nodes(roots)
    assert rx.import_nodes(data) == roots
    # the description holds no process-local ids: kinds, byte masks, child positions only
    nodes, positions = data
    assert len(positions) == len(roots) and all(p < len(nodes) for p in positions)


def test_large_alternation_of_literals() -> None:
    """Enums: the first-byte index of big alternations must not change the language."""
    import random

    rng = random.Random(7)
    words = {
        "".join(rng.choice("abcxyzé") for _ in range(rng.randint(1, 6))) for _ in range(300)
    }
    node = rx.alt(*[rx.from_literal(w) for w in words])
    pattern = re.compile("|".join(map(re.escape, words)))
    probes = list(words)[:50]
    probes += ["".join(rng.choice("abcxyzé") for _ in range(4)) for _ in range(200)]
    for w in probes:
        assert rx.matches(node, w.encode()) == (pattern.fullmatch(w) is not None), w
    # a complement child (first bytes: all) is reachable from every byte
    with_not = rx.alt(node, rx.intersect(rx.complement(rx.literal(b"q")), parse_regex("[q-r]")))
    assert rx.matches(with_not, b"r") and not rx.matches(with_not, b"q")


def test_unicode_tables_disk_cache(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from lexguide.regex import unicode as ut
    monkeypatch.setenv("LEXGUIDE_CACHE", str(tmp_path))
    assert ut._load_cached_categories() is None and ut._load_cached_orbits() is None
    table = ut._scan_categories()
    ut._save_cache("categories", table)
    assert ut._load_cached_categories() == table
    ut._build_folds()
    orbits = sorted({ut._fold_orbit[c] for c in ut._fold_keys or []})
    ut._save_cache("folds", [list(o) for o in orbits])
    assert sorted(map(tuple, ut._load_cached_orbits() or [])) == orbits
    # a corrupt or truncated cache is ignored, never trusted
    ut._cache_file("categories").write_text('{"Lu": [[0, 5]]}')
    assert ut._load_cached_categories() is None
    ut._cache_file("folds").write_text("[[1")
    assert ut._load_cached_orbits() is None


@settings(max_examples=60, deadline=None)
@given(_nodes, st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=5))
def test_deep_partition_classes_are_interchangeable(x: int, samples: list[bytes]) -> None:
    """Replacing any byte by another of its deep class never changes a derivative path."""
    labels, _ = rx.byte_partition(x)
    deep = rx.partition_labels(rx.deep_partition([x]))
    first_of = {}
    for b in range(256):
        first_of.setdefault(deep[b], b)
    for data in samples:
        canon = bytes(first_of[deep[b]] for b in data)
        a, c = x, x
        for b1, b2 in zip(data, canon):
            a, c = rx.derivative(a, b1), rx.derivative(c, b2)
            assert a == c, (format_regex(x), data)
    # the deep partition refines the node's own partition
    for b in range(256):
        assert labels[first_of[deep[b]]] == labels[b]


def _viable(x: int, data: bytes) -> bool:
    for b in data:
        x = rx.derivative(x, b)
        if x == rx.NOTHING:
            return False
    return True


@pytest.mark.parametrize(
    "pattern",
    ["a{0,40}b", "(ab|c){3,50}", "x(a{2,9}|b{5,})c{0,100}", "[ab]{10,20}", "(a{0,30}b){2,40}", "a{50}|b",
     "(a{7,}|b){1,60}c?"],
)
def test_capped_counters_agree_on_short_strings(pattern: str) -> None:
    """cap_counters keeps membership and viability of every string shorter than k bytes."""
    x = parse_regex(pattern)
    k = 6
    capped = rx.cap_counters(x, k)
    assert capped != x  # every pattern here has a counter that no short string can tell
    for n in range(k):
        for t in itertools.product(b"abcx", repeat=n):
            s = bytes(t)
            assert rx.matches(capped, s) == rx.matches(x, s), s
            assert _viable(capped, s) == _viable(x, s), s


def test_capped_counters_leave_boolean_subterms() -> None:
    """Under & and ~ a long extension matters: those subterms are not capped."""
    x = rx.complement(parse_regex("a{0,40}"))
    assert rx.cap_counters(x, 6) == x
    assert rx.has_boolean(x) and not rx.has_boolean(parse_regex("a{0,40}"))
