"""What the integrations share: importing a framework, reading a constraint, masking torch
logits from a packed bitmask."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import Any

from lexguide.engine import Grammar
from lexguide.engine.matcher import mask_logits_rows
from lexguide.errors import LexguideError

__all__ = [
    "SPEC_KINDS", "TorchMasker", "as_grammar", "check_compiles", "grammar_from_spec", "require",
]

#: the keys of a per-request constraint (vLLM ``extra_args["lexguide"]``), one per request
SPEC_KINDS = ("json_schema", "grammar", "regex", "structural_tag")


def require(module: str, extra: str, integration: str) -> Any:
    """Import ``module`` or raise an ImportError saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"lexguide.integrations.{integration} needs the {module!r} package, which failed "
            f"to import ({e}); install it with: pip install 'lexguide[{extra}]'"
        ) from e


def as_grammar(constraint: Any) -> Grammar:
    """A :class:`Grammar` from a constraint: a ``Grammar``, or a JSON Schema (dict or bool).

    Raises ``TypeError`` for anything else (a string is ambiguous: build the grammar with
    ``Grammar.from_regex``, ``Grammar.from_lark``, ``Grammar.from_gbnf`` or ``Grammar.parse``)
    and ``SchemaError`` for a bad schema.
    """
    if isinstance(constraint, Grammar):
        return constraint
    if isinstance(constraint, (dict, bool)):
        return Grammar.from_json_schema(constraint)
    if isinstance(constraint, str):
        raise TypeError(
            "a constraint string is ambiguous: pass a JSON Schema dict, or a Grammar built with "
            "Grammar.from_regex / from_lark / from_gbnf / parse"
        )
    raise TypeError(
        f"a constraint is a JSON Schema dict or a lexguide.Grammar, not {type(constraint).__name__}"
    )


def grammar_from_spec(spec: Mapping[str, Any], where: str = "lexguide") -> Grammar:
    """The grammar of a per-request constraint ``{"json_schema": ...}``, ``{"grammar": text}``,
    ``{"regex": pattern}`` or ``{"structural_tag": spec}`` (exactly one), with
    ``"json_options"`` (keyword options of :meth:`Grammar.from_json_schema`, such as
    ``whitespace`` or ``indent``) for a schema or for every schema inside a structural tag.

    A ``json_schema`` is a dict, a bool or JSON text; a ``structural_tag`` is xgrammar's
    structural-tag JSON as a dict or text (:meth:`Grammar.from_structural_tag`); a
    ``grammar`` is read by :meth:`Grammar.parse` (Lark variant after ``%llguidance``, a
    grammar list after ``{``, GBNF otherwise). Raises ``ValueError`` naming ``where`` for a malformed spec, and the
    compiler's ``LexguideError`` (with its location) for a bad schema, grammar or regex.
    """
    if not isinstance(spec, Mapping):
        # ValueError, not TypeError: frameworks answer it as a client error (HTTP 400)
        raise ValueError(  # noqa: TRY004
            f"{where} must be an object with one of {', '.join(SPEC_KINDS)}")
    unknown = set(spec) - {*SPEC_KINDS, "json_options"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; expected one of "
                         f"{', '.join(SPEC_KINDS)} (and json_options)")
    kinds = [k for k in SPEC_KINDS if spec.get(k) is not None]
    if len(kinds) != 1:
        raise ValueError(f"{where} needs exactly one of {', '.join(SPEC_KINDS)}, got "
                         f"{kinds or 'none'}")
    kind = kinds[0]
    value = spec[kind]
    options = spec.get("json_options") or {}
    if not isinstance(options, Mapping):
        raise ValueError(f"{where}.json_options must be an object")  # noqa: TRY004
    if options and kind not in ("json_schema", "structural_tag"):
        raise ValueError(f"{where}.json_options applies to json_schema and structural_tag only")
    if kind == "structural_tag":
        if not isinstance(value, (Mapping, str)):
            raise ValueError(f"{where}.structural_tag must be an object or its JSON text")
        return Grammar.from_structural_tag(dict(value) if isinstance(value, Mapping) else value,
                                           **dict(options))
    if kind == "json_schema":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}.json_schema is not valid JSON: {e}") from None
            except RecursionError:
                raise ValueError(f"{where}.json_schema nests JSON too deeply to parse") from None
        if not isinstance(value, (dict, bool)):
            raise ValueError(f"{where}.json_schema must be a JSON Schema object or boolean")
        return Grammar.from_json_schema(value, **dict(options))
    if not isinstance(value, str):
        raise ValueError(f"{where}.{kind} must be a string")  # noqa: TRY004
    return Grammar.parse(value) if kind == "grammar" else Grammar.from_regex(value)


def check_compiles(spec: Mapping[str, Any], where: str) -> None:
    """Raise ``ValueError`` (whose text carries the compiler's located message) when ``spec``
    is malformed or does not compile. For request validation, where frameworks turn a
    ``ValueError`` into a client error."""
    try:
        grammar_from_spec(spec, where)
    except LexguideError as e:
        raise ValueError(f"{where}: {e}") from e
    except TypeError as e:  # options of the wrong name or type
        raise ValueError(f"{where}: {e}") from e


class TorchMasker:
    """Sets the logits of disallowed tokens to ``-inf`` from packed ``int32`` bitmask rows
    (bit ``t & 31`` of word ``t >> 5``). CPU logits of float32, float16 or bfloat16 with
    contiguous rows are masked by the core in one pass over the rows, taking the tensors
    through DLPack (:func:`lexguide.engine.matcher.mask_logits_rows`); others (a GPU, another
    dtype or layout) with torch operations on the logits' device, where the bitmask's bytes
    are unpacked. Nothing goes through numpy.

    Columns past the bitmask (a model whose logits are wider than the tokenizer) are
    disallowed; columns past the logits are ignored. On the CPU this costs about one write
    per disallowed logit; the torch path costs a few vectorised passes over
    ``rows x vocabulary`` bytes.
    """

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._shifts: dict[Any, Any] = {}  # device -> arange(8) as uint8
        self._native = {torch.float32, torch.float16, torch.bfloat16}

    def apply(self, logits: Any, bitmask: Any, rows: Any = None) -> Any:
        """Mask ``logits`` (``(B, V)``, any float dtype and device) in place with
        ``bitmask`` (``(R, n_words)`` int32 on the CPU); ``rows`` (R indices into the batch,
        a list or a tensor) says which logits rows the bitmask rows belong to (default: all
        B rows, R == B). Returns ``logits``."""
        torch = self._torch
        device = logits.device
        if (device.type == "cpu" and logits.dtype in self._native and logits.dim() == 2
                and not logits.requires_grad and bitmask.is_contiguous()
                and (logits.shape[1] <= 1 or logits.stride(1) == 1)):
            if rows is None:
                rows = ()
            elif isinstance(rows, torch.Tensor):
                rows = rows.tolist()
            mask_logits_rows(logits, bitmask, rows)
            return logits
        shifts = self._shifts.get(device)
        if shifts is None:
            shifts = self._shifts[device] = torch.arange(8, dtype=torch.uint8, device=device)
        n_rows = bitmask.shape[0]
        packed = bitmask.view(torch.uint8)  # little-endian: byte i holds tokens 8i .. 8i+7
        if packed.device != device:
            packed = packed.to(device, non_blocking=True)
        bits = (packed.unsqueeze(-1) >> shifts).bitwise_and_(1).view(n_rows, -1)
        width = logits.shape[-1]
        if bits.shape[1] >= width:
            disallowed = bits[:, :width] == 0
        else:
            disallowed = torch.ones((n_rows, width), dtype=torch.bool, device=device)
            disallowed[:, : bits.shape[1]] = bits == 0
        if rows is None:
            logits.masked_fill_(disallowed, float("-inf"))
        else:
            index = torch.as_tensor(rows, dtype=torch.long, device=device)
            sub = logits.index_select(0, index)
            sub.masked_fill_(disallowed, float("-inf"))
            logits.index_copy_(0, index, sub)
        return logits
