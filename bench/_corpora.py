"""Where the benches find the external corpora: the folder named by ``--corpora`` or the
``LEXGUIDE_CORPORA`` environment variable. There is no default: the data are public but not
part of the repository (JSONSchemaBench has no license). The expected layout and the sources
are in docs/bench.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

ENV = "LEXGUIDE_CORPORA"
HELP = f"folder of the external corpora (default: ${ENV}; layout in docs/bench.md)"


class CorpusMissing(SystemExit):
    """A corpus file or folder the bench needs is not there (exits with the message)."""


def add_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--corpora", type=Path, default=None, help=HELP)


def root(given: Path | str | None = None) -> Path | None:
    """The corpora folder from ``given`` (an option's value) or the environment, or None."""
    value = given if given not in (None, "") else os.environ.get(ENV)
    return Path(value) if value else None


def require(rel: str, given: Path | str | None = None) -> Path:
    """``rel`` inside the corpora folder; exits with a clear message when it is not there."""
    base = root(given)
    if base is None:
        raise CorpusMissing(f"this bench needs the corpus {rel!r}: set {ENV} (or pass --corpora) "
                            f"to the corpora folder; layout and sources in docs/bench.md")
    path = base / rel
    if not path.exists():
        raise CorpusMissing(f"{path} not found: the folder given by {ENV}/--corpora lacks {rel!r} "
                            f"(layout and sources in docs/bench.md)")
    return path


def optional(rel: str, given: Path | str | None = None) -> Path | None:
    """``rel`` inside the corpora folder when it is there, else None (for optional extras)."""
    base = root(given)
    if base is None or not (base / rel).exists():
        return None
    return base / rel


def jsonschemabench(seed: int, given: Path | str | None = None) -> list[tuple[str, object]]:
    """Every ("<subset>/<id>", schema) of ``jsonschemabench/*.jsonl``, in an order seeded by
    ``seed`` (the same for every bench that forces instances of them)."""
    import json
    import random

    out = []
    for path in sorted(require("jsonschemabench", given).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            out.append((f"{path.stem}/{rec['id']}", rec["schema"]))
    random.Random(seed).shuffle(out)
    return out
