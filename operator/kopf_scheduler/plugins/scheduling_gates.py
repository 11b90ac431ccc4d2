"""SchedulingGates: keeps gated pods out of the active queue (upstream ``plugins/schedulinggates``, §2.2).

A pod with any ``spec.schedulingGates`` is parked as *gated* at PreEnqueue and never attempted, so the
scheduler posts no FailedScheduling for it. The message lists the gate names as Go prints a string slice.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    PreEnqueuePlugin,
    QueueingHint,
    Status,
    is_own_update,
)
from kopf_scheduler.state.pod_info import PodInfo

#: Upstream's text; the gate names follow as Go's ``%v`` of a ``[]string``: ``[a b]``.
WAITING_FOR_GATES = "waiting for scheduling gates: "


def gates_message(gates: tuple[str, ...]) -> str:
    return WAITING_FOR_GATES + "[" + " ".join(gates) + "]"


class SchedulingGates(PreEnqueuePlugin):
    name: ClassVar[str] = "SchedulingGates"

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.scheduling_gates:
            return SUCCESS
        return Status.unschedulable(gates_message(pod.scheduling_gates), plugin=self.name, unresolvable=True)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
                is_schedulable_after_gates_eliminated,
            )
        ]


def is_schedulable_after_gates_eliminated(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Only the pod's own update can lift its gates."""
    return QUEUE if is_own_update(pod, new) else QUEUE_SKIP
