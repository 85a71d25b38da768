"""Model-native tool calls: the call format a chat template implies, its grammar, and the
parser that turns an answer (whole or streamed) into OpenAI ``tool_calls``.

The chat template renders the tools itself (``tools`` in its Jinja context, as transformers
passes them) when its source mentions ``tools``; the call format is then read off the template
(the strings llama.cpp's detection also looks for):

- ``hermes`` — the template holds ``<tool_call>`` (Hermes, Qwen2.5, Qwen3); a call is
  ``<tool_call>\n{"name": N, "arguments": A}\n</tool_call>``, calls joined by a newline;
- ``llama3`` — it holds ``<|start_header_id|>ipython``; the call is the whole answer,
  ``{"name": N, "parameters": A}``;
- ``mistral`` — it holds ``[TOOL_CALLS]``; ``[TOOL_CALLS][{"name": N, "arguments": A}, ...]``;
- ``generic`` — any other template (the tools are described in a system message by lexguide):
  ``<tool_call>{"name": N, "arguments": A}</tool_call>``.

The grammar is a structural tag (``Grammar.from_structural_tag``): each function is a tag
whose ``begin`` holds its name and whose content is its ``parameters`` schema, so every call's
arguments validate. ``tool_choice`` ``"auto"``: free text, and a call block where the format's
opening marker appears (a lazy trigger; Llama 3.x calls are the whole answer, so there the
answer is either a call or text not starting with ``{``); ``"required"`` (or a named
function): calls only, at least one; ``parallel_tool_calls``: several calls (Llama 3.x's
template renders one call per message, so there it stays one).
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lexguide.runtime.reasoning import partial_marker

__all__ = ["FORMATS", "ToolCallStream", "ToolFormat", "detect_tool_format", "tool_format_spec"]


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """How one call is written: ``head`` + name + ``mid`` + arguments + ``tail``; calls are
    joined by ``separator`` inside ``block_open`` ... ``block_close``; ``trigger`` is the
    opening marker of the block (found anywhere in free text when ``anywhere``, else only at
    the start of the answer)."""

    name: str
    head: str
    mid: str
    tail: str
    separator: str
    trigger: str
    anywhere: bool
    block_open: str = ""
    block_close: str = ""
    max_calls: int | None = None
    native: bool = True  # the template renders the tools

    def call_begin(self, function: str) -> str:
        return self.head + function + self.mid

    def new_id(self) -> str:
        """A call id: Mistral's templates want 9 letters and digits."""
        if self.name == "mistral":
            return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
        return "call_" + secrets.token_hex(12)


FORMATS = {
    "hermes": ToolFormat("hermes", '<tool_call>\n{"name": "', '", "arguments": ',
                         "}\n</tool_call>", "\n", "<tool_call>", True),
    "llama3": ToolFormat("llama3", '{"name": "', '", "parameters": ', "}", "", "{", False,
                         max_calls=1),
    "mistral": ToolFormat("mistral", '{"name": "', '", "arguments": ', "}", ", ",
                          "[TOOL_CALLS]", True, block_open="[TOOL_CALLS][", block_close="]"),
    "generic": ToolFormat("generic", '<tool_call>{"name": "', '", "arguments": ',
                          "}</tool_call>", "", "<tool_call>", True, native=False),
}


def detect_tool_format(template: str | None) -> ToolFormat:
    """The call format of a chat template (``generic`` when it does not render tools)."""
    if not template or "tools" not in template:
        return FORMATS["generic"]
    if "<tool_call>" in template:
        return FORMATS["hermes"]
    if "<|start_header_id|>ipython" in template or "ipython<|end_header_id|>" in template:
        return FORMATS["llama3"]
    if "[TOOL_CALLS]" in template:
        return FORMATS["mistral"]
    return FORMATS["generic"]


def tool_format_spec(fmt: ToolFormat, tools: Sequence[Any], choice: str,
                     parallel: bool) -> dict[str, Any]:
    """The structural-tag format of an answer under ``choice`` (``auto``, ``required`` or
    ``function:NAME``) with ``tools`` (objects with ``name`` and ``parameters`` JSON text)."""
    if choice.startswith("function:"):
        tools = [t for t in tools if t.name == choice[len("function:"):]]
    one = not parallel or fmt.max_calls == 1
    tags = [{"type": "tag", "begin": fmt.call_begin(t.name),
             "content": {"type": "json_schema", "json_schema": json.loads(t.parameters)},
             "end": fmt.tail} for t in tools]
    calls = {"type": "tags_with_separator", "tags": tags, "separator": fmt.separator,
             "at_least_one": True, "stop_after_first": one}
    if fmt.block_open:  # one block holding the calls, opened by the trigger
        block = {"type": "tag", "begin": fmt.block_open, "content": calls,
                 "end": fmt.block_close}
        if choice != "auto":
            return block
        return {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": [block],
                "stop_after_first": True}
    if choice != "auto":
        return calls
    if not fmt.anywhere:  # a call is the whole answer, or text that cannot start one
        text = {"type": "regex", "pattern": "([^" + re.escape(fmt.trigger) + r"][\s\S]*)?"}
        return {"type": "or", "elements": [calls, text]}
    return {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags,
            "stop_after_first": one}


_HEAD = re.compile(r'"name": "([^"]*)", "(?:arguments|parameters)": ')


class ToolCallStream:
    """Parses an answer in ``fmt`` as it streams: :meth:`feed` returns events
    ``("content", text)``, ``("call", index, id, name)`` (a call's name is known) and
    ``("args", index, fragment)`` (more of its arguments' JSON text); ``calls`` holds the
    calls so far. The grammar guarantees the layout; this follows it (mutable)."""

    def __init__(self, fmt: ToolFormat) -> None:
        self.fmt = fmt
        self.state = "text"
        self.buf = ""
        self.started = False  # text seen (start-only formats decide on the first character)
        self.calls: list[dict[str, Any]] = []
        self.complete = 0  # calls whose arguments ended
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._after_call = False

    def feed(self, text: str) -> list[tuple[Any, ...]]:
        self.buf += text
        out: list[tuple[Any, ...]] = []
        while self.buf:
            step = getattr(self, "_" + self.state)
            if not step(out):
                break
        return out

    def _text(self, out: list[tuple[Any, ...]]) -> bool:
        """Free text: content, up to the trigger (held back while it may be starting)."""
        if self._after_call:  # the separator or whitespace after a call is not content
            self.buf = self.buf.lstrip(" \t\r\n")
            if not self.buf:
                return False
            self._after_call = False
        trigger = self.fmt.trigger
        if not self.fmt.anywhere:
            if not self.started and self.buf.startswith(trigger):
                self.state = "head"
                return True
            self.started = True
            out.append(("content", self.buf))
            self.buf = ""
            return False
        i = self.buf.find(trigger)
        if i >= 0:
            if i:
                out.append(("content", self.buf[:i]))
            self.buf = self.buf[i:]
            self.started = True
            self.state = "head"
            return True
        keep = partial_marker(self.buf, trigger)
        if len(self.buf) > keep:
            out.append(("content", self.buf[:len(self.buf) - keep]))
            self.started = True
        self.buf = self.buf[len(self.buf) - keep:]
        return False

    def _head(self, out: list[tuple[Any, ...]]) -> bool:
        """A call's opening up to its arguments: the call's name is known at its end."""
        m = _HEAD.search(self.buf)
        if m is None:
            return False
        index = len(self.calls)
        call = {"id": self.fmt.new_id(), "type": "function",
                "function": {"name": m.group(1), "arguments": ""}}
        self.calls.append(call)
        out.append(("call", index, call["id"], m.group(1)))
        self.buf = self.buf[m.end():]
        self.state = "args"
        self._depth, self._in_string, self._escape = 0, False, False
        return True

    def _args(self, out: list[tuple[Any, ...]]) -> bool:
        """The arguments' JSON, passed on as it comes, until its braces balance."""
        end = self._scan(self.buf)
        piece = self.buf if end < 0 else self.buf[:end]
        if piece:
            self.calls[-1]["function"]["arguments"] += piece
            out.append(("args", len(self.calls) - 1, piece))
        self.buf = "" if end < 0 else self.buf[end:]
        if end >= 0:
            self.complete += 1
            self.state = "tail"
        return end >= 0

    def _tail(self, out: list[tuple[Any, ...]]) -> bool:
        """The call's closing text; then, in a block, the next call or the block's end."""
        tail = self.fmt.tail
        if len(self.buf) < len(tail):
            return False
        self.buf = self.buf[len(tail):]
        self.state = "between" if self.fmt.block_open else "text"
        self._after_call = True
        return True

    def _between(self, out: list[tuple[Any, ...]]) -> bool:
        for mark, state in ((self.fmt.separator, "head"), (self.fmt.block_close, "text")):
            if self.buf.startswith(mark):
                self.buf = self.buf[len(mark):]
                self.state = state
                return True
        return False

    def _scan(self, text: str) -> int:
        """Advance the JSON scanner over ``text``; the index just past the value's end, or
        -1 when it has not ended (arguments are objects: the value ends where its braces
        balance outside strings)."""
        for i, c in enumerate(text):
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif c == '"':
                    self._in_string = False
                    if self._depth == 0:
                        return i + 1
            elif c == '"':
                self._in_string = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return i + 1
        return -1

    def finished_calls(self) -> list[dict[str, Any]] | None:
        """The calls when there is at least one and every one is complete, closing marker
        (and block) included; else None (cut short: the answer stays text)."""
        if self.calls and self.complete == len(self.calls) and self.state == "text":
            return self.calls
        return None


def native_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template that renders tool calls itself: assistant ``tool_calls`` in
    transformers' shape (``arguments`` parsed to an object), tool results with their
    ``tool_call_id``."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m.get("tool_calls"):
            calls = []
            for fn, call_id in zip(m["tool_calls"], m.get("tool_call_ids") or [None] * 99):
                args = fn.get("arguments", "{}")
                try:
                    args = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    pass
                call = {"type": "function", "function": {"name": fn.get("name", ""),
                                                         "arguments": args}}
                if call_id is not None:
                    call["id"] = call_id
                calls.append(call)
            msg["tool_calls"] = calls
        if m.get("tool_call_id") is not None:
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out
