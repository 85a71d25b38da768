"""``lexguide serve``: the sub-parser and its handler.

Registered by ``lexguide.cli``. Builds the parser without importing FastAPI, so ``lexguide
--help`` works without the ``server`` extra; the handler imports it and says which extra to
install when it is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping

__all__ = ["add_serve_parser"]

API_KEY_ENV = "LEXGUIDE_API_KEY"


def api_key(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The key clients must send: ``--api-key``, else a non-empty ``LEXGUIDE_API_KEY``, else
    None (no authentication). Raises ``ValueError`` for an empty ``--api-key``."""
    if args.api_key is not None:
        if not args.api_key:
            raise ValueError("--api-key must not be empty")
        return str(args.api_key)
    return environ.get(API_KEY_ENV) or None


def _run_serve(args: argparse.Namespace) -> int:
    try:
        from lexguide.server.app import serve
    except ImportError as e:
        print(f"lexguide serve: error: {e}", file=sys.stderr)
        return 1
    if args.parallel < 1 or args.ctx < 16 or (args.threads is not None and args.threads < 1):
        print("lexguide serve: error: --parallel and --threads must be >= 1, --ctx >= 16", file=sys.stderr)
        return 2
    if not args.grammar_timeout > 0 or args.grammar_timeout == float("inf"):
        print("lexguide serve: error: --grammar-timeout must be a positive number of seconds",
              file=sys.stderr)
        return 2
    try:
        key = api_key(args, os.environ)
    except ValueError as e:
        print(f"lexguide serve: error: {e}", file=sys.stderr)
        return 2
    try:
        serve(args.model, host=args.host, port=args.port, parallel=args.parallel, n_ctx=args.ctx,
              cache_type=args.cache_type,
              n_threads=args.threads, max_body=args.max_body_bytes, api_key=key,
              grammar_timeout=args.grammar_timeout,
              think_markers=tuple(args.think_markers) if args.think_markers else None)
    except KeyboardInterrupt:
        pass
    return 0


def add_serve_parser(subparsers: argparse._SubParsersAction,
                     add_model_argument: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``serve`` (``add_model_argument`` adds the shared ``-m/--model``)."""
    p = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve a GGUF model at /v1/chat/completions and /v1/completions (OpenAI "
        "shapes, streaming, JSON Schema / grammar / regex constrained outputs, tool calls in "
        "the model's own format, reasoning, log probabilities), "
        "with /v1/models, /health, /metrics and a playground page at /. See docs/server.md.",
    )
    add_model_argument(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default: 8080)")
    p.add_argument("--parallel", type=int, default=4, metavar="N",
                   help="sequences active at once, each with its own KV cache; more wait in a queue "
                   "(default: 4)")
    p.add_argument("--ctx", type=int, default=4096, metavar="N",
                   help="context size of each slot, prompt plus completion (default: 4096)")
    p.add_argument("--cache-type", choices=("f16", "f32", "q8_0"), default="f16",
                   help="KV cache element type of every slot: f16 (default, as llama.cpp's), "
                   "f32 (twice the memory), q8_0 (about half of f16's)")
    p.add_argument("-t", "--threads", type=int, default=None, metavar="N",
                   help="threads for the model's kernels (default: available cores)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, metavar="N",
                   help="largest request body accepted (default: 1048576)")
    from lexguide.server.constraints import GRAMMAR_TIMEOUT_S  # no FastAPI import

    p.add_argument("--grammar-timeout", type=float, default=GRAMMAR_TIMEOUT_S, metavar="SECONDS",
                   help="longest a request's schema, grammar or regex may take to compile "
                   "(compiles run beside decoding, one at a time; the wait counts); past it the "
                   f"request gets HTTP 400 grammar_timeout (default: {GRAMMAR_TIMEOUT_S:g})")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require the header 'Authorization: Bearer KEY' on every path but / and "
                   f"/health (401 otherwise); default: ${API_KEY_ENV} if set, else no key. The "
                   "environment variable keeps the key out of the process list")
    p.add_argument("--think-markers", nargs=2, metavar=("BEGIN", "END"),
                   help="the think section's markers of a reasoning model (default: read off "
                   "the chat template, e.g. <think> </think>); see docs/reasoning_and_tools.md")
    p.set_defaults(handler=_run_serve)
