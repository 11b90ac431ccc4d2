"""What every part of the structured allocator shares: its limits, device identities, errors, the feature set
and the CEL selector interface it evaluates through.

Upstream counterpart: ``k8s.io/dynamic-resource-allocation@v0.36.3/structured`` ``allocator.go`` (``Features``, the
``Allocator`` interface, ``ErrFailedAllocationOnNode``) and ``internal``'s shared types (``DeviceID``,
``SharedDeviceID``, ``ConsumedCapacity``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

#: resource.k8s.io/v1 ``AllocationResultsMaxSize``: devices one claim may get.
ALLOCATION_RESULTS_MAX_SIZE = 32

EXACT_COUNT = "ExactCount"
ALL = "All"

DeviceID = tuple[str, str, str]  # driver, pool, device
SharedDeviceID = tuple[str, str, str, str]  # driver, pool, device, shareID
Capacity = dict[str, Fraction]


class CompiledSelectorLike(Protocol):
    def matches(self, driver: str, device: Mapping[str, Any]) -> bool: ...


class SelectorCompiler(Protocol):
    def compile(self, expression: str) -> CompiledSelectorLike: ...


class AllocationError(Exception):
    """A fatal problem with a claim or class (upstream: Allocate returns an error); str() is user-facing."""


class AllocationTimeout(AllocationError):
    """The search ran past its deadline (upstream: the Filter context's deadline, DynamicResourcesArgs
    filterTimeout); the plugin reports "node X: timed out trying to allocate devices" as upstream does."""


class NodeAllocationError(AllocationError):
    """Upstream's ``ErrFailedAllocationOnNode``: only this node failed (invalid pools); the plugin reports it
    as Unschedulable for the node instead of aborting the attempt."""


@dataclass(frozen=True)
class Features:
    """Upstream ``internal.Features``, defaulted to what the 1.36 scheduler passes with default gates (the plugin
    passes ``device_binding_and_status=True`` explicitly; the default here keeps the allocator's own tests)."""

    admin_access: bool = True  # DRAAdminAccess
    prioritized_list: bool = True  # DRAPrioritizedList
    partitionable_devices: bool = True  # DRAPartitionableDevices
    device_taints: bool = True  # DRADeviceTaints
    consumable_capacity: bool = True  # DRAConsumableCapacity
    device_binding_and_status: bool = False  # DRADeviceBindingConditions && DRAResourceClaimDeviceStatus (on in 1.36)


#: Counter set name → counter name → value (a pool's available or consumed shared counters).
CounterSets = dict[str, dict[str, Fraction]]


def spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}
