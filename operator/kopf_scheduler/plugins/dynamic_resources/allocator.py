"""The structured-parameters device allocator behind DynamicResources (issue 12).

Upstream counterpart: ``k8s.io/dynamic-resource-allocation@v0.36.3/structured``. ``allocator.go`` picks one of
three implementations by the feature set the scheduler passes (``dynamicresources.go`` builds it from
``plugins/feature``). With the gates on by default in 1.36 (DRAAdminAccess, DRAPrioritizedList,
DRAPartitionableDevices, DRADeviceTaints, DRAConsumableCapacity, and DRADeviceBindingConditions with
DRAResourceClaimDeviceStatus, both beta and on in 1.36's kube_features.go; DRAListTypeAttributes is never passed)
"stable" is too small (no ConsumableCapacity) and "incubating" is chosen.
This module restates that variant: ``internal/incubating/allocator_incubating.go`` (Allocate, allocateOne,
allocateDevice, counters, node selector of the result), ``pools_incubating.go`` (GatherPools: newest pool
generation, incomplete and invalid pools, pool and slice order), ``constraint.go`` (distinctAttribute),
``consumable_capacity.go`` (capacity request policies) and the scheduler's ``allocateddevices.go``
(``foreachAllocatedDevice``: which results count as allocated).

Objects are the API's JSON dicts (resource.k8s.io/v1). The search order is upstream's, because the conformance
suite compares the chosen devices: pools sorted by (driver, pool), pools with binding conditions last, slices of
a pool sorted by name, devices in slice order; the first full solution wins (depth-first, combinations within a
request, backtracking across requests and claims). CEL selectors are evaluated through :class:`SelectorCompiler`
so this module stays I/O-free and independent of the CEL implementation.
"""

from __future__ import annotations

import copy
import functools
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from kopf_scheduler.state.node_affinity import NodeSelector, NodeSelectorParseError
from kopf_scheduler.state.quantity import parse_quantity

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


# --- allocated state (scheduler allocateddevices.go + dra_manager.go GatherAllocatedState) ---


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
            _add_capacity(self.capacity, device_id, consumed)

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


def _add_capacity(collection: dict[DeviceID, Capacity], device_id: DeviceID, consumed: Mapping[str, Fraction]) -> None:
    entry = collection.setdefault(device_id, {})
    for name, value in consumed.items():
        entry[name] = entry.get(name, Fraction(0)) + value


def _remove_capacity(
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


# --- node matching and pools (pools_incubating.go) ---


def _node_name(node: Mapping[str, Any]) -> str:
    return (node.get("metadata") or {}).get("name", "")


def _node_labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def node_matches(node: Mapping[str, Any], node_name: str, all_nodes: bool, node_selector: Mapping | None) -> bool:
    """Upstream ``NodeMatches``; raises ValueError when the node selector does not parse."""
    if node_name:
        return _node_name(node) == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        selector = NodeSelector.parse(node_selector, strict=True)
        return selector.matches(_node_labels(node), _node_name(node))
    return False


@dataclass
class Pool:
    """A resource pool as seen from one node (upstream ``Pool``)."""

    driver: str
    name: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[Mapping[str, Any]] = field(default_factory=list)  # device slices targeting the node
    other_slices: list[Mapping[str, Any]] = field(default_factory=list)  # device slices not targeting it
    counter_sets: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.name}"


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _pool_key(slice_: Mapping[str, Any]) -> tuple[str, str]:
    spec = _spec(slice_)
    return spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")


def _generation(slice_: Mapping[str, Any]) -> int:
    return int((_spec(slice_).get("pool") or {}).get("generation") or 0)


def _slice_count(slice_: Mapping[str, Any]) -> int:
    return int((_spec(slice_).get("pool") or {}).get("resourceSliceCount") or 0)


def _slice_name(slice_: Mapping[str, Any]) -> str:
    return (slice_.get("metadata") or {}).get("name", "")


def _devices(slice_: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return _spec(slice_).get("devices") or ()


def _slice_relevant(slice_: Mapping[str, Any], node: Mapping[str, Any]) -> bool | None:
    """Whether the slice offers devices to the node; None for a slice of an unknown kind (skipped)."""
    spec = _spec(slice_)
    if spec.get("sharedCounters"):
        return True
    node_name, all_nodes, selector = spec.get("nodeName") or "", bool(spec.get("allNodes")), spec.get("nodeSelector")
    if node_name or all_nodes or selector is not None:
        try:
            return node_matches(node, node_name, all_nodes, selector)
        except (NodeSelectorParseError, ValueError) as err:
            raise AllocationError(
                f"gather pool information: failed to perform node selection for slice {_slice_name(slice_)}: "
                f"failed to parse node selector: {err}"
            ) from err
    if spec.get("perDeviceNodeSelection"):
        for device in _devices(slice_):
            try:
                if _device_node_matches(node, device):
                    return True
            except (NodeSelectorParseError, ValueError) as err:
                raise AllocationError(
                    f"gather pool information: failed to perform node selection for device {device.get('name', '')} "
                    f"in slice {_slice_name(slice_)}: failed to parse node selector: {err}"
                ) from err
        return False
    return None


def _device_node_matches(node: Mapping[str, Any], device: Mapping[str, Any]) -> bool:
    return node_matches(node, device.get("nodeName") or "", bool(device.get("allNodes")), device.get("nodeSelector"))


def _add_slice(pools: dict[tuple[str, str], list[Mapping[str, Any]]], slice_: Mapping[str, Any]) -> None:
    """Upstream ``addSlice``: only the newest generation of a pool is kept."""
    key = _pool_key(slice_)
    current = pools.get(key)
    if current is None or _generation(slice_) > _generation(current[0]):
        pools[key] = [slice_]
    elif _generation(slice_) == _generation(current[0]):
        current.append(slice_)


def gather_pools(
    slices_for_node: Sequence[Mapping[str, Any]],
    node: Mapping[str, Any],
    features: Features,
    all_slices: Sequence[Mapping[str, Any]],
) -> list[Pool]:
    """Upstream ``GatherPools``: the pools with devices for the node, sorted by (driver, pool), those with
    binding conditions last. Out-dated pools are dropped; incomplete ones are kept, marked."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for slice_ in slices_for_node:
        spec = _spec(slice_)
        if not features.partitionable_devices and (
            spec.get("perDeviceNodeSelection") is not None or spec.get("sharedCounters")
        ):
            continue
        if _slice_relevant(slice_, node):
            _add_slice(grouped, slice_)
    plain: list[Pool] = []
    with_binding: list[Pool] = []
    for (driver, name), pool_slices in grouped.items():
        pool = _pool_for(driver, name, pool_slices, features, all_slices)
        if pool is None:
            continue
        (with_binding if _has_binding_conditions(pool) else plain).append(pool)
    plain.sort(key=lambda p: (p.driver, p.name))
    with_binding.sort(key=lambda p: (p.driver, p.name))
    return plain + with_binding


def _pool_for(
    driver: str,
    name: str,
    pool_slices: list[Mapping[str, Any]],
    features: Features,
    all_slices: Sequence[Mapping[str, Any]],
) -> Pool | None:
    expected = _slice_count(pool_slices[0])
    if len(pool_slices) == expected:
        return _build_pool(driver, name, pool_slices, features, None)
    obsolete, all_for_pool = _slices_in_pool(all_slices, driver, name, _generation(pool_slices[0]))
    if obsolete:
        return None
    if len(all_for_pool) != expected:
        return Pool(driver, name, incomplete=True)
    return _build_pool(driver, name, pool_slices, features, all_for_pool)


def _slices_in_pool(
    all_slices: Sequence[Mapping[str, Any]], driver: str, name: str, generation: int
) -> tuple[bool, list[Mapping[str, Any]]]:
    """Upstream ``checkSlicesInPool``: (a newer generation exists, all slices of this generation)."""
    found = []
    for slice_ in all_slices:
        if _pool_key(slice_) != (driver, name):
            continue
        if _generation(slice_) == generation:
            found.append(slice_)
        elif _generation(slice_) > generation:
            return True, []
    return False, found


def _build_pool(
    driver: str,
    name: str,
    pool_slices: list[Mapping[str, Any]],
    features: Features,
    all_for_pool: list[Mapping[str, Any]] | None,
) -> Pool:
    """Upstream ``buildPool``: slices by name, counter-set slices apart, names and counters validated."""
    ordered = sorted(pool_slices, key=_slice_name)
    if features.partitionable_devices:
        device_slices = [s for s in ordered if not _spec(s).get("sharedCounters")]
        counter_slices = [s for s in ordered if _spec(s).get("sharedCounters")]
    else:
        device_slices, counter_slices = ordered, []
    problem = _duplicate_device_name(device_slices)
    if problem:
        return Pool(driver, name, invalid=True, invalid_reason=problem)
    if not features.partitionable_devices:
        return Pool(driver, name, slices=device_slices)
    counter_sets: dict[str, Mapping[str, Any]] = {}
    for slice_ in counter_slices:
        for counter_set in _spec(slice_).get("sharedCounters") or ():
            if counter_set.get("name", "") in counter_sets:
                reason = f"duplicate counter set name {counter_set.get('name', '')}"
                return Pool(driver, name, invalid=True, invalid_reason=reason)
            counter_sets[counter_set.get("name", "")] = counter_set
    problem = _counter_consumption_problem(counter_sets, ordered)
    if problem:
        return Pool(driver, name, invalid=True, invalid_reason=problem)
    if all_for_pool is None or len(ordered) == len(all_for_pool):
        return Pool(driver, name, slices=device_slices, counter_sets=counter_sets)
    seen = {_slice_name(s) for s in ordered}
    others = [s for s in all_for_pool if _slice_name(s) not in seen]
    problem = _counter_consumption_problem(counter_sets, others)
    if problem:
        return Pool(driver, name, invalid=True, invalid_reason=problem)
    return Pool(driver, name, slices=device_slices, other_slices=others, counter_sets=counter_sets)


def _duplicate_device_name(slices: Sequence[Mapping[str, Any]]) -> str:
    names: set[str] = set()
    for slice_ in slices:
        for device in _devices(slice_):
            if device.get("name", "") in names:
                return f"duplicate device name {device.get('name', '')}"
            names.add(device.get("name", ""))
    return ""


def _counter_consumption_problem(counter_sets: Mapping[str, Mapping[str, Any]], slices: Sequence[Mapping]) -> str:
    for slice_ in slices:
        for device in _devices(slice_):
            for consumption in device.get("consumesCounters") or ():
                set_name = consumption.get("counterSet", "")
                counter_set = counter_sets.get(set_name)
                if counter_set is None:
                    return f"counter set {set_name} not found"
                for counter in consumption.get("counters") or {}:
                    if counter not in (counter_set.get("counters") or {}):
                        return f"counter {counter} not found in counter set {set_name}"
    return ""


def _has_binding_conditions(pool: Pool) -> bool:
    return any(d.get("bindingConditions") is not None for s in pool.slices for d in _devices(s))


# --- requests ---


@dataclass(frozen=True)
class Request:
    """A request's ``exactly`` or one ``firstAvailable`` subrequest (upstream ``requestAccessor``), read once:
    the search consults these fields for every candidate device."""

    name: str
    spec: Mapping[str, Any]
    subrequest: bool
    device_class_name: str
    allocation_mode: str
    count: int
    admin_access: bool
    has_admin_access: bool
    selectors: tuple[Mapping[str, Any], ...]
    tolerations: tuple[Mapping[str, Any], ...]
    capacity_requests: Mapping[str, Any] | None

    @classmethod
    def of(cls, name: str, spec: Mapping[str, Any], *, subrequest: bool) -> Request:
        count = spec.get("count")
        admin = None if subrequest else spec.get("adminAccess")  # subrequests have no adminAccess
        return cls(
            name=name,
            spec=spec,
            subrequest=subrequest,
            device_class_name=spec.get("deviceClassName") or "",
            allocation_mode=spec.get("allocationMode") or EXACT_COUNT,
            count=1 if count is None else int(count),
            admin_access=bool(admin),
            has_admin_access=admin is not None,
            selectors=tuple(spec.get("selectors") or ()),
            tolerations=tuple(spec.get("tolerations") or ()),
            capacity_requests=(spec.get("capacity") or {}).get("requests"),
        )


@dataclass(frozen=True)
class Candidate:
    """A device with where it comes from (upstream ``deviceWithID``).

    ``verdicts`` keeps each CEL selector's outcome on this device by expression (True, False or the
    evaluation error): a selector sees only the driver and the device, and a candidate lives only as long as
    the slices it was built from (:class:`SliceIndex`), so the outcome holds for every later pod."""

    id: DeviceID
    device: Mapping[str, Any]
    slice: Mapping[str, Any]
    pool: Pool
    verdicts: dict[str, bool | Exception] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class RequestData:
    request: Request
    parent: Request | None
    device_class: Mapping[str, Any] | None = None
    num_devices: int = 0
    selected_subrequest: int = 0
    all_devices: list[Candidate] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.parent.name}/{self.request.name}" if self.parent else self.request.name


@dataclass
class DeviceResult:
    request: Request
    parent: Request | None
    candidate: Candidate
    admin_access: bool | None = None
    share_id: str | None = None
    consumed_capacity: dict[str, Any] | None = None

    @property
    def request_name(self) -> str:
        return f"{self.parent.name}/{self.request.name}" if self.parent else self.request.name


RequestKey = tuple[int, int, int]  # claim, request, subrequest index


def _claim_ref(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name', '')}" if meta.get("namespace") else meta.get("name", "")


def _claim_spec_devices(claim: Mapping[str, Any]) -> Mapping[str, Any]:
    return _spec(claim).get("devices") or {}


def _claim_requests(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(_claim_spec_devices(claim).get("requests") or ())


def _request_of(raw: Mapping[str, Any]) -> Request:
    return Request.of(raw.get("name", ""), raw.get("exactly") or {}, subrequest=False)


def _class_names(raw: Mapping[str, Any]) -> list[str]:
    """The DeviceClasses a claim's request names (its ``exactly`` or its subrequests)."""
    if raw.get("exactly") is not None:
        return [(raw["exactly"] or {}).get("deviceClassName") or ""]
    return [sub.get("deviceClassName") or "" for sub in raw.get("firstAvailable") or ()]


def _subrequests_of(raw: Mapping[str, Any]) -> list[Request]:
    return [Request.of(sub.get("name", ""), sub, subrequest=True) for sub in raw.get("firstAvailable") or ()]


# --- constraints (allocator_incubating.go matchAttributeConstraint, constraint.go) ---


def _lookup_attribute(device: Mapping[str, Any], driver: str, name: str) -> Mapping[str, Any] | None:
    """Upstream ``lookupAttribute``: a fully qualified name, or its id part when its domain is the driver."""
    attributes = device.get("attributes") or {}
    if name in attributes:
        return attributes[name]
    domain, sep, ident = name.partition("/")
    if not sep or domain != driver:
        return None
    return attributes.get(ident)


_ATTRIBUTE_TYPES = ("string", "int", "bool", "version")


def _attribute_type(attribute: Mapping[str, Any]) -> str | None:
    return next((kind for kind in _ATTRIBUTE_TYPES if attribute.get(kind) is not None), None)


class _Constraint:
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


class MatchAttribute(_Constraint):
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


class DistinctAttribute(_Constraint):
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


def _build_constraints(claim: Mapping[str, Any]) -> list[_Constraint]:
    constraints: list[_Constraint] = []
    for index, raw in enumerate(_claim_spec_devices(claim).get("constraints") or ()):
        requests = raw.get("requests") or ()
        if raw.get("matchAttribute") is not None:
            constraints.append(MatchAttribute(requests, raw["matchAttribute"]))
        elif raw.get("distinctAttribute") is not None:
            constraints.append(DistinctAttribute(requests, raw["distinctAttribute"]))
        else:
            raise AllocationError(
                f"claim {_claim_ref(claim)}, constraint #{index}: empty constraint (unsupported constraint type?)"
            )
    return constraints


# --- taints ---


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Upstream ``resourceclaim.ToleratesTaint``."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def taint_prevents_allocation(device: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """A NoSchedule or NoExecute taint of the device that no toleration tolerates (other effects ignored)."""
    for taint in device.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in tolerations):
            return True
    return False


# --- consumable capacity (consumable_capacity.go) ---


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


def consumed_capacity(requests: Mapping[str, Any] | None, capacity: Mapping[str, Mapping[str, Any]]) -> dict:
    """Upstream ``GetConsumedCapacityFromRequest``: name → consumed quantity, for every device capacity."""
    return {name: _consumed_for((requests or {}).get(name), cap) for name, cap in capacity.items()}


# --- the allocator ---


@dataclass
class _Rollback:
    counters_reserved: bool = False
    constraints_added: int = 0
    device_marked: bool = False
    capacity_inserted: dict[str, Fraction] | None = None
    capacity_entry_existed: bool = False
    result_added: bool = False
    previous_results: int = 0


class _CompileFailed(Exception):
    """A selector verdict: the expression did not compile (kept apart from runtime errors)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _Stop(Exception):
    """Upstream ``errAllocationResultMaxSizeExceeded``: more devices than a claim may hold."""


CounterSets = dict[str, dict[str, Fraction]]


NodeDevices = tuple[list[Pool], list[list[list[Candidate]]]]


class SliceIndex:
    """The ResourceSlices of one moment, split by node, with each node's pools and device candidates kept
    between scheduling cycles.

    Upstream runs ``GatherPools`` and builds the candidates on every Allocate call (once per pod and node); the
    inputs are only the slices, the node's name and its labels (slice node selectors), so one index serves
    every pod until a ResourceSlice changes (the plugin then builds a new one), and a node's entry is rebuilt
    when its labels change. Allocation state is not part of it: devices in use are checked per Allocate.
    """

    def __init__(self, slices: Iterable[Mapping[str, Any]], features: Features) -> None:
        self.features = features
        self.all_slices = list(slices)
        self.slices_on_node: dict[str, list[Mapping[str, Any]]] = {}
        self.slices_shared: list[Mapping[str, Any]] = []
        for slice_ in self.all_slices:
            spec = _spec(slice_)
            if not spec.get("nodeName") or spec.get("sharedCounters"):
                self.slices_shared.append(slice_)
            else:
                self.slices_on_node.setdefault(spec["nodeName"], []).append(slice_)
        #: node name → (the node's labels when built, its pools, their candidates by pool and slice).
        self._nodes: dict[str, tuple[dict[str, str], NodeDevices]] = {}
        #: node name → the node's kept searches (see :meth:`Allocator.allocate`), dropped with its entry.
        self._searches: dict[str, _NodeSearches] = {}

    def node_devices(self, node: Mapping[str, Any]) -> NodeDevices:
        """The node's pools (``gather_pools``) and their devices in search order; raises AllocationError as
        ``gather_pools`` does (not kept: the next call raises again)."""
        name = _node_name(node)
        labels = _node_labels(node)
        cached = self._nodes.get(name)
        if cached is not None and cached[0] == labels:
            return cached[1]
        slices_for_node = self.slices_on_node.get(name, []) + self.slices_shared
        pools = gather_pools(slices_for_node, node, self.features, self.all_slices)
        candidates = [[[_candidate(p, s, d) for d in _devices(s)] for s in p.slices] for p in pools]
        devices = (pools, candidates)
        self._nodes[name] = (dict(labels), devices)
        self._searches.pop(name, None)
        return devices

    def searches(self, node: Mapping[str, Any]) -> _NodeSearches | None:
        """The node's kept searches, for a node :meth:`node_devices` just answered; None when its pools are
        not all plain (shared counters, slices of the pool elsewhere, incomplete or invalid: the outcome then
        depends on more than the node's own devices)."""
        name = _node_name(node)
        searches = self._searches.get(name)
        if searches is None:
            pools, candidates = self._nodes[name][1]
            plain = all(not (p.counter_sets or p.other_slices or p.incomplete or p.invalid) for p in pools)
            ids = tuple(c.id for pool in candidates for slice_ in pool for c in slice_)
            searches = self._searches[name] = _NodeSearches(ids if plain else None)
        return searches if searches.device_ids is not None else None


def _answer(results: list[dict] | None) -> Callable[[], list[dict]] | None:
    return None if results is None else (lambda: results)


#: The most distinct searches kept per node (pods with different claims); the oldest go first.
KEPT_SEARCHES_PER_NODE = 8


@dataclass
class _NodeSearches:
    """Finished searches on one node by (claims signature, which of its devices were in use): the search is
    deterministic in these (with the pools and classes), so a later pod with equal claims gets the same devices
    without searching again; its results are rebuilt for its own claims."""

    device_ids: tuple[DeviceID, ...] | None
    found: dict[tuple[str, tuple[int, ...]], _Allocation | None] = field(default_factory=dict)
    device_set: frozenset[DeviceID] = frozenset()

    def __post_init__(self) -> None:
        self.device_set = frozenset(self.device_ids or ())

    def in_use(self, allocated: AllocatedState) -> tuple[int, ...]:
        assert self.device_ids is not None
        taken = allocated.devices
        if self.device_set.isdisjoint(taken):
            return ()
        return tuple(index for index, device_id in enumerate(self.device_ids) if device_id in taken)

    def keep(self, key: tuple[str, tuple[int, ...]], search: _Allocation | None) -> None:
        if len(self.found) >= KEPT_SEARCHES_PER_NODE:
            del self.found[next(iter(self.found))]
        self.found[key] = search


class Allocator:
    """Upstream ``incubating.Allocator``: built once per scheduling cycle, ``allocate`` runs per node.

    ``index`` (the plugin's, kept between cycles) replaces ``slices``; it must have been built from the
    current slices with the same features."""

    def __init__(
        self,
        *,
        features: Features,
        allocated: AllocatedState,
        classes: Mapping[str, Mapping[str, Any]],
        slices: Sequence[Mapping[str, Any]],
        cel: SelectorCompiler,
        new_share_id: Callable[[], str] | None = None,
        index: SliceIndex | None = None,
    ) -> None:
        self.features = features
        self.allocated = allocated
        self.classes = classes
        self.index = index if index is not None else SliceIndex(slices, features)
        self.cel = cel
        self.new_share_id = new_share_id or (lambda: str(uuid.uuid4()))
        self.available_counters: dict[str, CounterSets] = {}
        self._compiled: dict[str, CompiledSelectorLike | Exception] = {}
        #: The most claims an ``allocate`` call made sure the Python stack has room for.
        self.recursion_room_for = 0
        #: Claims signatures by the identities of the claims (held), see :meth:`_signature`.
        self._signatures: dict[tuple[int, ...], tuple[list[Mapping[str, Any]], str]] = {}
        #: Requests and subrequests read once per cycle, by the identity of the claim's raw request (held).
        self._requests: dict[int, tuple[Mapping[str, Any], Request, list[Request]]] = {}

    def allocate(
        self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], *, deadline: float | None = None
    ) -> list[dict] | None:
        """One AllocationResult per claim, or None when the claims do not fit this node.

        Raises :class:`AllocationError` for problems with a claim or class, :class:`NodeAllocationError` when
        only invalid pools stood in the way and :class:`AllocationTimeout` once ``time.monotonic()`` passes
        ``deadline``.

        A search that succeeded or failed on a node of plain pools is kept (see :class:`_NodeSearches`) and
        answers again while the node's devices in use and the claims' requests are the same; the results
        are then rebuilt for the claims given (fresh objects, as a search's)."""
        found = self.allocate_deferred(node, claims, deadline=deadline)
        return None if found is None else found()

    def allocate_deferred(
        self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], *, deadline: float | None = None
    ) -> Callable[[], list[dict]] | None:
        """:meth:`allocate`, with the results behind a call: a kept search builds them only when asked (the
        plugin needs those of the node Reserve picks, and Score those of prioritized lists)."""
        searches = self._searches_for(node, claims)
        if searches is None:
            return _answer(_Allocation(self, node, claims, deadline).run())
        kept_searches, key = searches
        if key in kept_searches.found:
            kept = kept_searches.found[key]
            return None if kept is None else functools.partial(kept.results_for, list(claims))
        search = _Allocation(self, node, claims, deadline)
        results = search.run()
        if results is None:
            kept_searches.keep(key, None)
        elif not any(result.share_id is not None for found in search.results for result in found):
            kept_searches.keep(key, search)
        return _answer(results)

    def _searches_for(
        self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]
    ) -> tuple[_NodeSearches, tuple[str, tuple[int, ...]]] | None:
        """The node's kept searches and this search's key, or None when it cannot be kept: devices shared or
        with consumed capacity in use (their state is more than in use or not), or claims without a signature."""
        if self.allocated.capacity or self.allocated.shared_devices:
            return None
        signature = self._signature(claims)
        if signature is None:
            return None
        self.index.node_devices(node)
        searches = self.index.searches(node)
        if searches is None:
            return None
        return searches, (signature, searches.in_use(self.allocated))

    def _signature(self, claims: Sequence[Mapping[str, Any]]) -> str | None:
        """What the search reads of the claims and their classes, as text (once per list of claims; a new list
        per node, as the extended-resource claim's variants, is not kept)."""
        # The kept entry holds its claims alive, so equal identities are the same objects.
        ids = tuple(map(id, claims))
        kept = self._signatures.get(ids)
        if kept is not None:
            return kept[1]
        if len(self._signatures) >= 2:
            return None
        specs = [_claim_spec_devices(claim) for claim in claims]
        class_names = sorted(
            {name for spec in specs for request in spec.get("requests") or () for name in _class_names(request)}
        )
        classes = {name: self.classes.get(name) for name in class_names}
        try:
            signature = json.dumps([specs, classes], sort_keys=True, default=str)
        except (TypeError, ValueError):
            return None
        self._signatures[ids] = (list(claims), signature)
        return signature

    def request_of(self, raw: Mapping[str, Any]) -> Request:
        return self._parsed(raw)[1]

    def subrequests_of(self, raw: Mapping[str, Any]) -> list[Request]:
        return self._parsed(raw)[2]

    def _parsed(self, raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], Request, list[Request]]:
        cached = self._requests.get(id(raw))
        if cached is None or cached[0] is not raw:
            cached = self._requests[id(raw)] = (raw, _request_of(raw), _subrequests_of(raw))
        return cached

    def compiled(self, expression: str) -> CompiledSelectorLike | Exception:
        if expression not in self._compiled:
            try:
                self._compiled[expression] = self.cel.compile(expression)
            except Exception as err:  # the error becomes upstream's compile error
                self._compiled[expression] = err
        return self._compiled[expression]


class _Allocation:
    """One ``Allocate`` call (upstream's unexported ``allocator``)."""

    def __init__(
        self, owner: Allocator, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], deadline: float | None
    ) -> None:
        self.owner = owner
        self.deadline = deadline
        self.features = owner.features
        self.node = node
        self.claims = list(claims)
        # The pools and the devices in search order, per pool and slice (kept between cycles by the index).
        self.pools, self.candidates = owner.index.node_devices(node)
        self.request_data: dict[RequestKey, RequestData] = {}
        self.constraints: list[list[_Constraint]] = []
        self.matches: dict[tuple[DeviceID, RequestKey], bool] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, Capacity] = {}
        self.consumed_counters: dict[str, CounterSets] = {}
        self.results: list[list[DeviceResult]] = [[] for _ in self.claims]
        #: Each claim's requests, read once (the search asks for their number at every step).
        self.requests = [_claim_requests(claim) for claim in self.claims]

    # setup

    def run(self) -> list[dict] | None:
        for claim_index, claim in enumerate(self.claims):
            self._prepare_claim(claim_index, claim)
        if len(self.claims) > self.owner.recursion_room_for:
            # Filter calls come from the same depth during a cycle: checked once per Allocator and claim count.
            _ensure_recursion_room(len(self.claims))
            self.owner.recursion_room_for = len(self.claims)
        try:
            done = self._allocate_one((0, 0, 0, 0), False, (0, 0, 0))
        except _Stop as stop:
            # Upstream returns errAllocationResultMaxSizeExceeded as-is when it escapes the first claim.
            raise AllocationError("allocation max size exceeded") from stop
        if not done:
            if any(pool.invalid for pool in self.pools):
                raise NodeAllocationError("invalid resource pools were encountered")
            return None
        return [self._result(index, claim) for index, claim in enumerate(self.claims)]

    def _prepare_claim(self, claim_index: int, claim: Mapping[str, Any]) -> None:
        min_devices = 0
        for request_index, raw in enumerate(self.requests[claim_index]):
            subrequests = self.owner.subrequests_of(raw)
            if subrequests and not self.features.prioritized_list:
                raise AllocationError(
                    f"claim {_claim_ref(claim)}, request {raw.get('name', '')}: has subrequests, "
                    "but the DRAPrioritizedList feature is disabled"
                )
            self._check_capacity_feature(claim, raw, subrequests)
            if subrequests:
                parent = self.owner.request_of(raw)
                fewest = None
                for sub_index, sub in enumerate(subrequests):
                    data = self._validate_request(sub, parent, (claim_index, request_index, sub_index))
                    self.request_data[(claim_index, request_index, sub_index)] = data
                    fewest = data.num_devices if fewest is None else min(fewest, data.num_devices)
                min_devices += fewest or 0
            else:
                data = self._validate_request(self.owner.request_of(raw), None, (claim_index, request_index, 0))
                self.request_data[(claim_index, request_index, 0)] = data
                min_devices += data.num_devices
        if min_devices > ALLOCATION_RESULTS_MAX_SIZE:
            raise AllocationError(
                f"claim {_claim_ref(claim)}: number of requested devices {min_devices} exceeds the claim limit "
                f"of {ALLOCATION_RESULTS_MAX_SIZE}"
            )
        self.constraints.append(_build_constraints(claim))

    def _check_capacity_feature(self, claim: Mapping[str, Any], raw: Mapping[str, Any], subs: list[Request]) -> None:
        if self.features.consumable_capacity:
            return
        if (raw.get("exactly") or {}).get("capacity") is not None:
            raise AllocationError(
                f"claim {_claim_ref(claim)}, request {raw.get('name', '')}: has capacity requests, "
                "but the DRAConsumableCapacity feature is disabled"
            )
        for sub in subs:
            if sub.spec.get("capacity") is not None:
                raise AllocationError(
                    f"claim {_claim_ref(claim)}, subrequest {sub.name}: has capacity requests, "
                    "but the DRAConsumableCapacity feature is disabled"
                )

    def _validate_request(self, request: Request, parent: Request | None, key: RequestKey) -> RequestData:
        """Upstream ``validateDeviceRequest``: class, selectors, and how many devices are needed."""
        claim = self.claims[key[0]]
        data = RequestData(request, parent)
        for index, selector in enumerate(request.selectors):
            if not (selector.get("cel") or {}).get("expression"):
                raise AllocationError(
                    f"claim {_claim_ref(claim)}, request {request.name}, selector #{index}: "
                    "CEL expression empty (unsupported selector type?)"
                )
        if not self.features.admin_access and request.has_admin_access:
            raise AllocationError(
                f"claim {_claim_ref(claim)}, request {request.name}: admin access is requested, "
                "but the feature is disabled"
            )
        if not request.device_class_name:
            raise AllocationError(
                f"claim {_claim_ref(claim)}, request {request.name}: missing device class name "
                "(unsupported request type?)"
            )
        device_class = self.owner.classes.get(request.device_class_name)
        if device_class is None:
            raise AllocationError(
                f"claim {_claim_ref(claim)}, request {request.name}: could not retrieve device class "
                f'{request.device_class_name}: deviceclass.resource.k8s.io "{request.device_class_name}" not found'
            )
        data.device_class = device_class
        if request.allocation_mode == EXACT_COUNT:
            data.num_devices = request.count
        elif request.allocation_mode == ALL:
            data.all_devices = self._all_devices(key, data)
            data.num_devices = len(data.all_devices)
        else:
            raise AllocationError(
                f"claim {_claim_ref(claim)}, request {request.name}: unsupported count mode {request.allocation_mode}"
            )
        return data

    def _all_devices(self, key: RequestKey, data: RequestData) -> list[Candidate]:
        claim = self.claims[key[0]]
        found: list[Candidate] = []
        for pool, pool_candidates in zip(self.pools, self.candidates, strict=True):
            if pool.incomplete:
                raise AllocationError(
                    f"claim {_claim_ref(claim)}, request {data.request.name}: asks for all devices, "
                    f"but resource pool {pool.pool_id} is currently being updated"
                )
            if pool.invalid:
                raise AllocationError(
                    f"claim {_claim_ref(claim)}, request {data.request.name}: asks for all devices, "
                    f"but resource pool {pool.pool_id} is currently invalid"
                )
            for slice_candidates in pool_candidates:
                for candidate in slice_candidates:
                    if self._selectable(key, data, candidate) and self._capacity_fits(data.request, candidate):
                        found.append(candidate)
        return found

    # selection

    def _selectable(self, key: RequestKey, data: RequestData, candidate: Candidate) -> bool:
        """Upstream ``isSelectable``: class selectors, request selectors, per-device node selection."""
        device = candidate.device
        if not self.features.device_binding_and_status and device.get("bindingConditions"):
            return False
        cache_key = (candidate.id, key)
        if cache_key in self.matches:
            return self.matches[cache_key]
        verdict = self._selectors_match(key, data, candidate)
        if verdict and _spec(candidate.slice).get("perDeviceNodeSelection"):
            try:
                verdict = _device_node_matches(self.node, device)
            except (NodeSelectorParseError, ValueError) as err:
                raise AllocationError(f"failed to parse node selector: {err}") from err
        self.matches[cache_key] = verdict
        return verdict

    def _selectors_match(self, key: RequestKey, data: RequestData, candidate: Candidate) -> bool:
        device_class = data.device_class
        if device_class is not None:
            class_selectors = _spec(device_class).get("selectors") or ()
            owner = f"class {(device_class.get('metadata') or {}).get('name', '')}"
            if not self._cel_match(owner, class_selectors, candidate):
                return False
        return self._cel_match(f"claim {_claim_ref(self.claims[key[0]])}", data.request.selectors, candidate)

    def _cel_match(self, owner: str, selectors: Sequence[Mapping[str, Any]], candidate: Candidate) -> bool:
        for index, selector in enumerate(selectors):
            expression = (selector.get("cel") or {}).get("expression", "")
            verdict = candidate.verdicts.get(expression)
            if verdict is None:
                verdict = candidate.verdicts[expression] = self._evaluate(expression, candidate)
            if isinstance(verdict, _CompileFailed):
                raise AllocationError(f"{owner}: selector #{index}: CEL compile error: {verdict.error}")
            if isinstance(verdict, Exception):  # any evaluation error is a CEL runtime error
                raise AllocationError(f"{owner}: selector #{index}: CEL runtime error: {verdict}") from verdict
            if not verdict:
                return False
        return True

    def _evaluate(self, expression: str, candidate: Candidate) -> bool | Exception:
        compiled = self.owner.compiled(expression)
        if isinstance(compiled, Exception):
            return _CompileFailed(compiled)
        try:
            return bool(compiled.matches(candidate.id[0], candidate.device))
        except Exception as err:
            return err

    def _capacity_fits(self, request: Request, candidate: Candidate) -> bool:
        """Upstream ``CmpRequestOverCapacity`` on the allocator (only with DRAConsumableCapacity)."""
        if not self.features.consumable_capacity:
            return True
        capacity = candidate.device.get("capacity")
        if not capacity and not request.capacity_requests:
            return True
        try:
            return request_fits_capacity(
                self.owner.allocated.capacity.get(candidate.id, {}),
                request.capacity_requests,
                capacity or {},
                self.allocating_capacity.get(candidate.id, {}),
            )
        except UnknownCapacity:
            return False

    # search

    def _allocate_one(self, r: tuple[int, int, int, int], in_subrequest: bool, start: tuple[int, int, int]) -> bool:
        """Upstream ``allocateOne``: find a device for position r (claim, request, subrequest, device) and
        recurse; True once everything is allocated. Raises :class:`_Stop` past the result size limit."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AllocationTimeout("filter operation aborted: context deadline exceeded")
        claim_index, request_index, sub_index, device_index = r
        if claim_index >= len(self.claims):
            return True
        if request_index >= len(self.requests[claim_index]):
            try:
                return self._allocate_one((claim_index + 1, 0, 0, 0), False, (0, 0, 0))
            except _Stop:
                return False
        data = self.request_data[(claim_index, request_index, sub_index)]
        if not in_subrequest and data.parent is not None:
            return self._allocate_subrequests(r)
        if data.request.allocation_mode == ALL and not data.all_devices:
            return False
        if device_index >= data.num_devices:
            return self._allocate_one((claim_index, request_index + 1, 0, 0), False, (0, 0, 0))
        if len(self.results[claim_index]) + data.num_devices - device_index > ALLOCATION_RESULTS_MAX_SIZE:
            raise _Stop()
        if data.request.allocation_mode == ALL:
            return self._allocate_all_next(r, in_subrequest, data)
        return self._search_devices(r, in_subrequest, start, data)

    def _allocate_subrequests(self, r: tuple[int, int, int, int]) -> bool:
        claim_index, request_index, _, device_index = r
        all_exceeded = True
        sub_index = 0
        while (claim_index, request_index, sub_index) in self.request_data:
            try:
                success = self._allocate_one((claim_index, request_index, sub_index, device_index), True, (0, 0, 0))
            except _Stop:
                sub_index += 1
                continue
            all_exceeded = False
            if success:
                self.request_data[(claim_index, request_index, 0)].selected_subrequest = sub_index
                return True
            sub_index += 1
        if all_exceeded:
            raise _Stop()
        return False

    def _allocate_all_next(self, r: tuple[int, int, int, int], in_subrequest: bool, data: RequestData) -> bool:
        claim_index, request_index, sub_index, device_index = r
        undo = self._allocate_device(r, data.all_devices[device_index], must=True)
        if undo is None:
            return False
        try:
            done = self._allocate_one(
                (claim_index, request_index, sub_index, device_index + 1), in_subrequest, (0, 0, 0)
            )
        except _Stop:
            undo()
            raise
        if not done:
            undo()
        return done

    def _search_devices(
        self, r: tuple[int, int, int, int], in_subrequest: bool, start: tuple[int, int, int], data: RequestData
    ) -> bool:
        claim_index, request_index, sub_index, device_index = r
        key = (claim_index, request_index, sub_index)
        start_pool, start_slice, start_device = start
        for pool_index in range(start_pool, len(self.pools)):
            pool = self.pools[pool_index]
            if pool.incomplete or pool.invalid:
                continue
            first_slice = start_slice if pool_index == start_pool else 0
            for slice_index in range(first_slice, len(pool.slices)):
                devices = self.candidates[pool_index][slice_index]
                first_device = start_device if (pool_index, slice_index) == (start_pool, start_slice) else 0
                for index in range(first_device, len(devices)):
                    candidate = devices[index]
                    if not self._usable(key, data, candidate, claim_index):
                        continue
                    undo = self._allocate_device(r, candidate, must=False)
                    if undo is None:
                        continue
                    try:
                        done = self._allocate_one(
                            (claim_index, request_index, sub_index, device_index + 1),
                            in_subrequest,
                            (pool_index, slice_index, index + 1),
                        )
                    except _Stop:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    def _usable(self, key: RequestKey, data: RequestData, candidate: Candidate, claim_index: int) -> bool:
        if data.request.admin_access:
            if claim_index in self.allocating.get(candidate.id, ()):
                return False
        elif self._in_use(candidate.id):
            return False
        return self._selectable(key, data, candidate) and self._capacity_fits(data.request, candidate)

    def _in_use(self, device_id: DeviceID) -> bool:
        return device_id in self.owner.allocated.devices or bool(self.allocating.get(device_id))

    def _capacity_in_use(self, device_id: DeviceID) -> bool:
        return device_id in self.owner.allocated.capacity or device_id in self.allocating_capacity

    def _allocate_device(
        self, r: tuple[int, int, int, int], candidate: Candidate, *, must: bool
    ) -> Callable[[], None] | None:
        """Upstream ``allocateDevice``: check availability, counters, taints and constraints and record the
        device; returns the undo function, or None when the device cannot be used."""
        claim_index = r[0]
        data = self.request_data[r[:3]]
        request = data.request
        device = candidate.device
        multiple = self.features.consumable_capacity and bool(device.get("allowMultipleAllocations"))
        if not multiple and request.admin_access and claim_index in self.allocating.get(candidate.id, ()):
            return None
        if not request.admin_access and self._in_use(candidate.id):
            return None
        consumes = device.get("consumesCounters") or ()
        if not self.features.partitionable_devices and consumes:
            return None
        base, sub = (data.parent.name, request.name) if data.parent else (request.name, "")
        state = _Rollback(previous_results=len(self.results[claim_index]))
        if consumes and not (multiple and self._capacity_in_use(candidate.id)):
            if not self._reserve_counters(candidate):
                return None
            state.counters_reserved = True
        if self.features.device_taints and taint_prevents_allocation(device, request.tolerations):
            self._rollback(claim_index, candidate, base, sub, state)
            return None
        for constraint in self.constraints[claim_index]:
            if not constraint.add(base, sub, device, candidate.id):
                self._rollback(claim_index, candidate, base, sub, state)
                if must:
                    raise AllocationError(
                        f"claim {_claim_ref(self.claims[claim_index])}, request {request.name}: cannot add device "
                        f"{'/'.join(candidate.id)} because a claim constraint would not be satisfied"
                    )
                return None
            state.constraints_added += 1
        if not multiple:
            self.allocating.setdefault(candidate.id, set()).add(claim_index)
            state.device_marked = True
        result = DeviceResult(request, data.parent, candidate, admin_access=True if request.admin_access else None)
        if self.features.consumable_capacity:
            if not self._capacity_fits(request, candidate):
                self._rollback(claim_index, candidate, base, sub, state)
                return None
            if multiple:
                consumed = consumed_capacity(request.capacity_requests, device.get("capacity") or {})
                result.share_id = self.owner.new_share_id()
                state.capacity_entry_existed = candidate.id in self.allocating_capacity
                state.capacity_inserted = {name: q.value for name, q in consumed.items()}
                _add_capacity(self.allocating_capacity, candidate.id, state.capacity_inserted)
                result.consumed_capacity = {name: q.text for name, q in consumed.items()} or None
        self.results[claim_index].append(result)
        state.result_added = True
        return lambda: self._rollback(claim_index, candidate, base, sub, state)

    def _rollback(self, claim_index: int, candidate: Candidate, base: str, sub: str, state: _Rollback) -> None:
        """Upstream ``rollbackDevice``: undo what ``_allocate_device`` recorded, newest first."""
        if state.result_added:
            del self.results[claim_index][state.previous_results :]
        if state.capacity_inserted is not None:
            _remove_capacity(self.allocating_capacity, candidate.id, state.capacity_inserted)
            if state.capacity_entry_existed:
                self.allocating_capacity.setdefault(candidate.id, {})
        if state.device_marked:
            self.allocating[candidate.id].discard(claim_index)
        for constraint in reversed(self.constraints[claim_index][: state.constraints_added]):
            constraint.remove(base, sub)
        if state.counters_reserved:
            self._release_counters(candidate)

    # counters (partitionable devices)

    def _available_counters(self, pool: Pool) -> CounterSets:
        """The pool's shared counters minus what allocated devices consume; cached per Allocator by pool
        name as upstream does."""
        cached = self.owner.available_counters.get(pool.name)
        if cached is not None:
            return cached
        available: CounterSets = {
            name: {c: parse_quantity((v or {}).get("value", "0")) for c, v in (cs.get("counters") or {}).items()}
            for name, cs in pool.counter_sets.items()
        }
        for slice_ in [*pool.slices, *pool.other_slices]:
            driver, pool_name = _pool_key(slice_)
            for device in _devices(slice_):
                if not self.owner.allocated.is_allocated((driver, pool_name, device.get("name", ""))):
                    continue
                for consumption in device.get("consumesCounters") or ():
                    counter_set = available.get(consumption.get("counterSet", ""), {})
                    for name, counter in (consumption.get("counters") or {}).items():
                        if name in counter_set:
                            counter_set[name] -= parse_quantity((counter or {}).get("value", "0"))
        self.owner.available_counters[pool.name] = available
        return available

    def _reserve_counters(self, candidate: Candidate) -> bool:
        """Upstream ``checkAvailableCounters``: add the device's consumption; undo and refuse when any counter
        of the pool would be exceeded."""
        available = self._available_counters(candidate.pool)
        consumed = self.consumed_counters.setdefault(candidate.pool.name, {})
        for consumption in candidate.device.get("consumesCounters") or ():
            counter_set = consumed.setdefault(consumption.get("counterSet", ""), {})
            for name, counter in (consumption.get("counters") or {}).items():
                counter_set[name] = counter_set.get(name, Fraction(0)) + parse_quantity(
                    (counter or {}).get("value", "0")
                )
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            if any(value < used.get(name, Fraction(0)) for name, value in counters.items()):
                self._release_counters(candidate)
                return False
        return True

    def _release_counters(self, candidate: Candidate) -> None:
        consumed = self.consumed_counters.get(candidate.pool.name, {})
        for consumption in candidate.device.get("consumesCounters") or ():
            counter_set = consumed.get(consumption.get("counterSet", ""), {})
            for name, counter in (consumption.get("counters") or {}).items():
                counter_set[name] = counter_set.get(name, Fraction(0)) - parse_quantity(
                    (counter or {}).get("value", "0")
                )

    # result

    def results_for(self, claims: Sequence[Mapping[str, Any]]) -> list[dict]:
        """A finished search's results for other claims with the same requests (fresh objects)."""
        return [self._result(index, claim) for index, claim in enumerate(claims)]

    def _result(self, claim_index: int, claim: Mapping[str, Any]) -> dict:
        # Device results and node selectors are built fresh; configs may share nested parts with the cluster's
        # objects, so they are deep-copied (a deep copy of the whole result cost 40% of Filter).
        devices: dict[str, Any] = {"results": [self._device_result(d) for d in self.results[claim_index]]}
        config = self._config(claim_index, claim)
        if config:
            devices["config"] = copy.deepcopy(config)
        result: dict[str, Any] = {"devices": devices}
        try:
            node_selector = _node_selector(self.results[claim_index], _node_name(self.node))
        except ValueError as err:
            raise AllocationError(
                f"create NodeSelector for claim {(claim.get('metadata') or {}).get('name', '')}: {err}"
            ) from err
        if node_selector is not None:
            result["nodeSelector"] = node_selector
        return result

    def _device_result(self, device: DeviceResult) -> dict[str, Any]:
        driver, pool, name = device.candidate.id
        out: dict[str, Any] = {"request": device.request_name, "driver": driver, "pool": pool, "device": name}
        if device.admin_access is not None:
            out["adminAccess"] = device.admin_access
        if device.request.tolerations:
            out["tolerations"] = [dict(t) for t in device.request.tolerations]
        if self.features.device_binding_and_status:
            for field_name in ("bindingConditions", "bindingFailureConditions"):
                if device.candidate.device.get(field_name):
                    out[field_name] = list(device.candidate.device[field_name])
        if device.share_id is not None:
            out["shareID"] = device.share_id
        if device.consumed_capacity:
            out["consumedCapacity"] = dict(device.consumed_capacity)
        return out

    def _config(self, claim_index: int, claim: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Class configs once per class (listing every request of that class), then the claim's configs."""
        config: list[dict[str, Any]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        requests = _claim_requests(claim)
        for request_index in range(len(requests)):
            data = self.request_data[(claim_index, request_index, 0)]
            if data.parent is not None:
                data = self.request_data[(claim_index, request_index, data.selected_subrequest)]
            if data.device_class is None:
                continue
            class_name = (data.device_class.get("metadata") or {}).get("name", "")
            if class_name in class_ranges:
                first, end = class_ranges[class_name]
                for entry in config[first:end]:
                    entry["requests"].append(data.name)
                continue
            first = len(config)
            for entry in _spec(data.device_class).get("config") or ():
                config.append({"source": "FromClass", "requests": [data.name], **_device_configuration(entry)})
            class_ranges[class_name] = (first, len(config))
        for entry in _claim_spec_devices(claim).get("config") or ():
            config.extend(self._claim_config(claim_index, requests, entry))
        return config

    def _claim_config(
        self, claim_index: int, requests: Sequence[Mapping[str, Any]], entry: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """A claim config is carried once per request (or chosen subrequest) it names; once if it names none."""
        names = list(entry.get("requests") or ())
        item = {"source": "FromClaim", "requests": names, **_device_configuration(entry)}
        if not names:
            return [_without_empty_requests(item)]
        out = []
        for request_index, request in enumerate(requests):
            if request.get("name") in names:
                out.append(dict(item, requests=list(names)))
                continue
            data = self.request_data[(claim_index, request_index, 0)]
            if data.parent is None:
                continue
            chosen = _subrequests_of(request)[data.selected_subrequest]
            if f"{request.get('name', '')}/{chosen.name}" in names:
                out.append(dict(item, requests=list(names)))
        return out


#: Python frames the search may stack per claim: two per device (at most 32), two per request (at most 32), one.
FRAMES_PER_CLAIM = 2 * ALLOCATION_RESULTS_MAX_SIZE + 2 * 32 + 1


def _ensure_recursion_room(claims: int) -> None:
    """The search recurses like upstream's; a pod with many claims needs more frames than Python's default
    limit allows. The limit is only ever raised, never lowered (other threads may rely on it)."""
    needed = _stack_depth() + FRAMES_PER_CLAIM * claims + 100
    if sys.getrecursionlimit() < needed:
        sys.setrecursionlimit(needed)


def _stack_depth() -> int:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth


def _without_empty_requests(item: dict[str, Any]) -> dict[str, Any]:
    if not item.get("requests"):
        item.pop("requests", None)
    return item


def _device_configuration(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The inline ``DeviceConfiguration`` members (today only ``opaque``) of a class or claim config."""
    return {key: value for key, value in entry.items() if key not in ("requests", "source")}


def _candidate(pool: Pool, slice_: Mapping[str, Any], device: Mapping[str, Any]) -> Candidate:
    return Candidate((pool.driver, pool.name, device.get("name", "")), device, slice_, pool)


def _node_selector(results: Sequence[DeviceResult], node_name: str) -> dict[str, Any] | None:
    """Upstream ``createNodeSelector``: a node-local device pins the claim to the node; otherwise the single
    terms of the slices' node selectors are merged; None when the devices are available everywhere."""
    fields: list[Mapping[str, Any]] = []
    expressions: list[Mapping[str, Any]] = []
    for result in results:
        spec = _spec(result.candidate.slice)
        source = result.candidate.device if spec.get("perDeviceNodeSelection") else spec
        if source.get("nodeName") is not None or result.candidate.device.get("bindsToNode"):
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            return {"nodeSelectorTerms": [term]}
        selector = source.get("nodeSelector")
        if selector is None:
            continue
        terms = selector.get("nodeSelectorTerms") or ()
        if len(terms) > 1:
            raise ValueError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
        if terms:
            _merge_requirements(terms[0].get("matchFields") or (), fields)
            _merge_requirements(terms[0].get("matchExpressions") or (), expressions)
    if not fields and not expressions:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = [_copied_requirement(e) for e in expressions]
    if fields:
        term["matchFields"] = [_copied_requirement(f) for f in fields]
    return {"nodeSelectorTerms": [term]}


def _copied_requirement(requirement: Mapping[str, Any]) -> dict[str, Any]:
    """A requirement that shares nothing with the slice it came from (its ``values`` list included)."""
    copied = dict(requirement)
    if "values" in copied:
        copied["values"] = list(copied["values"] or ())
    return copied


def _merge_requirements(new: Iterable[Mapping[str, Any]], into: list[Mapping[str, Any]]) -> None:
    for requirement in new:
        values = set(requirement.get("values") or ())
        if not any(
            r.get("key") == requirement.get("key")
            and r.get("operator") == requirement.get("operator")
            and set(r.get("values") or ()) == values
            for r in into
        ):
            into.append(requirement)
