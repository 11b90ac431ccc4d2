"""Consumable capacity: what a request consumes of a multi-allocatable device's capacity (rounded up by the
capacity's request policy) and whether it still fits.

Upstream counterpart: ``structured/internal/incubating/consumable_capacity.go`` (``calculateConsumedCapacity``,
``CmpRequestOverCapacity``, ``GetConsumedCapacityFromRequest``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kopf_scheduler.state.quantity import parse_quantity


@dataclass(frozen=True)
class _Quantity:
    """A quantity's value and the text it is written back as (upstream keeps the source format)."""

    value: Fraction
    text: str


def _quantity(raw: Any) -> _Quantity:
    return _Quantity(parse_quantity(raw), str(raw))


def _binary_quantity(value: int) -> _Quantity:
    """``resource.NewQuantity(value, BinarySI)`` in its canonical text."""
    for power, suffix in ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")):
        if value and value % (1 << power) == 0:
            return _Quantity(Fraction(value), f"{value >> power}{suffix}")
    return _Quantity(Fraction(value), str(value))


def _consumed_for(requested: Any, capacity: Mapping[str, Any]) -> _Quantity:
    """Upstream ``calculateConsumedCapacity``: the request rounded up by the request policy, or the default."""
    policy = capacity.get("requestPolicy")
    if requested is None:
        if policy and policy.get("default") is not None:
            return _quantity(policy["default"])
        return _quantity(capacity.get("value", "0"))
    wanted = _quantity(requested)
    if not policy:
        return wanted
    valid_range = policy.get("validRange")
    if valid_range and valid_range.get("min") is not None:
        return _round_up_range(wanted, valid_range)
    if policy.get("validValues") is not None:
        return next((_quantity(v) for v in policy["validValues"] if wanted.value <= parse_quantity(v)), wanted)
    return wanted


def _round_up_range(wanted: _Quantity, valid_range: Mapping[str, Any]) -> _Quantity:
    minimum = _quantity(valid_range["min"])
    if wanted.value < minimum.value:
        return minimum
    if valid_range.get("step") is None:
        return wanted
    step, low = _int_value(valid_range["step"]), _int_value(valid_range["min"])
    added = _ceil(wanted.value) - low
    steps = -(-added // step) if step else 0
    return _binary_quantity(low + step * steps)


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def _int_value(raw: Any) -> int:
    return _ceil(parse_quantity(raw))


def _violates_policy(consumed: _Quantity, policy: Mapping[str, Any] | None) -> bool:
    if not policy:
        return False
    if policy.get("default") is not None and consumed.value == parse_quantity(policy["default"]):
        return False
    valid_range = policy.get("validRange")
    if valid_range is not None:
        if valid_range.get("max") is not None and consumed.value > parse_quantity(valid_range["max"]):
            return True
        if valid_range.get("step") is not None:
            step = _int_value(valid_range["step"])
            added = _ceil(consumed.value) - _int_value(valid_range.get("min", "0"))
            return bool(step) and added % step != 0
        return False
    if policy.get("validValues"):
        return all(consumed.value != parse_quantity(v) for v in policy["validValues"])
    return False


class UnknownCapacity(Exception):
    """A request names a capacity the device does not have (upstream skips such a device)."""


def request_fits_capacity(
    consumed_so_far: Mapping[str, Fraction],
    requests: Mapping[str, Any] | None,
    capacity: Mapping[str, Mapping[str, Any]],
    allocating: Mapping[str, Fraction],
) -> bool:
    """Upstream ``CmpRequestOverCapacity``; raises :class:`UnknownCapacity` for a capacity the device lacks."""
    for name in requests or {}:
        if name not in capacity:
            raise UnknownCapacity(name)
    for name, cap in capacity.items():
        consumed = _consumed_for((requests or {}).get(name), cap)
        if _violates_policy(consumed, cap.get("requestPolicy")):
            return False
        total = consumed_so_far.get(name, Fraction(0)) + consumed.value + allocating.get(name, Fraction(0))
        if total > parse_quantity(cap.get("value", "0")):
            return False
    return True


def consumed_capacity(
    requests: Mapping[str, Any] | None, capacity: Mapping[str, Mapping[str, Any]]
) -> dict[str, _Quantity]:
    """Upstream ``GetConsumedCapacityFromRequest``: name → consumed quantity, for every device capacity."""
    return {name: _consumed_for((requests or {}).get(name), cap) for name, cap in capacity.items()}
