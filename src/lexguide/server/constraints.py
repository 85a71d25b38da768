"""From a request's constraint to a compiled :class:`lexguide.Grammar`, and tool calls.

Tool calls
----------
The model is constrained to one tool-call format, Hermes style without newlines::

    <tool_call>{"name": "get_weather", "arguments": {...}}</tool_call>

``arguments`` is compiled from the function's ``parameters`` schema (``%json``), the name and
the keys are literals. The choice is part of the grammar (llguidance's Lark variant):

- ``tool_choice="required"``: ``start: call`` — one call of any listed function;
- a named function: ``start: call`` with that function only;
- ``"auto"``: ``start: text | call`` where ``text`` is any text that does not begin with
  ``<`` — so an answer is either plain text or exactly one call, decided by the grammar.

The tools are described to the model in a system message (:func:`tool_system_prompt`);
earlier assistant ``tool_calls`` in the conversation are rendered in the same format. One call
per answer: ``parallel_tool_calls`` is not supported.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from typing import Any

from lexguide.errors import LexguideError
from lexguide.server.protocol import Constraint, GenerationRequest, RequestError, ToolSpec

__all__ = ["GrammarCache", "GrammarCompiler", "parse_tool_call", "tool_grammar",
           "tool_system_prompt"]

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
GRAMMAR_CACHE_SIZE = 64  # compiled grammars kept (schema texts, grammar texts, patterns)
GRAMMAR_TIMEOUT_S = 10.0  # default deadline of a request's grammar compile (--grammar-timeout)
COMPILE_WORKERS = 1  # threads compiling grammars beside the decode loop


def tool_grammar(tools: Sequence[ToolSpec], choice: str) -> str:
    """The Lark-variant grammar of an answer under ``choice`` (``auto``, ``required`` or
    ``function:NAME``): see the module docstring."""
    if choice.startswith("function:"):
        tools = [t for t in tools if t.name == choice[len("function:"):]]
    lines = ["%llguidance {}"]
    if choice == "auto":
        lines += ["start: text | call", "text: TEXT", r"TEXT: /[^<][\s\S]*/"]
    else:
        lines.append("start: call")
    alts = " | ".join(f"f{i}" for i in range(len(tools)))
    lines.append(f"call: {json.dumps(CALL_OPEN)} ({alts}) {json.dumps(CALL_CLOSE)}")
    for i, t in enumerate(tools):
        head = json.dumps(f'{{"name": "{t.name}", "arguments": ')
        lines.append(f'f{i}: {head} a{i} "}}"')
        lines.append(f"a{i}: %json {t.parameters}")
    return "\n".join(lines) + "\n"


def tool_system_prompt(tools: Sequence[ToolSpec], choice: str) -> str:
    """The system text that lists the functions and the call format."""
    listed = json.dumps([{"name": t.name, "description": t.description,
                          "parameters": json.loads(t.parameters)} for t in tools],
                        ensure_ascii=False)
    must = ("You must call one of them." if choice != "auto"
            else "Call one only when it helps answer; otherwise answer in plain text.")
    return (f"You can call these functions:\n{listed}\n{must} To call a function, reply with "
            f'{CALL_OPEN}{{"name": "<function name>", "arguments": {{...}}}}{CALL_CLOSE} '
            "and nothing else.")


def render_tool_messages(req: GenerationRequest) -> list[dict[str, str]]:
    """Chat messages for the template: tools described in the system message, earlier calls
    written in the call format, tool results as ``tool`` turns."""
    messages: list[dict[str, str]] = []
    for m in req.messages or []:
        content = m["content"]
        for call in m.get("tool_calls", ()):
            args = call.get("arguments", "{}")
            if not isinstance(args, str):
                args = json.dumps(args, ensure_ascii=False)
            content += f'{CALL_OPEN}{{"name": {json.dumps(call.get("name", ""))}, "arguments": {args}}}{CALL_CLOSE}'
        messages.append({"role": m["role"], "content": content})
    if req.tools and req.tool_choice != "none":
        text = tool_system_prompt(req.tools, req.tool_choice)
        if messages and messages[0]["role"] == "system":
            messages[0] = {"role": "system", "content": messages[0]["content"] + "\n\n" + text}
        else:
            messages.insert(0, {"role": "system", "content": text})
    return messages


def parse_tool_call(text: str) -> list[dict[str, Any]] | None:
    """The ``tool_calls`` list of an answer in the call format, or None for plain text (or a
    call cut short by ``max_tokens``/a stop string)."""
    if not (text.startswith(CALL_OPEN) and text.endswith(CALL_CLOSE)):
        return None
    try:
        obj = json.loads(text[len(CALL_OPEN):-len(CALL_CLOSE)])
    except (ValueError, RecursionError):
        return None
    return [{
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": obj["name"],
                     "arguments": json.dumps(obj["arguments"], ensure_ascii=False)},
    }]


class GrammarCache:
    """Compiled grammars by (kind, source text), least recently used dropped past ``size``.

    Thread-safe. A grammar is compiled once however many requests use it, and the mask memo
    that lives in it serves all of them. Compile errors are not cached (they are cheap to
    reproduce and carry the request's own text).
    """

    def __init__(self, size: int = GRAMMAR_CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.compile_s = 0.0  # time spent compiling (misses), for /metrics

    def __len__(self) -> int:
        return len(self._items)

    @staticmethod
    def _key(constraint: Constraint, req: GenerationRequest) -> tuple[str, str]:
        if constraint.kind == "tools":
            return "grammar", tool_grammar(req.tools, req.tool_choice)
        return constraint.kind, constraint.source

    def cached(self, constraint: Constraint, req: GenerationRequest) -> Any:
        """The grammar of ``constraint`` if it is cached, else None (never compiles)."""
        key = self._key(constraint, req)
        with self._lock:
            g = self._items.get(key)
            if g is not None:
                self._items.move_to_end(key)
                self.hits += 1
            return g

    def get(self, constraint: Constraint, req: GenerationRequest) -> Any:
        """The grammar of ``constraint``; raises ``SchemaError``/``GrammarError`` (with their
        locations, and ``param``: the request field it came from) when it does not compile."""
        from lexguide import Grammar
        g = self.cached(constraint, req)
        if g is not None:
            return g
        if constraint.kind == "tools":
            # each parameter schema on its own first, so an error names its tool
            for i, t in enumerate(req.tools):
                self.get(Constraint("json_schema", t.parameters,
                                    f"tools[{i}].function.parameters"), req)
        key = kind, source = self._key(constraint, req)
        with self._lock:
            self.misses += 1
        t0 = time.perf_counter()
        try:
            if kind in ("json_schema", "json_object"):
                g = Grammar.from_json_schema(json.loads(source))
            elif kind == "regex":
                g = Grammar.from_regex(source)
            else:
                g = Grammar.parse(source)
        except LexguideError as e:
            e.param = constraint.param  # type: ignore[attr-defined]  # where, in the request
            raise
        with self._lock:
            self.compile_s += time.perf_counter() - t0
            self._items[key] = g
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return g


class GrammarCompiler:
    """Compiles requests' grammars on worker threads, off the decode loop, with a deadline.

    A cached grammar is returned at once. Otherwise the compile runs on one of
    ``COMPILE_WORKERS`` threads while the event loop and the scheduler go on; the engine's
    compile is mostly Python and holds the GIL, which it yields to the scheduler thread
    every ``sys.getswitchinterval()`` (5 ms), so decoding slows down meanwhile but does not
    stop. The worker also computes the grammar's first mask for the request's token budget
    (``max_tokens``, at most ``n_ctx``): when that budget is tight for the grammar, the
    budget-aware mask searches a shortest completion from every state the first tokens lead
    to — for a large schema that costs as much as the compile itself — and those searches
    are memoised in the grammar's mask engine, so the scheduler's first step of the request
    finds them done instead of stalling every stream. Past ``timeout`` seconds (the wait
    for a busy worker included) the request fails with 400 ``grammar_timeout``; a compile
    that has not started is dropped, one that has runs to its end (a thread cannot be
    interrupted) and its grammar is cached.
    """

    def __init__(self, grammars: GrammarCache, tokenizer_info: Any, n_ctx: int,
                 timeout: float = GRAMMAR_TIMEOUT_S) -> None:
        self.grammars = grammars
        self.info = tokenizer_info
        self.n_ctx = n_ctx
        self.timeout = timeout
        self.timeouts = 0
        self._pool = ThreadPoolExecutor(COMPILE_WORKERS, thread_name_prefix="lexguide-compile")

    def _compile(self, constraint: Constraint, req: GenerationRequest) -> Any:
        from lexguide.engine import Matcher

        grammar = self.grammars.get(constraint, req)
        budget = self.n_ctx if req.max_tokens is None else min(req.max_tokens, self.n_ctx)
        if budget > 0:  # max_tokens 0 samples nothing: no mask to prepare
            Matcher(grammar, self.info).compute_mask(budget)
        return grammar

    async def grammar(self, req: GenerationRequest) -> Any:
        """The compiled grammar of ``req`` (None without a constraint). Raises the compile's
        ``SchemaError``/``GrammarError``/``RegexError``, or :class:`RequestError` 400
        ``grammar_timeout``."""
        constraint = req.constraint
        if constraint is None:
            return None
        g = self.grammars.cached(constraint, req)
        if g is not None:
            return g
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self._pool, self._compile, constraint, req)
        try:
            return await asyncio.wait_for(work, self.timeout)
        except asyncio.TimeoutError:
            self.timeouts += 1
            raise RequestError(
                f"compiling it took longer than this server's limit of {self.timeout:g} s "
                "(lexguide serve --grammar-timeout)", param=constraint.param,
                code="grammar_timeout") from None

    def shutdown(self) -> None:
        """Drop queued compiles without waiting; a running one finishes on its own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
