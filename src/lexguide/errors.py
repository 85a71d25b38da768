"""One error hierarchy for every layer of lexguide.

Every error says *where*: a byte offset for files, line:col with a caret excerpt for grammar
text, a JSON pointer for schemas. This module imports nothing from lexguide so any layer may
import it without creating a cycle.
"""

from __future__ import annotations

__all__ = [
    "CoreArgumentError",
    "CoreError",
    "CoreGrammarError",
    "CoreIndexError",
    "CoreRegexError",
    "CoreVocabularyError",
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
    "VocabFileError",
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


class VocabFileError(TokenizerError):
    """A vocabulary cache file cannot be used or written (missing, corrupt, stale, another
    vocabulary's); the message starts with its path. The vocabulary cache rebuilds then."""


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


class CoreError(LexguideError):
    """An argument the compiled core (``lexguide._core``) refused: a lowered grammar, a
    vocabulary, an id or a buffer that the Python layers passed on.

    ``where`` maps what locates the error, as far as the core knows it, to its value:
    ``rule`` (index in the grammar's rules), ``symbol`` (a nonterminal ``x >= 0`` or lexeme
    ``-1 - x``), ``lexeme``, ``token``, ``byte``, ``state`` (lexer state), ``set`` (parser
    set), ``node`` (regex node), ``generation`` (a regex id's), ``row``; the message starts with it (``"rule 3, symbol 7:
    ..."``) and ``detail`` is the message without it. Each subclass
    is also the builtin exception (``ValueError`` or ``IndexError``) the core raised before
    its errors were typed, so ``except ValueError`` keeps catching them.
    """

    def __init__(self, message: str, **where: int) -> None:
        self.detail = message
        self.where = where
        loc = ", ".join(f"{k} {v}" for k, v in where.items())
        located = not loc or message.startswith(loc)  # "token 5 is longer than ..." says it
        Exception.__init__(self, message if located else f"{loc}: {message}")


class CoreGrammarError(CoreError, GrammarError, ValueError):
    """The core refused a lowered grammar (a rule's symbol out of range, a start symbol
    without rules, a lexeme that is not a token lexeme); ``where`` names the rule, symbol or
    lexeme."""

    def __init__(self, message: str, **where: int) -> None:
        CoreError.__init__(self, message, **where)
        self.offset = self.line = self.col = None
        self.excerpt = ""


class CoreRegexError(CoreError, RegexError, ValueError):
    """The core refused a regex argument (a byte set that is not 32 bytes, repetition bounds
    out of order or range, or a regex id of another generation, whose store was replaced:
    ``where`` names its ``node`` and ``generation``); ``CoreIndexError`` names an unknown
    ``node``."""

    def __init__(self, message: str, **where: int) -> None:
        CoreError.__init__(self, message, **where)
        self.offset = self.line = self.col = None
        self.excerpt = ""
        self.pattern = None


class CoreVocabularyError(CoreError, TokenizerError, ValueError):
    """The core refused a vocabulary (a token over its length limit, an id outside the
    vocabulary, over 4 GiB of token bytes); ``where`` names the ``token``."""


class CoreArgumentError(CoreError, MatcherError, ValueError):
    """A parser or mask call got a bad argument (a byte over 255, a mask buffer of the wrong
    shape, a row index out of range, a dead parse state); ``where`` names the ``byte`` or
    ``row``."""


class CoreIndexError(CoreError, MatcherError, IndexError):
    """An id the core does not know: a parser set, lexer state, regex node or lexeme index;
    ``where`` names it."""
