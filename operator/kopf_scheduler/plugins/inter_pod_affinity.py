"""InterPodAffinity: required pod (anti-)affinity as a Filter, preferred terms as a Score (reference §2.11).

Upstream (``plugins/interpodaffinity/{plugin.go,filtering.go,scoring.go}``, v1.36) works on *topology
pairs*: maps from (topologyKey, node label value) to a count. PreFilter builds three of them, Filter looks
each node's label values up in them; PreScore builds one weighted map, Score sums it per node.

Here a map is one int64 array per topology key, indexed by the interned value id of that key's node-label
column (:class:`NodeTable`). Building a map is a ``np.bincount`` over the node slots of the pods that
matched; reading it for all candidate nodes is one fancy-index per key. Which pods match is found through
the cache's per-namespace label index (the incoming pod's terms) or by walking only the pods that carry
affinity at all (the existing pods' terms), never by walking every pod of every node.

Filter, in upstream's order, first failure wins:

1. the incoming pod's required affinity: the node must carry every term's topology key, and each term's
   domain must hold a pod that matches *all* terms — unless no pod anywhere matches and the pod matches
   its own terms (the first pod of a series) → UUR ``node(s) didn't match pod affinity rules``;
2. the incoming pod's required anti-affinity: a matching pod in the node's domain of some term → U
   ``node(s) didn't match pod anti-affinity rules``;
3. existing pods' required anti-affinity matching the incoming pod in the node's domain → U
   ``node(s) didn't satisfy existing pods anti-affinity rules``.

QueueingHints: a bound pod that now satisfies the pod's affinity, or no longer blocks it through (its own
or the pod's) anti-affinity; a node gaining (affinity) or losing/changing (anti-affinity) a topology label
the pod's terms use. As upstream's hints, terms match a pod without its namespace's labels (a namespace
selector other than ``{}`` selects nothing there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kopf_scheduler.api.args import InterPodAffinityArgs
from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.events import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
    as_pod,
    is_assigned_or_nominated,
    node_pair,
    object_labels,
)
from kopf_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    FilterPlugin,
    FilterResult,
    Handle,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
)
from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.plugins.helper.affinity_terms import AffinityTerm, Labels, PodAffinityTerms, pod_affinity_terms
from kopf_scheduler.state.cache import ClusterCache, NodeInfo, Snapshot
from kopf_scheduler.state.node_table import NodeTable
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import LabelSelector

NAME = "InterPodAffinity"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME
MATCHED_SLOTS_KEY = "MatchedSlots" + NAME

ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"
ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"

_AFFINITY_STATUS = Status.unschedulable(ERR_REASON_AFFINITY_RULES_NOT_MATCH, plugin=NAME, unresolvable=True)
_ANTI_AFFINITY_STATUS = Status.unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH, plugin=NAME)
_EXISTING_ANTI_AFFINITY_STATUS = Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH, plugin=NAME)
_FILTER_STATUSES = (_AFFINITY_STATUS, _ANTI_AFFINITY_STATUS, _EXISTING_ANTI_AFFINITY_STATUS)

_EMPTY_SLOTS = np.zeros(0, dtype=np.int64)


# -- topology maps -------------------------------------------------------------------------------------
class TopologyCounts:
    """(topologyKey, value) → int, as one int64 array per key indexed by the key's label value id.

    Upstream deletes a pair whose count drops to zero, so "the map is empty" there means "every count is
    zero" here. Values are only ever node label values, so they are always interned in the node table.
    """

    __slots__ = ("by_key", "table")

    def __init__(self, table: NodeTable, by_key: dict[str, np.ndarray] | None = None) -> None:
        self.table = table
        self.by_key: dict[str, np.ndarray] = by_key if by_key is not None else {}

    def clone(self) -> TopologyCounts:
        return TopologyCounts(self.table, {key: array.copy() for key, array in self.by_key.items()})

    def _array(self, key: str, size: int) -> np.ndarray:
        array = self.by_key.get(key)
        if array is None:
            array = self.by_key[key] = np.zeros(size, dtype=np.int64)
        elif len(array) < size:
            # The column interned new values since this array was made (a node was added meanwhile).
            array = self.by_key[key] = np.concatenate([array, np.zeros(size - len(array), dtype=np.int64)])
        return array

    def add_slots(self, key: str, slots: np.ndarray, weights: np.ndarray | None = None) -> bool:
        """Add ``weights`` (1 each if None) at the ``key`` value of each node slot (slots may repeat);
        nodes without ``key`` add nothing. True if a node carried the key (upstream: "the map got an entry").
        """
        column = self.table.label_column(key)
        if column is None or len(slots) == 0:
            return False
        ids = column.ids[slots]
        keep = ids >= 0
        if not keep.any():
            return False
        size = len(column.values)
        array = self._array(key, size)
        if weights is None:
            array[:size] += np.bincount(ids[keep], minlength=size)
        else:
            # float64 sums of integers far below 2**53 are exact; bincount is much faster than np.add.at.
            summed = np.bincount(ids[keep], weights=weights[keep].astype(np.float64), minlength=size)
            array[:size] += np.rint(summed).astype(np.int64)
        return True

    def add_value(self, key: str, labels: Mapping[str, str], delta: int) -> None:
        """Add ``delta`` at (key, labels[key]) if the node carries ``key`` (AddPod/RemovePod)."""
        value = labels.get(key)
        column = self.table.label_column(key)
        if value is None or column is None:
            return
        value_id = column.value_ids.get(value)
        if value_id is None:
            return
        self._array(key, len(column.values))[value_id] += delta

    def is_empty(self) -> bool:
        return not any(array.any() for array in self.by_key.values())

    def at(self, key: str, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(node carries ``key``, the count of its value) for each of ``nodes``."""
        column = self.table.label_column(key)
        if column is None:
            return np.zeros(len(nodes), dtype=bool), np.zeros(len(nodes), dtype=np.int64)
        ids = column.ids[nodes]
        present = ids >= 0
        counts = np.zeros(len(nodes), dtype=np.int64)
        array = self.by_key.get(key)
        if array is not None:
            inside = present & (ids < len(array))
            counts[inside] = array[ids[inside]]
        return present, counts


@dataclass(slots=True)
class _PreFilterState:
    #: The incoming pod's terms, namespace selectors unrolled into namespaces.
    terms: PodAffinityTerms
    #: Labels of the incoming pod's namespace (what existing pods' namespace selectors are matched with).
    namespace_labels: Labels
    #: Existing pods whose required anti-affinity terms match the incoming pod.
    existing_anti_affinity: TopologyCounts
    #: Existing pods matching all required affinity terms of the incoming pod.
    affinity: TopologyCounts
    #: Existing pods matching a required anti-affinity term of the incoming pod.
    anti_affinity: TopologyCounts

    def clone(self) -> _PreFilterState:
        return _PreFilterState(
            self.terms,
            self.namespace_labels,
            self.existing_anti_affinity.clone(),
            self.affinity.clone(),
            self.anti_affinity.clone(),
        )


@dataclass(slots=True)
class _PreScoreState:
    topology_score: TopologyCounts

    def clone(self) -> _PreScoreState:
        # Score and NormalizeScore only read it (upstream shares it too).
        return self


# -- pod lookups ---------------------------------------------------------------------------------------
def _slots_of(cache: ClusterCache, pods: Iterable[PodInfo]) -> np.ndarray:
    """Node slots of ``pods``; pods bound to nodes the cache does not know are not in the snapshot."""
    slots = []
    for pod in pods:
        info = cache.node(pod.node_name)
        if info is not None:
            slots.append(info.slot)
    return np.asarray(slots, dtype=np.int64) if slots else _EMPTY_SLOTS


def _pods_matching(cache: ClusterCache, term: AffinityTerm) -> list[PodInfo]:
    """Assigned pods matching one of the incoming pod's (namespace-resolved) terms, via the label index."""
    namespaces = cache.pod_namespaces() if term.all_namespaces else term.namespaces
    found: list[PodInfo] = []
    for namespace in namespaces:
        found.extend(cache.matching_pods(namespace, term.selector))
    return found


def _slots_of_matching(cache: ClusterCache, term: AffinityTerm) -> np.ndarray:
    """Node slots of the assigned pods matching ``term``, one entry per pod.

    For named namespaces this reads the cache's per-selector count arrays (kept current by pod events, so a
    workload's 10 000 matching pods are not walked every cycle); terminating pods count, as upstream's do.
    "All namespaces" terms walk the label index instead (one tracked array per namespace would churn).
    """
    if term.all_namespaces:
        return _slots_of(cache, _pods_matching(cache, term))
    parts = []
    for namespace in term.namespaces:
        counts = cache.matching_pod_counts(namespace, term.selector, include_terminating=True)
        occupied = np.flatnonzero(counts)
        if occupied.size:
            parts.append(np.repeat(occupied, counts[occupied]))
    if not parts:
        return _EMPTY_SLOTS
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class _MatchedSlots:
    """Per cycle: node slots of the pods matching an incoming pod's term, by (namespaces, selector).

    Workloads repeat one selector across their terms (required affinity to their own app and preferred
    anti-affinity from it, say); the cache does not change within a cycle, so PreFilter and PreScore look
    each distinct selector up once.
    """

    __slots__ = ("_found", "cache")

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._found: dict[tuple[frozenset[str] | None, LabelSelector], np.ndarray] = {}

    @classmethod
    def of(cls, state: CycleState, cache: ClusterCache) -> _MatchedSlots:
        found = state.get(MATCHED_SLOTS_KEY)
        if not isinstance(found, cls) or found.cache is not cache:
            found = cls(cache)
            state.write(MATCHED_SLOTS_KEY, found)
        return found

    def clone(self) -> _MatchedSlots:
        return self  # read-only once computed; the cache it reflects is the cycle's

    def slots(self, term: AffinityTerm) -> np.ndarray:
        key = (None if term.all_namespaces else term.namespaces, term.selector)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = _slots_of_matching(self.cache, term)
        return found

    def slots_matching_all(self, terms: tuple[AffinityTerm, ...]) -> np.ndarray:
        """Slots of pods matching every term: upstream wants one pod that satisfies all required terms."""
        if len(terms) == 1:
            return self.slots(terms[0])
        first, rest = terms[0], terms[1:]
        pods = [pod for pod in _pods_matching(self.cache, first) if all(t.matches(pod, None) for t in rest)]
        return _slots_of(self.cache, pods)


def _matches_all(terms: tuple[AffinityTerm, ...], pod: PodInfo) -> bool:
    """Upstream ``podMatchesAllAffinityTerms``: false for no terms."""
    return bool(terms) and all(t.matches(pod, None) for t in terms)


# -- the plugin ----------------------------------------------------------------------------------------
class InterPodAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    name: ClassVar[str] = NAME
    args_model = InterPodAffinityArgs
    has_normalize: ClassVar[bool] = True

    def __init__(self, *, handle: Handle, args: InterPodAffinityArgs | None = None) -> None:
        super().__init__(handle=handle, args=args)
        self.plugin_args = args if args is not None else InterPodAffinityArgs()

    # -- PreFilter ---------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        cache, table = snapshot.cache, snapshot.table
        namespace_labels = cache.namespace_labels.get(pod.namespace) or {}
        terms = pod_affinity_terms(pod)
        if terms.has_required:
            terms = terms.with_namespaces_resolved(cache.namespace_labels)

        existing = self._existing_anti_affinity_counts(cache, table, pod, namespace_labels)
        matched = _MatchedSlots.of(state, cache)
        affinity = TopologyCounts(table)
        anti_affinity = TopologyCounts(table)
        if terms.required_affinity:
            slots = matched.slots_matching_all(terms.required_affinity)
            for term in terms.required_affinity:
                affinity.add_slots(term.topology_key, slots)
        for term in terms.required_anti_affinity:
            anti_affinity.add_slots(term.topology_key, matched.slots(term))

        if existing.is_empty() and not terms.has_required:
            return None, Status.skip(plugin=NAME)
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(terms, namespace_labels, existing, affinity, anti_affinity))
        return None, SUCCESS

    @staticmethod
    def _existing_anti_affinity_counts(
        cache: ClusterCache, table: NodeTable, pod: PodInfo, namespace_labels: Labels
    ) -> TopologyCounts:
        """Topology pairs of existing pods whose required anti-affinity terms match the incoming pod.

        Pods with identical affinity specs form one cache group: a group's terms are matched once and the
        group adds one count per member pod in each node's domain (exact counts keep RemovePod right).
        """
        counts = TopologyCounts(table)
        for group in cache.affinity_groups.values():
            if not group.has_required_anti_affinity:
                continue
            for term in pod_affinity_terms(group.sample).required_anti_affinity:
                if term.matches(pod, namespace_labels):
                    slots, members = group.slot_counts()
                    counts.add_slots(term.topology_key, slots, members)
        return counts

    def pre_filter_extensions(self) -> InterPodAffinity:
        return self

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        return self._update_with_pod(state, pod, pod_to_add, node, +1)

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        return self._update_with_pod(state, pod, pod_to_remove, node, -1)

    @staticmethod
    def _update_with_pod(state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo, delta: int) -> Status:
        """Upstream ``preFilterState.updateWithPod``: account ``other`` placed on (or taken off) ``node``."""
        try:
            s: _PreFilterState = state.read(PRE_FILTER_STATE_KEY)
        except KeyError as error:
            return Status.as_error(error, plugin=NAME)
        incoming = s.terms
        labels = node.labels
        for term in pod_affinity_terms(other).required_anti_affinity:
            if term.matches(pod, s.namespace_labels):
                s.existing_anti_affinity.add_value(term.topology_key, labels, delta)
        if _matches_all(incoming.required_affinity, other):
            for term in incoming.required_affinity:
                s.affinity.add_value(term.topology_key, labels, delta)
        for term in incoming.required_anti_affinity:
            if term.matches(other, None):
                s.anti_affinity.add_value(term.topology_key, labels, delta)
        return SUCCESS

    # -- Filter ------------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        s: _PreFilterState = state.read(PRE_FILTER_STATE_KEY)
        count = len(nodes)
        no = np.zeros(count, dtype=bool)

        affinity_failed = no
        required = s.terms.required_affinity
        if required:
            has_all_keys = np.ones(count, dtype=bool)
            pods_exist = np.ones(count, dtype=bool)
            for term in required:
                present, counts = s.affinity.at(term.topology_key, nodes)
                has_all_keys &= present
                pods_exist &= counts > 0
            # The first pod of a series with affinity to itself: nothing matches anywhere yet, and the pod
            # matches its own terms, so every node carrying all the keys is allowed.
            if not pods_exist.all() and s.affinity.is_empty() and _matches_all(required, pod):
                pods_exist = np.ones(count, dtype=bool)
            affinity_failed = ~has_all_keys | ~pods_exist

        anti_affinity_failed = no
        if not s.anti_affinity.is_empty():
            anti_affinity_failed = np.zeros(count, dtype=bool)
            for term in s.terms.required_anti_affinity:
                present, counts = s.anti_affinity.at(term.topology_key, nodes)
                anti_affinity_failed |= present & (counts > 0)

        existing_failed = no
        if not s.existing_anti_affinity.is_empty():
            existing_failed = np.zeros(count, dtype=bool)
            for key, array in s.existing_anti_affinity.by_key.items():
                if (array > 0).any():
                    present, counts = s.existing_anti_affinity.at(key, nodes)
                    existing_failed |= present & (counts > 0)

        rejected = affinity_failed | anti_affinity_failed | existing_failed
        if not rejected.any():
            return None
        index = np.where(affinity_failed, 0, np.where(anti_affinity_failed, 1, 2))
        return FilterResult(rejected, _FILTER_STATUSES, index)

    # -- PreScore / Score --------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        cache, table = snapshot.cache, snapshot.table
        terms = pod_affinity_terms(pod)
        has_constraints = terms.has_preferred
        # Existing pods' preferred terms may be ignored, but only when the incoming pod has none itself.
        if self.plugin_args.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return Status.skip(plugin=NAME)
        if has_constraints:
            terms = terms.with_namespaces_resolved(cache.namespace_labels)
        namespace_labels = cache.namespace_labels.get(pod.namespace) or {}

        scores = TopologyCounts(table)
        matched = _MatchedSlots.of(state, cache)
        contributed = False
        # The incoming pod's preferred terms against every existing pod (found through the label index).
        for weighted, sign in (
            *((w, 1) for w in terms.preferred_affinity),
            *((w, -1) for w in terms.preferred_anti_affinity),
        ):
            slots = matched.slots(weighted.term)
            weights = np.full(len(slots), sign * weighted.weight, dtype=np.int64)
            contributed |= scores.add_slots(weighted.term.topology_key, slots, weights)

        # Existing pods' terms against the incoming pod: only pods with affinity can have any. Pods with
        # identical specs form one cache group, matched once, weighted by its member pods per node.
        hard_weight = self.plugin_args.hard_pod_affinity_weight
        for group in cache.affinity_groups.values():
            other_terms = pod_affinity_terms(group.sample)
            contributions: list[tuple[AffinityTerm, int]] = []
            if hard_weight > 0:
                contributions.extend((t, hard_weight) for t in other_terms.required_affinity)
            contributions.extend((w.term, w.weight) for w in other_terms.preferred_affinity)
            contributions.extend((w.term, -w.weight) for w in other_terms.preferred_anti_affinity)
            for term, weight in contributions:
                if term.matches(pod, namespace_labels):
                    slots, members = group.slot_counts()
                    contributed |= scores.add_slots(term.topology_key, slots, members * weight)

        # Upstream skips Score when no node contributed anything (even a pair that sums to zero counts).
        if not contributed:
            return Status.skip(plugin=NAME)
        state.write(PRE_SCORE_STATE_KEY, _PreScoreState(scores))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        s: _PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        total = np.zeros(len(nodes), dtype=np.int64)
        for key in s.topology_score.by_key:
            _, values = s.topology_score.at(key, nodes)
            total += values
        return total

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Min-max scaling to [0, 100] in float64, truncated: ``int(100 * ((s - min) / (max - min)))``."""
        s: _PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        scores = np.asarray(scores, dtype=np.int64)
        if not s.topology_score.by_key or len(scores) == 0:
            return scores
        low, high = int(scores.min()), int(scores.max())
        spread = high - low
        if spread <= 0:
            return np.zeros_like(scores)
        scaled = float(MAX_NODE_SCORE) * ((scores - low).astype(np.float64) / float(spread))
        return scaled.astype(np.int64)

    # -- EnqueueExtensions --------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE),
                is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                is_schedulable_after_node_change,
            ),
        ]


def is_schedulable_after_pod_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A bound pod now satisfies the pod's affinity, or no longer blocks it through anti-affinity."""
    original, modified = as_pod(old), as_pod(new)
    if modified is not None and original is not None and modified.uid == pod.uid:
        return QUEUE  # the pod's own labels changed: its existing anti-affinity peers may stop matching
    if (modified is not None and not is_assigned_or_nominated(modified)) or (
        original is not None and not is_assigned_or_nominated(original)
    ):
        return QUEUE_SKIP
    terms = pod_affinity_terms(pod)
    if modified is not None and original is not None:
        if not _matches_all(terms.required_affinity, original) and _matches_all(terms.required_affinity, modified):
            return QUEUE
        if _matches_all(terms.required_anti_affinity, original) and not _matches_all(
            terms.required_anti_affinity, modified
        ):
            return QUEUE
        return QUEUE_SKIP
    if modified is not None:
        return QUEUE if _matches_all(terms.required_affinity, modified) else QUEUE_SKIP
    assert original is not None
    if _matches_all(terms.required_anti_affinity, original):
        return QUEUE
    # The deleted pod's own anti-affinity may have kept the pod away.
    return QUEUE if _matches_all(pod_affinity_terms(original).required_anti_affinity, pod) else QUEUE_SKIP


def _topology_value_changed(key: str, before: Mapping[str, str], after: Mapping[str, str]) -> bool:
    return key in before and key in after and before[key] != after[key]


def is_schedulable_after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A node gained (affinity) or lost/changed (anti-affinity) a topology label the pod's terms use."""
    original, modified = node_pair(old, new)
    modified_labels = object_labels(modified)
    original_labels = object_labels(original) if original is not None else {}
    terms = pod_affinity_terms(pod)
    for term in terms.required_affinity:
        key = term.topology_key
        if original is None:
            if key in modified_labels:
                return QUEUE
            continue
        gained = key not in original_labels and key in modified_labels
        if gained or _topology_value_changed(key, original_labels, modified_labels):
            return QUEUE
    for term in terms.required_anti_affinity:
        key = term.topology_key
        if original is None:
            return QUEUE
        lost = key in original_labels and key not in modified_labels
        if lost or _topology_value_changed(key, original_labels, modified_labels):
            return QUEUE
    return QUEUE_SKIP
