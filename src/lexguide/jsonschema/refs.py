"""``$ref`` resolution (spec §7; JSON Schema core 2020-12 §8.2 and §9): ``$id`` bases, JSON
pointers, anchors, dynamic anchors, and documents other than the root.

Every document is scanned once: each subschema gets a *key* and its base URI (``$id``/``id``
change the base, RFC 3986 resolution); ``$id`` URIs and ``$anchor``/``$dynamicAnchor``/
``"$id": "#name"`` become lookup entries. Keys are the absolute JSON pointer inside the root
document (``""``, ``"/$defs/a"``), or ``"<document URI>#<pointer>"`` inside another document.
A reference resolves to the key of its target, which is the key of the compiled rule.

Other documents are never fetched. A reference outside the root is resolved against, in
order: the caller's ``refs={uri: schema}``, then the bundled draft 4, 6, 7, 2019-09 and
2020-12 metaschemas (and their vocabulary documents; ``data/metaschemas.json``, copied from
the ``jsonschema-specifications`` package); anything else is a :class:`SchemaError` saying so.

Dynamic scope: each schema resource (a document root or a subschema with ``$id``) lists its
``$dynamicAnchor`` names, and ``""`` when its root has ``"$recursiveAnchor": true`` (2019-09).
:meth:`RefIndex.dynamic_target` picks the outermost resource of a scope that defines a name.
"""

from __future__ import annotations

import json
import re
import sys
from functools import cache, lru_cache
from importlib import resources as _resources
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from lexguide.errors import SchemaError
from lexguide.limits import json_value_scan

__all__ = ["DEFAULT_BASE", "RefIndex", "anchor_keys", "bundled_metaschemas", "detect_draft",
           "escape_pointer", "id_keyword", "split_key"]

DEFAULT_BASE = "http://lexguide.invalid/root.json"

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
                "dependencies")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_ONE = ("additionalProperties", "additionalItems", "items", "not", "if", "then", "else",
               "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
#: ``urldefrag`` memoised: a compile splits the same few base URIs at every reference
_defrag = lru_cache(maxsize=4096)(urldefrag)
_URL_STRIPPED = re.compile("[\t\r\n]")  # characters urlsplit removes from a URL


def join_uri(base: str, ref: str) -> str:
    """RFC 3986 resolution that also works for non-hierarchical bases such as ``urn:``."""
    if ref.startswith("#"):
        return _defrag(base)[0] + ref
    if _SCHEME.match(ref):
        return ref
    return urljoin(base, ref)


def escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def split_key(key: str) -> tuple[str, str]:
    """``(document URI or "" for the root, JSON pointer)`` of a key."""
    if key == "" or key.startswith("/"):
        return "", key
    doc, _, ptr = key.partition("#")
    return doc, ptr


_DRAFTS = {
    "draft/2020-12/schema": 2020, "draft/2019-09/schema": 2019, "draft-07/schema": 7,
    "draft-06/schema": 6, "draft-04/schema": 4,
}


def detect_draft(root: Any) -> int:
    """The draft of a document from its ``$schema`` (2020 when missing or unknown)."""
    uri = root.get("$schema") if isinstance(root, dict) else None
    if isinstance(uri, str):
        for suffix, draft in _DRAFTS.items():
            if uri.rstrip("#").endswith(suffix):
                return draft
    return 2020


@cache
def bundled_metaschemas() -> dict[str, Any]:
    """The bundled metaschema documents by URI (without fragment). Read once."""
    text = _resources.files("lexguide.jsonschema").joinpath("data/metaschemas.json").read_text()
    return json.loads(text)


_MISSING = object()


def id_keyword(draft: int) -> str:
    """The keyword that sets a schema's base URI in ``draft``."""
    return "id" if draft == 4 else "$id"


def anchor_keys(id_kw: str) -> frozenset[str]:
    """The keys that make :class:`RefIndex` scan a document (ids and anchors): without any of
    them every base is :data:`DEFAULT_BASE`."""
    return frozenset((id_kw, "$anchor", "$dynamicAnchor", "$recursiveAnchor"))


def _has_key(value: Any, keys: frozenset[str]) -> bool:
    """Whether some object anywhere in the JSON ``value`` has one of ``keys``
    (:func:`~lexguide.limits.json_value_scan`'s walk, at any depth)."""
    return json_value_scan(value, keys, sys.maxsize)[1]


class RefIndex:
    """Bases, ids and anchors of a root document and the documents it refers to; resolves
    references to keys. Mutates itself when a reference reaches a new document."""

    def __init__(self, root: Any, id_keyword: str = "$id", *, ref_overrides: bool = False,
                 refs: dict[str, Any] | None = None, has_anchors: bool | None = None) -> None:
        """``has_anchors``: whether ``root`` has one of :func:`anchor_keys` (None: look)."""
        self.root = root
        self.id_keyword = id_keyword
        self.ref_overrides = ref_overrides  # drafts <= 7: siblings of $ref (incl. $id) ignored
        self.base_at: dict[str, str] = {}
        self.resources: dict[str, str] = {}  # absolute URI (no fragment) -> key
        self.anchors: dict[str, str] = {}  # absolute URI with #anchor -> key
        self.dynamic: dict[str, dict[str, str]] = {}  # resource URI -> {name: key}
        self.documents: dict[str, Any] = {}  # document URI -> its JSON ("" is the root)
        self.external = {_defrag(u)[0]: s for u, s in (refs or {}).items()}
        for uri in self.external:
            if not isinstance(uri, str) or not _SCHEME.match(uri):
                raise SchemaError(f"refs: {uri!r} is not an absolute URI", keyword="$ref")
        self.documents[""] = root
        self._values: dict[str, Any] = {}  # key -> raw value (see get)
        self._resolved: dict[tuple[str, str], str] = {}  # (reference, base) -> key
        self.resources[DEFAULT_BASE] = ""
        if has_anchors is None:
            has_anchors = _has_key(root, anchor_keys(id_keyword))
        if has_anchors:
            self._scan(root, "", DEFAULT_BASE, id_keyword, ref_overrides)
        # else every base is DEFAULT_BASE: no walk needed

    def _scan(self, node: Any, key: str, base: str, id_kw: str, overrides: bool) -> None:
        todo = [(node, key, base)]
        while todo:
            node, key, base = todo.pop()
            if not isinstance(node, dict):
                continue
            ident = node.get(id_kw)
            if isinstance(ident, str) and not ("$ref" in node and overrides):
                if ident.startswith("#"):
                    self.anchors[_defrag(base)[0] + ident] = key
                else:
                    base = join_uri(base, ident)
                    self.resources.setdefault(_defrag(base)[0], key)
                    frag = _defrag(base)[1]
                    if frag:
                        self.anchors[_defrag(base)[0] + "#" + frag] = key
            res = _defrag(base)[0]
            for kw in ("$anchor", "$dynamicAnchor"):
                if isinstance(node.get(kw), str):
                    self.anchors[res + "#" + node[kw]] = key
            if isinstance(node.get("$dynamicAnchor"), str):
                self.dynamic.setdefault(res, {}).setdefault(node["$dynamicAnchor"], key)
            if node.get("$recursiveAnchor") is True and self.resources.get(res) == key:
                self.dynamic.setdefault(res, {})[""] = key
            self.base_at[key] = base
            for kw in _SCHEMA_MAPS:
                sub = node.get(kw)
                if isinstance(sub, dict):
                    for name, s in sub.items():
                        todo.append((s, f"{key}/{kw}/{escape_pointer(name)}", base))
            for kw in _SCHEMA_LISTS:
                sub = node.get(kw)
                if isinstance(sub, list):
                    for i, s in enumerate(sub):
                        todo.append((s, f"{key}/{kw}/{i}", base))
            for kw in _SCHEMA_ONE:
                sub = node.get(kw)
                if isinstance(sub, (dict, bool)):
                    todo.append((sub, f"{key}/{kw}", base))

    def _load(self, doc: str, at: str, ref: str) -> None:
        """Scan the document ``doc`` from ``refs`` or the bundled metaschemas, or raise."""
        schema = self.external.get(doc)
        if schema is None:
            schema = bundled_metaschemas().get(doc)
        if schema is None:
            raise SchemaError(
                f"reference {ref!r} points outside this document ({doc}); remote references "
                "are never fetched: pass the document as refs={uri: schema} (the draft "
                "metaschemas are bundled)", pointer=at, keyword="$ref")
        draft = detect_draft(schema) if isinstance(schema, dict) and "$schema" in schema else None
        id_kw = "id" if draft == 4 else self.id_keyword if draft is None else "$id"
        overrides = self.ref_overrides if draft is None else draft <= 7
        self.documents[doc] = schema
        self.resources[doc] = doc + "#"
        self._scan(schema, doc + "#", doc, id_kw, overrides)

    def base_of(self, key: str) -> str:
        return self.base_at.get(key, DEFAULT_BASE)

    def resource_of(self, key: str) -> str:
        """URI of the schema resource the subschema ``key`` belongs to."""
        return _defrag(self.base_of(key))[0]

    def resolve(self, ref: str, at: str) -> str:
        """Key of the target of ``ref`` written at key ``at``. Resolved once per reference
        text and base URI: the answer depends on nothing else (the documents loaded for it
        stay loaded)."""
        base = self.base_at.get(at, DEFAULT_BASE)
        got = self._resolved.get((ref, base))
        if got is None:
            got = self._resolved[(ref, base)] = self._resolve(ref, at, base)
        return got

    def _resolve(self, ref: str, at: str, base: str) -> str:
        if ref.startswith("#") and not _URL_STRIPPED.search(ref):
            # a fragment of the current document: what urldefrag(join_uri(base, ref)) gives,
            # without parsing a new URI at every reference
            doc, frag = _defrag(_defrag(base)[0] + "#")[0], ref[1:]
        else:
            doc, frag = _defrag(join_uri(base, ref))
        if doc not in self.resources:
            self._load(doc, at, ref)
        if frag and not frag.startswith("/"):
            target = self.anchors.get(doc + "#" + frag)
            if target is None:
                raise SchemaError(f"reference {ref!r}: anchor {frag!r} not found",
                                  pointer=at, keyword="$ref")
            return target
        key = self.resources[doc] + unquote(frag)
        self.get(key, at)
        return key

    def dynamic_target(self, scope: tuple[str, ...], name: str) -> str | None:
        """Key of the dynamic anchor ``name`` in the outermost resource of ``scope`` that
        defines it (``""``: ``$recursiveAnchor``), or None."""
        for res in scope:
            got = self.dynamic.get(res, {}).get(name)
            if got is not None:
                return got
        return None

    def bindings(self, scope: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        """What ``scope`` binds each dynamic anchor name to (outermost definition wins)."""
        out: dict[str, str] = {}
        for res in scope:
            for name, key in self.dynamic.get(res, {}).items():
                out.setdefault(name, key)
        return tuple(sorted(out.items()))

    def document_of(self, key: str) -> Any:
        return self.documents[split_key(key)[0]]

    def get(self, key: str, at: str = "") -> Any:
        """The raw value at ``key`` (found once per key: a reference looks its target up
        about three times)."""
        got = self._values.get(key, _MISSING)
        if got is not _MISSING:
            return got
        got = self._find(key, at)
        if split_key(key)[0] in self.documents:  # not a document still to load
            self._values[key] = got
        return got

    def _find(self, key: str, at: str) -> Any:
        doc, ptr = split_key(key)
        node = self.documents.get(doc, self.root if doc == "" else None)
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
