"""Byte regexes: hash-consed nodes with derivatives (:mod:`.nodes`), the Rust-``regex`` syntax
that builds them (:mod:`.syntax`), and the Unicode tables both use (:mod:`.unicode`).

The front ends build lexemes here; :mod:`.native` exports them into the C++ core's own
hash-consed store (which never calls back into Python) and asks it whether a regex is empty."""

from lexguide.regex.syntax import format_regex, parse_regex

__all__ = ["format_regex", "parse_regex"]
