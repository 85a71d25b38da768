"""JSON-Schema-Test-Suite runner shared by ``tests/test_jsonschema_suite.py`` and
``bench/jsonschema.py``.

The suite is vendored in ``tests/data/json-schema-test-suite`` (commit ``44401e0c``, MIT; see
its LICENSE and README): the required tests and ``optional/`` of drafts 7 and 2020-12, and
``remotes/``. Remote references to ``http://localhost:1234/`` are given as
``refs={uri: schema}`` from ``remotes/`` (nothing is fetched).
``optional/format/*`` assume format *assertion*: they are compiled with
``strict_formats=True``, so a format we do not enforce makes the case not compile instead of
being accepted as an annotation.

Each instance is written ``json.dumps(data, ensure_ascii=False)``; a case counts when its
schema compiles. Verdicts: ``agree``, ``unsound`` (the grammar accepts an instance the suite
calls invalid) or ``incomplete`` (it rejects a valid one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

SUITE = Path(__file__).resolve().parent / "data" / "json-schema-test-suite"
DRAFTS = {"draft2020-12": 2020, "draft7": 7}

Case = tuple[str, dict]  # (file name relative to the draft folder, case)


@cache
def remotes() -> dict[str, Any]:
    folder = SUITE / "remotes"
    return {f"http://localhost:1234/{p.relative_to(folder).as_posix()}": json.loads(p.read_text())
            for p in sorted(folder.rglob("*.json"))}


def available(draft: str) -> bool:
    return (SUITE / "tests" / draft).is_dir()


def cases(draft: str) -> Iterator[Case]:
    """Every case of ``draft``: required files first, then ``optional/``."""
    base = SUITE / "tests" / draft
    for path in [*sorted(base.glob("*.json")), *sorted((base / "optional").rglob("*.json"))]:
        rel = path.relative_to(base).as_posix()
        for case in json.loads(path.read_text()):
            yield rel, case


def options(draft: str, file: str) -> dict[str, Any]:
    opts: dict[str, Any] = {"draft": DRAFTS[draft], "refs": remotes()}
    if file.startswith("optional/format/") or file == "optional/content.json":
        opts["strict_formats"] = True
    return opts


def run(draft: str, compile_fn: Callable[[dict, dict], Callable[[str], bool] | None]
        ) -> tuple[int, int, list[tuple[tuple[str, str, str], Any, bool, bool]]]:
    """``(n_cases, n_compiled, [((file, case, test), data, valid, accepted)])`` where
    ``compile_fn(schema, options)`` returns a text predicate, or None when it does not compile."""
    n_cases = n_compiled = 0
    out = []
    for file, case in cases(draft):
        n_cases += 1
        accepts = compile_fn(case["schema"], options(draft, file))
        if accepts is None:
            continue
        n_compiled += 1
        for t in case["tests"]:
            got = accepts(json.dumps(t["data"], ensure_ascii=False))
            out.append(((file, case["description"], t["description"]), t["data"], t["valid"],
                        got))
    return n_cases, n_compiled, out


def lexguide_compile(schema: dict, opts: dict) -> Callable[[str], bool] | None:
    from lexguide.engine.grammar import Grammar
    from lexguide.errors import LexguideError

    try:
        g = Grammar.from_json_schema(schema, **opts)
    except LexguideError:
        return None
    return g.validate
