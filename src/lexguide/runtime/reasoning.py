"""Reasoning models: think markers, a constraint that starts after the think section, a token
budget for the thinking, and the split of an answer into reasoning and content.

A reasoning model writes ``<think> ... </think>`` before its answer. The markers are read
off the chat template (:func:`find_think_markers`) or given; whether the output starts
*inside* the think section is read off the rendered prompt (:func:`think_state`: a template
whose generation prompt opens ``<think>`` leaves it open, one that writes an empty
``<think></think>`` to switch thinking off leaves it closed).

The constraint is composed as a structural tag (:func:`reasoning_format`): free text up to the
end marker, then the answer's format. Free text never holds the end marker, so the grammar
cannot be skipped, and budget-aware masks see the whole output: when ``max_tokens`` gets
tight inside the think section the masks close it in time for the answer to complete.

The thinking budget is counted by the generation loop (:class:`ThinkBudget`), one count per
generated token inside the think section; when it is spent, the end marker's tokens are
forced (llama.cpp's reasoning-budget sampler does the same). They are forced only where the
grammar accepts them, so a character split over tokens is finished first (one more token at
most per byte still missing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lexguide.errors import ModelError

__all__ = ["KNOWN_THINK_MARKERS", "REASONING_FORMATS", "ReasoningStream", "ThinkBudget",
           "ThinkMarkers", "answer_format", "check_budget", "find_think_markers",
           "partial_marker", "reasoning_format", "split_reasoning", "think_state"]

REASONING_FORMATS = ("none", "deepseek")  # where think text goes: in content, or apart
_SPACE = " \t\r\n"
# whitespace the model may write between the end marker and the answer
_SEPARATOR = {"type": "regex", "pattern": r"[ \t\r\n]{0,4}"}


@dataclass(frozen=True, slots=True)
class ThinkMarkers:
    """The strings that open and close a think section."""

    begin: str
    end: str


#: Pairs looked for in a chat template, in this order (Qwen3, DeepSeek-R1, QwQ; Command R7B;
#: Kimi).
KNOWN_THINK_MARKERS = (
    ThinkMarkers("<think>", "</think>"),
    ThinkMarkers("<|START_THINKING|>", "<|END_THINKING|>"),
    ThinkMarkers("\u25c1think\u25b7", "\u25c1/think\u25b7"),
)


def find_think_markers(template: str | None) -> ThinkMarkers | None:
    """The think markers a chat template uses (its source names the end marker), or None."""
    if not template:
        return None
    for m in KNOWN_THINK_MARKERS:
        if m.end in template:
            return m
    return None


def think_state(prompt: str, markers: ThinkMarkers) -> str:
    """``"open"`` when ``prompt`` ends inside a think section (its last marker is the begin
    marker, followed by whitespace at most), ``"closed"`` when it ends right after a closed
    one (thinking switched off by the template), else ``"none"`` (the model may open one)."""
    tail = prompt.rstrip(_SPACE)
    if tail.endswith(markers.begin):
        return "open"
    if tail.endswith(markers.end):
        return "closed"
    return "none"


def answer_format(json_schema: Any = None, grammar: str | None = None,
                  regex: str | None = None, structural_tag: Any = None) -> dict[str, Any]:
    """The structural-tag format of an answer: a schema (dict, bool or JSON text), grammar
    text (Lark variant, grammar list or GBNF), a regex, a structural tag (any shape
    ``Grammar.from_structural_tag`` takes, dict or JSON text: its format object), or any
    text when none is given. Raises ``GrammarError`` (JSON path) for a malformed tag
    envelope; the format itself is checked when the composed grammar compiles."""
    if structural_tag is not None:
        from lexguide.grammar.structural_tag import normalize_spec

        fmt = dict(normalize_spec(structural_tag))
        fmt.pop("__path", None)
        return fmt
    if json_schema is not None:
        schema = json.loads(json_schema) if isinstance(json_schema, str) else json_schema
        return {"type": "json_schema", "json_schema": schema}
    if grammar is not None:
        return {"type": "grammar", "grammar": grammar}
    if regex is not None:
        return {"type": "regex", "pattern": regex}
    return {"type": "any_text"}


def reasoning_format(markers: ThinkMarkers, state: str, answer: Mapping[str, Any],
                     budget: int | None = None) -> dict[str, Any]:
    """The structural-tag format of a whole output: the think section, then ``answer``.

    ``state`` is :func:`think_state`'s: ``open`` — free text up to the end marker first;
    ``none`` — the output may open a think section with the begin marker, or answer at
    once; ``closed`` — the answer alone. A ``budget`` of 0 leaves no room to think (an open
    section is closed at once by the end marker).
    """
    answer = dict(answer)
    if state == "closed" or (state == "none" and budget == 0):
        return answer
    think = {"type": "tag", "begin": markers.begin if state == "none" else "",
             "content": {"type": "any_text"}, "end": markers.end}
    tail = [answer] if answer.get("type") == "any_text" else [_SEPARATOR, answer]
    section = {"type": "sequence", "elements": [think, *tail]}
    if state == "open":
        return section
    return {"type": "or", "elements": [section, answer]}


class ThinkBudget:
    """Counts the tokens generated inside the think section and says when to force its end.

    Feed every generated token (sampled or forced) to :meth:`feed`; before sampling, ask
    :meth:`due` for the tokens to force (the end marker's, once ``budget`` tokens were spent
    thinking and the section is still open). Mutable, one per sequence; cheap (the output is
    looked at only until the think section ends).
    """

    __slots__ = ("begin", "budget", "buf", "end", "end_ids", "initial", "markers", "n", "start",
                 "state")

    def __init__(self, markers: ThinkMarkers, state: str, budget: int | None,
                 end_ids: list[int]) -> None:
        self.markers = markers
        self.initial = state  # think_state() of the prompt
        self.begin = markers.begin.encode()
        self.end = markers.end.encode()
        self.budget = budget
        self.end_ids = list(end_ids)
        self.buf = b""
        self.n = 0  # tokens spent inside the think section
        self.start = 0  # where the think text starts in buf
        self.state = {"open": "think", "none": "idle"}.get(state, "done")

    def feed(self, data: bytes) -> None:
        """One generated token's bytes."""
        if self.state == "done":
            return
        self.buf += data
        if self.state == "idle":
            head = self.buf.lstrip(_SPACE.encode())
            if head.startswith(self.begin):
                self.state = "think"
                self.start = len(self.buf) - len(head) + len(self.begin)
                self.n = -1  # the token completing the begin marker does not count
            elif not self.begin.startswith(head):
                self.state = "done"
                return
            else:
                return
        if self.end in self.buf[self.start:]:
            self.state = "done"
            return
        self.n += 1

    @property
    def thinking(self) -> bool:
        """Inside the think section."""
        return self.state == "think"

    def due(self) -> list[int]:
        """The end marker's tokens when the budget is spent inside the section, else []."""
        if self.state == "think" and self.budget is not None and self.n >= self.budget:
            return self.end_ids
        return []


def split_reasoning(text: str, markers: ThinkMarkers, state: str) -> tuple[str | None, str]:
    """(reasoning, content) of a whole output; reasoning is None without a think section.

    Whitespace around the think text and before the answer is dropped. An output cut short
    inside the section is all reasoning.
    """
    stream = ReasoningStream(markers, state)
    stream.feed(text, final=True)
    return stream.reasoning, "".join(stream.content)


class ReasoningStream:
    """Splits streamed text into ``("reasoning", text)`` and ``("content", text)`` pieces, the
    reasoning first; holds back text that may be the start of a marker (mutable). ``content``
    keeps the content pieces returned so far, :attr:`reasoning` the think text."""

    def __init__(self, markers: ThinkMarkers, state: str) -> None:
        self.markers = markers
        self.state = {"open": "think", "none": "start"}.get(state, "content")
        self.had_think = self.state == "think"
        self.buf = ""
        self.lead = True  # strip whitespace at the start of the current part
        self.content: list[str] = []
        self.thought: list[str] = []

    @property
    def reasoning(self) -> str | None:
        """The think text so far (None when the output opened no think section)."""
        return "".join(self.thought) if self.had_think else None

    def feed(self, text: str, final: bool = False) -> list[tuple[str, str]]:
        out = self._split(text, final)
        for kind, piece in out:
            (self.content if kind == "content" else self.thought).append(piece)
        return out

    def _split(self, text: str, final: bool) -> list[tuple[str, str]]:
        self.buf += text
        out: list[tuple[str, str]] = []
        while True:
            if self.state == "start":
                head = self.buf.lstrip(_SPACE)
                if head.startswith(self.markers.begin):
                    self.buf = head[len(self.markers.begin):]
                    self.state, self.had_think, self.lead = "think", True, True
                    continue
                if self.markers.begin.startswith(head) and not final:
                    return out
                self.state, self.lead = "content", False
                continue
            if self.lead:
                self.buf = self.buf.lstrip(_SPACE)
                if not self.buf and not final:
                    return out
                self.lead = False
            if self.state == "content":
                if self.buf:
                    out.append(("content", self.buf))
                self.buf = ""
                return out
            i = self.buf.find(self.markers.end)
            if i >= 0:
                if self.buf[:i].rstrip(_SPACE):
                    out.append(("reasoning", self.buf[:i].rstrip(_SPACE)))
                self.buf = self.buf[i + len(self.markers.end):]
                self.state, self.lead = "content", True
                continue
            keep = 0 if final else partial_marker(self.buf, self.markers.end)
            body = self.buf[:len(self.buf) - keep]
            ready = body if final else body.rstrip(_SPACE)
            if ready:
                out.append(("reasoning", ready))
            self.buf = self.buf[len(ready):]
            return out


def partial_marker(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


def check_budget(budget: int | None) -> int | None:
    """A reasoning budget as given (None or -1: unlimited → None); raises ModelError."""
    if budget is None or budget == -1:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ModelError(f"reasoning_budget must be -1 (unlimited) or >= 0, got {budget!r}")
    return budget
