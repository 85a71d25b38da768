"""``lexguide run``: generate from a GGUF model on the command line, llama-cli style.

Registered by ``lexguide.cli`` (this module only builds the sub-parser and its handler, so the
CLI module stays a list of registrars). Tokens stream to stdout; the timing summary goes to
stderr. A grammar failure stops with an error (exit status 1), never unconstrained output.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from lexguide.errors import ModelError, line_col
from lexguide.limits import MAX_JSON_DEPTH, json_text_too_deep

__all__ = ["add_run_parser", "run"]


#: Exit status when a constrained output is incomplete (the token limit or the context ran out).
EXIT_INCOMPLETE = 3
#: Exit status after Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


def _ranged(kind: type, lo: float | None = None, hi: float | None = None, *,
            lo_open: bool = False) -> Callable[[str], Any]:
    """An argparse ``type``: ``kind(text)`` within [lo, hi] (``lo_open``: lo excluded)."""
    left = "" if lo is None else f"{'>' if lo_open else '>='} {lo:g}"
    right = "" if hi is None else f"<= {hi:g}"
    both = " and " if left and right else ""
    want = f"{'an integer' if kind is int else 'a finite number'} {left}{both}{right}"

    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, not {text!r}") from None
        if value != value or value in (math.inf, -math.inf) \
                or (lo is not None and (value < lo or (lo_open and value == lo))) \
                or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {want}, not {text}")
        return value

    return convert


_indent = _ranged(int, 0, 16)


def _read(path: Path, what: str) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ModelError(f"cannot read {what} {str(path)!r}: {e.strerror or e}") from None


_CONSTRAINTS = ("json_schema", "json_schema_file", "grammar", "grammar_file", "regex",
                "structural_tag", "structural_tag_file")


def _json_arg(text: str, what: str) -> Any:
    """JSON text of a flag, parsed; errors name the line and column."""
    deep = json_text_too_deep(text)
    if deep is not None:  # json.loads would hit Python's recursion limit
        line, col = line_col(text, deep)
        raise ModelError(f"{what} text nested more than {MAX_JSON_DEPTH} levels deep "
                         f"at line {line}:{col}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelError(f"{what} is not valid JSON: line {e.lineno}:{e.colno}: {e.msg}") from None


def _constraint(args: argparse.Namespace) -> dict[str, Any]:
    """``generate`` keyword for the one constraint given, compiled (so a bad schema or grammar
    is reported before the model loads), or {}."""
    given = [n for n in _CONSTRAINTS if getattr(args, n) is not None]
    if len(given) > 1:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise ModelError(f"give at most one constraint; got {flags}")
    if args.lazy_trigger and not {"grammar", "grammar_file"} & set(given):
        raise ModelError("--lazy-trigger needs a grammar (--grammar/--grammar-file) that "
                         "applies from the trigger on")
    if not given:
        return {}
    from lexguide import Grammar
    if args.json_schema is not None or args.json_schema_file is not None:
        text = args.json_schema if args.json_schema is not None else _read(args.json_schema_file,
                                                                          "JSON Schema file")
        schema = _json_arg(text, "JSON Schema")
        return {"grammar": Grammar.from_json_schema(schema, **_schema_options(args)),
                "source": {"json_schema": schema}}
    if args.structural_tag is not None or args.structural_tag_file is not None:
        text = (args.structural_tag if args.structural_tag is not None
                else _read(args.structural_tag_file, "structural tag file"))
        spec = _json_arg(text, "structural tag")
        # the JSON layout flags apply to every json_schema inside the tag
        return {"grammar": Grammar.from_structural_tag(spec, **_schema_options(args)),
                "source": {"structural_tag": spec}}
    if _layout_flags(args):
        raise ModelError("only for JSON Schemas (-j/--json-schema-file, or inside "
                         "--structural-tag): " + ", ".join(_layout_flags(args)))
    if args.regex is not None:
        return {"grammar": Grammar.from_regex(args.regex), "source": None}
    text = args.grammar if args.grammar is not None else _read(args.grammar_file, "grammar file")
    if args.lazy_trigger:
        return {"grammar": Grammar.from_lazy(text, list(args.lazy_trigger)), "source": None}
    # "%llguidance" → Lark, "{" → grammar list, else GBNF
    return {"grammar": Grammar.parse(text), "source": {"grammar": text}}


def _layout_flags(args: argparse.Namespace) -> list[str]:
    return [flag for flag, given in (("--compact", args.compact),
                                     ("--indent", args.indent is not None),
                                     ("--whitespace-pattern", args.whitespace_pattern is not None),
                                     ("--lenient", args.lenient),
                                     ("--strict-formats", args.strict_formats)) if given]


def _schema_options(args: argparse.Namespace) -> dict[str, Any]:
    """``Grammar.from_json_schema`` options of the layout and strictness flags."""
    given = [f for f in _layout_flags(args) if f not in ("--lenient", "--strict-formats")]
    if len(given) > 1:
        raise ModelError(f"give at most one of --compact, --indent, --whitespace-pattern; got "
                         f"{', '.join(given)}")
    opts: dict[str, Any] = {"lenient": args.lenient, "strict_formats": args.strict_formats}
    if args.compact:
        opts["whitespace"] = "compact"
    elif args.indent is not None:
        opts["indent"] = args.indent
    elif args.whitespace_pattern is not None:
        opts["whitespace_pattern"] = args.whitespace_pattern
    return opts


def run(args: argparse.Namespace) -> int:
    """Handler of ``lexguide run``: load, generate (streaming to stdout), report timings."""
    from lexguide.runtime.generate import CompletionChunk, Model

    if args.prompt is not None and args.file is not None:
        raise ModelError("give either -p/--prompt or -f/--file, not both")
    from_stdin = [flag for flag, path in (("-f", args.file), ("--grammar-file", args.grammar_file),
                                          ("--json-schema-file", args.json_schema_file),
                                          ("--structural-tag-file", args.structural_tag_file))
                  if str(path) == "-"]
    if len(from_stdin) > 1:
        raise ModelError(f"only one input can be read from stdin; got '-' for {' and '.join(from_stdin)}")
    prompt = _read(args.file, "prompt file") if args.file is not None else (args.prompt or "")
    reasoning = args.reasoning_budget is not None or args.think_markers is not None
    if reasoning and (_layout_flags(args) or args.captures or args.lazy_trigger):
        raise ModelError("--reasoning-budget/--think-markers compose the schema, grammar or "
                         "structural tag with the think section; they do not take "
                         + ", ".join(_layout_flags(args) + ["--captures"] * args.captures
                                     + ["--lazy-trigger"] * bool(args.lazy_trigger))
                         + (" (a lazy grammar's free text would run through the section: "
                            "use --structural-tag with a triggered_tags format)"
                            if args.lazy_trigger else ""))
    template_kwargs = _template_kwargs(args)
    constraint = _constraint(args)
    if "grammar" in constraint and not args.quiet:
        for note in constraint["grammar"].notes:  # accepted but not enforced
            print(f"lexguide run: note: {note}", file=sys.stderr)
    if args.captures and (args.grammar is None and args.grammar_file is None):
        raise ModelError("--captures needs a grammar (--grammar/--grammar-file) with capture rules")
    model = Model.from_gguf(args.model, n_ctx=args.ctx_size, cache_type=args.cache_type,
                            n_threads=args.threads, decode_threads=args.decode_threads,
                            progress=False if args.quiet else True if args.verbose else None)
    if not args.quiet:
        model.prompt_progress = _prompt_bar
    if args.verbose:
        print(f"{model}  (loaded in {model.load_s:.2f} s)", file=sys.stderr)
    kwargs: dict[str, Any] = dict(
        max_tokens=args.n_predict, temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
        min_p=args.min_p, repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n,
        seed=args.seed, stop=args.stop or None, stream=True,
    )
    if constraint:
        kwargs["grammar"] = constraint["grammar"]
    if args.no_budget_mask:
        kwargs["complete_within_budget"] = False
    matcher = None
    if args.captures:  # keep the matcher to read its captures after the stream
        matcher = model._matcher(kwargs.pop("grammar"), None)
        kwargs["matcher"] = matcher
    split = None
    if reasoning:
        split = _reasoning_split(model, args, prompt, template_kwargs, constraint, kwargs)
    messages = [{"role": "user", "content": prompt}]
    if args.chat:
        stream = model.chat(messages, chat_template_kwargs=template_kwargs, **kwargs)
    else:
        stream = model.generate(prompt, parse_special=args.parse_special, **kwargs)
    out = sys.stdout
    last = None
    printed: list[str] = []
    try:
        for chunk in cast(Iterator[CompletionChunk], stream):
            if chunk.text or (split is not None and chunk.finish_reason is not None):
                printed.append(chunk.text)
                _write(out, chunk.text, split, chunk.finish_reason is not None, args)
            last = chunk
    finally:
        out.write("\n")
        out.flush()
    if last is not None and last.timings is not None and not args.quiet:
        print(f"\nfinish: {last.finish_reason}", file=sys.stderr)
        print(last.timings.summary(), file=sys.stderr)
    if matcher is not None:
        caps = [[name, value.decode("utf-8", "replace")] for name, value in matcher.captures()]
        print("captures: " + json.dumps(caps, ensure_ascii=False), file=sys.stderr)
    if constraint and last is not None:
        answer = "".join(split.content) if split is not None else "".join(printed)
        why = _incomplete(constraint["grammar"], answer, last.finish_reason, args)
        if why:
            print(f"lexguide run: error: the output is incomplete: {why}", file=sys.stderr)
            return EXIT_INCOMPLETE
    return 0


def _template_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``--chat-template-kwargs`` as a dict (variables for the chat template)."""
    if args.chat_template_kwargs is None:
        return {}
    if not args.chat:
        raise ModelError("--chat-template-kwargs needs --chat")
    try:
        value = json.loads(args.chat_template_kwargs)
    except json.JSONDecodeError as e:
        raise ModelError(f"--chat-template-kwargs is not valid JSON: {e.msg}") from None
    if not isinstance(value, dict):
        raise ModelError("--chat-template-kwargs must be a JSON object")
    return value


def _reasoning_split(model: Any, args: argparse.Namespace, prompt: str,
                     template_kwargs: dict[str, Any], constraint: dict[str, Any],
                     kwargs: dict[str, Any]) -> Any:
    """Set ``kwargs`` for a generation that thinks first (the constraint as text or schema,
    composed by ``generate``); returns the splitter of its output (None when the markers are
    unknown: ``generate`` then says so)."""
    from lexguide.runtime.reasoning import ReasoningStream, ThinkMarkers, find_think_markers
    from lexguide.runtime.reasoning import think_state

    kwargs["reasoning_budget"] = -1 if args.reasoning_budget is None else args.reasoning_budget
    if args.think_markers is not None:
        kwargs["think_markers"] = tuple(args.think_markers)
    if constraint:
        if constraint["source"] is None:  # a lazy grammar is refused earlier
            raise ModelError("--regex cannot follow a think section; write it as a --grammar")
        kwargs.pop("grammar")
        kwargs.update(constraint["source"])
    markers = (ThinkMarkers(*args.think_markers) if args.think_markers is not None
               else find_think_markers(model.chat_template))
    if markers is None:
        return None
    text = (model.render_chat([{"role": "user", "content": prompt}], **template_kwargs)
            if args.chat else prompt)
    return ReasoningStream(markers, think_state(text, markers))


def _write(out: Any, text: str, split: Any, final: bool, args: argparse.Namespace) -> None:
    """Print output text: with a reasoning splitter and --reasoning-format deepseek, the think
    text to stderr (not with -q), the answer to stdout."""
    if split is None or args.reasoning_format == "none":
        out.write(text)
        out.flush()
        if split is None:
            return
    for kind, piece in split.feed(text, final):
        if kind == "content":
            if args.reasoning_format != "none":
                out.write(piece)
                out.flush()
        elif args.reasoning_format != "none" and not args.quiet:
            sys.stderr.write(piece)
            sys.stderr.flush()


def _incomplete(grammar: Any, text: str, finish: str | None, args: argparse.Namespace) -> str:
    """Why the printed output is not a whole sentence of the grammar, or "" when it is."""
    if finish != "length" and grammar.validate(text):
        return ""
    if finish == "length":
        return (f"the token limit (-n {args.n_predict}) or the context was reached before the "
                "grammar could finish (raise -n / -c)")
    return ("a stop string (-r/--stop) ended it before the grammar could finish "
            "(the stop text is not printed)")


def _prompt_bar(done: int, total: int, elapsed: float) -> None:
    """Progress of prompt processing on stderr: shown once it has taken over a second, and
    only on a terminal (tqdm when installed, else one line of text)."""
    if elapsed < 1.0 or not sys.stderr.isatty():
        return
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]
    except ImportError:
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\rprompt: {done}/{total} tokens ({elapsed:.1f} s){end}")
        sys.stderr.flush()
        return
    bar = getattr(_prompt_bar, "bar", None)
    if bar is None or bar.total != total or bar.n > done:
        # shown from the first report over a second, with what is done and the time it took
        bar = _prompt_bar.bar = tqdm(total=total, initial=done, desc="prompt", unit="tok",
                                     file=sys.stderr, leave=False)  # type: ignore[attr-defined]
        bar.start_t -= elapsed
    bar.update(done - bar.n)
    bar.refresh()  # a report comes once per chunk of the prompt: show each
    if done >= total:
        bar.close()


def add_run_parser(subparsers: argparse._SubParsersAction,
                   add_model_argument: Callable[[argparse.ArgumentParser], None]) -> None:
    """Declare ``lexguide run`` and its llama-cli-style flags."""
    p = subparsers.add_parser(
        "run", help="generate text, optionally constrained by a JSON Schema or grammar",
        description="Generate a continuation of a prompt (or a chat reply with --chat) and "
        "stream it to stdout; with -j/--grammar/--regex/--structural-tag the output is "
        "guaranteed to match.",
        epilog="Exit status: 0 done; 1 error (bad schema/grammar/structural tag/flag value, "
        "missing model); "
        "2 usage; 3 a constrained output is incomplete (token limit or context reached "
        "first, or a stop string cut it); 130 interrupted (Ctrl-C).",
    )
    add_model_argument(p)
    p.add_argument("-p", "--prompt", help="prompt text")
    p.add_argument("-f", "--file", type=Path, help="read the prompt from a file ('-': stdin)")
    p.add_argument("-n", "--n-predict", type=_ranged(int, 1), default=256, metavar="N",
                   help="maximum number of tokens to generate (default 256)")
    p.add_argument("-j", "--json-schema", metavar="SCHEMA", help="JSON Schema (JSON text)")
    p.add_argument("--json-schema-file", type=Path, metavar="FILE",
                   help="JSON Schema file ('-': stdin)")
    p.add_argument("--grammar", metavar="TEXT",
                   help="grammar: GBNF, or the Lark variant when it starts with %%llguidance, "
                        "or an llguidance grammar list when it starts with {")
    p.add_argument("--grammar-file", type=Path, metavar="FILE", help="grammar file ('-': stdin)")
    p.add_argument("--regex", metavar="PATTERN",
                   help="regex the whole output must match (Rust regex syntax, anchored)")
    p.add_argument("--structural-tag", metavar="SPEC",
                   help="structural tag (JSON text): free text with tags inside, in xgrammar's "
                        'shapes {"type": "structural_tag", "format": {...}}, the legacy '
                        '{"structures": [...], "triggers": [...]} or a bare format '
                        "(docs/structural_tags.md)")
    p.add_argument("--structural-tag-file", type=Path, metavar="FILE",
                   help="structural tag file ('-': stdin)")
    p.add_argument("--lazy-trigger", action="append", metavar="WORD",
                   help="with --grammar/--grammar-file: a lazy grammar, llama.cpp style: free "
                        "text until WORD appears, then the grammar, which starts with WORD "
                        "(repeatable: any of the words)")
    layout = p.add_argument_group(
        "JSON layout (-j/--json-schema-file, and schemas inside --structural-tag; default: at "
        "most one space, or one newline and up to 24 spaces/tabs of indentation, between "
        "tokens)")
    layout.add_argument("--compact", action="store_true", help="no whitespace at all")
    layout.add_argument("--indent", type=_indent, metavar="N",
                        help="exactly json.dumps(indent=N) layout")
    layout.add_argument("--whitespace-pattern", metavar="REGEX",
                        help="whitespace allowed between tokens, matched at most once per place "
                             "(e.g. '[ \\n]{0,2}'; '[ \\t\\n\\r]*' is the spec's any whitespace)")
    p.add_argument("--no-budget-mask", action="store_true",
                   help="when -n gets tight, do not narrow the mask to tokens after which the "
                        "output can still complete in time (narrowing is on by default)")
    p.add_argument("--lenient", action="store_true",
                   help="JSON Schema: ignore keywords that cannot be enforced (e.g. uniqueItems "
                        "over strings) instead of failing; each is printed as a note")
    p.add_argument("--strict-formats", action="store_true",
                   help="JSON Schema: an unknown format is an error (default: an annotation, "
                        "any string, printed as a note)")
    p.add_argument("--temp", type=_ranged(float, 0), default=0.8,
                   help="temperature >= 0; 0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=_ranged(int, 0), default=40, help="top-k, 0 = off (default 40)")
    p.add_argument("--top-p", type=_ranged(float, 0, 1, lo_open=True), default=0.95,
                   help="top-p in (0, 1], 1 = off (default 0.95)")
    p.add_argument("--min-p", type=_ranged(float, 0, 1), default=0.05,
                   help="min-p in [0, 1], 0 = off (default 0.05)")
    p.add_argument("--repeat-penalty", type=_ranged(float, 0, lo_open=True), default=1.0,
                   help="repetition penalty > 0, 1 = off (default 1.0)")
    p.add_argument("--repeat-last-n", type=_ranged(int, -1), default=64,
                   help="tokens the penalties look at (default 64, -1 = all)")
    p.add_argument("-s", "--seed", type=_ranged(int, 0), default=None,
                   help="random seed >= 0 (default: random)")
    p.add_argument("-r", "--stop", action="append", metavar="TEXT",
                   help="stop when TEXT is generated (repeatable)")
    p.add_argument("--chat", action="store_true",
                   help="treat the prompt as a user message and apply the chat template")
    think = p.add_argument_group("reasoning (docs/reasoning_and_tools.md)")
    think.add_argument("--reasoning-budget", type=_ranged(int, -1), default=None, metavar="N",
                       help="think first, at most N tokens (-1: unlimited), then the forced end "
                            "marker; the schema/grammar applies after the think section")
    think.add_argument("--reasoning-format", choices=("deepseek", "none"), default="deepseek",
                       help="deepseek: think text to stderr, the answer to stdout; none: all "
                            "to stdout (default deepseek)")
    think.add_argument("--think-markers", nargs=2, metavar=("BEGIN", "END"),
                       help="the think section's markers (default: read off the chat "
                            "template, e.g. <think> </think>)")
    think.add_argument("--chat-template-kwargs", metavar="JSON",
                       help='variables for the chat template, e.g. \'{"enable_thinking": false}\'')
    p.add_argument("--parse-special", action="store_true",
                   help="recognise control-token text such as <|im_start|> in the prompt")
    p.add_argument("-c", "--ctx-size", type=_ranged(int, 1), default=None,
                   help="context size (default: min(training context, 4096))")
    p.add_argument("--cache-type", choices=("f16", "f32", "q8_0"), default="f16",
                   help="KV cache element type: f16 (default, as llama.cpp's), f32 (twice the "
                   "memory), q8_0 (about half of f16's; head size a multiple of 32)")
    p.add_argument("-t", "--threads", type=_ranged(int, 1), default=None,
                   help="threads for prompt evaluation (default: available cores)")
    p.add_argument("--decode-threads", type=_ranged(int, 1), default=None,
                   help="threads for decode steps (default: as -t)")
    p.add_argument("--captures", action="store_true",
                   help="after the output, print the grammar's capture rules' values as JSON "
                        "[[name, value], ...] to stderr")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="model summary, and the loading bar even when stderr is not a terminal")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bars, notes or timing summary on stderr (errors only)")
    p.set_defaults(handler=run)
