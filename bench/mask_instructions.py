#!/usr/bin/env python3
"""Instructions of lexguide's first-use masks, counted by callgrind (repeatable on a noisy host).

The schemas and instances are those of ``bench/jsonschema.py``'s mask pass (the first
``--limit`` JSONSchemaBench schemas of its seeded order that llguidance also accepts, one
valid instance each from bench/_instances.py, compact JSON, the vocabulary's own encoding;
the corpus folder from ``--corpora`` or ``LEXGUIDE_CORPORA``, docs/bench.md): every schema is compiled
and matched first, then each is forced token by token with a mask per token. Under
``--callgrind`` the script runs itself under ``valgrind --tool=callgrind`` collecting only
inside ``MaskEngine::mask`` (compile, lowering and consume excluded) and prints the total;
``callgrind_annotate`` reads the profile it leaves. Timing is no figure here: a wall-clock
comparison with the peers is ``bench/jsonschema.py``.

    python bench/mask_instructions.py --callgrind [--vocab smollm2|llama3|gemma3] [--limit 40]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import _corpora  # noqa: E402
import _results  # noqa: E402
from _instances import make_instance  # noqa: E402
del sys.path[0]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]  # (see jsonschema.py)


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # (dataclasses look their module up)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def run_masks(vocab_name: str, limit: int, seed: int, corpora: Path | None) -> int:
    """Compile the schemas, then force each instance with a mask per token; masks computed."""
    import llguidance as llg

    from lexguide.engine import Matcher
    from lexguide.engine.grammar import Grammar
    from lexguide.errors import LexguideError

    vmod = _module("_vocab", BENCH / "_vocab.py")
    vocab = vmod.load_vocab(vocab_name)
    info = vocab.tokenizer_info()
    jobs = []
    for key, schema in _corpora.jsonschemabench(seed, corpora):
        if len(jobs) >= limit:
            break
        got = vmod.instance_ids(vocab, make_instance, schema, f"{seed}:{key}")
        if got is None:
            continue
        ids = got[1]
        try:
            matcher = Matcher(Grammar.from_json_schema(schema), info)
            grm = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
            if llg.LLMatcher.validate_grammar(grm):  # an error message: llguidance rejects it
                continue
        except (LexguideError, ValueError):
            continue
        jobs.append((matcher, ids))
    n = 0
    for matcher, ids in jobs:
        for t in [*ids, None]:
            matcher.compute_mask()
            n += 1
            if t is not None:
                matcher.consume(t)
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default="smollm2", help="smollm2 | llama3 | gemma3 (default smollm2)")
    ap.add_argument("--limit", type=int, default=40, help="schemas (default 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--callgrind", action="store_true",
                    help="run under callgrind and print the instructions of the masks")
    ap.add_argument("--out", default="/tmp/lexguide-mask-instructions.callgrind",
                    help="callgrind's profile (with --callgrind)")
    _corpora.add_argument(ap)
    _results.add_argument(ap)
    args = ap.parse_args()
    _corpora.require("jsonschemabench", args.corpora)
    if not args.callgrind:
        n = run_masks(args.vocab, args.limit, args.seed, args.corpora)
        print(f"{n} masks")
        return 0
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={args.out}", "--collect-atstart=no",
           "--toggle-collect=*MaskEngine::mask*", sys.executable, __file__, "--vocab", args.vocab,
           "--limit", str(args.limit), "--seed", str(args.seed)]
    if args.corpora:
        cmd += ["--corpora", str(args.corpora)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    total = re.search(r"Collected : (\d+)", res.stderr)
    masks = re.search(r"(\d+) masks", res.stdout)
    if res.returncode != 0 or not total or not masks:
        print(res.stdout[-2000:], res.stderr[-2000:], sep="\n")
        return 1
    n, ir = int(masks.group(1)), int(total.group(1))
    table = "\n".join([
        "| vocab | schemas | masks | instructions (MaskEngine::mask) | per mask |",
        "|---|---|---|---|---|",
        f"| {args.vocab} | {args.limit} | {n} | {ir / 1e6:.1f}M | {ir / n / 1e3:.1f}k |"])
    print(table)
    print(f"profile: {args.out} (callgrind_annotate --inclusive=yes {args.out})")
    _results.write(__file__, table, quick=False, results=args.results, variant=args.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
