"""The one percentile definition of the benches: linear interpolation between the two nearest
ranks (numpy's default), so a p99 means the same in every results file."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def percentile(xs: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0..100) of ``xs``, or None when ``xs`` is empty."""
    if len(xs) == 0:
        return None
    return float(np.percentile(np.asarray(xs, dtype=np.float64), p))
