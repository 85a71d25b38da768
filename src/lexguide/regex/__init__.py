"""Byte regexes: hash-consed nodes with derivatives (:mod:`.nodes`), the Rust-``regex`` syntax
that builds them (:mod:`.syntax`), and the Unicode tables both use (:mod:`.unicode`).

The front ends build lexemes here; the C++ core re-hash-conses the nodes it is handed
(``lexguide.engine.lexparser``) and never calls back into Python."""

from lexguide.regex.syntax import format_regex, parse_regex

__all__ = ["format_regex", "parse_regex"]
