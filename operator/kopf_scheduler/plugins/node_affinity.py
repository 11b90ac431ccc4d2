"""NodeAffinity: a pod's nodeSelector and node affinity, plus the profile's ``addedAffinity`` (§2.6).

Upstream ``plugins/nodeaffinity``, v1.36:

- PreFilter is skipped when the pod has no required node affinity and no nodeSelector and the profile adds
  no required affinity. When every required term names nodes with ``matchFields metadata.name In``, the
  union over terms (intersection within a term) becomes the PreFilterResult node set; an empty union
  rejects the pod outright (UUR ``pod affinity terms conflict``).
- Filter checks the scheduler-enforced ``addedAffinity`` selector first (its own UUR reason), then the pod's
  nodeSelector AND required terms (UUR ``node(s) didn't match Pod's node affinity/selector``). Parse errors
  in the pod's required terms only make that term match nothing, as upstream ("backwards compatibility").
- PreScore is skipped when neither the pod nor ``addedAffinity`` has preferred terms; a pod preferred term
  that does not parse is a scheduling error. Score sums the weights of the matching preferred terms (pod's
  and added), NormalizeScore scales by the maximum (not reversed).

Matching is done for all candidate nodes at once over the node table's label columns; parsing lives in
:mod:`kopf_scheduler.state.node_affinity`, shared with PodTopologySpread's ``nodeAffinityPolicy``.

QueueingHint: a node add or label change queues the pod when the node now matches the profile's
``addedAffinity`` and the pod's required affinity and did not before (one node, matched by the same
:mod:`~kopf_scheduler.state.node_affinity` rules). A malformed ``addedAffinity`` never gets here: the
plugin refuses to build.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kopf_scheduler.api.args import NodeAffinityArgs
from kopf_scheduler.framework import (
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
    node_pair,
    object_labels,
    object_name,
)
from kopf_scheduler.framework.normalize import default_normalize_score
from kopf_scheduler.state.node_affinity import (
    OBJECT_NAME_FIELD,
    NodeSelector,
    NodeSelectorParseError,
    PreferredSchedulingTerms,
    RequiredNodeAffinity,
    required_node_selector_raw,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from kopf_scheduler.state.cache import Snapshot
    from kopf_scheduler.state.pod_info import PodInfo

NAME = "NodeAffinity"
ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"

PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_MEMO_PREFERRED = NAME + "/preferred"
_MISSING = object()


def pod_preferred_terms(pod: PodInfo) -> PreferredSchedulingTerms | None:
    """The pod's parsed preferred terms (None when it has none); raises on a term that does not parse.

    An empty list counts as none: the API server's protobuf encoding does not tell ``[]`` from unset.
    """
    found: PreferredSchedulingTerms | NodeSelectorParseError | None
    if _MEMO_PREFERRED in pod.memo:
        found = pod.memo[_MEMO_PREFERRED]
    else:
        raw = (pod.affinity.get("nodeAffinity") or {}).get(_PREFERRED)
        try:
            found = PreferredSchedulingTerms.parse(raw) if raw else None
        except NodeSelectorParseError as exc:
            found = exc
        pod.memo[_MEMO_PREFERRED] = found
    if isinstance(found, NodeSelectorParseError):
        raise found
    return found


def node_name_restriction(required: Mapping[str, Any]) -> frozenset[str] | None:
    """The node names every required term pins with ``metadata.name In`` (None: some term does not pin)."""
    names: set[str] | None = None
    for term in required.get("nodeSelectorTerms") or ():
        term_names: set[str] | None = None
        for req in term.get("matchFields") or ():
            if req.get("key") == OBJECT_NAME_FIELD and req.get("operator") == "In":
                values = set(req.get("values") or ())
                # Requirements of one term are ANDed: intersect.
                term_names = values if term_names is None else term_names & values
        if term_names is None:
            # Terms are ORed, so one term that does not pin names leaves every node possible.
            return None
        names = term_names if names is None else names | term_names
    return None if names is None else frozenset(names)


class NodeAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    name: ClassVar[str] = NAME
    args_model: ClassVar[type[BaseModel] | None] = NodeAffinityArgs
    has_normalize: ClassVar[bool] = True

    _reject_pod = Status.unschedulable(ERR_REASON_POD, plugin=NAME, unresolvable=True)
    _reject_enforced = Status.unschedulable(ERR_REASON_ENFORCED, plugin=NAME, unresolvable=True)
    _reject_conflict = Status.unschedulable(ERR_REASON_CONFLICT, plugin=NAME, unresolvable=True)

    def __init__(self, *, handle: Handle, args: BaseModel | None = None) -> None:
        super().__init__(handle=handle, args=args)
        added = args.added_affinity if isinstance(args, NodeAffinityArgs) else None
        #: The profile's required selector, checked before the pod's own (upstream ``addedNodeSelector``).
        self.added_node_selector: NodeSelector | None = None
        #: The profile's preferred terms, scored for every pod (upstream ``addedPrefSchedTerms``).
        self.added_preferred_terms: PreferredSchedulingTerms | None = None
        if added is not None:
            # Upstream parses these strictly at construction: a bad term fails the profile, not a pod.
            required = added.get(_REQUIRED)
            if required is not None:
                try:
                    self.added_node_selector = NodeSelector.parse(required, strict=True)
                except NodeSelectorParseError as exc:
                    raise ValueError(f"parsing addedAffinity.{_REQUIRED}: {exc}") from exc
            preferred = added.get(_PREFERRED)
            if preferred:
                try:
                    self.added_preferred_terms = PreferredSchedulingTerms.parse(preferred)
                except NodeSelectorParseError as exc:
                    raise ValueError(f"parsing addedAffinity.{_PREFERRED}: {exc}") from exc

    # -- PreFilter / Filter ------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        required = required_node_selector_raw(pod)
        if required is None and self.added_node_selector is None and not pod.node_selector:
            return None, Status.skip(plugin=NAME)
        state.write(PRE_FILTER_STATE_KEY, RequiredNodeAffinity.from_pod(pod))
        if required is None or not required.get("nodeSelectorTerms"):
            return None, SUCCESS
        names = node_name_restriction(required)
        if names is None:
            return None, SUCCESS
        if not names:
            return None, self._reject_conflict
        return PreFilterResult(names), SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        table = snapshot.table
        affinity: RequiredNodeAffinity | None = state.get(PRE_FILTER_STATE_KEY)
        if affinity is None:  # PreFilter disabled in the profile: upstream computes it here
            affinity = RequiredNodeAffinity.from_pod(pod)
        matches = np.ones(len(nodes), dtype=bool) if affinity.matches_all else affinity.mask(table, nodes)
        if self.added_node_selector is None:
            if matches.all():
                return None
            return FilterResult.uniform(~matches, self._reject_pod)
        enforced = self.added_node_selector.mask(table, nodes)
        rejected = ~(enforced & matches)
        if not rejected.any():
            return None
        # The enforced selector is checked first, so its reason wins where both fail.
        status_index = np.where(enforced, 1, 0)
        return FilterResult(rejected, (self._reject_enforced, self._reject_pod), status_index)

    # -- PreScore / Score ----------------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        try:
            preferred = pod_preferred_terms(pod)
        except NodeSelectorParseError as exc:
            return Status.as_error(exc, plugin=NAME)
        if preferred is None and self.added_preferred_terms is None:
            return Status.skip(plugin=NAME)
        state.write(PRE_SCORE_STATE_KEY, preferred)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        table = snapshot.table
        total = np.zeros(len(nodes), dtype=np.int64)
        if self.added_preferred_terms is not None:
            total += self.added_preferred_terms.score(table, nodes)
        # Without PreScore (disabled in the profile) the pod's terms are parsed here, as upstream falls back.
        preferred = state.get(PRE_SCORE_STATE_KEY, _MISSING)
        if preferred is _MISSING:
            preferred = pod_preferred_terms(pod)
        if preferred is not None:
            total += preferred.score(table, nodes)
        return total

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        return default_normalize_score(scores, reverse=False)

    # -- EnqueueExtensions --------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                self.is_schedulable_after_node_change,
            )
        ]

    def is_schedulable_after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """The node now matches the pod's required affinity (and the profile's addedAffinity) and did not."""
        original, modified = node_pair(old, new)
        labels, name = object_labels(modified), object_name(modified)
        if self.added_node_selector is not None and not self.added_node_selector.matches(labels, name):
            return QUEUE_SKIP
        affinity = RequiredNodeAffinity.from_pod(pod)
        if not affinity.matches(labels, name):
            return QUEUE_SKIP
        if original is None:
            return QUEUE
        return QUEUE_SKIP if affinity.matches(object_labels(original), object_name(original)) else QUEUE
