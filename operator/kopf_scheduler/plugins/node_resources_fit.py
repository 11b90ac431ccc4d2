"""NodeResourcesFit: does the node have room for the pod's requests, and how full would it be (reference §2.8).

Filter compares the pod's real requests (no defaults) with allocatable − requested of every candidate node:
``Too many pods`` (always), then ``Insufficient cpu|memory|ephemeral-storage``, then ``Insufficient <scalar>``
for each extended/hugepages/… resource the pod requests, all the reasons a node has in one Status. The code
is Unschedulable, or UnschedulableAndUnresolvable when some failing resource is requested beyond the node's
*total* allocatable (preemption cannot help there); ``Too many pods`` never makes it unresolvable.

Vectorised: each check is one numpy comparison over the candidate nodes and sets one bit of a per-node
failure mask; the few distinct (mask, unresolvable) pairs become the Status palette of the FilterResult.

Upstream walks the scalar resources in Go map order (random); we check them sorted by name. Only the order
of reasons inside one node's Status differs, and FailedScheduling counts reasons, so nothing visible changes.

Score (no NormalizeScore) delegates to :mod:`kopf_scheduler.plugins.resource_allocation` with the strategy of
``scoringStrategy``: the node side counts existing pods' cpu/memory with the non-zero defaults, the pod side
too. Upstream quirk kept (v1.36 ``NewFit``): the scorer Fit builds with ``getScorer`` never gets the feature
flags BalancedAllocation's gets, so for the *incoming* pod's scoring requests ``SkipPodLevelResources`` is true:
pod-level ``spec.resources.requests`` are ignored and the containers' aggregate (with the non-zero defaults,
plus overhead) is scored instead, although Filter and the node side do honour pod-level requests. Found by
the differential conformance suite (tests/conformance).

Not modelled: DRA-backed extended resources (DRAExtendedResource): upstream skips the fit check of an
extended resource that a node does not advertise but a DeviceClass maps; the cache does not watch
DeviceClasses, so such a request fails as ``Insufficient <name>`` (as upstream without such a DeviceClass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from kopf_scheduler.api.args import NodeResourcesFitArgs
from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.interface import (
    FilterPlugin,
    FilterResult,
    Handle,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
)
from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.plugins.resource_allocation import (
    Scorer,
    calculate_allocation,
    least_allocated,
    most_allocated,
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
    pod_request_list,
    scheduler_value,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from kopf_scheduler.state.cache import Snapshot

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

#: Failure rows (pods, resources…, unresolvable) that still fit one int64 key per node.
_MAX_PACKED_BITS = 62

_STRATEGIES: dict[str, Scorer] = {"LeastAllocated": least_allocated, "MostAllocated": most_allocated}


@dataclass(frozen=True, slots=True)
class ResourceCheck:
    """One resource the pod requests (> 0) and the reason a node lacking it gets."""

    name: str
    request: int
    reason: str


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


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    """Filter on free resources; score by the configured allocation strategy."""

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
        if strategy.type == "RequestedToCapacityRatio":
            shape = strategy.requested_to_capacity_ratio.shape if strategy.requested_to_capacity_ratio else []
            self.scorer = requested_to_capacity_ratio(shape)
        else:
            self.scorer = _STRATEGIES[strategy.type]

    # -- PreFilter / Filter -------------------------------------------------------------------------------
    def _ignored(self, name: str) -> bool:
        """ignoredResources / ignoredResourceGroups apply to extended resources only."""
        if not is_extended_resource_name(name):
            return False
        return name in self.ignored_resources or name.split("/", 1)[0] in self.ignored_resource_groups

    def compute_pre_filter_state(self, pod: PodInfo) -> PreFilterState:
        """The resources to check, in upstream's reason order (scalars sorted by name)."""
        requests = pod.requests
        checks = [ResourceCheck(name, requests[name], reason) for name, reason in _BASE_CHECKS if requests.get(name)]
        for name in sorted(requests):
            if name in ("cpu", "memory", "ephemeral-storage") or requests[name] <= 0 or self._ignored(name):
                continue
            checks.append(ResourceCheck(name, requests[name], REASON_INSUFFICIENT_FORMAT.format(name)))
        return PreFilterState(tuple(checks))

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        state.write(PRE_FILTER_STATE_KEY, self.compute_pre_filter_state(pod))
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        pre: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if pre is None:
            pre = self.compute_pre_filter_state(pod)
        table = snapshot.table
        count = len(nodes)
        # Failure key per node: bit 0 = too many pods, bit r = check r failed (reason order); the top bit marks
        # "unresolvable". Distinct keys become the Status palette.
        failed = [table.pod_count[nodes] + 1 > table.allocatable[:, PODS][nodes]]
        unresolvable = np.zeros(count, dtype=bool)
        for check in pre.checks:
            column = table.resource_column(check.name)
            if column is None:
                # No node advertises it and no pod uses it: nothing is free anywhere, and the request exceeds
                # every node's (zero) allocatable.
                failed.append(np.ones(count, dtype=bool))
                unresolvable[:] = True
                continue
            allocatable = table.allocatable[:, column][nodes]
            fails = check.request > allocatable - table.requested[:, column][nodes]
            failed.append(fails)
            # Beyond the node's total allocatable: no preemption can make room.
            unresolvable |= fails & (check.request > allocatable)
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
        allocation = calculate_allocation(snapshot.table, nodes, self.resources, pod_requests, use_requested=False)
        return self.scorer(allocation)
