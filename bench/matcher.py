#!/usr/bin/env python3
"""The Matcher's per-token cost: consume + compute_mask + forced_tokens along a small JSON output.

Each case walks one output token by token as a generation loop drives the matcher: at each step
``forced_tokens()``, ``compute_mask(remaining)``, then ``consume(token)``. The walk is repeated
with a fresh matcher, so after the first (cold) walk every mask is memoised and what is timed is
the matcher itself: history, budgets, forced bytes and the calls between Python and the core.
Reported per token: the warm time (best of ``--repeats`` walks) and the lexguide Python frames
entered (counted with ``sys.setprofile`` on one more walk; the profiler does not see calls into
``lexguide._core``, whose nanobind functions are not builtins).

    python bench/matcher.py [--vocab smollm2] [--repeats 20] [--quick] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results  # noqa: E402
from _vocab import load_vocab  # noqa: E402
del sys.path[0]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "tags", "active"],
    "additionalProperties": False,
}
RECORD = {"name": "Ada Lovelace", "age": 36, "email": "ada@example.org",
          "tags": ["mathematics", "engines", "notes"], "active": True}
# a lexeme with a token budget: the matcher counts tokens per lexeme and narrows the mask
BUDGET_LARK = ('start: "{\\"note\\": \\"" note "\\", \\"n\\": " INT "}"\n'
               'note[max_tokens=40]: /[a-zA-Z ,.]+/\nINT: /[0-9]+/')
BUDGET_TEXT = '{"note": "A short note, written by hand. It ends here", "n": 12345}'


def _steps(m, tokens: list[int], remaining: int) -> None:
    """Drive matcher ``m`` along ``tokens``: forced tokens, the mask, the token."""
    for i, t in enumerate(tokens):
        m.forced_tokens()
        m.compute_mask(remaining - i)
        m.consume(t)


def walk(grammar, info, tokens: list[int], remaining: int) -> None:
    """One generation loop along ``tokens`` on a fresh matcher."""
    from lexguide.engine import Matcher

    _steps(Matcher(grammar, info), tokens, remaining)


def count_frames(grammar, info, tokens: list[int], remaining: int) -> int:
    """The lexguide Python frames entered during one walk."""
    import lexguide

    root = str(Path(lexguide.__file__).resolve().parent)
    frames = 0

    def prof(frame, event, arg):
        nonlocal frames
        if event == "call" and frame.f_code.co_filename.startswith(root):
            frames += 1

    from lexguide.engine import Matcher

    m = Matcher(grammar, info)  # construction is not part of the per-token cost
    sys.setprofile(prof)
    try:
        _steps(m, tokens, remaining)
    finally:
        sys.setprofile(None)
    return frames


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default="smollm2")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="3 repeats (a smoke test)")
    ap.add_argument("--out", default=None, metavar="PATH", help="write the rows as JSON")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    repeats = 3 if args.quick else args.repeats
    from lexguide import Grammar

    vocab = load_vocab(args.vocab)
    info = vocab.tokenizer_info()
    text = json.dumps(RECORD)
    cases = [("json schema, 5 fields", Grammar.from_json_schema(SCHEMA), text),
             ("lark, max_tokens lexeme", Grammar.from_lark(BUDGET_LARK), BUDGET_TEXT)]
    report = _results.Report()
    report.print(f"vocabulary {args.vocab} ({len(vocab.token_bytes)} tokens); per token: "
                 "forced_tokens() + compute_mask(remaining) + consume(token), warm masks")
    report.print("")
    report.print("| case | tokens | µs / token (best walk) | lexguide Python frames / token |")
    report.print("|---|---:|---:|---:|")
    rows = []
    for name, grammar, out in cases:
        tokens = vocab.encode(out)
        remaining = len(tokens) + 64
        walk(grammar, info, tokens, remaining)  # cold: the masks and walks
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            walk(grammar, info, tokens, remaining)
            best = min(best, time.perf_counter() - t0)
        frames = count_frames(grammar, info, tokens, remaining)
        n = len(tokens)
        report.print(f"| {name} | {n} | {best / n * 1e6:.1f} | {frames / n:.1f} |")
        rows.append({"case": name, "tokens": n, "us_per_token": best / n * 1e6,
                     "frames_per_token": frames / n})
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    _results.write(__file__, report.text(), quick=args.quick, results=args.results, argv=argv)


if __name__ == "__main__":
    main()
