"""The ``lexguide`` command line.

Each subcommand is one ``_add_<name>_parser(subparsers)`` function that declares its arguments
and sets ``handler`` (a function ``(args) -> int``); adding a command is one such function plus
one entry in ``_COMMANDS``. Errors from lexguide are printed as one line and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lexguide.errors import LexguideError

__all__ = ["build_parser", "main"]

_ARRAY_HEAD = 8  # items shown of a long metadata array
_TEXT_WIDTH = 96  # characters shown of a long string in text output


# -- shared helpers -------------------------------------------------------------------------


def _add_model_argument(parser: argparse.ArgumentParser) -> None:
    """``-m/--model FILE``; the default is the default model (SmolLM2-135M-Instruct)."""
    parser.add_argument(
        "-m", "--model", metavar="FILE", type=Path, default=None,
        help="GGUF file (default: the installed SmolLM2-135M-Instruct)",
    )


def _model_path(args: argparse.Namespace) -> Path:
    """The model chosen on the command line, or the default model."""
    if getattr(args, "model", None) is not None:
        return args.model
    from lexguide.model_files import default_model_path

    return default_model_path()


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _plain(value: Any) -> Any:
    """A JSON-serialisable form of a metadata value (numpy arrays become lists)."""
    import numpy as np  # here, not at import: Ctrl-C during startup must meet main's handler

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


def _summarise(value: Any, is_float32: bool) -> Any:
    """Arrays longer than ``_ARRAY_HEAD`` become {length, head}; float32 values are shown by
    their shortest float32 repr (``1e-05``, not ``9.999999747378752e-06``)."""
    import numpy as np

    if isinstance(value, (list, np.ndarray)) and len(value) > _ARRAY_HEAD:
        return {"length": len(value), "head": _summarise(value[:_ARRAY_HEAD], is_float32)}
    if is_float32 and isinstance(value, (float, np.ndarray)):
        shortest = np.vectorize(lambda x: float(str(np.float32(x))), otypes=[float])
        return _plain(shortest(value)) if isinstance(value, np.ndarray) else float(shortest(value))
    return _plain(value)


# -- inspect --------------------------------------------------------------------------------


def _type_name(signature: Sequence[Any]) -> str:
    names = [t.name.lower() for t in signature]
    return names[-1] + "[]" * (len(names) - 1)


def _inspect_report(path: Path, with_tensors: bool) -> dict[str, Any]:
    from lexguide.gguf import GGUFValueType, open_gguf
    from lexguide.gguf.constants import LLAMA_FTYPE_NAMES

    with open_gguf(path) as f:
        counts: Counter[str] = Counter()
        params: Counter[str] = Counter()
        nbytes: Counter[str] = Counter()
        for t in f.tensors:
            name = t.ggml_type.name
            counts[name] += 1
            params[name] += t.n_elements
            nbytes[name] += t.nbytes
        file_type = f.metadata.get("general.file_type")
        report: dict[str, Any] = {
            "path": str(path),
            "file_size": f.file_size,
            "version": f.version,
            "alignment": f.alignment,
            "data_offset": f.data_offset,
            "architecture": f.architecture,
            "file_type": LLAMA_FTYPE_NAMES.get(file_type, file_type)
            if isinstance(file_type, int) else None,
            "metadata": {
                k: _summarise(v, f.metadata_types[k][-1] == GGUFValueType.FLOAT32)
                for k, v in f.metadata.items()
            },
            "metadata_types": {k: _type_name(sig) for k, sig in f.metadata_types.items()},
            "n_tensors": len(f.tensors),
            "n_parameters": sum(params.values()),
            "tensor_bytes": sum(nbytes.values()),
            "types": {
                name: {"tensors": counts[name], "parameters": params[name], "bytes": nbytes[name]}
                for name in sorted(counts, key=lambda n: -nbytes[n])
            },
        }
        if with_tensors:
            report["tensors"] = [
                {"name": t.name, "type": t.ggml_type.name, "shape": list(t.shape),
                 "bytes": t.nbytes, "offset": t.offset}
                for t in f.tensors
            ]
    return report


def _print_inspect_text(report: dict[str, Any]) -> None:
    out = sys.stdout.write
    out(f"{report['path']}  ({_human_bytes(report['file_size'])})\n")
    out(f"GGUF v{report['version']}  architecture={report['architecture']}  "
        f"file_type={report['file_type']}  alignment={report['alignment']}  "
        f"data_offset={report['data_offset']}\n\n")
    out(f"metadata ({len(report['metadata'])} keys)\n")
    key_width = max((len(k) for k in report["metadata"]), default=0)
    for key, value in report["metadata"].items():
        if isinstance(value, dict):
            shown = f"[{value['length']} items] {json.dumps(value['head'], ensure_ascii=False)} …"
        elif isinstance(value, str) and len(value) > _TEXT_WIDTH:
            shown = json.dumps(value[:_TEXT_WIDTH], ensure_ascii=False) + f"… ({len(value)} chars)"
        else:
            shown = json.dumps(value, ensure_ascii=False)
        out(f"  {key:<{key_width}}  {report['metadata_types'][key]:<9} {shown}\n")
    out(f"\ntensors: {report['n_tensors']}  parameters: {report['n_parameters']:,}  "
        f"data: {_human_bytes(report['tensor_bytes'])}\n")
    out(f"  {'type':<8} {'tensors':>7} {'parameters':>14} {'bytes':>14}\n")
    for name, row in report["types"].items():
        out(f"  {name:<8} {row['tensors']:>7} {row['parameters']:>14,} {row['bytes']:>14,}\n")
    if "tensors" in report:
        width = max((len(t["name"]) for t in report["tensors"]), default=4)
        out(f"\n  {'name':<{width}}  {'type':<7} {'shape':<18} {'bytes':>12}\n")
        for t in report["tensors"]:
            shape = "×".join(str(d) for d in t["shape"])
            out(f"  {t['name']:<{width}}  {t['type']:<7} {shape:<18} {t['bytes']:>12,}\n")


def _run_inspect(args: argparse.Namespace) -> int:
    path = args.file if args.file is not None else _model_path(args)
    report = _inspect_report(path, args.tensors)
    if args.json:
        json.dump(report, sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
    else:
        _print_inspect_text(report)
    return 0


def _add_inspect_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "inspect", help="show a GGUF file's header, metadata and tensors",
        description="Show version, metadata (long arrays summarised), tensor totals per type "
        "and the parameter count of a GGUF file.",
    )
    p.add_argument("file", nargs="?", type=Path, default=None, help="GGUF file (same as -m)")
    _add_model_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--tensors", action="store_true", help="also list every tensor")
    p.set_defaults(handler=_run_inspect)


# -- tokenize -------------------------------------------------------------------------------


def _run_tokenize(args: argparse.Namespace) -> int:
    from lexguide.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(_model_path(args))
    text = sys.stdin.read() if args.text == "-" else args.text
    ids = tok.encode(text, add_special=not args.no_special, parse_special=args.parse_special)
    rows = [
        {"id": i, "piece": tok.token_text(i), "special": i in tok.special_ids,
         "bytes": tok.token_bytes(i).decode("utf-8", errors="backslashreplace")}
        for i in ids
    ]
    if args.json:
        json.dump({"ids": ids, "tokens": rows}, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    print(" ".join(map(str, ids)))
    if not args.ids_only:
        for row in rows:
            shown = "(special)" if row["special"] else json.dumps(row["bytes"], ensure_ascii=False)
            print(f"{row['id']:>8}  {json.dumps(row['piece'], ensure_ascii=False):<24} {shown}")
        print(f"{len(ids)} tokens")
    return 0


def _add_tokenize_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tokenize", help="show the token ids and pieces of a text",
        description="Encode TEXT with the model's own tokenizer (read from the GGUF file) and "
        "print the ids, then one line per token: id, vocabulary piece, output bytes.",
    )
    p.add_argument("text", help="text to encode ('-' reads standard input)")
    _add_model_argument(p)
    p.add_argument("--no-special", action="store_true", help="do not add BOS/EOS")
    p.add_argument("--parse-special", action="store_true",
                   help="recognise control-token text such as <|im_start|>")
    p.add_argument("--ids-only", action="store_true", help="print only the ids")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_run_tokenize)


# -- entry point ----------------------------------------------------------------------------

def _add_run_parser(subparsers: argparse._SubParsersAction) -> None:
    from lexguide.runtime.run_command import add_run_parser

    add_run_parser(subparsers, _add_model_argument)


def _add_serve_parser(subparsers: argparse._SubParsersAction) -> None:
    from lexguide.server.command import add_serve_parser

    add_serve_parser(subparsers, _add_model_argument)


#: One registrar per subcommand; each adds its parser and sets ``handler``.
_COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_inspect_parser,
    _add_tokenize_parser,
    _add_run_parser,
    _add_serve_parser,
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (all subcommands registered)."""
    from lexguide import __version__

    parser = argparse.ArgumentParser(
        prog="lexguide",
        description="Local GGUF models with output constrained to a JSON Schema, grammar or regex.",
    )
    parser.add_argument("--version", action="version", version=f"lexguide {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _COMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status (0 ok, 1 error, 2 usage,
    3 incomplete constrained output of ``run``, 130 interrupted)."""
    command = "lexguide"
    try:  # Ctrl-C anywhere from here on (imports included): one line, the shell's status
        parser = build_parser()
        args = parser.parse_args(argv)
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return 2
        command = f"lexguide {args.command}"
        from lexguide.model_files import ModelNotInstalled

        try:
            return int(handler(args) or 0)
        except (LexguideError, ModelNotInstalled) as e:
            print(f"{command}: error: {e}", file=sys.stderr)
            return 1
        except BrokenPipeError:  # e.g. `lexguide inspect | head`
            return 0
    except KeyboardInterrupt:
        print(f"\n{command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
