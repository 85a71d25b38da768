"""Hash-consed regular expressions over bytes: a facade over the core's regex store.

Every regex is an ``int`` id in the core's store (``csrc/engine/regex.h``), the one the lexer
derives: this module builds nodes there and asks it questions, and holds no regex algebra of
its own. Smart constructors put nodes in a canonical form (flattened, sorted and deduplicated
alternations and intersections, NOTHING / EPSILON absorption, right-nested concatenation, byte
sets as 256-bit ints here and 32-byte sets in the core, normalised repetition), so two regexes
built the same way -- or differing only by associativity, commutativity and idempotence of
``|``/``&`` -- get the same id. That is what makes derivatives finite (Brzozowski 1964) and
what lets the engine share lexer states across grammars. Derivatives are memoised per byte
class (Owens, Reppy & Turon, JFP 2009, section 4.2).

Unicode: :func:`codepoint_ranges` compiles code-point ranges to a UTF-8 byte automaton (ranges
split into UTF-8 byte-range sequences, as in the Rust ``utf8-ranges`` algorithm), so character
classes only ever match valid UTF-8.

Limits (:data:`LIMITS`; the store's are the core's, ``csrc/engine/limits.h``, and setting them
here sets them there): ``max_rx_nodes`` bounds one store; ``max_repeat`` bounds the product of
the bounds of *nested* counted repetitions (a single counter over a counter-free body, such as
a string's ``maxLength``, is a counter: its derivatives count down, one state per count
reached, so it has no such limit); ``max_regex_nodes`` bounds the nodes one
:func:`lexguide.regex.syntax.parse_regex` call may create; past ``rotate_rx_nodes`` (or the
core's marks on lexer states and bytes) the next compile starts a new *generation* (see
:class:`building`). Exceeding a limit raises :class:`lexguide.errors.LimitExceeded`.

Thread safety: the core's store takes its lock in every call; the memos here are single dict
stores.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Self

import numpy as np

from lexguide import _core
from lexguide.errors import RegexError
from lexguide.regex.unicode import case_fold_ranges, utf8_sequences

__all__ = [
    "ANY_BYTES",
    "EPSILON",
    "LIMITS",
    "NOTHING",
    "alt",
    "any_char",
    "args",
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
    "empty_among",
    "export_nodes",
    "from_literal",
    "generation",
    "import_nodes",
    "intersect",
    "is_empty",
    "kind",
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
    "store",
]

_MAX_NODES, _MAX_REPEAT, _ROTATE_NODES = _core.REGEX_LIMITS


class _Limits(dict):
    """The limits; ``max_rx_nodes`` and ``max_repeat`` live in the core, set through here."""

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)
        if key in ("max_rx_nodes", "max_repeat"):
            _core.set_regex_limits(self["max_rx_nodes"], self["max_repeat"])


#: Resource limits (mutable: set before building regexes); see the module's docstring.
LIMITS: dict[str, int] = _Limits(
    max_rx_nodes=_MAX_NODES,
    rotate_rx_nodes=_ROTATE_NODES,
    max_repeat=_MAX_REPEAT,
    max_regex_nodes=200_000,
)

# node kinds (the core's RxKind)
K_NOTHING, K_EPS, K_BYTES, K_CONCAT, K_ALT, K_AND, K_NOT, K_STAR, K_REPEAT = range(9)
NOTHING, EPSILON, ANY_BYTES = 0, 1, 2  # the first nodes of every store
_FULL = (1 << 256) - 1

_lock = threading.RLock()
_S = _core.generation()  # the current generation: its store is the one regexes are built in


def _bind() -> None:
    """Bind the current generation's calls (after each new generation)."""
    global _bytes, _literal, _concat, _concat2, _alt, _intersect, _complement, _star, _repeat
    global _nullable, _derivative, _matches, _kind, _args, _has_boolean
    s = _S
    _bytes, _literal, _concat, _concat2 = s.bytes, s.literal, s.concat, s.concat2
    _alt, _intersect, _complement, _star, _repeat = s.alt, s.intersect, s.complement, s.star, s.repeat
    _nullable, _derivative, _matches, _kind, _args = s.nullable, s.derivative, s.matches, s.kind, s.args
    _has_boolean = s.has_boolean


_bind()


def store() -> _core.Generation:
    """The current generation (the core's store the regexes of this module's ids live in, and
    the lexer DFA grammars built now are lowered into)."""
    return _S


def n_nodes() -> int:
    """Number of nodes in the current store."""
    return _S.n_nodes


def nullable(x: int) -> bool:
    """Does ``x`` match the empty string? O(1)."""
    return _nullable(x)


def has_boolean(x: int) -> bool:
    """Does ``x`` contain ``&`` or ``~``? Without them a node other than ``NOTHING`` always
    matches some string (the smart constructors fold every empty positive regex)."""
    return _has_boolean(x)


def kind(x: int) -> int:
    """The kind of node ``x`` (``K_NOTHING`` .. ``K_REPEAT``)."""
    return _kind(x)


def args(x: int) -> tuple:
    """The operands of ``x``: ``(mask,)`` for a byte set (a 256-bit int), ``(child, lo, hi)``
    for a repetition (``hi`` -1: unbounded), the children otherwise (a concatenation's
    ``(head, tail)``, the sorted operands of ``|`` and ``&``, the body of ``~`` and ``*``)."""
    a = _args(x)
    if a and isinstance(a[0], bytes):
        return (int.from_bytes(a[0], "little"),)
    return a


def _children(x: int) -> tuple[int, ...]:
    k = _kind(x)
    if k <= K_BYTES:
        return ()
    a = _args(x)
    return a[:1] if k == K_REPEAT else a


# -- questions --------------------------------------------------------------------------------
def derivative(x: int, b: int) -> int:
    """The Brzozowski derivative of ``x`` by byte ``b`` (memoised in the core)."""
    return _derivative(x, b)


def matches(x: int, data: bytes) -> bool:
    """Does ``x`` match all of ``data``? One memoised derivative per byte, in the core."""
    return _matches(x, bytes(data))


def is_empty(x: int) -> bool:
    """Whether regex ``x`` provably matches no string. Without ``&``/``~`` that is
    ``x == NOTHING``; with them the core searches its derivatives (breadth first, at most
    ``kNonEmptyBudget`` = 5,000 states, ``csrc/engine/limits.h``) for a nullable one. Past
    the bound the answer is "not empty", which is safe: the lexer still makes dead states
    DEAD. Memoised in the core."""
    if x == NOTHING:
        return True
    if not _has_boolean(x):
        return False
    return not _S.nonempty(x)


def empty_among(xs: list[int]) -> list[bool]:
    """:func:`is_empty` of each of ``xs``, in one core call."""
    out = [x == NOTHING for x in xs]
    ask = [i for i, x in enumerate(xs) if not out[i] and _has_boolean(x)]
    if ask:
        for i, nonempty in zip(ask, _S.nonempty_many([xs[i] for i in ask])):
            out[i] = not nonempty
    return out


def byte_partition(x: int) -> tuple[bytes, bytes]:
    """``(labels, reps)``: class label of every byte (byte 0 has label 0, labels by first use)
    and the representative (smallest) byte of its class. Bytes with the same label have the
    same derivative of ``x``."""
    return _S.byte_partition(x)


# partitions of 0..255 as values: labels normalised by first occurrence, numbered here
_part_labels: list[bytes] = []
_part_ids: dict[bytes, int] = {}
_part_np: dict[int, tuple[np.ndarray, tuple[int, ...]]] = {}
_refine_memo: dict[tuple[int, ...], int] = {}


def _intern_partition(labels: bytes) -> int:
    pid = _part_ids.get(labels)
    if pid is None:
        with _lock:
            pid = _part_ids.get(labels)
            if pid is None:
                pid = len(_part_labels)
                _part_labels.append(labels)
                _part_ids[labels] = pid
    return pid


_TRIVIAL = _intern_partition(bytes(256))


def _labels_by_first_use(keys: Iterable) -> bytes:
    """Normalised labels of 256 hashable keys: equal keys share a label, numbered by first
    occurrence."""
    seen: dict = {}
    return bytes(seen.setdefault(k, len(seen)) for k in keys)


def _refine_all(pids: Iterable[int]) -> int:
    """The common refinement of partitions ``pids`` (memoised on the set)."""
    s = set(pids)
    s.discard(_TRIVIAL)
    if len(s) <= 1:
        return s.pop() if s else _TRIVIAL
    key = tuple(sorted(s))
    r = _refine_memo.get(key)
    if r is None:
        r = _intern_partition(_labels_by_first_use(zip(*(_part_labels[p] for p in key))))
        _refine_memo[key] = r
    return r


def partition_of(nodes: Iterable[int]) -> int:
    """The partition id refining the byte classes of all ``nodes``."""
    return _refine_all(_intern_partition(_S.byte_partition(x)[0]) for x in nodes)


def partition_arrays(pid: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """For partition id ``pid``: labels as ``uint8[256]`` and the representative byte per label."""
    r = _part_np.get(pid)
    if r is None:
        labels = _part_labels[pid]
        n = max(labels) + 1
        rep_of = [0] * n
        for lab in range(n - 1, -1, -1):
            rep_of[lab] = labels.index(lab)
        r = (np.frombuffer(labels, dtype=np.uint8), tuple(rep_of))
        _part_np[pid] = r
    return r


def partition_labels(pid: int) -> bytes:
    """The 256 class labels of partition ``pid`` (byte 0 has label 0; labels by first use)."""
    return _part_labels[pid]


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
                _deep_part[x] = _refine_all([partition_of([x])] + [_deep_part[c] for c in kids])
        result = _refine_all((result, _deep_part[root]))
    return result


_cap_memo: dict[tuple[int, int], int] = {}


def cap_counters(x: int, k: int) -> int:
    """``x`` with its counted repetitions loosened where no string shorter than ``k`` bytes
    can tell the difference: ``X{lo,hi}`` with ``hi >= k`` becomes ``X{min(lo, k),}``.

    For every byte string of fewer than ``k`` bytes, the result matches it iff ``x`` does and
    can extend it iff ``x`` can (each repetition of a non-nullable ``X`` takes a byte, so such
    a string neither exceeds ``hi`` nor reaches a capped ``lo``). Under ``&`` and ``~`` an
    extension of any length matters, so those subterms are left as they are. Memoised;
    iterative.
    """
    hit = _cap_memo.get((x, k))
    if hit is not None:
        return hit
    stack = [(x, False)]
    while stack:
        y, expanded = stack.pop()
        if (y, k) in _cap_memo:
            continue
        ky = _kind(y)
        if ky in (K_AND, K_NOT) or ky <= K_BYTES:
            _cap_memo[(y, k)] = y
            continue
        if not expanded:
            stack.append((y, True))
            stack.extend((c, False) for c in _children(y) if (c, k) not in _cap_memo)
            continue
        a = _args(y)
        if ky == K_CONCAT:
            r = concat(_cap_memo[(a[0], k)], _cap_memo[(a[1], k)])
        elif ky == K_ALT:
            r = alt(*[_cap_memo[(c, k)] for c in a])
        elif ky == K_STAR:
            r = star(_cap_memo[(a[0], k)])
        else:  # K_REPEAT
            c, lo, hi = a
            inner = _cap_memo[(c, k)]
            r = repeat(inner, min(lo, k), None) if hi < 0 or hi >= k else repeat(inner, lo, hi)
        _cap_memo[(y, k)] = r
    return _cap_memo[(x, k)]


_literal_memo: dict[int, bytes | None] = {}


def literal_bytes(x: int) -> bytes | None:
    """The one byte string ``x`` matches, if ``x`` is a literal (a chain of single bytes, or
    EPSILON); None otherwise. Memoised; O(length) on first call."""
    hit = _literal_memo.get(x, False)
    if hit is not False:
        return hit  # type: ignore[return-value]
    out: bytearray | None = bytearray()
    y = x
    while y != EPSILON:
        k = _kind(y)
        if k == K_CONCAT:
            h, y = _args(y)
        elif k == K_BYTES:
            h, y = y, EPSILON
        else:
            out = None
            break
        m = args(h)[0] if _kind(h) == K_BYTES else 0
        if not m or m & (m - 1):
            out = None
            break
        out.append(m.bit_length() - 1)
    result = bytes(out) if out is not None else None
    _literal_memo[x] = result
    return result


def literal_set(x: int, limit: int = 256) -> list[bytes] | None:
    """The byte strings of ``x`` if it is a union of at most ``limit`` literals, else None."""
    one = literal_bytes(x)
    if one is not None:
        return [one]
    if _kind(x) != K_ALT:
        return None
    kids = _args(x)
    if len(kids) > limit:
        return None
    out = []
    for c in kids:
        lit = literal_bytes(c)
        if lit is None:
            return None
        out.append(lit)
    return out


# -- smart constructors (the core's) -----------------------------------------------------------
_byte_memo: dict[int, int] = {}  # 256-bit mask -> its node


def _bytes_mask(m: int) -> int:
    x = _byte_memo.get(m)
    if x is None:
        x = _bytes(m.to_bytes(32, "little")) if m else NOTHING
        _byte_memo[m] = x
    return x


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


def literal(data: bytes) -> int:
    """Exactly the byte string ``data`` (the chain ``concat`` of its bytes would build)."""
    return _literal(data)


def concat(*xs: int) -> int:
    """Concatenation (right-nested, EPSILON removed, NOTHING absorbing)."""
    if len(xs) == 2:
        return _concat2(xs[0], xs[1])
    return _concat(xs)


def alt(*xs: int) -> int:
    """Alternation: flattened, byte sets merged, NOTHING dropped, sorted and deduplicated."""
    return _alt(xs)


def intersect(*xs: int) -> int:
    """Intersection: flattened, byte sets intersected, ANY_BYTES dropped, sorted and
    deduplicated; NOTHING absorbing."""
    return _intersect(xs)


def complement(x: int) -> int:
    """All byte strings not matched by ``x`` (may include invalid UTF-8)."""
    return _complement(x)


def star(x: int) -> int:
    """Zero or more ``x``."""
    return _star(x)


def plus(x: int) -> int:
    """One or more ``x`` (``x x*``)."""
    return _repeat(x, 1, -1)


def opt(x: int) -> int:
    """Zero or one ``x``."""
    return _alt((EPSILON, x))


def repeat(x: int, lo: int, hi: int | None) -> int:
    """``x{lo,hi}`` (``hi=None``: unbounded). Raises LimitExceeded when ``x`` itself has a
    counted repetition and the product of the bounds passes ``max_repeat``."""
    if lo < 0 or (hi is not None and hi < lo):
        raise RegexError(f"invalid repetition bounds {{{lo},{'' if hi is None else hi}}}")
    return _repeat(x, lo, -1 if hi is None else hi)


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

    Node ids are only meaningful inside one store; :func:`import_nodes` rebuilds the same
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
        k, a = _kind(x), args(x)
        if k in (K_CONCAT, K_ALT, K_AND, K_NOT, K_STAR):
            a = tuple(pos[c] for c in a)
        elif k == K_REPEAT:
            a = (pos[a[0]], a[1], a[2])
        nodes.append((k, a))
    return (tuple(nodes), tuple(pos[r] for r in roots))


def import_nodes(data: tuple[tuple, ...]) -> list[int]:
    """Rebuild the roots described by :func:`export_nodes` in the current store."""
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
# the current generation is past its marks (``rotate_rx_nodes`` nodes, or the core's marks on
# lexer states and bytes, csrc/engine/limits.h), the core starts a new generation whose store
# keeps the *base*: the nodes that existed once every front-end module was imported (their
# module-level constants, such as a JSON number's regex), with the same ids. An id past the base
# carries its generation's tag (its high 32 bits, csrc/engine/regex.h): a new generation hands
# the same node indices out again, and the core refuses an id of a replaced generation with a
# CoreRegexError instead of reading it as another regex. The memos here are
# emptied, ``functools.lru_cache`` caches of lexguide's modules cleared, and the hooks of
# :func:`on_rotate` run. A grammar is lowered into the core inside the build that made it and
# keeps its generation (store and lexer DFA) alive, so no live grammar refers to a node that
# was cut; an old generation is freed with the last grammar using it.

_FRONT_ENDS = ("lexguide.grammar", "lexguide.jsonschema", "lexguide.regex")
_builds = 0
_base: int | None = None  # nodes to keep
_generation = 0
_rotate_hooks: list = []


def generation() -> int:
    """How many times a new generation was started (node ids of different generations past
    the base differ)."""
    return _generation


def on_rotate(hook) -> None:
    """Call ``hook()`` after each new generation (under this module's lock)."""
    _rotate_hooks.append(hook)


class building:
    """Context of one compile (front end to core): no new generation starts while one runs.

    On entry, with no other compile running and the current generation past its marks, a new
    generation starts first."""

    def __enter__(self) -> Self:
        global _builds
        if _base is None:
            _set_base()
        with _lock:
            if _builds == 0 and _core.generation_past_marks(LIMITS["rotate_rx_nodes"]):
                _rotate()
            _builds += 1
        return self

    def __exit__(self, *exc) -> None:
        global _builds
        with _lock:
            _builds -= 1


def _set_base() -> None:
    """Import every front-end module (their constants become the base), then note the size.
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
            _base = _S.fix_base()


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


_MEMOS = (_deep_part, _cap_memo, _literal_memo, _cp_memo, _byte_memo)


def _rotate() -> None:
    """Start a new generation keeping the base (no compile may be running). Under ``_lock``."""
    global _generation, _S
    import functools
    import sys

    _S = _core.next_generation(_base)
    _bind()
    for memo in _MEMOS:
        memo.clear()
    for name, module in list(sys.modules.items()):
        if name.startswith("lexguide.") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()
    _generation += 1
    for hook in _rotate_hooks:
        hook()
