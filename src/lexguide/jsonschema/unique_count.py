"""Counting the distinct string values a JSON string automaton can still complete.

A ``uniqueItems`` array of strings from a bounded language (``maxLength``, a ``pattern`` or
``format`` with finitely many completions somewhere) can run out of fresh values, so the
matcher must know, for an open item, whether some completion is a value not yet written. It
counts values, not spellings: under the escape policies without general unicode escapes
(:mod:`lexguide.jsonschema.escapes`) a character that need not be escaped is written raw only,
but one that must be (``"``, ``\\``, U+0000-U+001F, U+007F) may have several spellings:
``\\n``, ``\\u000a`` and ``\\u000A`` are one value. The walk therefore follows only the
*canonical* spelling of each character: raw UTF-8 when no escape is started; after ``\\`` a
short escape, or ``\\u`` followed by lowercase hex digits (an uppercase digit only where its
lowercase twin is not accepted), and a ``\\u`` escape started in the walk is dropped when its
character has a short escape accepted at that backslash. Every value the automaton can
complete has exactly one canonical completion, provided the automaton accepts a character in
any of its spellings once it accepts it in one (true of the string lexemes built by
:func:`lexguide.jsonschema.escapes.json_chars_rx`); so canonical completions and values are in
one-to-one correspondence, and a count above the recorded values proves a fresh value exists.
An escape already begun in the item's text is completed in full (its character is the only one
it can become), with lowercase hex preferred the same way.

With general unicode escapes every character has several spellings (and pairs of surrogate
escapes spell one character): not counted here (the compiler refuses bounded strings then).

The walk is generic over an automaton: ``step(state, byte) -> state`` (``dead`` when the byte
is refused) and ``accepting(state)``; the engine gives it the lexer's states, the compiler the
regex derivatives. A walk node is ``(state, escape so far, short-escaped code points)``. Dead
states must be ``dead`` (the lexer guarantees it; the compiler's step checks emptiness), so
a cycle among walk nodes means infinitely many values: every cycle passes through a character
boundary, where some value, hence its canonical spelling, completes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from lexguide.regex import nodes as rx

__all__ = ["INFINITE", "Node", "ValueCounter", "canonical_prefix", "must_escape", "open_escape",
           "regex_value_count"]

#: the count of a node from which infinitely many values complete
INFINITE = 1 << 62
_SHORT_CPS = {0x22: 0x22, 0x5C: 0x5C, 0x62: 0x08, 0x66: 0x0C, 0x6E: 0x0A, 0x72: 0x0D,
              0x74: 0x09}  # short escape letter -> the code point it spells
_HEX = frozenset(b"0123456789abcdefABCDEF")
_BACKSLASH, _U = 0x5C, 0x75
Node = tuple  # (automaton state, escape bytes so far, frozenset of short-escaped code points)


def open_escape(item: bytes) -> bytes:
    """The escape ``item`` (an open JSON string, from its opening quote) ends inside: b"",
    ``\\``, or ``\\u`` with up to three hex digits."""
    i, n = max(1, item.find(b"\\")), len(item)
    if i < 1:
        return b""
    while i < n:
        if item[i] != _BACKSLASH:
            i += 1
        elif i + 1 >= n:
            return item[i:]
        elif item[i + 1] == _U:
            if i + 6 > n:
                return item[i:]
            i += 6
        else:
            i += 2
    return b""


def must_escape(ch: str) -> bool:
    """Whether a JSON string must spell ``ch`` with an escape (RFC 8259 §7; U+007F too, as
    llguidance does)."""
    c = ord(ch)
    return c < 0x20 or c in (0x22, 0x5C, 0x7F)


def canonical_prefix(text: str) -> bytes:
    """The raw UTF-8 of ``text`` up to its first character that must be escaped (the part
    of its canonical spelling that holds no backslash)."""
    for i, ch in enumerate(text):
        if must_escape(ch):
            return text[:i].encode("utf-8", errors="surrogatepass")
    return text.encode("utf-8", errors="surrogatepass")


class ValueCounter:
    """Memoised counts (and, when small, lists) of the canonical completions of walk nodes
    of one automaton. Not thread-safe to fill concurrently with different answers, but every
    filler writes the same answer for a node, so a shared instance is safe."""

    __slots__ = ("_accepting", "_counts", "_dead", "_kids", "_step", "_tails")

    def __init__(self, step: Callable[[Hashable, int], Hashable],
                 accepting: Callable[[Hashable], bool], dead: Hashable) -> None:
        self._step, self._accepting, self._dead = step, accepting, dead
        #: node -> (count, exact): exact, or at least ``count`` (a cap was reached)
        self._counts: dict[Node, tuple[int, bool]] = {}
        self._tails: dict[Node, tuple[bytes, ...]] = {}
        self._kids: dict[Node, list[tuple[int, Node]]] = {}

    def node(self, state: Hashable, item: bytes) -> Node:
        """The walk node of an open item ``item`` (raw, from its opening quote) whose text
        leaves the automaton in ``state``."""
        return (state, open_escape(item), frozenset())

    def children(self, node: Node) -> list[tuple[int, Node]]:
        """``(byte, node)`` of the canonical moves out of ``node`` (memoised)."""
        got = self._kids.get(node)
        if got is None:
            got = self._kids[node] = self._children(node)
        return got

    def _children(self, node: Node) -> list[tuple[int, Node]]:
        state, esc, shorts = node
        step, dead = self._step, self._dead
        out = []
        if not esc:
            for b in range(256):
                nxt = step(state, b)
                if nxt != dead:
                    out.append((b, (nxt, b"\\" if b == _BACKSLASH else b"", frozenset())))
            return out
        if esc == b"\\":
            here = frozenset(cp for letter, cp in _SHORT_CPS.items()
                             if step(state, letter) != dead)
            for letter in _SHORT_CPS:
                nxt = step(state, letter)
                if nxt != dead:
                    out.append((letter, (nxt, b"", frozenset())))
            nxt = step(state, _U)
            if nxt != dead:
                out.append((_U, (nxt, b"\\u", here)))
            return out
        for b in _HEX:
            nxt = step(state, b)
            if nxt == dead:
                continue
            if 0x41 <= b <= 0x46 and step(state, b + 0x20) != dead:
                continue  # the lowercase twin spells the same character
            if len(esc) == 5:
                if int(esc[2:] + bytes((b,)), 16) in shorts:
                    continue  # spelled by a short escape at the backslash
                out.append((b, (nxt, b"", frozenset())))
            else:
                out.append((b, (nxt, esc + bytes((b,)), shorts)))
        return out

    def count(self, root: Node, cap: int) -> int:
        """``min(cap, number of values completing root)`` (:data:`INFINITE` counts as more
        than any cap). Memoised per node; an iterative depth-first walk, each node's
        children visited once per larger cap."""
        counts = self._counts
        got = counts.get(root)
        if got is not None and (got[1] or got[0] >= cap):
            return min(got[0], cap)
        acc = self._accepting
        # frames: [node, children, next child index, total]
        stack = [[root, self.children(root), 0, 1 if acc(root[0]) else 0]]
        on_path = {root}
        result = 0
        while stack:
            top = stack[-1]
            node, kids, i, total = top
            done = total >= cap or i >= len(kids)
            if not done:
                top[2] = i + 1
                child = kids[i][1]
                if child in on_path:
                    top[3] = INFINITE  # a cycle: infinitely many values
                    continue
                known = counts.get(child)
                if known is not None and (known[1] or known[0] >= cap):
                    top[3] = min(INFINITE, total + known[0])
                    continue
                on_path.add(child)
                stack.append([child, self.children(child), 0,
                              1 if acc(child[0]) else 0])
                continue
            stack.pop()
            on_path.discard(node)
            exact = i >= len(kids) and total < cap or total >= INFINITE
            counts[node] = (total, exact) if exact else (cap, False)
            result = total if exact else cap
            if stack:
                parent = stack[-1]
                parent[3] = min(INFINITE, parent[3] + result)
        return min(result, cap)

    def tails(self, root: Node, limit: int) -> tuple[bytes, ...] | None:
        """The canonical completions of ``root`` (bytes up to and including the end of the
        lexeme), or None when there are more than ``limit``. Memoised per root; an iterative
        walk (no cycle is reachable when the count is finite)."""
        # counted to the next power of two: a cap that grows by one per recorded value
        # recounts a node only when it doubles
        if self.count(root, 1 << limit.bit_length()) > limit:
            return None
        got = self._tails.get(root)
        if got is None:
            acc, out = self._accepting, []
            todo = [(root, b"")]
            while todo:
                node, text = todo.pop()
                if acc(node[0]):
                    out.append(text)
                todo.extend((child, text + bytes((b,))) for b, child in self.children(node))
            got = self._tails[root] = tuple(sorted(out))
        return got


def regex_value_count(x: int, cap: int) -> int:
    """``min(cap, number of string values)`` of ``x``, the regex of a JSON string lexeme
    (quotes included), counted over its derivatives (empty ones made dead). Pure; costs a
    walk of at most the derivatives met before ``cap`` values are counted."""

    def step(y: int, b: int) -> int:
        d = rx.derivative(y, b)
        return rx.NOTHING if d != rx.NOTHING and rx.has_boolean(d) and rx.is_empty(d) else d

    return ValueCounter(step, rx.nullable, rx.NOTHING).count((x, b"", frozenset()), cap)
