"""GangScheduling (upstream ``plugins/gangscheduling/gangscheduling_test.go``): the QueueingHints, PreEnqueue and
Permit over the cache's pod-group state, in an ordinary cycle and in a pod-group cycle (the cycle's snapshot)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
    Status,
)
from kopf_scheduler.plugins.gang_scheduling import PERMIT_TIMEOUT_SECONDS, GangScheduling
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, hint_for, make_node, make_pod, pod_info

POD_ADD = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD)
POD_GROUP_ADD = ClusterEvent(EventResource.POD_GROUP, ActionType.ADD)
NODE = "some-node"


def member(name: str, group: str | None, *, namespace: str = "default") -> PodInfo:
    spec = {} if group is None else {"schedulingGroup": {"podGroupName": group}}
    return pod_info(make_pod(name, namespace=namespace, uid=name, spec=spec))


def pod_group(name: str, *, namespace: str = "default", min_count: int | None = 1) -> dict[str, Any]:
    """A scheduling.k8s.io/v1alpha2 PodGroup, a gang of ``min_count`` (None: the basic policy)."""
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "podGroupTemplateRef": {"workload": {"workloadName": "w", "podGroupTemplateName": "t"}},
            "schedulingPolicy": policy,
        },
    }


class GangHandle(FakeHandle):
    """FakeHandle plus what GangScheduling calls: ``activate`` and ``allow_waiting_pod``, recorded."""

    def __init__(self, cache: ClusterCache) -> None:
        super().__init__(cache)
        #: Names of the pods activated; (uid, plugin) of every allow.
        self.activated: list[str] = []
        self.allowed: list[tuple[str, str]] = []

    def activate(self, pods: Any) -> None:
        self.activated.extend(pod.name for pod in pods)

    def allow_waiting_pod(self, uid: str, plugin: str) -> bool:
        self.allowed.append((uid, plugin))
        return True


def plugin(cache: ClusterCache | None = None) -> GangScheduling:
    return GangScheduling(handle=GangHandle(cache or ClusterCache()))


# -- QueueingHints (Test_isSchedulableAfterPodAdded, Test_isSchedulableAfterPodGroupAdded) ---------------------
def test_events_to_register() -> None:
    assert [r.event for r in plugin().events_to_register()] == [
        ClusterEvent(EventResource.POD, ActionType.ADD),
        ClusterEvent(EventResource.POD_GROUP, ActionType.ADD),
    ]
    # PodGroups and a pod's scheduling group are immutable: no update is registered.
    assert not any(
        r.event.matches(ClusterEvent(EventResource.POD_GROUP, ActionType.UPDATE)) for r in plugin().events_to_register()
    )


@pytest.mark.parametrize(
    ("added", "expected"),
    [
        pytest.param(member("new", "pg"), QUEUE, id="matches-the-pods-scheduling-group"),
        pytest.param(member("new", "pg", namespace="foo"), QUEUE_SKIP, id="another-namespace"),
        pytest.param(member("new", "pg2"), QUEUE_SKIP, id="another-pod-group-name"),
        pytest.param(member("new", None), QUEUE_SKIP, id="no-scheduling-group"),
    ],
)
def test_is_schedulable_after_pod_added(added: PodInfo, expected: Any) -> None:
    assert hint_for(plugin(), POD_ADD)(member("p", "pg"), None, added) is expected


def test_a_pod_of_no_group_is_not_moved_by_an_added_pod() -> None:
    assert hint_for(plugin(), POD_ADD)(member("p", None), None, member("new", None)) is QUEUE_SKIP


@pytest.mark.parametrize(
    ("pod", "added", "expected"),
    [
        pytest.param(member("p", "pg"), pod_group("pg"), QUEUE, id="matches-the-pods-pod-group-name"),
        pytest.param(member("p", "pg1"), pod_group("pg2"), QUEUE_SKIP, id="another-name"),
        pytest.param(
            member("p", "pg", namespace="ns1"), pod_group("pg", namespace="ns2"), QUEUE_SKIP, id="another-namespace"
        ),
        pytest.param(member("p", None), pod_group("pg"), QUEUE_SKIP, id="pod-of-no-group"),
    ],
)
def test_is_schedulable_after_pod_group_added(pod: PodInfo, added: dict[str, Any], expected: Any) -> None:
    assert hint_for(plugin(), POD_GROUP_ADD)(pod, None, added) is expected


# -- TestGangSchedulingFlow ---------------------------------------------------------------------------------------
PG1, PG2, PG3 = pod_group("pg1", min_count=3), pod_group("pg2", min_count=4), pod_group("pg3", min_count=None)


def _pods() -> dict[str, PodInfo]:
    pods = {name: member(name, "pg1") for name in ("p1", "p2", "p3")}
    pods.update({name: member(name, "pg2") for name in ("p4", "p5")})
    pods["basic-pod"] = member("basic-pod", "pg3")
    pods["non-gang"] = member("non-gang", None)
    return pods


@dataclass(frozen=True)
class Flow:
    pod: str
    initial_pods: tuple[str, ...] = ()
    pod_groups: tuple[dict[str, Any], ...] = ()
    waiting_on_permit: tuple[str, ...] = ()
    pod_group_cycle: bool = False
    pre_enqueue: Status = SUCCESS
    permit: Status = SUCCESS
    activated: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()


UUR = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
FLOWS = [
    pytest.param(Flow("non-gang", pod_groups=(PG1, PG2, PG3)), id="non-gang-pod-succeeds-immediately"),
    pytest.param(Flow("basic-pod", pod_groups=(PG1, PG2, PG3)), id="basic-policy-pod-succeeds-immediately"),
    pytest.param(
        Flow(
            "p1",
            initial_pods=("p2", "p3", "p4", "p5"),
            pre_enqueue=Status(UUR, ('waiting for pods\'s pod group "pg1" to appear in scheduling queue',)),
        ),
        id="gang-pod-fails-pre-enqueue-when-pod-group-is-not-yet-created",
    ),
    pytest.param(
        Flow(
            "p1",
            initial_pods=("p2", "p4", "p5"),  # only p1 and p2 of pg1 exist; minCount is 3
            pod_groups=(PG1, PG2),
            pre_enqueue=Status(UUR, ("waiting for minCount pods from a gang to appear in scheduling queue",)),
        ),
        id="gang-pod-fails-pre-enqueue-when-quorum-is-not-met",
    ),
    pytest.param(
        Flow(
            "p1",
            initial_pods=("p2", "p3", "p4", "p5"),
            pod_groups=(PG1, PG2),
            waiting_on_permit=("p2", "p4", "p5"),
            # p1 and p2 are assumed: 2 < 3, so p1 waits, and the unscheduled p3 is activated.
            permit=Status(Code.WAIT, ("waiting for minCount pods from a gang to be scheduled",)),
            activated=("p3",),
        ),
        id="gang-pod-passes-pre-enqueue-but-waits-at-permit",
    ),
    pytest.param(
        Flow(
            "p1",
            initial_pods=("p2", "p3", "p4", "p5"),
            pod_groups=(PG1, PG2),
            waiting_on_permit=("p2", "p3", "p4", "p5"),
            allowed=("p1", "p2", "p3"),
        ),
        id="final-gang-pod-arrives-at-permit-and-allows-all-waiting-pods-from-a-gang",
    ),
    pytest.param(
        Flow(
            "p1",
            initial_pods=("p2", "p3", "p4", "p5"),
            pod_groups=(PG1, PG2),
            waiting_on_permit=("p2", "p3", "p4", "p5"),
            pod_group_cycle=True,
            allowed=("p1", "p2", "p3"),
        ),
        id="final-gang-pod-arrives-at-permit-during-pod-group-scheduling-cycle",
    ),
]


@pytest.mark.parametrize("flow", FLOWS)
def test_gang_scheduling_flow(flow: Flow) -> None:
    pods = _pods()
    cache = ClusterCache()
    cache.add_or_update_node(make_node(NODE))
    for obj in flow.pod_groups:
        cache.objects.apply("PodGroup", None, obj)
    for name in (*flow.initial_pods, flow.pod):
        cache.add_pod_group_member(pods[name])
    gang = plugin(cache)
    handle = gang.handle
    assert isinstance(handle, GangHandle)

    pod = pods[flow.pod]
    status = gang.pre_enqueue(pod)
    expected = flow.pre_enqueue
    if not expected.is_success:
        expected = expected.with_plugin("GangScheduling")
    assert status == expected
    if not status.is_success:
        return

    # Other pods have hit Permit already and wait there.
    for name in flow.waiting_on_permit:
        assumed = cache.assume(pods[name], NODE)
        status, _ = gang.permit(CycleState(), assumed, NODE)
        assert status.code is Code.WAIT, name
    handle.activated.clear()
    handle.allowed.clear()

    state = CycleState()
    if flow.pod_group_cycle:
        # A pod-group cycle snapshots the groups once the waiting pods are assumed, then assumes its pod there.
        state.pod_group_cycle = True
        snapshot = cache.update_pod_group_snapshot()
        assumed = ClusterCache.placed_copy(pod, NODE)
        snapshot.get(pod.namespace, "pg1").assume_pod(assumed)
    else:
        assumed = cache.assume(pod, NODE)  # a per-pod cycle: Permit reads the cache
    status, timeout = gang.permit(state, assumed, NODE)
    expected = flow.permit if flow.permit.is_success else flow.permit.with_plugin("GangScheduling")
    assert status == expected
    assert timeout == (PERMIT_TIMEOUT_SECONDS if status.code is Code.WAIT else 0.0)
    assert handle.activated == list(flow.activated)
    assert sorted(uid for uid, _ in handle.allowed) == list(flow.allowed)
    assert {plugin_name for _, plugin_name in handle.allowed} <= {"GangScheduling"}
    if flow.pod_group_cycle:
        assert pod.uid not in cache.pod_groups.get(pod.namespace, "pg1").assumed_pod_uids()  # the live state untouched


def test_the_permit_timeout_is_upstreams_five_minutes() -> None:
    assert PERMIT_TIMEOUT_SECONDS == 300.0


# -- errors (upstream's AsStatus texts) ---------------------------------------------------------------------------
def test_permit_is_an_error_when_the_pod_group_is_gone() -> None:
    cache = ClusterCache()
    pod = member("p1", "pg1", namespace="ns1")
    cache.add_pod_group_member(pod)
    status, timeout = plugin(cache).permit(CycleState(), pod, NODE)
    assert (status.code, timeout) == (Code.ERROR, 0.0)
    assert status.message == 'failed to get podGroup ns1/pg1: podgroup.scheduling.k8s.io "pg1" not found'


def test_an_unknown_group_state_is_an_error_at_pre_enqueue_and_permit() -> None:
    cache = ClusterCache()
    cache.objects.apply("PodGroup", None, pod_group("pg1", namespace="ns1", min_count=2))
    pod = member("p1", "pg1", namespace="ns1")  # not a member: its profile is not ours
    gang = plugin(cache)
    assert gang.pre_enqueue(pod).code is Code.ERROR
    assert gang.pre_enqueue(pod).message == "pod group state not found for pod group ns1/pg1"
    status, _ = gang.permit(CycleState(), pod, NODE)
    assert (status.code, status.message) == (Code.ERROR, "pod group state not found for pod group ns1/pg1")
    state = CycleState()
    state.pod_group_cycle = True  # the cycle's snapshot knows no more
    status, _ = gang.permit(state, pod, NODE)
    assert status.message == "pod group state not found for pod group ns1/pg1"


def test_a_basic_policy_passes_permit_without_waiting() -> None:
    cache = ClusterCache()
    cache.objects.apply("PodGroup", None, pod_group("pg3", min_count=None))
    pod = member("basic-pod", "pg3")
    cache.add_pod_group_member(pod)
    assert plugin(cache).permit(CycleState(), pod, NODE) == (Status(), 0.0)
