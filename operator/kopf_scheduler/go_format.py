"""Go's text formatting, for messages that must read exactly as kube-scheduler prints them.

Upstream's event texts, pod conditions and config errors are built with Go's ``fmt`` verbs and
``time.Duration.String``; users and tools compare them with upstream's, so the few formats our messages use
are restated here once: ``%q`` of a string (:func:`go_quote`), ``%v`` of a sorted ``[]string``
(:func:`go_string_list`) and a duration (:func:`go_duration`). :func:`kopf_scheduler.api.args.go_value`, the
``field.Error`` value format, quotes its strings with :func:`go_quote`.

Pure functions of the standard library, importable from every layer (api, framework, scheduler).
"""

from __future__ import annotations

import json
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


__all__ = ["go_duration", "go_quote", "go_string_list"]
