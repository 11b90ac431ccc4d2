"""The Kubernetes CEL libraries a DRA device selector may call, as celpy values and functions: quantity and
semver values, their functions, cel-go's strings extension (version 2), and the Kubernetes regex and lists
libraries.

Upstream counterpart: ``k8s.io/apiserver/pkg/cel/library`` (``quantity.go``, ``semverlib.go``, ``regex.go``,
``lists.go``), ``k8s.io/apiserver/pkg/cel`` (``quantity.go``, ``semver.go``: the value types), blang/semver/v4's
parser and cel-go's ``ext/strings.go``. Which of them the selector environment enables, and how it compiles and
evaluates an expression, is ``cel.py`` (upstream ``k8s.io/dynamic-resource-allocation/cel``).

celpy is imported only inside :func:`kubernetes_functions` (called when the first selector compiles).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from kopf_scheduler.state.quantity import QuantityError, parse_quantity

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class CelError(Exception):
    """A compile or runtime error of a selector; ``str()`` is the text upstream shows for the same failure."""


# ---------------------------------------------------------------------------------------------------------------
# Kubernetes CEL values: quantity and semver.


class Quantity:
    """``resource.Quantity`` as a CEL value (k8s.io/apiserver/pkg/cel/library/quantity.go): exact rationals.

    Equality only, as upstream: ordering goes through ``compareTo``/``isLessThan``, ``<`` is "no such overload".
    """

    __slots__ = ("text", "value")

    def __init__(self, text: str, value: Fraction) -> None:
        self.text = text
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({self.text!r})"


_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")


def _parse_number(part: str, what: str) -> int:
    """One of major/minor/patch, with blang/semver/v4's error texts."""
    if not set(part) <= _NUMBERS:
        raise CelError(f'Invalid character(s) found in {what} number "{part}"')
    if len(part) > 1 and part[0] == "0":
        raise CelError(f'{what.capitalize()} number must not contain leading zeroes "{part}"')
    if not part:
        raise CelError('strconv.ParseUint: parsing "": invalid syntax')
    return int(part)


def _parse_prerelease(part: str) -> int | str:
    if not part:
        raise CelError("Prerelease is empty")
    if set(part) <= _NUMBERS:
        if len(part) > 1 and part[0] == "0":
            raise CelError(f'Numeric PreRelease version must not contain leading zeroes "{part}"')
        return int(part)
    if not set(part) <= _ALPHANUM:
        raise CelError(f'Invalid character(s) found in prerelease "{part}"')
    return part


def _parse_semver(text: str) -> tuple[int, int, int, tuple[int | str, ...]]:
    """blang/semver/v4 ``Parse``: major.minor.patch[-pre][+build], its error texts."""
    if not text:
        raise CelError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise CelError("No Major.Minor.Patch elements found")
    major, minor = _parse_number(parts[0], "major"), _parse_number(parts[1], "minor")
    rest, _, build = parts[2].partition("+")
    patch, dash, pre = rest.partition("-")
    number = _parse_number(patch, "patch")
    prerelease = tuple(_parse_prerelease(p) for p in pre.split(".")) if dash else ()
    for meta in build.split(".") if "+" in parts[2] else ():
        if not meta:
            raise CelError("Build meta data is empty")
        if not set(meta) <= _ALPHANUM:
            raise CelError(f'Invalid character(s) found in build meta data "{meta}"')
    return major, minor, number, prerelease


class Semver:
    """A semantic version as a CEL value (blang/semver/v4 precedence; build metadata is ignored)."""

    __slots__ = ("major", "minor", "patch", "pre", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.major, self.minor, self.patch, self.pre = _parse_semver(text)

    def compare(self, other: Semver) -> int:
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return 1 if mine > theirs else -1
        if self.pre == other.pre:
            return 0
        if not self.pre or not other.pre:  # a release ranks above its pre-releases
            return -1 if self.pre else 1
        for a, b in zip(self.pre, other.pre, strict=False):
            if a == b:
                continue
            if isinstance(a, int) != isinstance(b, int):  # numeric identifiers rank below alphanumeric ones
                return -1 if isinstance(a, int) else 1
            return 1 if a > b else -1  # type: ignore[operator]  # both int or both str: mixed kinds returned above
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __repr__(self) -> str:
        return f"semver({self.text!r})"


def _normalize_semver(text: str) -> str:
    """Upstream ``normalizeAndParse``: drop a leading "v" and leading zeros, fill in a missing minor/patch."""
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or not part[0].isdigit():
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise CelError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# The CEL functions of the Kubernetes quantity and semver libraries (plus the overloads they share).


def new_quantity(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise TypeError("quantity() takes a string")
    try:
        return Quantity(str(text), parse_quantity(str(text)))
    except QuantityError as error:
        raise CelError(str(error).split(": '")[0]) from error


def _is_quantity(text: Any) -> bool:
    try:
        new_quantity(text)
    except CelError:
        return False
    return True


def _new_semver(text: Any, normalize: Any = False) -> Semver:
    if not isinstance(text, str) or not _is_bool(normalize):
        raise TypeError("semver() takes a string and an optional bool")
    return Semver(_normalize_semver(str(text)) if normalize else str(text))


def _is_bool(value: Any) -> bool:
    """A CEL bool: celpy's ``BoolType`` is an ``int`` subclass, not a ``bool``."""
    return isinstance(value, bool) or type(value).__name__ == "BoolType"


def _is_semver(text: Any, normalize: Any = False) -> bool:
    try:
        _new_semver(text, normalize)
    except CelError:
        return False
    return True


def _compare(receiver: Any, other: Any) -> int:
    if isinstance(receiver, Quantity) and isinstance(other, Quantity):
        return (receiver.value > other.value) - (receiver.value < other.value)
    if isinstance(receiver, Semver) and isinstance(other, Semver):
        return receiver.compare(other)
    raise TypeError("compareTo needs two quantities or two semvers")


def _as_integer(q: Any) -> int:
    value = _require_quantity(q).value
    if value.denominator != 1 or not _INT64_MIN <= value <= _INT64_MAX:
        raise CelError("cannot convert value to integer")
    return int(value)


def _is_integer(q: Any) -> bool:
    value = _require_quantity(q).value
    return value.denominator == 1 and _INT64_MIN <= value <= _INT64_MAX


def _arith(sign: int) -> Callable[[Any, Any], Quantity]:
    def apply(q: Any, other: Any) -> Quantity:
        quantity = _require_quantity(q)
        if isinstance(other, Quantity):
            operand = other.value
        elif isinstance(other, int) and not _is_bool(other):
            operand = Fraction(int(other))
        else:
            raise TypeError("add/sub take a quantity or an int")
        value = quantity.value + sign * operand
        return Quantity(str(value), value)

    return apply


def _sign(q: Any) -> int:
    value = _require_quantity(q).value
    return (value > 0) - (value < 0)


def _as_float(q: Any) -> float:
    return float(_require_quantity(q).value)


def _require_quantity(q: Any) -> Quantity:
    if not isinstance(q, Quantity):
        raise TypeError("not a quantity")
    return q


def _version_part(name: str) -> Callable[[Any], int]:
    def part(v: Any) -> int:
        if not isinstance(v, Semver):
            raise TypeError(f"{name}() is a semver method")
        return int(getattr(v, name))

    return part


def kubernetes_functions() -> dict[str, Callable[..., Any]]:
    """The extension functions, returning celpy values (built after celpy is imported)."""
    from celpy import celtypes  # lazily, with the rest of celpy

    def boolean(fn: Callable[..., bool]) -> Callable[..., Any]:
        return lambda *args: celtypes.BoolType(fn(*args))

    def integer(fn: Callable[..., int]) -> Callable[..., Any]:
        return lambda *args: celtypes.IntType(fn(*args))

    return {
        "quantity": new_quantity,
        "isQuantity": boolean(_is_quantity),
        "semver": _new_semver,
        "isSemver": boolean(_is_semver),
        "compareTo": integer(_compare),
        "isGreaterThan": boolean(lambda a, b: _compare(a, b) == 1),
        "isLessThan": boolean(lambda a, b: _compare(a, b) == -1),
        "sign": integer(_sign),
        "asInteger": integer(_as_integer),
        "isInteger": boolean(_is_integer),
        "asApproximateFloat": lambda q: celtypes.DoubleType(_as_float(q)),
        "add": _arith(1),
        "sub": _arith(-1),
        "major": integer(_version_part("major")),
        "minor": integer(_version_part("minor")),
        "patch": integer(_version_part("patch")),
        **_string_functions(celtypes),
        **_list_functions(celtypes),
    }


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _string_functions(celtypes: Any) -> dict[str, Callable[..., Any]]:
    """cel-go's ``ext.Strings`` (version 2) and the Kubernetes regex library, on celpy strings."""
    text = celtypes.StringType

    def string(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError("not a string")
        return str(value)

    def index(value: Any, length: int) -> int:
        if not isinstance(value, int) or _is_bool(value):
            raise TypeError("not an int")
        if not 0 <= value <= length:
            raise CelError(f"index out of range: {value}")
        return int(value)

    def char_at(s: Any, i: Any) -> Any:
        s = string(s)
        return text(s[index(i, len(s)) : index(i, len(s)) + 1])

    def index_of(target: Any, sub: Any, offset: Any = 0) -> Any:
        if isinstance(target, list):
            return celtypes.IntType(next((i for i, item in enumerate(target) if item == sub), -1))
        s = string(target)
        return celtypes.IntType(s.find(string(sub), index(offset, len(s))))

    def last_index_of(target: Any, sub: Any, offset: Any = None) -> Any:
        if isinstance(target, list):
            return celtypes.IntType(max((i for i, item in enumerate(target) if item == sub), default=-1))
        s = string(target)
        end = len(s) if offset is None else index(offset, len(s))
        return celtypes.IntType(s.rfind(string(sub), 0, end + len(string(sub))))

    def split(s: Any, sep: Any, limit: Any = -1) -> Any:
        s, sep, limit = string(s), string(sep), int(limit)
        if limit == 0:
            return celtypes.ListType([])
        parts = list(s) if sep == "" else s.split(sep, limit - 1 if limit > 0 else -1)
        if sep == "" and 0 < limit < len(parts):
            parts = [*parts[: limit - 1], "".join(parts[limit - 1 :])]
        return celtypes.ListType([text(p) for p in parts])

    def substring(s: Any, start: Any, end: Any = None) -> Any:
        s = string(s)
        first = index(start, len(s))
        last = len(s) if end is None else index(end, len(s))
        if first > last:
            raise CelError(f"invalid substring range. start: {first}, end: {last}")
        return text(s[first:last])

    def join(items: Any, sep: Any = "") -> Any:
        if not isinstance(items, list):
            raise TypeError("not a list")
        return text(string(sep).join(string(item) for item in items))

    def find(s: Any, pattern: Any) -> Any:
        import re2  # celpy's own regex engine, RE2 like cel-go's

        match = re2.search(string(pattern), string(s))
        return text(match.group(0) if match else "")

    def find_all(s: Any, pattern: Any, limit: Any = -1) -> Any:
        import re2

        found = [m.group(0) for m in re2.finditer(string(pattern), string(s))]
        return celtypes.ListType([text(f) for f in (found if int(limit) < 0 else found[: int(limit)])])

    return {
        "charAt": char_at,
        "indexOf": index_of,
        "lastIndexOf": last_index_of,
        "lowerAscii": lambda s: text(string(s).translate(_ASCII_LOWER)),
        "upperAscii": lambda s: text(string(s).translate(_ASCII_UPPER)),
        "trim": lambda s: text(string(s).strip()),
        "split": split,
        "substring": substring,
        "join": join,
        "replace": lambda s, old, new, n=-1: text(string(s).replace(string(old), string(new), int(n))),
        "find": find,
        "findAll": find_all,
    }


def _list_functions(celtypes: Any) -> dict[str, Callable[..., Any]]:
    """The Kubernetes lists library (``min()`` is celpy's own)."""

    def items(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise TypeError("not a list")
        return list(value)

    def largest(value: Any) -> Any:
        values = items(value)
        if not values:
            raise CelError("max called on empty list")
        return max(values)

    def total(value: Any) -> Any:
        values = items(value)
        return sum(values[1:], values[0]) if values else celtypes.IntType(0)

    return {
        "isSorted": lambda value: celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(items(value)))),
        "sum": total,
        "max": largest,
    }
