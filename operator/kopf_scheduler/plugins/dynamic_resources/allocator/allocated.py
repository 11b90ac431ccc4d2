"""The devices in use: what one allocated claim holds, the state an allocation runs against, and the count kept
claim by claim between scheduling cycles.

Upstream counterpart: the scheduler's ``plugins/dynamicresources/allocateddevices.go`` (``foreachAllocatedDevice``,
``allocatedDevices``) and ``dra_manager.go``'s ``GatherAllocatedState`` (``schedulerapi.AllocatedState``), plus
``structured/internal``'s ``ConsumedCapacityCollection`` (adding and removing consumed capacity).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.plugins.dynamic_resources.allocator.common import Capacity, DeviceID, SharedDeviceID
from kopf_scheduler.state.quantity import parse_quantity


@dataclass(frozen=True)
class ClaimDevices:
    """What one allocated claim holds (upstream ``foreachAllocatedDevice``'s visits): admin-access results hold
    nothing; with consumable capacity a result with a shareID is a share plus its consumed capacity, otherwise
    a dedicated device."""

    devices: tuple[DeviceID, ...] = ()
    shared: tuple[SharedDeviceID, ...] = ()
    consumed: tuple[tuple[DeviceID, Capacity], ...] = ()


def claim_devices(claim: Mapping[str, Any], *, consumable_capacity: bool = True) -> ClaimDevices | None:
    """The devices ``claim`` holds, or None when it holds none (no allocation, or only admin access)."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return None
    devices: list[DeviceID] = []
    shared: list[SharedDeviceID] = []
    consumed: list[tuple[DeviceID, Capacity]] = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        if result.get("adminAccess"):
            continue
        device_id = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        share_id = result.get("shareID")
        if consumable_capacity and share_id is not None:
            shared.append((*device_id, share_id))
            capacity = result.get("consumedCapacity")
            if capacity is not None:
                consumed.append((device_id, {k: parse_quantity(v) for k, v in capacity.items()}))
            continue
        devices.append(device_id)
    if not (devices or shared or consumed):
        return None
    return ClaimDevices(tuple(devices), tuple(shared), tuple(consumed))


@dataclass
class AllocatedState:
    """Devices in use: dedicated ones, shares of multi-allocatable devices and their summed consumed capacity
    (upstream ``schedulerapi.AllocatedState``). Counter consumption follows from these at allocation time."""

    devices: set[DeviceID] = field(default_factory=set)
    shared_devices: set[SharedDeviceID] = field(default_factory=set)
    capacity: dict[DeviceID, Capacity] = field(default_factory=dict)

    def add_claim(self, claim: Mapping[str, Any], *, consumable_capacity: bool = True) -> None:
        """Count in what ``claim`` holds (:func:`claim_devices`)."""
        held = claim_devices(claim, consumable_capacity=consumable_capacity)
        if held is None:
            return
        self.devices.update(held.devices)
        self.shared_devices.update(held.shared)
        for device_id, consumed in held.consumed:
            add_capacity(self.capacity, device_id, consumed)

    def is_allocated(self, device_id: DeviceID) -> bool:
        """Upstream ``IsDeviceAllocated``: dedicated, shared or with consumed capacity."""
        if device_id in self.devices or device_id in self.capacity:
            return True
        return any(shared[:3] == device_id for shared in self.shared_devices)


def allocated_state(claims: Iterable[Mapping[str, Any]], *, consumable_capacity: bool = True) -> AllocatedState:
    """The state from the allocated claims of the cluster; the caller adds in-flight claims with ``add_claim``."""
    state = AllocatedState()
    for claim in claims:
        state.add_claim(claim, consumable_capacity=consumable_capacity)
    return state


class AllocatedDevices:
    """The devices the allocated claims hold, kept current claim by claim (upstream ``allocatedDevices`` in
    ``allocateddevices.go``, fed by the claim informer's events), so a scheduling cycle copies it instead of
    walking every claim of the cluster. Counted: a device two claims name (stale versions) stays taken until
    both let go, as in the union of :func:`allocated_state`."""

    __slots__ = ("_capacity", "_devices", "_shared")

    def __init__(self) -> None:
        self._devices: dict[DeviceID, int] = {}
        self._shared: dict[SharedDeviceID, int] = {}
        #: device → (how many claims consume some of its capacity, the summed consumption).
        self._capacity: dict[DeviceID, tuple[int, Capacity]] = {}

    def add(self, held: ClaimDevices) -> None:
        for device_id in held.devices:
            self._devices[device_id] = self._devices.get(device_id, 0) + 1
        for share_id in held.shared:
            self._shared[share_id] = self._shared.get(share_id, 0) + 1
        for device_id, consumed in held.consumed:
            count, total = self._capacity.get(device_id, (0, {}))
            total = dict(total)
            for name, value in consumed.items():
                total[name] = total.get(name, Fraction(0)) + value
            self._capacity[device_id] = (count + 1, total)

    def remove(self, held: ClaimDevices) -> None:
        """Take back what :meth:`add` counted for the same ``held``."""
        _uncount(self._devices, held.devices)
        _uncount(self._shared, held.shared)
        for device_id, consumed in held.consumed:
            count, total = self._capacity[device_id]
            if count == 1:
                del self._capacity[device_id]
                continue
            total = {name: value - consumed.get(name, Fraction(0)) for name, value in total.items()}
            self._capacity[device_id] = (count - 1, total)

    def state(self) -> AllocatedState:
        """A copy as an :class:`AllocatedState` (in-flight claims are added to it; this one stays as is)."""
        return AllocatedState(
            devices=set(self._devices),
            shared_devices=set(self._shared),
            capacity={device_id: dict(total) for device_id, (_, total) in self._capacity.items()},
        )


def _uncount(counts: dict[Any, int], keys: Iterable[Any]) -> None:
    for key in keys:
        left = counts[key] - 1
        if left:
            counts[key] = left
        else:
            del counts[key]


def add_capacity(collection: dict[DeviceID, Capacity], device_id: DeviceID, consumed: Mapping[str, Fraction]) -> None:
    entry = collection.setdefault(device_id, {})
    for name, value in consumed.items():
        entry[name] = entry.get(name, Fraction(0)) + value


def remove_capacity(
    collection: dict[DeviceID, Capacity], device_id: DeviceID, consumed: Mapping[str, Fraction]
) -> None:
    """Upstream ``ConsumedCapacityCollection.Remove``: subtract, drop the entry once all values are zero."""
    entry = collection.get(device_id)
    if entry is None:
        return
    for name, value in consumed.items():
        if name in entry:
            entry[name] -= value
    if all(v == 0 for v in entry.values()):
        del collection[device_id]
