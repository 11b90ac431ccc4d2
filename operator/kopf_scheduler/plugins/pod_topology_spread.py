"""PodTopologySpread: keep matching pods evenly spread over topology domains (upstream ``podtopologyspread``, §2.10).

Restated from v1.36 ``plugins/podtopologyspread/{common,filtering,scoring,plugin}.go`` and
``plugins/helper/spread.go``:

- A pod's constraints are split by ``whenUnsatisfiable``: ``DoNotSchedule`` ones are PreFilter/Filter's,
  ``ScheduleAnyway`` ones PreScore/Score's. A pod without constraints gets the plugin's default constraints
  (``defaultingType: System`` → hostname maxSkew 3 + zone maxSkew 5, both ScheduleAnyway) with a selector
  deduced from the Services, ReplicationControllers, ReplicaSets and StatefulSets that select it.
- The 1.36 scheduler still ANDs ``matchLabelKeys`` (key In [the pod's value]) into the selector itself,
  although the API server already merged them at pod creation (gate MatchLabelKeysInPodTopologySpread-
  SelectorMerge); merging twice selects the same pods, and pods created before the merge still spread right.
- Counted pods: same namespace as the incoming pod, not terminating, matching the selector. An empty
  selector (``{}``) counts nothing, although the incoming pod still "self-matches" it.
- A node is counted for a constraint when it carries every constraint's topology key and passes that
  constraint's inclusion policies (nodeAffinityPolicy Honor by default, nodeTaintsPolicy Ignore).

Speed: instead of upstream's walk over every pod of every node, per-node counts of matching pods come from
the cache (:meth:`ClusterCache.matching_pod_counts`: built once per namespace and selector from the label
index, then kept current by pod events), and are folded into per-domain counts with one ``np.bincount``
over the topology key's interned value ids (:class:`LabelColumn`). Domains are value ids, so Filter and Score look
counts up by indexing; nothing loops over nodes in Python.

QueueingHints: a pod counted in one of the pod's domains appears, goes, or changes labels (or the pod's own
tolerations change while a constraint honours taints); a node carrying every topology key comes, goes, or
changes a topology label or its taints. Where they simplify: for a pod without its own constraints the
defaulted constraints' selectors (built from the pod's Services and controllers) are not rebuilt; such a
constraint is taken to match every pod (Queue).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kopf_scheduler.api.args import PodTopologySpreadArgs
from kopf_scheduler.framework import (
    MAX_NODE_SCORE,
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    FilterPlugin,
    FilterResult,
    Handle,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueingHint,
    ScorePlugin,
    Status,
    as_object,
    as_pod,
    is_assigned_or_nominated,
    object_labels,
)
from kopf_scheduler.state.cache import ClusterCache, NodeInfo, Snapshot
from kopf_scheduler.state.node_affinity import required_node_affinity_mask
from kopf_scheduler.state.node_table import LabelColumn, NodeTable
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import LabelSelector, Requirement
from kopf_scheduler.state.taints import untolerated_taint_set_mask
from kopf_scheduler.state.tolerations import parse_taints

NAME = "PodTopologySpread"

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"

#: ``defaultingType: System``: spread over hosts and zones, softly (upstream ``systemDefaultConstraints``).
SYSTEM_DEFAULT_CONSTRAINTS: tuple[Mapping[str, Any], ...] = (
    {"topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 3},
    {"topologyKey": LABEL_TOPOLOGY_ZONE, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 5},
)

#: Workload kinds whose selectors the cache keeps in ``ClusterCache.workload_selectors``.
KIND_SERVICE = "Service"
KIND_REPLICATION_CONTROLLER = "ReplicationController"
KIND_REPLICA_SET = "ReplicaSet"
KIND_STATEFUL_SET = "StatefulSet"

PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME
_MEMO_KEY = NAME + "/constraints"

#: Upstream seeds its critical paths with MaxInt32: the "global minimum" when no domain exists.
_MAX_INT32 = 2**31 - 1


# -- constraints ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One ``TopologySpreadConstraint`` with its selector parsed (upstream ``topologySpreadConstraint``)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    @property
    def counts_nothing(self) -> bool:
        """Upstream ``countPodsMatchSelector`` returns 0 for an empty selector (and nil matches nothing)."""
        return self.selector.is_empty or self.selector.matches_nothing


def merge_match_label_keys(
    selector: LabelSelector, keys: Iterable[str], pod_labels: Mapping[str, str]
) -> LabelSelector:
    """AND ``key In [pod's value]`` for every key the pod carries; a nil selector stays nil (matches nothing)."""
    extra = {key: pod_labels[key] for key in keys if key in pod_labels}
    if not extra or selector.matches_nothing:
        return selector
    merged = [Requirement(key, "In", (value,)) for key, value in sorted(extra.items())]
    return LabelSelector((*merged, *selector.requirements))


def parse_constraints(
    raw: Sequence[Mapping[str, Any]], pod_labels: Mapping[str, str], action: str
) -> tuple[SpreadConstraint, ...]:
    """The constraints of ``raw`` for ``action`` (upstream ``filterTopologySpreadConstraints``)."""
    result: list[SpreadConstraint] = []
    for item in raw:
        if item.get("whenUnsatisfiable") != action:
            continue
        selector = merge_match_label_keys(
            LabelSelector.parse(item.get("labelSelector")), item.get("matchLabelKeys") or (), pod_labels
        )
        min_domains = item.get("minDomains")
        result.append(
            SpreadConstraint(
                max_skew=int(item.get("maxSkew") or 0),
                topology_key=item.get("topologyKey") or "",
                selector=selector,
                min_domains=1 if min_domains is None else int(min_domains),
                node_affinity_policy=item.get("nodeAffinityPolicy") or HONOR,
                node_taints_policy=item.get("nodeTaintsPolicy") or IGNORE,
            )
        )
    return tuple(result)


def _own_constraints(pod: PodInfo, action: str) -> tuple[SpreadConstraint, ...]:
    """The pod's own constraints for ``action``, parsed once per PodInfo (a pod update builds a new PodInfo)."""
    memo: dict[str, tuple[SpreadConstraint, ...]] | None = pod.memo.get(_MEMO_KEY)
    if memo is None:
        memo = pod.memo[_MEMO_KEY] = {}
    found = memo.get(action)
    if found is None:
        found = memo[action] = parse_constraints(pod.topology_spread_constraints, pod.labels, action)
    return found


# -- default selector (upstream helper.DefaultSelector) -----------------------------------------------
def _label_set(selector: LabelSelector) -> dict[str, str]:
    """A map-shaped selector (Service / ReplicationController ``spec.selector``) back as its key → value map."""
    return {r.key: r.values[0] for r in selector.requirements if r.operator == "In" and len(r.values) == 1}


def _parse_group_version(text: str) -> tuple[str, str] | None:
    """apimachinery ``ParseGroupVersion``: "" and "/" are the empty version, "v1" has no group; None on error."""
    if text in ("", "/"):
        return "", ""
    parts = text.split("/")
    if len(parts) == 1:
        return "", text
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def _controller_of(pod: PodInfo) -> Mapping[str, Any] | None:
    ref: Mapping[str, Any]
    for ref in (pod.obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref
    return None


_CONTROLLER_KINDS = {
    (("", "v1"), KIND_REPLICATION_CONTROLLER),
    (("apps", "v1"), KIND_REPLICA_SET),
    (("apps", "v1"), KIND_STATEFUL_SET),
}


def default_selector(pod: PodInfo, workloads: Mapping[tuple[str, str, str], LabelSelector]) -> LabelSelector:
    """The selector deduced from the Services selecting the pod and the pod's controller (RC, RS or SS).

    Services of the pod's namespace whose selector matches the pod contribute their key/value pairs (a
    Service without a selector matches nothing). The controller is looked up by the pod's controller
    ownerReference (group/version/kind must be exactly v1 ReplicationController or apps/v1 ReplicaSet /
    StatefulSet); a ReplicationController's map is merged into the pairs, a ReplicaSet's or StatefulSet's
    selector requirements are ANDed on top.
    """
    namespace = pod.namespace
    pairs: dict[str, str] = {}
    for (kind, ns, _name), selector in workloads.items():
        if kind == KIND_SERVICE and ns == namespace and not selector.matches_nothing and selector.matches(pod.labels):
            pairs.update(_label_set(selector))
    requirements = [Requirement(k, "In", (v,)) for k, v in sorted(pairs.items())]
    owner = _controller_of(pod)
    if owner is not None:
        group_version = _parse_group_version(owner.get("apiVersion") or "")
        kind = owner.get("kind") or ""
        if group_version is not None and (group_version, kind) in _CONTROLLER_KINDS:
            found = workloads.get((kind, namespace, owner.get("name") or ""))
            if found is not None and kind == KIND_REPLICATION_CONTROLLER:
                pairs.update(_label_set(found))
                requirements = [Requirement(k, "In", (v,)) for k, v in sorted(pairs.items())]
            elif found is not None and not found.matches_nothing:
                requirements.extend(found.requirements)
    return LabelSelector(tuple(requirements))


# -- counting ------------------------------------------------------------------------------------------
def _go_round(values: np.ndarray) -> np.ndarray:
    """Go ``math.Round`` (half away from zero), exactly: ``x - trunc(x)`` is exact in binary floating point."""
    whole = np.trunc(values)
    up = np.abs(values - whole) >= 0.5
    rounded: np.ndarray = (whole + np.sign(values) * up).astype(np.int64)
    return rounded


def _go_div(numerator: np.ndarray, denominator: int) -> np.ndarray:
    """Go integer division (truncates toward zero) of an int64 array by a positive int."""
    quotient: np.ndarray = np.sign(numerator) * (np.abs(numerator) // denominator)
    return quotient


def _label_ids(table: NodeTable, key: str, slots: np.ndarray) -> np.ndarray:
    """The interned value id of ``key`` on each of ``slots`` (−1 where the node lacks the label)."""
    column = table.label_column(key)
    if column is None:
        return np.full(len(slots), -1, dtype=np.int64)
    ids: np.ndarray = column.ids[slots].astype(np.int64)
    return ids


def _num_values(table: NodeTable, key: str) -> int:
    column = table.label_column(key)
    return 0 if column is None else len(column.values)


class _Counting:
    """Per-cycle helpers over all nodes: inclusion masks and matching-pod counts, each computed at most once."""

    def __init__(self, pod: PodInfo, snapshot: Snapshot) -> None:
        self.pod = pod
        self.cache: ClusterCache = snapshot.cache
        self.table = snapshot.table
        self.all_nodes = snapshot.order
        self._affinity: np.ndarray | None = None
        self._taints: np.ndarray | None = None

    def inclusion(self, constraint: SpreadConstraint) -> np.ndarray | None:
        """Upstream ``matchNodeInclusionPolicies`` over all nodes; None means every node passes."""
        mask: np.ndarray | None = None
        if constraint.node_affinity_policy == HONOR:
            if self._affinity is None:
                self._affinity = required_node_affinity_mask(self.table, self.all_nodes, self.pod)
            mask = self._affinity
        if constraint.node_taints_policy == HONOR:
            if self._taints is None:
                self._taints = ~untolerated_taint_set_mask(self.table, self.all_nodes, self.pod.tolerations)
            mask = self._taints if mask is None else mask & self._taints
        return mask

    def matching_per_node(self, constraint: SpreadConstraint) -> np.ndarray:
        """int64 indexed by node slot: matching, non-terminating pods of the pod's namespace on each node."""
        if constraint.counts_nothing:
            return np.zeros(self.table.capacity, dtype=np.int64)
        return self.cache.matching_pod_counts(self.pod.namespace, constraint.selector)


def _all_keys_present(table: NodeTable, constraints: Sequence[SpreadConstraint], slots: np.ndarray) -> np.ndarray:
    """Upstream ``nodeLabelsMatchSpreadConstraints`` over ``slots``."""
    mask = np.ones(len(slots), dtype=bool)
    for constraint in constraints:
        mask &= _label_ids(table, constraint.topology_key, slots) >= 0
    return mask


# -- cycle state ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class PreFilterState:
    """What Filter reads (upstream ``preFilterState``): per constraint, matching pods per domain.

    Domains are the topology key's interned value ids: ``match_num[i][v]`` counts matching pods in domain
    ``v`` and ``domains[i][v]`` says whether ``v`` is a domain at all (some eligible node carries it, or
    AddPod created it, as upstream's map insertion does). Upstream keeps only the two smallest counts
    ("critical paths"); with the full count array the minimum is exact, which is what the critical paths
    also yield under the one-node-at-a-time updates that preemption and nominated pods make.
    """

    constraints: tuple[SpreadConstraint, ...]
    match_num: list[np.ndarray]
    domains: list[np.ndarray]

    def clone(self) -> PreFilterState:
        # Constraints never change; counts do (AddPod/RemovePod on a dry-run copy).
        return PreFilterState(self.constraints, [a.copy() for a in self.match_num], [d.copy() for d in self.domains])

    def min_match_num(self, index: int) -> int:
        """The global minimum for the skew, 0 when fewer than minDomains domains exist."""
        present = self.domains[index]
        num_domains = int(np.count_nonzero(present))
        if num_domains < self.constraints[index].min_domains:
            return 0
        if num_domains == 0:
            return _MAX_INT32
        return int(self.match_num[index][present].min())

    def add(self, index: int, value_id: int, delta: int) -> None:
        counts = self.match_num[index]
        if value_id >= len(counts):
            # A label value first seen after PreFilter (cannot happen within a cycle, but stay safe).
            grow = value_id + 1 - len(counts)
            self.match_num[index] = counts = np.concatenate([counts, np.zeros(grow, dtype=np.int64)])
            self.domains[index] = np.concatenate([self.domains[index], np.zeros(grow, dtype=bool)])
        counts[value_id] += delta
        self.domains[index][value_id] = True


@dataclass(frozen=True, slots=True)
class PreScoreState:
    """What Score and NormalizeScore read (upstream ``preScoreState``); read-only, so clone shares it."""

    constraints: tuple[SpreadConstraint, ...]
    #: Slots of the filtered nodes that lack some topology key (scored 0) when all keys are required.
    ignored_slots: np.ndarray
    weights: tuple[float, ...]
    #: Per constraint: pods per bucket (non-hostname keys), or pods per node slot (hostname key).
    counts: tuple[np.ndarray, ...]

    def clone(self) -> PreScoreState:
        return self


def _buckets(table: NodeTable, key: str, ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Value ids with "label absent" folded into the bucket of the value "" (upstream reads a missing label
    as ""), or into an extra bucket past the last value id when no node has the value ""."""
    column: LabelColumn | None = table.label_column(key)
    num_values = 0 if column is None else len(column.values)
    empty = None if column is None else column.value_ids.get("")
    absent = num_values if empty is None else empty
    return np.where(ids >= 0, ids, absent), num_values + 1


# -- the plugin ----------------------------------------------------------------------------------------
_LABEL_MISSING = Status.unschedulable(ERR_REASON_NODE_LABEL_NOT_MATCH, plugin=NAME, unresolvable=True)
_SKEW_EXCEEDED = Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH, plugin=NAME)


class PodTopologySpread(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    name: ClassVar[str] = NAME
    args_model = PodTopologySpreadArgs
    has_normalize: ClassVar[bool] = True

    def __init__(self, *, handle: Handle, args: PodTopologySpreadArgs | None = None) -> None:
        # The args model validates itself (upstream ValidatePodTopologySpreadArgs) when it is built.
        args = args if args is not None else PodTopologySpreadArgs()
        super().__init__(handle=handle, args=args)
        #: Only System defaulting lets nodes lacking a zone still be scored by hostname spreading.
        self.system_defaulted = args.defaulting_type == "System"
        raw_defaults: Sequence[Mapping[str, Any]] = (
            SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted else args.default_constraints
        )
        # Parsed once; each pod gets them with its own deduced selector (their matchLabelKeys are overwritten
        # by that selector upstream, so they are dropped here).
        self._defaults = {
            action: parse_constraints(raw_defaults, {}, action) for action in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)
        }

    # -- constraints of the incoming pod ------------------------------------------------------------
    def constraints(self, pod: PodInfo, action: str, cache: ClusterCache) -> tuple[SpreadConstraint, ...]:
        """The pod's constraints for ``action``, or the defaults with the deduced selector (upstream
        ``getConstraints`` / ``buildDefaultConstraints``)."""
        if pod.topology_spread_constraints:
            return _own_constraints(pod, action)
        defaults = self._defaults[action]
        if not defaults:
            return ()
        selector = default_selector(pod, cache.workload_selectors)
        if selector.is_empty:
            return ()
        return tuple(dataclasses.replace(c, selector=selector) for c in defaults)

    # -- PreFilter / Filter -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        constraints = self.constraints(pod, DO_NOT_SCHEDULE, snapshot.cache)
        if not constraints:
            return None, Status.skip(plugin=NAME)
        counting = _Counting(pod, snapshot)
        table, all_nodes = counting.table, counting.all_nodes
        has_keys = _all_keys_present(table, constraints, all_nodes)
        match_num: list[np.ndarray] = []
        domains: list[np.ndarray] = []
        for constraint in constraints:
            eligible = has_keys
            inclusion = counting.inclusion(constraint)
            if inclusion is not None:
                eligible = eligible & inclusion
            ids = _label_ids(table, constraint.topology_key, all_nodes[eligible])
            num_values = _num_values(table, constraint.topology_key)
            per_node = counting.matching_per_node(constraint)[all_nodes[eligible]]
            match_num.append(np.bincount(ids, weights=per_node, minlength=num_values).astype(np.int64))
            domains.append(np.bincount(ids, minlength=num_values) > 0)
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(constraints, match_num, domains))
        return None, SUCCESS

    def pre_filter_extensions(self) -> PodTopologySpread:
        return self

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        return self._update_with_pod(state, pod, pod_to_add, node, +1)

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        return self._update_with_pod(state, pod, pod_to_remove, node, -1)

    def _update_with_pod(
        self, state: CycleState, preemptor: PodInfo, updated: PodInfo, node: NodeInfo, delta: int
    ) -> Status:
        found = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(found, PreFilterState):
            return Status.as_error(
                KeyError(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found'), plugin=NAME
            )
        if updated.namespace != preemptor.namespace:
            return SUCCESS
        if any(c.topology_key not in node.labels for c in found.constraints):
            return SUCCESS
        table = self.handle.snapshot().table
        slot = np.asarray([node.slot], dtype=np.int64)
        for index, constraint in enumerate(found.constraints):
            if not constraint.selector.matches(updated.labels):
                continue
            if constraint.node_affinity_policy == HONOR and not required_node_affinity_mask(table, slot, preemptor)[0]:
                continue
            if (
                constraint.node_taints_policy == HONOR
                and untolerated_taint_set_mask(table, slot, preemptor.tolerations)[0]
            ):
                continue
            value_id = int(_label_ids(table, constraint.topology_key, slot)[0])
            found.add(index, value_id, delta)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        found: PreFilterState = state.read(PRE_FILTER_STATE_KEY)
        table = snapshot.table
        undecided = np.ones(len(nodes), dtype=bool)
        rejected = np.zeros(len(nodes), dtype=bool)
        status_index = np.zeros(len(nodes), dtype=np.int64)
        # Upstream checks constraint by constraint and stops at the first failure, so a node that exceeds the
        # skew of constraint 0 reads "U" even if it also lacks the key of constraint 1.
        for index, constraint in enumerate(found.constraints):
            ids = _label_ids(table, constraint.topology_key, nodes)
            missing = undecided & (ids < 0)
            rejected |= missing
            undecided &= ~missing
            counts = found.match_num[index]
            known = (ids >= 0) & (ids < len(counts))
            match_num = np.zeros(len(nodes), dtype=np.int64)
            match_num[known] = counts[ids[known]]
            self_match = 1 if constraint.selector.matches(pod.labels) else 0
            skew = match_num + self_match - found.min_match_num(index)
            exceeded = undecided & (skew > constraint.max_skew)
            rejected |= exceeded
            status_index[exceeded] = 1
            undecided &= ~exceeded
            if not undecided.any():
                break
        if not rejected.any():
            return None
        return FilterResult(rejected, (_LABEL_MISSING, _SKEW_EXCEEDED), status_index)

    # -- PreScore / Score / NormalizeScore ----------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        if snapshot.num_nodes == 0:
            return Status.skip(plugin=NAME)
        # Only explicit or List-defaulted constraints require every key; System defaulting still spreads by
        # hostname over nodes that have no zone label.
        require_all = bool(pod.topology_spread_constraints) or not self.system_defaulted
        constraints = self.constraints(pod, SCHEDULE_ANYWAY, snapshot.cache)
        if not constraints:
            return Status.skip(plugin=NAME)
        counting = _Counting(pod, snapshot)
        table, all_nodes = counting.table, counting.all_nodes
        nodes = np.asarray(nodes, dtype=np.int64)
        if require_all:
            kept = _all_keys_present(table, constraints, nodes)
            all_eligible = _all_keys_present(table, constraints, all_nodes)
        else:
            kept = np.ones(len(nodes), dtype=bool)
            all_eligible = np.ones(len(all_nodes), dtype=bool)
        weights: list[float] = []
        counts: list[np.ndarray] = []
        for constraint in constraints:
            key = constraint.topology_key
            if key == LABEL_HOSTNAME:
                # Per-node counts, read in Score for the node itself (no inclusion policies, as upstream).
                weights.append(math.log(int(np.count_nonzero(kept)) + 2))
                # A copy: the cache's array follows later pod events, the state must not.
                counts.append(counting.matching_per_node(constraint).copy())
                continue
            # Domains are the values (absent label read as "") of the filtered, non-ignored nodes; pods are
            # counted over all nodes passing the inclusion policies, but only in those domains.
            filtered_buckets, num_buckets = _buckets(table, key, _label_ids(table, key, nodes[kept]))
            seeded = np.bincount(filtered_buckets, minlength=num_buckets) > 0
            weights.append(math.log(int(np.count_nonzero(seeded)) + 2))
            eligible = all_eligible
            inclusion = counting.inclusion(constraint)
            if inclusion is not None:
                eligible = eligible & inclusion
            slots = all_nodes[eligible]
            buckets, _ = _buckets(table, key, _label_ids(table, key, slots))
            in_domain = seeded[buckets]
            per_node = counting.matching_per_node(constraint)[slots[in_domain]]
            counts.append(np.bincount(buckets[in_domain], weights=per_node, minlength=num_buckets).astype(np.int64))
        state.write(
            PRE_SCORE_STATE_KEY,
            PreScoreState(constraints, nodes[~kept], tuple(weights), tuple(counts)),
        )
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        found: PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        table = snapshot.table
        nodes = np.asarray(nodes, dtype=np.int64)
        total = np.zeros(len(nodes), dtype=np.float64)
        # Summed in constraint order, in float64, then rounded once: the same operations as upstream, so the
        # same bits.
        for constraint, weight, counts in zip(found.constraints, found.weights, found.counts, strict=True):
            ids = _label_ids(table, constraint.topology_key, nodes)
            has_key = ids >= 0
            if constraint.topology_key == LABEL_HOSTNAME:
                count = counts[nodes]
            else:
                # A node with the key is in the bucket of its own value id (seeded in PreScore, as it was
                # filtered and not ignored); nodes without the key skip the constraint.
                count = np.zeros(len(nodes), dtype=np.int64)
                count[has_key] = counts[ids[has_key]]
            contribution = count.astype(np.float64) * weight + float(constraint.max_skew - 1)
            total = np.where(has_key, total + contribution, total)
        raw = _go_round(total)
        raw[np.isin(nodes, found.ignored_slots)] = 0
        return raw

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        found: PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        scores = np.asarray(scores, dtype=np.int64)
        valid = ~np.isin(nodes, found.ignored_slots)
        result = np.zeros(len(scores), dtype=np.int64)
        if not valid.any():
            return result
        considered = scores[valid]
        min_score = int(considered.min())
        max_score = max(int(considered.max()), 0)
        if max_score == 0:
            result[valid] = MAX_NODE_SCORE
        else:
            result[valid] = _go_div(MAX_NODE_SCORE * (max_score + min_score - considered), max_score)
        return result

    # -- EnqueueExtensions --------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        pod_changes = (
            ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.UPDATE_POD_TOLERATION | ActionType.DELETE
        )
        node_changes = ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, pod_changes), self.is_schedulable_after_pod_change),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, node_changes), self.is_schedulable_after_node_change),
        ]

    def _hint_constraints(self, pod: PodInfo) -> _HintConstraints:
        """The pod's hard constraints as upstream's ``getConstraints``, without the defaults' deduced selector."""
        if pod.topology_spread_constraints:
            return _HintConstraints(_own_constraints(pod, DO_NOT_SCHEDULE), selectors_known=True)
        # The System defaults are ScheduleAnyway only, so only List defaulting gives hard ones here.
        return _HintConstraints(self._defaults[DO_NOT_SCHEDULE], selectors_known=False)

    def is_schedulable_after_pod_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A pod that counts in one of the pod's domains appeared, went, or changed labels (or tolerations)."""
        original, modified = as_pod(old), as_pod(new)
        if (modified is not None and not _involved_in_spreading(modified, pod)) or (
            original is not None and not _involved_in_spreading(original, pod)
        ):
            return QUEUE_SKIP
        hard = self._hint_constraints(pod)
        if modified is not None and original is not None:
            if (
                modified.uid == pod.uid
                and modified.tolerations != original.tolerations
                and any(c.node_taints_policy == HONOR for c in hard.constraints)
            ):
                return QUEUE
            if dict(modified.labels) == dict(original.labels):
                return QUEUE_SKIP
            if any(hard.selects(c, original.labels) != hard.selects(c, modified.labels) for c in hard.constraints):
                return QUEUE
            return QUEUE_SKIP
        changed = modified if modified is not None else original
        assert changed is not None
        return QUEUE if any(hard.selects(c, changed.labels) for c in hard.constraints) else QUEUE_SKIP

    def is_schedulable_after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A node carrying all the topology keys came, went, or changed a topology label or its taints."""
        original, modified = as_object(old), as_object(new)
        constraints = self._hint_constraints(pod).constraints
        original_labels = object_labels(original) if original is not None else {}
        modified_labels = object_labels(modified) if modified is not None else {}
        original_matching = original is not None and _has_topology_keys(original_labels, constraints)
        modified_matching = modified is not None and _has_topology_keys(modified_labels, constraints)
        if original is not None and modified is not None:
            if original_matching != modified_matching:
                return QUEUE
            if modified_matching and (
                any(
                    original_labels.get(c.topology_key, "") != modified_labels.get(c.topology_key, "")
                    for c in constraints
                )
                or parse_taints((original.get("spec") or {}).get("taints"))
                != parse_taints((modified.get("spec") or {}).get("taints"))
            ):
                return QUEUE
            return QUEUE_SKIP
        if modified is not None:
            return QUEUE if modified_matching else QUEUE_SKIP
        if original is None:
            raise ValueError("node hint called without any node")
        return QUEUE if original_matching else QUEUE_SKIP


@dataclass(frozen=True, slots=True)
class _HintConstraints:
    """A pod's hard constraints for the hints; unknown selectors (defaulted constraints) match every pod."""

    constraints: tuple[SpreadConstraint, ...]
    selectors_known: bool

    def selects(self, constraint: SpreadConstraint, labels: Mapping[str, str]) -> bool:
        return not self.selectors_known or constraint.selector.matches(labels)


def _involved_in_spreading(incoming: PodInfo, pod: PodInfo) -> bool:
    if incoming.uid == pod.uid:
        return True
    if not is_assigned_or_nominated(incoming):
        return False
    return incoming.namespace == pod.namespace


def _has_topology_keys(labels: Mapping[str, str], constraints: Sequence[SpreadConstraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)
