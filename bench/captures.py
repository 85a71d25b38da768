#!/usr/bin/env python3
"""Cost of ``Matcher.captures()`` and ``Grammar.captures()`` on long outputs.

Captures are read on demand from the consumed input (``lexguide.engine.captures``), so their
cost grows with the output. Each case builds one output of ``--items`` items, feeds it to a
:class:`Matcher` one byte-token at a time (a synthetic vocabulary of the printable ASCII
bytes: no model needed) and times ``captures()`` on the whole output, then
``Grammar.captures()`` on the same text; the figure is the best of ``--repeats`` calls.

    python bench/captures.py            # 400 items, 5 repeats
    python bench/captures.py --quick    # 20 items, 1 repeat (smoke test)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results

del sys.path[0]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa")

# name -> (Lark grammar, the text of n items)
CASES = {
    "list of items": (
        'start: lst\nitem[capture]: /[a-z]+/ | /[0-9]+/\n%ignore " "\n'
        'lst[capture="all"]: item ("," item)*',
        lambda n: ", ".join(WORDS[i % 10] if i % 3 else str(i) for i in range(n)),
    ),
    "fields with stop": (
        'start: field+\nfield[capture, stop=";"]: /[a-z ]*/',
        lambda n: "".join(f"{WORDS[i % 10]} {WORDS[(i + 3) % 10]};" for i in range(n)),
    ),
    "key=value rules": (
        'start: pair*\npair[capture="pair"]: key "=" value "\\n"\n'
        'key[capture]: /[a-z]+/\nvalue[capture]: %json {"type": "integer"}',
        lambda n: "".join(f"{WORDS[i % 10]}={i * 7}\n" for i in range(n)),
    ),
}


def _best(f, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=400, help="items per output")
    ap.add_argument("--repeats", type=int, default=5, help="calls timed (the best is reported)")
    ap.add_argument("--quick", action="store_true", help="20 items, 1 repeat")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.items, args.repeats = 20, 1
    import lexguide as lg

    tokens = [bytes([c]) for c in range(32, 127)] + [b"\n", b""]
    info = lg.TokenizerInfo.from_token_bytes(tokens, eos_ids=[len(tokens) - 1])
    token_id = {t: i for i, t in enumerate(tokens)}
    rep = _results.Report()
    rep.print("| case | bytes | captures | Matcher.captures() ms | Grammar.captures() ms |")
    rep.print("|---|---|---|---|---|")
    for name, (source, make) in CASES.items():
        g = lg.Grammar.from_lark(source)
        text = make(args.items).encode()
        m = lg.Matcher(g, info)
        for b in text:
            m.consume(token_id[bytes([b])])
        m.consume(len(tokens) - 1)
        t_matcher, got = _best(m.captures, args.repeats)
        t_grammar, want = _best(lambda: g.captures(text), args.repeats)
        if got != want:
            raise SystemExit(f"{name}: Matcher.captures() and Grammar.captures() differ")
        rep.print(f"| {name} | {len(text)} | {len(got)} | {t_matcher * 1e3:.2f} | "
                  f"{t_grammar * 1e3:.2f} |")
    rep.print("")
    rep.print(f"{args.items} items per output, one byte per token; best of {args.repeats} calls")
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results, argv=argv)


if __name__ == "__main__":
    main()
