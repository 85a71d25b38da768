"""Lazy grammars: free text until a trigger, then a grammar (llama.cpp's ``grammar_lazy``).

llama.cpp (``common/sampling.cpp``, ``src/llama-grammar.cpp``) leaves a lazy grammar idle
while the text generated so far contains no trigger, then feeds it the text from the start of
the trigger's match (or of the pattern's first capture group) and constrains everything after.
Here the same language is one grammar, so masks enforce it from the first token:

    output := F                      no trigger fired (F may be empty)
            | X_i  G/w_i             X_i: text up to the first point where a trigger fires,
                                     w_i: what that trigger hands to G, G/w: what may follow
                                     w in a sentence of G (:func:`~.free_text.quotient`)
            | F? <token>  G/value    a token trigger

Trigger types (llama.cpp ``common_grammar_trigger_type``; given by name or by its number):

- ``word`` (1): a literal string, anywhere in the text; G receives the word itself.
- ``pattern`` (2): a regex matching anywhere; G receives the match from its first capture
  group on (the whole match without one).
- ``pattern_full`` (3): a regex that must match the whole text so far (``^...$``); G receives
  the text from the first capture group on.
- ``token`` (0): the token id ``token``; G receives ``value``, the token's text.

What a pattern hands to G must be a finite set of strings (``<tool_call>``,
``<tool_call>|<function=``): G continues after one of them. Other patterns raise
:class:`~lexguide.errors.GrammarError` saying so. Free text is any UTF-8 text in which no trigger
fires, so no trigger can be skipped, even split across tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lexguide.errors import GrammarError, RegexError
from lexguide.grammar.free_text import quotient
from lexguide.grammar.ir import GrammarBuilder, GrammarIR, TokenSet
from lexguide.regex import nodes as rx
from lexguide.regex.syntax import parse_regex

__all__ = ["TRIGGER_TYPES", "compile_lazy"]

#: llama.cpp's ``common_grammar_trigger_type`` values by name
TRIGGER_TYPES = {"token": 0, "word": 1, "pattern": 2, "pattern_full": 3}
_TYPE_NAMES = {v: k for k, v in TRIGGER_TYPES.items()}
MAX_FED_STRINGS = 64


def _err(i: int, message: str) -> GrammarError:
    return GrammarError(f"lazy grammar trigger {i}: {message}")


def _first_group(pattern: str) -> int | None:
    """Offset of the ``(`` opening the first capturing group at nesting depth 0; None if the
    pattern has no capturing group. Raises ValueError when the first one is nested."""
    depth = 0
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        elif c == "(":
            capturing = not pattern.startswith("(?", i) or pattern.startswith(("(?P<", "(?<"), i) \
                and not pattern.startswith(("(?<=", "(?<!"), i)
            if capturing:
                if depth:
                    raise ValueError("the first capture group is inside another group")
                return i
            depth += 1
        elif c == ")":
            depth -= 1
        i += 1
    return None


def _regex(pattern: str, i: int) -> int:
    try:
        return parse_regex(pattern)
    except RegexError as e:
        raise _err(i, f"invalid pattern {pattern!r}: {e.detail}") from None


def _texts(fires: list[tuple[int, int, bytes]], i: int) -> str:
    return ", ".join(repr(fed.decode(errors="replace")) for j, _, fed in fires if j == i)


def _normalize(trigger: Any, i: int) -> tuple[str, str, int | None]:
    """``(kind, value, token_id)`` of one trigger (a string is a word)."""
    if isinstance(trigger, str):
        trigger = {"type": "word", "value": trigger}
    if not isinstance(trigger, dict):
        raise _err(i, f"expected a string or an object, got {type(trigger).__name__}")
    extra = sorted(set(trigger) - {"type", "value", "token"})
    if extra:
        raise _err(i, f"unknown field {extra[0]!r} (expected type, value, token)")
    kind = trigger.get("type", "word")
    if isinstance(kind, int) and not isinstance(kind, bool):
        kind = _TYPE_NAMES.get(kind, kind)
    if not isinstance(kind, str) or kind not in TRIGGER_TYPES:
        raise _err(i, f"unknown trigger type {kind!r} (expected one of "
                   f"{', '.join(TRIGGER_TYPES)} or their numbers 0-3)")
    value = trigger.get("value", "")
    if not isinstance(value, str):
        raise _err(i, "'value' must be a string")
    token = trigger.get("token")
    if kind == "token":
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise _err(i, "a token trigger needs 'token', a token id")
    elif not value:
        raise _err(i, f"a {kind} trigger needs a non-empty 'value'")
    return kind, value, token


def compile_lazy(ir: GrammarIR, triggers: Sequence[Any]) -> GrammarIR:
    """The grammar of a lazy grammar ``ir`` with ``triggers`` (see the module docstring).

    Pure; costs the derivative of ``ir`` by each trigger's text. Raises GrammarError for a
    malformed or unsupported trigger, and for one after which ``ir`` cannot continue (no
    sentence of ``ir`` starts with what the trigger hands it).
    """
    if isinstance(triggers, (str, dict)) or not isinstance(triggers, Sequence) or not triggers:
        raise GrammarError("a lazy grammar needs a non-empty list of triggers")
    any_char = rx.any_char(True)
    text = rx.star(any_char)
    fires: list[tuple[int, int, bytes]] = []  # (trigger index, fired-at language, fed text)
    tokens: list[tuple[int, int, bytes]] = []  # (trigger index, token id, fed text)
    for i, trig in enumerate(triggers):
        kind, value, token = _normalize(trig, i)
        if kind == "token":
            tokens.append((i, token, value.encode()))
        elif kind == "word":
            fires.append((i, rx.concat(text, rx.literal(value.encode())), value.encode()))
        else:
            pattern = value
            if kind == "pattern_full":
                pattern = pattern[1:] if pattern.startswith("^") else pattern
                pattern = pattern[:-1] if pattern.endswith("$") and not pattern.endswith("\\$") \
                    else pattern
            try:
                at = _first_group(pattern)
            except ValueError as e:
                raise _err(i, f"pattern {value!r}: {e}; lexguide needs it at the top "
                           "level") from None
            at = 0 if at is None else at
            before = _regex(pattern[:at], i)
            fed = rx.literal_set(_regex(pattern[at:], i), MAX_FED_STRINGS)
            if not fed or not all(fed):
                raise _err(i, f"pattern {value!r}: the text it hands to the grammar (from its "
                           "first capture group on, or the whole match) must be a finite set "
                           "of non-empty strings for lexguide")
            if kind == "pattern":
                before = rx.concat(text, before)
            fires.extend((i, rx.concat(before, rx.literal(f)), f) for f in fed)
    builder = GrammarBuilder()
    fired = rx.alt(*[f for _, f, _ in fires]) if fires else rx.NOTHING
    not_fired = rx.complement(rx.concat(fired, text))
    after_fire = rx.concat(fired, any_char, text)
    free = rx.intersect(rx.concat(any_char, text), not_fired)
    free_sym = builder.optional(builder.lexeme(free, "text"))
    alts: list[tuple[int, ...]] = [(free_sym,)]
    leads: dict[int, int] = {}  # per trigger: how many of its texts the grammar can go on from
    for i, fire, fed in fires:
        rest = quotient(builder, ir, fed)
        leads[i] = leads.get(i, 0) + (rest is not None)
        if rest is not None:  # else the trigger fires there and nothing can follow: excluded
            enter = rx.intersect(fire, text, rx.complement(after_fire))
            alts.append((builder.lexeme(enter, "text"), rest))
    for i, n in leads.items():
        if not n:
            raise _err(i, "no sentence of the grammar starts with the text this trigger hands "
                       f"it ({_texts(fires, i)})")
    for i, token, fed in tokens:
        rest = quotient(builder, ir, fed)
        if rest is None:
            raise _err(i, "no sentence of the grammar starts with "
                       f"{fed.decode(errors='replace')!r}, "
                       "the token trigger's text")
        tok = builder.token_lexeme(TokenSet(ranges=((token, token),)))
        alts.append((free_sym, tok, rest))
    return builder.build(builder.alt(alts, "lazy"))
