"""JSON Schema → grammar IR: JSON Schema 2020-12 semantics, llguidance's ``x-guidance`` options.

Two phases, as in llguidance: :mod:`~lexguide.jsonschema.build` turns raw JSON into a typed
schema IR (references resolved, ``allOf`` merged, every keyword validated), and
:mod:`~lexguide.jsonschema.compiler` turns that IR into grammar rules over JSON lexemes.

Importing this package registers :func:`add_json_schema` as the ``%json`` compiler of
:mod:`lexguide.grammar.ir` (used by Lark ``%json {...}`` and ``Grammar.from_json_schema``).

Options (keyword arguments, or ``"x-guidance"`` in the top-level schema object):

``whitespace``      ``"bounded"`` (default): at most one newline plus up to 24 spaces/tabs
                    of indentation, or one space, at each place JSON allows whitespace
                    (:data:`BOUNDED_WHITESPACE`; keeps generation from running into
                    whitespace); ``"flexible"``: any JSON whitespace, as the spec allows;
                    ``"compact"``: none.
``whitespace_flexible`` bool: True is ``whitespace="flexible"``, False ``"compact"``.
``whitespace_pattern`` regex (Rust syntax) matched at most once at each place JSON allows
                    whitespace; overrides the above.
``indent``          int or str: exact ``json.dumps(indent=...)`` layout (no other whitespace).
``item_separator``, ``key_separator``  literal separators (defaults ``,`` and ``:``; ``: `` with indent).
``lenient``         keywords that cannot be enforced are ignored instead of raising
                    ``SchemaError``; each is listed on ``Grammar.notes`` (``CompileNote``).
``strict_formats``  unknown ``format`` values are errors (default: annotations, accepted as
                    any string and listed on ``Grammar.notes``; known formats are enforced).
``coerce_one_of``   treat ``oneOf`` as ``anyOf`` when branches are not provably disjoint.
``max_indent_depth`` nesting depth up to which ``indent`` applies (default 32; deeper is compact).
``draft``           force a draft (4, 6, 7, 2019, 2020) instead of reading ``$schema``.
``json_allowed_escapes`` letters of ``nrbtf\\"u`` that may follow ``\\`` in strings and keys
                    (default all; without ``u`` no ``\\uXXXX`` at all).
``json_allow_general_unicode_escapes`` bool: ``\\uXXXX`` (and surrogate pairs, one character
                    each) for every character, not only those that must be escaped, in string
                    values and object keys (a key is its decoded text, RFC 8259 §4: with this
                    option ``"\\u0041b"`` is the key ``"Ab"``). Default off, as llguidance: a
                    declared key then has one spelling and is forced text during generation.
                    See :mod:`lexguide.jsonschema.escapes`.
``refs``            ``{uri: schema}``: documents that ``$ref`` may point to (never fetched);
                    the draft 4/6/7/2019-09/2020-12 metaschemas are bundled.
"""

from __future__ import annotations

import json
from typing import Any

from lexguide.errors import RegexError, SchemaError, line_col
from lexguide.grammar.ir import GrammarBuilder, GrammarIR, set_json_schema_compiler
from lexguide.jsonschema.build import BuildOptions, SchemaBuilder
from lexguide.jsonschema.compiler import WHITESPACE_RX, LayoutOptions, SchemaCompiler
from lexguide.jsonschema.escapes import escapes_from_options
from lexguide.jsonschema.refs import anchor_keys, detect_draft, escape_pointer, id_keyword
from lexguide.limits import MAX_JSON_DEPTH, json_text_too_deep, json_value_scan
from lexguide.regex import nodes as rx
from lexguide.regex.syntax import parse_regex

__all__ = ["BOUNDED_WHITESPACE", "SchemaError", "add_json_schema", "compile_json_schema"]

_OPTION_NAMES = frozenset((
    "whitespace", "indent", "item_separator", "key_separator", "lenient", "coerce_one_of",
    "max_indent_depth", "draft", "strict_formats", "whitespace_flexible", "whitespace_pattern",
    "json_allowed_escapes", "json_allow_general_unicode_escapes", "refs",
))
#: The default whitespace between JSON tokens: one optional space, or one newline and an
#: indentation of at most 24 spaces/tabs (pretty-printed JSON up to 12 levels at indent 2).
BOUNDED_WHITESPACE = r"[ ]|\r?\n[ \t]{0,24}"
_WHITESPACE_MODES = ("bounded", "flexible", "compact")
_XGUIDANCE = frozenset((
    "whitespace_flexible", "whitespace_pattern", "item_separator", "key_separator",
    "coerce_one_of", "lenient", "json_allowed_escapes", "json_allow_general_unicode_escapes",
))


def _regex(value: Any, name: str) -> int:
    if not isinstance(value, str):
        raise SchemaError(f"{name} must be a string", pointer="/x-guidance", keyword=name)
    try:
        return parse_regex(value)
    except RegexError as e:
        raise SchemaError(f"{name}: {e}", pointer="/x-guidance", keyword=name) from None


def _x_guidance(schema: Any) -> tuple[Any, dict[str, Any]]:
    """Split the top-level ``x-guidance`` options off the schema."""
    if not isinstance(schema, dict) or "x-guidance" not in schema:
        return schema, {}
    opts = schema["x-guidance"]
    if not isinstance(opts, dict):
        raise SchemaError("x-guidance must be an object", pointer="/x-guidance")
    for k in opts:
        if k not in _XGUIDANCE:
            raise SchemaError(f"unknown field `{k}`", pointer="/x-guidance", keyword=k)
    for name, kind in (("json_allowed_escapes", str), ("json_allow_general_unicode_escapes", bool),
                       ("whitespace_flexible", bool), ("lenient", bool),
                       ("coerce_one_of", bool)):
        if name in opts and opts[name] is not None and not isinstance(opts[name], kind):
            raise SchemaError(f"{name} must be a {kind.__name__}", pointer="/x-guidance",
                              keyword=name)
    return {k: v for k, v in schema.items() if k != "x-guidance"}, opts


def _layout(options: dict[str, Any], xg: dict[str, Any]) -> LayoutOptions:
    indent = options.get("indent")
    if isinstance(indent, bool) or (indent is not None and not isinstance(indent, (int, str))):
        raise TypeError("indent must be an int, a str or None")
    if isinstance(indent, int):
        if indent < 0:
            raise ValueError("indent must be >= 0")
        indent = " " * indent
    ws = options.get("whitespace", "bounded")
    if ws not in _WHITESPACE_MODES:
        raise ValueError(f"whitespace must be one of {_WHITESPACE_MODES}, not {ws!r}")
    pattern = options.get("whitespace_pattern")
    # x-guidance (written in the schema) takes precedence over keyword options
    for src in (options, xg):
        if "whitespace_flexible" in src:
            ws = "flexible" if src["whitespace_flexible"] else "compact"
        if src.get("whitespace_pattern") is not None:
            pattern = src["whitespace_pattern"]
    skip: int | None = None
    explicit_ws: int | None = None
    if pattern is not None:
        explicit_ws = _regex(pattern, "whitespace_pattern")
    elif indent is None and ws == "flexible":
        skip = WHITESPACE_RX
    elif indent is None and ws == "bounded":
        explicit_ws = parse_regex(BOUNDED_WHITESPACE)
    item = rx.literal(b",")
    key = rx.literal(b": " if indent is not None else b":")
    for name, default in (("item_separator", None), ("key_separator", None)):
        if name in xg:
            val = _regex(xg[name], name)
        elif options.get(name) is not None:
            if not isinstance(options[name], str):
                raise TypeError(f"{name} must be a str")
            val = rx.literal(options[name].encode())
        else:
            continue
        if name == "item_separator":
            item = val
        else:
            key = val
    depth = options.get("max_indent_depth", 32)
    allowed, general = options.get("json_allowed_escapes"), options.get(
        "json_allow_general_unicode_escapes")
    allowed = xg.get("json_allowed_escapes", allowed)
    general = xg.get("json_allow_general_unicode_escapes", general)
    if allowed is not None and not isinstance(allowed, str):
        raise TypeError("json_allowed_escapes must be a str")
    try:
        escapes = escapes_from_options(allowed, general)
    except ValueError as e:
        raise SchemaError(str(e), pointer="/x-guidance", keyword="json_allowed_escapes") from None
    return LayoutOptions(skip, item, key, indent, depth, explicit_ws, escapes)


def add_json_schema(builder: GrammarBuilder, schema: Any, *, lexeme_class: int = 0,
                    **options: Any) -> int:
    """Add the rules of ``schema`` to ``builder`` and return the symbol of its value.

    Mutates ``builder`` (lexemes go into a lexeme class of their own whose skip regex is the
    JSON whitespace, so ``lexeme_class`` of the caller is not changed). Cost: linear in the
    schema plus regex construction. Raises :class:`SchemaError` (with the JSON pointer and
    keyword) for invalid or unsupported schemas, ``TypeError`` for unknown options.
    """
    del lexeme_class  # our lexemes need their own skip regex; see the docstring
    unknown = set(options) - _OPTION_NAMES
    if unknown:
        raise TypeError(f"unknown JSON schema option(s): {sorted(unknown)}")
    schema, has_anchors = _load(schema, options.get("draft"))
    schema, xg = _x_guidance(schema)
    lenient = bool(xg.get("lenient", options.get("lenient", False)))
    coerce = bool(xg.get("coerce_one_of", options.get("coerce_one_of", False)))
    layout = _layout(options, xg)
    schemas = compiler = None
    try:
        schemas = SchemaBuilder(schema, BuildOptions(
            lenient, coerce, options.get("draft"), bool(options.get("strict_formats", False)),
            options.get("refs")), has_anchors=has_anchors)
        root = schemas.build_root()
        compiler = SchemaCompiler(builder, schemas, layout, lenient=lenient)
        start = compiler.compile_root(root)
        builder.notes.extend(schemas.notes)
        return start
    except RecursionError:  # backstop: the nesting limits make this unreachable in practice
        raise SchemaError("schema is nested too deeply to compile") from None
    finally:
        for part in (compiler, schemas):  # break their reference cycles
            if part is not None:
                part.release()


def _load(schema: Any, draft: int | None) -> tuple[Any, bool]:
    """The schema as a JSON value (JSON text is parsed; either form must nest at most
    :data:`~lexguide.limits.MAX_JSON_DEPTH` levels), and whether it has an id or anchor
    keyword of its draft (``draft``, else its ``$schema``), found in the same walk. Raises
    :class:`SchemaError` (with the line:col of JSON text, or the JSON pointer of the first
    level too deep)."""
    if isinstance(schema, bytes):
        schema = schema.decode("utf-8", "replace")
    if isinstance(schema, str):
        deep = json_text_too_deep(schema)
        if deep is not None:
            line, col = line_col(schema, deep)
            raise SchemaError(f"schema JSON text nested more than {MAX_JSON_DEPTH} levels deep "
                              f"at line {line}:{col}")
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"schema is not valid JSON: {e}") from None
    keys = anchor_keys(id_keyword(draft or detect_draft(schema)))
    path, has_anchors = json_value_scan(schema, keys)
    if path is not None:
        raise SchemaError(f"schema nested more than {MAX_JSON_DEPTH} JSON levels deep",
                          pointer="".join(f"/{escape_pointer(str(k))}" for k in path))
    return schema, has_anchors


def compile_json_schema(schema: Any, **options: Any) -> GrammarIR:
    """Compile a JSON Schema (dict, bool or JSON text) to a standalone :class:`GrammarIR`.

    See the module docstring for ``options``. Raises :class:`SchemaError`.
    """
    builder = GrammarBuilder()
    start = add_json_schema(builder, schema, **options)
    return builder.build(start)


set_json_schema_compiler(add_json_schema)
