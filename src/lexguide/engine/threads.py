"""The size of the engine's thread pool: the threads :func:`lexguide.fill_masks` spreads a
batch's masks over (apart from the kernels' pool, so that masks and a forward pass never wait
for each other).

The native core reads no environment: the pool starts with one thread per core unless
:func:`set_engine_threads` sized it first. ``LEXGUIDE_ENGINE_THREADS=N`` is read here, once,
when :mod:`lexguide.engine` is imported, and passed down as if ``set_engine_threads(N)`` had
been called.
"""

from __future__ import annotations

import os
import warnings

from lexguide import _core

__all__ = ["engine_threads", "set_engine_threads"]


def set_engine_threads(n: int) -> None:
    """Size the engine's pool to ``n`` threads (clamped to 1..1024; the calling thread counts
    as one), process-wide; waits for a ``fill_masks`` call running on it."""
    _core.set_engine_threads(max(1, min(int(n), 1024)))


def engine_threads() -> int:
    """The engine pool's size (threads, the caller's included)."""
    return int(_core.engine_threads())


def _size_from_environment() -> None:
    value = os.environ.get("LEXGUIDE_ENGINE_THREADS", "").strip()
    if not value:
        return
    try:
        n = int(value)
        if n < 1:
            raise ValueError(value)
    except ValueError:
        warnings.warn(f"LEXGUIDE_ENGINE_THREADS={value!r} ignored: not a positive integer",
                      RuntimeWarning, stacklevel=2)
        return
    set_engine_threads(n)


_size_from_environment()
