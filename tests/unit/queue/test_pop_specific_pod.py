"""SchedulingQueue.pop_specific_pod (upstream ``PopSpecificPod``): the pod-group cycle takes a group's members out of
the queue as pop takes the head: activated first (PreEnqueue deciding), then in flight with one more attempt."""

from __future__ import annotations

from tests.unit.test_queue import fail, new_queue, pod, pop


def test_a_pod_in_active_q_is_taken_out_and_in_flight() -> None:
    queue, _ = new_queue()
    a, b = pod("a"), pod("b")
    queue.add(a)
    queue.add(b)
    qpod = queue.pop_specific_pod(b.uid)
    assert qpod is not None
    assert (qpod.uid, qpod.attempts) == (b.uid, 1)
    assert queue.location(b.uid) == "in-flight"
    assert pop(queue).uid == a.uid  # the other one is untouched
    assert queue.pop_nowait() is None


def test_a_pod_in_unschedulable_pods_or_backoff_q_is_activated_first() -> None:
    queue, _ = new_queue()
    parked, backing_off = pod("parked"), pod("backing-off")
    queue.add(parked)
    fail(queue, pop(queue, parked), "NodeResourcesFit")
    queue.add(backing_off)
    fail(queue, pop(queue, backing_off))  # an error: the error backoff
    assert {queue.location(parked.uid), queue.location(backing_off.uid)} == {"unschedulable", "backoff"}
    for p in (parked, backing_off):
        qpod = queue.pop_specific_pod(p.uid)
        assert qpod is not None
        assert qpod.attempts == 2
        assert queue.location(p.uid) == "in-flight"
    assert len(queue) == 0


def test_a_gated_in_flight_or_unknown_pod_is_not_popped() -> None:
    queue, _ = new_queue()
    gated, flying = pod("gated", gates=["wait"]), pod("flying")
    queue.add(gated)
    queue.add(flying)
    assert pop(queue).uid == flying.uid
    assert queue.pop_specific_pod(gated.uid) is None
    assert queue.location(gated.uid) == "gated"
    assert queue.pop_specific_pod(flying.uid) is None
    assert queue.pop_specific_pod("nobody") is None


def test_a_failed_member_of_a_pod_group_goes_through_backoff_in_a_workload_aware_profile() -> None:
    """Upstream ``determineSchedulingHintForInFlightPod``: a scheduling-group pod is retried after backoff, not
    parked for events; a pod without a group, or any pod of a profile that schedules no groups, is parked."""
    member = pod("m", spec={"schedulingGroup": {"podGroupName": "pg"}})
    for pod_groups, expected in ((True, "backoff"), (False, "unschedulable")):
        queue, _ = new_queue(pod_groups=pod_groups)
        queue.add(member)
        fail(queue, pop(queue, member), "NodeResourcesFit")
        assert queue.location(member.uid) == expected
    queue, _ = new_queue(pod_groups=True)
    plain = pod("p")
    queue.add(plain)
    fail(queue, pop(queue, plain), "NodeResourcesFit")
    assert queue.location(plain.uid) == "unschedulable"
