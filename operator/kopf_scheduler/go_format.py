"""Go's text formatting, for messages that must read exactly as kube-scheduler prints them.

Upstream's event texts, pod conditions and config errors are built with Go's ``fmt`` verbs and
``time.Duration.String``; users and tools compare them with upstream's, so the few formats our messages use
are restated here once: ``%q`` of a string (:func:`go_quote`), ``%v`` of a sorted ``[]string``
(:func:`go_string_list`) and a duration (:func:`go_duration`). :func:`kopf_scheduler.api.args.go_value`, the
``field.Error`` value format, quotes its strings with :func:`go_quote`. Durations in configs
(``metav1.Duration``, e.g. an extender's ``httpTimeout`` or DynamicResources' ``filterTimeout``) are read with
Go's ``time.ParseDuration`` rules and error texts (:func:`parse_go_duration`).

Pure functions of the standard library, importable from every layer (api, framework, scheduler).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

_NANOS_PER_SECOND = 1_000_000_000
_NANOS_PER_MINUTE = 60 * _NANOS_PER_SECOND
_NANOS_PER_HOUR = 60 * _NANOS_PER_MINUTE
#: Go's units below one second, largest first.
_SUB_SECOND_UNITS = (("ms", 1_000_000), ("µs", 1_000), ("ns", 1))


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string: double quotes, with quotes, backslashes and control characters escaped.

    Printable non-ASCII characters stay as they are, as with Go's ``strconv.Quote``.
    """
    return json.dumps(text, ensure_ascii=False)


def go_string_list(items: Collection[str]) -> str:
    """Go's ``%v`` of a sorted ``[]string``: ``[A B]``."""
    return "[" + " ".join(sorted(items)) + "]"


def go_duration(seconds: float) -> str:
    """Format like Go's ``time.Duration.String`` (``10s``, ``1m30s``, ``1.5s``, ``250ms``) for messages."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < _NANOS_PER_SECOND:
        for unit, size in _SUB_SECOND_UNITS:
            if nanos >= size:
                return sign + _trim(nanos / size) + unit
    hours, rest = divmod(nanos, _NANOS_PER_HOUR)
    minutes, rest = divmod(rest, _NANOS_PER_MINUTE)
    text = _trim(rest / 1e9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _trim(value: float) -> str:
    """A decimal without trailing zeros (Go prints ``1.5s``, not ``1.500000000s``)."""
    return f"{value:.9f}".rstrip("0").rstrip(".")


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d*\.?\d*)([^\d.]+)")


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` in seconds (``metav1.Duration``'s JSON form), with Go's error texts."""
    body = text[1:] if text[:1] in "+-" else text
    sign = -1.0 if text[:1] == "-" else 1.0
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    total = 0.0
    position = 0
    for match in _DURATION_PART.finditer(body):
        number, unit = match.groups()
        if match.start() != position or number in ("", "."):
            raise ValueError(f'time: invalid duration "{text}"')
        if unit not in _DURATION_UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{text}"')
        total += float(number) * _DURATION_UNITS[unit]
        position = match.end()
    if position != len(body):
        if position == 0 or body[position:].replace(".", "").isdigit():
            raise ValueError(f'time: missing unit in duration "{text}"')
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * total


__all__ = ["go_duration", "go_quote", "go_string_list", "parse_go_duration"]
