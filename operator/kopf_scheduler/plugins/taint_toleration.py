"""TaintToleration: keep pods off nodes whose taints they do not tolerate, and away from soft taints (§2.5).

Upstream ``plugins/tainttoleration``, v1.36:

- Filter: a node fails (UnschedulableAndUnresolvable) when one of its ``NoSchedule``/``NoExecute`` taints
  is tolerated by none of the pod's tolerations. Since 1.35 (and late 1.34 patches) the reason is the
  generic ``node(s) had untolerated taint(s)``; the taint itself is only logged upstream.
- PreScore keeps the tolerations whose effect is empty or ``PreferNoSchedule``; Score counts the node's
  ``PreferNoSchedule`` taints none of them tolerates; NormalizeScore is the default one, reversed, so the
  node with the most untolerated soft taints gets 0 and nodes with none get 100.

Nodes share few distinct taint lists, so tolerations are matched once per taint set of the node table and
the answer is spread onto nodes by indexing (:mod:`kopf_scheduler.state.taints`).

QueueingHints: a node add or taint change queues the pod only if the node went from having an untolerated
NoSchedule/NoExecute taint to having none; the pod's own new toleration always queues it. Toleration
comparison operators (``Gt``/``Lt``, alpha, off by default) are not supported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

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
    PreScorePlugin,
    QueueingHint,
    ScorePlugin,
    Status,
    is_own_update,
    node_pair,
)
from kopf_scheduler.framework.normalize import default_normalize_score
from kopf_scheduler.state.taints import (
    DO_NOT_SCHEDULE_EFFECTS,
    PREFER_NO_SCHEDULE,
    count_untolerated_taints,
    untolerated_taint_set_mask,
)
from kopf_scheduler.state.tolerations import first_untolerated, parse_taints

if TYPE_CHECKING:
    from kopf_scheduler.state.cache import Snapshot
    from kopf_scheduler.state.pod_info import PodInfo
    from kopf_scheduler.state.tolerations import Toleration

NAME = "TaintToleration"
#: Filter reason, v1.35+ (and 1.34 patch releases): the generic text, without the taint.
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"
#: CycleState key of the PreScore tolerations (upstream ``"PreScore" + Name``).
PRE_SCORE_STATE_KEY = "PreScore" + NAME


def prefer_no_schedule_tolerations(tolerations: tuple[Toleration, ...]) -> tuple[Toleration, ...]:
    """Upstream ``getAllTolerationPreferNoSchedule``: an empty effect means every effect, so it counts too."""
    return tuple(t for t in tolerations if not t.effect or t.effect == PREFER_NO_SCHEDULE)


class TaintToleration(FilterPlugin, PreScorePlugin, ScorePlugin):
    name: ClassVar[str] = NAME
    has_normalize: ClassVar[bool] = True

    _rejection = Status.unschedulable(ERR_REASON_UNTOLERATED, plugin=NAME, unresolvable=True)

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        table = snapshot.table
        if len(table.taint_sets) == 1:  # only the empty set was ever seen: no node has a taint
            return None
        rejected = untolerated_taint_set_mask(table, nodes, pod.tolerations)
        if not rejected.any():
            return None
        return FilterResult.uniform(rejected, self._rejection)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        state.write(PRE_SCORE_STATE_KEY, prefer_no_schedule_tolerations(pod.tolerations))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        # Upstream fails the cycle with an error when PreScore did not run; read() raises likewise.
        tolerations: tuple[Toleration, ...] = state.read(PRE_SCORE_STATE_KEY)
        return count_untolerated_taints(snapshot.table, nodes, tolerations, PREFER_NO_SCHEDULE)

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        return default_normalize_score(scores, reverse=True)

    # -- EnqueueExtensions --------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION), is_schedulable_after_pod_change
            ),
        ]


def _has_untolerated(node: Mapping[str, Any], pod: PodInfo) -> bool:
    taints = parse_taints((node.get("spec") or {}).get("taints"))
    return first_untolerated(taints, pod.tolerations, DO_NOT_SCHEDULE_EFFECTS) is not None


def is_schedulable_after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue only if the node went from having an untolerated NoSchedule/NoExecute taint to having none."""
    original, modified = node_pair(old, new)
    was_untolerated = True if original is None else _has_untolerated(original, pod)
    return QUEUE if was_untolerated and not _has_untolerated(modified, pod) else QUEUE_SKIP


def is_schedulable_after_pod_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The rejected pod gained a toleration."""
    return QUEUE if is_own_update(pod, new) else QUEUE_SKIP
