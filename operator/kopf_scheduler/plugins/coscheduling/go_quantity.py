"""Go's ``resource.Quantity`` as far as Coscheduling's "resource gap" message shows it.

scheduler-plugins' PreFilter (``core.CheckClusterResource``) subtracts every node's free resources from a
PodGroup's minResources and, when some remain, fails with ``fmt.Errorf("resource gap: %v", resourceRequest)``: Go
prints the map of ``resource.Quantity`` *structs*, internals and all, e.g. ``map[cpu:{{1500 -3} {<nil>}
DecimalSI}]``. Users search for that text, so it is restated here: the int64 form of a quantity (value and
decimal scale), its cached string (set by parsing a canonical string, cleared by any arithmetic), its format, and
the int64 arithmetic of apimachinery's ``Quantity.Sub`` (``int64Amount.Add``: scales aligned to the smaller).

Only the int64 form is modelled. A quantity Go keeps as an ``inf.Dec`` (more than 18 significant digits, or finer
than nano) prints a pointer address in Go, which no one can match; it prints here as its value at scale 0 with
``{<dec>}`` (docs/coscheduling.md lists it among the differences).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from kopf_scheduler.state.quantity import parse_quantity

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: apimachinery's ``maxInt64Factors``: the decimal digits an int64 quantity may carry.
_MAX_INT64_FACTORS = 18
_NANO = -9
_DECIMAL_SUFFIXES = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SHAPE = re.compile(r"^([+-]?)0*(\d*)(?:\.(\d*))?(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?\d+)$")


@dataclass(slots=True)
class GoQuantity:
    """One ``resource.Quantity``: ``value × 10^scale`` in its int64 form, the cached string and the format."""

    value: int = 0
    scale: int = 0
    format: str = ""
    cached: str = ""
    #: Go would hold it as an ``inf.Dec`` (not modelled beyond its value): ``exact`` is then the value.
    exact: Fraction | None = None

    @classmethod
    def parse(cls, text: str | int | float) -> GoQuantity:
        """apimachinery's ``ParseQuantity`` (how a PodGroup's minResources decode)."""
        string = str(text)
        if string == "0":
            return cls(0, 0, DECIMAL_SI, string)
        shape = _SHAPE.match(string)
        parsed = None if shape is None else _parse_int64(string, *shape.groups())
        if parsed is not None:
            return parsed
        return cls(format=DECIMAL_SI, exact=parse_quantity(string))

    @classmethod
    def of(cls, value: int, format_: str, *, milli: bool = False) -> GoQuantity:
        """``resource.NewQuantity`` / ``NewMilliQuantity``: no cached string."""
        return cls(value, -3 if milli else 0, format_)

    def sign(self) -> int:
        amount = self.exact if self.exact is not None else self.value
        return (amount > 0) - (amount < 0)

    def is_zero(self) -> bool:
        return self.sign() == 0

    def sub(self, other: GoQuantity) -> None:
        """``Quantity.Sub``: the cached string goes; a zero quantity takes the other's format; int64 arithmetic
        where both are int64 and nothing overflows, exact arithmetic (Go's inf.Dec) otherwise."""
        self.cached = ""
        if self.is_zero():
            self.format = other.format
        if self.exact is None and other.exact is None and self._add_int64(-other.value, other.scale):
            return
        self.exact = self._fraction() - other._fraction()

    def _fraction(self) -> Fraction:
        return self.exact if self.exact is not None else Fraction(self.value) * Fraction(10) ** self.scale

    def _add_int64(self, value: int, scale: int) -> bool:
        """``int64Amount.Add`` (False on overflow, the amount unchanged)."""
        if value == 0:
            return True
        if self.value == 0:
            self.value, self.scale = value, scale
            return True
        mine, theirs, new_scale = self.value, value, min(self.scale, scale)
        if self.scale > scale:
            mine = self.value * 10 ** (self.scale - scale)
        elif scale > self.scale:
            theirs = value * 10 ** (scale - self.scale)
        total = mine + theirs
        if not all(_INT64_MIN <= amount <= _INT64_MAX for amount in (mine, theirs, total)):
            return False
        self.value, self.scale = total, new_scale
        return True

    def go_struct(self) -> str:
        """What ``%v`` prints for the struct: ``{{value scale} {<nil>} cached Format}``."""
        if self.exact is not None:
            return f"{{{{0 0}} {{<dec {float(self.exact):g}>}} {self.cached} {self.format}}}"
        return f"{{{{{self.value} {self.scale}}} {{<nil>}} {self.cached} {self.format}}}"


def _parse_int64(string: str, sign: str, num: str, denom: str | None, suffix: str) -> GoQuantity | None:
    """``ParseQuantity``'s int64 fast path; None where Go falls back to inf.Dec (or the text is not a quantity)."""
    num, denom = num or "0", denom or ""
    format_, exponent, binary = _interpret(suffix)
    if format_ is None:
        return None
    mantissa, scale = 1, 0
    if binary:
        if denom:
            return None
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        scale = exponent
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
    if precision < 0:
        return None
    scale -= len(denom)
    if scale < _NANO:
        return None
    shifted = num + denom
    result = int(shifted) * mantissa
    if not _INT64_MIN <= result <= _INT64_MAX:
        return None
    if sign == "-":
        result = -result
    canonical = (
        exponent % 10 == 0 and int(shifted) & 0x07 != 0
        if binary
        else scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
    )
    return GoQuantity(result, scale, format_, string if canonical else "")


def _interpret(suffix: str) -> tuple[str | None, int, bool]:
    """(format, exponent, binary) of a suffix, as apimachinery's ``quantitySuffixer.interpret``."""
    if suffix in _DECIMAL_SUFFIXES:
        return DECIMAL_SI, _DECIMAL_SUFFIXES[suffix], False
    if suffix in _BINARY_SUFFIXES:
        return BINARY_SI, _BINARY_SUFFIXES[suffix], True
    match = _EXPONENT.match(suffix)
    if match is not None:
        return DECIMAL_EXPONENT, int(match.group(1)), False
    return None, 0, False


def go_map(quantities: dict[str, GoQuantity]) -> str:
    """``%v`` of a ``ResourceList``: ``map[k:v k:v]`` with the keys sorted, as fmt prints maps."""
    return "map[" + " ".join(f"{name}:{quantities[name].go_struct()}" for name in sorted(quantities)) + "]"


__all__ = ["BINARY_SI", "DECIMAL_EXPONENT", "DECIMAL_SI", "GoQuantity", "go_map"]
