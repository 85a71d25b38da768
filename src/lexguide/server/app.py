"""The FastAPI application: routes, server-sent events, metrics, and ``serve``.

The web side is asyncio; the model lives on the scheduler thread (``scheduler.py``). A request
handler checks the body (``protocol.py``), has its grammar compiled on the compile worker
(``constraints.GrammarCompiler``), submits a :class:`Job` whose events the scheduler
posts into an asyncio queue with ``loop.call_soon_threadsafe``, and answers from that queue —
as one JSON object or as SSE chunks ending in ``data: [DONE]``. Whatever ends the handler
(finish, error, the client going away) marks the job cancelled, so its slots are freed at
the next step. With an API key, :class:`_RequireKey` answers 401 before any of this.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any

from lexguide.errors import LexguideError
from lexguide.runtime.reasoning import ReasoningStream
from lexguide.server.constraints import GRAMMAR_TIMEOUT_S, GrammarCompiler, plan_chat
from lexguide.server.tool_formats import ToolCallStream
from lexguide.server.logprobs import CompletionOffsets, TokenLogprob, chat_logprobs
from lexguide.server.protocol import (
    ChoiceResult,
    GenerationRequest,
    RequestError,
    chat_message,
    chunk_object,
    completion_object,
    error_body,
    error_from_exception,
    new_id,
    parse_chat_request,
    parse_completion_request,
    usage,
)
from lexguide.server.scheduler import Job, Scheduler

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import (
        HTMLResponse,
        JSONResponse,
        PlainTextResponse,
        Response,
        StreamingResponse,
    )
    from starlette.exceptions import HTTPException
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "lexguide serve needs FastAPI and uvicorn: pip install 'lexguide[server]'"
    ) from e

__all__ = ["create_app", "serve"]

log = logging.getLogger("lexguide.server")

MAX_BODY_BYTES = 1 << 20  # request bodies above this are refused with HTTP 413
_POLL_S = 0.25  # how often a non-streamed request checks that its client is still there
_PATHS = ("/", "/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions")


class _CountRequests:
    """ASGI middleware: counts responses by path and status for ``/metrics``."""

    def __init__(self, app: Any, counts: Counter[tuple[str, int]]) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [500]

        async def send_counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            path = scope["path"] if scope["path"] in _PATHS else "other"
            self.counts[(path, status[0])] += 1


OPEN_PATHS = frozenset({"/", "/health"})  # answered without the API key


class _RequireKey:
    """ASGI middleware: with an API key set, every path but :data:`OPEN_PATHS` needs the
    header ``Authorization: Bearer KEY``; anything else gets 401 in OpenAI's error shape.

    The comparison is constant-time (``hmac.compare_digest`` over SHA-256 digests, so not
    even the key's length shows in the timing)."""

    def __init__(self, app: Any, key: str) -> None:
        self.app = app
        self.digest = hashlib.sha256(key.encode()).digest()

    def allows(self, headers: list[tuple[bytes, bytes]]) -> bool:
        given = b""
        for name, value in headers:
            if name.lower() == b"authorization":
                scheme, _, token = value.strip().partition(b" ")
                if scheme.lower() == b"bearer":
                    given = token.strip()
        return hmac.compare_digest(hashlib.sha256(given).digest(), self.digest)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self.allows(
                scope.get("headers", [])):
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            error_body("missing or invalid API key: send the header Authorization: Bearer "
                       "<key> with the key the server was started with",
                       code="invalid_api_key"),
            status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


async def _read_json(request: Request, limit: int) -> Any:
    """The request body as JSON, refusing bodies over ``limit`` bytes before reading them."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"request body of {declared} bytes exceeds the limit of {limit}",
                           status=413, code="request_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise RequestError(f"request body exceeds the limit of {limit} bytes", status=413,
                               code="request_too_large")
    try:
        return json.loads(body)
    except ValueError as e:
        raise RequestError(f"the body is not valid JSON: {e}", code="invalid_json") from None
    except RecursionError:  # the parser's recursion limit (~1,000 levels), not a crash
        raise RequestError("the body nests JSON too deeply to parse", code="invalid_json") from None


def _error_response(exc: BaseException) -> JSONResponse:
    status, body = error_from_exception(exc, getattr(exc, "param", None))
    return JSONResponse(body, status_code=status)


def _logprobs(req: GenerationRequest, entries: list[TokenLogprob] | None,
              offsets: CompletionOffsets | None = None) -> dict[str, Any] | None:
    """The ``logprobs`` object of ``entries`` in the endpoint's shape (None when not asked
    for, or, in a stream chunk, when the chunk has no tokens)."""
    if req.logprobs is None or entries is None or (offsets is not None and not entries):
        return None
    if req.endpoint == "chat":
        return chat_logprobs(entries)
    return (offsets or CompletionOffsets()).shape(entries)


def _choice(req: GenerationRequest, r: ChoiceResult) -> dict[str, Any]:
    """A finished choice in the endpoint's shape (chat: message, tool calls; completion: text)."""
    extra = {} if r.accepted is None else {"constraint_satisfied": r.accepted}
    logprobs = _logprobs(req, r.logprobs)
    if req.endpoint == "completion":
        return {"index": r.index, "text": r.text, "logprobs": logprobs,
                "finish_reason": r.finish_reason, **extra}
    split = _Split(req)
    split.feed(r.text, final=True)
    message = split.message()
    calls = message.get("tool_calls")
    return {"index": r.index, "message": message, "logprobs": logprobs,
            "finish_reason": "tool_calls" if calls else r.finish_reason, **extra}


class _Split:
    """One chat choice's text split into reasoning, content and tool calls, whole or as it
    streams: :meth:`feed` returns delta objects (``reasoning_content``, ``content`` or
    ``tool_calls`` with OpenAI's streaming shape: a call's ``index``, ``id``, ``type`` and
    ``function.name`` first, then ``function.arguments`` fragments)."""

    def __init__(self, req: GenerationRequest) -> None:
        self.reasoning: ReasoningStream | None = None
        if req.think is not None and req.reasoning_format == "deepseek":
            self.reasoning = ReasoningStream(*req.think)
        self.tools = None if req.tool_format is None else ToolCallStream(req.tool_format)
        self.content: list[str] = []  # content outside tool calls
        self.raw: list[str] = []  # all content

    def feed(self, text: str, final: bool = False) -> list[dict[str, Any]]:
        pieces = (self.reasoning.feed(text, final) if self.reasoning is not None
                  else [("content", text)] if text else [])
        out: list[dict[str, Any]] = []
        for kind, piece in pieces:
            if kind == "reasoning":
                out.append({"reasoning_content": piece})
                continue
            self.raw.append(piece)
            if self.tools is None:
                self.content.append(piece)
                out.append({"content": piece})
                continue
            for ev in self.tools.feed(piece):
                if ev[0] == "content":
                    self.content.append(ev[1])
                    out.append({"content": ev[1]})
                elif ev[0] == "call":
                    out.append({"tool_calls": [{"index": ev[1], "id": ev[2], "type": "function",
                                                "function": {"name": ev[3], "arguments": ""}}]})
                else:
                    out.append({"tool_calls": [{"index": ev[1],
                                                "function": {"arguments": ev[2]}}]})
        if final and self.tools is not None and self.tools.state == "text" and self.tools.buf:
            self.content.append(self.tools.buf)  # a partial marker at the end: text after all
            out.append({"content": self.tools.buf})
            self.tools.buf = ""
        return out

    def calls(self) -> list[dict[str, Any]] | None:
        return None if self.tools is None else self.tools.finished_calls()

    def message(self) -> dict[str, Any]:
        """The whole assistant message (after ``feed(..., final=True)``); a call cut short
        leaves the text as it is, in ``content``."""
        calls = self.calls()
        message = chat_message("".join(self.raw), calls)
        if calls:
            message["content"] = "".join(self.content).strip() or None
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning.reasoning
        return message


class _Stream:
    """Turns scheduler events of one job into SSE ``data:`` lines.

    Chat text goes through a :class:`_Split` per choice: reasoning deltas, then content
    deltas, and tool calls as OpenAI streams them (name first, then argument fragments as
    they are generated). Text that may still turn out to be a marker is held back. Log
    probabilities ride with the first delta sent after their tokens.
    """

    def __init__(self, req: GenerationRequest, rid: str) -> None:
        self.req = req
        self.rid = rid
        self.created = int(time.time())
        self.splits: dict[int, _Split] = {}
        self.unsent: dict[int, list[TokenLogprob]] = {}  # entries waiting for a delta
        self.n_sent: dict[int, int] = {}  # logprobs entries sent, per choice
        self.offsets: dict[int, CompletionOffsets] = {}

    def _logprobs(self, index: int, entries: list[TokenLogprob]) -> dict[str, Any] | None:
        self.n_sent[index] = self.n_sent.get(index, 0) + len(entries)
        return _logprobs(self.req, entries, self.offsets.setdefault(index, CompletionOffsets()))

    def event(self, choice: dict[str, Any]) -> str:
        return "data: " + json.dumps(chunk_object(self.req, self.rid, self.created, [choice]),
                                     ensure_ascii=False) + "\n\n"

    def start(self) -> list[str]:
        if self.req.endpoint != "chat":
            return []
        return [self.event({"index": i, "delta": {"role": "assistant", "content": ""},
                            "logprobs": None, "finish_reason": None}) for i in range(self.req.n)]

    def delta(self, index: int, text: str, entries: list[TokenLogprob]) -> list[str]:
        if self.req.endpoint == "completion":
            return [self.event({"index": index, "text": text,
                                "logprobs": self._logprobs(index, entries),
                                "finish_reason": None})]
        self.unsent.setdefault(index, []).extend(entries)
        split = self.splits.setdefault(index, _Split(self.req))
        return [self._chat_delta(index, d) for d in split.feed(text)]

    def _chat_delta(self, index: int, delta: dict[str, Any]) -> str:
        entries, self.unsent[index] = self.unsent.get(index, []), []
        return self.event({"index": index, "delta": delta,
                           "logprobs": self._logprobs(index, entries), "finish_reason": None})

    def finish(self, r: ChoiceResult) -> list[str]:
        extra = {} if r.accepted is None else {"constraint_satisfied": r.accepted}
        rest = (r.logprobs or [])[self.n_sent.get(r.index, 0):]
        if self.req.endpoint == "completion":
            return [self.event({"index": r.index, "text": "",
                                "logprobs": self._logprobs(r.index, rest),
                                "finish_reason": r.finish_reason, **extra})]
        split = self.splits.setdefault(r.index, _Split(self.req))
        self.unsent[r.index] = rest
        out = [self._chat_delta(r.index, d) for d in split.feed("", final=True)]
        reason = "tool_calls" if split.calls() else r.finish_reason
        out.append(self.event({"index": r.index, "delta": {},
                               "logprobs": self._logprobs(r.index, self.unsent.pop(r.index, [])),
                               "finish_reason": reason, **extra}))
        return out

    def usage(self, prompt_tokens: int, completion_tokens: int) -> str:
        return "data: " + json.dumps(chunk_object(self.req, self.rid, self.created, [],
                                                  usage(prompt_tokens, completion_tokens))) + "\n\n"


def create_app(model: Any, *, parallel: int = 4, n_ctx: int | None = None,
               model_name: str | None = None, max_body: int = MAX_BODY_BYTES,
               api_key: str | None = None, grammar_timeout: float = GRAMMAR_TIMEOUT_S,
               think_markers: tuple[str, str] | None = None) -> FastAPI:
    """The ASGI app serving ``model`` with a :class:`Scheduler` of ``parallel`` slots; with
    ``api_key``, every path but ``/`` and ``/health`` requires it (:class:`_RequireKey`).
    ``think_markers`` (begin, end) replace those read off the chat template.
    Requests' grammars are compiled off the decode loop (:class:`GrammarCompiler`), each
    within ``grammar_timeout`` seconds.

    The scheduler thread starts and stops with the app's lifespan.
    """
    from contextlib import asynccontextmanager

    scheduler = Scheduler(model, parallel=parallel, n_ctx=n_ctx)
    compiler = GrammarCompiler(scheduler.grammars, model.tokenizer_info, scheduler.n_ctx,
                               grammar_timeout)
    name = model_name or (model.path.stem if getattr(model, "path", None) else "lexguide")
    counts: Counter[tuple[str, int]] = Counter()
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        try:
            yield
        finally:
            compiler.shutdown()
            scheduler.stop()

    app = FastAPI(title="lexguide", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.scheduler = scheduler
    if api_key is not None:
        app.add_middleware(_RequireKey, key=api_key)
    app.add_middleware(_CountRequests, counts=counts)  # outermost: refusals are counted too

    @app.exception_handler(LexguideError)
    async def _lexguide_error(request: Request, exc: LexguideError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(exc.detail), code=str(exc.status_code)),
                            status_code=exc.status_code)

    @app.get("/", response_class=HTMLResponse)
    async def playground() -> HTMLResponse:
        page = resources.files("lexguide.server").joinpath("static/playground.html")
        return HTMLResponse(page.read_text(encoding="utf-8"))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "slots_total": scheduler.parallel,
                "slots_processing": scheduler.n_active, "queue_depth": scheduler.queue_depth}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": name, "object": "model", "created": started, "owned_by": "lexguide",
            "meta": {"n_ctx": scheduler.n_ctx, "n_vocab": model.config.n_vocab,
                     "arch": model.config.arch},
        }]}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(_prometheus(scheduler, compiler, counts),
                                 media_type="text/plain; version=0.0.4")

    async def complete(request: Request, parse: Callable[[Any], GenerationRequest]) -> Any:
        req = parse(await _read_json(request, max_body))
        if not req.model:
            req.model = name
        if req.endpoint == "chat":
            plan_chat(model, req, think_markers)  # the template renders here: pure, and the scheduler waits less
        grammar = await compiler.grammar(req)  # on a worker thread: the decode loop goes on
        queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        job = Job(req, lambda ev: loop.call_soon_threadsafe(queue.put_nowait, ev), grammar=grammar)
        scheduler.submit(job)
        checked = [time.monotonic()]
        try:
            first = await _next(queue, request, checked)
            if first[0] == "error":
                raise first[1]
            prompt_tokens = first[1]
        except BaseException:
            _cancel(scheduler, job)
            raise
        rid = new_id("chatcmpl" if req.endpoint == "chat" else "cmpl")
        if req.stream:
            return StreamingResponse(_sse(scheduler, job, queue, rid, prompt_tokens),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        try:
            results: list[ChoiceResult] = []
            while len(results) < req.n:
                ev = await _next(queue, request, checked)
                if ev[0] == "error":
                    raise ev[1]
                if ev[0] == "finish":
                    results.append(ev[1])
        finally:
            _cancel(scheduler, job)
        results.sort(key=lambda r: r.index)
        return completion_object(req, rid, [_choice(req, r) for r in results], prompt_tokens,
                                 sum(r.n_tokens for r in results))

    async def answer(request: Request, parse: Callable[[Any], GenerationRequest]) -> Any:
        """``complete`` with every failure turned into a response here: Starlette's last-resort
        handler would re-raise and uvicorn print a traceback."""
        try:
            return await complete(request, parse)
        except _ClientGone:
            return Response(status_code=499)
        except LexguideError as e:
            return _error_response(e)
        except Exception as e:  # noqa: BLE001 - a bug: a 500 and one log line, no traceback
            log.error("internal error: %s: %s", type(e).__name__, e)
            return _error_response(e)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await answer(request, parse_chat_request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await answer(request, parse_completion_request)

    return app


class _ClientGone(Exception):
    pass


async def _next(queue: asyncio.Queue[tuple[Any, ...]], request: Request,
                checked: list[float]) -> tuple[Any, ...]:
    """The job's next event; raises :class:`_ClientGone` when the client has disconnected
    (looked at every ``_POLL_S`` seconds, events or not; ``checked`` holds the last time)."""
    while True:
        now = time.monotonic()
        if now - checked[0] >= _POLL_S:
            checked[0] = now
            if await request.is_disconnected():
                raise _ClientGone()
        try:
            return await asyncio.wait_for(queue.get(), _POLL_S)
        except asyncio.TimeoutError:
            pass


def _cancel(scheduler: Scheduler, job: Job) -> None:
    if not job.cancelled:
        job.cancelled = True
        scheduler.wake()


async def _sse(scheduler: Scheduler, job: Job, queue: asyncio.Queue[tuple[Any, ...]], rid: str,
               prompt_tokens: int) -> AsyncIterator[str]:
    """The SSE body of a streamed request; an error mid-stream is sent as an ``error`` event."""
    req = job.req
    stream = _Stream(req, rid)
    n_done = 0
    n_tokens = 0
    try:
        for line in stream.start():
            yield line
        while n_done < req.n:
            ev = await queue.get()
            if ev[0] == "delta":
                for line in stream.delta(ev[1], ev[2], ev[3]):
                    yield line
            elif ev[0] == "finish":
                n_done += 1
                n_tokens += ev[1].n_tokens
                for line in stream.finish(ev[1]):
                    yield line
            elif ev[0] == "error":
                _, body = error_from_exception(ev[1], getattr(ev[1], "param", None))
                yield "data: " + json.dumps(body, ensure_ascii=False) + "\n\n"
                break
        if req.include_usage:
            yield stream.usage(prompt_tokens, n_tokens)
        yield "data: [DONE]\n\n"
    finally:  # finished, failed, or the client went away (the generator is closed)
        _cancel(scheduler, job)


def _prometheus(scheduler: Scheduler, compiler: GrammarCompiler,
                counts: Counter[tuple[str, int]]) -> str:
    """Prometheus text exposition of the server's counters and gauges."""
    m = scheduler.metrics
    g = scheduler.grammars
    rows: list[tuple[str, str, str, list[tuple[str, float]]]] = [
        ("lexguide_requests_total", "counter", "HTTP responses by path and status",
         [(f'{{path="{p}",status="{s}"}}', n) for (p, s), n in sorted(counts.items())]),
        ("lexguide_prompt_tokens_total", "counter", "prompt tokens of admitted requests",
         [("", m.prompt_tokens)]),
        ("lexguide_prompt_tokens_cached_total", "counter",
         "prompt tokens taken from a slot's KV cache instead of evaluated",
         [("", m.prompt_tokens_cached)]),
        ("lexguide_completion_tokens_total", "counter", "generated tokens (forced ones included)",
         [("", m.completion_tokens)]),
        ("lexguide_forced_tokens_total", "counter", "tokens forced by grammars (no sampling)",
         [("", m.forced_tokens)]),
        ("lexguide_decode_steps_total", "counter", "scheduler steps", [("", m.steps)]),
        ("lexguide_batched_forwards_total", "counter",
         "batched decode forwards (one per step with a sequence decoding)",
         [("", m.batched_forwards)]),
        ("lexguide_batched_sequences_total", "counter",
         "sequences decoded over those forwards (their mean batch size = this / forwards)",
         [("", m.batched_sequences)]),
        ("lexguide_batch_size_max", "gauge", "most sequences decoded in one forward",
         [("", m.batch_max)]),
        ("lexguide_forward_seconds_total", "counter", "time in model forward passes",
         [("", m.forward_s)]),
        ("lexguide_mask_seconds_total", "counter", "time computing grammar masks",
         [("", m.mask_s)]),
        ("lexguide_sample_seconds_total", "counter",
         "time projecting logits, sampling and advancing matchers", [("", m.sample_s)]),
        ("lexguide_sequences_finished_total", "counter", "sequences (choices) finished",
         [("", m.sequences_finished)]),
        ("lexguide_sequences_cancelled_total", "counter",
         "sequences dropped because their client went away or failed",
         [("", m.sequences_cancelled)]),
        ("lexguide_queue_depth", "gauge", "requests and sequences waiting for a slot",
         [("", scheduler.queue_depth)]),
        ("lexguide_active_sequences", "gauge", "sequences being decoded",
         [("", scheduler.n_active)]),
        ("lexguide_slots", "gauge", "decode slots (--parallel)", [("", scheduler.parallel)]),
        ("lexguide_grammar_cache_entries", "gauge", "compiled grammars cached", [("", len(g))]),
        ("lexguide_grammar_cache_hits_total", "counter", "grammar cache hits", [("", g.hits)]),
        ("lexguide_grammar_cache_misses_total", "counter", "grammar compilations",
         [("", g.misses)]),
        ("lexguide_grammar_compile_seconds_total", "counter",
         "time compiling grammars (cache misses), on the compile worker",
         [("", g.compile_s)]),
        ("lexguide_grammar_timeouts_total", "counter",
         "requests refused because their grammar missed --grammar-timeout",
         [("", compiler.timeouts)]),
    ]
    out = []
    for metric, kind, text, samples in rows:
        out.append(f"# HELP {metric} {text}")
        out.append(f"# TYPE {metric} {kind}")
        out.extend(f"{metric}{labels} {value:g}" if isinstance(value, float)
                   else f"{metric}{labels} {value}" for labels, value in samples)
    return "\n".join(out) + "\n"


def serve(model_path: Any = None, *, host: str = "127.0.0.1", port: int = 8080,
          parallel: int = 4, n_ctx: int = 4096, n_threads: int | None = None,
          max_body: int = MAX_BODY_BYTES, log_level: str = "warning",
          api_key: str | None = None, grammar_timeout: float = GRAMMAR_TIMEOUT_S,
          cache_type: str = "f16", think_markers: tuple[str, str] | None = None) -> None:
    """Load the model and serve it until interrupted (blocks). ``cache_type``: the slots'
    KV cache element type (``Model.from_gguf``); ``think_markers``: see :func:`create_app`."""
    import sys

    import uvicorn

    from lexguide.runtime import Model

    model = Model.from_gguf(model_path, n_ctx=n_ctx, n_threads=n_threads, cache_type=cache_type)
    app = create_app(model, parallel=parallel, n_ctx=n_ctx, max_body=max_body, api_key=api_key,
                     grammar_timeout=grammar_timeout, think_markers=think_markers)
    auth = ", API key required" if api_key is not None else ""
    print(f"lexguide serve: {model} on http://{host}:{port} ({parallel} slots{auth})",
          file=sys.stderr, flush=True)
    # at shutdown, requests still running get 5 s to finish
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                timeout_graceful_shutdown=5)
