"""``bench/mask.py --budget``: the budget-aware mask's extra cost per token.

No peer narrows masks to a token budget, so the comparison is lexguide against itself, in the
same run: valid sample texts are tokenized and forced token by token, and at each step the mask
is computed (timed) with

* ``plain``: ``compute_mask()``, no budget;
* ``loose``: ``compute_mask(remaining)`` with 1,000 tokens to spare (beyond the margin: the
  check costs one memoised completion lookup);
* ``margin``: 32 tokens to spare (narrowed, with room);
* ``tight``: exactly the tokens the sample still has (narrowed hardest).

Each regime runs in its own spawned process, so each starts cold (no grammar, mask or completion
memo); a second matcher of the same grammar then runs warm. Ratios are against ``plain`` of the
same pass. Cases: the Lark/GBNF grammars of ``bench/mask.py --quick`` and JSON Schemas of the
JSONSchemaBench dev subsets with one valid instance each (maskbench), compact JSON. The table
also counts the schemas whose start state has a known completion, how completions were found
(read off the grammar, or by the fallback byte search), the most one token raised the shortest
completion (what ``kBudgetMargin`` must cover), and the forced sample tokens the narrowed mask
excluded (the sample's own rest was shorter than the completion bound).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

REGIMES = {"plain": None, "loose": 1000, "margin": 32, "tight": 0}
SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K", "Kubernetes", "MCPspec")


def schema_cases(corpora: Path, per_subset: int) -> list[tuple[str, str, str, str]]:
    """(name, "schema", schema JSON text, instance JSON text): the first ``per_subset`` maskbench
    records per dev subset with a valid instance whose schema compiles."""
    from lexguide import Grammar
    from lexguide.errors import LexguideError

    out = []
    for subset in SUBSETS:
        path = corpora / "jsonschemabench" / "maskbench" / f"{subset}.jsonl"
        plain = corpora / "jsonschemabench" / f"{subset}.jsonl"
        if not path.exists():
            continue
        schemas: dict[str, Any] = {}
        if plain.exists():
            for line in plain.read_text(encoding="utf-8").splitlines()[: per_subset * 8]:
                r = json.loads(line)
                schemas[r["id"]] = r["schema"]
        n = 0
        for line in path.read_text(encoding="utf-8").splitlines()[: per_subset * 8]:
            r = json.loads(line)
            schema = r.get("schema", schemas.get(r["id"]))
            valid = [t["data"] for t in r.get("tests", []) if t.get("valid")]
            if schema is None or not valid:
                continue
            sample = json.dumps(valid[0], separators=(",", ":"), ensure_ascii=False)
            try:  # the instance as our grammar writes it (property order, number forms)
                if not Grammar.from_json_schema(schema).validate(sample):
                    continue
            except (LexguideError, RecursionError, ValueError):
                continue
            out.append((f"{subset}/{r['id']}", "schema", json.dumps(schema), sample))
            n += 1
            if n >= per_subset:
                break
    return out


def _grammar(kind: str, text: str) -> Any:
    from lexguide import Grammar

    if kind == "schema":
        return Grammar.from_json_schema(json.loads(text))
    return Grammar.from_lark(text) if kind == "lark" else Grammar.from_gbnf(text)


def _force(grammar: Any, info: Any, tokens: list[int], spare: int | None,
           times: list[float]) -> tuple[int, int]:
    """Force ``tokens``; per-step mask times into ``times``; (narrowed steps, excluded tokens)."""
    from lexguide import Matcher

    m = Matcher(grammar, info)
    narrowed = excluded = 0
    for i, tok in enumerate(tokens):
        remaining = None if spare is None else len(tokens) - i + spare
        t0 = time.perf_counter()
        mask = m.compute_mask(remaining)
        times.append(time.perf_counter() - t0)
        if spare is not None and not (int(mask[tok >> 5]) >> (tok & 31)) & 1:
            excluded += 1
        if spare is not None and not np.array_equal(mask, m._engine.compute_mask(m.state)):
            narrowed += 1
        m.consume(tok)
    return narrowed, excluded


def worst_jump(m: Any) -> int | None:
    """How much one allowed token can raise the shortest completion from ``m``'s state (the
    worst token's completion minus the state's), or None when it exceeds the margin window."""
    from lexguide.engine.matcher import BUDGET_MARGIN

    c = m.min_completion()
    if not c:
        return 0 if c == 0 else None
    core = m._engine._core
    lo, hi = c - 1, c + BUDGET_MARGIN - 1  # budget_mask(left) is None iff nothing is removed
    if core.budget_mask(m.state, hi) is not None:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if core.budget_mask(m.state, mid) is None:
            hi = mid
        else:
            lo = mid + 1
    return lo - c


def _worker(vname: str, regime: str, cases: list[tuple[str, str, str, list[int]]], q: Any) -> None:
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _vocab import load_vocab

    try:
        q.put(_measure(load_vocab(vname).tokenizer_info(), REGIMES[regime], cases))
    except Exception as e:  # reported by the parent; the worker must not die silently
        q.put({"error": f"{type(e).__name__}: {e}"})


def _measure(info: Any, spare: int | None, cases: list[tuple[str, str, str, list[int]]]) -> dict:
    from lexguide import Matcher

    res: dict[str, Any] = {"cold": [], "warm": [], "narrowed": 0, "excluded": 0, "steps": 0,
                           "completions": 0, "schemas": 0, "structural": 0, "byte_search": 0, "jump": 0}
    for name, kind, text, tokens in cases:
        grammar = _grammar(kind, text)
        for phase in ("cold", "warm"):
            n, x = _force(grammar, info, tokens, spare, res[phase])
            if phase == "cold":
                res["narrowed"] += n
                res["excluded"] += x
                res["steps"] += len(tokens)
        if kind == "schema":
            res["schemas"] += 1
            res["completions"] += Matcher(grammar, info).min_completion() is not None
        if spare is None:  # the plain pass, untimed: the worst jump per state
            m = Matcher(grammar, info)
            for tok in tokens:
                j = worst_jump(m)
                res["jump"] = max(res["jump"], 10**6 if j is None else j)
                m.consume(tok)
        stats = Matcher(grammar, info)._engine.cache_info
        res["structural"] += stats["completions_structural"]
        res["byte_search"] += stats["completions_byte_search"]
    return res


def _stats(xs: list[float]) -> tuple[float, float, float]:
    a = np.asarray(xs) * 1e6
    return float(a.mean()), float(np.percentile(a, 99)), float(a.max())


def run_budget(vocabs: list[str], quick: bool, grammar_cases: list[Any], corpora: Path,
               out_path: str, results: str | None = None) -> int:
    """Measure, print the table, write ``out_path`` (JSON) and ``mask_budget.md`` (``results``:
    ``--results`` of ``bench/mask.py``)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _results
    from _vocab import VocabError, load_vocab

    raw = [(c.name, c.fmt, c.text, min(c.samples, key=len)) for c in grammar_cases]
    raw += schema_cases(corpora, 2 if quick else 8)
    ctx = mp.get_context("spawn")
    report: dict[str, Any] = {"quick": quick, "loadavg_start": os.getloadavg(), "vocabs": {}}
    lines = ["| vocab | regime | steps | narrowed | cold mean µs | cold p99 | cold max | warm mean µs "
             "| warm p99 | cold × plain | warm × plain | excluded |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for vname in vocabs:
        try:
            vocab = load_vocab(vname)
        except VocabError as e:
            print(f"[budget] vocab {vname} skipped: {e}", flush=True)
            continue
        cases = [(name, kind, text, vocab.encode(sample)) for name, kind, text, sample in raw]
        rows = {}
        for regime in REGIMES:
            q = ctx.Queue()
            p = ctx.Process(target=_worker, args=(vname, regime, cases, q))
            p.start()
            rows[regime] = q.get()
            p.join()
            if "error" in rows[regime]:
                raise RuntimeError(f"{vname} {regime}: {rows[regime]['error']}")
            print(f"[budget] {vname} {regime} done", flush=True)
        base = {ph: _stats(rows["plain"][ph])[0] for ph in ("cold", "warm")}
        for regime, r in rows.items():
            cm, cp, cx = _stats(r["cold"])
            wm, wp, _ = _stats(r["warm"])
            lines.append(f"| {vname} | {regime} | {r['steps']} | {r['narrowed']} | {cm:.1f} | {cp:.0f} | "
                         f"{cx:.0f} | {wm:.1f} | {wp:.0f} | {cm / base['cold']:.2f} | "
                         f"{wm / base['warm']:.2f} | {r['excluded']} |")
        r, t = rows["plain"], rows["tight"]
        notes.append(f"{vname}: {len(cases)} cases; {r['completions']}/{r['schemas']} schemas have a "
                     f"known completion from the start; tight: {t['structural']} completions read "
                     f"off the grammar, {t['byte_search']} by the byte search; one token raised "
                     f"the shortest completion by at most {r['jump']} tokens"
                     + (" (beyond the margin)" if r["jump"] >= 10**6 else ""))
        report["vocabs"][vname] = {k: {kk: vv for kk, vv in v.items() if kk not in ("cold", "warm")}
                                   | {"cold": _stats(v["cold"]), "warm": _stats(v["warm"])}
                                   for k, v in rows.items()}
    report["loadavg_end"] = os.getloadavg()
    report["table_md"] = "\n".join(lines + [""] + notes)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    Path(out_path).write_text(json.dumps(report, indent=1))
    print(report["table_md"])
    print(f"[budget] wrote {out_path}")
    _results.write(str(Path(__file__).with_name("mask.py")), report["table_md"], quick=quick,
                   results=results, variant="budget")
    return 0
