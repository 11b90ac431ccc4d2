"""The resource-allocation scorer shared by NodeResourcesFit and NodeResourcesBalancedAllocation.

Upstream's ``noderesources/resource_allocation.go`` gathers, per configured resource, the node's allocatable,
what is already allocated on it and that plus the pod's request, then hands the three vectors to a strategy
(LeastAllocated, MostAllocated, RequestedToCapacityRatio, balanced). Here the same three quantities are int64
arrays over the candidate nodes, one row per resource, gathered from NodeTable columns, and every strategy is
a handful of numpy expressions over them, so one call scores all candidate nodes.

Skip rules (upstream's, observable in scores): a scalar resource (extended, hugepages, …) the pod does not
request is left out, and so is any resource a node has no allocatable of; a left-out resource contributes
neither score nor weight. Integer math truncates as Go does; RequestedToCapacityRatio rounds its final
average half away from zero (``math.Round``).

Extended resources backed by DRA device classes (DRAExtendedResource, beta and on in 1.36): for a configured
resource that a node does not advertise in ``allocatable`` but a DeviceClass backs, the node's allocatable and
allocated amounts are its devices of that class and the taken ones (``dra`` of :func:`calculate_allocation`,
``plugins/dynamic_resources/capacity.py``), as upstream's ``calculateResourceAllocatableRequest`` does.

Remembered between cycles (:class:`RememberedScores`): a node's resource score changes only with its row of the
node table, so the scores of a pod request seen before are kept by slot and only the nodes whose row changed
are scored again, when few by the strategy's scalar twin (``*_node``; equal node for node, tested on random
clusters). At 5000 nodes that is one node of the 500 sampled per cycle, where the vectorised strategy costs
≈ 25 numpy calls for any number of nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kopf_scheduler.api.args import ResourceSpec, UtilizationShapePoint
from kopf_scheduler.framework.interface import MAX_NODE_SCORE
from kopf_scheduler.state.node_table import CPU, EPHEMERAL_STORAGE, MEMORY, NodeTable
from kopf_scheduler.state.pod_info import is_scalar_resource_name

#: (allocatable, allocated) of a DRA-backed resource on the given nodes; None: no DeviceClass backs it.
DraCapacity = Callable[[str, np.ndarray], "tuple[np.ndarray, np.ndarray] | None"]

#: Upstream ``config.MaxCustomPriorityScore``: RequestedToCapacityRatio shape scores are 0..10, scaled ×10.
MAX_CUSTOM_PRIORITY_SCORE = 10
#: Upstream ``maxUtilization`` of the RequestedToCapacityRatio shape.
MAX_UTILIZATION = 100


@dataclass(frozen=True, slots=True)
class ScoredResource:
    """One entry of a strategy's ``resources`` list, with v1 defaulting applied (weight 0 means 1)."""

    name: str
    weight: int
    #: Extended, hugepages, … (upstream ``IsScalarResourceName``): skipped when the pod does not request it.
    scalar: bool = False


def scored_resources(specs: Sequence[ResourceSpec] | None) -> tuple[ScoredResource, ...]:
    """v1 defaulting: no resources → cpu and memory with weight 1; an unset (0) weight → 1."""
    if not specs:
        return (ScoredResource("cpu", 1), ScoredResource("memory", 1))
    return tuple(ScoredResource(spec.name, spec.weight or 1, is_scalar_resource_name(spec.name)) for spec in specs)


# -- Go integer semantics ------------------------------------------------------------------------------------
def trunc_div(numerator: np.ndarray, denominator: np.ndarray | int) -> np.ndarray:
    """Go's integer division: the quotient truncated toward zero (``//`` floors, which differs for negatives)."""
    numerator = np.asarray(numerator, dtype=np.int64)
    denominator = np.asarray(denominator, dtype=np.int64)
    quotient = np.abs(numerator) // np.abs(denominator)
    truncated: np.ndarray = np.where((numerator < 0) != (denominator < 0), -quotient, quotient)
    return truncated


def round_half_away(values: np.ndarray) -> np.ndarray:
    """Go's ``math.Round`` (half away from zero) as int64; NumPy's ``rint`` rounds half to even."""
    values = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(values)
    whole = np.trunc(magnitude)
    # ``magnitude - whole`` is exact for doubles, so the comparison with 0.5 is too.
    rounded = whole + (magnitude - whole >= 0.5)
    signed: np.ndarray = (np.sign(values) * rounded).astype(np.int64)
    return signed


# -- gathering requested / allocated / allocatable ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ResourceRow:
    """One scored resource over the candidate nodes (all int64 arrays aligned with ``nodes``).

    ``requested`` is ``allocated`` plus the pod's request. ``present`` marks nodes with allocatable ≠ 0 (only
    those score this resource); ``None`` means every node has it, the common case, which skips the masking.
    """

    weight: int
    allocatable: np.ndarray
    allocated: np.ndarray
    requested: np.ndarray
    present: np.ndarray | None

    @property
    def divisor(self) -> np.ndarray:
        """``allocatable`` with 0 replaced by 1, so divisions are safe where the result is masked anyway."""
        return self.allocatable if self.present is None else np.where(self.present, self.allocatable, 1)


@dataclass(frozen=True, slots=True)
class Allocation:
    """The resources that score on at least one candidate node, in configured order."""

    rows: tuple[ResourceRow, ...]
    count: int


def resource_columns(table: NodeTable, name: str, *, use_requested: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """(allocatable, allocated) of resource ``name`` as column views over every slot; ``None`` when no node can
    have it.

    cpu and memory count existing pods with the non-zero defaults unless ``use_requested`` (BalancedAllocation);
    ephemeral-storage and scalar resources always use the real requests. Other names (``pods``, unknown ones)
    are not part of the scheduler's resource model and are left out, as upstream.
    """
    if name == "cpu":
        return table.allocatable[:, CPU], table.requested[:, CPU] if use_requested else table.non_zero_requested[:, 0]
    if name == "memory":
        allocated = table.requested[:, MEMORY] if use_requested else table.non_zero_requested[:, 1]
        return table.allocatable[:, MEMORY], allocated
    if name == "ephemeral-storage":
        return table.allocatable[:, EPHEMERAL_STORAGE], table.requested[:, EPHEMERAL_STORAGE]
    if not is_scalar_resource_name(name):
        return None
    column = table.resource_column(name)
    if column is None:
        return None
    return table.allocatable[:, column], table.requested[:, column]


def node_allocatable_request(
    table: NodeTable, nodes: np.ndarray, name: str, *, use_requested: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """(allocatable, allocated) of resource ``name`` on ``nodes`` (:func:`resource_columns`)."""
    columns = resource_columns(table, name, use_requested=use_requested)
    if columns is None:
        return None
    # Column views first, then one 1-D gather each: cheaper than 2-D fancy indexing.
    return columns[0][nodes], columns[1][nodes]


def calculate_allocation(
    table: NodeTable,
    nodes: np.ndarray,
    resources: Sequence[ScoredResource],
    pod_requests: Sequence[int],
    *,
    use_requested: bool,
    dra: DraCapacity | None = None,
) -> Allocation:
    """Upstream ``calculateNodeAllocatableRequest`` for every node at once; ``dra`` counts DRA-backed resources
    on nodes without allocatable of them (None: no configured resource can be DRA-backed)."""
    rows: list[ResourceRow] = []
    for resource, pod_request in zip(resources, pod_requests, strict=True):
        # A scalar resource the pod does not ask for would only reward nodes for not having it.
        if pod_request == 0 and resource.scalar:
            continue
        found = node_allocatable_request(table, nodes, resource.name, use_requested=use_requested)
        if dra is not None and resource.scalar:
            found = _with_dra(found, dra, resource.name, nodes)
        if found is None:
            continue
        allocatable, allocated = found
        if allocatable.all():  # every node has some: no masking (the common case, one numpy call cheaper)
            rows.append(ResourceRow(resource.weight, allocatable, allocated, allocated + pod_request, None))
            continue
        present = allocatable != 0
        if present.any():
            allocated = np.where(present, allocated, 0)
            requested = np.where(present, allocated + pod_request, 0)
            rows.append(ResourceRow(resource.weight, allocatable, allocated, requested, present))
    return Allocation(tuple(rows), len(nodes))


def _with_dra(
    found: tuple[np.ndarray, np.ndarray] | None, dra: DraCapacity, name: str, nodes: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Upstream: allocatable 0 (or none) on a node, and a DeviceClass backs the resource: the node's devices."""
    if found is None:
        found = (np.zeros(len(nodes), dtype=np.int64), np.zeros(len(nodes), dtype=np.int64))
    allocatable, allocated = found
    missing = allocatable == 0
    if not missing.any():
        return found
    backed = dra(name, nodes[missing])
    if backed is None:
        return found
    capacity, taken = backed
    allocatable, allocated = allocatable.copy(), allocated.copy()
    allocatable[missing] = capacity
    allocated[missing] = np.where(capacity > 0, taken, allocated[missing])
    return allocatable, allocated


# -- strategies ---------------------------------------------------------------------------------------------
#: A strategy: allocation → int64 scores per node.
Scorer = Callable[[Allocation], np.ndarray]


class _WeightedSum:
    """Σ(s·w) and Σw per node, kept as a scalar weight sum while every row covers every node.

    :meth:`add` takes ownership of the ``scores`` it is given (the first becomes the running total, updated in
    place): the strategies hand it arrays they made for it. Weights of 1 are not multiplied.
    """

    __slots__ = ("count", "scalar_weight", "total", "weight")

    def __init__(self, count: int) -> None:
        self.count = count
        self.total: np.ndarray | None = None
        self.scalar_weight = 0
        self.weight: np.ndarray | None = None

    def add(self, scores: np.ndarray, weight: int, included: np.ndarray | None) -> None:
        if included is None:
            self.scalar_weight += weight
        else:
            scores = np.where(included, scores, 0)
            contribution = included * np.int64(weight)
            self.weight = contribution if self.weight is None else self.weight + contribution
        if weight != 1:
            scores = scores * weight
        if self.total is None:
            self.total = scores
        else:
            self.total += scores

    def weights(self) -> np.ndarray | int:
        return self.scalar_weight if self.weight is None else self.weight + self.scalar_weight

    def integer_average(self) -> np.ndarray:
        """Σ(s·w) / Σw with Go division (all terms ≥ 0), 0 where Σw is 0."""
        total = np.zeros(self.count, dtype=np.int64) if self.total is None else self.total
        weights = self.weights()
        if isinstance(weights, int):
            if weights == 1:
                return total
            return total // weights if weights else np.zeros_like(total)
        return np.where(weights == 0, 0, total // np.maximum(weights, 1))


def least_allocated(allocation: Allocation) -> np.ndarray:
    """LeastAllocated: (allocatable − requested)·100 // allocatable, 0 when over capacity."""
    acc = _WeightedSum(allocation.count)
    for row in allocation.rows:
        divisor = row.divisor
        scores = (divisor - row.requested) * MAX_NODE_SCORE // divisor
        acc.add(np.where(row.requested > row.allocatable, 0, scores), row.weight, row.present)
    return acc.integer_average()


def most_allocated(allocation: Allocation) -> np.ndarray:
    """MostAllocated: min(requested, allocatable)·100 // allocatable."""
    acc = _WeightedSum(allocation.count)
    for row in allocation.rows:
        divisor = row.divisor
        acc.add(np.minimum(row.requested, divisor) * MAX_NODE_SCORE // divisor, row.weight, row.present)
    return acc.integer_average()


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
            result = np.where(at_or_below, shape[0][1], result)
        else:
            (u0, s0), (u1, s1) = shape[k - 1], shape[k]
            result = np.where(at_or_below, s0 + trunc_div((s1 - s0) * (utilization - u0), u1 - u0), result)
    return result


def requested_to_capacity_ratio(points: Sequence[UtilizationShapePoint]) -> Scorer:
    """RequestedToCapacityRatio with ``points`` (scores 0..10, scaled to 0..100).

    Only resources scoring above 0 enter the weighted average, which is rounded half away from zero.
    """
    if not points:
        raise ValueError("scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point")
    shape = tuple((int(p.utilization), int(p.score) * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for p in points)

    def scorer(allocation: Allocation) -> np.ndarray:
        total = np.zeros(allocation.count, dtype=np.int64)
        weights = np.zeros(allocation.count, dtype=np.int64)
        for row in allocation.rows:
            divisor = row.divisor
            utilization = np.where(
                row.requested > row.allocatable, MAX_UTILIZATION, row.requested * MAX_UTILIZATION // divisor
            )
            scores = broken_linear(shape, utilization)
            included = scores > 0 if row.present is None else row.present & (scores > 0)
            total += np.where(included, scores * row.weight, 0)
            weights += included * np.int64(row.weight)
        average = total / np.maximum(weights, 1)
        return np.where(weights == 0, 0, round_half_away(average))

    return scorer


def balanced_resource_score(rows: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray | None]], count: int) -> np.ndarray:
    """Upstream ``balancedResourceScore``: int((1 − std)·100) of the capped requested/allocatable fractions.

    ``rows`` are (requested, divisor, present) per resource. Floating point is evaluated in upstream's order
    (fractions summed resource by resource; two fractions give |f1 − f2| / 2, more give the population
    standard deviation) so the truncation lands identically.
    """
    fractions = [np.minimum(requested / divisor, 1.0) for requested, divisor, _ in rows]
    if all(present is None for _, _, present in rows):
        # Every node includes every resource: the branch is the same for all of them.
        if len(fractions) < 2:
            return np.full(count, MAX_NODE_SCORE, dtype=np.int64)
        if len(fractions) == 2:
            std = np.abs((fractions[0] - fractions[1]) / 2)
        else:
            total = fractions[0].copy()
            for fraction in fractions[1:]:
                total += fraction
            mean = total / len(fractions)
            squares = np.zeros(count, dtype=np.float64)
            for fraction in fractions:
                deviation = fraction - mean
                squares += deviation * deviation
            std = np.sqrt(squares / len(fractions))
        scores: np.ndarray = ((1 - std) * MAX_NODE_SCORE).astype(np.int64)
        return scores
    included_count = np.zeros(count, dtype=np.int64)
    total = np.zeros(count, dtype=np.float64)
    first = np.zeros(count, dtype=np.float64)
    second = np.zeros(count, dtype=np.float64)
    for fraction, (_, _, present) in zip(fractions, rows, strict=True):
        row = np.ones(count, dtype=bool) if present is None else present
        first = np.where(row & (included_count == 0), fraction, first)
        second = np.where(row & (included_count == 1), fraction, second)
        total = np.where(row, total + fraction, total)
        included_count += row
    std = np.where(included_count == 2, np.abs((first - second) / 2), 0.0)
    many = included_count > 2
    if many.any():
        divisor = np.where(many, included_count, 1)
        mean = total / divisor
        squares = np.zeros(count, dtype=np.float64)
        for fraction, (_, _, present) in zip(fractions, rows, strict=True):
            deviation = fraction - mean
            squares = (
                squares + deviation * deviation
                if present is None
                else np.where(present, squares + deviation * deviation, squares)
            )
        std = np.where(many, np.sqrt(squares / divisor), std)
    # (1 − std) ≥ 0.5, so the int64 cast truncates as Go's int64() does.
    return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)


def balanced_allocation(allocation: Allocation) -> np.ndarray:
    """Upstream 1.36 ``balancedResourceScorer``: how much placing the pod improves the node's balance.

    Both balances (with and without the pod) lie in [50, 100]; the result is
    50 + (50 + with − without) / 2 (Go division), in [50, 100] and 75 when the pod changes nothing.
    Resource weights do not enter (BalancedAllocation validates them to be 1).
    """
    divisors = [row.divisor for row in allocation.rows]
    with_pod = balanced_resource_score(
        [(row.requested, divisor, row.present) for row, divisor in zip(allocation.rows, divisors, strict=True)],
        allocation.count,
    )
    without_pod = balanced_resource_score(
        [(row.allocated, divisor, row.present) for row, divisor in zip(allocation.rows, divisors, strict=True)],
        allocation.count,
    )
    half = MAX_NODE_SCORE // 2
    # 50 + with − without ≥ 0, so floor division is Go's truncation here.
    scores: np.ndarray = half + (half + with_pod - without_pod) // 2
    return scores


# -- one node at a time: the strategies' scalar twins ---------------------------------------------------------
#: (weight, allocatable, allocated, requested) of one resource that scores on one node.
NodeRow = tuple[int, int, int, int]
#: A strategy's scalar twin: one node's rows → its score, equal to the vectorised strategy's for that node.
NodeScorer = Callable[[Sequence[NodeRow]], int]


def node_rows_reader(
    table: NodeTable, resources: Sequence[ScoredResource], pod_requests: Sequence[int], *, use_requested: bool
) -> Callable[[int], list[NodeRow]]:
    """:func:`calculate_allocation` for one slot at a time: the rows of the resources that score on it (the same
    skip rules: a scalar resource the pod does not request, a resource the node has no allocatable of)."""
    picked: list[tuple[int, np.ndarray, np.ndarray, int]] = []
    for resource, pod_request in zip(resources, pod_requests, strict=True):
        if pod_request == 0 and resource.scalar:
            continue
        columns = resource_columns(table, resource.name, use_requested=use_requested)
        if columns is not None:
            picked.append((resource.weight, columns[0], columns[1], pod_request))

    def rows(slot: int) -> list[NodeRow]:
        found: list[NodeRow] = []
        for weight, allocatable_column, allocated_column, pod_request in picked:
            allocatable = int(allocatable_column[slot])
            if allocatable:
                allocated = int(allocated_column[slot])
                found.append((weight, allocatable, allocated, allocated + pod_request))
        return found

    return rows


def _integer_average(total: int, weights: int) -> int:
    return total // weights if weights else 0


def least_allocated_node(rows: Sequence[NodeRow]) -> int:
    """:func:`least_allocated` for one node."""
    total = sum(
        (0 if requested > allocatable else (allocatable - requested) * MAX_NODE_SCORE // allocatable) * weight
        for weight, allocatable, _, requested in rows
    )
    return _integer_average(total, sum(row[0] for row in rows))


def most_allocated_node(rows: Sequence[NodeRow]) -> int:
    """:func:`most_allocated` for one node."""
    total = sum(
        min(requested, allocatable) * MAX_NODE_SCORE // allocatable * weight
        for weight, allocatable, _, requested in rows
    )
    return _integer_average(total, sum(row[0] for row in rows))


def _balance_node(amounts: Sequence[tuple[int, int]]) -> int:
    """:func:`balanced_resource_score` for one node's (amount, allocatable) pairs, in the same float order."""
    fractions = [min(float(amount) / float(allocatable), 1.0) for amount, allocatable in amounts]
    if len(fractions) < 2:
        return MAX_NODE_SCORE
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    else:
        total = 0.0
        for fraction in fractions:
            total += fraction
        mean = total / len(fractions)
        squares = 0.0
        for fraction in fractions:
            deviation = fraction - mean
            squares += deviation * deviation
        std = math.sqrt(squares / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_allocation_node(rows: Sequence[NodeRow]) -> int:
    """:func:`balanced_allocation` for one node."""
    with_pod = _balance_node([(requested, allocatable) for _, allocatable, _, requested in rows])
    without_pod = _balance_node([(allocated, allocatable) for _, allocatable, allocated, _ in rows])
    half = MAX_NODE_SCORE // 2
    return half + (half + with_pod - without_pod) // 2


#: The strategies with a scalar twin (RequestedToCapacityRatio's shape closures have none: never remembered).
NODE_SCORERS: dict[Scorer, NodeScorer] = {
    least_allocated: least_allocated_node,
    most_allocated: most_allocated_node,
    balanced_allocation: balanced_allocation_node,
}


# -- scores remembered between cycles ------------------------------------------------------------------------
#: Up to this many changed nodes are scored one at a time (≈ 3 µs each); more, in one vectorised call
#: (≈ 25 numpy calls, 25–40 µs whatever the number of nodes).
_ONE_AT_A_TIME = 8
#: Pod requests whose scores are remembered at once (each costs two int64 arrays as long as the node table).
_REMEMBERED_REQUESTS = 8


class _SlotScores:
    """One pod request's scores by node slot, each with the node table :attr:`~NodeTable.version` it is for."""

    __slots__ = ("scores", "version")

    def __init__(self, capacity: int) -> None:
        self.version = np.full(capacity, -1, dtype=np.int64)
        self.scores = np.zeros(capacity, dtype=np.int64)

    def fit(self, capacity: int) -> None:
        extra = capacity - len(self.version)
        if extra > 0:
            self.version = np.concatenate([self.version, np.full(extra, -1, dtype=np.int64)])
            self.scores = np.concatenate([self.scores, np.zeros(extra, dtype=np.int64)])


class RememberedScores:
    """A resource strategy's scores, remembered by node slot for the pod requests seen lately.

    A resource score depends on the node's allocatable, what its pods request and the pod's request, nothing
    else; the node table's :attr:`~NodeTable.version` of a slot changes whenever the first two do. Upstream
    scores every sampled node in every cycle; between two cycles for pods with the same request nearly every
    node of the sampled window is unchanged (SchedulingBasic at 5000 nodes: the one that took the pod ten
    cycles before), and a vectorised score costs about the same for 1 node as for 500. So the scores of a
    request seen before are kept per slot and only the changed nodes are scored again, one at a time by the
    strategy's scalar twin when few (:data:`NODE_SCORERS`), else by the strategy itself. A request is
    remembered from its second cycle on (a one-off pod costs nothing extra), the :data:`_REMEMBERED_REQUESTS`
    most recent ones. A strategy without a twin is scored directly; another node table than the one remembered
    (a what-if's) makes it start over. The scores are the strategy's own, node for node: tests/unit/plugins/
    test_resource_allocation.py compares the twins on random clusters.
    """

    def __init__(self, resources: Sequence[ScoredResource], strategy: Scorer, *, use_requested: bool) -> None:
        self.resources = tuple(resources)
        self.strategy = strategy
        self.node_scorer = NODE_SCORERS.get(strategy)
        self.use_requested = use_requested
        self._table: NodeTable | None = None
        self._by_request: dict[tuple[int, ...], _SlotScores | None] = {}

    def scores(self, table: NodeTable, nodes: np.ndarray, pod_requests: tuple[int, ...]) -> np.ndarray:
        remembered = self._remembered(table, pod_requests)
        if remembered is None:
            return self._score(table, nodes, pod_requests)
        remembered.fit(table.capacity)
        current = table.version[nodes]
        changed = np.flatnonzero(remembered.version[nodes] != current)
        if len(changed):
            slots = nodes[changed]
            remembered.scores[slots] = self._score(table, slots, pod_requests)
            remembered.version[slots] = current[changed]
        scores: np.ndarray = remembered.scores[nodes]
        return scores

    def _remembered(self, table: NodeTable, pod_requests: tuple[int, ...]) -> _SlotScores | None:
        if self.node_scorer is None:
            return None
        if table is not self._table:
            self._table, self._by_request = table, {}
        by_request = self._by_request
        if pod_requests not in by_request:
            if len(by_request) >= _REMEMBERED_REQUESTS:
                del by_request[next(iter(by_request))]
            by_request[pod_requests] = None  # seen once: remembered from the next cycle on
            return None
        remembered = by_request.pop(pod_requests)  # re-inserted last: the most recently used
        if remembered is None:
            remembered = _SlotScores(table.capacity)
        by_request[pod_requests] = remembered
        return remembered

    def _score(self, table: NodeTable, nodes: np.ndarray, pod_requests: tuple[int, ...]) -> np.ndarray:
        if len(nodes) <= _ONE_AT_A_TIME and self.node_scorer is not None:
            rows = node_rows_reader(table, self.resources, pod_requests, use_requested=self.use_requested)
            return np.asarray([self.node_scorer(rows(slot)) for slot in nodes.tolist()], dtype=np.int64)
        allocation = calculate_allocation(table, nodes, self.resources, pod_requests, use_requested=self.use_requested)
        return self.strategy(allocation)


# -- a placement of a pod group as one node (upstream ``resourceAllocationScorer.scorePlacement``) ----------------
def placement_rows(
    table: NodeTable, nodes: np.ndarray, resources: Sequence[ScoredResource], proposed: Sequence[int]
) -> list[NodeRow]:
    """The placement's nodes summed into one (weight, allocatable, allocated, requested) row per resource that
    scores, ``proposed`` being the requests of the group's members the placement's trial placed.

    Upstream adds up each node's allocatable and allocated (non-zero cpu/memory as the node side of Score counts
    them) over the placement's nodes, skipping a node that has none of a resource, and the requested amount is the
    proposed members' plus every counted node's allocated. A scalar resource the members do not request is left out
    (upstream checks the running sum, which stays 0 for it); DRA-backed resources are not counted (no PreScore ran).
    """
    rows: list[NodeRow] = []
    for resource, request in zip(resources, proposed, strict=True):
        if resource.scalar and request == 0:
            continue
        columns = node_allocatable_request(table, nodes, resource.name, use_requested=False)
        if columns is None:
            continue
        allocatable, allocated = columns
        counted = allocatable != 0
        total = int(allocatable[counted].sum())
        if total == 0:
            continue
        used = int(allocated[counted].sum())
        rows.append((resource.weight, total, used, request + used))
    return rows
