"""``$ref`` resolution inside one document: ``$id`` bases, JSON pointers, anchors (spec §7).

The whole document is scanned once: every subschema gets its absolute JSON pointer and its
base URI (``$id``/``id`` change the base, RFC 3986 resolution); ``$id`` URIs and
``$anchor``/``$dynamicAnchor``/``"$id": "#name"`` become lookup entries. A reference resolves to
the absolute pointer of its target, which is the key of the compiled rule. Remote documents
are never fetched: a reference outside the document is a :class:`SchemaError`.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from lexguide.errors import SchemaError

__all__ = ["DEFAULT_BASE", "RefIndex", "escape_pointer"]

DEFAULT_BASE = "http://lexguide.invalid/root.json"

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
                "dependencies")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_ONE = ("additionalProperties", "additionalItems", "items", "not", "if", "then", "else",
               "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def join_uri(base: str, ref: str) -> str:
    """RFC 3986 resolution that also works for non-hierarchical bases such as ``urn:``."""
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    if _SCHEME.match(ref):
        return ref
    return urljoin(base, ref)


def escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class RefIndex:
    """Bases, ids and anchors of one schema document; resolves references to pointers."""

    def __init__(self, root: Any, id_keyword: str = "$id", *, ref_overrides: bool = False) -> None:
        self.root = root
        self.id_keyword = id_keyword
        self.ref_overrides = ref_overrides  # drafts <= 7: siblings of $ref (incl. $id) ignored
        self.base_at: dict[str, str] = {}
        self.resources: dict[str, str] = {}  # absolute URI (no fragment) -> pointer
        self.anchors: dict[str, str] = {}  # absolute URI with #anchor -> pointer
        text = json.dumps(root)
        if any(f'"{kw}"' in text for kw in (id_keyword, "$anchor", "$dynamicAnchor")):
            self._scan(root, "", DEFAULT_BASE)  # else every base is DEFAULT_BASE: no walk needed
        self.resources.setdefault(DEFAULT_BASE, "")

    def _scan(self, node: Any, ptr: str, base: str) -> None:
        todo = [(node, ptr, base)]
        while todo:
            node, ptr, base = todo.pop()
            if not isinstance(node, dict):
                continue
            ident = node.get(self.id_keyword)
            if isinstance(ident, str) and not ("$ref" in node and self.ref_overrides):
                if ident.startswith("#"):
                    self.anchors[urldefrag(base)[0] + ident] = ptr
                else:
                    base = join_uri(base, ident)
                    self.resources[urldefrag(base)[0]] = ptr
                    frag = urldefrag(base)[1]
                    if frag:
                        self.anchors[urldefrag(base)[0] + "#" + frag] = ptr
            for kw in ("$anchor", "$dynamicAnchor"):
                if isinstance(node.get(kw), str):
                    self.anchors[urldefrag(base)[0] + "#" + node[kw]] = ptr
            self.base_at[ptr] = base
            for key in _SCHEMA_MAPS:
                sub = node.get(key)
                if isinstance(sub, dict):
                    for name, s in sub.items():
                        todo.append((s, f"{ptr}/{key}/{escape_pointer(name)}", base))
            for key in _SCHEMA_LISTS:
                sub = node.get(key)
                if isinstance(sub, list):
                    for i, s in enumerate(sub):
                        todo.append((s, f"{ptr}/{key}/{i}", base))
            for key in _SCHEMA_ONE:
                sub = node.get(key)
                if isinstance(sub, (dict, bool)):
                    todo.append((sub, f"{ptr}/{key}", base))

    def base_of(self, ptr: str) -> str:
        return self.base_at.get(ptr, DEFAULT_BASE)

    def resolve(self, ref: str, at: str) -> str:
        """Absolute pointer of the target of ``ref`` written at pointer ``at``."""
        uri = join_uri(self.base_of(at), ref)
        doc, frag = urldefrag(uri)
        if doc not in self.resources:
            raise SchemaError(
                f"reference {ref!r} points outside this document ({doc}); remote references "
                "are not fetched", pointer=at, keyword="$ref")
        if frag and not frag.startswith("/"):
            target = self.anchors.get(doc + "#" + frag)
            if target is None:
                raise SchemaError(f"reference {ref!r}: anchor {frag!r} not found",
                                  pointer=at, keyword="$ref")
            return target
        ptr = self.resources[doc] + unquote(frag)
        self.get(ptr, at)
        return ptr

    def get(self, ptr: str, at: str = "") -> Any:
        """The raw value at absolute pointer ``ptr``."""
        node = self.root
        if ptr == "":
            return node
        for raw in ptr.split("/")[1:]:
            tok = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and tok in node:
                node = node[tok]
            elif isinstance(node, list) and tok.isdigit() and int(tok) < len(node):
                node = node[int(tok)]
            else:
                raise SchemaError(f"reference target #{ptr} does not exist", pointer=at,
                                  keyword="$ref")
        return node
