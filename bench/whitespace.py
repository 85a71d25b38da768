#!/usr/bin/env python3
"""Whitespace benchmark: how often default-settings generation ends in valid, complete JSON.

For each real model (SmolLM2-135M, Gemma-3-270M) and each JSON layout — ``flexible`` (any JSON
whitespace, the old default and the spec's semantics) and ``bounded`` (the default since
issue 13: at most one space, or one newline plus up to 24 spaces/tabs, between tokens) — it
runs N generations per schema at the CLI's default sampling (temperature 0.8, top-k 40, top-p
0.95, min-p 0.05), seeds 0..N-1, ``max_tokens`` M, and counts the outputs that are complete
(``finish_reason == "stop"``) and valid (``json.loads`` plus the ``jsonschema`` validator).
It also reports the longest whitespace run seen. A table is printed, JSON written to
``bench/results/whitespace.json``.

    python bench/whitespace.py --quick     # 2 generations, one schema, SmolLM2 (a minute)
    python bench/whitespace.py             # 10 per schema, 3 schemas, both models
    python bench/whitespace.py --plain     # the same with plain-text prompts (no chat turn)
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
# bench/jsonschema.py would shadow the jsonschema package (the validator used as the oracle)
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != OUT.parent.parent]
LAYOUTS = ("flexible", "bounded")
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
}
PROMPTS = {
    "person": "Invent a person. Reply in JSON.",
    "user": "Describe a user account with an id, an email and a few tags. Reply in JSON.",
    "primes": "List a few prime numbers as a JSON array.",
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


def run_one(model, name: str, schema_name: str, layout: str, n: int, max_tokens: int,
            plain: bool = False) -> dict:
    import jsonschema

    from lexguide import Grammar

    schema = SCHEMAS[schema_name]
    grammar = Grammar.from_json_schema(schema, whitespace=layout)
    validator = jsonschema.Draft202012Validator(schema)
    ok = stopped = longest = 0
    samples = []
    for seed in range(n):
        kwargs = dict(grammar=grammar, max_tokens=max_tokens, seed=seed)
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
    return {"model": name, "schema": schema_name, "layout": layout, "n": n, "valid": ok,
            "stopped": stopped, "longest_ws_run": longest, "samples": samples[:3]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 generations, one schema, SmolLM2")
    ap.add_argument("--models", default=None, help="comma list of smollm2,gemma3")
    ap.add_argument("-n", type=int, default=None, help="generations per schema and layout")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--plain", action="store_true",
                    help="prompts as plain text (lexguide run without --chat), not chat turns")
    args = ap.parse_args(argv)
    models = (args.models or ("smollm2" if args.quick else "smollm2,gemma3")).split(",")
    n = args.n or (2 if args.quick else 10)
    max_tokens = args.max_tokens or (24 if args.quick else 96)
    schemas = ["primes"] if args.quick else list(SCHEMAS)
    rows = []
    for name in models:
        model = _model(name)
        for schema_name in schemas:
            for layout in LAYOUTS:
                t0 = time.perf_counter()
                row = run_one(model, name, schema_name, layout, n, max_tokens, args.plain)
                row["seconds"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                print(f"{name:8} {schema_name:7} {layout:9} valid {row['valid']:>2}/{n}  "
                      f"stop {row['stopped']:>2}/{n}  longest ws {row['longest_ws_run']:>3}  "
                      f"({row['seconds']} s)", flush=True)
    print(f"\n{'model':8} {'layout':9} {'valid & complete':>17}")
    for name in models:
        for layout in LAYOUTS:
            sel = [r for r in rows if r["model"] == name and r["layout"] == layout]
            v, t = sum(r["valid"] for r in sel), sum(r["n"] for r in sel)
            print(f"{name:8} {layout:9} {v:>8}/{t} ({100 * v / t:.0f}%)")
    OUT.parent.mkdir(exist_ok=True)
    out = OUT.with_name("whitespace_plain.json") if args.plain else OUT
    out.write_text(json.dumps({"max_tokens": max_tokens, "n": n, "load": os.getloadavg(),
                               "rows": rows}, indent=1))
    print(f"\nwritten {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
