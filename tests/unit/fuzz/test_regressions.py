"""Failures the property-based tests found, kept as plain unit tests (each names the property that found it).

Each one failed before its fix in the product; the generated example is written out as a manifest-like
sequence so that it reads as the scenario it is.
"""

from __future__ import annotations

from kopf_scheduler.framework.events import ActionType, ClusterEvent, EventResource
from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.queue import GATED, SchedulingQueue
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import make_pod
from tests.unit.test_queue import FakeClock, priority_sort


def _gates(pod: PodInfo) -> Status:
    if pod.scheduling_gates:
        return Status.unschedulable("gated", plugin="SchedulingGates", unresolvable=True)
    return SUCCESS


def test_a_profile_change_that_adds_a_pre_enqueue_plugin_gates_pods_already_queued() -> None:
    """test_queue_ops: a profile without SchedulingGates queued a pod with gates in activeQ; the profile then
    enabled SchedulingGates, and the pod was still popped (and would have been bound) while gated. kube-scheduler
    restarts on a configuration change, and every pod re-enters its queue through PreEnqueue."""
    queue = SchedulingQueue(less=priority_sort, pre_enqueue=lambda pod: SUCCESS, clock=FakeClock())
    gated = PodInfo.from_obj(make_pod("gated", spec={"schedulingGates": [{"name": "example.com/g"}]}))
    backing_off = PodInfo.from_obj(make_pod("backing-off", spec={"schedulingGates": [{"name": "example.com/g"}]}))
    queue.add(gated)
    queue.add(backing_off)
    qpod = queue.pop_specific_pod(backing_off.uid)
    assert qpod is not None
    qpod.unschedulable_plugins.add("NodeResourcesFit")
    queue.add_unschedulable_if_not_present(qpod)  # to backoffQ: it is backing off
    queue.move_all_to_active_or_backoff(ClusterEvent(EventResource.WILDCARD, ActionType.ALL, "Any"))
    assert queue.location(backing_off.uid) == "backoff"
    assert queue.location(gated.uid) == "active"
    queue.reconfigure(pre_enqueue=_gates, plugin_events=None)
    assert queue.location(gated.uid) == GATED
    assert queue.location(backing_off.uid) == GATED
    assert queue.pop_nowait() is None
