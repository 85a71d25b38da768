"""Byte regexes: nodes of the core's hash-consed store and its questions (:mod:`.nodes`), the
Rust-``regex`` syntax that builds them (:mod:`.syntax`), and the Unicode tables both use
(:mod:`.unicode`).

The front ends build lexemes here, in the store the core's lexer derives (the core never calls
back into Python)."""

from lexguide.regex.syntax import format_regex, parse_regex

__all__ = ["format_regex", "parse_regex"]
