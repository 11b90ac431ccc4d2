"""Claim constraints: ``matchAttribute`` (all devices of the named requests share a value) and
``distinctAttribute`` (they all differ).

Upstream counterpart: ``structured/internal/incubating/allocator_incubating.go`` (``matchAttributeConstraint``,
``lookupAttribute``) and ``constraint.go`` (``distinctAttributeConstraint``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kopf_scheduler.plugins.dynamic_resources.allocator.common import AllocationError, DeviceID
from kopf_scheduler.plugins.dynamic_resources.allocator.requests import claim_ref, claim_spec_devices


def _lookup_attribute(device: Mapping[str, Any], driver: str, name: str) -> Mapping[str, Any] | None:
    """Upstream ``lookupAttribute``: a fully qualified name, or its id part when its domain is the driver."""
    attributes: Mapping[str, Mapping[str, Any]] = device.get("attributes") or {}
    if name in attributes:
        return attributes[name]
    domain, sep, ident = name.partition("/")
    if not sep or domain != driver:
        return None
    return attributes.get(ident)


_ATTRIBUTE_TYPES = ("string", "int", "bool", "version")


def _attribute_type(attribute: Mapping[str, Any]) -> str | None:
    return next((kind for kind in _ATTRIBUTE_TYPES if attribute.get(kind) is not None), None)


class Constraint:
    def __init__(self, request_names: Iterable[str], attribute: str) -> None:
        self.request_names = set(request_names)
        self.attribute = attribute
        self.num_devices = 0

    def applies(self, request: str, subrequest: str) -> bool:
        if not self.request_names:
            return True
        if request in self.request_names:
            return True
        return bool(subrequest) and f"{request}/{subrequest}" in self.request_names

    def add(self, request: str, subrequest: str, device: Mapping[str, Any], device_id: DeviceID) -> bool:
        raise NotImplementedError

    def remove(self, request: str, subrequest: str) -> None:
        raise NotImplementedError


class MatchAttribute(Constraint):
    """All devices of the named requests share the attribute's value."""

    def __init__(self, request_names: Iterable[str], attribute: str) -> None:
        super().__init__(request_names, attribute)
        self.value: Mapping[str, Any] | None = None

    def add(self, request: str, subrequest: str, device: Mapping[str, Any], device_id: DeviceID) -> bool:
        if not self.applies(request, subrequest):
            return True
        attribute = _lookup_attribute(device, device_id[0], self.attribute)
        if attribute is None:
            return False
        if self.num_devices == 0:
            self.value, self.num_devices = attribute, 1
            return True
        kind = _attribute_type(attribute)
        if kind is None or self.value is None or self.value.get(kind) is None:
            return False
        if attribute[kind] != self.value[kind]:
            return False
        self.num_devices += 1
        return True

    def remove(self, request: str, subrequest: str) -> None:
        if self.applies(request, subrequest):
            self.num_devices -= 1


class DistinctAttribute(Constraint):
    """Devices of the named requests have different values (upstream keeps one value per request name)."""

    def __init__(self, request_names: Iterable[str], attribute: str) -> None:
        super().__init__(request_names, attribute)
        self.values: dict[str, Mapping[str, Any]] = {}

    def add(self, request: str, subrequest: str, device: Mapping[str, Any], device_id: DeviceID) -> bool:
        if not self.applies(request, subrequest):
            return True
        attribute = _lookup_attribute(device, device_id[0], self.attribute)
        if attribute is None:
            return False
        if self.num_devices > 0 and not self._distinct(attribute):
            return False
        self.values[request] = attribute
        self.num_devices += 1
        return True

    def _distinct(self, attribute: Mapping[str, Any]) -> bool:
        """No recorded value equals the attribute's (an attribute of unknown type fits only an empty record)."""
        kind = _attribute_type(attribute)
        for other in self.values.values():
            if kind is None or (other.get(kind) is not None and other[kind] == attribute[kind]):
                return False
        return True

    def remove(self, request: str, subrequest: str) -> None:
        if self.applies(request, subrequest):
            self.values.pop(request, None)
            self.num_devices -= 1


def build_constraints(claim: Mapping[str, Any]) -> list[Constraint]:
    constraints: list[Constraint] = []
    for index, raw in enumerate(claim_spec_devices(claim).get("constraints") or ()):
        requests = raw.get("requests") or ()
        if raw.get("matchAttribute") is not None:
            constraints.append(MatchAttribute(requests, raw["matchAttribute"]))
        elif raw.get("distinctAttribute") is not None:
            constraints.append(DistinctAttribute(requests, raw["distinctAttribute"]))
        else:
            raise AllocationError(
                f"claim {claim_ref(claim)}, constraint #{index}: empty constraint (unsupported constraint type?)"
            )
    return constraints
