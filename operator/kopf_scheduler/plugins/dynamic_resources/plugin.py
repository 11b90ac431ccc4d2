"""DynamicResources: devices for pods with ResourceClaims (upstream ``plugins/dynamicresources/dynamicresources.go``,
reference §2.17). This module holds the plugin's extension points, events and hints; the pod's claims are read
by ``claims.py``, the cycle state and the prioritized-list score are ``state.py``.

Restated over the claims, slices and classes the watches keep in ``cache.objects`` (state/objects.py, upstream's
DRA manager listers) and the scheduler-wide :class:`~.tracker.ClaimTracker` (in-flight allocations, claims
assumed after PreBind's writes):

* PreEnqueue: every claim exists (a template claim is found through ``pod.status.resourceClaimStatuses`` and
  must be controlled by the pod); a missing, deleting or foreign claim parks the pod with upstream's message.
* PreFilter: an allocated claim reserved for others up to the limit is "in use"; an unallocated one that
  another pod is allocating waits; every request's DeviceClass must exist; then one
  :class:`~.allocator.Allocator` over the slices, classes and the devices already taken.
* Filter: an allocated claim's node selector must match; the unallocated claims must all be allocatable on
  the node ("cannot allocate all claims"); the allocation found is kept for Reserve. ``filterTimeout`` bounds
  one node's search (an Error, so the pod backs off, as upstream).
* Score: prioritized lists (``firstAvailable``) score the alternative allocated, ``8 - index`` per subrequest;
  every other pod scores 0 everywhere (upstream has no PreScore that would skip it).
* Reserve marks the allocation in flight; PreBind writes it with the pod's reservation (``binding.py``);
  Unreserve drops the in-flight allocation and the pod's reservation; PostFilter deallocates an allocated
  claim that kept the pod off every node and that no other pod uses. For a pod without claims PostFilter says
  "no new claims to deallocate", which upstream 1.36 puts into every FitError text.

DRA-backed extended resources (DRAExtendedResource, beta and on in 1.36; ``extended.py``): a pod requesting an
extended resource a DeviceClass backs gets one more claim, last in its list, that the scheduler owns: in memory
until PreBind creates it, with requests per node (those the node does not advertise), allocated with the
others, written like the others, then recorded in the pod's ``status.extendedResourceClaimStatus``; Unreserve
and PostFilter delete a created one that the pod could not keep.

Kept between cycles (the verdicts and devices are those of a fresh search): the slices split by node
with each node's pools and candidates and their CEL verdicts (:class:`~.allocator.SliceIndex`, until a
ResourceSlice changes), the devices in use (until a claim, in-flight or assumed claim changes), and each node's
finished searches by claims signature and devices in use. PreFilter marks the pod's Filter costly
(``COSTLY_FILTER``), so the node search judges no nodes past the ones it needs.

Pods without claims cost a dict lookup at PreEnqueue, PreFilter's look for DRA-backed requests (none while
no DeviceClass exists) and Skip, a skipped Filter, a zero Score array, and PostFilter's one message.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from kopf_scheduler.api.args import DynamicResourcesArgs
from kopf_scheduler.framework import (
    COSTLY_FILTER,
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    APIClient,
    APIError,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Handle,
    NodeFilterPlugin,
    NodeToStatus,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    QueueingHint,
    ReservePlugin,
    ScorePlugin,
    Status,
    default_normalize_score,
)
from kopf_scheduler.framework.events import as_pod
from kopf_scheduler.go_format import parse_go_duration
from kopf_scheduler.plugins.dynamic_resources.allocator import (
    AllocatedState,
    AllocationError,
    AllocationTimeout,
    Allocator,
    Features,
    NodeAllocationError,
    SliceIndex,
)
from kopf_scheduler.plugins.dynamic_resources.binding import (
    FINALIZER,
    BindingFailed,
    bind_claim,
    claim_key,
    claim_ready_for_binding,
    claim_timed_out,
    deallocation,
    has_binding_conditions,
    is_reserved_for_pod,
    pod_reference,
    unreserve_patch,
    wait_for_binding_conditions,
)
from kopf_scheduler.plugins.dynamic_resources.cel import SelectorCache
from kopf_scheduler.plugins.dynamic_resources.claims import Claim, ClaimNotUsable, pod_claims, uses_resource_claims
from kopf_scheduler.plugins.dynamic_resources.extended import (
    ASSUME_POLL_SECONDS,
    ASSUME_TIMEOUT_SECONDS,
    ExtendedRequests,
    create_extended_claim,
    delete_claim,
    find_extended_claim,
    has_requests,
    in_memory_claim,
    is_special,
    node_claim,
    pod_scalar_requests,
    pod_status_patch,
    wait_for_watched,
)
from kopf_scheduler.plugins.dynamic_resources.state import (
    EMPTY,
    STATE_KEY,
    ClaimEntry,
    StateData,
    has_prioritized_list,
    prioritized_list_score,
)
from kopf_scheduler.plugins.dynamic_resources.tracker import ClaimTracker, claim_uid, tracker_for
from kopf_scheduler.state.cache import NodeInfo, Snapshot
from kopf_scheduler.state.node_affinity import NodeSelector, NodeSelectorParseError
from kopf_scheduler.state.objects import DEVICE_CLASS, RESOURCE_CLAIM, RESOURCE_SLICE, ClusterObjects
from kopf_scheduler.state.pod_info import PodInfo


def _object_uid(obj: Any) -> str:
    return ((obj or {}).get("metadata") or {}).get("uid") or ""


#: Upstream ``ResourceClaimReservedForMaxSize``: a claim reserved for this many consumers takes no more.
RESERVED_FOR_MAX = 256
IN_USE = "resourceclaim in use"
NOT_AVAILABLE_ON_NODE = "resourceclaim not available on the node"
CANNOT_ALLOCATE_ALL = "cannot allocate all claims"
NO_CLAIMS_TO_DEALLOCATE = "no new claims to deallocate"
DEALLOCATED = "deallocation of ResourceClaim completed"
DELETED = "deletion of ResourceClaim completed"
STILL_NOT_SCHEDULABLE = "still not schedulable"


class DynamicResources(
    PreEnqueuePlugin,
    PreFilterPlugin,
    NodeFilterPlugin,
    PostFilterPlugin,
    ScorePlugin,
    ReservePlugin,
    PreBindPlugin,
):
    name: ClassVar[str] = "DynamicResources"
    args_model: ClassVar[type[BaseModel] | None] = DynamicResourcesArgs
    #: Upstream's ScoreExtensions returns the plugin: its NormalizeScore runs (prioritized-list scores 8, 7, ...
    #: become 100, 87, ... before the weight).
    has_normalize: ClassVar[bool] = True

    _skip = Status.skip(plugin="DynamicResources")

    def __init__(self, *, handle: Handle, args: BaseModel | None = None) -> None:
        super().__init__(handle=handle, args=args)
        resolved = args if isinstance(args, DynamicResourcesArgs) else DynamicResourcesArgs()
        self.filter_timeout = parse_go_duration(resolved.filter_timeout)
        self.binding_timeout = parse_go_duration(resolved.binding_timeout)
        # DRADeviceBindingConditions and DRAResourceClaimDeviceStatus are both beta and on in 1.36.
        self.features = Features(device_binding_and_status=True)
        self.selectors = SelectorCache()
        #: The slices split by node with each node's pools and candidates, kept until a ResourceSlice changes:
        #: (the object store it was built from, its ResourceSlice change count then, the index).
        self._slice_index: tuple[ClusterObjects, int, SliceIndex] | None = None
        #: The allocated devices, kept while no claim changed: (object store, tracker, (its ResourceClaim
        #: change count, the tracker's version), the state).
        self._allocated: tuple[ClusterObjects, ClaimTracker, tuple[int, int], AllocatedState] | None = None
        #: How long and how often PreBind waits for the watch to deliver a claim it created.
        self.assume_timeout = ASSUME_TIMEOUT_SECONDS
        self.assume_poll = ASSUME_POLL_SECONDS

    def _tracker(self) -> ClaimTracker:
        return tracker_for(self.handle.snapshot().cache)

    # -- PreEnqueue ---------------------------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not uses_resource_claims(pod):
            return SUCCESS
        try:
            for _ in pod_claims(pod, self._tracker().get):
                pass
        except ClaimNotUsable as error:
            return Status.unschedulable(str(error), plugin=self.name, unresolvable=True)
        return SUCCESS

    # -- PreFilter ----------------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        objects = snapshot.cache.objects
        with_claims = uses_resource_claims(pod)
        scalar = pod_scalar_requests(pod, objects)
        if not with_claims and scalar is None:
            state.write(STATE_KEY, EMPTY)
            return None, self._skip
        data = StateData(objects=objects)
        state.write(STATE_KEY, data)
        tracker = tracker_for(snapshot.cache)
        try:
            claims = [claim for _, claim in pod_claims(pod, tracker.get)] if with_claims else []
        except ClaimNotUsable as error:
            return None, self._unresolvable(str(error))
        entries = [ClaimEntry(claim) for claim in claims]
        if scalar is not None:
            # A claim an earlier cycle created for the pod, or the in-memory one (upstream
            # preFilterExtendedResources).
            claim = find_extended_claim(pod, tracker.claims()) or in_memory_claim(pod)
            data.extended = ExtendedRequests(scalar, claim_uid(claim))
            entries.append(ClaimEntry(claim, extended=True))
        if not entries:
            return None, self._skip
        for entry in entries:
            status = self._check_claim(pod, entry, tracker, objects)
            if status is not None:
                return None, status
            data.entries.append(entry)
        if data.to_allocate():
            data.allocator = Allocator(
                features=self.features,
                allocated=self._allocated_state(tracker, objects),
                classes={_name(c): c for c in objects.all(DEVICE_CLASS)},
                slices=(),
                cel=self.selectors,
                index=self._index_of(objects),
            )
            state.write(COSTLY_FILTER, True)  # the allocator runs per node: no node judged beyond need
        return None, SUCCESS

    def _allocated_state(self, tracker: ClaimTracker, objects: ClusterObjects) -> AllocatedState:
        """The devices the allocated and in-flight claims hold (upstream ``GatherAllocatedState``): the kept
        state unless a ResourceClaim was stored or dropped or the tracker changed since it was gathered. The
        allocator only reads it."""
        versions = (objects.changes((RESOURCE_CLAIM,)), tracker.version)
        kept = self._allocated
        if kept is not None and kept[0] is objects and kept[1] is tracker and kept[2] == versions:
            return kept[3]
        state = tracker.allocated_state()
        self._allocated = (objects, tracker, versions, state)
        return state

    def _index_of(self, objects: ClusterObjects) -> SliceIndex:
        """The slice index for the current ResourceSlices: the kept one unless a slice was stored or dropped
        since it was built."""
        changes = objects.changes((RESOURCE_SLICE,))
        kept = self._slice_index
        if kept is not None and kept[0] is objects and kept[1] == changes:
            return kept[2]
        index = SliceIndex(objects.all(RESOURCE_SLICE), self.features)
        self._slice_index = (objects, changes, index)
        return index

    def _check_claim(
        self, pod: PodInfo, entry: ClaimEntry, tracker: ClaimTracker, objects: ClusterObjects
    ) -> Status | None:
        claim = entry.claim
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation:
            reserved = (claim.get("status") or {}).get("reservedFor") or ()
            if len(reserved) >= RESERVED_FOR_MAX and not is_reserved_for_pod(claim, pod.uid):
                return self._unresolvable(IN_USE)
            if allocation.get("nodeSelector"):
                try:
                    entry.available_on = NodeSelector.parse(allocation["nodeSelector"], strict=True)
                except NodeSelectorParseError as error:
                    return Status.as_error(error, plugin=self.name)
            return None
        if tracker.pending_allocation(claim_uid(claim)) is not None:
            return self._unresolvable(f"resource claim {claim_key(claim)} is in the process of being allocated")
        if entry.extended:
            return None  # its requests are made per node, in Filter
        for request in (claim.get("spec") or {}).get("devices", {}).get("requests") or ():
            status = self._check_request(claim, request, objects)
            if status is not None:
                return status
        return None

    def _check_request(self, claim: Claim, request: Mapping[str, Any], objects: ClusterObjects) -> Status | None:
        """Upstream PreFilter's request loop and ``validateDeviceClass``."""
        name = request.get("name") or ""
        if request.get("exactly") is not None:
            return self._check_class((request["exactly"] or {}).get("deviceClassName") or "", name, objects)
        if request.get("firstAvailable"):
            for sub in request["firstAvailable"]:
                status = self._check_class(sub.get("deviceClassName") or "", f"{name}/{sub.get('name', '')}", objects)
                if status is not None:
                    return status
            return None
        return self._unresolvable(f"resource claim {claim_key(claim)}, request {name}: unknown request type")

    def _check_class(self, class_name: str, request_name: str, objects: ClusterObjects) -> Status | None:
        if not class_name:
            return Status.as_error(RuntimeError(f"request {request_name}: unsupported request type"), plugin=self.name)
        if objects.get(DEVICE_CLASS, class_name) is None:
            return self._unresolvable(f"request {request_name}: device class {class_name} does not exist")
        return None

    # -- Filter -------------------------------------------------------------------------------------------
    def filter_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        data: StateData = state.read(STATE_KEY)
        if not data.entries:
            return SUCCESS
        variant: Claim | None = None
        mappings: list[dict[str, str]] = []
        extended = data.extended_entry()
        if extended is not None and data.extended is not None and data.objects is not None:
            user_claims = len(data.entries) > 1
            variant, mappings, reason = node_claim(
                extended.claim, data.extended, pod, node.allocatable, data.objects, has_user_claims=user_claims
            )
            if reason is not None:
                return self._unresolvable(reason)
            if variant is None and not user_claims:
                return SUCCESS  # device plugins provide the pod's extended resources here
        unavailable = [
            index
            for index, entry in enumerate(data.entries)
            if (entry.available_on is not None and not entry.available_on.matches(node.labels, node.name))
            or (entry.allocated and self._binding_failed_or_timed_out(entry.claim))
        ]
        results: Callable[[], list[dict[str, Any]]] | None = None
        if data.allocator is not None:
            pending = data.pending_claims(variant)
            try:
                results = data.allocator.allocate_deferred(node.obj, pending, deadline=self._deadline())
            except AllocationTimeout:
                # Potentially transient: an Error, so the pod backs off instead of waiting for an event.
                timed_out = RuntimeError(f"node {node.name}: timed out trying to allocate devices")
                return Status.as_error(timed_out, plugin=self.name)
            except NodeAllocationError as error:
                return self._unresolvable(str(error))
            except AllocationError as error:
                return Status.as_error(error, plugin=self.name)
            if results is None:
                return self._unresolvable(CANNOT_ALLOCATE_ALL)
        if unavailable:
            data.unavailable.update(unavailable)
            return self._unresolvable(NOT_AVAILABLE_ON_NODE)
        if results is not None:
            data.node_allocations[node.name] = results
            if data.extended is not None:
                data.extended.by_node[node.name] = (variant, mappings)
        return SUCCESS

    def _deadline(self) -> float | None:
        """``filterTimeout`` for one node's search (DRASchedulerFilterTimeout, beta and on); 0 disables it."""
        return time.monotonic() + self.filter_timeout if self.filter_timeout > 0 else None

    def _binding_failed_or_timed_out(self, claim: Claim) -> bool:
        """Upstream Filter's check of an allocated claim's binding conditions (beta gates on in 1.36)."""
        try:
            ready = claim_ready_for_binding(claim)
        except BindingFailed:
            return True
        return not ready and claim_timed_out(claim, self.binding_timeout)

    # -- PostFilter ---------------------------------------------------------------------------------------
    def post_filter(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status]:
        data: StateData | None = state.get(STATE_KEY)
        if data is None:
            # Upstream: reading the state PreFilter did not write is an error ("not found").
            return None, Status.as_error(LookupError("not found"), plugin=self.name)
        if not data.entries:
            return None, Status.unschedulable(NO_CLAIMS_TO_DEALLOCATE, plugin=self.name)
        for index in data.unavailable:
            entry = data.entries[index]
            if entry.extended:
                if not is_special(entry.claim):
                    break  # deleted below
                continue
            claim = entry.claim
            reserved = (claim.get("status") or {}).get("reservedFor") or ()
            if not reserved or (len(reserved) == 1 and reserved[0].get("uid") == pod.uid):
                self._spawn_deallocation(claim)
                return None, Status.unschedulable(DEALLOCATED, plugin=self.name)
        extended = data.extended_entry()
        if extended is not None and not is_special(extended.claim):
            # The claim an earlier cycle created (allocated or stale): delete it and start anew.
            self._spawn_deletion(extended.claim)
            return None, Status.unschedulable(DELETED, plugin=self.name)
        return None, Status.unschedulable(STILL_NOT_SCHEDULABLE, plugin=self.name)

    def _spawn_deletion(self, claim: Claim) -> None:
        client = self.handle.client
        if client is None:
            return
        self.handle.spawn(delete_claim(client, copy.deepcopy(claim)), name=f"delete ResourceClaim {claim_key(claim)}")

    def _spawn_deallocation(self, claim: Claim) -> None:
        client = self.handle.client
        if client is None:
            return
        meta = claim.get("metadata") or {}
        call = client.update_resource_claim_status(
            namespace=meta.get("namespace") or "", name=meta.get("name") or "", claim=deallocation(claim)
        )
        self.handle.spawn(_ignoring_result(call), name=f"deallocate ResourceClaim {claim_key(claim)}")

    # -- Score (prioritized lists) ---------------------------------------------------------------------
    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        """Upstream has no PreScore here: every pod is scored (0 on every node without a prioritized list, so
        ``explain`` lists the plugin as upstream's log does); pods without allocations cost one array."""
        data: StateData = state.read(STATE_KEY)
        if not data.node_allocations or not any(has_prioritized_list(e.claim) for e in data.entries):
            return _zeros(len(nodes))
        scores = np.zeros(len(nodes), dtype=np.int64)
        for position, slot in enumerate(nodes.tolist()):
            results = data.node_allocations.get(snapshot.node_info(slot).name)
            if results is not None:
                scores[position] = prioritized_list_score(data, results())
        return scores

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        # All zero (every pod without a prioritized list) normalises to itself: skip the arithmetic.
        return default_normalize_score(scores, reverse=False) if scores.any() else scores

    # -- Reserve / Unreserve ------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        data: StateData = state.read(STATE_KEY)
        pending = data.to_allocate()
        if not pending or data.allocator is None:
            return SUCCESS
        found = data.node_allocations.get(node_name)
        results = found() if found is not None else None
        if not results:
            if all(entry.extended for _, entry in pending):
                return SUCCESS  # only the extended-resource claim, and device plugins provide it on this node
            return Status.as_error(RuntimeError("claim allocation not found for node"), plugin=self.name)
        if len(results) != len(pending):
            return Status.as_error(
                RuntimeError(
                    f"internal error, have {len(results)} allocations, {len(pending)} claims to allocate, "
                    f"want {len(pending)} claims"
                ),
                plugin=self.name,
            )
        tracker = self._tracker()
        for (_, entry), allocation in zip(pending, results, strict=True):
            entry.allocation = allocation
            claim = entry.claim
            if entry.extended and data.extended is not None:
                claim = data.extended.by_node.get(node_name, (None, []))[0] or claim  # the node's variant
            allocated = copy.deepcopy(claim)
            meta = allocated.setdefault("metadata", {})
            if FINALIZER not in (meta.get("finalizers") or ()):
                meta["finalizers"] = [*(meta.get("finalizers") or ()), FINALIZER]
            allocated.setdefault("status", {})["allocation"] = allocation
            tracker.signal_pending_allocation(claim_uid(claim), allocated)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        data: StateData | None = state.get(STATE_KEY)
        if not data or not data.entries:
            return
        tracker = self._tracker()
        for entry in data.user_entries():
            meta = entry.claim.get("metadata") or {}
            if tracker.remove_pending_allocation(claim_uid(entry.claim)):
                tracker.restore(meta.get("namespace") or "", meta.get("name") or "")
            if entry.allocated and is_reserved_for_pod(entry.claim, pod.uid):
                self._spawn_unreserve(entry.claim, pod)
        self._unreserve_extended(data, tracker)

    def _unreserve_extended(self, data: StateData, tracker: ClaimTracker) -> None:
        """Upstream ``unreserveExtendedResourceClaim``: no longer in flight, and a created claim is deleted."""
        entry = data.extended_entry()
        if entry is None or data.extended is None:
            return
        meta = entry.claim.get("metadata") or {}
        if tracker.remove_pending_allocation(data.extended.initial_uid):
            tracker.restore(meta.get("namespace") or "", meta.get("name") or "")
        if not is_special(entry.claim):
            self._spawn_deletion(entry.claim)

    def _spawn_unreserve(self, claim: Claim, pod: PodInfo) -> None:
        client = self.handle.client
        if client is None:
            return
        meta = claim.get("metadata") or {}
        call = client.patch_resource_claim_status(
            namespace=meta.get("namespace") or "",
            name=meta.get("name") or "",
            patch=unreserve_patch(claim_uid(claim), pod.uid),
        )
        self.handle.spawn(_ignoring_result(call), name=f"unreserve ResourceClaim {claim_key(claim)}")

    # -- PreBind ------------------------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        data: StateData = state.read(STATE_KEY)
        return SUCCESS if data.entries else self._skip

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        data: StateData = state.read(STATE_KEY)
        if not data.entries:
            return SUCCESS
        try:
            await self._bind_claims(data, pod, node_name)
            if has_binding_conditions([entry.claim for entry in data.entries]):
                await self._wait_for_devices(data, pod, node_name)
        except Exception as error:
            return Status.as_error(error, plugin=self.name)
        return SUCCESS

    async def _bind_claims(self, data: StateData, pod: PodInfo, node_name: str) -> None:
        client = self.handle.client
        if client is None:
            raise RuntimeError("no API client")
        tracker = self._tracker()
        reference = pod_reference(pod.name, pod.uid)
        for entry in data.entries:
            if is_reserved_for_pod(entry.claim, pod.uid):
                continue
            if entry.extended:
                await self._bind_extended_claim(client, data, entry, pod, node_name)
                continue
            uid = claim_uid(entry.claim)
            try:
                entry.claim = await bind_claim(client, entry.claim, entry.allocation, reference)
                tracker.assume_after_api_call(entry.claim)
            finally:
                if entry.allocation is not None:
                    tracker.remove_pending_allocation(uid)

    async def _bind_extended_claim(
        self, client: APIClient, data: StateData, entry: ClaimEntry, pod: PodInfo, node_name: str
    ) -> None:
        """Upstream ``bindClaim`` for the extended-resource claim: create it (once), allocate and reserve it,
        record it in the pod's status; then wait for the watch to deliver it before its devices stop counting
        as in flight."""
        assert data.extended is not None
        if entry.allocation is None and not has_requests(entry.claim):
            return  # device plugins provide the pod's extended resources on this node
        variant, mappings = data.extended.by_node.get(node_name, (None, []))
        modified = False
        try:
            if is_special(entry.claim):
                entry.claim = await create_extended_claim(client, self.handle.metrics, variant, node_name)
                modified = True
            entry.claim = await bind_claim(client, entry.claim, entry.allocation, pod_reference(pod.name, pod.uid))
            if not mappings:
                raise RuntimeError(
                    f"nil or empty request mappings, no update of pod {pod.namespace}/{pod.name} "
                    "ExtendedResourceClaimStatus"
                )
            name = (entry.claim.get("metadata") or {}).get("name") or ""
            try:
                await client.patch_pod_status(
                    namespace=pod.namespace, name=pod.name, patch=pod_status_patch(name, mappings)
                )
            except APIError as error:
                raise APIError(
                    error.status, f"update pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus: {error}"
                ) from error
        finally:
            if modified:
                await wait_for_watched(self._tracker(), entry.claim, self.assume_timeout, self.assume_poll)
            if entry.allocation is not None:
                self._tracker().remove_pending_allocation(data.extended.initial_uid)

    async def _wait_for_devices(self, data: StateData, pod: PodInfo, node_name: str) -> None:
        self.handle.record_event(
            pod,
            event_type="Normal",
            reason="BindingConditionsPending",
            action="Scheduling",
            note=f"waiting for binding conditions for device on node {node_name}",
        )
        tracker = self._tracker()

        def latest() -> list[Claim]:
            for entry in data.entries:
                meta = entry.claim.get("metadata") or {}
                entry.claim = tracker.get(meta.get("namespace") or "", meta.get("name") or "") or entry.claim
            return [entry.claim for entry in data.entries]

        await wait_for_binding_conditions(latest, self.binding_timeout)

    # -- events -------------------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            # With QueueingHints on (1.36) upstream does not register UpdateNodeTaint here.
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE,
                    ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE,
                )
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE),
                self.is_schedulable_after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
                self.is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(ClusterEvent(EventResource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE)),
        ]

    def is_schedulable_after_claim_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Upstream ``isSchedulableAfterClaimChange``: any claim deallocated (its devices are free again), or
        one of the pod's claims created or with a changed status, once all the pod's claims are usable."""
        uid = _object_uid(new)
        try:
            uses = any(_object_uid(claim) == uid for _, claim in pod_claims(pod, self._tracker().get))
        except ClaimNotUsable:
            return QUEUE_SKIP
        if old is not None and _allocation_of(old) and not _allocation_of(new):
            return QUEUE
        if not uses:
            return QUEUE_SKIP
        if old is None:
            return QUEUE
        return QUEUE_SKIP if (old.get("status") or {}) == (new.get("status") or {}) else QUEUE

    def is_schedulable_after_pod_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Upstream ``isSchedulableAfterPodChange``: the pod's own update, after which all its claims exist."""
        modified = as_pod(new)
        if modified is None or modified.uid != pod.uid:
            return QUEUE_SKIP
        try:
            for _ in pod_claims(modified, self._tracker().get):
                pass
        except ClaimNotUsable:
            return QUEUE_SKIP
        return QUEUE

    def _unresolvable(self, reason: str) -> Status:
        return Status.unschedulable(reason, plugin=self.name, unresolvable=True)


def _name(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


def _allocation_of(obj: Any) -> Any:
    return ((obj or {}).get("status") or {}).get("allocation")


def _zeros(count: int) -> np.ndarray:
    """A read-only int64 zero array of ``count`` (one per length, shared: Score's answer for most pods)."""
    zeros = _ZEROS.get(count)
    if zeros is None:
        zeros = _ZEROS[count] = np.zeros(count, dtype=np.int64)
        zeros.flags.writeable = False
    return zeros


_ZEROS: dict[int, np.ndarray] = {}


async def _ignoring_result(call: Awaitable[Any]) -> None:
    """A fire-and-forget API write (the runtime logs what it raises): upstream retries in a later cycle."""
    await call
