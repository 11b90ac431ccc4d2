"""NodeResourcesFit: does the node have room for the pod's requests, and how full would it be (reference §2.8).

Filter compares the pod's real requests (no defaults) with allocatable − requested of every candidate node:
``Too many pods`` (always), then ``Insufficient cpu|memory|ephemeral-storage``, then ``Insufficient <scalar>``
for each extended/hugepages/… resource the pod requests, all the reasons a node has in one Status. The code
is Unschedulable, or UnschedulableAndUnresolvable when some failing resource is requested beyond the node's
*total* allocatable (preemption cannot help there); ``Too many pods`` never makes it unresolvable.

Vectorised: each check is one numpy comparison over the candidate nodes and sets one bit of a per-node
failure mask; the few distinct (mask, unresolvable) pairs become the Status palette of the FilterResult. When
every node fits (the usual case) that is known before any mask is built.

Upstream walks the scalar resources in Go map order (random); we check them sorted by name. Only the order
of reasons inside one node's Status differs, and FailedScheduling counts reasons, so nothing visible changes.

Score (no NormalizeScore) delegates to :mod:`kopf_scheduler.plugins.helper.resource_allocation` with the strategy of
``scoringStrategy``: the node side counts existing pods' cpu/memory with the non-zero defaults, the pod side
too. Upstream quirk kept (v1.36 ``NewFit``): the scorer Fit builds with ``getScorer`` never gets the feature
flags BalancedAllocation's gets, so for the *incoming* pod's scoring requests ``SkipPodLevelResources`` is true:
pod-level ``spec.resources.requests`` are ignored and the containers' aggregate (with the non-zero defaults,
plus overhead) is scored instead, although Filter and the node side do honour pod-level requests. Found by
the differential conformance suite (tests/conformance).

PlacementScore (upstream 1.36's TopologyAwareWorkloadScheduling; only a workload-aware profile's pod-group cycle asks):
a placement the group fits in scores as if its nodes were one node, MostAllocated over the ``scoringStrategy``'s
resources whatever the strategy, with the members the placement's trial placed requested on it
(``helper/resource_allocation.placement_rows``). Upstream's default profile has the plugin at placementScore with
weight 1 (multiPoint expands it there), and so does ours.

DRA-backed extended resources (DRAExtendedResource, beta and on in 1.36; upstream ``shouldDelegateResourceToDRA``):
a requested extended resource that a DeviceClass backs (``plugins/helper/device_class_mapping.py``) is not checked on
a node whose allocatable has none of it; DynamicResources allocates devices for it there. A node that does
advertise it (a device plugin) is checked as usual.

QueueingHints (upstream ``EventsToRegister``): a pod delete or scale-down, a node add or allocatable change,
a DeviceClass add/update. Where they simplify: the Node hint's "would the pod fit an empty node" check looks
at the pod count and the requested cpu / memory / ephemeral-storage / scalar resources only (DRA-backed ones
are delegated as in Filter, and any DRA-backed request makes an allocatable change worth a retry, as upstream).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kopf_scheduler.api.args import NodeResourcesFitArgs
from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.events import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
    as_object,
    as_pod,
    is_assigned_or_nominated,
    node_pair,
    object_name,
)
from kopf_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    FilterPlugin,
    FilterResult,
    Handle,
    PlacementScorePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
)
from kopf_scheduler.framework.placement import Placement, PodGroupAssignments, PodGroupInfo
from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.plugins.dynamic_resources.capacity import dra_capacity, may_score_dra
from kopf_scheduler.plugins.helper.device_class_mapping import (
    DEVICE_CLASS_PREFIX,
    backed_resources,
    delegated_to_dra,
    is_dra_extended_resource_name,
)
from kopf_scheduler.plugins.helper.resource_allocation import (
    RememberedScores,
    Scorer,
    calculate_allocation,
    least_allocated,
    most_allocated,
    most_allocated_node,
    placement_rows,
    requested_to_capacity_ratio,
    scored_resources,
)
from kopf_scheduler.state.node_table import PODS
from kopf_scheduler.state.pod_info import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    PodInfo,
    is_extended_resource_name,
    is_pod_level_requests_set,
    is_scalar_resource_name,
    pod_request_list,
    scheduler_value,
)
from kopf_scheduler.state.quantity import resource_value

if TYPE_CHECKING:
    from pydantic import BaseModel

    from kopf_scheduler.state.cache import Snapshot
    from kopf_scheduler.state.objects import ClusterObjects

NAME = "NodeResourcesFit"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME
#: pod.memo key of the pod's (cpu, memory) with the scoring defaults.
_SCORING_REQUESTS_MEMO = NAME + "/scoringNonZeroRequests"

REASON_TOO_MANY_PODS = "Too many pods"
REASON_INSUFFICIENT_CPU = "Insufficient cpu"
REASON_INSUFFICIENT_MEMORY = "Insufficient memory"
REASON_INSUFFICIENT_EPHEMERAL_STORAGE = "Insufficient ephemeral-storage"
#: Scalar resources: ``Insufficient <resource name>``, e.g. ``Insufficient nvidia.com/gpu``.
REASON_INSUFFICIENT_FORMAT = "Insufficient {}"

_BASE_CHECKS = (
    ("cpu", REASON_INSUFFICIENT_CPU),
    ("memory", REASON_INSUFFICIENT_MEMORY),
    ("ephemeral-storage", REASON_INSUFFICIENT_EPHEMERAL_STORAGE),
)

#: What the QueueingHints compare besides scalar resources, and the allocatable key of the pod count.
_HINT_BASE_RESOURCES = frozenset(name for name, _ in _BASE_CHECKS)
_PODS = "pods"

#: Failure rows (pods, resources…, unresolvable) that still fit one int64 key per node.
_MAX_PACKED_BITS = 62

_STRATEGIES: dict[str, Scorer] = {"LeastAllocated": least_allocated, "MostAllocated": most_allocated}


@dataclass(frozen=True, slots=True)
class ResourceCheck:
    """One resource the pod requests (> 0) and the reason a node lacking it gets; a DRA-backed one is left to
    DynamicResources on nodes without allocatable of it."""

    name: str
    request: int
    reason: str
    dra_backed: bool = False


@dataclass(slots=True)
class PreFilterState:
    """The pod's checks, in reason order; ``statuses`` caches the palette per (failure mask, unresolvable)."""

    checks: tuple[ResourceCheck, ...]
    statuses: dict[tuple[bool, ...], Status] = field(default_factory=dict)

    def clone(self) -> PreFilterState:
        # Read-only after PreFilter (the status cache is derived data), so sharing is safe.
        return self


@dataclass(frozen=True, slots=True)
class PreScoreState:
    """The pod's request for each configured scoring resource, in the configured order."""

    pod_requests: tuple[int, ...]

    def clone(self) -> PreScoreState:
        return self


def _bits(value: int, width: int) -> tuple[bool, ...]:
    return tuple(bool(value >> bit & 1) for bit in range(width))


_SCORING_DEFAULTS = {"cpu": Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000), "memory": Fraction(DEFAULT_MEMORY_REQUEST)}


def scoring_requests_without_pod_level(pod: PodInfo) -> dict[str, int] | None:
    """The incoming pod's requests as Fit's scorer sees them when it has pod-level requests, else None.

    Upstream ``calculatePodResourceRequest`` on Fit's scorer runs ``PodRequests`` with
    ``SkipPodLevelResources: true`` (its ``enablePodLevelResources`` is never set) and the non-zero container
    defaults: the containers' aggregate plus overhead, every named resource, as the scheduler's integers.
    """
    spec = pod.obj.get("spec") or {}
    if not is_pod_level_requests_set(spec):
        return None
    found: dict[str, int] | None = pod.memo.get(_SCORING_REQUESTS_MEMO)
    if found is None:
        containers_only = {"spec": {k: v for k, v in spec.items() if k != "resources"}}
        requests = pod_request_list(containers_only, non_missing=_SCORING_DEFAULTS)
        found = pod.memo[_SCORING_REQUESTS_MEMO] = {name: scheduler_value(name, q) for name, q in requests.items()}
    return found


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, PlacementScorePlugin):
    """Filter on free resources; score by the configured allocation strategy; score a pod group's placements by how
    full the members would make it (MostAllocated)."""

    name: ClassVar[str] = NAME
    args_model: ClassVar[type[BaseModel] | None] = NodeResourcesFitArgs

    def __init__(self, *, handle: Handle, args: BaseModel | None = None) -> None:
        super().__init__(handle=handle, args=args)
        fit_args = args if isinstance(args, NodeResourcesFitArgs) else NodeResourcesFitArgs()
        self.ignored_resources = frozenset(fit_args.ignored_resources)
        self.ignored_resource_groups = frozenset(fit_args.ignored_resource_groups)
        strategy = fit_args.scoring_strategy
        self.strategy = strategy.type
        self.resources = scored_resources(strategy.resources)
        #: A scored resource may be a DRA-backed extended resource (counted in devices where nodes lack it).
        self.may_score_dra = may_score_dra([resource.name for resource in self.resources])
        if strategy.type == "RequestedToCapacityRatio":
            shape = strategy.requested_to_capacity_ratio.shape if strategy.requested_to_capacity_ratio else []
            self.scorer = requested_to_capacity_ratio(shape)
        else:
            self.scorer = _STRATEGIES[strategy.type]
        self.remembered = RememberedScores(self.resources, self.scorer, use_requested=False)

    # -- PreFilter / Filter -------------------------------------------------------------------------------
    def _ignored(self, name: str) -> bool:
        """ignoredResources / ignoredResourceGroups apply to extended resources only."""
        if not is_extended_resource_name(name):
            return False
        return name in self.ignored_resources or name.split("/", 1)[0] in self.ignored_resource_groups

    def compute_pre_filter_state(self, pod: PodInfo, storage: ClusterObjects | None = None) -> PreFilterState:
        """The resources to check, in upstream's reason order (scalars sorted by name); ``storage`` holds the
        DeviceClasses that may back extended resources (None: none do)."""
        requests = pod.requests
        checks = [ResourceCheck(name, requests[name], reason) for name, reason in _BASE_CHECKS if requests.get(name)]
        backed = backed_resources(requests, storage) if storage is not None else frozenset()
        for name in sorted(requests):
            if name in ("cpu", "memory", "ephemeral-storage") or requests[name] <= 0 or self._ignored(name):
                continue
            reason = REASON_INSUFFICIENT_FORMAT.format(name)
            checks.append(ResourceCheck(name, requests[name], reason, dra_backed=name in backed))
        return PreFilterState(tuple(checks))

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        state.write(PRE_FILTER_STATE_KEY, self.compute_pre_filter_state(pod, snapshot.cache.objects))
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        pre: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if pre is None:
            pre = self.compute_pre_filter_state(pod, snapshot.cache.objects)
        table = snapshot.table
        count = len(nodes)
        # Failure key per node: bit 0 = too many pods, bit r = check r failed (reason order); the top bit marks
        # "unresolvable". Distinct keys become the Status palette.
        failed = [table.pod_count[nodes] >= table.allocatable[:, PODS][nodes]]  # one more pod would not fit
        # (fails, request, allocatable) of the checks a node fails by being full rather than lacking the resource
        full: list[tuple[np.ndarray, int, np.ndarray]] = []
        lacking_everywhere = False
        for check in pre.checks:
            column = table.resource_column(check.name)
            if column is None:
                if check.dra_backed:
                    # No node advertises it: DynamicResources allocates it everywhere.
                    failed.append(np.zeros(count, dtype=bool))
                    continue
                # No node advertises it and no pod uses it: nothing is free anywhere, and the request exceeds
                # every node's (zero) allocatable.
                failed.append(np.ones(count, dtype=bool))
                lacking_everywhere = True
                continue
            allocatable = table.allocatable[:, column][nodes]
            fails = check.request > allocatable - table.requested[:, column][nodes]
            if check.dra_backed:
                fails &= allocatable > 0  # left to DynamicResources where the node has none
            failed.append(fails)
            full.append((fails, check.request, allocatable))
        if not lacking_everywhere and not any(fails.any() for fails in failed):
            return None  # the usual case, decided before the failure keys are built
        unresolvable = np.full(count, lacking_everywhere)
        for fails, request, allocatable in full:
            # Beyond the node's total allocatable: no preemption can make room.
            unresolvable |= fails & (request > allocatable)
        failed.append(unresolvable)
        if len(failed) <= _MAX_PACKED_BITS:
            key = np.zeros(count, dtype=np.int64)
            for bit, fails in enumerate(failed):
                key |= fails.astype(np.int64) << bit
            rejected = key != 0
            if not rejected.any():
                return None
            keys = key[rejected]
            first = int(keys[0])
            if (keys == first).all():
                # The usual case: every rejected node fails the same way.
                return FilterResult(rejected, (self._status(pre, _bits(first, len(failed))),), None)
            packed, inverse = np.unique(keys, return_inverse=True)
            palette = [_bits(int(value), len(failed)) for value in packed]
        else:
            matrix = np.vstack(failed)
            rejected = matrix.any(axis=0)
            if not rejected.any():
                return None
            rows, inverse = np.unique(matrix[:, rejected].T, axis=0, return_inverse=True)
            palette = [tuple(bool(bit) for bit in row) for row in rows]
        status_index = np.zeros(count, dtype=np.int64)
        status_index[rejected] = inverse.reshape(-1)
        return FilterResult(rejected, tuple(self._status(pre, key) for key in palette), status_index)

    def _status(self, pre: PreFilterState, key: tuple[bool, ...]) -> Status:
        status = pre.statuses.get(key)
        if status is None:
            *rows, unresolvable = key
            reasons = [REASON_TOO_MANY_PODS] if rows[0] else []
            reasons.extend(check.reason for check, failed in zip(pre.checks, rows[1:], strict=True) if failed)
            status = pre.statuses[key] = Status.unschedulable(*reasons, plugin=self.name, unresolvable=unresolvable)
        return status

    # -- PreScore / Score ---------------------------------------------------------------------------------
    def pod_requests(self, pod: PodInfo) -> tuple[int, ...]:
        """The pod's request per scoring resource; cpu/memory with the non-zero defaults."""
        container_requests = scoring_requests_without_pod_level(pod)
        if container_requests is None:
            # Without pod-level requests the node-side values (defaults included) are the scoring ones.
            cpu, memory, others = pod.non_zero_cpu, pod.non_zero_memory, pod.requests
        else:
            cpu, memory = container_requests.get("cpu", 0), container_requests.get("memory", 0)
            others = container_requests
        values = []
        for resource in self.resources:
            if resource.name == "cpu":
                values.append(cpu)
            elif resource.name == "memory":
                values.append(memory)
            else:
                values.append(others.get(resource.name, 0))
        return tuple(values)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(self.pod_requests(pod)))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        pre: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        pod_requests = pre.pod_requests if pre is not None else self.pod_requests(pod)
        dra = dra_capacity(snapshot) if self.may_score_dra else None
        if dra is None:
            return self.remembered.scores(snapshot.table, nodes, pod_requests)
        allocation = calculate_allocation(
            snapshot.table, nodes, self.resources, pod_requests, use_requested=False, dra=dra
        )
        return self.scorer(allocation)

    # -- PlacementScore (upstream ``Fit.ScorePlacement``) -------------------------------------------------------------
    def score_placement(
        self, state: CycleState, pod_group: PodGroupInfo, assignments: PodGroupAssignments
    ) -> tuple[int, Status]:
        """The placement's nodes as one node, MostAllocated over the scoring resources (whatever the Score
        strategy), the members its trial placed counted in; no NormalizePlacementScore."""
        proposed = [0] * len(self.resources)
        for assignment in assignments.proposed_assignments:
            for i, request in enumerate(self.pod_requests(assignment.pod)):
                proposed[i] += request
        table = self.handle.snapshot().table
        return most_allocated_node(
            placement_rows(table, assignments.placement.nodes, self.resources, proposed)
        ), SUCCESS

    def placement_score_bound(self, state: CycleState, pod_group: PodGroupInfo, placement: Placement) -> int | None:
        """:meth:`score_placement` with every member placed: more members request more, and MostAllocated never
        falls as requests rise, as long as fewer members leave out no scalar resource (one some member requests
        and another does not); otherwise the highest score there is."""
        requests = [self.pod_requests(pod) for pod in pod_group.unscheduled_pods]
        for i, resource in enumerate(self.resources):
            if resource.scalar and len({request[i] > 0 for request in requests}) > 1:
                return MAX_NODE_SCORE
        proposed = [sum(request[i] for request in requests) for i in range(len(self.resources))]
        table = self.handle.snapshot().table
        return most_allocated_node(placement_rows(table, placement.nodes, self.resources, proposed))

    # -- EnqueueExtensions --------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            # Delete frees room; UpdatePodScaleDown because InPlacePodVerticalScaling is GA.
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN),
                self.is_schedulable_after_pod_event,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
                self.is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
                is_schedulable_after_device_class_event,
            ),
        ]

    def _hint_requests(self, pod: PodInfo) -> dict[str, int]:
        """The requests the hints compare: > 0, cpu/memory/ephemeral-storage or scalar, not ignored."""
        return {
            name: value
            for name, value in pod.requests.items()
            if value > 0 and (name in _HINT_BASE_RESOURCES or is_scalar_resource_name(name)) and not self._ignored(name)
        }

    def _delegated(self, name: str, allocatable: Mapping[str, int]) -> bool:
        """Upstream ``shouldDelegateResourceToDRA`` for a node seen by a hint (only extended names can be)."""
        return is_dra_extended_resource_name(name) and delegated_to_dra(
            name, allocatable, self.handle.snapshot().cache.objects
        )

    def fits_empty_node(self, pod: PodInfo, node: Mapping[str, Any]) -> bool:
        """Upstream ``isFit``: would the pod fit this node if nothing ran on it? (DRA-backed resources the node
        does not advertise are left to DynamicResources.)"""
        allocatable = _allocatable(node)
        if allocatable.get(_PODS, 0) < 1:
            return False
        return all(
            want <= allocatable.get(name, 0) or self._delegated(name, allocatable)
            for name, want in self._hint_requests(pod).items()
        )

    def any_requested_increased(self, pod: PodInfo, original: Mapping[str, Any], modified: Mapping[str, Any]) -> bool:
        """Upstream ``haveAnyRequestedResourcesIncreased``: more pods allowed, more of something requested, or a
        requested scalar resource the modified node leaves to DRA."""
        before, after = _allocatable(original), _allocatable(modified)
        if after.get(_PODS, 0) > before.get(_PODS, 0):
            return True
        requested = self._hint_requests(pod)
        if any(after.get(name, 0) > before.get(name, 0) for name in requested):
            return True
        return any(self._delegated(name, after) for name in requested)

    def is_schedulable_after_pod_event(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A pod was deleted or scaled down (upstream ``isSchedulableAfterPodEvent``)."""
        original, modified = as_pod(old), as_pod(new)
        if modified is None:
            assert original is not None
            # Only a pod that held (or was promised) room on a node frees anything.
            return QUEUE if is_assigned_or_nominated(original) else QUEUE_SKIP
        if modified.uid == pod.uid:
            return QUEUE  # the rejected pod itself asks for less now
        if not modified.node_name or original is None:
            return QUEUE_SKIP
        for name in self._hint_requests(pod):
            if original.requests.get(name, 0) > modified.requests.get(name, 0):
                return QUEUE
        return QUEUE_SKIP

    def is_schedulable_after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A node was added or its allocatable changed (upstream ``isSchedulableAfterNodeChange``)."""
        original, modified = node_pair(old, new)
        if not self.fits_empty_node(pod, modified):
            return QUEUE_SKIP
        if original is None:
            return QUEUE
        return QUEUE if self.any_requested_increased(pod, original, modified) else QUEUE_SKIP


def _allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {name: resource_value(name, value) for name, value in raw.items()}


def is_schedulable_after_device_class_event(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A DeviceClass appeared or changed its extended resource name (DRAExtendedResource)."""
    original, modified = as_object(old), as_object(new)
    if modified is None:
        raise ValueError("DeviceClass hint called without the new object")
    new_name = (modified.get("spec") or {}).get("extendedResourceName") or ""
    if original is not None:
        if ((original.get("spec") or {}).get("extendedResourceName") or "") == new_name:
            return QUEUE_SKIP
    elif DEVICE_CLASS_PREFIX + object_name(modified) in pod.requests:
        return QUEUE
    return QUEUE if new_name and new_name in pod.requests else QUEUE_SKIP
