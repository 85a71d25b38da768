"""Print a planned GBNF grammar as llguidance Lark-variant text.

The text mirrors the IR :func:`lexguide.grammar.gbnf.compile_gbnf` builds, so it accepts the
same strings under Lark's greedy lexing: a GBNF rule that is one lexeme becomes an UPPERCASE
terminal, an anonymous multi-character lexeme becomes a string literal or a terminal named
after its rule (``IDENT_1``), and a literal that must not be one lexeme is printed as
one-character strings (``"i" "f"``). Nullable terminals are defined without the empty
string and used as ``NAME?`` (a Lark lexeme never matches the empty string here).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lexguide.errors import GrammarError
from lexguide.grammar.gbnf.parser import Alt, Chars, Lit, Node, Ref, Rep, Seq, Tok

if TYPE_CHECKING:
    from lexguide.grammar.gbnf.plan import GbnfPlan

__all__ = ["emit_lark"]

_RAW_IN_CLASS = set("!\"#%',:;<=>@_` ")
_ESCAPED_IN_CLASS = set("\\]^-[&~.*+?(){}|$")
_PREC_ALT, _PREC_SEQ, _PREC_ATOM = 0, 1, 2


def _class_char(cp: int) -> str:
    c = chr(cp)
    if c.isascii() and (c.isalnum() or c in _RAW_IN_CLASS):
        return c
    if c in _ESCAPED_IN_CLASS:
        return "\\" + c
    if cp >= 0x80 and c.isprintable() and not (0xD800 <= cp <= 0xDFFF):
        return c
    return f"\\x{{{cp:X}}}"


def _string(text: str) -> str:
    out = []
    for c in text:
        cp = ord(c)
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\u{cp:04x}")
        elif 0xD800 <= cp <= 0xDFFF:
            raise GrammarError(
                f"a literal contains the surrogate U+{cp:04X}, which has no UTF-8 form")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _item_prec(node: Seq | Alt) -> int:
    return _PREC_SEQ if isinstance(node, Seq) else _PREC_ALT


def _group(node: Seq | Alt, parts: list[str], prec: int) -> str:
    """Join printed items as a sequence or alternation, parenthesised where ``prec`` needs it."""
    if not parts:
        return '""'
    if isinstance(node, Alt):
        s = " | ".join(parts)
        return f"({s})" if prec >= _PREC_SEQ else s
    s = " ".join(parts)
    return f"({s})" if prec >= _PREC_ATOM and len(parts) > 1 else s


def _base_name(name: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower().replace("-", "_")
    return s if s[:1].isalpha() else "r_" + s


class _Emitter:
    def __init__(self, plan: GbnfPlan) -> None:
        self.plan = plan
        self.g = plan.g
        self.used: set[str] = {"start"}
        self.names: dict[str, str] = {}
        for name in self.g.rules:
            if name == plan.root:
                self.names[name] = "start" if not self.is_terminal(name) else self._fresh("ROOT")
            else:
                base = _base_name(name)
                self.names[name] = self._fresh(base.upper() if self.is_terminal(name) else base)
        self.extra: list[tuple[str, str]] = []  # synthesized terminals of the current rule
        self.ctx = ""

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def is_terminal(self, name: str) -> bool:
        plan = self.plan
        ref = Ref(name, 0)
        return plan.is_regular(ref) and (plan.single_char(ref) is not None or plan.is_unit(ref))

    def terminal_ref(self, ref: Ref) -> str:
        """A reference to a rule printed as a terminal (defined without the empty string)."""
        if self.plan.non_empty(self.g.rules[ref.name].body) is None:
            return '""'  # the rule matches only the empty string: it has no terminal
        return self.names[ref.name] + ("?" if self.plan.nullable(ref) else "")

    # -- terminal context: regex-level -----------------------------------------------------
    def term(self, node: Node, prec: int) -> str:
        if isinstance(node, Chars):
            if node.dot:
                return "/(?s:.)/"
            body = "".join(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}"
                           for lo, hi in node.items)
            if not body:  # [] matches nothing, [^] everything
                return "/[^\\x{0}-\\x{10FFFF}]/" if not node.negated else "/(?s:.)/"
            return f"/[{'^' if node.negated else ''}{body}]/"
        if isinstance(node, Lit):
            return _string(node.text)
        if isinstance(node, Ref):
            if self.is_terminal(node.name):
                return self.terminal_ref(node)
            return self.term(self.g.rules[node.name].body, prec)
        if isinstance(node, (Seq, Alt)):
            return _group(node, [self.term(x, _item_prec(node)) for x in node.items], prec)
        assert isinstance(node, Rep)
        return self._rep(self.term(node.item, _PREC_ATOM), node)

    @staticmethod
    def _rep(inner: str, node: Rep) -> str:
        if node.hi == 0:
            return '""'
        if inner.endswith("?") or inner.endswith("*") or inner.endswith("+") or inner.endswith("}"):
            inner = f"({inner})"
        lo, hi = node.lo, node.hi
        if (lo, hi) == (1, 1):
            return inner
        op = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
        if op is None:
            op = f"{{{lo},}}" if hi is None else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
        return inner + op

    # -- rule context: CFG structure, lexemes where the plan says so ---------------------------
    def rule(self, node: Node, prec: int) -> str:
        plan = self.plan
        if isinstance(node, Ref) and self.is_terminal(node.name):
            return self.terminal_ref(node)
        if plan.is_regular(node) and plan.single_char(node) is not None:
            return self.term(plan.resolve(node), prec)
        if plan.is_unit(node):
            target = plan.resolve(node)
            ne = plan.non_empty(target)
            if ne is None:
                return '""'
            if isinstance(ne, Lit):
                text = _string(ne.text)
            else:
                text = self._fresh(f"{self.ctx.upper()}_1")
                self.extra.append((text, self.term(ne, _PREC_ALT)))
            return text + ("?" if plan.nullable(target) else "")
        if isinstance(node, Lit):  # one-character strings
            return _group(Seq(()), [_string(c) for c in node.text], prec)
        if isinstance(node, (Seq, Alt)):
            return _group(node, [self.rule(x, _item_prec(node)) for x in node.items], prec)
        if isinstance(node, Rep):
            return self._rep(self.rule(node.item, _PREC_ATOM), node)
        if isinstance(node, Tok):
            ts = node.token_set
            if ts.names:
                if ts.negated:
                    raise GrammarError(f"{node.source}: a negated token given by text has no "
                                       "Lark-variant form; write it by id, as !<[id]>")
                return ts.names[0]
            lo = ts.ranges[0][0]
            return f"<[^{lo}]>" if ts.negated else f"<[{lo}]>"
        assert isinstance(node, Ref)
        return self.names[node.name]

    def emit(self) -> str:
        out = ["%llguidance {}", ""]
        for name, rd in self.g.rules.items():
            lname = self.names[name]
            self.ctx = _base_name(name) if name != self.plan.root else "start"
            self.extra = []
            lines = [f"// {c}" if c else "//" for c in rd.comments]
            if self.is_terminal(name):
                ne = self.plan.non_empty(rd.body)
                if name == self.plan.root:
                    lines.append(f"start: {lname}" + ("?" if self.plan.nullable(rd.body) else "")
                                 if ne is not None else 'start: ""')
                if ne is not None:
                    lines.append(f"{lname}: {self.term(ne, _PREC_ALT)}")
            else:
                body = rd.body
                alts = body.items if isinstance(body, Alt) else (body,)
                texts = [self.rule(a, _PREC_ALT) for a in alts]
                pad = " " * len(lname)
                lines.append(f"{lname}: {texts[0]}")
                lines.extend(f"{pad}| {t}" for t in texts[1:])
            lines.extend(f"{n}: {d}" for n, d in self.extra)
            if len(lines) > 1:
                if out[-1] != "":
                    out.append("")
                out.extend(lines)
                out.append("")
            else:
                out.extend(lines)
        return "\n".join(out).rstrip() + "\n"


def emit_lark(plan: GbnfPlan) -> str:
    """Lark-variant text for ``plan`` (rules in definition order, root renamed ``start``)."""
    return _Emitter(plan).emit()
