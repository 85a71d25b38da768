"""From a request's constraint to a compiled :class:`lexguide.Grammar`; chat planning.

:func:`plan_chat` renders a chat request's prompt and settles its output's shape: the tool
calls in the format the chat template implies (``tool_formats.py``), a think section first when
the template has think markers (``lexguide.runtime.reasoning``), the request's own constraint
after it. Templates that do not render tools get them described in a system message
(:func:`tool_system_prompt`) and the generic call format, Hermes style without newlines::

    <tool_call>{"name": "get_weather", "arguments": {...}}</tool_call>

Earlier assistant ``tool_calls`` are then written in that format too.
:class:`GrammarCache` compiles and keeps the grammars; :class:`GrammarCompiler` runs the
compiles off the decode loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from typing import Any

from lexguide.errors import LexguideError
from lexguide.server.protocol import Constraint, GenerationRequest, RequestError, ToolSpec

__all__ = ["GrammarCache", "GrammarCompiler", "plan_chat", "render_tool_messages",
           "tool_system_prompt"]

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
GRAMMAR_CACHE_SIZE = 64  # compiled grammars kept (schema texts, grammar texts, patterns)
GRAMMAR_TIMEOUT_S = 10.0  # default deadline of a request's grammar compile (--grammar-timeout)
COMPILE_WORKERS = 1  # threads compiling grammars beside the decode loop


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


def plan_chat(model: Any, req: GenerationRequest,
              think_markers: tuple[str, str] | None = None) -> None:
    """Render a chat request's prompt and settle what its output looks like (mutates ``req``;
    pure otherwise, so it may run off the scheduler thread).

    The template gets the tools when it renders them (``tool_formats.detect_tool_format``),
    else lexguide describes them in a system message (the generic format). A template with
    think markers (``find_think_markers``) makes the output think first unless the rendered
    prompt already closed the section; then the constraint — the request's own or the tool
    calls — is composed after the think section as one structural tag, which a thinking
    budget also needs (its end marker must be something the grammar can be made to take).
    ``think_markers`` (begin, end) replace the template's.
    """
    from lexguide.runtime.reasoning import (
        ThinkMarkers,
        answer_format,
        check_budget,
        find_think_markers,
        reasoning_format,
        think_state,
    )
    from lexguide.server.tool_formats import detect_tool_format, native_messages, tool_format_spec

    fmt = detect_tool_format(getattr(model, "chat_template", None))
    tools_on = bool(req.tools) and req.tool_choice != "none"
    variables = dict(req.template_kwargs)
    if fmt.native:
        messages = native_messages(req.messages or [])
        if tools_on:
            variables["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description,
                "parameters": json.loads(t.parameters)}} for t in req.tools]
    else:
        messages = render_tool_messages(req)
    req.chat_text = model.render_chat(messages, **variables)
    answer = None
    if tools_on:
        req.tool_format = fmt
        answer = tool_format_spec(fmt, req.tools, req.tool_choice, req.parallel_tool_calls)
    elif req.constraint is not None:
        c = req.constraint
        if c.kind == "lazy":
            answer = None  # composed below only if there is a think section: it cannot be
        else:
            try:
                answer = answer_format(
                    json_schema=c.source if c.kind in ("json_schema", "json_object") else None,
                    grammar=c.source if c.kind == "grammar" else None,
                    regex=c.source if c.kind == "regex" else None,
                    structural_tag=c.source if c.kind == "structural_tag" else None)
            except LexguideError as e:  # a malformed structural-tag envelope
                e.param = c.param  # type: ignore[attr-defined]
                raise
    try:
        budget = check_budget(req.reasoning_budget)
    except LexguideError as e:
        raise RequestError(str(e), param="reasoning_budget", code="invalid_value") from None
    markers = (ThinkMarkers(*think_markers) if think_markers is not None
               else find_think_markers(getattr(model, "chat_template", None)))
    state = think_state(req.chat_text, markers) if markers is not None else "closed"
    if markers is None and budget is not None:
        raise RequestError("the model's chat template names no think markers (such as "
                           "<think>...</think>), so there is no thinking to budget",
                           param="reasoning_budget", code="unsupported_parameter")
    if state != "closed" and req.constraint is not None and req.constraint.kind == "lazy":
        raise RequestError(
            "a lazy grammar cannot follow the think section this chat template opens (its "
            "free text would run through the section); send the tool call as a structural_tag "
            "response_format (a triggered_tags format), or turn thinking off with "
            'chat_template_kwargs {"enable_thinking": false}', param="grammar_lazy",
            code="unsupported_parameter")
    if state != "closed":
        req.think = (markers, state)
        if answer is not None or budget is not None:
            answer = reasoning_format(markers, state, answer or answer_format(), budget)
    if answer is not None and (tools_on or req.think is not None):
        req.base_constraint = req.constraint if req.constraint and not tools_on else None
        req.constraint = Constraint("structural_tag", json.dumps(answer, ensure_ascii=False),
                                    "tools" if tools_on else (req.constraint.param
                                                              if req.constraint else
                                                              "reasoning_budget"))


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
        if constraint.kind == "tools":  # not planned by plan_chat: the generic format
            from lexguide.server.tool_formats import FORMATS, tool_format_spec

            spec = tool_format_spec(FORMATS["generic"], req.tools, req.tool_choice,
                                    req.parallel_tool_calls)
            return "structural_tag", json.dumps(spec, ensure_ascii=False)
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
        if constraint.kind == "lazy":  # the grammar on its own first: its errors name it
            self.get(Constraint("grammar", json.loads(constraint.source)["grammar"], "grammar"),
                     req)
        if constraint.kind in ("tools", "structural_tag"):
            # each parameter schema on its own first, so an error names its tool
            for i, t in enumerate(req.tools if req.tool_choice != "none" else ()):
                self.get(Constraint("json_schema", t.parameters,
                                    f"tools[{i}].function.parameters"), req)
            base = req.base_constraint
            if base is not None and base is not constraint:  # and the request's own one
                self.get(base, req)
        key = kind, source = self._key(constraint, req)
        with self._lock:
            self.misses += 1
        t0 = time.perf_counter()
        try:
            if kind in ("json_schema", "json_object"):
                g = Grammar.from_json_schema(json.loads(source))
            elif kind == "regex":
                g = Grammar.from_regex(source)
            elif kind == "structural_tag":
                g = Grammar.from_structural_tag(json.loads(source))
            elif kind == "lazy":
                lazy = json.loads(source)
                g = Grammar.from_lazy(lazy["grammar"], lazy["triggers"])
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
