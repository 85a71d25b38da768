"""One error hierarchy for every layer of lexguide.

Every error says *where*: a byte offset for files, line:col with a caret excerpt for grammar
text, a JSON pointer for schemas. This module imports nothing from lexguide so any layer may
import it without creating a cycle.
"""

from __future__ import annotations

__all__ = [
    "GGUFError",
    "GrammarError",
    "LexguideError",
    "LimitExceeded",
    "MatcherError",
    "ModelError",
    "RegexError",
    "SchemaError",
    "TokenRejected",
    "TokenizerError",
]


class LexguideError(Exception):
    """Root of all lexguide errors."""


class GGUFError(LexguideError):
    """A GGUF file is malformed or unsupported; ``offset`` is the byte offset of the problem."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.offset = offset
        self.detail = message
        super().__init__(message if offset is None else f"at byte {offset}: {message}")


class TokenizerError(LexguideError):
    """A tokenizer cannot be built from metadata, or an encode/decode input is invalid."""


def caret_excerpt(text: str, line: int, col: int) -> str:
    """The source line ``line`` (1-based) of ``text`` with a caret under column ``col`` (1-based)."""
    lines = text.splitlines() or [""]
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    return f"{src}\n{' ' * (max(col, 1) - 1)}^"


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of character ``offset`` in ``text``."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


class GrammarError(LexguideError):
    """A grammar text is malformed or cannot be compiled.

    ``line`` and ``col`` are 1-based; ``excerpt`` shows the offending line with a caret.
    """

    def __init__(
        self,
        message: str,
        *,
        text: str | None = None,
        offset: int | None = None,
        line: int | None = None,
        col: int | None = None,
    ) -> None:
        if text is not None and offset is not None and line is None:
            line, col = line_col(text, offset)
        self.detail = message
        self.offset = offset
        self.line = line
        self.col = col
        self.excerpt = caret_excerpt(text, line, col or 1) if text is not None and line else ""
        where = f"line {line}:{col}: " if line is not None else ""
        full = where + message
        if self.excerpt:
            full += "\n" + self.excerpt
        super().__init__(full)


class RegexError(GrammarError):
    """A regular expression is malformed, unsupported, or its automaton exceeds a limit.

    ``offset`` is the character offset inside the pattern.
    """

    def __init__(self, message: str, *, pattern: str | None = None, offset: int | None = None) -> None:
        self.pattern = pattern
        if pattern is not None and offset is not None:
            msg = f"{message} (in regex at offset {offset}: {pattern!r})"
        elif pattern is not None:
            msg = f"{message} (in regex {pattern!r})"
        else:
            msg = message
        super().__init__(msg, offset=offset)


class SchemaError(LexguideError):
    """A JSON Schema is invalid or uses a keyword the compiler cannot enforce.

    ``pointer`` is the JSON pointer (RFC 6901) of the schema location; ``keyword`` names the
    keyword at fault when there is one.
    """

    def __init__(self, message: str, *, pointer: str = "", keyword: str | None = None) -> None:
        self.detail = message
        self.pointer = pointer
        self.keyword = keyword
        where = f"at {pointer or '#'}"
        if keyword is not None:
            where += f" (keyword {keyword!r})"
        super().__init__(f"{where}: {message}")


class MatcherError(LexguideError):
    """Misuse of a matcher (e.g. rollback past the start)."""


class TokenRejected(MatcherError):
    """``Matcher.consume`` was given a token the grammar does not allow; the matcher is unchanged."""

    def __init__(self, token_id: int, message: str = "") -> None:
        self.token_id = token_id
        super().__init__(message or f"token {token_id} is not allowed by the grammar here")


class LimitExceeded(LexguideError):
    """A documented resource limit was hit; ``limit`` names it (e.g. ``max_dfa_states``)."""

    def __init__(self, limit: str, value: float, message: str = "") -> None:
        self.limit = limit
        self.value = value
        super().__init__(message or f"resource limit {limit}={value} exceeded")


class ModelError(LexguideError):
    """A model cannot be loaded or run (unsupported architecture, missing tensor, ...)."""
