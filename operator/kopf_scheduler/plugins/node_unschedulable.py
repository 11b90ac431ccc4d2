"""NodeUnschedulable: cordoned nodes take no new pods (upstream ``plugins/nodeunschedulable``, §2.3).

A node with ``spec.unschedulable: true`` fails with UUR unless the pod tolerates the taint
``node.kubernetes.io/unschedulable:NoSchedule`` (what DaemonSet pods carry). The verdict is one boolean
column of the node table, so the whole candidate set is judged with one index operation.

QueueingHints: a schedulable node appearing or a node being uncordoned; the pod's own new toleration of the
unschedulable taint.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    FilterPlugin,
    FilterResult,
    QueueingHint,
    Status,
    as_pod,
    node_pair,
)
from kopf_scheduler.state.cache import Snapshot
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.tolerations import Taint, tolerates

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"

TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
#: The taint a pod must tolerate to land on a cordoned node (empty value, as upstream builds it).
UNSCHEDULABLE_TAINT = Taint(TAINT_NODE_UNSCHEDULABLE, "", "NoSchedule")

_MEMO_KEY = "NodeUnschedulable/tolerates"


class NodeUnschedulable(FilterPlugin):
    name: ClassVar[str] = "NodeUnschedulable"

    _rejection = Status.unschedulable(ERR_REASON_UNSCHEDULABLE, plugin="NodeUnschedulable", unresolvable=True)

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        rejected = snapshot.table.unschedulable[nodes]
        if not rejected.any():
            return None
        tolerated = pod.memo.get(_MEMO_KEY)
        if tolerated is None:
            tolerated = pod.memo[_MEMO_KEY] = tolerates(pod.tolerations, UNSCHEDULABLE_TAINT)
        if tolerated:
            return None
        return FilterResult.uniform(rejected, self._rejection)

    # -- EnqueueExtensions --------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION),
                is_schedulable_after_pod_toleration_change,
            ),
        ]


def is_schedulable_after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A schedulable node appeared, or a node stopped being ``spec.unschedulable``."""
    original, modified = node_pair(old, new)
    now_unschedulable = bool((modified.get("spec") or {}).get("unschedulable"))
    if original is None:
        return QUEUE_SKIP if now_unschedulable else QUEUE
    was_unschedulable = bool((original.get("spec") or {}).get("unschedulable"))
    return QUEUE if was_unschedulable and not now_unschedulable else QUEUE_SKIP


def is_schedulable_after_pod_toleration_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The rejected pod now tolerates ``node.kubernetes.io/unschedulable:NoSchedule``."""
    modified = as_pod(new)
    if modified is None or modified.uid != pod.uid:
        return QUEUE_SKIP
    return QUEUE if tolerates(modified.tolerations, UNSCHEDULABLE_TAINT) else QUEUE_SKIP
