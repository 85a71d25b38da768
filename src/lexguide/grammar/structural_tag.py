"""Structural tags: xgrammar's JSON description of structure inside free text, to grammar IR.

Accepted input (xgrammar ``python/xgrammar/structural_tag.py`` and its docs define the format):

- ``{"type": "structural_tag", "format": FORMAT}``;
- the legacy shape ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}],
  "triggers": [...]}`` (``type`` optional; SGLang's ``at_least_one`` allowed), which is one
  ``triggered_tags`` whose tags hold JSON Schemas;
- a bare ``FORMAT`` object.

``FORMAT`` types: ``const_string``, ``json_schema`` (``style: "json"``), ``regex``,
``grammar`` (Lark variant when it starts with ``%llguidance``, GBNF otherwise), ``any_text``
(``excludes``, ``max_chars``, ``max_tokens``), ``sequence``, ``or``, ``tag``
(``begin``: a string or a token object; ``content``; ``end``: a string, a list of strings or
a token object), ``triggered_tags``, ``dispatch`` (``rules``: [pattern, format] pairs;
``loop``; ``excludes``), ``tags_with_separator``, ``optional``, ``plus``, ``star``,
``repeat``, and the token-level formats of :mod:`lexguide.grammar.token_formats`. The XML
argument styles are rejected by name.

Semantics (see ``docs/structural_tags.md``): free text never contains a trigger, wherever it
would stand, so every trigger starts a tag; an unbounded format (``any_text``,
``triggered_tags``, ``dispatch``) ends at the first occurrence of what follows it (the
enclosing tag's ``end``, or a literal that follows it in a ``sequence``), or at the end of the
output.
Errors are :class:`~lexguide.errors.GrammarError` naming the JSON path of the field (``$`` is
the spec), or :class:`~lexguide.errors.SchemaError` for a bad JSON Schema inside it.
"""

from __future__ import annotations

import json
from typing import Any

from lexguide.errors import GrammarError, RegexError, SchemaError
from lexguide.grammar.free_text import FreeText, embed
from lexguide.grammar.gbnf import compile_gbnf
from lexguide.grammar.ir import GrammarBuilder, GrammarIR, json_schema_compiler
from lexguide.grammar.lark import compile_grammar_list, compile_lark
from lexguide.grammar.structural_fields import (
    NOTHING_FOLLOWS,
    Follow,
    as_dict,
    count,
    err,
    flag,
    kind_of,
    string,
    strings,
    token_set,
)
from lexguide.grammar.token_formats import TokenFormats
from lexguide.limits import MAX_NESTING_DEPTH
from lexguide.regex import nodes as rx
from lexguide.regex.syntax import parse_regex

__all__ = ["compile_structural_tag", "compile_text_grammar", "normalize_spec"]

_UNBOUNDED = ("any_text", "triggered_tags", "dispatch", "any_tokens", "token_triggered_tags",
              "token_dispatch")
_UNSUPPORTED = {"qwen_xml_parameter": "XML argument rendering"}
_FIELDS = {
    "const_string": ({"value"}, set()),
    "json_schema": ({"json_schema"}, {"style", "any_order", "max_whitespace_cnt"}),
    "grammar": ({"grammar"}, set()),
    "regex": ({"pattern"}, set()),
    "any_text": (set(), {"excludes", "max_tokens", "max_chars"}),
    "sequence": ({"elements"}, set()),
    "or": ({"elements"}, set()),
    "tag": ({"begin", "content", "end"}, set()),
    "triggered_tags": ({"triggers", "tags"}, {"at_least_one", "stop_after_first", "excludes"}),
    "tags_with_separator": ({"tags", "separator"}, {"at_least_one", "stop_after_first"}),
    "dispatch": ({"rules"}, {"loop", "excludes"}),
    "token": ({"token"}, set()),
    "exclude_token": (set(), {"exclude_tokens"}),
    "any_tokens": (set(), {"exclude_tokens", "max_tokens"}),
    "token_triggered_tags": ({"trigger_tokens", "tags"},
                             {"exclude_tokens", "at_least_one", "stop_after_first"}),
    "token_dispatch": ({"rules"}, {"loop", "exclude_tokens"}),
    "optional": ({"content"}, set()),
    "plus": ({"content"}, set()),
    "star": ({"content"}, set()),
    "repeat": ({"content", "min", "max"}, set()),
}
FORMAT_TYPES = tuple(_FIELDS)


def normalize_spec(spec: dict[str, Any] | str) -> dict[str, Any]:
    """The format object of any accepted input shape (legacy converted); raises GrammarError."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise GrammarError(f"structural tag is not valid JSON: {e.msg}", text=e.doc,
                               offset=e.pos) from None
        except RecursionError:
            raise GrammarError("structural tag JSON is nested too deeply") from None
    if not isinstance(spec, dict):
        raise err("$", f"a structural tag is a JSON object, got {kind_of(spec)}")
    if "structures" in spec:
        return _legacy(spec)
    if spec.get("type") == "structural_tag":
        extra = sorted(set(spec) - {"type", "format"})
        if extra:
            raise err("$", f"unknown field {extra[0]!r} (expected 'type' and 'format')")
        if "format" not in spec:
            raise err("$", "missing field 'format'")
        return {"__path": "$.format", **as_dict(spec["format"], "$.format")}
    return spec


def _legacy(spec: dict[str, Any]) -> dict[str, Any]:
    extra = sorted(set(spec) - {"type", "structures", "triggers", "at_least_one"})
    if extra:
        raise err("$", f"unknown field {extra[0]!r} in the legacy structural tag (expected "
                   "'structures' and 'triggers')")
    if spec.get("type", "structural_tag") != "structural_tag":
        raise err("$.type", f"expected 'structural_tag', got {spec['type']!r}")
    structures = spec["structures"]
    if not isinstance(structures, list):
        raise err("$.structures", f"expected an array, got {kind_of(structures)}")
    tags = []
    for i, s in enumerate(structures):
        where = f"$.structures[{i}]"
        s = as_dict(s, where)
        for key in ("begin", "schema", "end"):
            if key not in s:
                raise err(where, f"missing field {key!r}")
        extra = sorted(set(s) - {"begin", "schema", "end"})
        if extra:
            raise err(where, f"unknown field {extra[0]!r}")
        tags.append({"type": "tag", "begin": s["begin"], "end": s["end"],
                     "content": {"type": "json_schema", "json_schema": s["schema"]}})
    if "triggers" not in spec:
        raise err("$", "missing field 'triggers'")
    return {"__path": "$", "type": "triggered_tags", "triggers": spec["triggers"], "tags": tags,
            "at_least_one": spec.get("at_least_one", False)}


def compile_structural_tag(spec: dict[str, Any] | str, **json_options: Any) -> GrammarIR:
    """Compile a structural tag (any shape :func:`normalize_spec` takes) to the grammar IR.

    ``json_options`` go to the JSON Schema compiler for every ``json_schema`` format (the
    keyword options of ``Grammar.from_json_schema``, e.g. ``whitespace="flexible"``); a
    format's ``max_whitespace_cnt`` takes precedence. Pure; costs the compile of every
    embedded schema and grammar. Raises GrammarError (JSON path of the field) or SchemaError
    (a JSON Schema inside it, or a bad option).
    """
    fmt = normalize_spec(spec)
    root = fmt.pop("__path", "$")
    compiler = _Compiler(json_options)
    start = compiler.format(fmt, root, Follow(None, True), 0)
    ir = compiler.builder.build(start)
    if ir.is_empty:
        raise err(root, "the structural tag matches no output at all")
    return ir


def compile_text_grammar(text: str) -> GrammarIR:
    """A grammar text: Lark variant (``%llguidance`` first), grammar list (``{`` first) or
    GBNF, as ``Grammar.parse`` routes them."""
    stripped = text.lstrip()
    if stripped.startswith("%llguidance"):
        return compile_lark(text, reject_empty=True)
    if stripped.startswith("{"):
        return compile_grammar_list(text, reject_empty=True)
    return compile_gbnf(text, reject_empty=True)


class _Compiler(TokenFormats):
    """One compile: formats to symbols of one :class:`GrammarBuilder`."""

    def __init__(self, json_options: dict[str, Any]) -> None:
        self.builder = GrammarBuilder()
        self.json_options = json_options

    # -- helpers --------------------------------------------------------------------------
    def literal(self, data: bytes) -> int | None:
        """A lexeme of exactly ``data``; None for the empty string."""
        if not data:
            return None
        return self.builder.lexeme(rx.literal(data), json.dumps(data.decode("utf-8", "replace")))

    def seq(self, parts: list[int | None], name: str) -> int:
        syms = [p for p in parts if p is not None]
        return self.builder.seq(syms, name) if syms else self.builder.empty()

    def ends_lexeme(self, follow: Follow) -> int | None:
        """The symbol of what ends the format: its end token, or one of its end strings
        (each followed by its continuation when ``follow.then`` routes them); None: none."""
        if follow.token is not None:
            return self.builder.token_lexeme(follow.token)
        if not follow.ends:
            return None
        if follow.then is not None:
            return self.builder.alt([(self.builder.lexeme(rx.literal(e), "end"), then)
                                     for e, then in zip(follow.ends, follow.then)], "end")
        return self.builder.lexeme(rx.alt(*[rx.literal(e) for e in follow.ends]), "end")

    def text_until_end(self, free: FreeText, follow: Follow, max_tokens: int | None = None,
                       name: str = "text") -> int:
        """Free text up to and including the first of ``follow.ends`` (one lexeme per end
        when ``follow.then`` routes them to their continuations)."""
        ends = follow.ends or ()
        if follow.then is None:
            return self.builder.lexeme(free.until(ends), name, max_tokens=max_tokens)
        return self.builder.alt([(self.builder.lexeme(free.until((e,)), name,
                                                      max_tokens=max_tokens), then)
                                 for e, then in zip(ends, follow.then)], name)

    def with_ends(self, sym: int, follow: Follow, name: str) -> int:
        return self.seq([sym, self.ends_lexeme(follow)], name)

    # -- dispatch -------------------------------------------------------------------------
    def format(self, fmt: Any, path: str, follow: Follow, depth: int,
               consumed: bytes = b"") -> int:
        """The symbol of ``fmt`` followed by ``follow.ends``; ``consumed`` is a prefix of the
        format's text that an earlier lexeme already matched (a trigger, or a literal an
        unbounded format ended at)."""
        fmt = as_dict(fmt, path)
        if depth > MAX_NESTING_DEPTH:
            raise err(path, f"formats nested more than {MAX_NESTING_DEPTH} levels deep")
        kind = fmt.get("type")
        if kind is None:
            raise err(path, "missing field 'type'")
        if not isinstance(kind, str):
            raise err(f"{path}.type", f"expected a string, got {kind_of(kind)}")
        if kind in _UNSUPPORTED:
            raise err(f"{path}.type", f"format type {kind!r} ({_UNSUPPORTED[kind]}) is not "
                       "supported by lexguide")
        if kind not in _FIELDS:
            raise err(f"{path}.type", f"unknown format type {kind!r} (expected one of "
                       f"{', '.join(FORMAT_TYPES)})")
        required, optional = _FIELDS[kind]
        for key in sorted(required):
            if key not in fmt:
                raise err(path, f"missing field {key!r} of a {kind!r} format")
        extra = sorted(set(fmt) - required - optional - {"type"})
        if extra:
            raise err(path, f"unknown field {extra[0]!r} of a {kind!r} format")
        if consumed and kind not in ("const_string", "tag", "sequence"):
            raise err(path, f"a {kind!r} format cannot follow an unbounded format: only a "
                       "literal start (const_string, tag) can end one")
        if kind in _UNBOUNDED and follow.ends is None and follow.token is None and not follow.eos:
            raise err(path, f"a {kind!r} format must be the content of a tag, be followed by "
                       "a literal (const_string, tag, or an or of them) or end the output")
        return getattr(self, "f_" + kind)(fmt, path, follow, depth + 1, consumed)

    # -- leaves ---------------------------------------------------------------------------
    def f_const_string(self, fmt, path, follow, depth, consumed) -> int:
        value = string(fmt["value"], f"{path}.value").encode()
        if not value.startswith(consumed):
            raise err(path, "internal: consumed text is not a prefix")
        rest = rx.literal(value[len(consumed):])
        fused = bool(follow.ends) and follow.then is None
        if fused:
            rest = rx.concat(rest, rx.alt(*[rx.literal(e) for e in follow.ends or ()]))
        sym = self.builder.empty() if rest == rx.EPSILON else \
            self.builder.lexeme(rest, json.dumps(fmt["value"]))
        return sym if fused else self.with_ends(sym, follow, "const")

    def f_regex(self, fmt, path, follow, depth, consumed) -> int:
        pattern = string(fmt["pattern"], f"{path}.pattern")
        try:
            node = parse_regex(pattern)
        except RegexError as e:
            raise err(f"{path}.pattern", f"invalid regex: {e.detail}") from None
        fused = bool(follow.ends) and follow.then is None
        if fused:  # one lexeme: the regex cannot swallow the end
            node = rx.concat(node, rx.alt(*[rx.literal(e) for e in follow.ends or ()]))
        if rx.nullable(node):
            sym = self.builder.optional(self.builder.lexeme(
                rx.intersect(node, rx.complement(rx.EPSILON)), f"/{pattern}/"))
        else:
            sym = self.builder.lexeme(node, f"/{pattern}/")
        return sym if fused else self.with_ends(sym, follow, "regex")

    def f_json_schema(self, fmt, path, follow, depth, consumed) -> int:
        style = fmt.get("style", "json")
        if style != "json":
            raise err(f"{path}.style", f"JSON argument style {style!r} is not supported by "
                       "lexguide (only 'json')")
        if fmt.get("any_order", False) is not False:
            raise err(f"{path}.any_order", "properties in any order are not supported by lexguide")
        options: dict[str, Any] = dict(self.json_options)
        n_ws = count(fmt, "max_whitespace_cnt", path)
        if n_ws is not None:
            options["whitespace_pattern"] = f"[ \\t\\n\\r]{{0,{n_ws}}}"
        schema = fmt["json_schema"]
        if not isinstance(schema, (dict, bool)):
            raise err(f"{path}.json_schema",
                       f"expected an object or a boolean, got {kind_of(schema)}")
        try:
            sym = json_schema_compiler()(self.builder, schema, lexeme_class=0, **options)
        except SchemaError as e:
            raise SchemaError(f"in the structural tag at {path}.json_schema: {e.detail}",
                              pointer=e.pointer, keyword=e.keyword) from None
        return self.with_ends(sym, follow, "json")

    def f_grammar(self, fmt, path, follow, depth, consumed) -> int:
        text = string(fmt["grammar"], f"{path}.grammar", empty=False)
        stripped = text.lstrip()
        try:
            if follow.ends and not stripped.startswith(("%llguidance", "{")):
                # GBNF picks its lexemes where greedy lexing keeps its language: let it see
                # the end too, or a last lexeme that can run into the end would swallow it
                ends = " | ".join(_gbnf_string(e) for e in follow.ends)
                ir = compile_gbnf(f"{text}\n{_GBNF_END_RULE} ::= root ({ends})\n",
                                  root=_GBNF_END_RULE, reject_empty=True)
                return embed(self.builder, ir)
            ir = compile_text_grammar(text)
        except GrammarError as e:
            raise GrammarError(f"structural tag at {path}.grammar: {e}") from None
        return self.with_ends(embed(self.builder, ir), follow, "grammar")

    def f_any_text(self, fmt, path, follow, depth, consumed) -> int:
        excludes = [s.encode() for s in strings(fmt.get("excludes", []), f"{path}.excludes")]
        max_chars = count(fmt, "max_chars", path)
        max_tokens = count(fmt, "max_tokens", path, minimum=1)
        free = FreeText(follow.ends or (), excludes, max_chars)
        if follow.ends:
            until = self.text_until_end(free, follow, max_tokens, "any_text")
            if max_tokens is None:
                return until
            # a budget: the text and its end within it, or text the budget cuts, then the end
            # (both lexemes read the same bytes; at the cut only the second can end)
            cut = self.builder.lexeme(free.to_end(), "any_text", max_tokens=max_tokens)
            return self.builder.alt([(until,), (cut, self.ends_lexeme(follow))], "any_text")
        text = self.builder.optional(self.builder.lexeme(free.to_end(), "any_text",
                                                          max_tokens=max_tokens))
        return self.seq([text, self.ends_lexeme(follow)], "any_text")

    # -- composites -----------------------------------------------------------------------
    def f_sequence(self, fmt, path, follow, depth, consumed) -> int:
        elements = fmt["elements"]
        if not isinstance(elements, list) or not elements:
            raise err(f"{path}.elements", "expected a non-empty array of formats")
        return self._sequence(elements, 0, path, follow, depth, consumed)

    def _sequence(self, elements: list[Any], start: int, path: str, follow: Follow, depth: int,
                  consumed: bytes) -> int:
        """``elements[start:]`` in order. An unbounded element ends where the literal start
        of the next one first appears; when the next one is an ``or`` of literal-led
        alternatives, at the first start of any of them, which picks the alternative."""
        parts: list[int | None] = []
        last = len(elements) - 1
        for i in range(start, last + 1):
            where = f"{path}.elements[{i}]"
            el = as_dict(elements[i], where)
            if i == last:
                parts.append(self.format(el, where, follow, depth, consumed))
                break
            nxt = elements[i + 1]
            if el.get("type") not in _UNBOUNDED:
                parts.append(self.format(el, where, NOTHING_FOLLOWS, depth, consumed))
                consumed = b""
                continue
            lit = _leading_literal(nxt)
            if lit:  # ends where the next element's literal start first appears
                parts.append(self.format(el, where, Follow((lit,), False), depth, consumed))
                consumed = lit
                continue
            routed = self._routes(nxt, f"{path}.elements[{i + 1}]", follow if i + 1 == last
                                  else NOTHING_FOLLOWS, depth)
            if routed is None:  # nothing ends the unbounded element: format() says so
                parts.append(self.format(el, where, NOTHING_FOLLOWS, depth, consumed))
                consumed = b""
                continue
            tail = self._sequence(elements, i + 2, path, follow, depth, b"") if i + 1 < last \
                else None
            ends = tuple(routed)
            then = tuple(self.seq([alt, tail], "sequence") for alt in routed.values())
            parts.append(self.format(el, where, Follow(ends, False, then=then), depth, consumed))
            break
        return self.seq(parts, "sequence")

    def _routes(self, fmt: Any, path: str, follow: Follow, depth: int) -> dict[bytes, int] | None:
        """For an ``or`` whose alternatives all start with a literal: that literal -> the
        symbol of the alternatives after it. None otherwise."""
        if not isinstance(fmt, dict) or fmt.get("type") != "or":
            return None
        alts = fmt.get("elements")
        if not isinstance(alts, list) or not alts:
            return None
        lits = [_leading_literal(a) for a in alts]
        if not all(lits):
            return None
        by_lit: dict[bytes, list[tuple[int]]] = {}
        for j, (alt, lit) in enumerate(zip(alts, lits)):
            start = lit or b""
            sym = self.format(alt, f"{path}.elements[{j}]", follow, depth, start)
            by_lit.setdefault(start, []).append((sym,))
        return {lit: self.builder.alt(syms, "or") for lit, syms in by_lit.items()}

    def f_or(self, fmt, path, follow, depth, consumed) -> int:
        elements = fmt["elements"]
        if not isinstance(elements, list) or not elements:
            raise err(f"{path}.elements", "expected a non-empty array of formats")
        syms = [self.format(el, f"{path}.elements[{i}]", follow, depth)
                for i, el in enumerate(elements)]
        return self.builder.alt([(s,) for s in syms], "or")

    def f_tag(self, fmt, path, follow, depth, consumed) -> int:
        if isinstance(fmt["begin"], dict) or isinstance(fmt["end"], dict):
            return self._token_tag(fmt, path, follow, depth)
        begin = string(fmt["begin"], f"{path}.begin").encode()
        if not begin.startswith(consumed):
            raise err(f"{path}.begin", "internal: consumed text is not a prefix")
        end_v = fmt["end"]
        ends = [end_v] if isinstance(end_v, str) else end_v
        if not isinstance(ends, list) or not ends:
            raise err(f"{path}.end", "expected a string or a non-empty array of strings")
        end_bytes = [string(e, f"{path}.end").encode() for e in ends]
        head = self.literal(begin[len(consumed):])
        if all(not e for e in end_bytes):  # no end: the content ends where the tag would
            content = self.format(fmt["content"], f"{path}.content", follow, depth)
            return self.seq([head, content], "tag")
        if not all(end_bytes):
            raise err(f"{path}.end", "an empty end string among non-empty ones is not supported")
        body = self.format(fmt["content"], f"{path}.content", Follow(tuple(end_bytes), False),
                           depth)
        return self.seq([head, body, self.ends_lexeme(follow)], "tag")

    def _token_tag(self, fmt, path, follow, depth) -> int:
        """A tag whose begin or end is a token object ``{"type": "token", "token": id | text}``
        (text: a special token's, such as ``<|im_end|>``)."""
        begin = fmt["begin"]
        if isinstance(begin, dict):
            head = self.builder.token_lexeme(token_set(begin, f"{path}.begin"))
        else:
            head = self.literal(string(begin, f"{path}.begin").encode())
        end = fmt["end"]
        if isinstance(end, dict):
            inner = Follow(None, False, token_set(end, f"{path}.end"))
        else:
            inner = Follow((string(end, f"{path}.end", empty=False).encode(),), False)
        body = self.format(fmt["content"], f"{path}.content", inner, depth)
        return self.seq([head, body, self.ends_lexeme(follow)], "tag")

    def _tags(self, fmt, path) -> list[dict[str, Any]]:
        tags = fmt["tags"]
        if not isinstance(tags, list) or not tags:
            raise err(f"{path}.tags", "expected a non-empty array of tag formats")
        for i, tag in enumerate(tags):
            if as_dict(tag, f"{path}.tags[{i}]").get("type") != "tag":
                raise err(f"{path}.tags[{i}].type", "expected a 'tag' format")
            string(tag.get("begin"), f"{path}.tags[{i}].begin")
        return tags

    def f_triggered_tags(self, fmt, path, follow, depth, consumed) -> int:
        triggers = [t.encode() for t in strings(fmt["triggers"], f"{path}.triggers")]
        if not triggers:
            raise err(f"{path}.triggers", "expected at least one trigger")
        tags = self._tags(fmt, path)
        excludes = [s.encode() for s in strings(fmt.get("excludes", []), f"{path}.excludes")]
        at_least_one = flag(fmt, "at_least_one", path)
        stop_after_first = flag(fmt, "stop_after_first", path)
        by_trigger: dict[bytes, list[int]] = {t: [] for t in triggers}
        for i, tag in enumerate(tags):
            begin = tag["begin"].encode()
            owners = [t for t in triggers if begin.startswith(t)]
            if len(owners) != 1:
                raise err(f"{path}.tags[{i}].begin", f"{tag['begin']!r} must start with exactly "
                           f"one trigger, it starts with {len(owners)}")
            by_trigger[owners[0]].append(i)
        for t, owned in by_trigger.items():
            if not owned:
                raise err(f"{path}.triggers", f"trigger {t.decode()!r} starts no tag")
        def rest(t: bytes) -> list[int]:  # after trigger t: the rest of one of its tags
            return [self.format(tags[i], f"{path}.tags[{i}]", NOTHING_FOLLOWS, depth, t)
                    for i in by_trigger[t]]

        first = None
        if at_least_one:
            first = self.builder.alt([(self.format(tag, f"{path}.tags[{i}]", NOTHING_FOLLOWS,
                                                   depth),) for i, tag in enumerate(tags)], "tag")
        return self._region(triggers, rest, excludes, follow, first, not stop_after_first)

    def f_dispatch(self, fmt, path, follow, depth, consumed) -> int:
        rules = fmt["rules"]
        if not isinstance(rules, list) or not rules:
            raise err(f"{path}.rules", "expected a non-empty array of [pattern, format] pairs")
        formats: dict[bytes, list[tuple[int, Any]]] = {}
        for i, rule in enumerate(rules):
            if not isinstance(rule, list) or len(rule) != 2:
                raise err(f"{path}.rules[{i}]", "expected a [pattern, format] pair")
            pattern = string(rule[0], f"{path}.rules[{i}][0]", empty=False).encode()
            formats.setdefault(pattern, []).append((i, rule[1]))
        excludes = [s.encode() for s in strings(fmt.get("excludes", []), f"{path}.excludes")]
        loop = fmt.get("loop", True)
        if not isinstance(loop, bool):
            raise err(f"{path}.loop", f"expected a boolean, got {kind_of(loop)}")

        def rest(p: bytes) -> list[int]:  # after pattern p: its format
            return [self.format(f, f"{path}.rules[{i}][1]", NOTHING_FOLLOWS, depth)
                    for i, f in formats[p]]

        return self._region(list(formats), rest, excludes, follow, None, loop)

    def _region(self, triggers: list[bytes], rest: Any, excludes: list[bytes], follow: Follow,
                first: int | None, loop: bool) -> int:
        """Free text in which each trigger leads to one of ``rest(trigger)`` (symbols for
        what follows it), then free text again if ``loop``; ``first``: a tag the region must
        start with. Ends at the first of ``follow.ends``, at ``follow.token`` or at EOS."""
        b = self.builder
        exits = tuple(triggers) + tuple(e for e in follow.ends or () if e not in triggers)
        free = FreeText(exits, excludes)
        steps = [(b.lexeme(free.until((t,)), "text"), after) for t in triggers for after in rest(t)]
        step = b.alt(steps, "triggered")
        end = self.ends_lexeme(follow)
        if follow.ends:
            leave: int | None = self.text_until_end(free, follow)
        else:
            leave = self.seq([b.optional(b.lexeme(free.to_end(), "text")), end], "text")
        if first is not None:
            if not loop:
                return self.seq([first, end], "region")
            return self.seq([first, b.star(step), leave], "region")
        if not loop:
            return b.alt([(leave,), (self.seq([step, end], "step"),)], "region")
        return self.seq([b.star(step), leave], "region")

    def f_tags_with_separator(self, fmt, path, follow, depth, consumed) -> int:
        tags = self._tags(fmt, path)
        separator = string(fmt["separator"], f"{path}.separator").encode()
        b = self.builder
        one = b.alt([(self.format(tag, f"{path}.tags[{i}]", NOTHING_FOLLOWS, depth),)
                     for i, tag in enumerate(tags)], "tag")
        if flag(fmt, "stop_after_first", path):
            body = one
        else:
            body = b.plus(one, self.literal(separator))
        if not flag(fmt, "at_least_one", path):
            body = b.optional(body)
        return self.with_ends(body, follow, "tags_with_separator")

    def _content(self, fmt, path, depth) -> int:
        return self.format(fmt["content"], f"{path}.content", NOTHING_FOLLOWS, depth)

    def f_optional(self, fmt, path, follow, depth, consumed) -> int:
        sym = self.builder.optional(self._content(fmt, path, depth))
        return self.with_ends(sym, follow, "optional")

    def f_plus(self, fmt, path, follow, depth, consumed) -> int:
        return self.with_ends(self.builder.plus(self._content(fmt, path, depth)), follow, "plus")

    def f_star(self, fmt, path, follow, depth, consumed) -> int:
        return self.with_ends(self.builder.star(self._content(fmt, path, depth)), follow, "star")

    def f_repeat(self, fmt, path, follow, depth, consumed) -> int:
        lo = count(fmt, "min", path)
        hi = fmt.get("max")
        if hi == -1:
            hi = None
        elif hi is not None:
            hi = count(fmt, "max", path)
        if lo is None or (hi is not None and hi < lo):
            raise err(path, "expected 0 <= min <= max (max -1: unbounded), got "
                       f"{lo!r}, {fmt['max']!r}")
        sym = self.builder.repeat(self._content(fmt, path, depth), lo, hi)
        return self.with_ends(sym, follow, "repeat")


_GBNF_END_RULE = "lexguide-tag-end"


def _gbnf_string(data: bytes) -> str:
    """A GBNF string literal of ``data`` (UTF-8 text)."""
    text = data.decode("utf-8", "replace")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("\r", "\\r").replace("\t", "\\t") + '"'


def _leading_literal(fmt: Any) -> bytes | None:
    """The literal text every match of ``fmt`` starts with, if it has a fixed one."""
    if not isinstance(fmt, dict):
        return None
    kind = fmt.get("type")
    if kind == "const_string" and isinstance(fmt.get("value"), str):
        return fmt["value"].encode() or None
    if kind == "tag" and isinstance(fmt.get("begin"), str):
        return fmt["begin"].encode() or None
    if kind == "sequence" and isinstance(fmt.get("elements"), list) and fmt["elements"]:
        return _leading_literal(fmt["elements"][0])
    return None

