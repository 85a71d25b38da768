"""Token budgets inside ``uniqueItems`` arrays: completions that avoid recorded duplicates.

The core's budget-aware mask (``MaskEngine::budget_mask``, ``csrc/engine/budget.cc``) keeps
the tokens after which a completion of at most ``remaining - 1`` tokens is known
(``min_completion``: a shortest byte completion split into the longest tokens). Inside a
``uniqueItems`` array that completion may close an item equal to a recorded one, which the
unique layer (:mod:`lexguide.engine.unique_items`) forbids; the output would then need more
tokens than the budget left. :class:`DistinctBudget` narrows the mask to tokens after which a
completion *avoiding recorded duplicates* fits instead.

Distinct completions are searched token by token over the core's own estimates: from a parse
state ``s`` and unique state ``u``, a completion of at most ``k`` tokens is found when ``s``
is complete, or when some token ``t`` whose core completion fits in ``k - 1`` tokens (the
core's narrowed mask of ``s`` for ``k``) is accepted by the unique layer
(:meth:`~lexguide.engine.unique_items.UniqueItems.step`: no duplicate close, no item left
with only recorded values) and leads to a state with a distinct completion of at most
``k - 1`` tokens (depth first, the first success ends it; memoised per state and depth). A
path found is a real completion: every token on it is allowed by the grammar and by the
unique layer.

In the tight regime (fewer than ``c + max(128, c)`` tokens left, ``c`` the core's
``min_completion``, as for the core's narrowing) the mask keeps the tokens the unique layer
allows after which a distinct completion fits in ``remaining - 1`` tokens; when none does,
the tokens with the least overrun (up to :data:`MAX_EXTRA` tokens); past that, every allowed
token. The mask is never empty when the unique layer's mask is not, so the output never
stops in a dead end; and since the first token of a completion found leads to a state where
its rest is found, the output ends complete whenever a distinct completion found from the
state the budget started at fits in it -- up to three bounds on the cost, each trusting an
estimate instead of searching:

* a token whose core completion fits in ``remaining - 1 - MAX_EXTRA`` tokens is kept
  unchecked (avoiding recorded values is assumed to cost at most :data:`MAX_EXTRA` more
  tokens: one more character of a string, one more digit);
* inside a string whose candidates spread over more than ``MAX_CHECKED / 32`` mask words, the
  tokens that only extend it (no ``"``, no backslash) and whose text then begins no recorded
  string are judged by one of them per core cost (any close of such an item is fresh);
* past :data:`MAX_NODES` search nodes in one mask, the remaining tokens are judged by the
  core's completion alone.

Cost: nothing for grammars without ``uniqueItems``, and nothing before the tight regime. In
it, per mask: the core's narrowed masks per cost level, then per checked token (or group) one
core step, one unique step and a search of a few nodes (the first path tried usually
completes; memoised per parse state, unique state and depth, tokens inside a string item
whose text begins no recorded value sharing one entry). Figures:
``bench/results/unique_items.md`` (``python bench/unique_items.py``).
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from lexguide.engine.lexparser import ParseState
from lexguide.engine.unique_items import UniqueItems
from lexguide.engine.unique_values import UniqueState, _decoded_prefix, _ids_of, _split_partial
from lexguide.jsonschema.unique_count import open_escape

__all__ = ["BUDGET_MARGIN", "MAX_EXTRA", "MAX_NODES", "DistinctBudget"]

#: tokens a distinct completion is assumed to need at most beyond the core's completion for
#: tokens well inside the budget (they are kept unchecked), and the overrun searched at most
#: when nothing fits
MAX_EXTRA = 4
#: search nodes (token steps) per mask at most; past them tokens are judged by the core alone
MAX_NODES = 4096
#: inside a string, candidate tokens spread over more than ``MAX_CHECKED / 32`` mask words are
#: grouped: the tokens that only extend the string are judged by one per core cost
MAX_CHECKED = 256
#: memoised searches kept at most (the memo starts afresh past it)
MAX_MEMO = 100_000
#: a mask is narrowed once fewer than ``c + max(BUDGET_MARGIN, c)`` tokens remain, ``c`` the
#: tokens of a shortest completion (``kBudgetMargin`` in ``csrc/engine/limits.h``; the
#: matcher's :data:`lexguide.engine.matcher.BUDGET_MARGIN`)
BUDGET_MARGIN = 128
_QUOTE = 0x22


class DistinctBudget:
    """Budget-aware masks for one grammar's ``uniqueItems`` arrays over one tokenizer.

    Shared by the grammar's matchers (like the mask engine), which may run on several
    threads: its memo only grows (to :data:`MAX_MEMO`) and holds the same answer whichever
    matcher fills it (a search cut by :data:`MAX_NODES` is not kept), and each mask counts
    its own search nodes.
    """

    def __init__(self, unique: UniqueItems, engine) -> None:
        self._unique = unique
        self._engine = engine
        self._core = engine._core
        self._lp = engine.lp
        self._token_bytes = engine.info.token_bytes
        self._special = engine.info.special_ids
        self._memo: dict = {}
        self._structural_words: np.ndarray | None = None

    def mask(self, st: UniqueState, state: ParseState, remaining: int,
             allowed: np.ndarray) -> np.ndarray | None:
        """``allowed`` (the unique layer's mask at ``state``) narrowed to the tokens after
        which a completion avoiding recorded duplicates fits in ``remaining - 1`` tokens, or
        the least-overrunning ones; None when the budget is not tight or no completion is
        known (``allowed`` applies). Never all zeros when ``allowed`` is not. Pure but for
        the shared memo."""
        if not self.tight(state, remaining):
            return None
        nodes = [0]  # search nodes spent by this mask (per call: matchers may share threads)
        safe = self._fitting(state, remaining - MAX_EXTRA) & allowed
        for over in range(MAX_EXTRA + 1):
            out = safe | self._kept(st, state, remaining + over, allowed & ~safe, nodes)
            if out.any():
                out.flags.writeable = False
                return out
        return None

    def _kept(self, st: UniqueState, state: ParseState, left: int, allowed: np.ndarray,
              nodes: list[int]) -> np.ndarray:
        """The tokens of ``allowed`` after which a distinct completion of at most ``left - 1``
        tokens is found, as mask words (see :meth:`_groups`)."""
        info = self._engine.info
        kept: list[int] = []
        out = np.zeros(info.n_words, dtype=np.uint32)
        for t, group in self._groups(st, state, left, allowed, max(1, left - MAX_EXTRA)):
            if self._token_fits(st, state, t, left - 1, nodes):
                if group is None:
                    kept.append(t)
                else:
                    out |= group
        return out | info.mask_from_ids(np.asarray(kept, dtype=np.int64))

    def _groups(self, st: UniqueState, state: ParseState, left: int, allowed: np.ndarray,
                lowest: int = 1):
        """``(token, group)`` pairs covering the tokens of ``allowed`` after which the core
        knows a completion of at most ``left - 1`` tokens, cheapest first (by level of
        :meth:`_fitting`, from ``lowest``; lazily): a token alone (group None), or the first
        token of a group judged by it (mask words). Inside a string whose such tokens spread
        over more than ``MAX_CHECKED / 32`` mask words, the tokens of a level that only
        extend it (no ``"``, no backslash) and whose text then begins no recorded string form
        one group; the others come alone."""
        band = self._fitting(state, left) & allowed
        grouped = _in_string(st) and int(np.count_nonzero(band)) > MAX_CHECKED // 32
        extending = None
        if grouped:
            quotes = self._engine.quote_tokens
            extending = band & ~self._structural(quotes)
            risky = _risky_ids(st, quotes)
            if len(risky):
                extending = extending & ~self._engine.info.mask_from_ids(risky)
        below = self._fitting(state, lowest - 1) if lowest > 1 else np.zeros_like(band)
        for level in range(lowest, left + 1):
            at = band if level == left else self._fitting(state, level) & band
            new = at & ~below
            below = at
            if not new.any():
                continue
            if extending is None:
                for t in _ids_of(new).tolist():
                    yield t, None
                continue
            group = new & extending
            first = _first_id(group)
            if first is not None:
                yield first, group
            for t in _ids_of(new & ~group).tolist():
                yield t, None

    def _structural(self, quotes) -> np.ndarray:
        """The tokens holding a ``"`` or a backslash, as mask words (built once)."""
        got = self._structural_words
        if got is None:
            got = self._structural_words = quotes.json_classes.quote | \
                self._engine.info.mask_from_ids(quotes.backslash_ids)
        return got

    def tight(self, state: ParseState, remaining: int) -> bool:
        """Whether ``remaining`` tokens are few enough at ``state`` for the budget to narrow
        the mask: fewer than ``c + max(128, c)``, ``c`` the core's ``min_completion`` (known).
        One memoised core call."""
        c = self._core.min_completion(state)
        return c is not None and remaining < c + max(BUDGET_MARGIN, c)

    def _fitting(self, state: ParseState, left: int) -> np.ndarray:
        """The tokens after which the core knows a completion of at most ``left - 1`` tokens
        (EOS when complete), as mask words."""
        if left <= 0:
            return np.zeros(self._engine.info.n_words, dtype=np.uint32)
        got = self._core.budget_mask(state, left)
        if got is not None:
            return got
        # the plain mask applies: nothing removed (or loose) when a completion fits, else
        # nothing fits
        c = self._core.min_completion(state)
        if c is not None and c <= left:
            return self._core.mask(state)
        return np.zeros(self._engine.info.n_words, dtype=np.uint32)

    def _token_fits(self, st: UniqueState, state: ParseState, token_id: int, left: int,
                    nodes: list[int]) -> bool:
        """Whether after ``token_id`` a distinct completion of at most ``left`` tokens is
        found (the core's completion alone once the node budget is spent)."""
        if token_id in self._special:
            return True  # EOS (complete here) or a special token the core judged
        after = self._core.advance_token(state, token_id)
        if after is None:
            return False
        after = ParseState(*after)
        if nodes[0] >= MAX_NODES:
            return True  # in the core's narrowed mask: the core's completion fits
        got = self._unique.step(st, state, self._token_bytes[token_id], after)
        return got is not None and self.fits(got, after, left, nodes)

    def fits(self, st: UniqueState, state: ParseState, left: int,
             nodes: list[int] | None = None) -> bool:
        """Whether a completion of at most ``left`` tokens avoiding recorded duplicates is
        found from ``state`` (unique state ``st``): a depth-first search over the tokens the
        core's narrowed masks keep, each stepped through the unique layer. Memoised per
        (state, unique state, ``left``); tokens that leave a string item whose text begins no
        recorded value share one entry per parse state. ``nodes``: ``[search nodes spent]``,
        shared along one mask's searches (bounded by :data:`MAX_NODES`)."""
        if nodes is None:
            nodes = [0]
        if self._lp.is_accepting(state):
            return True
        if left <= 0:
            return False
        key = (state, _shape(st), left)
        got = self._memo.get(key)
        if got is not None:
            return got
        got = False
        for t, _ in self._groups(st, state, left, self._core.mask(state)):
            if t in self._special:
                continue  # EOS: not complete here (above); special tokens hold no item bytes
            if nodes[0] >= MAX_NODES:
                got = True  # unknown: judged by the core's completion, which fits
                break
            nodes[0] += 1
            after = self._core.advance_token(state, t)
            if after is None:
                continue
            after = ParseState(*after)
            nxt = self._unique.step(st, state, self._token_bytes[t], after)
            if nxt is not None and self.fits(nxt, after, left - 1, nodes):
                got = True
                break
        if nodes[0] < MAX_NODES:  # an answer of the core's alone is not kept
            if len(self._memo) >= MAX_MEMO:
                self._memo.clear()
            self._memo[key] = got
        return got


def _first_id(words: np.ndarray) -> int | None:
    """The lowest token id set in the mask words ``words``, or None."""
    nz = np.flatnonzero(words)
    if not len(nz):
        return None
    w = int(words[nz[0]])
    return int(nz[0]) * 32 + (w & -w).bit_length() - 1


def _in_string(st: UniqueState) -> bool:
    """Whether the text is inside an open string of a ``uniqueItems`` item, outside an
    escape."""
    if st.item is not None:
        return not open_escape(st.item)
    a = st.arrays
    return bool(a.frames) and a.in_str and not a.esc


def _risky_ids(st: UniqueState, quotes) -> np.ndarray:
    """Tokens that extend the open string (see :func:`_in_string`) so that its text begins a
    recorded string: a string item's recorded values, or any string (key or value) inside
    the recorded values of the innermost array of any items."""
    if st.item is not None:
        raw, strings = st.item, st.values
    else:
        frame = st.arrays.frames[-1]
        raw, strings = b'"' + _open_string(frame.item or b""), _strings_in(frame.values)
    split = _split_partial(raw)
    if split is None:
        return np.zeros(0, dtype=np.int64)
    prefix, partial = split
    ids: list[int] = []
    for v in strings:
        if v.startswith(prefix):
            ids.extend(quotes.slice_ids(v[len(prefix):], partial)[0])
    return np.asarray(sorted(set(ids)), dtype=np.int64)


def _open_string(raw: bytes) -> bytes:
    """The bytes after the opening quote of the string ``raw`` (JSON text) ends inside."""
    start, in_str, esc = 0, False, False
    for i, b in enumerate(raw):
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:
                esc = True
            elif b == _QUOTE:
                in_str = False
        elif b == _QUOTE:
            in_str, start = True, i + 1
    return raw[start:]


def _strings_in(keys) -> set[str]:
    """The strings (object keys included) inside the value keys ``keys``
    (:func:`~lexguide.engine.unique_items.value_key`)."""
    out: set[str] = set()
    todo = list(keys)
    while todo:
        k = todo.pop()
        if isinstance(k, str):
            out.add(k)
        elif isinstance(k, tuple) and k and k[0] == "a":
            todo.extend(k[1])
        elif isinstance(k, tuple) and k and k[0] == "o":
            for name, v in k[1]:
                out.add(name)
                todo.append(v)
    return out


def _shape(st: UniqueState):
    """``st`` for the memo: a string item whose decoded text begins no recorded value is
    replaced by a marker (any completion of it closes a fresh value), so the tokens inside
    such items share their searches; every other state as it is."""
    item = st.item
    if item is None:
        return st
    prefix = _decoded_prefix(item)
    if prefix is None:
        return st
    ordered = sorted(st.values)
    i = bisect_left(ordered, prefix)
    if i < len(ordered) and ordered[i].startswith(prefix):
        return st
    return st._replace(item=b"", raws=frozenset())  # b"": no item is empty
