"""A reference Brzozowski derivative over the core's regex nodes: by every byte, no byte
classes, written from the definition (Brzozowski 1964) with the store's smart constructors.

The core derives per byte class (``csrc/engine/regex.cc``); tests compare it with this one to
check that the classes are right and that its derivatives are the textbook ones.
"""

from __future__ import annotations

from lexguide.regex import nodes as rx


def derive(x: int, b: int, memo: dict[tuple[int, int], int] | None = None) -> int:
    """The derivative of ``x`` by byte ``b``."""
    memo = {} if memo is None else memo
    hit = memo.get((x, b))
    if hit is not None:
        return hit
    k, a = rx.kind(x), rx.args(x)
    if k in (rx.K_NOTHING, rx.K_EPS):
        r = rx.NOTHING
    elif k == rx.K_BYTES:
        r = rx.EPSILON if (a[0] >> b) & 1 else rx.NOTHING
    elif k == rx.K_CONCAT:
        h, t = a
        r = rx.concat(derive(h, b, memo), t)
        if rx.nullable(h):
            r = rx.alt(r, derive(t, b, memo))
    elif k == rx.K_ALT:
        r = rx.alt(*[derive(c, b, memo) for c in a])
    elif k == rx.K_AND:
        r = rx.intersect(*[derive(c, b, memo) for c in a])
    elif k == rx.K_NOT:
        r = rx.complement(derive(a[0], b, memo))
    elif k == rx.K_STAR:
        r = rx.concat(derive(a[0], b, memo), x)
    else:  # K_REPEAT
        c, lo, hi = a
        r = rx.concat(derive(c, b, memo), rx.repeat(c, max(lo - 1, 0), None if hi < 0 else hi - 1))
    memo[(x, b)] = r
    return r
