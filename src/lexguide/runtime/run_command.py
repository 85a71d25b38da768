"""``lexguide run``: generate from a GGUF model on the command line, llama-cli style.

Registered by ``lexguide.cli`` (this module only builds the sub-parser and its handler, so the
CLI module stays a list of registrars). Tokens stream to stdout; the timing summary goes to
stderr. A grammar failure stops with an error (exit status 1), never unconstrained output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from lexguide.errors import ModelError

__all__ = ["add_run_parser", "run"]


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ModelError(f"cannot read {what} {str(path)!r}: {e.strerror or e}") from None


def _constraint(args: argparse.Namespace) -> dict[str, Any]:
    """``generate`` keyword for the one constraint given (JSON Schema or grammar), or {}."""
    given = [n for n in ("json_schema", "json_schema_file", "grammar", "grammar_file")
             if getattr(args, n) is not None]
    if len(given) > 1:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise ModelError(f"give at most one constraint; got {flags}")
    if not given:
        return {}
    if args.json_schema is not None or args.json_schema_file is not None:
        text = args.json_schema if args.json_schema is not None else _read(args.json_schema_file,
                                                                          "JSON Schema file")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as e:
            raise ModelError(f"JSON Schema is not valid JSON: line {e.lineno}:{e.colno}: {e.msg}") from None
        return {"json_schema": schema}
    from lexguide.grammar import Grammar

    text = args.grammar if args.grammar is not None else _read(args.grammar_file, "grammar file")
    return {"grammar": Grammar.parse(text)}  # "%llguidance" → Lark, "{" → grammar list, else GBNF


def run(args: argparse.Namespace) -> int:
    """Handler of ``lexguide run``: load, generate (streaming to stdout), report timings."""
    from lexguide.runtime.generate import CompletionChunk, Model

    if args.prompt is not None and args.file is not None:
        raise ModelError("give either -p/--prompt or -f/--file, not both")
    prompt = _read(args.file, "prompt file") if args.file is not None else (args.prompt or "")
    constraint = _constraint(args)
    if args.captures and "grammar" not in constraint:
        raise ModelError("--captures needs a grammar (--grammar/--grammar-file) with capture rules")
    model = Model.from_gguf(args.model, n_ctx=args.ctx_size,
                            n_threads=args.threads, decode_threads=args.decode_threads,
                            progress=True if args.verbose else None)
    if args.verbose:
        print(f"{model}  (loaded in {model.load_s:.2f} s)", file=sys.stderr)
    kwargs: dict[str, Any] = dict(
        max_tokens=args.n_predict, temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
        min_p=args.min_p, repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n,
        seed=args.seed, stop=args.stop or None, stream=True, **constraint,
    )
    matcher = None
    if args.captures:  # keep the matcher to read its captures after the stream
        matcher = model._matcher(kwargs.pop("grammar"), None)
        kwargs["matcher"] = matcher
    if args.chat:
        stream = model.chat([{"role": "user", "content": prompt}], **kwargs)
    else:
        stream = model.generate(prompt, parse_special=args.parse_special, **kwargs)
    out = sys.stdout
    last = None
    try:
        for chunk in cast(Iterator[CompletionChunk], stream):
            if chunk.text:
                out.write(chunk.text)
                out.flush()
            last = chunk
    finally:
        out.write("\n")
        out.flush()
    if last is not None and last.timings is not None:
        print(f"\nfinish: {last.finish_reason}", file=sys.stderr)
        print(last.timings.summary(), file=sys.stderr)
    if matcher is not None:
        caps = [[name, value.decode("utf-8", "replace")] for name, value in matcher.captures()]
        print("captures: " + json.dumps(caps, ensure_ascii=False), file=sys.stderr)
    return 0


def add_run_parser(subparsers: argparse._SubParsersAction,
                   add_model_argument: Callable[[argparse.ArgumentParser], None]) -> None:
    """Declare ``lexguide run`` and its llama-cli-style flags."""
    p = subparsers.add_parser(
        "run", help="generate text, optionally constrained by a JSON Schema or grammar",
        description="Generate a continuation of a prompt (or a chat reply with --chat) and "
        "stream it to stdout; with -j/--grammar the output is guaranteed to match.",
    )
    add_model_argument(p)
    p.add_argument("-p", "--prompt", help="prompt text")
    p.add_argument("-f", "--file", type=Path, help="read the prompt from a file")
    p.add_argument("-n", "--n-predict", type=int, default=256, metavar="N",
                   help="maximum number of tokens to generate (default 256)")
    p.add_argument("-j", "--json-schema", metavar="SCHEMA", help="JSON Schema (JSON text)")
    p.add_argument("--json-schema-file", type=Path, metavar="FILE", help="JSON Schema file")
    p.add_argument("--grammar", metavar="TEXT",
                   help="grammar: GBNF, or the Lark variant when it starts with %%llguidance, "
                        "or an llguidance grammar list when it starts with {")
    p.add_argument("--grammar-file", type=Path, metavar="FILE", help="grammar file")
    p.add_argument("--temp", type=float, default=0.8, help="temperature; 0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=40, help="top-k, 0 = off (default 40)")
    p.add_argument("--top-p", type=float, default=0.95, help="top-p, 1 = off (default 0.95)")
    p.add_argument("--min-p", type=float, default=0.05, help="min-p, 0 = off (default 0.05)")
    p.add_argument("--repeat-penalty", type=float, default=1.0,
                   help="repetition penalty, 1 = off (default 1.0)")
    p.add_argument("--repeat-last-n", type=int, default=64,
                   help="tokens the penalties look at (default 64, -1 = all)")
    p.add_argument("-s", "--seed", type=int, default=None, help="random seed (default: random)")
    p.add_argument("-r", "--stop", action="append", metavar="TEXT",
                   help="stop when TEXT is generated (repeatable)")
    p.add_argument("--chat", action="store_true",
                   help="treat the prompt as a user message and apply the chat template")
    p.add_argument("--parse-special", action="store_true",
                   help="recognise control-token text such as <|im_start|> in the prompt")
    p.add_argument("-c", "--ctx-size", type=int, default=None,
                   help="context size (default: min(training context, 4096))")
    p.add_argument("-t", "--threads", type=int, default=None,
                   help="threads for prompt evaluation (default: available cores)")
    p.add_argument("--decode-threads", type=int, default=None,
                   help="threads for decode steps (default: as -t)")
    p.add_argument("--captures", action="store_true",
                   help="after the output, print the grammar's capture rules' values as JSON "
                        "[[name, value], ...] to stderr")
    p.add_argument("-v", "--verbose", action="store_true", help="progress bar and model summary")
    p.set_defaults(handler=run)
