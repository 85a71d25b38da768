"""Token-level structural-tag formats: ``token``, ``exclude_token``, ``any_tokens``,
``token_triggered_tags``, ``token_dispatch`` (xgrammar ``structural_tag.py``, since 0.2.0).

A token is an id or the text of a special token (``"<|im_end|>"``), resolved against the
tokenizer when a matcher is built; each format compiles to special-token lexemes
(:class:`~lexguide.grammar.ir.TokenSet`), which match one vocabulary token and no bytes. Free
text at token level is any token but the triggers, the excluded tokens and EOS, one lexeme per
token, so no byte-level lexing is involved. It ends at the end of the output or at the token
that follows it (the enclosing tag's ``end`` token); before a string it cannot end, which is a
:class:`~lexguide.errors.GrammarError` (xgrammar ends token-level text only at a token).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lexguide.grammar.ir import GrammarBuilder, TokenSet
from lexguide.grammar.structural_fields import NOTHING_FOLLOWS, Follow, count, err, flag, kind_of

__all__ = ["TokenFormats"]


def _value(v: Any, path: str) -> int | str:
    """A token: an id, or a special token's text."""
    if isinstance(v, str) and v:
        return v
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise err(path, f"expected a token id or a special token's text, got {v!r}")
    return v


def _values(v: Any, path: str) -> list[int | str]:
    if not isinstance(v, list):
        raise err(path, f"expected an array of tokens, got {kind_of(v)}")
    return [_value(x, f"{path}[{i}]") for i, x in enumerate(v)]


def _one(value: int | str) -> TokenSet:
    if isinstance(value, str):
        return TokenSet(names=(value,))
    return TokenSet(ranges=((value, value),))


def _all_but(values: list[int | str], follow: Follow) -> TokenSet:
    """Any token except ``values``, the token that follows (if any) and EOS."""
    ranges = [(v, v) for v in values if isinstance(v, int)]
    names = [v for v in values if isinstance(v, str)]
    if follow.token is not None:
        ranges += list(follow.token.ranges)
        names += list(follow.token.names)
    return TokenSet(ranges=tuple(sorted(set(ranges))), names=tuple(sorted(set(names))),
                    negated=True)


class TokenFormats:
    """The token-level ``f_*`` methods of the structural-tag compiler (a mixin: the compiler
    provides ``builder``, ``format``, ``seq`` and ``ends_lexeme``)."""

    builder: GrammarBuilder
    if TYPE_CHECKING:  # provided by the compiler class

        def format(self, fmt: Any, path: str, follow: Follow, depth: int,
                   consumed: bytes = b"") -> int: ...

        def seq(self, parts: list[int | None], name: str) -> int: ...

        def ends_lexeme(self, follow: Follow) -> int | None: ...

    def f_token(self, fmt, path, follow, depth, consumed) -> int:
        tok = self.builder.token_lexeme(_one(_value(fmt["token"], f"{path}.token")))
        return self.seq([tok, self.ends_lexeme(follow)], "token")

    def f_exclude_token(self, fmt, path, follow, depth, consumed) -> int:
        excluded = _values(fmt.get("exclude_tokens", []), f"{path}.exclude_tokens")
        tok = self.builder.token_lexeme(_all_but(excluded, Follow(None, False)))
        return self.seq([tok, self.ends_lexeme(follow)], "exclude_token")

    def _free_tokens(self, excluded: list[int | str], follow: Follow, path: str,
                     max_tokens: int | None = None) -> int:
        if follow.ends:
            raise err(path, "token-level free text cannot end at a string (only at a token or "
                      "at the end of the output)")
        tok = self.builder.token_lexeme(_all_but(excluded, follow))
        return self.builder.repeat(tok, 0, max_tokens)

    def f_any_tokens(self, fmt, path, follow, depth, consumed) -> int:
        excluded = _values(fmt.get("exclude_tokens", []), f"{path}.exclude_tokens")
        free = self._free_tokens(excluded, follow, path, count(fmt, "max_tokens", path))
        return self.seq([free, self.ends_lexeme(follow)], "any_tokens")

    def _token_region(self, free: int, step: int, first: int | None, loop: bool,
                      follow: Follow) -> int:
        """``free`` tokens with ``step``s among them (each followed by free tokens again if
        ``loop``, else the region ends), starting with ``first`` if given, then the end."""
        b = self.builder
        end = self.ends_lexeme(follow)
        if first is not None:
            if not loop:
                return self.seq([first, end], "token_region")
            return self.seq([first, free, b.star(b.seq([step, free])), end], "token_region")
        if not loop:
            return b.alt([(self.seq([free, end], "free"),),
                          (self.seq([free, step, end], "step"),)], "token_region")
        return self.seq([free, b.star(b.seq([step, free])), end], "token_region")

    def f_token_triggered_tags(self, fmt, path, follow, depth, consumed) -> int:
        triggers = _values(fmt["trigger_tokens"], f"{path}.trigger_tokens")
        if not triggers:
            raise err(f"{path}.trigger_tokens", "expected at least one trigger token")
        tags = fmt["tags"]
        if not isinstance(tags, list) or not tags:
            raise err(f"{path}.tags", "expected a non-empty array of tag formats")
        used = set()
        for i, tag in enumerate(tags):
            begin = tag.get("begin") if isinstance(tag, dict) else None
            if not isinstance(begin, dict) or begin.get("token") not in triggers:
                raise err(f"{path}.tags[{i}].begin", "expected a token object whose token is one "
                          "of trigger_tokens (spelled the same: an id or a text)")
            used.add(begin["token"])
        unused = [t for t in triggers if t not in used]
        if unused:
            raise err(f"{path}.trigger_tokens", f"trigger token {unused[0]!r} starts no tag")
        excluded = _values(fmt.get("exclude_tokens", []), f"{path}.exclude_tokens") + triggers
        free = self._free_tokens(excluded, follow, path)
        step = self.builder.alt([(self.format(tag, f"{path}.tags[{i}]", NOTHING_FOLLOWS, depth),)
                                 for i, tag in enumerate(tags)], "tag")
        first = step if flag(fmt, "at_least_one", path) else None
        return self._token_region(free, step, first, not flag(fmt, "stop_after_first", path),
                                  follow)

    def f_token_dispatch(self, fmt, path, follow, depth, consumed) -> int:
        rules = fmt["rules"]
        if not isinstance(rules, list) or not rules:
            raise err(f"{path}.rules", "expected a non-empty array of [token, format] pairs")
        steps, tokens = [], []
        for i, rule in enumerate(rules):
            if not isinstance(rule, list) or len(rule) != 2:
                raise err(f"{path}.rules[{i}]", "expected a [token, format] pair")
            tok = _value(rule[0], f"{path}.rules[{i}][0]")
            tokens.append(tok)
            after = self.format(rule[1], f"{path}.rules[{i}][1]", NOTHING_FOLLOWS, depth)
            steps.append((self.builder.token_lexeme(_one(tok)), after))
        loop = fmt.get("loop", True)
        if not isinstance(loop, bool):
            raise err(f"{path}.loop", f"expected a boolean, got {kind_of(loop)}")
        excluded = _values(fmt.get("exclude_tokens", []), f"{path}.exclude_tokens") + tokens
        free = self._free_tokens(excluded, follow, path)
        return self._token_region(free, self.builder.alt(steps, "dispatched"), None, loop, follow)
