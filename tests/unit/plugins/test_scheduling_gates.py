"""SchedulingGates (reference §2.2): gated pods are UUR at PreEnqueue with Go's slice formatting."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, Code, EventResource, QueueingHint
from kopf_scheduler.plugins.scheduling_gates import SchedulingGates
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, hint_for, make_pod, pod_info


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        pytest.param(["example.com/foo"], "waiting for scheduling gates: [example.com/foo]", id="one"),
        pytest.param(["a", "b"], "waiting for scheduling gates: [a b]", id="two-in-spec-order"),
        pytest.param(["z", "a", "m"], "waiting for scheduling gates: [z a m]", id="not-sorted"),
    ],
)
def test_gated_pod_is_unschedulable_and_unresolvable(gates: list[str], message: str) -> None:
    pod = pod_info(make_pod(spec={"schedulingGates": [{"name": g} for g in gates]}))
    status = SchedulingGates(handle=FakeHandle()).pre_enqueue(pod)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == (message,)
    assert status.plugin == "SchedulingGates"


@pytest.mark.parametrize("spec", [pytest.param({}, id="no-field"), pytest.param({"schedulingGates": []}, id="empty")])
def test_ungated_pod_passes(spec: dict[str, object]) -> None:
    assert SchedulingGates(handle=FakeHandle()).pre_enqueue(pod_info(make_pod(spec=spec))).is_success


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------
OWN_GATES = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent) -> QueueingHint:
    """Run the hint SchedulingGates registered for ``event`` (exactly one registration matches)."""
    return hint_for(SchedulingGates(handle=FakeHandle()), event)(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in SchedulingGates(handle=FakeHandle()).events_to_register()] == [
        ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
    ]


def test_scheduling_gates_hint() -> None:
    pod = pod_info(make_pod("g", uid="g"))
    assert hint(pod, pod, make_pod("g", uid="g"), event=OWN_GATES) is QUEUE
    assert hint(pod, pod, make_pod("o", uid="o"), event=OWN_GATES) is QUEUE_SKIP
