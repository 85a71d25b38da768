"""OpenAI request parsing and response shapes (no web framework here: plain dicts in and out).

A request body (already JSON-decoded) becomes a :class:`GenerationRequest`; every field is
checked here, and a bad one raises :class:`RequestError` whose ``param`` is the field's path
(``response_format.json_schema.schema``, ``messages[2].content``) — the location OpenAI's
error shape carries. Responses are built by the ``*_response`` / ``*_chunk`` functions.

Defaults follow llama.cpp's ``llama-server`` (temperature 0.8, top_k 40, top_p 0.95, min_p
0.05), not OpenAI's (temperature 1, top_p 1): users compare against llama-server.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lexguide.errors import GrammarError, LexguideError, RegexError, SchemaError
from lexguide.server.logprobs import MAX_COMPLETION_LOGPROBS, MAX_TOP_LOGPROBS, TokenLogprob

__all__ = [
    "ChoiceResult",
    "Constraint",
    "GenerationRequest",
    "RequestError",
    "ToolSpec",
    "error_body",
    "error_from_exception",
    "parse_chat_request",
    "parse_completion_request",
]

MAX_N = 8  # choices per request
MAX_STOP = 8  # stop strings per request
MAX_STOP_CHARS = 256  # characters per stop string


class RequestError(LexguideError):
    """A request the server refuses (HTTP ``status``, 400 unless said otherwise).

    ``param`` is the location: the path of the offending field in the request body.
    ``code`` is a short machine-readable reason (``invalid_schema``, ``context_length_exceeded``).
    """

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 status: int = 400, type: str = "invalid_request_error") -> None:
        self.detail = message
        self.param = param
        self.code = code
        self.status = status
        self.type = type
        super().__init__(message if param is None else f"{param}: {message}")


def error_body(message: str, *, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_from_exception(exc: BaseException, param: str | None = None) -> tuple[int, dict[str, Any]]:
    """(HTTP status, error body) for a lexguide error; the message keeps its location.

    ``SchemaError`` → ``invalid_schema`` (message starts with the JSON pointer), ``RegexError``
    → ``invalid_regex``, ``GrammarError`` → ``invalid_grammar`` (line:col and caret excerpt),
    ``RequestError`` → its own status/param/code, any other ``LexguideError`` → 400.
    """
    if isinstance(exc, RequestError):
        return exc.status, error_body(exc.detail, type=exc.type, param=exc.param, code=exc.code)
    if isinstance(exc, SchemaError):
        return 400, error_body(f"invalid JSON Schema: {exc}", param=param, code="invalid_schema")
    if isinstance(exc, RegexError):
        return 400, error_body(f"invalid regex: {exc}", param=param, code="invalid_regex")
    if isinstance(exc, GrammarError):
        return 400, error_body(f"invalid grammar: {exc}", param=param, code="invalid_grammar")
    if isinstance(exc, LexguideError):
        return 400, error_body(str(exc), param=param, code="invalid_request")
    return 500, error_body("internal server error", type="server_error", code="internal_error")


@dataclass(frozen=True, slots=True)
class Constraint:
    """What the output must match: ``kind`` is ``json_schema``, ``json_object``, ``grammar``,
    ``regex``, ``structural_tag``, ``lazy`` or ``tools``; ``source`` the schema (JSON text),
    grammar text, pattern, structural tag (JSON text) or lazy grammar (JSON text of
    ``{"grammar": text, "triggers": [...]}``); ``param`` where it came from in the request
    (for error locations)."""

    kind: str
    source: str
    param: str


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One function the model may call: its name, description and parameter schema (JSON text)."""

    name: str
    description: str
    parameters: str


@dataclass(slots=True)
class GenerationRequest:
    """A checked request: everything the scheduler needs, nothing of HTTP."""

    endpoint: str  # "chat" or "completion"
    model: str
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None
    max_tokens: int | None = None
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    constraint: Constraint | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: str = "none"  # "none", "auto", "required" or a function name after "function:"
    logprobs: int | None = None  # None: no log probabilities; else the alternatives per token
    reasoning_budget: int | None = None  # thinking tokens; None: not given; -1: unlimited
    reasoning_format: str = "deepseek"  # "deepseek": think text apart; "none": in content
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # chat_template_kwargs
    parallel_tool_calls: bool = True
    # set by the web side once the chat template is rendered (server.chat_plan)
    chat_text: str | None = None
    think: Any = None  # (ThinkMarkers, think_state) when the template thinks
    tool_format: Any = None  # the ToolFormat of the answer's calls
    base_constraint: Constraint | None = None  # the request's own, when composed into another


@dataclass(slots=True)
class ChoiceResult:
    """One finished choice: its text, token count and why it ended."""

    index: int
    text: str
    n_tokens: int
    finish_reason: str
    accepted: bool | None = None  # with a constraint: did the grammar accept the whole output
    logprobs: list[TokenLogprob] | None = None  # one per generated token, when asked for


# -- field readers ----------------------------------------------------------------------------


def _number(body: Mapping[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError("must be a finite number", param=name, code="invalid_type")
    if not lo <= value <= hi:
        raise RequestError(f"must be between {lo:g} and {hi:g}, got {value:g}", param=name,
                           code="invalid_value")
    return float(value)


def _integer(body: Mapping[str, Any], name: str, default: int | None, lo: int, hi: int,
             ) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError("must be an integer", param=name, code="invalid_type")
    if not lo <= value <= hi:
        raise RequestError(f"must be between {lo} and {hi}, got {value}", param=name,
                           code="invalid_value")
    return value


def _string(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise RequestError("must be a string", param=param, code="invalid_type")
    return value


def _object(value: Any, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RequestError("must be an object", param=param, code="invalid_type")
    return value


def _schema_text(value: Any, param: str) -> str:
    """A JSON Schema given as an object, a boolean, or JSON text → canonical JSON text."""
    import json

    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise RequestError(f"is not valid JSON: {e}", param=param, code="invalid_schema") from None
        except RecursionError:
            raise RequestError("nests JSON too deeply to parse", param=param,
                               code="invalid_schema") from None
    if not isinstance(value, (Mapping, bool)):
        raise RequestError("must be a JSON Schema (an object or a boolean)", param=param,
                           code="invalid_schema")
    return json.dumps(value, ensure_ascii=False)


def _stops(body: Mapping[str, Any]) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > MAX_STOP:
        raise RequestError(f"must be a string or a list of at most {MAX_STOP} strings",
                           param="stop", code="invalid_value")
    for i, s in enumerate(stops):
        if not isinstance(s, str) or not s or len(s) > MAX_STOP_CHARS:
            raise RequestError(f"must be a non-empty string of at most {MAX_STOP_CHARS} characters",
                               param=f"stop[{i}]", code="invalid_value")
    return list(stops)


_UNSUPPORTED = {  # fields whose meaning we cannot honour: refused rather than ignored
    "echo": "echo is not supported",
    "suffix": "suffix (insertion) is not supported",
    "logit_bias": "logit_bias is not supported",
}


def _common(body: Mapping[str, Any], req: GenerationRequest) -> None:
    for name, why in _UNSUPPORTED.items():
        value = body.get(name)
        if value not in (None, False, 0, {}, ""):
            raise RequestError(why, param=name, code="unsupported_parameter")
    best_of = body.get("best_of")
    if best_of not in (None, 1):
        raise RequestError("best_of is not supported (use n)", param="best_of",
                           code="unsupported_parameter")
    model = body.get("model", "")
    req.model = _string(model, "model") if model is not None else ""
    req.n = int(_integer(body, "n", 1, 1, MAX_N) or 1)
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise RequestError("must be a boolean", param="stream", code="invalid_type")
    req.stream = bool(stream)
    options = body.get("stream_options")
    if options is not None:
        req.include_usage = bool(_object(options, "stream_options").get("include_usage", False))
    req.stop = _stops(body)
    req.seed = _integer(body, "seed", None, -(2**63), 2**64 - 1)
    if req.seed is not None and req.seed < 0:
        req.seed &= 2**64 - 1
    req.temperature = _number(body, "temperature", 0.8, 0.0, 100.0)
    req.top_p = _number(body, "top_p", 0.95, 0.0, 1.0)
    req.top_k = int(_integer(body, "top_k", 40, 0, 1 << 30) or 0)
    req.min_p = _number(body, "min_p", 0.05, 0.0, 1.0)
    req.repeat_penalty = _number(body, "repeat_penalty", 1.0, 1e-3, 100.0)
    req.frequency_penalty = _number(body, "frequency_penalty", 0.0, -2.0, 2.0)
    req.presence_penalty = _number(body, "presence_penalty", 0.0, -2.0, 2.0)
    # max_tokens is bounded against the context later (the scheduler knows n_ctx)
    req.max_tokens = _integer(body, "max_completion_tokens", None, 0, 1 << 40)
    if req.max_tokens is None:
        req.max_tokens = _integer(body, "max_tokens", None, 0, 1 << 40)
    req.constraint = _constraint(body)


def _constraint(body: Mapping[str, Any]) -> Constraint | None:
    """At most one of ``response_format`` (json_schema / json_object), ``json_schema``,
    ``grammar`` and ``regex``."""
    found: list[Constraint] = []
    rf = body.get("response_format")
    if rf is not None:
        rf = _object(rf, "response_format")
        kind = rf.get("type")
        if kind == "json_schema":
            spec = _object(rf.get("json_schema"), "response_format.json_schema")
            if "schema" not in spec:
                raise RequestError("is required", param="response_format.json_schema.schema",
                                   code="missing_required_parameter")
            name = spec.get("name")
            if name is not None:
                _string(name, "response_format.json_schema.name")
            found.append(Constraint("json_schema", _schema_text(
                spec["schema"], "response_format.json_schema.schema"),
                "response_format.json_schema.schema"))
        elif kind == "json_object":
            schema = rf.get("schema")  # llama-server accepts one here too
            text = '{"type": "object"}' if schema is None else _schema_text(
                schema, "response_format.schema")
            found.append(Constraint("json_object", text, "response_format"))
        elif kind == "structural_tag":
            # vLLM's and SGLang's shapes: {"type", "format"} or the legacy {"type",
            # "structures", "triggers"(, "at_least_one")}; the compile checks the fields
            found.append(Constraint("structural_tag", _json_text(rf, "response_format"),
                                    "response_format"))
        elif kind != "text":
            raise RequestError(f"unknown type {kind!r} (expected text, json_object, json_schema "
                               "or structural_tag)", param="response_format.type",
                               code="invalid_value")
    if body.get("json_schema") is not None:
        found.append(Constraint("json_schema", _schema_text(body["json_schema"], "json_schema"),
                                "json_schema"))
    lazy = _lazy(body)
    if body.get("grammar") is not None:
        text = _string(body["grammar"], "grammar")
        if not text.strip():
            raise RequestError("is empty", param="grammar", code="invalid_grammar")
        found.append(Constraint("grammar", text, "grammar") if lazy is None else Constraint(
            "lazy", _json_text({"grammar": text, "triggers": lazy}, "grammar_triggers"),
            "grammar_triggers"))
    elif lazy is not None:
        raise RequestError("needs grammar (the grammar that applies from a trigger on)",
                           param="grammar_lazy", code="missing_required_parameter")
    if body.get("regex") is not None:
        found.append(Constraint("regex", _string(body["regex"], "regex"), "regex"))
    if len(found) > 1:
        raise RequestError("give at most one of response_format (json or structural_tag), "
                           "json_schema, grammar and regex", param=found[1].param,
                           code="conflicting_parameters")
    return found[0] if found else None


def _lazy(body: Mapping[str, Any]) -> list[Any] | None:
    """llama-server's ``grammar_lazy: true`` with ``grammar_triggers`` → the triggers (checked
    one by one when the grammar compiles), or None when the grammar is not lazy."""
    on = body.get("grammar_lazy")
    if on is not None and not isinstance(on, bool):
        raise RequestError("must be a boolean", param="grammar_lazy", code="invalid_type")
    triggers = body.get("grammar_triggers")
    if not on:
        if triggers:  # llama-server ignores them; a client sending them means them
            raise RequestError("apply only with grammar_lazy: true", param="grammar_triggers",
                               code="invalid_value")
        return None
    if not isinstance(triggers, list) or not triggers:
        raise RequestError("must be a non-empty list when grammar_lazy is true (no triggers: "
                           "the grammar would never apply)", param="grammar_triggers",
                           code="missing_required_parameter" if not triggers
                           else "invalid_type")
    return triggers


def _json_text(value: Any, param: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        raise RequestError("is not JSON data", param=param, code="invalid_value") from None


# -- chat -------------------------------------------------------------------------------------


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def _content_text(content: Any, param: str) -> str:
    """Message content: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            part = _object(part, f"{param}[{i}]")
            if part.get("type") != "text":
                raise RequestError("only text content parts are supported", param=f"{param}[{i}].type",
                                   code="unsupported_content")
            parts.append(_string(part.get("text"), f"{param}[{i}].text"))
        return "".join(parts)
    raise RequestError("must be a string or a list of text parts", param=param, code="invalid_type")


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise RequestError("must be a non-empty list of messages", param="messages",
                           code="invalid_value")
    out = []
    for i, m in enumerate(value):
        m = _object(m, f"messages[{i}]")
        role = m.get("role")
        if role not in _ROLES:
            raise RequestError(f"must be one of {sorted(_ROLES)}", param=f"messages[{i}].role",
                               code="invalid_value")
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": _content_text(m.get("content"), f"messages[{i}].content")}
        calls = m.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise RequestError("must be a list", param=f"messages[{i}].tool_calls",
                                   code="invalid_type")
            msg["tool_calls"] = [
                _object(_object(c, f"messages[{i}].tool_calls[{j}]").get("function"),
                        f"messages[{i}].tool_calls[{j}].function")
                for j, c in enumerate(calls)
            ]
        if calls:
            msg["tool_call_ids"] = [c.get("id") if isinstance(c, Mapping) else None
                                    for c in calls]
        if role == "tool" and m.get("tool_call_id") is not None:
            msg["tool_call_id"] = _string(m["tool_call_id"], f"messages[{i}].tool_call_id")
        out.append(msg)
    return out


#: request fields that give the thinking budget in tokens (lexguide's, llama-server's, vLLM's)
BUDGET_FIELDS = ("reasoning_budget", "thinking_budget_tokens", "reasoning_budget_tokens",
                 "thinking_token_budget")


def _reasoning(body: Mapping[str, Any], req: GenerationRequest) -> None:
    """``reasoning_budget`` (or a peer's name for it), ``reasoning_format`` and
    ``chat_template_kwargs``."""
    given = [(name, _integer(body, name, None, -1, 1 << 30)) for name in BUDGET_FIELDS]
    given = [(name, v) for name, v in given if v is not None]
    if len({v for _, v in given}) > 1:
        raise RequestError(f"conflicts with {given[0][0]}", param=given[1][0],
                           code="conflicting_parameters")
    req.reasoning_budget = given[0][1] if given else None
    fmt = body.get("reasoning_format")
    if fmt is not None:
        if fmt == "auto":
            fmt = "deepseek"
        if fmt not in ("none", "deepseek"):
            raise RequestError("must be none, deepseek or auto (deepseek-legacy is not "
                               "supported)", param="reasoning_format", code="invalid_value")
        req.reasoning_format = fmt
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        kwargs = dict(_object(kwargs, "chat_template_kwargs"))
        if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
            raise RequestError("must be a boolean", param="chat_template_kwargs.enable_thinking",
                               code="invalid_type")
        for reserved in ("messages", "tools", "add_generation_prompt", "bos_token",
                         "eos_token"):
            if reserved in kwargs:
                raise RequestError("is set by the server", code="invalid_value",
                                   param=f"chat_template_kwargs.{reserved}")
        req.template_kwargs = kwargs
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RequestError("must be a boolean", param="parallel_tool_calls",
                           code="invalid_type")
    req.parallel_tool_calls = True if parallel is None else parallel


def _tools(body: Mapping[str, Any]) -> tuple[list[ToolSpec], str]:
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if not tools:
        if choice not in (None, "none", "auto"):
            raise RequestError("needs tools", param="tool_choice", code="invalid_value")
        return [], "none"
    if not isinstance(tools, list):
        raise RequestError("must be a list", param="tools", code="invalid_type")
    specs = []
    for i, t in enumerate(tools):
        t = _object(t, f"tools[{i}]")
        if t.get("type", "function") != "function":
            raise RequestError("only function tools are supported", param=f"tools[{i}].type",
                               code="invalid_value")
        fn = _object(t.get("function"), f"tools[{i}].function")
        name = _string(fn.get("name"), f"tools[{i}].function.name")
        if not name or not all(c.isalnum() or c in "_-" for c in name) or len(name) > 64:
            raise RequestError("must be 1-64 letters, digits, '_' or '-'",
                               param=f"tools[{i}].function.name", code="invalid_value")
        params = fn.get("parameters", {"type": "object"})
        desc = fn.get("description") or ""
        specs.append(ToolSpec(name, _string(desc, f"tools[{i}].function.description"),
                              _schema_text(params, f"tools[{i}].function.parameters")))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise RequestError("function names must be unique", param="tools", code="invalid_value")
    if choice is None:
        choice = "auto"
    if isinstance(choice, Mapping):
        fn = _object(choice.get("function"), "tool_choice.function")
        name = _string(fn.get("name"), "tool_choice.function.name")
        if name not in names:
            raise RequestError(f"names no function in tools (have {names})",
                               param="tool_choice.function.name", code="invalid_value")
        return specs, "function:" + name
    if choice not in ("none", "auto", "required"):
        raise RequestError("must be none, auto, required or {\"type\": \"function\", ...}",
                           param="tool_choice", code="invalid_value")
    return specs, choice


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """``logprobs: true`` and ``top_logprobs: k`` (0-20, only with ``logprobs``) → k, or None."""
    on = body.get("logprobs")
    if on is not None and not isinstance(on, bool):
        raise RequestError("must be a boolean", param="logprobs", code="invalid_type")
    top = _integer(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if top is not None and not on:
        raise RequestError("requires logprobs to be true", param="top_logprobs",
                           code="invalid_value")
    return (top or 0) if on else None


def parse_chat_request(body: Any) -> GenerationRequest:
    """Check a ``/v1/chat/completions`` body. Raises :class:`RequestError`."""
    body = _object(body, "body")
    req = GenerationRequest("chat", "")
    req.messages = _messages(body.get("messages"))
    _common(body, req)
    req.logprobs = _chat_logprobs(body)
    req.tools, req.tool_choice = _tools(body)
    _reasoning(body, req)
    if req.tool_choice != "none":
        if req.constraint is not None:
            raise RequestError("cannot be combined with tools (the tool call is the constraint)",
                               param=req.constraint.param, code="conflicting_parameters")
        req.constraint = Constraint("tools", "", "tools")
    return req


def parse_completion_request(body: Any) -> GenerationRequest:
    """Check a ``/v1/completions`` body. Raises :class:`RequestError`."""
    body = _object(body, "body")
    req = GenerationRequest("completion", "")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        req.prompt = prompt
    elif isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        req.prompt = list(prompt)
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise RequestError("several prompts in one request are not supported (send one each)",
                           param="prompt", code="unsupported_parameter")
    else:
        raise RequestError("must be a string, a list of one string, or a list of token ids",
                           param="prompt", code="invalid_type")
    _common(body, req)
    req.logprobs = _integer(body, "logprobs", None, 0, MAX_COMPLETION_LOGPROBS)
    if body.get("tools"):
        raise RequestError("tools are only supported on /v1/chat/completions", param="tools",
                           code="unsupported_parameter")
    for name in (*BUDGET_FIELDS, "reasoning_format", "chat_template_kwargs"):
        if body.get(name) is not None:
            raise RequestError("reasoning is only supported on /v1/chat/completions",
                               param=name, code="unsupported_parameter")
    return req


# -- responses --------------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    """A response id such as ``chatcmpl-3f2a...``."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's usage object."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_message(text: str, tool_calls: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The assistant message of a chat choice (content is null when it is a tool call)."""
    if tool_calls:
        return {"role": "assistant", "content": None, "tool_calls": list(tool_calls)}
    return {"role": "assistant", "content": text}


def completion_object(req: GenerationRequest, rid: str, choices: list[dict[str, Any]],
                      prompt_tokens: int, completion_tokens: int, created: int | None = None,
                      ) -> dict[str, Any]:
    """A whole (non-streamed) ``chat.completion`` or ``text_completion`` object."""
    return {
        "id": rid,
        "object": "chat.completion" if req.endpoint == "chat" else "text_completion",
        "created": int(time.time()) if created is None else created,
        "model": req.model,
        "system_fingerprint": "lexguide",
        "choices": choices,
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chunk_object(req: GenerationRequest, rid: str, created: int, choices: list[dict[str, Any]],
                 usage_obj: dict[str, int] | None = None) -> dict[str, Any]:
    """One streamed ``chat.completion.chunk`` (or ``text_completion``) event."""
    out: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk" if req.endpoint == "chat" else "text_completion",
        "created": created,
        "model": req.model,
        "system_fingerprint": "lexguide",
        "choices": choices,
    }
    if usage_obj is not None:
        out["usage"] = usage_obj
    return out
