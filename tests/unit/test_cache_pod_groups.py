"""ClusterCache keeps the pod groups where upstream's cache.go does (its pod-group cases of cache_test.go, and
the cache's own paths): pending members added, updated and removed; assume, forget, the watch event that
confirms an assumed member, an assigned member's updates and deletion; dry runs leave the groups alone."""

from __future__ import annotations

import copy
from typing import Any

from kopf_scheduler.plugins.default_preemption.dry_run import DryRunRemoval
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_group_state import PodGroupState, PodGroupStateData
from tests.unit.factories import make_cache, make_node, make_pod, pod_info

NS = "test-ns"


def member_obj(name: str, *, group: str = "pg", node: str = "", **kwargs: Any) -> dict[str, Any]:
    spec = {"schedulingGroup": {"podGroupName": group}, **kwargs.pop("spec", {})}
    return make_pod(name, namespace=NS, uid=f"uid-{name}", node_name=node, spec=spec, **kwargs)


def bound(obj: dict[str, Any], node: str, *, phase: str = "Pending") -> dict[str, Any]:
    """The watch's version of ``obj`` after its Binding to ``node`` (still Pending, as before the kubelet)."""
    new = copy.deepcopy(obj)
    new["spec"]["nodeName"] = node
    new["status"]["phase"] = phase
    new["metadata"]["resourceVersion"] = "2"
    return new


def group(cache: ClusterCache, name: str = "pg") -> PodGroupState:
    return cache.pod_groups.get(NS, name)


def sets_of(state: PodGroupStateData) -> tuple[set[str], set[str], set[str]]:
    return set(state.unscheduled), set(state.assumed), set(state.assigned)


def cache_with_nodes() -> ClusterCache:
    return make_cache([make_node("node1"), make_node("node2")])


# -- pending members (upstream Add/Update/RemovePodGroupMember) ------------------------------------------


def test_add_pod_group_member() -> None:
    cache = cache_with_nodes()
    cache.add_pod_group_member(pod_info(make_pod("non-workload-pod", namespace=NS)))
    assert len(cache.pod_groups) == 0
    cache.add_pod_group_member(pod_info(member_obj("unscheduled-pod")))
    cache.add_pod_group_member(pod_info(member_obj("assigned-pod", node="node1")))
    state = group(cache)
    assert set(state.unscheduled_pods()) == {"unscheduled-pod"}
    assert state.assigned_pod_uids() == {"uid-assigned-pod"}


def test_update_pod_group_member() -> None:
    cache = cache_with_nodes()
    pending = pod_info(member_obj("unscheduled-pod"))
    cache.add_pod_group_member(pending)
    newer = pending.with_obj({**pending.obj, "metadata": {**pending.obj["metadata"], "labels": {"foo": "bar"}}})
    cache.update_pod_group_member(pending, newer)
    state = group(cache)
    assert sets_of(state) == ({pending.uid}, set(), set())
    assert state.all_pods[pending.uid] is newer

    assigned = pod_info(bound(newer.obj, "node"))
    cache.update_pod_group_member(newer, assigned)
    assert sets_of(state) == (set(), set(), {pending.uid})

    plain = pod_info(make_pod("no-pod-group-pod", namespace=NS))
    cache.update_pod_group_member(plain, plain)  # no group: nothing happens, nothing logged
    assert list(cache.pod_groups) == [(NS, "pg")]


def test_remove_pod_group_member() -> None:
    cache = cache_with_nodes()
    pod1, pod2 = pod_info(member_obj("unscheduled-pod")), pod_info(member_obj("assigned-pod", node="node"))
    cache.remove_pod_group_member(pod1)  # not known: nothing happens
    assert len(cache.pod_groups) == 0
    cache.add_pod_group_member(pod1)
    cache.add_pod_group_member(pod2)
    cache.remove_pod_group_member(pod1)
    assert group(cache).all_pod_uids() == {pod2.uid}
    cache.remove_pod_group_member(pod2)
    assert len(cache.pod_groups) == 0, "a group whose last pod leaves is dropped"


# -- the cache's own paths ---------------------------------------------------------------------------------


def test_an_assumed_member_confirmed_by_its_bound_watch_event_becomes_assigned() -> None:
    cache = cache_with_nodes()
    pending = pod_info(member_obj("pod1"))
    cache.add_pod_group_member(pending)
    assumed = cache.assume(pending, "node1")
    assert group(cache).assumed_pod_uids() == {pending.uid}
    assert group(cache).assigned_pod_uids() == frozenset()
    assert group(cache).scheduled_pods() == [assumed]

    confirmed = cache.add_or_update_pod(bound(pending.obj, "node1"))
    assert confirmed is not None
    assert confirmed.requests is assumed.requests, "the in-place replacement, not a new parse"
    assert sets_of(group(cache)) == (set(), set(), {pending.uid})
    assert group(cache).scheduled_pods() == [confirmed]


def test_the_confirmation_that_takes_the_full_path_makes_it_assigned_too() -> None:
    cache = cache_with_nodes()
    affinity: dict[str, Any] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}
    pending = pod_info(member_obj("pod1", spec={"affinity": affinity}, labels={"app": "a"}))
    cache.add_pod_group_member(pending)
    cache.assume(pending, "node1")
    # Running and with pod affinity: not the in-place replacement, the detach-and-add path.
    assert cache.add_or_update_pod(bound(pending.obj, "node1", phase="Running")) is not None
    assert sets_of(group(cache)) == (set(), set(), {pending.uid})


def test_an_assumed_member_forgotten_returns_to_unscheduled() -> None:
    cache = cache_with_nodes()
    pending = pod_info(member_obj("pod1"))
    other = pod_info(member_obj("pod2"))
    cache.add_pod_group_member(pending)
    cache.add_pod_group_member(other)
    cache.assume(pending, "node1")
    cache.forget(pending.uid)
    state = group(cache)
    assert sets_of(state) == ({pending.uid, other.uid}, set(), set())
    assert state.unscheduled_pods()["pod1"] is pending
    cache.forget(pending.uid)  # not assumed any more: nothing happens
    assert sets_of(state) == ({pending.uid, other.uid}, set(), set())


def test_a_confirmed_member_is_not_forgotten() -> None:
    cache = cache_with_nodes()
    pending = pod_info(member_obj("pod1"))
    cache.add_pod_group_member(pending)
    cache.assume(pending, "node1")
    cache.add_or_update_pod(bound(pending.obj, "node1"))
    cache.forget(pending.uid)
    assert sets_of(group(cache)) == (set(), set(), {pending.uid})


def test_assuming_a_member_of_a_group_not_known_counts_it_assigned_as_upstream() -> None:
    cache = cache_with_nodes()
    pending = pod_info(member_obj("pod1"))
    assumed = cache.assume(pending, "node1")
    state = group(cache)
    assert sets_of(state) == (set(), set(), {pending.uid})
    assert state.all_pods[pending.uid] is assumed
    cache.forget(pending.uid)  # the held version names a node: it stays assigned
    assert sets_of(group(cache)) == (set(), set(), {pending.uid})


def test_an_assigned_member_is_added_updated_and_deleted_and_its_group_goes_with_it() -> None:
    cache = cache_with_nodes()
    obj = member_obj("pod1", node="node1")
    added = cache.add_or_update_pod(obj)
    assert added is not None
    assert sets_of(group(cache)) == (set(), set(), {added.uid})
    generation = group(cache).generation

    newer = cache.add_or_update_pod({**obj, "metadata": {**obj["metadata"], "resourceVersion": "7"}})
    assert newer is not None
    assert group(cache).all_pods[added.uid] is newer
    assert group(cache).generation > generation

    cache.remove_pod(added.uid)
    assert len(cache.pod_groups) == 0


def test_a_member_turned_terminal_leaves_its_group() -> None:
    cache = cache_with_nodes()
    keep = cache.add_or_update_pod(member_obj("keep", node="node1"))
    obj = member_obj("done", node="node1")
    cache.add_or_update_pod(obj)
    assert cache.add_or_update_pod({**obj, "status": {"phase": "Succeeded"}}) is None
    assert keep is not None
    assert group(cache).all_pod_uids() == {keep.uid}


def test_a_deleted_pending_member_that_was_assumed_leaves_its_group() -> None:
    cache = cache_with_nodes()
    pending = pod_info(member_obj("pod1"))
    cache.add_pod_group_member(pending)
    cache.assume(pending, "node1")
    cache.remove_pod(pending.uid)
    assert len(cache.pod_groups) == 0


def test_snapshot_of_assigned_members_after_an_update_and_a_removal() -> None:
    cache = make_cache([make_node(f"node{i}") for i in range(3)])
    objs = [member_obj(f"p{i}", group=f"pg-{i}", node=f"node{i}") for i in range(3)]
    for obj in objs:
        cache.add_or_update_pod(obj)
    assert set(cache.update_pod_group_snapshot().states) == {(NS, "pg-0"), (NS, "pg-1"), (NS, "pg-2")}
    cache.add_or_update_pod({**objs[0], "metadata": {**objs[0]["metadata"], "resourceVersion": "9"}})
    cache.remove_pod("uid-p1")
    snapshot = cache.update_pod_group_snapshot()
    assert set(snapshot.states) == {(NS, "pg-0"), (NS, "pg-2")}
    for key in snapshot.states:
        state = snapshot.get(*key)
        assert sets_of(state)[2] == set(state.all_pods)
        assert sets_of(state)[:2] == (set(), set())
    assert cache.snapshot().pod_group_states is snapshot


def test_the_snapshot_a_cycle_reads_is_taken_when_asked_not_by_every_cache_snapshot() -> None:
    cache = cache_with_nodes()
    pending = pod_info(member_obj("pod1"))
    cache.add_pod_group_member(pending)
    cache.update_pod_group_snapshot()
    copy_ = cache.snapshot().pod_group_states.get(NS, "pg")
    copy_.assume_pod(cache.placed_copy(pending, "node1"))  # a pod-group cycle's trial placement
    assert cache.snapshot().pod_group_states.get(NS, "pg").assumed_pod_uids() == {pending.uid}
    assert group(cache).assumed_pod_uids() == frozenset()
    assert cache.update_pod_group_snapshot().get(NS, "pg").assumed_pod_uids() == frozenset()


# -- dry runs and pods of no group ----------------------------------------------------------------------


def test_dry_runs_leave_the_groups_alone() -> None:
    cache = cache_with_nodes()
    victim = cache.add_or_update_pod(member_obj("victim", node="node1"))
    nominated = pod_info(member_obj("nominated"))
    cache.add_pod_group_member(nominated)
    assert victim is not None
    state = group(cache)
    before = (sets_of(state), state.generation)

    cache.assume(nominated, "node2", dry_run=True)  # a Filter pass with nominated pods accounted
    assert (sets_of(state), state.generation) == before
    cache.forget(nominated.uid, dry_run=True)
    node = cache.node("node1")
    assert node is not None
    with DryRunRemoval(cache, node) as dry_run:
        dry_run.remove(victim)
        assert (sets_of(state), state.generation) == before
    assert cache.pod(victim.uid) is victim
    assert group(cache) is state
    assert (sets_of(state), state.generation) == before


def test_pods_of_no_group_make_no_group_and_stay_compact() -> None:
    cache = cache_with_nodes()
    assigned = cache.add_or_update_pod(make_pod("bound", namespace=NS, node_name="node1"))
    assert assigned is not None
    assigned.compact()
    pending = pod_info(make_pod("pending", namespace=NS))
    pending.compact()
    cache.add_pod_group_member(pending)
    cache.update_pod_group_member(pending, pending)
    assert isinstance(pending.raw, bytes)
    assumed = cache.assume(pending, "node2")
    cache.forget(assumed.uid)
    cache.remove_pod_group_member(pending)
    cache.remove_pod(assigned.uid)
    assert isinstance(assigned.raw, bytes)
    assert len(cache.pod_groups) == 0
    assert len(cache.update_pod_group_snapshot()) == 0
