#!/usr/bin/env python3
"""Token-mask benchmark: lexguide side by side with llguidance and xgrammar, same run, same texts.

For every (vocabulary, grammar) case, valid sample texts are tokenized with the model's own
tokenizer and forced token by token through each engine: compute the mask (timed), check the
forced token is allowed, consume it (timed); after the last token one more mask must allow EOS.
Measured: grammar compile time, time to first mask (compile + matcher + first mask), per-token
mask time (mean, p50, p99, max) on a cold compiled grammar and again on a second matcher of the
same grammar ("warm"), lexguide's mask-cache hit rate, and tokenizer preprocessing time.

Method: each engine runs in its own spawned process (a crash or hang costs that engine that case
only), engines are interleaved per case with a rotating order so background load hits all alike,
and ratios are taken against the fastest peer of the same case in the same run. Grammars: tests/data/grammars/*.lark (JSON-like, arithmetic, C-like; xgrammar
gets the `.gbnf` twin when there is one), llama.cpp's GBNF grammars (tests/data/llama.cpp/grammars;
lexguide through ``Grammar.from_gbnf`` and through ``gbnf_to_lark`` → ``from_lark``; llguidance
through its own ``gbnf_to_lark``; xgrammar natively) and, when the external corpora are given
(``--corpora`` or ``LEXGUIDE_CORPORA``, docs/bench.md), llguidance's rfc.lark (with rfc.xml) and
blog schema (as Lark `%json`). The adapters also take JSON Schemas (format ``json``), for
bench/jsonschema.py.

    python bench/mask.py --quick   # both vocabularies, own grammars + 2 GBNF, shortest text, 1 repeat
    python bench/mask.py           # every grammar and sample text, 3 repeats (long: peers time out)
    python bench/mask.py --budget [--quick]   # lexguide's budget-aware masks vs its plain ones
                                              # (bench/_budget.py; no peer has them)

Results go to bench/results/mask.json (``--out``). On a loaded 2-core machine --quick takes ~5 min,
a third of it peers' tokenizer preprocessing (xgrammar ~15-25 s per vocabulary).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import pickle
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _corpora
import _results
from _vocab import Vocab, VocabError, load_vocab, peer_token_bytes

ROOT = Path(__file__).resolve().parent.parent
GRAMMAR_DIR = ROOT / "tests" / "data" / "grammars"
GBNF_DIR = ROOT / "tests" / "data" / "llama.cpp" / "grammars"  # vendored (MIT)
LLG_DATA_REL = "llguidance-data/sample_parser/data"  # in the external corpora, when given
ENGINES = ("lexguide", "llguidance", "xgrammar")
PEERS = ("llguidance", "xgrammar")
QUICK_GBNF = ("gbnf:json", "gbnf:chess")


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One grammar with the texts to force; ``fmt`` is "lark" or "gbnf"."""

    name: str
    fmt: str
    text: str
    gbnf_twin: str | None  # same language as GBNF, for engines without Lark (xgrammar)
    samples: list[str]


def load_cases(quick: bool, only: set[str] | None, corpora: Path | None = None) -> list[Case]:
    """Lark grammars from tests/data/grammars, llguidance's samples when the external corpora
    are given, then llama.cpp's GBNF grammars with our samples."""
    cases = []
    llg = _corpora.optional(LLG_DATA_REL, corpora)
    for path in sorted(GRAMMAR_DIR.glob("*.lark")):
        samples = json.loads(path.with_suffix(".samples.json").read_text())["valid"]
        twin = path.with_suffix(".gbnf")
        cases.append(Case(path.stem, "lark", path.read_text(),
                          twin.read_text() if twin.exists() else None, samples))
    if llg is not None and (llg / "rfc.lark").exists():  # llguidance's XML-subset grammar
        cases.append(Case("llg:rfc", "lark", (llg / "rfc.lark").read_text(), None,
                          [(llg / "rfc.xml").read_text()]))
    if llg is not None and (llg / "blog.schema.json").exists():  # a JSON schema inside Lark
        sample = json.loads((llg / "blog.sample.json").read_text())
        cases.append(Case("llg:blog", "lark",
                          "%llguidance {}\nstart: %json " + (llg / "blog.schema.json").read_text(),
                          None, [json.dumps(sample, indent=2)]))
    gbnf_samples_path = GRAMMAR_DIR / "gbnf_samples.json"
    if GBNF_DIR.is_dir() and gbnf_samples_path.exists():
        gbnf_samples = json.loads(gbnf_samples_path.read_text())
        for path in sorted(GBNF_DIR.glob("*.gbnf")):
            samples = gbnf_samples.get(path.name)
            if samples:
                text = path.read_text()
                cases.append(Case(f"gbnf:{path.stem}", "gbnf", text, text, samples))
    if only:
        cases = [c for c in cases if c.name in only]
    elif quick:
        cases = [c for c in cases if ":" not in c.name or c.name in QUICK_GBNF]
    if quick:
        for c in cases:
            c.samples = [min(c.samples, key=len)]
    return cases


# ---------------------------------------------------------------------------------------------
# Engine adapters (they run inside the worker processes)
# ---------------------------------------------------------------------------------------------
class Unsupported(Exception):
    """The engine cannot run this grammar format (reported as n/a, not as a failure)."""


def _bit(mask: np.ndarray, tok: int) -> bool:
    flat = mask.reshape(-1)
    return bool((int(flat[tok >> 5]) >> (tok & 31)) & 1)


class LexguideAdapter:
    name = "lexguide"

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    def version(self) -> str:
        import lexguide

        return lexguide.__version__

    def setup(self) -> None:
        # import the front ends here, as the peers import their extension modules in setup:
        # the first grammar's compile time should not include Python module loading
        import lexguide.grammar.gbnf  # noqa: F401
        import lexguide.grammar.lark  # noqa: F401
        import lexguide.jsonschema  # noqa: F401
        import lexguide.regex.syntax  # noqa: F401
        import lexguide.regex.unicode  # noqa: F401

        self.info = self.vocab.tokenizer_info()

    def compile(self, fmt: str, text: str, variant: str) -> Any:
        import lexguide

        if fmt == "json":
            grammar = lexguide.Grammar.from_json_schema(json.loads(text))
        elif fmt == "lark":
            grammar = lexguide.Grammar.from_lark(text)
        elif variant == "gbnf_to_lark":
            grammar = lexguide.Grammar.from_lark(lexguide.gbnf_to_lark(text))
        else:
            grammar = lexguide.Grammar.from_gbnf(text)
        return lexguide.Matcher(grammar, self.info)  # builds the shared mask engine

    def matcher(self, compiled: Any, first: bool) -> Any:
        import lexguide

        return compiled if first else lexguide.Matcher(compiled.grammar, self.info)

    def mask(self, m: Any) -> np.ndarray:
        return m.compute_mask()

    def consume(self, m: Any, tok: int) -> bool:
        from lexguide import TokenRejected

        try:
            m.consume(tok)
        except TokenRejected:
            return False
        return True

    def cache(self, m: Any) -> dict[str, int] | None:
        return dict(m._engine.cache_info)


class PeerAdapter:
    """A peer engine: its mask goes into a preallocated int32 buffer; no cache statistics."""

    name = "?"

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version(self.name)

    def buffer(self) -> np.ndarray:
        return np.zeros((1, (self.vocab.n_vocab + 31) // 32), dtype=np.int32)

    def cache(self, m: Any) -> None:
        return None


class LLGuidanceAdapter(PeerAdapter):
    name = "llguidance"

    def setup(self) -> None:
        import llguidance as llg

        self.llg = llg
        vocab = self.vocab
        tokens, specials = peer_token_bytes(vocab)

        class Wrapped:  # what llguidance.TokenizerWrapper reads from a tokenizer
            eos_token_id = vocab.eos_id
            bos_token_id = None

            def __init__(self) -> None:
                self.tokens = tokens
                self.special_token_ids = specials

            def __call__(self, s: str | bytes) -> list[int]:
                return vocab.encode(s.decode("utf-8", "replace") if isinstance(s, bytes) else s)

        self.tok = llg.LLTokenizer(llg.TokenizerWrapper(Wrapped()), n_vocab=vocab.n_vocab,
                                   eos_token=list(vocab.eos_ids))

    def compile(self, fmt: str, text: str, variant: str) -> Any:
        llg = self.llg
        from llguidance.gbnf_to_lark import gbnf_to_lark

        if fmt == "json":
            grammar = llg.LLMatcher.grammar_from_json_schema(text)
        else:
            grammar = llg.LLMatcher.grammar_from_lark(text if fmt == "lark" else gbnf_to_lark(text))
        m = llg.LLMatcher(self.tok, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        return (m.deep_copy(), m)

    def matcher(self, compiled: Any, first: bool) -> Any:
        m = compiled[1] if first else compiled[0].deep_copy()
        return (m, self.buffer())

    def mask(self, m: Any) -> np.ndarray:
        matcher, buf = m
        matcher.unsafe_compute_mask_ptr(buf.ctypes.data, buf.nbytes)
        return buf

    def consume(self, m: Any, tok: int) -> bool:
        return bool(m[0].consume_token(tok))

class XGrammarAdapter(PeerAdapter):
    name = "xgrammar"

    def setup(self) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        tokens, specials = peer_token_bytes(self.vocab)
        special = set(specials)
        raw = [b"" if i in special else b for i, b in enumerate(tokens)]  # b"" = special in xgrammar
        info = xgr.TokenizerInfo(raw, xgr.VocabType.RAW, vocab_size=self.vocab.n_vocab,
                                 stop_token_ids=list(self.vocab.eos_ids))
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile(self, fmt: str, text: str, variant: str) -> Any:
        if fmt == "json":
            return self.compiler.compile_json_schema(text)
        if fmt != "gbnf":
            raise Unsupported("xgrammar has no Lark front end and this grammar has no .gbnf twin")
        return self.compiler.compile_grammar(text)

    def matcher(self, compiled: Any, first: bool) -> Any:
        m = self.xgr.GrammarMatcher(compiled)
        return (m, self.buffer())

    def mask(self, m: Any) -> np.ndarray:
        m[0].fill_next_token_bitmask(m[1])
        return m[1]

    def consume(self, m: Any, tok: int) -> bool:
        return bool(m[0].accept_token(tok))

ADAPTERS: dict[str, Any] = {"lexguide": LexguideAdapter, "llguidance": LLGuidanceAdapter,
                            "xgrammar": XGrammarAdapter}


# a job's "clock": wall time, or the worker thread's CPU time (time lost to other processes
# on a shared machine left out; every engine computes its masks and compiles on the calling
# thread: xgrammar's compiler is given one thread)
CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}


def _force(eng: Any, m: Any, tokens: list[int], eos_ids: tuple[int, ...],
           clock: Any = time.perf_counter_ns) -> dict[str, Any]:
    """Force ``tokens`` through matcher ``m``; timings in microseconds by ``clock`` (ns)."""
    out: dict[str, Any] = {"mask_us": [], "commit_us": [], "reject": None, "eos_ok": None}
    for k, tok in enumerate(tokens):
        t0 = clock()
        mask = eng.mask(m)
        t1 = clock()
        out["mask_us"].append((t1 - t0) / 1e3)
        if not _bit(mask, tok):
            out["reject"] = {"index": k, "token": tok, "why": "masked out"}
            return out
        t0 = clock()
        ok = eng.consume(m, tok)
        out["commit_us"].append((clock() - t0) / 1e3)
        if not ok:
            out["reject"] = {"index": k, "token": tok, "why": "consume refused an allowed token"}
            return out
    t0 = clock()
    mask = eng.mask(m)
    out["mask_us"].append((clock() - t0) / 1e3)
    out["eos_ok"] = any(_bit(mask, e) for e in eos_ids)
    return out


def _run_job(eng: Any, job: dict[str, Any], eos_ids: tuple[int, ...]) -> dict[str, Any]:
    res: dict[str, Any] = {"status": "ok", "runs": [], "warm": [], "compile_ms": [], "ttfm_ms": [],
                           "cache_cold": None, "cache_warm": None, "error": None}
    clock = CLOCKS[job.get("clock", "wall")]
    for rep in range(job["repeats"]):
        gc.collect()
        t0 = clock()
        try:
            compiled = eng.compile(job["fmt"], job["text"], job["variant"])
        except Unsupported as e:
            return dict(res, status="n/a", error=str(e))
        except Exception as e:  # noqa: BLE001 - any engine failure is a result to report
            return dict(res, status="compile_error", error=f"{type(e).__name__}: {str(e)[:300]}")
        res["compile_ms"].append((clock() - t0) / 1e6)
        runs = []
        cache0 = None
        for i, toks in enumerate(job["tokens"]):
            m = eng.matcher(compiled, first=(i == 0))
            if i == 0:
                cache0 = eng.cache(m)
            r = _force(eng, m, toks, eos_ids, clock)
            runs.append(r)
            if i == 0:
                res["ttfm_ms"].append(res["compile_ms"][-1] + r["mask_us"][0] / 1e3)
        if rep == 0:
            after = eng.cache(m) if job["tokens"] else None
            res["cache_cold"] = _cache_delta(cache0, after)
        res["runs"].append(runs)
        if rep == job["repeats"] - 1:  # warm: fresh matchers on the same compiled grammar
            before = eng.cache(m)
            for toks in job["tokens"]:
                m = eng.matcher(compiled, first=False)
                res["warm"].append(_force(eng, m, toks, eos_ids, clock))
            res["cache_warm"] = _cache_delta(before, eng.cache(m))
    return res


def _cache_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, Any] | None:
    if before is None or after is None:
        return None
    hits = after["hits"] - before["hits"]
    misses = after["misses"] - before["misses"]
    return {"hits": hits, "misses": misses, "hit_rate": hits / max(1, hits + misses),
            "final": after}


def worker_main(conn: Any, engine: str, vocab_path: str, log_path: str, setups: int) -> None:
    """Worker process: set up one engine on one vocabulary, then run jobs until told to quit."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # native libraries print on fd 1/2: keep them out of the table
    os.close(fd)
    try:
        with open(vocab_path, "rb") as f:
            vocab: Vocab = pickle.load(f)
        eng = ADAPTERS[engine](vocab)
        if engine == "llguidance":
            vocab.encode("warm up")  # load the tokenizer outside the timed preprocessing
        pre = []
        for _ in range(setups):
            gc.collect()
            t0 = time.perf_counter_ns()
            eng.setup()
            pre.append((time.perf_counter_ns() - t0) / 1e6)
        conn.send(("ready", {"version": eng.version(), "preprocess_ms": pre, "pid": os.getpid()}))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which goes on
        conn.send(("setup_error", f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1200:]}"))
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "quit":
            return
        try:
            conn.send(("result", _run_job(eng, msg[1], vocab.eos_ids)))
        except BaseException as e:  # noqa: BLE001 - an engine crash costs only this case
            tb = traceback.format_exc()[-1500:]
            conn.send(("result", {"status": "crash", "error": f"{type(e).__name__}: {str(e)[:300]}\n{tb}",
                                  "runs": [], "warm": [], "compile_ms": [], "ttfm_ms": []}))


class Worker:
    """A spawned engine process with a per-job timeout; restarted after a crash or hang."""

    def __init__(self, engine: str, vocab_path: str, log_path: str, timeout: float, setups: int) -> None:
        self.engine, self.vocab_path, self.log_path = engine, vocab_path, log_path
        self.timeout, self.setups = timeout, setups
        self.proc: Any = None
        self.info: dict[str, Any] | None = None
        self.error: str | None = None

    def start(self) -> bool:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, self.engine, self.vocab_path,
                                                          self.log_path, self.setups), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(600):
            self.kill()
            self.error = "setup timed out"
            return False
        kind, payload = self.conn.recv()
        if kind != "ready":
            self.error = payload.splitlines()[0] if payload else "setup failed"
            self.kill()
            return False
        if self.info is None:
            self.info = payload
        return True

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        if (self.proc is None or not self.proc.is_alive()) and (self.error or not self.start()):
            return {"status": "unavailable", "error": self.error}
        self.conn.send(("job", job))
        if self.conn.poll(self.timeout):
            try:
                return self.conn.recv()[1]
            except EOFError:
                pass
        self.kill()
        return {"status": "timeout_or_crash", "error": f"no answer within {self.timeout:.0f}s"}

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(("quit",))
                self.proc.join(2)
            except (OSError, BrokenPipeError):
                pass
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(2)
        self.proc = None


# ---------------------------------------------------------------------------------------------
# Statistics and tables
# ---------------------------------------------------------------------------------------------
def dist(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"n": 0, "mean": None, "p50": None, "p99": None, "max": None}
    a = np.asarray(xs, dtype=np.float64)
    return {"n": len(a), "mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    """Per-token mask times: element-wise median over repeats, pooled over the case's texts."""
    runs = res.get("runs") or []
    s: dict[str, Any] = {"status": res.get("status"), "error": res.get("error")}
    all_runs = [r for rep in runs for r in rep] + list(res.get("warm") or [])
    rej = next((r["reject"] for r in all_runs if r.get("reject")), None)
    if rej:
        s["status"] = "rejected"
        s["reject"] = rej
    eos_bad = sum(1 for r in all_runs if r.get("eos_ok") is False)
    if eos_bad and s["status"] == "ok":
        s["status"] = "eos_refused"
    s["eos_refused"] = eos_bad
    if runs and not rej:
        per_text = list(zip(*runs))  # text -> its runs over repeats
        mask = [float(np.median(col)) for rs in per_text for col in zip(*(r["mask_us"] for r in rs))]
        commit = [float(np.median(col)) for rs in per_text for col in zip(*(r["commit_us"] for r in rs))]
        s["mask_us"] = dist(mask)
        s["mask_us_all"] = [round(x, 2) for x in mask]
        s["commit_us"] = dist(commit)
        s["warm_mask_us"] = dist([x for r in res.get("warm") or [] for x in r["mask_us"]])
    if res.get("compile_ms"):
        s["compile_ms"] = float(np.median(res["compile_ms"]))
    if res.get("ttfm_ms"):
        s["ttfm_ms"] = float(np.median(res["ttfm_ms"]))
    for k in ("cache_cold", "cache_warm"):
        if res.get(k):
            s[k] = res[k]
    return s


_ENGINE_ORDER = {"lexguide": 0, "lexguide (gbnf->lark)": 1, "llguidance": 2, "xgrammar": 3}


def _f(x: float | None, nd: int = 1) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{nd}f}"


def _ratio(mine: float | None, peers: list[float | None]) -> str:
    """``mine`` over the best (smallest) peer value: < 1 means lexguide is faster."""
    vals = [p for p in peers if p]
    if mine is None or not vals:
        return "-"
    r = mine / min(vals)
    return f"{r:.3g}x"


def render(report: dict[str, Any]) -> str:
    lines = []
    for vname, v in report["vocabs"].items():
        lines.append(f"### {vname}: n_vocab={v['meta']['n_vocab']}")
        lines.append("")
        lines.append("| engine | version | tokenizer preprocessing ms (runs) |")
        lines.append("|---|---|---|")
        for e, info in v["engines"].items():
            if "preprocess_ms" in info:
                runs = ", ".join(_f(x) for x in info["preprocess_ms"])
                lines.append(f"| {e} | {info['version']} | {runs} |")
            else:
                lines.append(f"| {e} | - | unavailable: {info.get('error', '')[:80]} |")
        lines.append("")
        lines.append("| grammar | engine | tokens | status | compile ms | TTFM ms | mask us mean | p50 | p99 "
                     "| max | warm mean | commit us | hit rate cold/warm | mean / p99 / TTFM vs best peer |")
        lines.append("|" + "---|" * 14)
        for cname, c in v["cases"].items():
            for e, s in sorted(c["engines"].items(), key=lambda kv: _ENGINE_ORDER.get(kv[0], 9)):
                m = s.get("mask_us") or {}
                w = s.get("warm_mask_us") or {}
                hr = "-"
                if s.get("cache_cold"):
                    hr = f"{s['cache_cold']['hit_rate']:.0%}/{s.get('cache_warm', {}).get('hit_rate', 0):.0%}"
                ratio = "-"
                if not e.startswith("llguidance") and not e.startswith("xgrammar"):
                    peers = [c["engines"].get(p, {}) for p in PEERS]
                    peers = [p for p in peers if p.get("mask_us")]
                    ratio = " / ".join([
                        _ratio(m.get("mean"), [p["mask_us"]["mean"] for p in peers]),
                        _ratio(m.get("p99"), [p["mask_us"]["p99"] for p in peers]),
                        _ratio(s.get("ttfm_ms"), [p.get("ttfm_ms") for p in peers])])
                status = s["status"]
                if s.get("reject"):
                    status += f"@{s['reject']['index']}"
                lines.append(
                    f"| {cname} | {e} | {c['n_tokens']} | {status} | {_f(s.get('compile_ms'), 2)} | "
                    f"{_f(s.get('ttfm_ms'), 2)} | {_f(m.get('mean'))} | {_f(m.get('p50'))} | "
                    f"{_f(m.get('p99'))} | {_f(m.get('max'))} | {_f(w.get('mean'))} | "
                    f"{_f((s.get('commit_us') or {}).get('mean'))} | {hr} | {ratio} |")
        lines.append("")
        lines.extend(_render_pooled(v))
        lines.append("")
    lines.append("Ratios: lexguide value / best peer value for the same case (< 1: lexguide faster). "
                 "TTFM = compile + matcher + first mask, cold. warm = a second matcher on the same "
                 "compiled grammar. Hit rate = lexguide mask-cache hits per mask, cold/warm.")
    return "\n".join(lines)


def _render_pooled(v: dict[str, Any]) -> list[str]:
    """lexguide head to head with each peer, pooled over the cases both forced completely."""
    def pool(e: str, cases: list[dict[str, Any]]) -> tuple[dict[str, Any], float | None]:
        d = dist([x for c in cases for x in c["engines"][e].get("mask_us_all", [])])
        tt = [c["engines"][e]["ttfm_ms"] for c in cases if "ttfm_ms" in c["engines"][e]]
        return d, float(np.median(tt)) if tt else None

    def ok(c: dict[str, Any], e: str) -> bool:
        return c["engines"].get(e, {}).get("status") == "ok"

    out = [("Head to head, pooled over the cases both engines forced completely "
            "(values lexguide / peer, ratio < 1: lexguide faster):"), "",
           ("| lexguide vs | cases | masks | mean us | ratio | p99 us | ratio | max us | ratio "
            "| TTFM ms median | ratio |"), "|" + "---|" * 11]
    header = len(out)
    for peer in PEERS:
        both = [c for c in v["cases"].values() if ok(c, "lexguide") and ok(c, peer)]
        if not both:
            continue
        (mine, my_tt), (theirs, their_tt) = pool("lexguide", both), pool(peer, both)
        cells = [f"{_f(mine[k])} / {_f(theirs[k])} | {_ratio(mine[k], [theirs[k]])}"
                 for k in ("mean", "p99", "max")]
        out.append(f"| {peer} | {len(both)} | {mine['n']} | {' | '.join(cells)} | "
                   f"{_f(my_tt, 2)} / {_f(their_tt, 2)} | {_ratio(my_tt, [their_tt])} |")
    if len(out) == header:
        out = []  # no case that lexguide and a peer both completed
    mine_all = [c for c in v["cases"].values() if ok(c, "lexguide")]
    if mine_all:
        d, _ = pool("lexguide", mine_all)
        ttfm = max(c["engines"]["lexguide"].get("ttfm_ms", 0.0) for c in mine_all)
        pre = v["engines"].get("lexguide", {}).get("preprocess_ms") or [None]
        best_pre = min(x for x in pre if x) if pre[0] else None
        out += ["", (f"lexguide over its {len(mine_all)} completed cases: mean {_f(d['mean'])} us "
                     f"(goal <= 50), p99 {_f(d['p99'])} us (goal <= 1000), worst TTFM {_f(ttfm, 2)} ms "
                     f"(goal <= 2), tokenizer preprocessing {_f(best_pre)} ms, best run "
                     f"(goal <= 1000 for 262k).")]
    return out


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------
def run_vocab(vname: str, cases: list[Case], engines: list[str], args: argparse.Namespace,
              tmp: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    vocab = load_vocab(vname)
    print(f"[mask] vocab {vname}: {vocab.n_vocab} tokens, eos {vocab.eos_ids} "
          f"({time.perf_counter() - t0:.1f}s)", flush=True)
    jobs = []
    for c in cases:
        toks = []
        for s in c.samples:
            ids = vocab.encode(s)
            if vocab.decode_bytes(ids) != s.encode("utf-8"):
                raise SystemExit(f"{vname}: tokenizer round trip failed on a {c.name} sample")
            toks.append(ids)
        jobs.append((c, toks))
    vpath = os.path.join(tmp, f"{vname}.pkl")
    with open(vpath, "wb") as f:
        pickle.dump(vocab, f)
    workers: dict[str, Worker] = {}
    out: dict[str, Any] = {"meta": vocab.meta(), "engines": {}, "cases": {}}
    for e in engines:  # one at a time, so preprocessing timings do not overlap
        w = Worker(e, vpath, os.path.join(tmp, f"{vname}-{e}.log"), args.timeout,
                   1 if args.quick else 2)
        if w.start() and w.info is not None:
            out["engines"][e] = dict(w.info)
            print(f"[mask] {e} {w.info['version']}: preprocessing "
                  f"{', '.join(f'{x:.0f}' for x in w.info['preprocess_ms'])} ms", flush=True)
        else:
            out["engines"][e] = {"error": w.error}
            print(f"[mask] {e}: unavailable: {w.error}", flush=True)
        workers[e] = w
    runs: list[tuple[str, str]] = []
    for e in engines:
        runs.append((e, "native"))
        if e == "lexguide":
            runs.append(("lexguide", "gbnf_to_lark"))
    for ci, (c, toks) in enumerate(jobs):
        rec: dict[str, Any] = {"fmt": c.fmt, "n_tokens": sum(map(len, toks)), "n_texts": len(toks),
                               "engines": {}}
        k = ci % len(runs)
        for e, variant in runs[k:] + runs[:k]:
            if variant != "native" and c.fmt != "gbnf":
                continue
            text = c.text
            fmt = c.fmt
            if e == "xgrammar" and c.gbnf_twin is not None:
                fmt, text = "gbnf", c.gbnf_twin
            job = {"fmt": fmt, "text": text, "variant": variant, "tokens": toks, "repeats": args.repeats}
            label = e if variant == "native" else "lexguide (gbnf->lark)"
            rec["engines"][label] = summarize(workers[e].run(job))
        out["cases"][c.name] = rec
        brief = " ".join(f"{e}={s['status']}" for e, s in rec["engines"].items())
        print(f"[mask] {vname} {c.name} ({rec['n_tokens']} tok): {brief}", flush=True)
        for e, s in rec["engines"].items():
            if s["status"] not in ("ok", "n/a"):
                why = s.get("error") or s.get("reject")
                print(f"[mask]   {e}: {s['status']}: {str(why).splitlines()[0][:200]}", flush=True)
    for w in workers.values():
        w.kill()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shortest text per grammar, one repeat")
    ap.add_argument("--vocabs", default="smollm2,gemma3", help="smollm2,gemma3,llama3 or gguf:PATH")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--grammars", default="",
                    help="comma list of case names, e.g. json,gbnf:chess (default: all; with --quick "
                         "the Lark grammars and " + ", ".join(QUICK_GBNF) + ")")
    ap.add_argument("--repeats", type=int, default=None, help="cold compile+force repeats (default 3)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per (engine, case) job (default 60 with --quick, else 300)")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/mask.json, "
                                                "mask_budget.json with --budget)")
    ap.add_argument("--budget", action="store_true",
                    help="cost per token of compute_mask(remaining) against compute_mask(), "
                         "plain/loose/margin/tight budgets (default vocabs: smollm2 with --quick)")
    _corpora.add_argument(ap)
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    results = ROOT / "bench" / "results"
    if args.budget:
        from _budget import run_budget

        _corpora.require("jsonschemabench/maskbench", args.corpora)  # its schema cases
        vocabs = args.vocabs if "--vocabs" in (argv or sys.argv) else (
            "smollm2" if args.quick else "smollm2,gemma3")
        return run_budget([v for v in vocabs.split(",") if v], args.quick,
                          load_cases(True, set(filter(None, args.grammars.split(","))) or None,
                                     args.corpora),
                          _corpora.root(args.corpora), args.out or str(results / "mask_budget.json"), args.results)
    args.out = args.out or str(results / "mask.json")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.timeout is None:
        args.timeout = 60.0 if args.quick else 300.0
    engines = [e for e in args.engines.split(",") if e]
    for e in engines:
        if e not in ADAPTERS:
            ap.error(f"unknown engine {e!r}; choose from {', '.join(ADAPTERS)}")
    if _corpora.optional(LLG_DATA_REL, args.corpora) is None:
        print(f"[mask] no external corpora ({_corpora.ENV} / --corpora): llguidance's rfc and "
              f"blog cases left out", flush=True)
    cases = load_cases(args.quick, set(filter(None, args.grammars.split(","))) or None,
                       args.corpora)
    if not cases:
        ap.error("no grammar cases selected")
    report: dict[str, Any] = {"argv": sys.argv, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "quick": args.quick, "repeats": args.repeats, "nproc": os.cpu_count(),
                              "loadavg_start": os.getloadavg(), "vocabs": {}}
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="lexguide_bench_mask_") as tmp:
        for vname in filter(None, args.vocabs.split(",")):
            try:
                report["vocabs"][vname] = run_vocab(vname, cases, engines, args, tmp)
            except VocabError as e:
                print(f"[mask] vocab {vname} skipped: {e}", flush=True)
    report["loadavg_end"] = os.getloadavg()
    report["wall_s"] = time.time() - t_start
    report["table_md"] = render(report)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(report["table_md"])
    print(f"[mask] wrote {args.out} ({report['wall_s']:.0f}s)")
    _results.write(__file__, report["table_md"], quick=args.quick, results=args.results, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
