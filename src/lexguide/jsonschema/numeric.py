"""Numbers as exact byte regexes: digit-level ranges and ``multipleOf`` automata.

Ranges (``minimum``/``maximum``, inclusive or exclusive, any magnitude, decimal bounds) are
built digit by digit: "greater than 456" is ``[1-9][0-9]{3,}`` (longer) | ``[5-9][0-9]{2}`` |
``4[6-9][0-9]`` | ``45[7-9]`` (same length, larger at the first differing digit) — the classic
construction (e.g. llguidance ``numeric.rs``), extended to fractions by comparing the fraction
digits the same way. ``[lo, hi]`` is the intersection of a lower-bound and an upper-bound regex.

``multipleOf`` builds the divisibility automaton over the digits (remainder of the value scaled
to an integer), minimises it (Moore) and turns it into a regex by state elimination
(Brzozowski & McCluskey 1963). Bounded numbers are written without exponent (spec §2).
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from functools import lru_cache
from math import gcd

from lexguide.regex import nodes as rx

__all__ = [
    "INTEGER_RX",
    "NON_INTEGER_RX",
    "NUMBER_RX",
    "PLAIN_NUMBER_RX",
    "NumericError",
    "decimal_of",
    "multiple_parts",
    "number_rx",
    "split_decimal",
]

MAX_RAW_STATES = 20_000
MAX_MIN_STATES = 64


class NumericError(ValueError):
    """A numeric constraint cannot be enforced exactly (e.g. a ``multipleOf`` too large)."""


def _digits(lo: int = 0, hi: int = 9) -> int:
    return rx.byteset(range(0x30 + lo, 0x30 + hi + 1)) if lo <= hi else rx.NOTHING


D = _digits()
D19 = _digits(1, 9)
MINUS = rx.literal(b"-")
DOT = rx.literal(b".")
UINT = rx.alt(rx.literal(b"0"), rx.concat(D19, rx.star(D)))
FRAC_OPT = rx.opt(rx.concat(DOT, rx.plus(D)))
EXP_OPT = rx.opt(rx.concat(rx.byteset(b"eE"), rx.opt(rx.byteset(b"+-")), rx.plus(D)))
INTEGER_RX = rx.concat(rx.opt(MINUS), UINT)
NUMBER_RX = rx.concat(rx.opt(MINUS), UINT, FRAC_OPT, EXP_OPT)
PLAIN_NUMBER_RX = rx.concat(rx.opt(MINUS), UINT, FRAC_OPT)
NON_INTEGER_RX = rx.concat(rx.opt(MINUS), UINT, DOT, rx.star(D), D19, rx.star(D))


def decimal_of(value: float | Decimal) -> Decimal:
    """Exact decimal of a JSON number as parsed by ``json`` (floats through their repr)."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool):
        raise TypeError("boolean is not a number")
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def split_decimal(d: Decimal) -> tuple[str, str]:
    """(integer digits without leading zeros, fraction digits without trailing zeros) of |d|."""
    with localcontext() as ctx:
        ctx.prec = 10_000
        s = format(abs(d), "f")
    i, _, f = s.partition(".")
    return i.lstrip("0") or "0", f.rstrip("0")


def _lit(s: str) -> int:
    return rx.literal(s.encode()) if s else rx.EPSILON


def _frac_ge(f: str, strict: bool) -> int:
    if not f:
        if not strict:
            return FRAC_OPT
        return rx.concat(DOT, rx.star(D), D19, rx.star(D))
    alts = []
    for k, ch in enumerate(f):
        if int(ch) < 9:
            alts.append(rx.concat(DOT, _lit(f[:k]), _digits(int(ch) + 1, 9), rx.star(D)))
    tail = rx.concat(rx.star(D), D19, rx.star(D)) if strict else rx.star(D)
    alts.append(rx.concat(DOT, _lit(f), tail))
    return rx.alt(*alts)


def _frac_le(f: str, strict: bool) -> int:
    zeros = rx.opt(rx.concat(DOT, rx.plus(rx.literal(b"0"))))
    if not f:
        return rx.NOTHING if strict else zeros
    alts = [rx.EPSILON]
    for k, ch in enumerate(f):
        if int(ch) > 0:
            alts.append(rx.concat(DOT, _lit(f[:k]), _digits(0, int(ch) - 1), rx.star(D)))
        if k > 0:
            alts.append(rx.concat(DOT, _lit(f[:k])))
    if not strict:
        alts.append(rx.concat(DOT, _lit(f), rx.star(rx.literal(b"0"))))
    return rx.alt(*alts)


def _ge_unsigned(i: str, f: str, strict: bool, frac: bool) -> int:
    """Unsigned numerals with value >= (or >) i.f."""
    tail = FRAC_OPT if frac else rx.EPSILON
    n = len(i)
    alts = [rx.concat(D19, rx.repeat(D, n, None), tail)]
    for k, ch in enumerate(i):
        if int(ch) < 9:
            alts.append(rx.concat(_lit(i[:k]), _digits(int(ch) + 1, 9), rx.repeat(D, n - k - 1, n - k - 1), tail))
    if frac:
        alts.append(rx.concat(_lit(i), _frac_ge(f, strict)))
    elif not strict and not f:
        alts.append(_lit(i))
    return rx.alt(*alts)


def _le_unsigned(i: str, f: str, strict: bool, frac: bool) -> int:
    """Unsigned numerals with value <= (or <) i.f."""
    tail = FRAC_OPT if frac else rx.EPSILON
    n = len(i)
    alts = []
    if n >= 2:
        alts.append(rx.concat(rx.alt(rx.literal(b"0"), rx.concat(D19, rx.repeat(D, 0, n - 2))), tail))
    for k, ch in enumerate(i):
        lo = 1 if (k == 0 and n > 1) else 0
        if int(ch) - 1 >= lo:
            alts.append(rx.concat(_lit(i[:k]), _digits(lo, int(ch) - 1), rx.repeat(D, n - k - 1, n - k - 1), tail))
    if frac:
        alts.append(rx.concat(_lit(i), _frac_le(f, strict)))
    elif not strict or f:
        alts.append(_lit(i))
    return rx.alt(*alts) if alts else rx.NOTHING


def _positive(frac: bool) -> int:
    return _ge_unsigned("0", "", True, frac)


def _ge(bound: Decimal, strict: bool, frac: bool) -> int:
    i, f = split_decimal(bound)
    if bound >= 0:
        return _ge_unsigned(i, f, strict, frac)
    neg = rx.intersect(_le_unsigned(i, f, strict, frac), _positive(frac))
    return rx.alt(rx.concat(UINT, FRAC_OPT if frac else rx.EPSILON), rx.concat(MINUS, neg))


def _le(bound: Decimal, strict: bool, frac: bool) -> int:
    i, f = split_decimal(bound)
    if bound >= 0:
        return rx.alt(_le_unsigned(i, f, strict, frac), rx.concat(MINUS, _positive(frac)))
    return rx.concat(MINUS, _ge_unsigned(i, f, strict, frac))


def multiple_parts(m: Decimal) -> tuple[int, int]:
    """``|m| = coef * 10**-exp`` with integer ``coef``; raises NumericError for 0."""
    m = abs(m)
    if m == 0:
        raise NumericError("multipleOf must be positive")
    _, digits, exponent = m.normalize().as_tuple()
    coef = int("".join(map(str, digits)))
    if isinstance(exponent, int) and exponent > 0:
        coef *= 10**exponent
        exponent = 0
    return coef, -int(exponent)


@lru_cache(maxsize=256)
def _multiple_rx(coef: int, exp: int, frac: bool) -> int:
    """Digits-and-dot strings whose value is a multiple of coef * 10**-exp.

    State (r, j): r = value of the digits read so far (dot ignored) mod coef; j = -1 in the
    integer part, else the number of fraction digits read (beyond ``exp`` only zeros).
    """
    js = list(range(-1, exp + 1)) if frac else [-1]
    if coef * len(js) > MAX_RAW_STATES:
        raise NumericError(f"multipleOf automaton too large ({coef * len(js)} states)")
    index = {(r, j): n for n, (r, j) in enumerate((r, j) for j in js for r in range(coef))}
    n = len(index)
    trans: list[dict[int, int]] = [{} for _ in range(n)]  # state -> {symbol byte: state}
    accept = [False] * n
    for (r, j), s in index.items():
        scale = 10 ** (exp - max(j, 0))
        accept[s] = (r * scale) % coef == 0
        for d in range(10):
            if j < exp:
                trans[s][0x30 + d] = index[((r * 10 + d) % coef, j + 1 if j >= 0 else -1)]
            elif d == 0:
                trans[s][0x30] = s
        if j == -1 and frac:
            trans[s][0x2E] = index[(r, 0)]
    start = index[(0, -1)]
    trans, accept, start = _minimise(trans, accept, start)
    if len(trans) > MAX_MIN_STATES:
        raise NumericError(
            f"multipleOf automaton has {len(trans)} states after minimisation (limit {MAX_MIN_STATES})"
        )
    return _dfa_to_rx(trans, accept, start)


def _minimise(trans: list[dict[int, int]], accept: list[bool], start: int):
    """Moore partition refinement; returns the minimal DFA restricted to reachable states."""
    reach = {start}
    todo = [start]
    while todo:
        s = todo.pop()
        for t in trans[s].values():
            if t not in reach:
                reach.add(t)
                todo.append(t)
    states = sorted(reach)
    block = {s: int(accept[s]) for s in states}
    n_blocks = len(set(block.values()))
    while True:
        sigs: dict[tuple, int] = {}
        new = {}
        for s in states:
            sig = (block[s], tuple(sorted((b, block[t]) for b, t in trans[s].items())))
            new[s] = sigs.setdefault(sig, len(sigs))
        block = new
        if len(sigs) == n_blocks:
            break
        n_blocks = len(sigs)
    m_trans: list[dict[int, int]] = [{} for _ in range(n_blocks)]
    m_accept = [False] * n_blocks
    for s in states:
        m_accept[block[s]] = accept[s]
        for b, t in trans[s].items():
            m_trans[block[s]][b] = block[t]
    return m_trans, m_accept, block[start]


def _dfa_to_rx(trans: list[dict[int, int]], accept: list[bool], start: int) -> int:
    """State elimination: edges between a fresh initial and final node remain."""
    n = len(trans)
    init, final = n, n + 1
    edges: dict[tuple[int, int], int] = {}

    def add(i: int, j: int, r: int) -> None:
        edges[(i, j)] = rx.alt(edges[(i, j)], r) if (i, j) in edges else r

    for s, tr in enumerate(trans):
        by_target: dict[int, list[int]] = {}
        for b, t in tr.items():
            by_target.setdefault(t, []).append(b)
        for t, bs in by_target.items():
            add(s, t, rx.byteset(bs))
        if accept[s]:
            add(s, final, rx.EPSILON)
    add(init, start, rx.EPSILON)
    remaining = set(range(n))
    while remaining:
        def cost(k: int) -> int:
            ins = sum(1 for (i, j) in edges if j == k and i != k)
            outs = sum(1 for (i, j) in edges if i == k and j != k)
            return ins * outs

        k = min(remaining, key=cost)
        remaining.discard(k)
        loop = edges.pop((k, k), None)
        mid = rx.star(loop) if loop is not None else rx.EPSILON
        ins = [(i, r) for (i, j), r in edges.items() if j == k]
        outs = [(j, r) for (i, j), r in edges.items() if i == k]
        for i, _ in ins:
            del edges[(i, k)]
        for j, _ in outs:
            del edges[(k, j)]
        for i, ri in ins:
            for j, rj in outs:
                add(i, j, rx.concat(ri, mid, rj))
    return edges.get((init, final), rx.NOTHING)


@lru_cache(maxsize=4096)
def number_rx(
    *,
    integer: bool,
    minimum: Decimal | None = None,
    maximum: Decimal | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
    multiple_of: Decimal | None = None,
) -> int:
    """The regex of JSON numerals (``integer``: no fraction) in the given range / multiple.

    Without constraints exponents are allowed; with any constraint the numeral is a plain
    decimal (no exponent). Raises :class:`NumericError` when ``multipleOf`` needs an automaton
    larger than the documented limits.
    """
    frac = not integer
    if minimum is None and maximum is None and multiple_of is None:
        return INTEGER_RX if integer else NUMBER_RX
    parts = [INTEGER_RX if integer else PLAIN_NUMBER_RX]
    if minimum is not None:
        parts.append(_ge(minimum, exclusive_minimum, frac))
    if maximum is not None:
        parts.append(_le(maximum, exclusive_maximum, frac))
    if multiple_of is not None:
        coef, exp = multiple_parts(multiple_of)
        if integer:
            # an integer n is a multiple of coef/10^exp iff coef/gcd(coef, 10^exp) divides n
            coef, exp = coef // gcd(coef, 10**exp), 0
        if coef != 1 or frac:
            parts.append(rx.concat(rx.opt(MINUS), _multiple_rx(coef, exp, frac)))
    return rx.intersect(*parts) if len(parts) > 1 else parts[0]
