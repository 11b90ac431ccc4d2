"""NodeUnschedulable: cordoned nodes take no new pods (upstream ``plugins/nodeunschedulable``, §2.3).

A node with ``spec.unschedulable: true`` fails with UUR unless the pod tolerates the taint
``node.kubernetes.io/unschedulable:NoSchedule`` (what DaemonSet pods carry). The verdict is one boolean
column of the node table, so the whole candidate set is judged with one index operation.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kopf_scheduler.framework import CycleState, FilterPlugin, FilterResult, Status
from kopf_scheduler.state.cache import Snapshot
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.tolerations import Taint, tolerates

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
#: Only for a node object that is missing, which the node table cannot hold; kept for completeness.
ERR_REASON_UNKNOWN_CONDITION = "node(s) had unknown conditions"

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
