"""The pod-group cycle (schedule_one_pod_group.py), restating upstream's schedule_one_podgroup_test.go cases (the
default algorithm, in the one placement of every node that TopologyAwareWorkloadScheduling's placement algorithm
tries without a PlacementGenerate plugin: test_pod_group_placement.py has its own cases; WorkloadAwarePreemption
on, as in every workload-aware profile: test_pod_group_preemption.py restates its cases), through SchedulerApp with
a fake client.

The profile enables ``Quorum``, a small workload-aware test plugin (not GangScheduling): its Permit waits until
``QUORUM`` members of the pod's group are assumed or bound, reading the cycle's snapshot of the group in a
pod-group cycle and the live state otherwise, then lets the waiting members go; its Reserve keeps what it holds.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.framework import CycleState, PermitPlugin, ReservePlugin, Status
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.status import SUCCESS, Code
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.queue import QueuedPodInfo
from kopf_scheduler.schedule_one_pod_group import POD_GROUP_KIND, set_status_condition
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.app_harness import FakeClient, FakeClock, drive, new_app, pending
from tests.unit.factories import make_node


def one_cycle(app: SchedulerApp, profile: str = "sp") -> None:
    """One pod-group cycle for the first poppable pod, then the binds and reports. (``drive`` pops until the queue
    is empty: a group that keeps failing comes back through backoff, which pops while nothing else is active.)"""

    async def go() -> None:
        runtime = app.profiles[profile]
        qpod = runtime.queue.pop_nowait()
        assert qpod is not None
        app.cycles.schedule_one(runtime, qpod)
        await app.drain()

    asyncio.run(go())


#: A waiting member's text when its group is unschedulable: the group's error, then the waiting plugin's reason and
#: the reason upstream's RunPermitPlugins appends (v1.36.3: without the pod's name).
WAITING = (
    "pod group is unschedulable, waiting for the quorum, one or more plugins asked to wait and no plugin rejected pod"
)
QUORUM_SPEC: dict[str, Any] = {"plugins": {"multiPoint": {"enabled": [{"name": "Quorum"}]}}}


class Quorum(ReservePlugin, PermitPlugin):
    """A gang of ``QUORUM`` members, in small (upstream GangScheduling's Permit); counts what it reserves."""

    name: ClassVar[str] = "Quorum"
    workload_aware: ClassVar[bool] = True
    QUORUM: ClassVar[int] = 3
    #: Pod name → reserved now (uids reserved minus unreserved), across every instance.
    held: ClassVar[dict[str, int]] = {}
    #: Pods whose Permit fails with an error.
    failing: ClassVar[set[str]] = set()

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self.held[pod.name] = self.held.get(pod.name, 0) + 1
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self.held[pod.name] -= 1

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        if pod.name in self.failing:
            raise RuntimeError("boom")
        key = pod.scheduling_group_key
        if key is None:
            return SUCCESS, 0.0
        snapshot = self.handle.snapshot()
        groups = snapshot.pod_group_states if state.pod_group_cycle else snapshot.cache.pod_groups
        group = groups.get(*key)
        if group.scheduled_pods_count() < self.QUORUM:
            return Status(Code.WAIT, ("waiting for the quorum",)), 30.0
        for uid in group.assumed_pod_uids():
            self.handle.allow_waiting_pod(uid, self.name)
        return SUCCESS, 0.0


@pytest.fixture(autouse=True)
def _reset_quorum() -> None:
    Quorum.held.clear()
    Quorum.failing.clear()


def member(name: str, *, group: str = "pg", priority: int = 0, **kwargs: Any) -> dict[str, Any]:
    pod = pending(name, **kwargs)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    pod["spec"]["priority"] = priority
    return pod


def pod_group(name: str = "pg", *, generation: int = 3, conditions: list[Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "generation": generation},
        "spec": {"schedulingPolicy": {"gang": {"minCount": Quorum.QUORUM}}},
        "status": {"conditions": conditions or []},
    }


def add_member(app: SchedulerApp, pod: dict[str, Any]) -> None:
    """The pod's ADDED event, and it joins its group's state as a pending member (the event handlers' part
    where they wire it; added here only if they did not)."""
    app.on_pod_event("ADDED", pod)
    info = PodInfo.from_obj(pod)
    key = info.scheduling_group_key
    if key is None:
        return
    if key not in set(app.cache.pod_groups) or info.uid not in app.cache.pod_groups.get(*key).all_pod_uids():
        app.cache.add_pod_group_member(info)


def new_group_app(client: FakeClient, *, cpu: str = "8", spec: dict[str, Any] | None = None) -> SchedulerApp:
    app = new_app(client, FakeClock(), registry=default_registry().merged(Registry([Quorum])))
    app.on_node_event(None, make_node("n1", cpu=cpu))
    assert app.apply_profile(name="sp", spec=QUORUM_SPEC if spec is None else spec, generation=1).ready
    app.cache.objects.apply(POD_GROUP_KIND, "ADDED", pod_group())
    return app


def failed_scheduling(client: FakeClient) -> dict[str, str]:
    return {e["regarding"]["name"]: e["note"] for e in client.events if e["reason"] == "FailedScheduling"}


def attempts(app: SchedulerApp, result: str) -> float | None:
    return app.metrics.registry.get_sample_value(
        "scheduler_podgroup_schedule_attempts_total", {"result": result, "profile": "sp"}
    )


def test_all_members_fit_and_are_bound() -> None:
    """Upstream "All pods feasible": one cycle places the whole group, each member's binding cycle binds it
    once the gang's quorum is assumed for real; the PodGroup becomes PodGroupScheduled=True."""
    client = FakeClient()
    app = new_group_app(client)
    for name in ("p1", "p2", "p3"):
        add_member(app, member(name, requests={"cpu": "1"}))
    drive(app)
    assert sorted(client.bindings) == [("default", n, "n1") for n in ("p1", "p2", "p3")]
    assert [e["reason"] for e in client.events] == ["Scheduled"] * 3
    assert app.cache.table.requested.sum() > 0  # assumed until their watch events confirm them
    assert app.profiles["sp"].framework.waiting_pods == {}
    [(namespace, name, patch)] = client.pod_group_patches
    assert (namespace, name) == ("default", "pg")
    [condition] = patch["status"]["conditions"]
    assert {k: v for k, v in condition.items() if k != "lastTransitionTime"} == {
        "type": "PodGroupScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "",
        "observedGeneration": 3,
    }
    assert attempts(app, "scheduled") == 1
    assert Quorum.held == {"p1": 1, "p2": 1, "p3": 1}  # the trial's reservations went, the real ones stay


def test_one_member_does_not_fit_so_none_is_bound_and_everything_is_released() -> None:
    """Upstream "All pods feasible, but all waiting" / "One pod unschedulable": the quorum is never met, so the
    group is Unschedulable; nothing stays assumed or reserved, and every member is requeued with upstream's
    message."""
    client = FakeClient()
    app = new_group_app(client, cpu="2")
    add_member(app, member("p1", requests={"cpu": "1"}))
    add_member(app, member("p2", requests={"cpu": "1"}))
    add_member(app, member("p3", requests={"cpu": "4"}))
    one_cycle(app)
    assert client.bindings == []
    notes = failed_scheduling(client)
    assert notes["p1"] == WAITING
    assert notes["p2"] == WAITING
    # A member of a PodGroup does not preempt on its own in a workload-aware profile (WorkloadAwarePreemption).
    assert notes["p3"] == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "no new claims to deallocate, preemption: not eligible due to workload aware preemption enabled"
    )
    # Released: no node accounting, no assumed pod, no reservation, nothing parked at Permit, all unscheduled.
    assert app.cache.table.requested.sum() == 0
    assert not any(app.cache.is_assumed(uid) for uid in app.unassigned)
    assert all(count == 0 for count in Quorum.held.values())
    assert app.profiles["sp"].framework.waiting_pods == {}
    group = app.cache.pod_groups.get("default", "pg")
    assert (len(group.unscheduled), group.scheduled_pods_count()) == (3, 0)
    assert len(app.profiles["sp"].queue) == 3  # all requeued
    [(_, _, patch)] = client.pod_group_patches
    [condition] = patch["status"]["conditions"]
    # The group was tried in one placement of every node (no PlacementGenerate plugin), and its own preemption found
    # nothing of lower priority: its answer joins the group's message.
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        "0/1 placements are available, first placement status: pod group is unschedulable, "
        "No preemption victims found for incoming preemptor",
    )
    assert attempts(app, "unschedulable") == 1
    scheduler_attempts = app.metrics.registry.get_sample_value(
        "scheduler_schedule_attempts_total", {"result": "unschedulable", "profile": "sp"}
    )
    assert scheduler_attempts == 3


def test_an_error_of_one_member_fails_the_group_with_upstreams_messages() -> None:
    """Upstream "Any permit returned Error": the algorithm stops at the error; the failing member gets its own
    error, the others the group's, and the PodGroup a SchedulerError condition."""
    client = FakeClient()
    app = new_group_app(client)
    Quorum.failing.add("p2")
    for name in ("p1", "p2", "p3"):
        add_member(app, member(name, requests={"cpu": "1"}))
    drive(app)
    assert client.bindings == []
    own = 'running Permit plugin "Quorum": boom'
    group = f"failed to schedule other pod from a pod group: {own}"
    assert failed_scheduling(client) == {"p1": group, "p2": own, "p3": group}
    assert all(count == 0 for count in Quorum.held.values())
    [(_, _, patch)] = client.pod_group_patches
    [condition] = patch["status"]["conditions"]
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "SchedulerError", group)
    assert attempts(app, "error") == 1
    assert app.profiles["sp"].queue.pending_pods()["backoff"] == 3


def test_members_are_popped_together_highest_priority_then_earliest_attempt() -> None:
    """Upstream TestPodGroupInfoForPod: the popped pod plus every unscheduled member the queue holds (taken from
    unschedulablePods or backoffQ too), in flight, by priority then initial attempt; others are skipped."""
    clock = FakeClock()
    app = new_app(FakeClient(), clock, registry=default_registry().merged(Registry([Quorum])))
    app.apply_profile(name="sp", spec=QUORUM_SPEC, generation=1)
    runtime = app.profiles["sp"]
    add_member(app, member("low", priority=0))
    popped = runtime.queue.pop_nowait()
    assert popped is not None
    clock.now += 1
    add_member(app, member("mid-early", priority=5))
    clock.now += 1
    add_member(app, member("mid-late", priority=5))
    add_member(app, member("high", priority=10))
    parked = runtime.queue.pop_nowait()  # "high": failed once, it waits in unschedulablePods
    assert parked is not None
    parked.unschedulable_plugins.add("Quorum")
    runtime.queue.add_unschedulable_if_not_present(parked)
    other = member("other-group", group="other")
    add_member(app, other)
    group = app.pod_group_cycles.pod_group_info_for_pod(runtime, popped)
    assert [p.name for p in group.unscheduled_pods] == ["high", "mid-early", "mid-late", "low"]
    assert (group.namespace, group.name) == ("default", "pg")
    assert all(runtime.queue.location(q.uid) == "in-flight" for q in group.queued_pod_infos)
    assert runtime.queue.location(other["metadata"]["uid"]) == "active"
    assert [q.attempts for q in group.queued_pod_infos] == [2, 1, 1, 1]


def test_a_pod_group_state_error_goes_to_the_failure_handler() -> None:
    """Upstream ScheduleOne: podGroupInfoForPod fails (no state for the group) → SchedulerError, requeued."""
    client = FakeClient()
    app = new_group_app(client)
    pod = member("p1")
    app.on_pod_event("ADDED", pod)
    info = PodInfo.from_obj(pod)
    if set(app.cache.pod_groups):  # the event handlers wired it: take it out again
        app.cache.remove_pod_group_member(info)
    drive(app)
    assert client.bindings == []
    note = "error while retrieving pod group state: pod group state not found for pod group default/pg"
    assert failed_scheduling(client) == {"p1": note}
    assert app.profiles["sp"].queue.pending_pods()["backoff"] == 1
    assert client.pod_group_patches == []


def test_deleted_members_are_skipped() -> None:
    """Upstream TestSkipPodGroupPodSchedule: a member deleted meanwhile leaves the group's cycle."""
    client = FakeClient()
    app = new_group_app(client)
    Quorum.QUORUM = 2
    try:
        pods = [member(name, requests={"cpu": "1"}) for name in ("p1", "p2", "p3")]
        for pod in pods:
            add_member(app, pod)
        terminating = {**pods[2], "metadata": {**pods[2]["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
        app.on_pod_event("MODIFIED", terminating)
        drive(app)
    finally:
        Quorum.QUORUM = 3
    assert sorted(client.bindings) == [("default", "p1", "n1"), ("default", "p2", "n1")]


def _route(app: SchedulerApp) -> list[str]:
    """The pods ScheduleOne sends to the pod-group cycle (recorded instead of run)."""
    sent: list[str] = []

    def record(runtime: Any, qpod: QueuedPodInfo) -> None:
        sent.append(qpod.pod.name)
        runtime.queue.done(qpod.uid)

    app.cycles.pod_group_cycle = record
    return sent


def test_a_plain_pod_and_a_pod_of_a_profile_not_workload_aware_take_the_per_pod_path() -> None:
    client = FakeClient()
    app = new_group_app(client)
    assert app.apply_profile(name="plain", spec={}, generation=1).ready
    sent = _route(app)
    add_member(app, pending("single", requests={"cpu": "1"}))
    add_member(app, member("not-aware", scheduler="plain", requests={"cpu": "1"}))
    add_member(app, member("grouped", requests={"cpu": "1"}))
    drive(app)
    drive(app, "plain")
    assert sent == ["grouped"]
    assert sorted(client.bindings) == [("default", "not-aware", "n1"), ("default", "single", "n1")]
    assert attempts(app, "scheduled") is None


@pytest.mark.parametrize(
    ("existing", "new", "expected"),
    [
        # A new condition gets its transition time.
        (None, {"status": "True", "reason": "Scheduled", "message": "", "observedGeneration": 1}, "now"),
        # The same status: the transition time stays, the reason and message follow.
        (
            {
                "status": "False",
                "reason": "Unschedulable",
                "message": "a",
                "observedGeneration": 1,
                "lastTransitionTime": "t0",
            },
            {"status": "False", "reason": "SchedulerError", "message": "b", "observedGeneration": 1},
            "t0",
        ),
        # A new status moves it.
        (
            {
                "status": "False",
                "reason": "Unschedulable",
                "message": "a",
                "observedGeneration": 1,
                "lastTransitionTime": "t0",
            },
            {"status": "True", "reason": "Scheduled", "message": "", "observedGeneration": 2},
            "now",
        ),
        # Nothing changes: no patch.
        (
            {
                "status": "True",
                "reason": "Scheduled",
                "message": "",
                "observedGeneration": 2,
                "lastTransitionTime": "t0",
            },
            {"status": "True", "reason": "Scheduled", "message": "", "observedGeneration": 2},
            None,
        ),
    ],
)
def test_set_status_condition(existing: dict[str, Any] | None, new: dict[str, Any], expected: str | None) -> None:
    """Upstream apimeta.SetStatusCondition, as TestUpdatePodGroupCondition's transitions use it."""
    typed = {"type": "PodGroupScheduled", **new}
    old = None if existing is None else {"type": "PodGroupScheduled", **existing}
    changed = set_status_condition(old, typed, "now")
    if expected is None:
        assert changed is None
        return
    assert changed == {**typed, "lastTransitionTime": expected}


def test_a_scheduled_pod_group_does_not_regress_and_a_missing_one_is_not_patched() -> None:
    """Upstream "do not regress Scheduled to Unschedulable" and "PodGroup not found does not panic"."""
    client = FakeClient()
    app = new_group_app(client, cpu="1")
    scheduled = {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled", "message": ""}
    app.cache.objects.apply(POD_GROUP_KIND, "MODIFIED", pod_group(conditions=[scheduled]))
    for name in ("p1", "p2", "p3"):
        add_member(app, member(name, requests={"cpu": "1"}))
    one_cycle(app)
    assert client.bindings == []
    assert client.pod_group_patches == []
    assert attempts(app, "unschedulable") == 1
    app.cache.objects.apply(POD_GROUP_KIND, "DELETED", pod_group())
    app.profiles["sp"].queue.activate(list(app.unassigned))
    one_cycle(app)
    assert client.pod_group_patches == []


def test_the_binding_cycles_wait_for_the_quorum_assumed_for_real() -> None:
    """After the group's cycle, the members wait at the gang's Permit in the cache's live state until the last
    one is assumed (upstream: prepareForBindingCycle with the pod-group mark off)."""
    client = FakeClient()
    app = new_group_app(client)
    for name in ("p1", "p2", "p3"):
        add_member(app, member(name, requests={"cpu": "1"}))

    async def go() -> None:
        runtime = app.profiles["sp"]
        qpod = runtime.queue.pop_nowait()
        assert qpod is not None
        assert app.cycles.schedule_one(runtime, qpod) is None
        group = app.cache.pod_groups.get("default", "pg")
        assert group.scheduled_pods_count() == 3
        await app.drain()

    asyncio.run(go())
    assert len(client.bindings) == 3


def test_a_cycle_right_after_a_scheduled_one_does_not_regress_the_condition_before_the_watch_shows_it() -> None:
    """Upstream patches the condition synchronously, so the next cycle's check reads its own True; ours patches
    asynchronously, so until the watch shows the True the cycle goes by what it wrote (found by the gang timelines:
    a basic group of two, one member placed, the other alone in the next cycle, ended Unschedulable)."""
    client = FakeClient()
    app = new_group_app(client, cpu="3")
    for name in ("p1", "p2", "p3"):
        add_member(app, member(name, requests={"cpu": "1"}))
    drive(app)
    [(_ns, _name, patch)] = client.pod_group_patches
    [scheduled] = patch["status"]["conditions"]
    assert scheduled["status"] == "True"
    add_member(app, member("p4", requests={"cpu": "4"}))  # the cache's PodGroup still shows no condition
    one_cycle(app)
    assert attempts(app, "unschedulable") == 1
    assert len(client.pod_group_patches) == 1  # no regression to False
    app.cache.objects.apply(POD_GROUP_KIND, "MODIFIED", pod_group(conditions=[scheduled]))  # the watch catches up
    app.profiles["sp"].queue.activate(list(app.unassigned))
    one_cycle(app)
    assert len(client.pod_group_patches) == 1
    # A PodGroup created anew (another uid) is judged by what the API server shows of it, not by the old write.
    fresh = pod_group()
    fresh["metadata"]["uid"] = "another"
    app.cache.objects.apply(POD_GROUP_KIND, "MODIFIED", fresh)
    app.profiles["sp"].queue.activate(list(app.unassigned))
    one_cycle(app)
    [*_, (_ns, _name, last)] = client.pod_group_patches
    assert [c["status"] for c in last["status"]["conditions"]] == ["False"]
