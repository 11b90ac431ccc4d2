"""NodeName: a pod that names its node fits only there (upstream ``plugins/nodename``, §2.4).

Unassigned pods with ``spec.nodeName`` never reach the scheduler in practice, but the plugin is in the
default profile and preemption dry runs call it, so it answers as upstream: UUR everywhere else.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kopf_scheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    FilterPlugin,
    FilterResult,
    Status,
)
from kopf_scheduler.state.cache import Snapshot
from kopf_scheduler.state.pod_info import PodInfo

ERR_REASON = "node(s) didn't match the requested node name"


class NodeName(FilterPlugin):
    name: ClassVar[str] = "NodeName"

    _rejection = Status.unschedulable(ERR_REASON, plugin="NodeName", unresolvable=True)

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        if not pod.node_name:
            return None
        slot = snapshot.slot_of(pod.node_name)
        # Compare slots, not names: one vectorised comparison; an unknown name matches no node.
        rejected = np.ones(len(nodes), dtype=bool) if slot is None else nodes != slot
        if not rejected.any():
            return None
        return FilterResult.uniform(rejected, self._rejection)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        # Only a new node can carry the wanted name; no hint (always Queue).
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD))]
