"""Hash-consed regular expressions over bytes with Brzozowski derivatives.

Every regex is an ``int`` id in one process-wide store. Smart constructors put nodes in a
canonical form (flattened, sorted and deduplicated alternations and intersections, NOTHING /
EPSILON absorption, right-nested concatenation, byte sets as 256-bit ints, normalised
repetition), so two regexes built the same way -- or differing only by associativity,
commutativity and idempotence of ``|``/``&`` -- get the same id. That is what makes derivatives
finite (Brzozowski 1964: finitely many dissimilar derivatives modulo ACI) and what lets the
engine cache masks by lexer state across grammars.

Derivatives are computed per *byte class*: each node has the coarsest partition of
0..255 such that bytes in one class have the same derivative (Owens, Reppy & Turon,
"Regular-expression derivatives re-examined", JFP 2009, section 4.2). ``derivative(x, b)`` is
memoised on ``(x, representative of b's class)``, so a full 256-entry DFA row costs one
derivative per class. Partitions are computed on first use: the core, not Python, derives
the lexemes, so most nodes never need one.

Unicode: :func:`codepoint_ranges` compiles code-point ranges to a UTF-8 byte automaton (ranges
split into UTF-8 byte-range sequences, as in the Rust ``utf8-ranges`` algorithm), so character
classes only ever match valid UTF-8.

Limits (documented defaults, changeable via :data:`LIMITS`): ``max_rx_nodes`` bounds the whole
store; past ``rotate_rx_nodes`` the store is cut back to the nodes the front ends' modules
made at import (see :func:`building`), so a process compiling an unbounded variety of grammars
keeps a bounded store; ``max_repeat`` bounds the product of the bounds of *nested* counted
repetitions (a single counter over a counter-free body, such as a string's ``maxLength``, is a
counter: its derivatives count down, one state per count reached, so it has no such limit).
Exceeding them raises :class:`lexguide.errors.LimitExceeded`.

Thread safety: node creation takes a lock; derivative memo writes are single dict stores.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Self

import numpy as np

from lexguide.errors import LimitExceeded, RegexError
from lexguide.regex.unicode import case_fold_ranges, utf8_sequences

__all__ = [
    "ANY_BYTES",
    "EPSILON",
    "LIMITS",
    "NOTHING",
    "alt",
    "any_char",
    "building",
    "byte_partition",
    "byte_range",
    "byteset",
    "codepoint_range",
    "codepoint_ranges",
    "complement",
    "concat",
    "deep_partition",
    "derivative",
    "export_nodes",
    "from_literal",
    "generation",
    "import_nodes",
    "intersect",
    "literal",
    "matches",
    "n_nodes",
    "nullable",
    "on_rotate",
    "opt",
    "partition_arrays",
    "partition_labels",
    "partition_of",
    "plus",
    "repeat",
    "star",
]

#: Resource limits (mutable: set before building regexes). ``max_rx_nodes`` bounds the
#: process-wide store; ``max_repeat`` bounds the product of nested counted repetitions
#: (``x{1000}{1000}`` = 10**6 is refused; one counter ``x{10**6}`` over a counter-free ``x``
#: is not); ``max_regex_nodes`` bounds the nodes one
#: :func:`lexguide.regex.syntax.parse_regex` call may create.
LIMITS: dict[str, int] = {
    "max_rx_nodes": 2_000_000,
    "rotate_rx_nodes": 400_000,
    "max_repeat": 100_000,
    "max_regex_nodes": 200_000,
}

# node kinds
K_NOTHING, K_EPS, K_BYTES, K_CONCAT, K_ALT, K_AND, K_NOT, K_STAR, K_REPEAT = range(9)

_lock = threading.RLock()
_kind: list[int] = []
_args: list[tuple] = []
_null: list[bool] = []
_part: list[int] = []  # partition id per node, _UNSET until asked for (see _part_of)
_weight: list[int] = []  # product of nested counted-repetition bounds
_cons: dict[tuple, int] = {}
_first: list[int] = []  # bytes that may start a match (over-approximation), 256-bit masks
_boolean: list[bool] = []  # the node has an ``&`` or ``~`` subterm
_alt_index: dict[int, dict[int, tuple[int, ...]]] = {}  # big ALT -> byte -> live children
_ALT_INDEX_MIN = 16

# partitions of 0..255: labels normalised by first occurrence (byte 0 has label 0)
_part_labels: list[bytes] = []
_part_reps: list[bytes] = []  # reps[b] = smallest byte of b's class
_part_ids: dict[bytes, int] = {}
_refine_memo: dict[tuple[int, int], int] = {}
_multi_memo: dict[tuple[int, ...], int] = {}
_part_np: dict[int, tuple[np.ndarray, tuple[int, ...]]] = {}

_dmemo: dict[int, int] = {}


def _intern_partition(labels: bytes, reps: bytes | None = None) -> int:
    """Id of a partition given as 256 normalised labels (byte 0 -> 0, new labels in order)."""
    pid = _part_ids.get(labels)
    if pid is None:
        if reps is None:
            first: dict[int, int] = {}
            for b, lab in enumerate(labels):
                first.setdefault(lab, b)
            reps = bytes(first[lab] for lab in labels)
        with _lock:
            pid = _part_ids.get(labels)
            if pid is None:
                pid = len(_part_labels)
                _part_labels.append(labels)
                _part_reps.append(reps)
                _part_ids[labels] = pid
    return pid


_TRIVIAL = _intern_partition(bytes(256))
_UNSET = -1


def _refine(p: int, q: int) -> int:
    """The common refinement of partitions ``p`` and ``q`` (memoised)."""
    if p == q or q == _TRIVIAL:
        return p
    if p == _TRIVIAL:
        return q
    key = (p, q) if p < q else (q, p)
    r = _refine_memo.get(key)
    if r is None:
        r = _intern_partition(_labels_by_first_use(zip(_part_labels[p], _part_labels[q])))
        _refine_memo[key] = r
    return r


def _first_of(kind: int, args: tuple) -> int:
    """Over-approximation of the bytes whose derivative is not NOTHING (256-bit mask)."""
    if kind == K_BYTES:
        return args[0]
    if kind == K_CONCAT:
        h, t = args
        return _first[h] | _first[t] if _null[h] else _first[h]
    if kind == K_ALT:
        f = 0
        for c in args:
            f |= _first[c]
        return f
    if kind == K_AND:
        f = (1 << 256) - 1
        for c in args:
            f &= _first[c]
        return f
    if kind == K_NOT:
        return (1 << 256) - 1
    if kind in (K_STAR, K_REPEAT):
        return _first[args[0]]
    return 0


def _children_of(k: int, a: tuple) -> tuple[int, ...]:
    if k in (K_CONCAT, K_ALT, K_AND, K_NOT, K_STAR):
        return a
    if k == K_REPEAT:
        return (a[0],)
    return ()


def _mk(kind: int, args: tuple, null: bool, weight: int = 1) -> int:
    key = (kind, args)
    x = _cons.get(key)
    if x is not None:
        return x
    with _lock:
        x = _cons.get(key)
        if x is not None:
            return x
        x = len(_kind)
        if x >= LIMITS["max_rx_nodes"]:
            raise LimitExceeded(
                "max_rx_nodes",
                LIMITS["max_rx_nodes"],
                f"resource limit max_rx_nodes={LIMITS['max_rx_nodes']} exceeded: the regex "
                "store is full (a regex or its automaton is too large)",
            )
        _kind.append(kind)
        _args.append(args)
        _null.append(null)
        _part.append(_UNSET)
        _weight.append(weight)
        if kind == K_CONCAT:  # the commonest node (every literal is a chain of them)
            h, t = args
            _first.append(_first[h] | _first[t] if _null[h] else _first[h])
            _boolean.append(_boolean[h] or _boolean[t])
        else:
            _first.append(_first_of(kind, args))
            _boolean.append(kind in (K_AND, K_NOT)
                            or any(_boolean[c] for c in _children_of(kind, args)))
        _cons[key] = x
    return x


NOTHING = _mk(K_NOTHING, (), False)
EPSILON = _mk(K_EPS, (), True)
ANY_BYTES = _mk(K_NOT, (NOTHING,), True)  # every byte string: ~NOTHING
_FULL = (1 << 256) - 1


def _part_of(x: int) -> int:
    """The byte partition of node ``x``, computed on first use (and for the subterms it
    needs; iterative). Most nodes never need one: derivatives are the core's job, and Python
    only asks for them in :func:`matches` and the reference implementations of the tests."""
    p = _part[x]
    if p != _UNSET:
        return p
    part, kind, args, null = _part, _kind, _args, _null
    stack = [x]
    while stack:
        y = stack[-1]
        if part[y] != _UNSET:
            stack.pop()
            continue
        k, a = kind[y], args[y]
        if k == K_CONCAT and not null[a[0]]:
            kids: tuple[int, ...] = a[:1]  # a non-nullable head decides alone
        else:
            kids = _children_of(k, a)
        todo = [c for c in kids if part[c] == _UNSET]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        if k <= K_EPS:
            p = _TRIVIAL
        elif k == K_BYTES:
            p = _mask_partition(a[0])
        elif k == K_CONCAT:
            p = _refine(part[a[0]], part[a[1]]) if null[a[0]] else part[a[0]]
        elif k in (K_ALT, K_AND):
            p = partition_of(a)
        else:  # K_NOT, K_STAR, K_REPEAT: the partition of the body
            p = part[a[0]]
        part[y] = p
    return part[x]


def _mask_partition(m: int) -> int:
    """The partition of a byte set: its bytes against the others."""
    bits = np.unpackbits(np.frombuffer(m.to_bytes(32, "little"), dtype=np.uint8), bitorder="little")
    lab = bits ^ (m & 1)
    reps = (lab * np.uint8(np.argmax(lab))).tobytes()
    return _intern_partition(lab.tobytes(), reps)


def n_nodes() -> int:
    """Number of nodes in the process-wide store."""
    return len(_kind)


def nullable(x: int) -> bool:
    """Does ``x`` match the empty string? O(1)."""
    return _null[x]


def byte_partition(x: int) -> tuple[bytes, bytes]:
    """``(labels, reps)``: class label of every byte and the representative byte of its class.

    Bytes with the same label have the same derivative of ``x``.
    """
    p = _part_of(x)
    return _part_labels[p], _part_reps[p]


def partition_arrays(pid: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """For partition id ``pid``: labels as ``uint8[256]`` and the representative byte per label."""
    r = _part_np.get(pid)
    if r is None:
        labels = _part_labels[pid]
        reps = _part_reps[pid]
        n = max(labels) + 1
        rep_of = [0] * n
        for lab in range(n - 1, -1, -1):
            rep_of[lab] = reps[labels.index(lab)]
        r = (np.frombuffer(labels, dtype=np.uint8), tuple(rep_of))
        _part_np[pid] = r
    return r


def partition_of(nodes: Iterable[int]) -> int:
    """The partition id refining the byte classes of all ``nodes`` (memoised on the set of
    their partitions; one numpy pass however many there are)."""
    pids = {_part_of(x) for x in nodes}
    pids.discard(_TRIVIAL)
    if len(pids) <= 1:
        return pids.pop() if pids else _TRIVIAL
    if len(pids) == 2:
        return _refine(*pids)
    key = tuple(sorted(pids))
    r = _multi_memo.get(key)
    if r is None:
        r = _intern_partition(_labels_by_first_use(zip(*(_part_labels[p] for p in key))))
        _multi_memo[key] = r
    return r


_deep_part: dict[int, int] = {}


def deep_partition(nodes: Iterable[int]) -> int:
    """Partition id refining the byte classes of every *subterm* of ``nodes``.

    Every derivative of a node is built from its subterms, so bytes in one class of this
    partition behave identically in every state reachable from ``nodes``: callers may group
    byte strings by their sequence of class labels. Memoised per node; iterative.
    """
    result = _TRIVIAL
    for root in nodes:
        if root not in _deep_part:
            stack = [(root, False)]
            while stack:
                x, expanded = stack.pop()
                if x in _deep_part:
                    continue
                kids = _children(x)
                if not expanded:
                    stack.append((x, True))
                    stack.extend((c, False) for c in kids if c not in _deep_part)
                    continue
                p = _part_of(x)
                for c in kids:
                    p = _refine(p, _deep_part[c])
                _deep_part[x] = p
        result = _refine(result, _deep_part[root])
    return result


_cap_memo: dict[tuple[int, int], int] = {}


def cap_counters(x: int, k: int) -> int:
    """``x`` with its counted repetitions loosened where no string shorter than ``k`` bytes
    can tell the difference: ``X{lo,hi}`` with ``hi >= k`` becomes ``X{min(lo, k),}``.

    For every byte string of fewer than ``k`` bytes, the result matches it iff ``x`` does and
    can extend it iff ``x`` can (each repetition of a non-nullable ``X`` takes a byte, so such
    a string neither exceeds ``hi`` nor reaches a capped ``lo``). Under ``&`` and ``~`` an
    extension of any length matters, so those subterms are left as they are. Walks of tokens
    shorter than ``k`` therefore see the same deaths and acceptances, and a string with
    ``maxLength: 100`` shares one walk for all its counter positions from ``k`` on.
    Memoised; iterative.
    """
    hit = _cap_memo.get((x, k))
    if hit is not None:
        return hit
    stack = [(x, False)]
    while stack:
        y, expanded = stack.pop()
        if (y, k) in _cap_memo:
            continue
        kind = _kind[y]
        if kind in (K_AND, K_NOT) or kind <= K_BYTES:
            _cap_memo[(y, k)] = y
            continue
        if not expanded:
            stack.append((y, True))
            stack.extend((c, False) for c in _children(y) if (c, k) not in _cap_memo)
            continue
        a = _args[y]
        if kind == K_CONCAT:
            r = concat(_cap_memo[(a[0], k)], _cap_memo[(a[1], k)])
        elif kind == K_ALT:
            r = alt(*[_cap_memo[(c, k)] for c in a])
        elif kind == K_STAR:
            r = star(_cap_memo[(a[0], k)])
        else:  # K_REPEAT
            c, lo, hi = a
            inner = _cap_memo[(c, k)]
            r = repeat(inner, min(lo, k), None) if hi < 0 or hi >= k else repeat(inner, lo, hi)
        _cap_memo[(y, k)] = r
    return _cap_memo[(x, k)]


def partition_labels(pid: int) -> bytes:
    """The 256 class labels of partition ``pid`` (byte 0 has label 0; labels by first use)."""
    return _part_labels[pid]


def _labels_by_first_use(keys: Iterable) -> bytes:
    """Normalised labels of 256 hashable keys: equal keys share a label, numbered by first
    occurrence. (Pure Python: numpy's ``unique`` costs ~0.3 ms per call on this numpy.)"""
    seen: dict = {}
    return bytes(seen.setdefault(k, len(seen)) for k in keys)


# -- smart constructors ---------------------------------------------------------------------
def _bytes_mask(m: int) -> int:
    if m == 0:
        return NOTHING
    x = _cons.get((K_BYTES, (m,)))
    if x is not None:
        return x
    return _mk(K_BYTES, (m,), False)


def byteset(values: Iterable[int]) -> int:
    """One byte from ``values`` (ints 0..255)."""
    m = 0
    for v in values:
        if not 0 <= v <= 255:
            raise ValueError(f"byte value out of range: {v}")
        m |= 1 << v
    return _bytes_mask(m)


def byte_range(lo: int, hi: int) -> int:
    """One byte in ``lo..hi`` inclusive."""
    if not 0 <= lo <= 255 or not 0 <= hi <= 255:
        raise ValueError(f"byte range out of range: {lo}..{hi}")
    if hi < lo:
        return NOTHING
    return _bytes_mask(((1 << (hi - lo + 1)) - 1) << lo)


_byte_nodes: list[int] = []  # the one-byte regex of every byte value


def literal(data: bytes) -> int:
    """Exactly the byte string ``data`` (the chain ``concat`` of its bytes would build)."""
    if not _byte_nodes:
        _byte_nodes.extend(_bytes_mask(1 << b) for b in range(256))
    if not data:
        return EPSILON
    one, get = _byte_nodes, _cons.get
    res = one[data[-1]]
    i = len(data) - 2
    while i >= 0:  # the longest suffix the store has already
        hit = get((K_CONCAT, (one[data[i]], res)))
        if hit is None:
            break
        res = hit
        i -= 1
    if i < 0:
        return res
    if len(_kind) + i + 1 > LIMITS["max_rx_nodes"]:  # let _mk raise
        for b in reversed(data[:i + 1]):
            res = _mk(K_CONCAT, (one[b], res), False)
        return res
    with _lock:  # the rest of the chain: _mk's records, inlined (single byte heads)
        kind, args, null, part, weight, first, boolean, cons = (
            _kind, _args, _null, _part, _weight, _first, _boolean, _cons)
        for b in reversed(data[:i + 1]):
            h = one[b]
            key = (K_CONCAT, (h, res))
            x = cons.get(key)
            if x is None:
                x = len(kind)
                kind.append(K_CONCAT)
                args.append(key[1])
                null.append(False)
                part.append(_UNSET)
                weight.append(1)
                first.append(first[h])  # a byte is never nullable: the head decides
                boolean.append(boolean[res])
                cons[key] = x
            res = x
    return res


_literal_memo: dict[int, bytes | None] = {}


def literal_bytes(x: int) -> bytes | None:
    """The one byte string ``x`` matches, if ``x`` is a literal (a chain of single bytes, or
    EPSILON); None otherwise. Memoised; O(length) on first call."""
    hit = _literal_memo.get(x, False)
    if hit is not False:
        return hit  # type: ignore[return-value]
    out = bytearray()
    y = x
    while y != EPSILON:
        k = _kind[y]
        if k == K_CONCAT:
            h, y = _args[y]
        elif k == K_BYTES:
            h, y = y, EPSILON
        else:
            out = None  # type: ignore[assignment]
            break
        if _kind[h] != K_BYTES:
            out = None  # type: ignore[assignment]
            break
        m = _args[h][0]
        if m & (m - 1):
            out = None  # type: ignore[assignment]
            break
        out.append(m.bit_length() - 1)
    result = bytes(out) if out is not None else None
    with _lock:
        _literal_memo[x] = result
    return result


def split_negation(x: int) -> tuple[int, int, int] | None:
    """``(A, B, rest)`` for a node ``(A & ~B1 & ~B2 ...) rest`` (``rest`` may be EPSILON) whose
    negated conjuncts all start here; ``B`` is ``B1 | B2 ...`` and ``A`` the intersection of
    the other conjuncts. None for any other shape."""
    head, rest = (_args[x] if _kind[x] == K_CONCAT else (x, EPSILON))
    if _kind[head] != K_AND:
        return None
    negs = [_args[c][0] for c in _args[head] if _kind[c] == K_NOT]
    pos = [c for c in _args[head] if _kind[c] != K_NOT]
    if not negs or not pos:
        return None
    return intersect(*pos), alt(*negs), rest


def first_bytes(x: int) -> int:
    """Over-approximation of the bytes ``x`` may start with (a 256-bit mask)."""
    return _first[x]


_alphabet_memo: dict[int, int] = {}


def alphabet(x: int) -> int:
    """Over-approximation of the bytes that occur anywhere in a match of ``x`` (256-bit mask;
    everything under a complement). Memoised."""
    hit = _alphabet_memo.get(x)
    if hit is not None:
        return hit
    k = _kind[x]
    if k == K_BYTES:
        m = _args[x][0]
    elif k in (K_NOTHING, K_EPS):
        m = 0
    elif k == K_NOT:
        m = _FULL
    elif k in (K_CONCAT, K_ALT, K_AND):
        m = 0
        for c in _args[x]:
            m |= alphabet(c)
    else:  # K_STAR, K_REPEAT
        m = alphabet(_args[x][0])
    _alphabet_memo[x] = m
    return m


def literal_set(x: int, limit: int = 256) -> list[bytes] | None:
    """The byte strings of ``x`` if it is a union of at most ``limit`` literals, else None."""
    one = literal_bytes(x)
    if one is not None:
        return [one]
    if _kind[x] != K_ALT or len(_args[x]) > limit:
        return None
    out = []
    for c in _args[x]:
        lit = literal_bytes(c)
        if lit is None:
            return None
        out.append(lit)
    return out


def concat(*xs: int) -> int:
    """Concatenation (right-nested, EPSILON removed, NOTHING absorbing).

    Only the leading operands are flattened: the last one is already a canonical chain, so
    ``concat(d, tail)`` in a derivative costs O(len(d)), not O(len(tail)).
    """
    if not xs:
        return EPSILON
    res = xs[-1]
    if res == NOTHING:
        return NOTHING
    items: list[int] = []
    for x in xs[:-1]:
        if x == NOTHING:
            return NOTHING
        while _kind[x] == K_CONCAT:
            h, x = _args[x]
            items.append(h)
        if x != EPSILON:
            items.append(x)
    for h in reversed(items):
        if res == EPSILON:
            res = h
            continue
        hit = _cons.get((K_CONCAT, (h, res)))
        if hit is not None:
            res = hit
            continue
        res = _mk(K_CONCAT, (h, res), _null[h] and _null[res], max(_weight[h], _weight[res]))
    return res


def alt(*xs: int) -> int:
    """Alternation: flattened, byte sets merged, NOTHING dropped, sorted and deduplicated."""
    kids: set[int] = set()
    mask = 0
    for x in xs:
        k = _kind[x]
        if k == K_ALT:
            for c in _args[x]:
                if _kind[c] == K_BYTES:
                    mask |= _args[c][0]
                else:
                    kids.add(c)
        elif k == K_BYTES:
            mask |= _args[x][0]
        elif k != K_NOTHING:
            kids.add(x)
    if ANY_BYTES in kids:
        return ANY_BYTES
    if mask:
        kids.add(_bytes_mask(mask))
    if EPSILON in kids and len(kids) > 1 and any(_null[c] for c in kids if c != EPSILON):
        kids.discard(EPSILON)
    if not kids:
        return NOTHING
    if len(kids) == 1:
        return kids.pop()
    t = tuple(sorted(kids))
    hit = _cons.get((K_ALT, t))
    if hit is not None:
        return hit
    return _mk(K_ALT, t, any(_null[c] for c in t), max(_weight[c] for c in t))


def intersect(*xs: int) -> int:
    """Intersection: flattened, sorted, deduplicated; ANY_BYTES is the identity."""
    kids: set[int] = set()
    mask = _FULL
    has_mask = False
    for x in xs:
        k = _kind[x]
        if k == K_NOTHING:
            return NOTHING
        for c in _args[x] if k == K_AND else (x,):
            if _kind[c] == K_BYTES:
                mask &= _args[c][0]
                has_mask = True
            elif c != ANY_BYTES:
                kids.add(c)
    if has_mask:
        if mask == 0:
            return NOTHING
        kids.add(_bytes_mask(mask))
    if EPSILON in kids:
        return EPSILON if all(_null[c] for c in kids) else NOTHING
    if not kids:
        return ANY_BYTES
    if len(kids) == 1:
        return kids.pop()
    t = tuple(sorted(kids))
    hit = _cons.get((K_AND, t))
    if hit is not None:
        return hit
    return _mk(K_AND, t, all(_null[c] for c in t), max(_weight[c] for c in t))


def complement(x: int) -> int:
    """All byte strings not matched by ``x`` (may include invalid UTF-8)."""
    if _kind[x] == K_NOT:
        return _args[x][0]
    return _mk(K_NOT, (x,), not _null[x], _weight[x])


def star(x: int) -> int:
    """Zero or more ``x``."""
    k = _kind[x]
    if k in (K_NOTHING, K_EPS):
        return EPSILON
    if k == K_STAR or x == ANY_BYTES:
        return x
    if k == K_ALT and EPSILON in _args[x]:
        return star(alt(*[c for c in _args[x] if c != EPSILON]))
    if k == K_REPEAT and _args[x][1] == 0:
        return star(_args[x][0])
    return _mk(K_STAR, (x,), True, _weight[x])


def plus(x: int) -> int:
    """One or more ``x`` (``x x*``)."""
    return repeat(x, 1, None)


def opt(x: int) -> int:
    """Zero or one ``x``."""
    return alt(EPSILON, x)


def repeat(x: int, lo: int, hi: int | None) -> int:
    """``x{lo,hi}`` (``hi=None``: unbounded). Raises LimitExceeded when ``x`` itself has a
    counted repetition and the product of the bounds passes ``max_repeat``."""
    if lo < 0 or (hi is not None and hi < lo):
        raise RegexError(f"invalid repetition bounds {{{lo},{'' if hi is None else hi}}}")
    if hi == 0 or x == EPSILON:
        return EPSILON
    if x == NOTHING:
        return EPSILON if lo == 0 else NOTHING
    if _null[x]:
        lo = 0
    if hi is None:
        if lo == 0:
            return star(x)
        if lo == 1:
            return concat(x, star(x))
    elif hi == 1:
        return x if lo == 1 else opt(x)
    # A counter over a body without counters is cheap at any bound: each derivative steps the
    # count down by one (``x{lo,hi}`` -> ``d(x) x{lo-1,hi-1}``), so a DFA state exists only
    # per count actually reached. Only *nested* counters multiply their bounds into states
    # that short strings can reach; those are what ``max_repeat`` bounds.
    weight = max(lo, hi or 0) * _weight[x]
    if _weight[x] > 1 and weight > LIMITS["max_repeat"]:
        raise LimitExceeded(
            "max_repeat",
            LIMITS["max_repeat"],
            f"resource limit max_repeat={LIMITS['max_repeat']} exceeded: nested counted "
            f"repetition amounts to {weight} copies",
        )
    return _mk(K_REPEAT, (x, lo, -1 if hi is None else hi), lo == 0, weight)


# -- derivatives ------------------------------------------------------------------------------
def derivative(x: int, b: int) -> int:
    """The Brzozowski derivative of ``x`` by byte ``b``, memoised per (node, byte class)."""
    p = _part[x]
    key = (x << 8) | _part_reps[p if p != _UNSET else _part_of(x)][b]
    r = _dmemo.get(key)
    if r is None:
        r = _derive(x, b)
        _dmemo[key] = r
    return r


def _derive(x: int, b: int) -> int:
    k = _kind[x]
    if k <= K_EPS:
        return NOTHING
    a = _args[x]
    if k == K_BYTES:
        return EPSILON if (a[0] >> b) & 1 else NOTHING
    if k == K_CONCAT:
        parts = []
        while True:
            h, t = _args[x]
            parts.append(concat(derivative(h, b), t))
            if not _null[h]:
                break
            if _kind[t] != K_CONCAT:
                parts.append(derivative(t, b))
                break
            x = t
        return alt(*parts) if len(parts) > 1 else parts[0]
    if k == K_ALT:
        if len(a) >= _ALT_INDEX_MIN:  # e.g. an enum of 10k strings: visit only live children
            a = _alt_children_for(x, a).get(b, ())
        return alt(*[derivative(c, b) for c in a])
    if k == K_AND:
        return intersect(*[derivative(c, b) for c in a])
    if k == K_NOT:
        return complement(derivative(a[0], b))
    if k == K_STAR:
        return concat(derivative(a[0], b), x)
    # K_REPEAT
    c, lo, hi = a
    return concat(derivative(c, b), repeat(c, max(lo - 1, 0), None if hi < 0 else hi - 1))


def _alt_children_for(x: int, kids: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """Children of a large alternation bucketed by the bytes that may start them (cached)."""
    idx = _alt_index.get(x)
    if idx is None:
        buckets: dict[int, list[int]] = {}
        for c in kids:
            m = _first[c]
            while m:
                low = m & -m
                buckets.setdefault(low.bit_length() - 1, []).append(c)
                m ^= low
        idx = {b: tuple(cs) for b, cs in buckets.items()}
        _alt_index[x] = idx
    return idx


def matches(x: int, data: bytes) -> bool:
    """Does ``x`` match all of ``data``? One memoised derivative per byte."""
    for b in data:
        x = derivative(x, b)
        if x == NOTHING:
            return False
    return _null[x]


# -- Unicode ------------------------------------------------------------------------------------
def _range_mask(lo: int, hi: int) -> int:
    return ((1 << (hi - lo + 1)) - 1) << lo


def _build_utf8(seqs: list[tuple[tuple[int, int], ...]]) -> int:
    """A byte automaton for a set of disjoint UTF-8 sequences: a trie by first byte range whose
    siblings with identical (hash-consed) tails are merged into one byte set."""
    by_first: dict[tuple[int, int], list[tuple[tuple[int, int], ...]]] = {}
    for s in seqs:
        by_first.setdefault(s[0], []).append(s[1:])
    by_tail: dict[int, int] = {}
    for (lo, hi), rests in by_first.items():
        tail = EPSILON if rests[0] == () else _build_utf8(rests)
        by_tail[tail] = by_tail.get(tail, 0) | _range_mask(lo, hi)
    return alt(*[concat(_bytes_mask(m), t) for t, m in by_tail.items()])


_cp_memo: dict[tuple[tuple[int, int], ...], int] = {}


def codepoint_ranges(ranges: Sequence[tuple[int, int]]) -> int:
    """One character (UTF-8 encoded) whose code point lies in one of the inclusive ``ranges``.

    Surrogates never match. Memoised on the ranges.
    """
    key = tuple(sorted((max(lo, 0), min(hi, 0x10FFFF)) for lo, hi in ranges if lo <= hi))
    r = _cp_memo.get(key)
    if r is None:
        seqs: list[tuple[tuple[int, int], ...]] = []
        for lo, hi in key:
            if lo <= hi:
                seqs.extend(utf8_sequences(lo, hi))
        r = _build_utf8(seqs) if seqs else NOTHING
        _cp_memo[key] = r
    return r


def codepoint_range(lo: int, hi: int) -> int:
    """One UTF-8 encoded character in ``lo..hi`` (inclusive code points)."""
    return codepoint_ranges([(lo, hi)])


def any_char(include_newline: bool = True) -> int:
    """Any one valid UTF-8 encoded character (``.`` with or without the ``s`` flag)."""
    if include_newline:
        return codepoint_ranges([(0, 0x10FFFF)])
    return codepoint_ranges([(0, 9), (11, 0x10FFFF)])


def from_literal(text: str, case_insensitive: bool = False) -> int:
    """The UTF-8 bytes of ``text``; with ``case_insensitive`` every character matches its
    Unicode simple case-folding orbit. Raises RegexError for a lone surrogate."""
    for i, c in enumerate(text):
        if 0xD800 <= ord(c) <= 0xDFFF:
            raise RegexError(
                f"lone surrogate U+{ord(c):04X} at offset {i} cannot be matched in UTF-8"
            )
    if not case_insensitive:
        return literal(text.encode("utf-8"))
    return concat(*[codepoint_ranges(case_fold_ranges([(ord(c), ord(c))])) for c in text])




# -- transport between processes ----------------------------------------------------------------
def export_nodes(roots: Sequence[int]) -> tuple[tuple, ...]:
    """A process-independent description of the DAG under ``roots`` (for pickling).

    Node ids are only meaningful inside one process; :func:`import_nodes` rebuilds the same
    languages (and canonical ids) in another. Returns ``(nodes, root_positions)`` where each
    node is ``(kind, args)`` with children given as positions in ``nodes``.
    """
    order: list[int] = []
    pos: dict[int, int] = {}
    for root in roots:
        stack = [(root, False)]
        while stack:
            x, expanded = stack.pop()
            if x in pos:
                continue
            if expanded:
                pos[x] = len(order)
                order.append(x)
                continue
            stack.append((x, True))
            stack.extend((c, False) for c in _children(x) if c not in pos)
    nodes = []
    for x in order:
        k, a = _kind[x], _args[x]
        if k in (K_CONCAT, K_ALT, K_AND, K_NOT, K_STAR):
            a = tuple(pos[c] for c in a)
        elif k == K_REPEAT:
            a = (pos[a[0]], a[1], a[2])
        nodes.append((k, a))
    return (tuple(nodes), tuple(pos[r] for r in roots))


def _children(x: int) -> tuple[int, ...]:
    return _children_of(_kind[x], _args[x])


def has_boolean(x: int) -> bool:
    """Does ``x`` contain ``&`` or ``~``? Without them a node other than ``NOTHING`` always
    matches some string (the smart constructors fold every empty positive regex)."""
    return _boolean[x]


def import_nodes(data: tuple[tuple, ...]) -> list[int]:
    """Rebuild the roots described by :func:`export_nodes` in this process' store."""
    nodes, roots = data
    ids: list[int] = []
    for k, a in nodes:
        if k == K_NOTHING:
            x = NOTHING
        elif k == K_EPS:
            x = EPSILON
        elif k == K_BYTES:
            x = _bytes_mask(a[0])
        elif k == K_CONCAT:
            x = concat(ids[a[0]], ids[a[1]])
        elif k == K_ALT:
            x = alt(*[ids[c] for c in a])
        elif k == K_AND:
            x = intersect(*[ids[c] for c in a])
        elif k == K_NOT:
            x = complement(ids[a[0]])
        elif k == K_STAR:
            x = star(ids[a[0]])
        elif k == K_REPEAT:
            x = repeat(ids[a[0]], a[1], None if a[2] < 0 else a[2])
        else:
            raise ValueError(f"unknown regex node kind {k}")
        ids.append(x)
    return [ids[r] for r in roots]




# -- generations: a bounded store for a long-running process ---------------------------------
#
# Ids are handed out forever in an append-only store, so a server compiling ever new grammars
# would grow it without end. Every compile runs inside ``building()``; when none is running and
# the store is past ``rotate_rx_nodes``, it is cut back to its *base*: the nodes that existed
# once every front-end module was imported (their module-level constants, such as a JSON
# number's regex). Memos are emptied, ``functools.lru_cache`` caches of lexguide's modules
# cleared, and the hooks of :func:`on_rotate` run (the core mirror starts a new generation).
# A grammar is lowered into the core inside the build that made it, so no live grammar refers
# to a node that was cut.

_FRONT_ENDS = ("lexguide.grammar", "lexguide.jsonschema", "lexguide.regex")
_builds = 0
_base: tuple[int, int] | None = None  # (nodes, partitions) to keep
_generation = 0
_rotate_hooks: list = []


def generation() -> int:
    """How many times the store was cut back (node ids of different generations differ)."""
    return _generation


def on_rotate(hook) -> None:
    """Call ``hook()`` after each cut of the store (under the store's lock)."""
    _rotate_hooks.append(hook)


class building:
    """Context of one compile (front end to core): the store is never cut while one runs.

    On entry, with no other compile running and the store past ``rotate_rx_nodes``, the store
    is cut back to its base first."""

    def __enter__(self) -> Self:
        global _builds
        if _base is None:
            _set_base()
        with _lock:
            if _builds == 0 and len(_kind) > LIMITS["rotate_rx_nodes"]:
                _rotate()
            _builds += 1
        return self

    def __exit__(self, *exc) -> None:
        global _builds
        with _lock:
            _builds -= 1


def _set_base() -> None:
    """Import every front-end module (their constants become the base), then note the sizes.
    The imports run outside ``_lock``: a module being imported by another thread may be
    building its constants."""
    global _base
    import importlib

    todo = list(_FRONT_ENDS)
    while todo:
        name = todo.pop()
        module = importlib.import_module(name)
        todo.extend(_submodules(name, getattr(module, "__path__", None)))
    with _lock:
        if _base is None:
            _base = (len(_kind), len(_part_labels))


def _submodules(name: str, path: list[str] | None) -> list[str]:
    """The modules and subpackages of package ``name`` in its ``__path__`` directories (what
    ``pkgutil.iter_modules`` lists for a package on disk, without importing pkgutil: this runs
    in the first compile of a process). Anything but a directory falls back to pkgutil."""
    import os
    from importlib.machinery import all_suffixes

    suffixes = tuple(all_suffixes())  # .py, .pyc, extension modules
    out: list[str] = []
    for folder in path or ():
        if not os.path.isdir(folder):
            import pkgutil

            out += [f"{name}.{info.name}" for info in pkgutil.iter_modules([folder])]
            continue
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            stem = entry.name.partition(".")[0]
            if not stem.isidentifier() or stem == "__init__" or f"{name}.{stem}" in out:
                continue
            if entry.is_dir():
                if os.path.isfile(os.path.join(entry.path, "__init__.py")):
                    out.append(f"{name}.{stem}")
            elif entry.name.endswith(suffixes):
                out.append(f"{name}.{stem}")
    return out


_MEMOS = (_cons, _part_ids, _refine_memo, _multi_memo, _part_np, _dmemo, _alt_index, _deep_part,
          _cap_memo, _literal_memo, _alphabet_memo, _cp_memo, _byte_nodes)


def _rotate() -> None:
    """Cut the store back to its base (no compile may be running). Under ``_lock``."""
    global _generation
    import functools
    import sys

    n, n_parts = _base  # type: ignore[misc]
    for column in (_kind, _args, _null, _part, _weight, _first, _boolean):
        del column[n:]
    del _part_labels[n_parts:]
    del _part_reps[n_parts:]
    for x in range(n):  # partitions are computed on first use: a base node's may have been cut
        if _part[x] >= n_parts:
            _part[x] = _UNSET
    for memo in _MEMOS:
        memo.clear()
    _cons.update(((_kind[x], _args[x]), x) for x in range(n))
    _part_ids.update((labels, pid) for pid, labels in enumerate(_part_labels))
    for name, module in list(sys.modules.items()):
        if name.startswith("lexguide.") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()
    _generation += 1
    for hook in _rotate_hooks:
        hook()
