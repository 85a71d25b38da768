#!/usr/bin/env python3
"""Record the masks an engine computes along forced valid inputs, as digests (test oracle).

For each case — a JSONSchemaBench schema with a valid maskbench instance (compact JSON,
compact whitespace), or a Lark/GBNF grammar of llama.cpp's test cases (tests/data/llama.cpp)
with a passing string — the input is
tokenized with the model's tokenizer and forced token by token; the digest is SHA-1 over the
masks before every token and at the end. ``tests/test_engine_recorded.py`` checks that the
engine reproduces them exactly.

    LEXGUIDE_CORPORA=... python tests/tools/record_mask_hashes.py --out tests/data/engine/mask_hashes.json

JSONSchemaBench is not in the repository: it is read from ``--corpora`` or ``LEXGUIDE_CORPORA``
(layout in docs/bench.md); without either, only ``--schemas 0`` runs.

It was first run with the pure-Python engine (before the C++ core replaced it), which the core
then reproduced exactly. Re-record only when the grammars change, not the engine: the recorded
digests follow the current key-escape default (a declared key has one spelling), computed by
a core that still reproduced the digests recorded before that default.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from pathlib import Path

LLAMA_CPP = Path(__file__).resolve().parents[1] / "data" / "llama.cpp"
ENV = "LEXGUIDE_CORPORA"


def _lines(path: Path) -> list[str]:
    # split on newlines only: the records hold U+2028 and friends inside strings
    return [line for line in path.read_text().split("\n") if line.strip()]


def schema_cases(corpora: Path, n: int, seed: int) -> list[dict]:
    cases = []
    for path in sorted((corpora / "jsonschemabench" / "maskbench").glob("*.jsonl")):
        sub = path.stem
        plain = corpora / "jsonschemabench" / f"{sub}.jsonl"
        schemas = {}
        if plain.exists():
            for line in _lines(plain):
                rec = json.loads(line)
                schemas[rec["id"]] = rec["schema"]
        for line in _lines(path):
            rec = json.loads(line)
            schema = rec.get("schema", schemas.get(rec["id"]))
            valid = [t["data"] for t in rec.get("tests", []) if t.get("valid")]
            if schema is None or not valid or not isinstance(schema, dict):
                continue
            cases.append({"id": f"{sub}/{rec['id']}", "kind": "json", "schema": schema,
                          "text": json.dumps(valid[0], separators=(",", ":"), ensure_ascii=False)})
    random.Random(seed).shuffle(cases)
    return cases[:n]


def grammar_cases() -> list[dict]:
    cases = []
    for fname, key, kind in (("llguidance-cases.jsonl", "grammar", "lark"), ("gbnf-cases.jsonl", "gbnf", "gbnf")):
        for i, line in enumerate(_lines(LLAMA_CPP / fname)):
            rec = json.loads(line)
            if not rec.get(key) or not rec.get("pass"):
                continue
            for j, text in enumerate(rec["pass"][:3]):
                cases.append({"id": f"{kind}/{i}/{j}", "kind": kind, "grammar": rec[key], "text": text})
    return cases


def compile_case(case: dict):
    from lexguide.engine.grammar import Grammar

    if case["kind"] == "json":
        schema = dict(case["schema"])
        xg = dict(schema.get("x-guidance", {}))
        xg["whitespace_flexible"] = False
        schema["x-guidance"] = xg
        return Grammar.from_json_schema(schema)
    if case["kind"] == "lark":
        return Grammar.from_lark(case["grammar"])
    return Grammar.from_gbnf(case["grammar"])


def digest(grammar, info, tokens: list[int]) -> tuple[str, int] | None:
    from lexguide.engine.matcher import Matcher

    m = Matcher(grammar, info)
    h = hashlib.sha1()
    for t in tokens:
        mask = m.compute_mask()
        h.update(mask.tobytes())
        if not (int(mask[t >> 5]) >> (t & 31)) & 1:
            return None
        m.consume(t)
    h.update(m.compute_mask().tobytes())
    return h.hexdigest(), len(tokens) + 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--schemas", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default="smollm2,gemma3")
    ap.add_argument("--corpora", type=Path, default=os.environ.get(ENV) or None,
                    help=f"folder of the external corpora (default: ${ENV}; see docs/bench.md)")
    args = ap.parse_args()
    bench = args.corpora / "jsonschemabench" / "maskbench" if args.corpora else None
    if args.schemas and (bench is None or not bench.is_dir()):
        ap.error(f"the schema cases need jsonschemabench/maskbench: set {ENV} or pass --corpora "
                 "(layout in docs/bench.md), or pass --schemas 0")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from model_paths import model_path  # tests/tools/model_paths.py

    from lexguide.engine.tokenizer_info import TokenizerInfo
    from lexguide.errors import LexguideError
    from lexguide.tokenizer import Tokenizer

    cases = grammar_cases() + (schema_cases(args.corpora, args.schemas, args.seed)
                               if args.schemas else [])
    out: dict = {"cases": {c["id"]: {k: v for k, v in c.items() if k != "id"} for c in cases}, "digests": {}}
    for model in args.models.split(","):
        tok = Tokenizer.from_gguf(model_path(model))
        info = TokenizerInfo.from_tokenizer(tok)
        got = {}
        for c in cases:
            try:
                g = compile_case(c)
                tokens = tok.encode(c["text"], add_special=False)
                r = digest(g, info, tokens)
            except LexguideError:
                continue
            if r is not None:
                got[c["id"]] = {"sha1": r[0], "steps": r[1], "tokens": tokens}
        out["digests"][model] = got
        print(model, len(got), "cases", sum(v["steps"] for v in got.values()), "masks", flush=True)
    used = {cid for d in out["digests"].values() for cid in d}
    out["cases"] = {k: v for k, v in out["cases"].items() if k in used}
    Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
