#!/usr/bin/env python3
"""Whitespace and budget benchmark: how often default-settings generation ends in valid, complete JSON.

For each real model (SmolLM2-135M, Gemma-3-270M) and each configuration it runs N generations
per schema at the CLI's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05,
``max_tokens`` 256 = ``lexguide run -n``), seeds 0..N-1, and counts the outputs that are
complete (``finish_reason == "stop"``) and valid (``json.loads`` plus the ``jsonschema``
validator); it also reports the longest whitespace run seen. Configurations (layout, budget
mask):

* ``before``: ``flexible`` (any JSON whitespace, the old default and the spec's semantics),
  the budget-aware mask off (``complete_within_budget=False``, the old behaviour);
* ``whitespace``: ``bounded`` (the default since issue 13: at most one space, or one newline
  plus up to 24 spaces/tabs, between tokens), budget mask off;
* ``budget``: ``flexible``, budget mask on;
* ``after``: ``bounded``, budget mask on (today's defaults).

A table is printed, JSON written to ``bench/results/whitespace.json``.

    python bench/whitespace.py --quick     # 2 generations, one schema, SmolLM2, before/after
    python bench/whitespace.py             # 10 per schema x 5 schemas = 50, both models, before/after
    python bench/whitespace.py --configs before,whitespace,budget,after   # every row
    python bench/whitespace.py --plain     # plain-text prompts (no chat turn)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "whitespace.json"
sys.path.insert(0, str(OUT.parent.parent))
import _results  # noqa: E402

del sys.path[0]
# bench/jsonschema.py would shadow the jsonschema package (the validator used as the oracle)
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != OUT.parent.parent]
CONFIGS = {"before": ("flexible", False), "whitespace": ("bounded", False),
           "budget": ("flexible", True), "after": ("bounded", True)}
SCHEMAS = {
    "person": {"type": "object", "properties": {"name": {"type": "string"},
                                                "age": {"type": "integer", "minimum": 0}},
               "required": ["name", "age"], "additionalProperties": False},
    "user": {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer"},
                                                  "email": {"type": "string"}},
                 "required": ["id", "email"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
        "required": ["user", "tags"]},
    "primes": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 8},
    "tree": {"$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["name", "children"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    "event": {"type": "object", "properties": {
        "title": {"type": "string"}, "year": {"type": "integer"}, "attendees": {"type": "integer"},
        "online": {"type": "boolean"}}, "required": ["title", "year", "attendees", "online"]},
}
PROMPTS = {
    "person": "Invent a person. Reply in JSON.",
    "user": "Describe a user account with an id, an email and a few tags. Reply in JSON.",
    "primes": "List a few prime numbers as a JSON array.",
    "tree": "A family tree: a person with their children and grandchildren. Reply in JSON.",
    "event": "Describe a conference: its title, year, number of attendees and whether it is "
             "online. Reply in JSON.",
}
_WS_RUN = re.compile(r"[ \t\n\r]+")


def _model(name: str):
    from lexguide import Model
    from lexguide.model_files import gemma3_path, smollm2_path

    return Model.from_gguf(smollm2_path() if name == "smollm2" else gemma3_path())


def _prompt(model, name: str, text: str) -> str:
    if name == "gemma3":  # no chat template in the file: Gemma's turn markers by hand
        return f"<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"
    return text


def run_one(model, name: str, schema_name: str, config: str, n: int, max_tokens: int,
            plain: bool = False) -> dict:
    import jsonschema

    from lexguide import Grammar

    schema = SCHEMAS[schema_name]
    layout, budget = CONFIGS[config]
    grammar = Grammar.from_json_schema(schema, whitespace=layout)
    validator = jsonschema.Draft202012Validator(schema)
    ok = stopped = longest = 0
    samples = []
    for seed in range(n):
        kwargs = dict(grammar=grammar, max_tokens=max_tokens, seed=seed,
                      complete_within_budget=budget)
        if plain:  # the prompt as text, no chat turn (lexguide run without --chat)
            out = model.generate(PROMPTS[schema_name], **kwargs)
        elif name == "gemma3":
            out = model.generate(_prompt(model, name, PROMPTS[schema_name]), parse_special=True,
                                 **kwargs)
        else:
            out = model.chat([{"role": "user", "content": PROMPTS[schema_name]}], **kwargs)
        stopped += out.finish_reason == "stop"
        try:
            valid = out.finish_reason == "stop" and validator.is_valid(json.loads(out.text))
        except json.JSONDecodeError:
            valid = False
        ok += valid
        longest = max([longest, *(len(m.group()) for m in _WS_RUN.finditer(out.text))])
        samples.append(out.text[:120])
    return {"model": name, "schema": schema_name, "config": config, "layout": layout,
            "budget_mask": budget, "n": n, "valid": ok,
            "stopped": stopped, "longest_ws_run": longest, "samples": samples[:3]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 generations, one schema, SmolLM2")
    ap.add_argument("--models", default=None, help="comma list of smollm2,gemma3")
    ap.add_argument("--configs", default="before,after",
                    help="comma list of " + ",".join(CONFIGS) + " (default before,after)")
    ap.add_argument("-n", type=int, default=None, help="generations per schema and configuration")
    ap.add_argument("--max-tokens", type=int, default=None, help="default 256 (24 with --quick)")
    ap.add_argument("--plain", action="store_true",
                    help="prompts as plain text (lexguide run without --chat), not chat turns")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/whitespace.json)")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    models = (args.models or ("smollm2" if args.quick else "smollm2,gemma3")).split(",")
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c!r}; choose from {', '.join(CONFIGS)}")
    n = args.n or (2 if args.quick else 10)
    max_tokens = args.max_tokens or (24 if args.quick else 256)
    schemas = ["primes"] if args.quick else list(SCHEMAS)
    rows = []
    t_start = time.perf_counter()
    for name in models:
        model = _model(name)
        for schema_name in schemas:
            for config in configs:
                t0 = time.perf_counter()
                row = run_one(model, name, schema_name, config, n, max_tokens, args.plain)
                row["seconds"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                print(f"{name:8} {schema_name:7} {config:10} valid {row['valid']:>2}/{n}  "
                      f"stop {row['stopped']:>2}/{n}  longest ws {row['longest_ws_run']:>3}  "
                      f"({row['seconds']} s)", flush=True)
    lines = ["| model | config | layout | budget mask | valid & complete | stop | longest ws run |",
             "|---|---|---|---|---|---|---|"]
    for name in models:
        for config in configs:
            sel = [r for r in rows if r["model"] == name and r["config"] == config]
            v, s, t = (sum(r["valid"] for r in sel), sum(r["stopped"] for r in sel),
                       sum(r["n"] for r in sel))
            layout, budget = CONFIGS[config]
            lines.append(f"| {name} | {config} | {layout} | {'on' if budget else 'off'} | "
                         f"{v}/{t} ({100 * v / t:.0f}%) | {s}/{t} | "
                         f"{max(r['longest_ws_run'] for r in sel)} |")
    table = "\n".join(lines)
    print("\n" + table)
    out = Path(args.out) if args.out else (
        OUT.with_name("whitespace_plain.json") if args.plain else OUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"max_tokens": max_tokens, "n": n, "load": os.getloadavg(),
                               "wall_s": round(time.perf_counter() - t_start, 1),
                               "table_md": table, "rows": rows}, indent=1))
    print(f"\nwritten {out}", file=sys.stderr)
    _results.write(__file__, table, quick=args.quick, results=args.results, argv=argv,
                   variant="plain" if args.plain else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
