"""Field readers and shared shapes of the structural-tag compiler.

Leaf helpers of :mod:`lexguide.grammar.structural_tag` and :mod:`lexguide.grammar.token_formats`:
each reader checks one JSON field and raises :class:`~lexguide.errors.GrammarError` naming its
JSON path (``$`` is the whole spec).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexguide.errors import GrammarError
from lexguide.grammar.ir import TokenSet

__all__ = ["NOTHING_FOLLOWS", "Follow", "as_dict", "count", "err", "flag", "kind_of", "string",
           "strings", "token_set"]


@dataclass(frozen=True)
class Follow:
    """What comes right after a format: ``ends`` (strings the format must consume as its
    last bytes, one of them) or ``token`` (a token that must follow it), or the end of the
    output (``eos``), or none of these (something else follows; unbounded formats are then
    an error). ``then``, aligned with ``ends``: the symbol that continues after each end
    (the rest of an ``or`` alternative that starts with it), or None: nothing particular."""

    ends: tuple[bytes, ...] | None
    eos: bool
    token: TokenSet | None = None
    then: tuple[int, ...] | None = None


#: a format followed by something else: unbounded formats cannot end there
NOTHING_FOLLOWS = Follow(None, False)


def err(path: str, message: str) -> GrammarError:
    return GrammarError(f"structural tag at {path}: {message}")


def kind_of(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(v), "a number")


def as_dict(v: Any, path: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise err(path, f"expected a format object, got {kind_of(v)}")
    return v


def string(v: Any, path: str, *, empty: bool = True) -> str:
    if not isinstance(v, str):
        raise err(path, f"expected a string, got {kind_of(v)}")
    if not empty and not v:
        raise err(path, "must not be empty")
    return v


def strings(v: Any, path: str, *, empty: bool = False) -> list[str]:
    if not isinstance(v, list):
        raise err(path, f"expected an array of strings, got {kind_of(v)}")
    return [string(s, f"{path}[{i}]", empty=empty) for i, s in enumerate(v)]


def flag(fmt: dict[str, Any], key: str, path: str) -> bool:
    v = fmt.get(key, False)
    if not isinstance(v, bool):
        raise err(f"{path}.{key}", f"expected a boolean, got {kind_of(v)}")
    return v


def count(fmt: dict[str, Any], key: str, path: str, *, minimum: int = 0) -> int | None:
    v = fmt.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise err(f"{path}.{key}", f"expected an integer >= {minimum} or null, got {v!r}")
    return v


def token_set(v: dict[str, Any], path: str) -> TokenSet:
    """The token set of a ``{"type": "token", "token": id | special-token text}`` object."""
    if v.get("type") != "token" or set(v) != {"type", "token"}:
        raise err(path, 'expected a string or {"type": "token", "token": ID or TEXT}')
    tok = v["token"]
    if isinstance(tok, str) and tok:
        return TokenSet(names=(tok,))
    if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0:
        raise err(f"{path}.token", f"expected a token id or a special token's text, got {tok!r}")
    return TokenSet(ranges=((tok, tok),))
