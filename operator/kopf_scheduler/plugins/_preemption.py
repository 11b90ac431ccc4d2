"""The I/O-free arithmetic of preemption: importance order, PDB accounting, the node pick, the dry-run cache.

Restates the pure parts of upstream's ``framework/preemption/preemption.go`` (``pickOneNodeForPreemption``),
``plugins/defaultpreemption/default_preemption.go`` (``filterPodsWithPDBViolation``,
``podTerminatingByPreemption``, ``calculateNumCandidates``) and ``pkg/scheduler/util/utils.go``
(``MoreImportantPod``, ``GetEarliestPodStartTime``). Kept apart from the plugin so each step is tested alone and
so HTTP extenders (their ``preempt`` verb) can reuse :class:`Victims` and :func:`pick_one_node_for_preemption`.

:class:`DryRunRemoval` is the one piece with state: upstream dry-runs on a *copy* of a NodeInfo; our plugins
read the shared cache's node-table columns, so victims are taken out of the real cache for the dry run and
put back exactly (same PodInfo objects, same per-node order, assumed marks) when it ends, even on exceptions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kopf_scheduler.state.cache import ClusterCache, NodeInfo
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import LabelSelector

#: Upstream's ``math.MaxInt32 + 1``: added to each victim priority so that sums compare as counts would.
PRIORITY_OFFSET = 2**31

_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})

#: PodInfo.memo key of the pod's parsed ``status.startTime`` (None: absent or unreadable).
_MEMO_START_TIME = "preemption.start_time"
_UNPARSED = object()


# -- importance ----------------------------------------------------------------------------------------
def pod_start_time(pod: PodInfo, now: float) -> float:
    """Upstream ``GetPodStartTime``: ``status.startTime`` (epoch seconds), or ``now`` for a pod not started.

    The parsed time is kept in ``pod.memo`` (every dry run sorts the same victims again)."""
    started = pod.memo.get(_MEMO_START_TIME, _UNPARSED)
    if started is _UNPARSED:
        started = pod.memo[_MEMO_START_TIME] = _parse_start_time(pod)
    return now if started is None else started


def _parse_start_time(pod: PodInfo) -> float | None:
    raw = pod.start_time
    if not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def importance_key(pod: PodInfo, now: float) -> tuple[int, float]:
    """Sort key for upstream ``MoreImportantPod`` (most important first): higher priority, then older."""
    return (-pod.priority, pod_start_time(pod, now))


def sort_by_importance(pods: Iterable[PodInfo], now: float) -> list[PodInfo]:
    return sorted(pods, key=lambda p: importance_key(p, now))


def pod_terminating_by_preemption(pod: PodInfo) -> bool:
    """Upstream ``podTerminatingByPreemption``: being deleted, and the first DisruptionTarget condition says
    the scheduler preempted it."""
    if not pod.terminating:  # read before the object: a compact one is decoded (and kept) on its first read
        return False
    for condition in (pod.obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "DisruptionTarget":
            return condition.get("status") == "True" and condition.get("reason") == "PreemptionByScheduler"
    return False


# -- PodDisruptionBudgets ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Budget:
    """What preemption reads of one PodDisruptionBudget."""

    namespace: str
    selector: LabelSelector | None  # None: invalid, empty or nil selector (matches nothing)
    disruptions_allowed: int
    disrupted_pods: frozenset[str]

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any]) -> Budget:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            namespace=meta.get("namespace") or "",
            selector=_pdb_selector(spec.get("selector")),
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
            disrupted_pods=frozenset((status.get("disruptedPods") or {}).keys()),
        )


def _pdb_selector(raw: Mapping[str, Any] | None) -> LabelSelector | None:
    """Upstream ``LabelSelectorAsSelector`` + ``Empty()``: nil, ``{}`` and invalid selectors match nothing."""
    if raw is None:
        return None
    for expr in raw.get("matchExpressions") or ():
        operator, values = expr.get("operator", ""), expr.get("values") or ()
        if operator not in _SELECTOR_OPERATORS:
            return None
        if (operator in ("In", "NotIn")) != bool(values):
            return None
    selector = LabelSelector.parse(raw)
    return None if selector.is_empty else selector


def split_by_pdb_violation(pods: Sequence[PodInfo], budgets: Sequence[Budget]) -> tuple[list[PodInfo], list[PodInfo]]:
    """Upstream ``filterPodsWithPDBViolation``: (violating, non-violating), each keeping the input order.

    Each matching budget not already counting the pod in ``disruptedPods`` loses one allowed disruption per
    pod; a pod that drives any of its budgets below zero is violating.
    """
    allowed = [budget.disruptions_allowed for budget in budgets]
    violating: list[PodInfo] = []
    non_violating: list[PodInfo] = []
    for pod in pods:
        violated = False
        if pod.labels:
            for i, budget in enumerate(budgets):
                if budget.namespace != pod.namespace or budget.selector is None:
                    continue
                if not budget.selector.matches(pod.labels) or pod.name in budget.disrupted_pods:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else non_violating).append(pod)
    return violating, non_violating


# -- candidates ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Victims:
    """Upstream ``extenderv1.Victims``: the pods to evict on one node (most important first)."""

    pods: tuple[PodInfo, ...]
    num_pdb_violations: int = 0


def calculate_num_candidates(num_nodes: int, percentage: int, absolute: int) -> int:
    """Upstream ``calculateNumCandidates``: ``num_nodes·percentage//100``, at least ``absolute``, at most all."""
    return min(max(num_nodes * percentage // 100, absolute), num_nodes)


def earliest_start_of_highest_priority(victims: Victims, now: float) -> float:
    """Upstream ``GetEarliestPodStartTime``: the earliest start among the victims of the highest priority."""
    top = max(pod.priority for pod in victims.pods)
    return min(pod_start_time(pod, now) for pod in victims.pods if pod.priority == top)


def pick_one_node_for_preemption(nodes_to_victims: Mapping[str, Victims], now: float) -> str:
    """Upstream ``pickOneNodeForPreemption``: the best node, each criterion breaking the previous one's ties.

    1. fewest PDB violations; 2. lowest highest victim priority; 3. smallest sum of (priority + 2^31);
    4. fewest victims; 5. latest earliest start among the highest-priority victims; 6. the first left
    (in the mapping's order). "" for no candidates.
    """
    candidates = list(nodes_to_victims)
    if not candidates:
        return ""
    criteria = (
        lambda v: -v.num_pdb_violations,
        lambda v: -v.pods[0].priority,
        lambda v: -sum(p.priority + PRIORITY_OFFSET for p in v.pods),
        lambda v: -len(v.pods),
        lambda v: earliest_start_of_highest_priority(v, now),
    )
    for score in criteria:
        scores = {node: score(nodes_to_victims[node]) for node in candidates}
        best = max(scores.values())
        candidates = [node for node in candidates if scores[node] == best]
        if len(candidates) == 1:
            break
    return candidates[0]


# -- the dry run on the shared cache -------------------------------------------------------------------
class DryRunRemoval:
    """Takes pods off one node of the real cache for a dry run and puts them back exactly.

    Used as a context manager: :meth:`remove` / :meth:`restore` may be called in any order inside; on exit
    every pod still removed is re-added (same object, assumed mark kept) and the node's pod dicts get their
    original order back, so the cache is as before apart from a higher ``generation`` (never lowered: caches
    keyed by generation must not mistake the dry-run states for later real ones).
    """

    def __init__(self, cache: ClusterCache, node: NodeInfo) -> None:
        self.cache = cache
        self.node = node
        self._removed: dict[str, tuple[PodInfo, bool]] = {}
        self._order = _pod_order(node)

    def __enter__(self) -> DryRunRemoval:
        return self

    def __exit__(self, *exc: object) -> None:
        for uid in list(self._removed):
            self.restore(uid)
        _restore_pod_order(self.node, self._order)

    def remove(self, pod: PodInfo) -> None:
        assumed = self.cache.is_assumed(pod.uid)
        self.cache.remove_pod(pod.uid)
        self._removed[pod.uid] = (pod, assumed)

    def restore(self, uid: str) -> None:
        pod, assumed = self._removed.pop(uid)
        self.cache.restore_pod(pod, assumed=assumed)  # the same object: identities and memos as they were


class NodesDryRun:
    """Takes pods off many nodes' own accounting for a batched dry run, and puts them back exactly.

    For Filter passes that read nothing but the nodes' own accounting (DefaultPreemption's batched dry run,
    while no PreFilter extension runs): the pods leave only their nodes (:meth:`ClusterCache.take_off_nodes`,
    all of a call's pods in one node-table update per column) and stay in the cluster-wide indexes. A context
    manager like :class:`DryRunRemoval`: on exit every pod still off is put back and each node's pod dicts
    get their original order back.
    """

    def __init__(self, cache: ClusterCache, nodes: Sequence[NodeInfo]) -> None:
        self.cache = cache
        self._orders = [(node, _pod_order(node)) for node in nodes]
        self._removed: dict[str, PodInfo] = {}

    def __enter__(self) -> NodesDryRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore(list(self._removed.values()))
        for node, order in self._orders:
            _restore_pod_order(node, order)

    def remove(self, pods: Sequence[PodInfo]) -> None:
        self.cache.take_off_nodes(pods)
        self._removed.update((pod.uid, pod) for pod in pods)

    def restore(self, pods: Sequence[PodInfo]) -> None:
        self.cache.put_on_nodes(pods)
        for pod in pods:
            del self._removed[pod.uid]


_PodOrder = tuple[list[str], list[str], list[str]]


def _pod_order(node: NodeInfo) -> _PodOrder:
    return list(node.pods), list(node.pods_with_affinity), list(node.pods_with_required_anti_affinity)


def _restore_pod_order(node: NodeInfo, order: _PodOrder) -> None:
    """Give the node's pod dicts the order they had (a dry run's removals and re-adds move pods to the end)."""
    targets = (node.pods, node.pods_with_affinity, node.pods_with_required_anti_affinity)
    for target, uids in zip(targets, order, strict=True):
        if list(target) != uids:
            items = dict(target)
            target.clear()
            target.update((uid, items[uid]) for uid in uids if uid in items)
            target.update((uid, pod) for uid, pod in items.items() if uid not in target)
