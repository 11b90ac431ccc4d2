"""One ``Allocate`` call: validate the claims' requests, then search depth-first for devices in upstream's
order (pools, slices, devices; combinations within a request, backtracking across requests and claims), and
build the AllocationResults of the first full solution.

Upstream counterpart: ``structured/internal/incubating/allocator_incubating.go`` (the unexported ``allocator``:
``allocateOne``, ``allocateDevice``, ``rollbackDevice``, ``isSelectable``, ``checkAvailableCounters``, the result).
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from kopf_scheduler.plugins.dynamic_resources.allocator.allocated import add_capacity, remove_capacity
from kopf_scheduler.plugins.dynamic_resources.allocator.common import (
    ALL,
    ALLOCATION_RESULTS_MAX_SIZE,
    EXACT_COUNT,
    AllocationError,
    AllocationTimeout,
    Capacity,
    CounterSets,
    DeviceID,
    NodeAllocationError,
    spec_of,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.constraints import Constraint, build_constraints
from kopf_scheduler.plugins.dynamic_resources.allocator.consumable_capacity import (
    UnknownCapacity,
    consumed_capacity,
    request_fits_capacity,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.pools import (
    Pool,
    device_node_matches,
    node_name_of,
    pool_key,
    slice_devices,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.requests import (
    Candidate,
    DeviceResult,
    Request,
    RequestData,
    RequestKey,
    claim_ref,
    claim_requests,
    claim_spec_devices,
    read_subrequests,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.results import (
    device_configuration,
    node_selector_for,
    without_empty_requests,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.taints import taint_prevents_allocation
from kopf_scheduler.state.node_affinity import NodeSelectorParseError
from kopf_scheduler.state.quantity import parse_quantity

if TYPE_CHECKING:
    from kopf_scheduler.plugins.dynamic_resources.allocator.allocated import AllocatedState
    from kopf_scheduler.plugins.dynamic_resources.allocator.common import CompiledSelectorLike, Features
    from kopf_scheduler.plugins.dynamic_resources.allocator.slice_index import SliceIndex


class Owner(Protocol):
    """What an allocation reads of the cycle's :class:`~.incubating.Allocator` that runs it (its inputs, the
    requests and selectors it read and compiled once, the pools' available counters it caches)."""

    features: Features
    allocated: AllocatedState
    classes: Mapping[str, Mapping[str, Any]]
    index: SliceIndex
    new_share_id: Callable[[], str]
    available_counters: dict[str, CounterSets]
    recursion_room_for: int

    def request_of(self, raw: Mapping[str, Any]) -> Request: ...

    def subrequests_of(self, raw: Mapping[str, Any]) -> list[Request]: ...

    def compiled(self, expression: str) -> CompiledSelectorLike | Exception: ...


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


class Allocation:
    """One ``Allocate`` call (upstream's unexported ``allocator``)."""

    def __init__(
        self, owner: Owner, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], deadline: float | None
    ) -> None:
        self.owner = owner
        self.deadline = deadline
        self.features = owner.features
        self.node = node
        self.claims = list(claims)
        # The pools and the devices in search order, per pool and slice (kept between cycles by the index).
        self.pools, self.candidates = owner.index.node_devices(node)
        self.request_data: dict[RequestKey, RequestData] = {}
        self.constraints: list[list[Constraint]] = []
        self.matches: dict[tuple[DeviceID, RequestKey], bool] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, Capacity] = {}
        self.consumed_counters: dict[str, CounterSets] = {}
        self.results: list[list[DeviceResult]] = [[] for _ in self.claims]
        #: Each claim's requests, read once (the search asks for their number at every step).
        self.requests = [claim_requests(claim) for claim in self.claims]

    # setup

    def run(self) -> list[dict[str, Any]] | None:
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
                    f"claim {claim_ref(claim)}, request {raw.get('name', '')}: has subrequests, "
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
                f"claim {claim_ref(claim)}: number of requested devices {min_devices} exceeds the claim limit "
                f"of {ALLOCATION_RESULTS_MAX_SIZE}"
            )
        self.constraints.append(build_constraints(claim))

    def _check_capacity_feature(self, claim: Mapping[str, Any], raw: Mapping[str, Any], subs: list[Request]) -> None:
        if self.features.consumable_capacity:
            return
        if (raw.get("exactly") or {}).get("capacity") is not None:
            raise AllocationError(
                f"claim {claim_ref(claim)}, request {raw.get('name', '')}: has capacity requests, "
                "but the DRAConsumableCapacity feature is disabled"
            )
        for sub in subs:
            if sub.spec.get("capacity") is not None:
                raise AllocationError(
                    f"claim {claim_ref(claim)}, subrequest {sub.name}: has capacity requests, "
                    "but the DRAConsumableCapacity feature is disabled"
                )

    def _validate_request(self, request: Request, parent: Request | None, key: RequestKey) -> RequestData:
        """Upstream ``validateDeviceRequest``: class, selectors, and how many devices are needed."""
        claim = self.claims[key[0]]
        data = RequestData(request, parent)
        for index, selector in enumerate(request.selectors):
            if not (selector.get("cel") or {}).get("expression"):
                raise AllocationError(
                    f"claim {claim_ref(claim)}, request {request.name}, selector #{index}: "
                    "CEL expression empty (unsupported selector type?)"
                )
        if not self.features.admin_access and request.has_admin_access:
            raise AllocationError(
                f"claim {claim_ref(claim)}, request {request.name}: admin access is requested, "
                "but the feature is disabled"
            )
        if not request.device_class_name:
            raise AllocationError(
                f"claim {claim_ref(claim)}, request {request.name}: missing device class name "
                "(unsupported request type?)"
            )
        device_class = self.owner.classes.get(request.device_class_name)
        if device_class is None:
            raise AllocationError(
                f"claim {claim_ref(claim)}, request {request.name}: could not retrieve device class "
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
                f"claim {claim_ref(claim)}, request {request.name}: unsupported count mode {request.allocation_mode}"
            )
        return data

    def _all_devices(self, key: RequestKey, data: RequestData) -> list[Candidate]:
        claim = self.claims[key[0]]
        found: list[Candidate] = []
        for pool, pool_candidates in zip(self.pools, self.candidates, strict=True):
            if pool.incomplete:
                raise AllocationError(
                    f"claim {claim_ref(claim)}, request {data.request.name}: asks for all devices, "
                    f"but resource pool {pool.pool_id} is currently being updated"
                )
            if pool.invalid:
                raise AllocationError(
                    f"claim {claim_ref(claim)}, request {data.request.name}: asks for all devices, "
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
        if verdict and spec_of(candidate.slice).get("perDeviceNodeSelection"):
            try:
                verdict = device_node_matches(self.node, device)
            except (NodeSelectorParseError, ValueError) as err:
                raise AllocationError(f"failed to parse node selector: {err}") from err
        self.matches[cache_key] = verdict
        return verdict

    def _selectors_match(self, key: RequestKey, data: RequestData, candidate: Candidate) -> bool:
        device_class = data.device_class
        if device_class is not None:
            class_selectors = spec_of(device_class).get("selectors") or ()
            owner = f"class {(device_class.get('metadata') or {}).get('name', '')}"
            if not self._cel_match(owner, class_selectors, candidate):
                return False
        return self._cel_match(f"claim {claim_ref(self.claims[key[0]])}", data.request.selectors, candidate)

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
                        f"claim {claim_ref(self.claims[claim_index])}, request {request.name}: cannot add device "
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
                add_capacity(self.allocating_capacity, candidate.id, state.capacity_inserted)
                result.consumed_capacity = {name: q.text for name, q in consumed.items()} or None
        self.results[claim_index].append(result)
        state.result_added = True
        return lambda: self._rollback(claim_index, candidate, base, sub, state)

    def _rollback(self, claim_index: int, candidate: Candidate, base: str, sub: str, state: _Rollback) -> None:
        """Upstream ``rollbackDevice``: undo what ``_allocate_device`` recorded, newest first."""
        if state.result_added:
            del self.results[claim_index][state.previous_results :]
        if state.capacity_inserted is not None:
            remove_capacity(self.allocating_capacity, candidate.id, state.capacity_inserted)
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
            driver, pool_name = pool_key(slice_)
            for device in slice_devices(slice_):
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

    def results_for(self, claims: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """A finished search's results for other claims with the same requests (fresh objects)."""
        return [self._result(index, claim) for index, claim in enumerate(claims)]

    def _result(self, claim_index: int, claim: Mapping[str, Any]) -> dict[str, Any]:
        # Device results and node selectors are built fresh; configs may share nested parts with the cluster's
        # objects, so they are deep-copied (a deep copy of the whole result cost 40% of Filter).
        devices: dict[str, Any] = {"results": [self._device_result(d) for d in self.results[claim_index]]}
        config = self._config(claim_index, claim)
        if config:
            devices["config"] = copy.deepcopy(config)
        result: dict[str, Any] = {"devices": devices}
        try:
            node_selector = node_selector_for(self.results[claim_index], node_name_of(self.node))
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
        requests = claim_requests(claim)
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
            for entry in spec_of(data.device_class).get("config") or ():
                config.append({"source": "FromClass", "requests": [data.name], **device_configuration(entry)})
            class_ranges[class_name] = (first, len(config))
        for entry in claim_spec_devices(claim).get("config") or ():
            config.extend(self._claim_config(claim_index, requests, entry))
        return config

    def _claim_config(
        self, claim_index: int, requests: Sequence[Mapping[str, Any]], entry: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """A claim config is carried once per request (or chosen subrequest) it names; once if it names none."""
        names = list(entry.get("requests") or ())
        item = {"source": "FromClaim", "requests": names, **device_configuration(entry)}
        if not names:
            return [without_empty_requests(item)]
        out = []
        for request_index, request in enumerate(requests):
            if request.get("name") in names:
                out.append(dict(item, requests=list(names)))
                continue
            data = self.request_data[(claim_index, request_index, 0)]
            if data.parent is None:
                continue
            chosen = read_subrequests(request)[data.selected_subrequest]
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
    depth = 0
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth
