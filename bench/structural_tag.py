#!/usr/bin/env python3
"""Structural tags: mask cost in free text and inside tags, lexguide against xgrammar.

For each structural tag (a Qwen3-style tool call after free text, the same after a think
section, the legacy ``structures``/``triggers`` shape with two functions), a sample output
(prose, a tag, more prose) is tokenized with the model's own tokenizer and forced token by
token through each engine: the mask is filled into a preallocated buffer (timed), the forced
token must be allowed, then it is consumed; after the last token EOS must be allowed. Each mask
is counted as *free* (the trigger has not completed yet, or the tag has closed) or *tag*
(from the trigger's last byte to the tag's end).

Measured per engine: compile (ms); per-mask time in free text and inside the tag on the first
matcher of a freshly compiled grammar (*first use*) and on a second matcher of the same
grammar (*repeated*), and the very first mask of a fresh grammar on its own (free text at the
start: every token but a few is allowed, so it walks the whole vocabulary once). Ratios are
lexguide / xgrammar (below 1: lexguide faster).

Method (after the peers' benchmark driver): each (engine, spec) runs in its own spawned
process, so first use is really first (no grammar or mask cache of an earlier spec), engines
alternate per spec, xgrammar gets the same token bytes (control tokens as specials), one
thread and its compile cache off; lexguide fills the buffer with ``Matcher.fill_mask``.

    python bench/structural_tag.py            # all specs, 3 repeats (best of each), smollm2
    python bench/structural_tag.py --quick    # one spec, shorter text, 1 repeat (a smoke test)

Writes JSON to ``--out`` (default bench/results/structural_tag.json) and the table to
bench/results/structural_tag.md (``--results``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _results
from _vocab import VocabError, load_vocab, peer_token_bytes

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("lexguide", "xgrammar")

ARGS_SCHEMA = {"type": "object", "properties": {
    "location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["location", "unit"], "additionalProperties": False}
TOOL_BEGIN = '<tool_call>\n{"name": "get_weather", "arguments": '
TOOL_TAG = {"type": "tag", "begin": TOOL_BEGIN, "end": "}\n</tool_call>",
            "content": {"type": "json_schema", "json_schema": ARGS_SCHEMA}}
TOOL_CALL = TOOL_BEGIN + '{"location": "Paris", "unit": "celsius", "days": 3}}\n</tool_call>'
PROSE = ("The forecast depends on where you are and on how far ahead you look. Coastal cities "
         "see milder winters, while inland regions swing between hot afternoons and cold nights. "
         "Before planning a trip it helps to check a few days in advance, compare sources and "
         "keep an eye on wind and rain as well as temperature. ")
LEGACY_STRUCTURES = [
    {"begin": "<function=get_weather>", "schema": ARGS_SCHEMA, "end": "</function>"},
    {"begin": "<function=get_time>", "schema": {"type": "object", "properties": {
        "zone": {"type": "string"}}, "required": ["zone"]}, "end": "</function>"}]


def _specs(n_prose: int) -> dict[str, dict[str, Any]]:
    """name -> lexguide spec, xgrammar spec (same language), sample text, tag span."""
    prose = PROSE * n_prose
    tool = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [TOOL_TAG]}}
    think = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
        {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [TOOL_TAG],
         "excludes": ["<think>", "</think>"]}]}}
    legacy = {"type": "structural_tag", "structures": LEGACY_STRUCTURES, "triggers": ["<function="]}
    legacy_as_format = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<function="], "tags": [
            {"type": "tag", "begin": s["begin"], "end": s["end"],
             "content": {"type": "json_schema", "json_schema": s["schema"]}}
            for s in LEGACY_STRUCTURES]}}
    fn_call = '<function=get_weather>{"location": "Oslo", "unit": "celsius"}</function>'
    return {
        "tool_call": {"ours": tool, "xgr": tool, "text": prose + TOOL_CALL + "\n" + prose,
                      "tag": (len(prose), len(prose) + len(TOOL_CALL))},
        "think_then_tool": {"ours": think, "xgr": think,
                            "text": "<think>" + prose + "</think>" + prose + TOOL_CALL + prose,
                            "tag": (len(prose) * 2 + 15, len(prose) * 2 + 15 + len(TOOL_CALL))},
        "legacy": {"ours": legacy, "xgr": legacy_as_format, "text": prose + fn_call + prose,
                   "tag": (len(prose), len(prose) + len(fn_call))},
    }


# -- one engine, one spec, in its own process ----------------------------------------------------
def _engine(name: str, vocab: Any) -> tuple[Any, Any, Any]:
    """(compile(spec) -> compiled, matcher(compiled) -> m, step functions (fill, consume))."""
    if name == "lexguide":
        import lexguide
        import lexguide.grammar.structural_tag  # noqa: F401  (module loading is not compile)
        import lexguide.jsonschema  # noqa: F401

        info = vocab.tokenizer_info()
        buf = np.zeros((1, info.n_words), dtype=np.uint32)

        def compile_(spec):
            return lexguide.Matcher(lexguide.Grammar.from_structural_tag(spec), info)

        def matcher(compiled, first):
            return compiled if first else lexguide.Matcher(compiled.grammar, info)

        def fill(m):
            m.fill_mask(buf)
            return buf[0]

        def consume(m, tok):
            try:
                m.consume(tok)
            except lexguide.TokenRejected:
                return False
            return True

        return compile_, matcher, (fill, consume)
    import xgrammar as xgr

    tokens, specials = peer_token_bytes(vocab)
    special = set(specials)
    raw = [b"" if i in special else b for i, b in enumerate(tokens)]
    info = xgr.TokenizerInfo(raw, xgr.VocabType.RAW, vocab_size=vocab.n_vocab,
                             stop_token_ids=list(vocab.eos_ids))
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    xbuf = np.zeros((1, (vocab.n_vocab + 31) // 32), dtype=np.int32)

    def compile_x(spec):
        return compiler.compile_structural_tag(json.dumps(spec))

    def matcher_x(compiled, first):
        return xgr.GrammarMatcher(compiled)

    def fill_x(m):
        m.fill_next_token_bitmask(xbuf)
        return xbuf[0].view(np.uint32)

    return compile_x, matcher_x, (fill_x, lambda m, tok: bool(m.accept_token(tok)))


def _allowed(mask: np.ndarray, tok: int) -> bool:
    return bool((int(mask[tok >> 5]) >> (tok & 31)) & 1)


def _force(m: Any, steps: tuple, ids: list[int], regions: list[str], eos: int) -> dict[str, Any]:
    fill, consume = steps
    times: dict[str, list[int]] = {"free": [], "tag": [], "all": []}
    clock = time.perf_counter_ns
    for tok, region in zip(ids, regions):
        t0 = clock()
        mask = fill(m)
        times[region].append(clock() - t0)
        times["all"].append(times[region][-1])
        if not _allowed(mask, tok):
            return {"error": f"token {tok} refused", "times": times}
        if not consume(m, tok):
            return {"error": f"token {tok} rejected on consume", "times": times}
    if not _allowed(fill(m), eos):
        return {"error": "EOS refused at the end", "times": times}
    return {"error": None, "times": times}


def _worker(engine: str, vocab_name: str, spec_name: str, n_prose: int, out: Any) -> None:
    try:
        vocab = load_vocab(vocab_name)
        case = _specs(n_prose)[spec_name]
        text = case["text"]
        ids = vocab.encode(text)
        assert vocab.decode_bytes(ids) == text.encode(), "the tokenizer does not round-trip"
        lo, hi = case["tag"]
        trigger_end = text.index(">", lo) + 1 if spec_name != "legacy" else lo + len("<function=")
        regions, pos = [], 0
        for t in ids:
            regions.append("tag" if trigger_end <= pos < hi else "free")
            pos += len(vocab.token_bytes[t])
        compile_, matcher, steps = _engine(engine, vocab)
        spec = case["ours"] if engine == "lexguide" else case["xgr"]
        t0 = time.perf_counter()
        compiled = compile_(spec)
        compile_ms = (time.perf_counter() - t0) * 1e3
        first = _force(matcher(compiled, True), steps, ids, regions, vocab.eos_id)
        again = _force(matcher(compiled, False), steps, ids, regions, vocab.eos_id)
        out.put({"engine": engine, "spec": spec_name, "compile_ms": compile_ms,
                 "n_tokens": len(ids), "first": first, "repeated": again})
    except Exception as e:  # reported in the table, not a crash of the whole bench
        out.put({"engine": engine, "spec": spec_name, "crash": f"{type(e).__name__}: {e}"})


def _run(engine: str, vocab: str, spec: str, n_prose: int, timeout: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_worker, args=(engine, vocab, spec, n_prose, q))
    p.start()
    try:
        res = q.get(timeout=timeout)
    except Exception:
        res = {"engine": engine, "spec": spec, "crash": f"no result in {timeout:.0f} s"}
    p.join(5)
    if p.is_alive():
        p.kill()
    return res


# -- report --------------------------------------------------------------------------------------
def _summary(run: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"compile_ms": run["compile_ms"]}
    for phase in ("first", "repeated"):
        row[f"{phase}_mask1_us"] = run[phase]["times"]["all"][0] / 1e3
        for region in ("free", "tag"):
            t = np.array(run[phase]["times"][region], dtype=np.float64) / 1e3
            row[f"{phase}_{region}_us"] = float(t.mean()) if t.size else None
            row[f"{phase}_{region}_p99_us"] = float(np.percentile(t, 99)) if t.size else None
            row[f"{phase}_{region}_n"] = int(t.size)
        row[f"{phase}_error"] = run[phase]["error"]
    return row


COLUMNS = [("compile ms", "compile_ms"), ("1st mask µs", "first_mask1_us"),
           ("first free µs", "first_free_us"),
           ("first tag µs", "first_tag_us"), ("repeated free µs", "repeated_free_us"),
           ("repeated tag µs", "repeated_tag_us")]


def _fmt(v: Any) -> str:
    return "—" if v is None else f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"


def render(rows: dict[str, dict[str, Any]], n_tokens: dict[str, int]) -> str:
    head = "| spec | tokens (free / tag) | engine | " + " | ".join(c for c, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (3 + len(COLUMNS))]
    for spec, by_engine in rows.items():
        for engine, row in by_engine.items():
            if "crash" in row:
                lines.append(f"| {spec} | | {engine} | {row['crash']} |")
                continue
            cells = [_fmt(row[k]) for _, k in COLUMNS]
            errs = [row[f"{p}_error"] for p in ("first", "repeated") if row[f"{p}_error"]]
            lines.append(f"| {spec} | {n_tokens[spec]} | {engine} | " + " | ".join(cells) + " |"
                         + (f" {errs[0]}" if errs else ""))
        ours, theirs = by_engine.get("lexguide"), by_engine.get("xgrammar")
        if ours and theirs and "crash" not in ours and "crash" not in theirs:
            ratios = [_fmt(ours[k] / theirs[k]) if ours[k] and theirs[k] else "—"
                      for _, k in COLUMNS]
            lines.append(f"| {spec} | | **lexguide / xgrammar** | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one spec, one paragraph, one repeat")
    ap.add_argument("--vocab", default="smollm2", help="smollm2, gemma3 or llama3")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--repeats", type=int, default=None, help="runs per (engine, spec); each "
                    "column keeps the best (default 3, 1 with --quick)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--out", default=None, help="JSON (default bench/results/structural_tag.json)")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    n_prose = 1 if args.quick else 4
    specs = ["tool_call"] if args.quick else list(_specs(1))
    engines = [e for e in args.engines.split(",") if e]
    try:
        load_vocab(args.vocab)
    except VocabError as e:
        print(f"[structural_tag] vocabulary {args.vocab} unavailable: {e}", file=sys.stderr)
        return 1
    if "xgrammar" in engines:
        try:
            import xgrammar  # noqa: F401
        except ImportError:
            print("[structural_tag] xgrammar not installed: lexguide alone", flush=True)
            engines.remove("xgrammar")
    rows: dict[str, dict[str, Any]] = {}
    n_tokens: dict[str, str] = {}
    raw: list[dict[str, Any]] = []
    for spec in specs:
        rows[spec] = {}
        best: dict[str, dict[str, Any]] = {}
        for rep in range(repeats):
            order = engines if rep % 2 == 0 else engines[::-1]  # alternate who runs first
            for engine in order:
                run = _run(engine, args.vocab, spec, n_prose, args.timeout)
                raw.append(run)
                if "crash" in run:
                    best.setdefault(engine, run)
                    continue
                row = _summary(run)
                old = best.get(engine)
                if old is None or "crash" in old:
                    best[engine] = row
                else:  # best of the repeats, column by column (the machine may be shared)
                    for k, v in row.items():
                        if k.endswith(("_us", "_ms")) and v is not None and old[k] is not None:
                            old[k] = min(old[k], v)
                n_tokens[spec] = f"{row['first_free_n']} / {row['first_tag_n']}"
        rows[spec] = {e: best[e] for e in engines if e in best}
    table = render(rows, n_tokens)
    note = (f"\nvocabulary {args.vocab}; 1st mask: the first mask of a fresh grammar; the others: "
            f"mean µs per mask; best of {repeats} run(s) per (engine, spec) column by column, "
            "each run in a fresh process; ratios lexguide / xgrammar.")
    print(table + note)
    out = Path(args.out or ROOT / "bench" / "results" / "structural_tag.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"argv": sys.argv, "quick": args.quick, "vocab": args.vocab,
                               "rows": rows, "runs": raw}, indent=1, default=str))
    _results.write(__file__, table + "\n" + note, quick=args.quick, results=args.results, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
