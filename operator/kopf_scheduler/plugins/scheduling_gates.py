"""SchedulingGates: keeps gated pods out of the active queue (upstream ``plugins/schedulinggates``, §2.2).

A pod with any ``spec.schedulingGates`` is parked as *gated* at PreEnqueue and never attempted, so the
scheduler posts no FailedScheduling for it. The message lists the gate names as Go prints a string slice.
"""

from __future__ import annotations

from typing import ClassVar

from kopf_scheduler.framework import SUCCESS, PreEnqueuePlugin, Status
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
