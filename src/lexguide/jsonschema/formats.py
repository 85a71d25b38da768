"""``format`` values enforced as regexes (spec §9; RFC 3339, RFC 3986, RFC 4291, RFC 5321 dot-atom).

Departure from the spec table, towards the RFC: ``date`` checks leap years (``2023-02-29`` is
rejected, ``2024-02-29`` accepted).

Each format is an ECMA pattern matched against the whole decoded string and compiled through
:mod:`lexguide.jsonschema.pattern`, so it combines with ``pattern``/``minLength``/``maxLength``
by intersection. Unknown formats are annotations, as the spec says since 2019-09 (validation
§7.2.1): any string is accepted and a ``CompileNote`` is listed on ``Grammar.notes``; with
``strict_formats=True`` they are a :class:`~lexguide.errors.SchemaError`.
"""

from __future__ import annotations

from lexguide.jsonschema.escapes import DEFAULT, Escapes
from lexguide.jsonschema.pattern import anchored_pattern_rx

__all__ = ["FORMATS", "filter_rx", "format_rx"]

# leap years (Gregorian): divisible by 4, and centuries only when divisible by 400
_LEAP_YEAR = r"(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
_DATE = (
    r"(?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
    rf"|02-(?:0[1-9]|1\d|2[0-8]))|{_LEAP_YEAR}-02-29)"
)
_ZONE = r"(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
# a leap second exists only at 23:59:60 UTC: accepted with a zero offset only (a leap second
# written in another offset, e.g. 00:29:60+00:30, is valid RFC 3339 but rejected here)
_TIME = (r"(?:(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?" + _ZONE
         + r"|23:59:60(?:\.\d+)?(?:[Zz]|[+-]00:00))")
_DUR_TIME = r"T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)"
_DURATION = (
    rf"P(?:(?:\d+Y(?:\d+M(?:\d+D)?)?|\d+M(?:\d+D)?|\d+D)(?:{_DUR_TIME})?|{_DUR_TIME}|\d+W)"
)
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H16 = r"[0-9a-fA-F]{1,4}"
_IPV6 = (
    rf"(?:(?:{_H16}:){{7}}{_H16}|(?:{_H16}:){{1,7}}:|(?:{_H16}:){{1,6}}:{_H16}"
    rf"|(?:{_H16}:){{1,5}}(?::{_H16}){{1,2}}|(?:{_H16}:){{1,4}}(?::{_H16}){{1,3}}"
    rf"|(?:{_H16}:){{1,3}}(?::{_H16}){{1,4}}|(?:{_H16}:){{1,2}}(?::{_H16}){{1,5}}"
    rf"|{_H16}:(?::{_H16}){{1,6}}|:(?:(?::{_H16}){{1,7}}|:))"
)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
# RFC 1123 labels of 1-63 characters; "--" in the 3rd and 4th positions is reserved for IDNA
# A-labels (RFC 5891 §4.2.3.1), which are not decoded here: such labels ("xn--...") are rejected
_AN = "[A-Za-z0-9]"
_HOST_LABEL = (rf"(?:{_AN}(?:[A-Za-z0-9-]?{_AN})?|{_AN}[A-Za-z0-9-]"
               rf"(?:{_AN}[A-Za-z0-9-]{{0,59}}{_AN}|-{_AN}(?:[A-Za-z0-9-]{{0,58}}{_AN})?))")
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_EMAIL = rf"{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{_LABEL}(?:\.{_LABEL})*|\[{_IPV4}\])"
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|{_PCT})"
_PCHAR_NC = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|{_PCT})"
_AUTHORITY = (
    rf"(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|{_PCT})*@)?"
    rf"(?:\[(?:{_IPV6}|v[0-9a-fA-F]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+)\]"
    rf"|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|{_PCT})*)(?::\d*)?"
)
_PATH_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_QUERY_FRAG = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI = (
    rf"[A-Za-z][A-Za-z0-9+.\-]*:(?://{_AUTHORITY}{_PATH_ABEMPTY}|/(?:{_PCHAR}+{_PATH_ABEMPTY})?"
    rf"|{_PCHAR}+{_PATH_ABEMPTY}|){_QUERY_FRAG}"
)
_RELATIVE_REF = (
    rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|/(?:{_PCHAR}+{_PATH_ABEMPTY})?"
    rf"|{_PCHAR_NC}+{_PATH_ABEMPTY}|){_QUERY_FRAG}"
)

FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": rf"{_DATE}[Tt]{_TIME}",
    "duration": _DURATION,
    "email": _EMAIL,
    "hostname": rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": _URI,
    "uri-reference": rf"(?:{_URI}|{_RELATIVE_REF})",
    "json-pointer": r"(?:/(?:[^~/]|~[01])*)*",
    # OpenAPI 3 string formats: base64 (RFC 4648 §4) and two hints with no constraint
    "byte": r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?",
    "binary": r"[^]*",
    "password": r"[^]*",
    "unknown": r"[^]*",
}


def filter_rx(kind: str, payload: str, esc: Escapes = DEFAULT) -> int:
    """Regex over JSON string bodies of a string filter: ``("pattern", p)``, ``("format", f)``
    or ``("const", text)`` (the pieces of a negated string schema)."""
    if kind == "pattern":
        from lexguide.jsonschema.pattern import pattern_rx

        return pattern_rx(payload, esc)
    if kind == "format":
        return format_rx(payload, esc)
    from lexguide.jsonschema.escapes import json_literal_body

    return json_literal_body(payload, esc)


def format_rx(name: str, esc: Escapes = DEFAULT) -> int:
    """Regex over JSON string bodies for ``format: name``; KeyError for unknown formats."""
    node = anchored_pattern_rx(FORMATS[name], esc)
    if name == "hostname":  # at most 253 characters in all (RFC 1123 §2.1)
        from lexguide.jsonschema.escapes import any_json_char
        from lexguide.regex import nodes as rx

        node = rx.intersect(node, rx.repeat(any_json_char(esc), 1, 253))
    return node
