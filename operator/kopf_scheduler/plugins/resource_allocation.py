"""The resource-allocation scorer shared by NodeResourcesFit and NodeResourcesBalancedAllocation.

Upstream's ``noderesources/resource_allocation.go`` gathers, per configured resource, the node's allocatable,
what is already allocated on it and that plus the pod's request, then hands the three vectors to a strategy
(LeastAllocated, MostAllocated, RequestedToCapacityRatio, balanced). Here the same three quantities are
``(resources, nodes)`` int64 matrices built from NodeTable columns, and every strategy is a handful of numpy
expressions over them, so one call scores all candidate nodes.

Skip rules (upstream's, observable in scores): a scalar resource (extended, hugepages, …) the pod does not
request is left out, and so is any resource a node has no allocatable of; a left-out resource contributes
neither score nor weight. Integer math truncates as Go does; RequestedToCapacityRatio rounds its final
average half away from zero (``math.Round``).

Not modelled: extended resources backed by DRA device classes (DRAExtendedResource, beta in 1.36): upstream
counts ResourceSlice devices for a configured resource that no node advertises in ``allocatable`` but a
DeviceClass maps; the cache does not watch DeviceClasses, so such a resource is left out (as it is upstream
in a cluster without such a DeviceClass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kopf_scheduler.api.args import ResourceSpec, UtilizationShapePoint
from kopf_scheduler.framework.interface import MAX_NODE_SCORE
from kopf_scheduler.state.node_table import CPU, EPHEMERAL_STORAGE, MEMORY, NodeTable
from kopf_scheduler.state.pod_info import is_scalar_resource_name

#: Upstream ``config.MaxCustomPriorityScore``: RequestedToCapacityRatio shape scores are 0..10, scaled ×10.
MAX_CUSTOM_PRIORITY_SCORE = 10
#: Upstream ``maxUtilization`` of the RequestedToCapacityRatio shape.
MAX_UTILIZATION = 100


@dataclass(frozen=True, slots=True)
class ScoredResource:
    """One entry of a strategy's ``resources`` list, with v1 defaulting applied (weight 0 means 1)."""

    name: str
    weight: int


def scored_resources(specs: Sequence[ResourceSpec] | None) -> tuple[ScoredResource, ...]:
    """v1 defaulting: no resources → cpu and memory with weight 1; an unset (0) weight → 1."""
    if not specs:
        return (ScoredResource("cpu", 1), ScoredResource("memory", 1))
    return tuple(ScoredResource(spec.name, spec.weight or 1) for spec in specs)


# -- Go integer semantics ------------------------------------------------------------------------------------
def trunc_div(numerator: np.ndarray, denominator: np.ndarray | int) -> np.ndarray:
    """Go's integer division: the quotient truncated toward zero (``//`` floors, which differs for negatives)."""
    numerator = np.asarray(numerator, dtype=np.int64)
    denominator = np.asarray(denominator, dtype=np.int64)
    quotient = np.abs(numerator) // np.abs(denominator)
    return np.where((numerator < 0) != (denominator < 0), -quotient, quotient)


def round_half_away(values: np.ndarray) -> np.ndarray:
    """Go's ``math.Round`` (half away from zero) as int64; NumPy's ``rint`` rounds half to even."""
    values = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(values)
    whole = np.trunc(magnitude)
    # ``magnitude - whole`` is exact for doubles, so the comparison with 0.5 is too.
    rounded = whole + (magnitude - whole >= 0.5)
    return (np.sign(values) * rounded).astype(np.int64)


# -- gathering requested / allocated / allocatable ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Allocation:
    """``(resources, nodes)`` matrices; a left-out resource has 0 allocatable (and 0 elsewhere) on that node."""

    requested: np.ndarray
    allocated: np.ndarray
    allocatable: np.ndarray


def node_allocatable_request(
    table: NodeTable, nodes: np.ndarray, name: str, *, use_requested: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """(allocatable, allocated) of resource ``name`` on ``nodes``; ``None`` when no node can have it.

    cpu and memory count existing pods with the non-zero defaults unless ``use_requested`` (BalancedAllocation);
    ephemeral-storage and scalar resources always use the real requests. Other names (``pods``, unknown ones)
    are not part of the scheduler's resource model and are left out, as upstream.
    """
    if name == "cpu":
        allocated = table.requested[nodes, CPU] if use_requested else table.non_zero_requested[nodes, 0]
        return table.allocatable[nodes, CPU], allocated
    if name == "memory":
        allocated = table.requested[nodes, MEMORY] if use_requested else table.non_zero_requested[nodes, 1]
        return table.allocatable[nodes, MEMORY], allocated
    if name == "ephemeral-storage":
        return table.allocatable[nodes, EPHEMERAL_STORAGE], table.requested[nodes, EPHEMERAL_STORAGE]
    if not is_scalar_resource_name(name):
        return None
    column = table.resource_column(name)
    if column is None:
        return None
    return table.allocatable[nodes, column], table.requested[nodes, column]


def calculate_allocation(
    table: NodeTable,
    nodes: np.ndarray,
    resources: Sequence[ScoredResource],
    pod_requests: Sequence[int],
    *,
    use_requested: bool,
) -> Allocation:
    """Upstream ``calculateNodeAllocatableRequest`` for every node at once."""
    shape = (len(resources), len(nodes))
    requested = np.zeros(shape, dtype=np.int64)
    allocated = np.zeros(shape, dtype=np.int64)
    allocatable = np.zeros(shape, dtype=np.int64)
    for i, (resource, pod_request) in enumerate(zip(resources, pod_requests, strict=True)):
        # A scalar resource the pod does not ask for would only reward nodes for not having it.
        if pod_request == 0 and is_scalar_resource_name(resource.name):
            continue
        found = node_allocatable_request(table, nodes, resource.name, use_requested=use_requested)
        if found is None:
            continue
        node_allocatable, node_allocated = found
        present = node_allocatable != 0
        allocatable[i] = node_allocatable
        allocated[i] = np.where(present, node_allocated, 0)
        requested[i] = np.where(present, node_allocated + pod_request, 0)
    return Allocation(requested, allocated, allocatable)


# -- strategies ---------------------------------------------------------------------------------------------
#: A strategy: (allocation, weights) → int64 scores per node.
Scorer = Callable[[Allocation, np.ndarray], np.ndarray]


def _weighted_average(per_resource: np.ndarray, included: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Σ(s·w) // Σw over the included resources; 0 where nothing is included (integer, non-negative)."""
    node_score = np.where(included, per_resource * weights[:, None], 0).sum(axis=0)
    weight_sum = np.where(included, weights[:, None], 0).sum(axis=0)
    return np.where(weight_sum == 0, 0, node_score // np.maximum(weight_sum, 1))


def least_allocated(allocation: Allocation, weights: np.ndarray) -> np.ndarray:
    """LeastAllocated: (allocatable − requested)·100 // allocatable, 0 when over capacity."""
    requested, allocatable = allocation.requested, allocation.allocatable
    included = allocatable != 0
    safe = np.where(included, allocatable, 1)
    per_resource = np.where(requested > allocatable, 0, (allocatable - requested) * MAX_NODE_SCORE // safe)
    return _weighted_average(per_resource, included, weights)


def most_allocated(allocation: Allocation, weights: np.ndarray) -> np.ndarray:
    """MostAllocated: min(requested, allocatable)·100 // allocatable."""
    requested, allocatable = allocation.requested, allocation.allocatable
    included = allocatable != 0
    safe = np.where(included, allocatable, 1)
    per_resource = np.minimum(requested, allocatable) * MAX_NODE_SCORE // safe
    return _weighted_average(per_resource, included, weights)


def broken_linear(shape: Sequence[tuple[int, int]], utilization: np.ndarray) -> np.ndarray:
    """Upstream ``BuildBrokenLinearFunction`` over an array: piecewise-linear with truncating interpolation.

    Below the first point → its score; above the last → the last score; between points k−1 and k →
    s[k−1] + (s[k] − s[k−1])·(p − u[k−1]) / (u[k] − u[k−1]) with Go division.
    """
    result = np.full(utilization.shape, shape[-1][1], dtype=np.int64)
    # Walk the points from the last to the first so the first point with p <= u[k] wins, as the Go loop does.
    for k in range(len(shape) - 1, -1, -1):
        at_or_below = utilization <= shape[k][0]
        if k == 0:
            value = np.full(utilization.shape, shape[0][1], dtype=np.int64)
        else:
            (u0, s0), (u1, s1) = shape[k - 1], shape[k]
            value = s0 + trunc_div((s1 - s0) * (utilization - u0), u1 - u0)
        result = np.where(at_or_below, value, result)
    return result


def requested_to_capacity_ratio(points: Sequence[UtilizationShapePoint]) -> Scorer:
    """RequestedToCapacityRatio with ``points`` (scores 0..10, scaled to 0..100).

    Only resources scoring above 0 enter the weighted average, which is rounded half away from zero.
    """
    if not points:
        raise ValueError("scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point")
    shape = tuple((int(p.utilization), int(p.score) * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for p in points)

    def scorer(allocation: Allocation, weights: np.ndarray) -> np.ndarray:
        requested, allocatable = allocation.requested, allocation.allocatable
        present = allocatable != 0
        safe = np.where(present, allocatable, 1)
        utilization = np.where(requested > allocatable, MAX_UTILIZATION, requested * MAX_UTILIZATION // safe)
        per_resource = broken_linear(shape, utilization)
        included = present & (per_resource > 0)
        node_score = np.where(included, per_resource * weights[:, None], 0).sum(axis=0)
        weight_sum = np.where(included, weights[:, None], 0).sum(axis=0)
        average = node_score.astype(np.float64) / np.maximum(weight_sum, 1).astype(np.float64)
        return np.where(weight_sum == 0, 0, round_half_away(average))

    return scorer


def balanced_resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
    """Upstream ``balancedResourceScore``: int((1 − std)·100) of the capped requested/allocatable fractions.

    Floating point is evaluated in upstream's order (fractions summed resource by resource; two fractions
    give |f1 − f2| / 2, more give the population standard deviation) so the truncation lands identically.
    """
    count_resources, count_nodes = requested.shape
    included = allocatable != 0
    safe = np.where(included, allocatable, 1).astype(np.float64)
    fractions = np.minimum(requested.astype(np.float64) / safe, 1.0)
    count = np.zeros(count_nodes, dtype=np.int64)
    total = np.zeros(count_nodes, dtype=np.float64)
    first = np.zeros(count_nodes, dtype=np.float64)
    second = np.zeros(count_nodes, dtype=np.float64)
    for i in range(count_resources):
        row = included[i]
        first = np.where(row & (count == 0), fractions[i], first)
        second = np.where(row & (count == 1), fractions[i], second)
        total = np.where(row, total + fractions[i], total)
        count += row
    std = np.zeros(count_nodes, dtype=np.float64)
    two = count == 2
    std = np.where(two, np.abs((first - second) / 2), std)
    many = count > 2
    if many.any():
        mean = total / np.where(many, count, 1)
        squares = np.zeros(count_nodes, dtype=np.float64)
        for i in range(count_resources):
            deviation = fractions[i] - mean
            squares = np.where(included[i], squares + deviation * deviation, squares)
        std = np.where(many, np.sqrt(squares / np.where(many, count, 1)), std)
    return np.trunc((1 - std) * MAX_NODE_SCORE).astype(np.int64)


def balanced_allocation(allocation: Allocation, weights: np.ndarray) -> np.ndarray:
    """Upstream 1.36 ``balancedResourceScorer``: how much placing the pod improves the node's balance.

    Both balances (with and without the pod) lie in [50, 100]; the result is
    50 + (50 + with − without) / 2 (Go division), in [50, 100] and 75 when the pod changes nothing.
    """
    del weights  # BalancedAllocation weights are validated to be 1 and do not enter the score.
    with_pod = balanced_resource_score(allocation.requested, allocation.allocatable)
    without_pod = balanced_resource_score(allocation.allocated, allocation.allocatable)
    half = MAX_NODE_SCORE // 2
    return half + trunc_div(half + with_pod - without_pod, 2)
