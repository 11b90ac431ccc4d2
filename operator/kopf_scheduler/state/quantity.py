"""Kubernetes resource quantities ("100m", "1Gi", "1e3") as the integers the scheduler compares.

Upstream keeps CPU in millicores (``MilliValue``) and every other resource in whole units (``Value``),
both rounded *up*, so "1.5m" CPU is 2m and "0.5" bytes is 1. Exact rational arithmetic avoids the float
rounding that would otherwise make a request one unit off on large values.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@lru_cache(maxsize=4096)
def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a quantity; raises :class:`QuantityError` naming the bad input."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a number or string, not {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    text = value.strip()
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(
            f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}"
        )
    number, exponent, suffix = match.groups()
    result = Fraction(number)
    if exponent:
        result *= Fraction(10) ** int(exponent[1:])
    elif suffix in _BINARY:
        result *= _BINARY[suffix]
    else:
        result *= _DECIMAL[suffix or ""]
    return result


def milli_value(value: str | int | float) -> int:
    """Upstream ``Quantity.MilliValue()``: thousandths, rounded up (CPU)."""
    return math.ceil(parse_quantity(value) * 1000)


def int_value(value: str | int | float) -> int:
    """Upstream ``Quantity.Value()``: whole units, rounded up (memory, storage, pods, extended resources)."""
    return math.ceil(parse_quantity(value))


def resource_value(resource: str, value: str | int | float) -> int:
    """The scheduler's integer for ``resource``: millicores for ``cpu``, whole units otherwise."""
    return milli_value(value) if resource == "cpu" else int_value(value)
