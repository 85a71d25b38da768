"""Tokens per second of agent-shaped chats: constrained against the same requests unconstrained.

Two workloads on SmolLM2 with real chat templates (tests/data/chat_templates):

- **tools**: the Qwen3 template renders two tools; the constrained run forces the answer into
  Hermes tool calls (``tool_choice: required``, parallel calls; the server's structural tag);
- **reasoning**: the QwQ template (the output starts inside ``<think>``); the constrained run
  has a 32-token thinking budget and a JSON Schema for the answer.

Each request runs unconstrained (the same prompt, the model's own continuation) and
constrained, greedy, with the same ``max_tokens``; a row reports generation tokens per second
(tokens generated after the prompt / the time after the prompt; tokens the grammar forces
count, as they do for a user) and its overhead 1 - constrained / unconstrained, the time per
sampled token (forced tokens not counted) and its overhead, and the grammar's time per
sampled token and its share of the generation time. The runs alternate, ``--rounds`` of each, medians reported.
Both runs evaluate the same prompt first (prefill is not counted). The goal is an overhead of
at most 5 %.

    python bench/agents.py [--rounds 5] [--max-tokens 96]
    python bench/agents.py --quick        # one round, 24 tokens (a smoke test)

A table is printed; a full run writes it to ``bench/results/agents.md``; ``--out`` writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tests" / "data" / "chat_templates"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 20}},
        "required": ["timezone"], "additionalProperties": False}
ANSWER = {"type": "object", "properties": {"answer": {"type": "integer"},
                                           "explanation": {"type": "string"}},
          "required": ["answer", "explanation"], "additionalProperties": False}


def _tools_workload(model: Any) -> tuple[list[int], dict[str, Any]]:
    """Prompt ids and the constrained generate() keywords of the tool-calling chat."""
    from lexguide import Grammar
    from lexguide.server.protocol import ToolSpec
    from lexguide.server.tool_formats import FORMATS, tool_format_spec

    template = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    tools = [("get_weather", "Weather in a city", WEATHER), ("get_time", "Time in a zone", TIME)]
    listed = [{"type": "function", "function": {"name": n, "description": d, "parameters": p}}
              for n, d, p in tools]
    messages = [{"role": "user", "content": "What is the weather in Paris and the time in "
                                            "Tokyo? Use the tools."}]
    text = model.render_chat(messages, chat_template=template, tools=listed,
                             enable_thinking=False)
    specs = [ToolSpec(n, d, json.dumps(p)) for n, d, p in tools]
    grammar = Grammar.from_structural_tag(tool_format_spec(FORMATS["hermes"], specs,
                                                           "required", True))
    return model.encode_chat(text), {"grammar": grammar}


def _reasoning_workload(model: Any) -> tuple[list[int], dict[str, Any]]:
    """Prompt ids and the constrained generate() keywords of the reasoning + schema chat."""
    template = (TEMPLATES / "Qwen-QwQ-32B.jinja").read_text()
    messages = [{"role": "user", "content": "What is 17 + 25? Think step by step, then "
                                            "answer in JSON."}]
    text = model.render_chat(messages, chat_template=template)
    return model.encode_chat(text), {"json_schema": ANSWER, "reasoning_budget": 32,
                                     "think_markers": ("<think>", "</think>")}


WORKLOADS = {"tools": _tools_workload, "reasoning": _reasoning_workload}


def _run(model: Any, ids: list[int], max_tokens: int, extra: dict[str, Any]) -> dict[str, float]:
    model.reset()  # both runs evaluate the whole prompt: same starting point
    out = model.generate(ids, max_tokens=max_tokens, temperature=0, **extra)
    t = out.timings
    sampled = max(1, t.generated_tokens - t.forced_tokens)
    return {"tokens": t.generated_tokens, "forced": t.forced_tokens,
            "tok_s": t.generation_tok_s, "step_ms": 1e3 * t.generation_s / sampled,
            "mask_ms": t.mask_ms_per_token,
            "mask_share": t.mask_s / t.generation_s if t.generation_s else 0.0,
            "finish": out.finish_reason}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="GGUF (default: the installed SmolLM2)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each kind (default 5)")
    ap.add_argument("--max-tokens", type=int, default=96, help="tokens per answer (default 96)")
    ap.add_argument("--threads", type=int, default=2, help="model threads (default 2)")
    ap.add_argument("--quick", action="store_true", help="one round of 24 tokens (smoke test)")
    ap.add_argument("--out", default=None, help="results JSON (default: none)")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    rounds, max_tokens = (1, 24) if args.quick else (args.rounds, args.max_tokens)

    import lexguide

    model = lexguide.Model.from_gguf(args.model, n_threads=args.threads)
    report = _results.Report()
    report.print(f"{model}, {args.threads} threads, {rounds} rounds, max_tokens {max_tokens}, "
                 "greedy; medians")
    report.print("")
    report.print("| workload | run | tokens | forced | tok/s | overhead | ms/sampled token "
                 "| overhead | grammar ms/token | grammar share |")
    report.print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    data: dict[str, Any] = {}
    for name, build in WORKLOADS.items():
        ids, extra = build(model)
        runs: dict[str, list[dict[str, float]]] = {"plain": [], "constrained": []}
        _run(model, ids, 4, extra)  # compile and warm the grammar's first masks
        for _ in range(rounds):
            runs["plain"].append(_run(model, ids, max_tokens, {}))
            runs["constrained"].append(_run(model, ids, max_tokens, extra))
        med = {kind: {key: statistics.median(r[key] for r in rs)
                      for key in ("tokens", "forced", "tok_s", "step_ms", "mask_ms",
                                  "mask_share")}
               for kind, rs in runs.items()}
        overhead = 1 - med["constrained"]["tok_s"] / med["plain"]["tok_s"]
        step_overhead = med["constrained"]["step_ms"] / med["plain"]["step_ms"] - 1
        for kind in ("plain", "constrained"):
            m = med[kind]
            c = kind == "constrained"
            report.print(f"| {name} | {kind} | {m['tokens']:.0f} | {m['forced']:.0f} | "
                         f"{m['tok_s']:.1f} | " + (f"{100 * overhead:+.1f} %" if c else "")
                         + f" | {m['step_ms']:.1f} | "
                         + (f"{100 * step_overhead:+.1f} %" if c else "")
                         + f" | {m['mask_ms']:.3f} | {100 * m['mask_share']:.1f} % |")
        data[name] = {"runs": runs, "median": med, "overhead": overhead,
                      "step_overhead": step_overhead}
    report.print("")
    report.print("tok/s overhead = 1 - constrained tok/s / plain tok/s (goal: at most 5 %). "
                 "Forced tokens (the grammar's only continuation: tags, keys, the end marker) "
                 "are appended without sampling and join the next forward, so they make the "
                 "constrained chat faster. ms/sampled token = generation time / tokens sampled "
                 "(forced ones not counted; their rows make those steps' forwards longer): its "
                 "overhead is constrained / plain - 1. Grammar ms/token (masks, consume and "
                 "forced tokens per sampled token) and its share of the generation time are "
                 "what the constraint itself costs.")
    if args.out:
        Path(args.out).write_text(json.dumps({"max_tokens": max_tokens, "rounds": rounds,
                                              "workloads": data}, indent=1))
    _results.write(__file__, report.text(), quick=args.quick, results=args.results, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
