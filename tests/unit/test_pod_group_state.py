"""The pod-group state (upstream ``backend/cache/podgroupstate_test.go`` and the snapshot cases of
``cache_test.go``): transitions between unscheduled, assumed and assigned, counts, copies, and the snapshot
that re-copies only the groups whose generation moved."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from kopf_scheduler.state.pod_group_state import (
    PodGroupSnapshot,
    PodGroupState,
    PodGroupStateNotFound,
    PodGroupStates,
    next_pod_group_generation,
)
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import make_pod, pod_info


def member(name: str, *, group: str = "pg", namespace: str = "ns1", node: str = "") -> PodInfo:
    spec = {"schedulingGroup": {"podGroupName": group}}
    return pod_info(make_pod(name, namespace=namespace, uid=name, node_name=node, spec=spec))


def on_node(pod: PodInfo, node: str) -> PodInfo:
    """The scheduler's assumed copy of ``pod`` (upstream tests: a deep copy with NodeName set)."""
    return dataclasses.replace(pod, node_name=node)


def test_assume_then_forget() -> None:
    pgs = PodGroupState()
    pod = member("p1")
    pgs.add_pod(pod)
    assert pgs.assumed_pod_uids() == frozenset()
    assert "p1" in pgs.unscheduled
    pgs.assume_pod(pod)
    assert pgs.assumed_pod_uids() == {"p1"}
    assert "p1" not in pgs.unscheduled
    pgs.forget_pod(pod.uid)
    assert pgs.assumed_pod_uids() == frozenset()
    assert "p1" in pgs.unscheduled


def test_a_snapshot_is_a_copy_that_neither_side_changes() -> None:
    pgs = PodGroupState()
    pod1, pod2 = member("p1"), member("p2")
    pgs.add_pod(pod1)
    pgs.add_pod(pod2)
    pgs.assume_pod(pod2)

    snap = pgs.snapshot()
    assert snap.generation == pgs.generation
    assert snap.all_pod_uids() == {"p1", "p2"}
    assert "p1" in snap.unscheduled_pods()
    assert snap.assumed_pod_uids() == {"p2"}

    snap.assume_pod(pod1)
    assert "p1" not in pgs.assumed
    assert snap.generation != pgs.generation, "a changed copy is copied again at the next update"

    pgs.add_pod(member("p3"))
    assert "p3" not in snap.all_pod_uids()


def test_pod_counts() -> None:
    pgs = PodGroupState()
    pod1, pod2, pod3, pod4 = member("p1"), member("p2"), member("p3", node="node1"), member("p4")

    assert (pgs.all_pods_count(), pgs.scheduled_pods_count()) == (0, 0)
    for pod in (pod1, pod2, pod3):
        pgs.add_pod(pod)
    assert (pgs.all_pods_count(), pgs.scheduled_pods_count()) == (3, 1)

    steps: list[tuple[Callable[[], None], int]] = [
        (lambda: pgs.assume_pod(pod1), 2),  # unscheduled → assumed
        (lambda: pgs.assume_pod(pod3), 2),  # already assigned: no change
        (lambda: pgs.assume_pod(pod4), 2),  # not in the group: ignored
        (lambda: pgs.forget_pod(pod3.uid), 2),  # assigned stays assigned
        (lambda: pgs.forget_pod(pod1.uid), 1),  # assumed → unscheduled
        (lambda: pgs.forget_pod(pod1.uid), 1),  # not assumed: no change
        (lambda: pgs.assume_pod(pod2), 2),
        (lambda: pgs.forget_pod(pod4.uid), 2),  # not in the group: ignored
    ]
    for step, scheduled in steps:
        step()
        assert (pgs.all_pods_count(), pgs.scheduled_pods_count()) == (3, scheduled)


def test_scheduled_pods_are_the_assigned_then_the_assumed_copies() -> None:
    pgs = PodGroupState()
    unscheduled, assumed, assigned = member("p1", group="pg"), member("p2"), member("p3", node="node1")
    for pod in (assigned, unscheduled, assumed):
        pgs.add_pod(pod)
    assumed_copy = on_node(assumed, "node2")
    pgs.assume_pod(assumed_copy)
    scheduled = pgs.scheduled_pods()

    snapshot = pgs.snapshot()
    pgs.assume_pod(unscheduled)

    assert scheduled == [assigned, assumed_copy]
    assert scheduled[1] is assumed_copy
    assert snapshot.scheduled_pods() == [assigned, assumed_copy]


def test_add_puts_a_pod_by_its_node_and_leaves_it_unscheduled_if_it_was() -> None:
    pgs = PodGroupState()
    pending = member("p1")
    pgs.add_pod(pending)
    pgs.add_pod(on_node(pending, "n1"))  # upstream's addPod does not clear unscheduled
    assert set(pgs.unscheduled) == {"p1"}
    assert set(pgs.assigned) == {"p1"}
    assert pgs.all_pods_count() == 1


def test_update_moves_a_pod_that_got_its_node_to_assigned() -> None:
    pgs = PodGroupState()
    pending = member("p1")
    pgs.add_pod(pending)
    pgs.assume_pod(on_node(pending, "n1"))
    bound = on_node(pending, "n1")
    pgs.update_pod(pending, bound)
    assert (set(pgs.unscheduled), set(pgs.assumed), set(pgs.assigned)) == (set(), set(), {"p1"})
    assert pgs.all_pods["p1"] is bound


def test_update_of_a_pending_pod_keeps_its_set_and_takes_the_new_version() -> None:
    pgs = PodGroupState()
    pending = member("p1")
    pgs.add_pod(pending)
    newer = dataclasses.replace(pending, labels={"foo": "bar"})
    before = pgs.generation
    pgs.update_pod(pending, newer)
    assert set(pgs.unscheduled) == {"p1"}
    assert pgs.unscheduled_pods() == {"p1": newer}
    assert pgs.generation > before


def test_assume_of_a_pod_held_with_a_node_makes_it_assigned_and_forget_keeps_it_there() -> None:
    pgs = PodGroupState()
    assigned = member("p1", node="n1")
    pgs.add_pod(assigned)
    pgs.assume_pod(assigned)
    assert pgs.assumed_pod_uids() == frozenset()
    assert pgs.assigned_pod_uids() == {"p1"}
    pgs.forget_pod("p1")
    assert pgs.assumed_pod_uids() == frozenset()
    assert pgs.assigned_pod_uids() == {"p1"}


def test_delete_takes_the_pod_out_of_every_set() -> None:
    pgs = PodGroupState()
    a, b, c = member("a"), member("b"), member("c", node="n1")
    for pod in (a, b, c):
        pgs.add_pod(pod)
    pgs.assume_pod(on_node(b, "n1"))
    for uid in ("a", "b", "c"):
        pgs.delete_pod(uid)
    assert pgs.empty()
    assert (pgs.unscheduled, pgs.assumed, pgs.assigned) == ({}, {}, {})


def test_generations_come_from_one_counter_and_never_repeat() -> None:
    first, second = PodGroupState(), PodGroupState()
    first.add_pod(member("p1"))
    second.add_pod(member("p2", group="other"))
    assert second.generation > first.generation
    assert next_pod_group_generation() > second.generation
    before = first.generation
    first.assume_pod(member("unknown"))  # ignored: no change, no new generation
    assert first.generation == before


def test_the_unscheduled_pods_are_keyed_by_name() -> None:
    pgs = PodGroupState()
    pods = [member(f"p{i}") for i in range(3)]
    for pod in pods:
        pgs.add_pod(pod)
    pgs.assume_pod(on_node(pods[1], "n1"))
    assert pgs.unscheduled_pods() == {"p0": pods[0], "p2": pods[2]}


# -- every group, and the snapshot (cache_test.go) ------------------------------------------------------


def test_members_join_and_leave_their_groups_which_go_with_their_last_member() -> None:
    states = PodGroupStates()
    pod1, pod2 = member("pod1"), member("pod2", node="node")
    states.add_member(pod1)
    states.add_member(pod2)
    states.add_member(member("other", namespace="ns2"))
    assert set(states) == {("ns1", "pg"), ("ns2", "pg")}
    states.remove_member(pod1)
    assert states.get("ns1", "pg").all_pod_uids() == {"pod2"}
    states.remove_member(pod2)
    assert set(states) == {("ns2", "pg")}
    states.remove_member(pod2)  # a group not known: nothing happens
    assert len(states) == 1


def test_a_group_not_known_is_upstreams_lister_error() -> None:
    with pytest.raises(PodGroupStateNotFound, match=r"^pod group state not found for pod group ns1/pg$"):
        PodGroupStates().get("ns1", "pg")
    with pytest.raises(PodGroupStateNotFound, match="ns1/pg"):
        PodGroupSnapshot().get("ns1", "pg")


def test_update_and_forget_of_a_group_not_known_are_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    states = PodGroupStates()
    pod = member("p1")
    states.update_member(pod, pod)
    states.forget_member(pod)
    assert len(states) == 0
    assert "missed add event" in caplog.text
    assert "missed add or assume event" in caplog.text


def test_assuming_a_member_of_a_group_not_known_creates_it_holding_the_assumed_copy() -> None:
    states = PodGroupStates()
    pending = member("p1")
    states.assume_member(pending)  # no node (upstream's own test): counted as assumed
    assert states.get("ns1", "pg").assumed_pod_uids() == {"p1"}
    other = PodGroupStates()
    other.assume_member(on_node(pending, "n1"))  # the copy names its node: counted as assigned
    assert other.get("ns1", "pg").assigned_pod_uids() == {"p1"}


def test_the_snapshot_follows_the_groups_and_copies_only_those_that_changed() -> None:
    states = PodGroupStates()
    snapshot = PodGroupSnapshot()
    pod1, pod2, pod3 = member("pod1", group="pg1"), member("pod2", group="pg1"), member("pod3", group="pg2")

    def expect(pods: list[PodInfo]) -> None:
        expected = PodGroupSnapshot.from_pods(pods)
        assert set(snapshot.states) == set(expected.states)
        for key, state in expected.states.items():
            got = snapshot.states[key]
            assert got.all_pods == state.all_pods
            assert (got.unscheduled, got.assumed, got.assigned) == (state.unscheduled, state.assumed, state.assigned)
            assert got.generation == states.get(*key).generation

    states.add_member(pod1)
    states.update_snapshot(snapshot)
    expect([pod1])
    pg1_copy = snapshot.states[("ns1", "pg1")]

    states.add_member(pod3)
    states.update_snapshot(snapshot)
    expect([pod1, pod3])
    assert snapshot.states[("ns1", "pg1")] is pg1_copy, "an unchanged group is not copied again"

    states.remove_member(pod1)
    states.update_snapshot(snapshot)
    expect([pod3])

    states.add_member(pod2)  # the group comes back: a new generation, never the old one's
    states.update_snapshot(snapshot)
    expect([pod2, pod3])
    assert snapshot.states[("ns1", "pg1")].generation > pg1_copy.generation


def test_a_copy_changed_by_a_cycle_is_copied_again() -> None:
    states = PodGroupStates()
    snapshot = PodGroupSnapshot()
    pod = member("p1")
    states.add_member(pod)
    states.update_snapshot(snapshot)
    copy = snapshot.get("ns1", "pg")
    copy.assume_pod(on_node(pod, "n1"))  # the pod-group cycle's trial placement
    assert states.get("ns1", "pg").assumed_pod_uids() == frozenset()
    states.update_snapshot(snapshot)
    fresh = snapshot.get("ns1", "pg")
    assert fresh is not copy
    assert fresh.assumed_pod_uids() == frozenset()
    assert set(fresh.unscheduled) == {"p1"}
