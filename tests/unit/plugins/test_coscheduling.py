"""Coscheduling (scheduler-plugins v0.34.7), extension point by extension point, restating the cases of its own
tests (pkg/coscheduling/coscheduling_test.go, core/core_test.go, apis/config validation and defaults) on the
cache's Coscheduling groups."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kopf_scheduler.api.args import CoschedulingArgs, validation_field_errors
from kopf_scheduler.framework import ActionType, ClusterEvent, Code, EventResource
from kopf_scheduler.plugins.coscheduling import Coscheduling
from kopf_scheduler.plugins.coscheduling.core import KIND, check_cluster_resource
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.watched import BY_KIND
from tests.unit.factories import FakeHandle, make_node, make_pod, new_state, pod_info

LABEL = "scheduling.x-k8s.io/pod-group"


def pod_group(
    name: str,
    min_member: int,
    *,
    namespace: str = "ns",
    created: str = "2026-01-01T00:00:00Z",
    min_resources: dict[str, Any] | None = None,
    timeout: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if min_resources is not None:
        spec["minResources"] = min_resources
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": spec,
    }


def member(
    name: str,
    group: str | None,
    *,
    node: str = "",
    gated: bool = False,
    priority: int = 0,
    requests: dict[str, str | int] | None = None,
    namespace: str = "ns",
) -> PodInfo:
    spec: dict[str, Any] = {"priority": priority}
    if gated:
        spec["schedulingGates"] = [{"name": "example-gate"}]
    labels = {LABEL: group} if group else {}
    return pod_info(
        make_pod(name, namespace=namespace, node_name=node, labels=labels, spec=spec, uid=name, requests=requests)
    )


class CoschedulingHandle(FakeHandle):
    """FakeHandle plus what Coscheduling calls, recorded; ``waiting`` are the uids waiting at Permit."""

    def __init__(self, cache: ClusterCache) -> None:
        super().__init__(cache)
        self.activated: list[str] = []
        self.allowed: list[str] = []
        self.rejected: list[tuple[str, str, str]] = []
        self.waiting: set[str] = set()

    def activate(self, pods: Any) -> None:
        self.activated.extend(pod.name for pod in pods)

    def allow_waiting_pod(self, uid: str, plugin: str) -> bool:
        if uid in self.waiting:
            self.allowed.append(uid)
        return uid in self.waiting

    def reject_waiting_pod(self, uid: str, plugin: str = "", message: str = "removed") -> bool:
        if uid in self.waiting:
            self.rejected.append((uid, plugin, message))
        return uid in self.waiting


def setup(
    *,
    pods: list[PodInfo] = (),  # type: ignore[assignment]
    groups: list[dict[str, Any]] = (),  # type: ignore[assignment]
    nodes: list[dict[str, Any]] | None = None,
    args: CoschedulingArgs | None = None,
) -> tuple[Coscheduling, CoschedulingHandle, ClusterCache]:
    """A cache with ``nodes`` (two of 4 CPUs by default), ``groups`` and ``pods`` (bound ones accounted, pending
    ones as their groups' members, as the event handlers add them), and the plugin on it."""
    cache = ClusterCache()
    for node in nodes if nodes is not None else [make_node("node-a"), make_node("node-b")]:
        cache.add_or_update_node(node)
    for group in groups:
        cache.objects.apply(KIND, "ADDED", group)
    for pod in pods:
        if pod.node_name:
            cache.add_or_update_pod(pod.obj)
        else:
            cache.add_pod_group_member(pod)
    handle = CoschedulingHandle(cache)
    return Coscheduling(handle=handle, args=args), handle, cache


def test_the_kind_is_the_watched_row() -> None:
    row = BY_KIND[KIND]
    assert (row.group, row.version, row.plural, row.api_kind) == (
        "scheduling.x-k8s.io",
        "v1alpha1",
        "podgroups",
        "PodGroup",
    )


# -- args (apis/config: SetDefaults_CoschedulingArgs, ValidateCoschedulingArgs) --------------------------------
def test_args_defaults() -> None:
    assert CoschedulingArgs().model_dump(by_alias=True) == {
        "permitWaitingTimeSeconds": 60,
        "podGroupBackoffSeconds": 0,
        "podGroupRejectPercentage": 10,
    }


@pytest.mark.parametrize(
    ("args", "errors"),
    [
        ({"permitWaitingTimeSeconds": -1}, ["permitWaitingTimeSeconds: Invalid value: -1: must be greater than 0"]),
        ({"podGroupBackoffSeconds": -1}, ["podGroupBackoffSeconds: Invalid value: -1: must be greater than 0"]),
        (
            {"podGroupRejectPercentage": 101},
            ["podGroupRejectPercentage: Invalid value: 101: must be between 0 and 100"],
        ),
        ({"permitWaitingTimeSeconds": 0, "podGroupBackoffSeconds": 0, "podGroupRejectPercentage": 0}, []),
    ],
)
def test_args_validation(args: dict[str, Any], errors: list[str]) -> None:
    if not errors:
        CoschedulingArgs.model_validate(args)
        return
    with pytest.raises(ValidationError) as caught:
        CoschedulingArgs.model_validate(args)
    assert [str(e) for e in validation_field_errors(caught.value, "")] == errors


# -- events --------------------------------------------------------------------------------------------------
def test_events_to_register() -> None:
    plugin, _, _ = setup()
    assert [(r.event, r.hint) for r in plugin.events_to_register()] == [
        (ClusterEvent(EventResource.POD, ActionType.ADD), None),
        (ClusterEvent(EventResource.COSCHEDULING_POD_GROUP, ActionType.ADD | ActionType.UPDATE), None),
    ]
    assert EventResource.COSCHEDULING_POD_GROUP.value == BY_KIND[KIND].event_resource


# -- QueueSort (TestLess, TestLessAfterScheduleFailure) --------------------------------------------------------
class Queued:
    def __init__(self, pod: PodInfo, timestamp: float) -> None:
        self.pod = pod
        self.timestamp = timestamp
        self.initial_attempt_timestamp: float | None = timestamp


LESS_GROUPS = [
    pod_group("pg1", 1, namespace="ns1", created="2026-01-01T00:00:00Z"),
    pod_group("pg2", 1, namespace="ns2", created="2026-01-01T00:00:01Z"),
]


@pytest.mark.parametrize(
    ("p1", "p2", "expected"),
    [
        (("ns1", None, 0, 1.0), ("ns2", None, 1, 2.0), False),  # p1.priority less than p2.priority
        (("ns1", None, 1, 1.0), ("ns2", None, 0, 2.0), True),  # p1.priority greater than p2.priority
        (("ns1", None, 0, 1.0), ("ns2", None, 0, 2.0), True),  # equal priority, p1 queued earlier
        (("ns1", None, 0, 2.0), ("ns2", None, 0, 1.0), False),  # equal priority, p2 queued earlier
        (("ns1", "pg1", 0, 1.0), ("ns2", None, 1, 2.0), False),  # p1 in pg1, lower priority
        (("ns1", "pg1", 1, 1.0), ("ns2", None, 0, 2.0), True),  # p1 in pg1, higher priority
        (("ns1", "pg1", 0, 1e12), ("ns2", None, 0, 2e12), True),  # p1's group created before p2 was queued
        (("ns1", "pg1", 0, 1e12), ("ns2", "pg2", 0, 0.0), True),  # pg1 created before pg2
        (("ns2", "pg2", 0, 0.0), ("ns1", "pg1", 0, 1e12), False),  # pg2 created after pg1
    ],
)
def test_less(p1: tuple[str, str | None, int, float], p2: tuple[str, str | None, int, float], expected: bool) -> None:
    plugin, _, _ = setup(groups=LESS_GROUPS)
    plugin._wall_offset = 0.0  # the queue's clock is the wall clock here
    a = Queued(member("p1", p1[1], namespace=p1[0], priority=p1[2]), p1[3])
    b = Queued(member("p2", p2[1], namespace=p2[0], priority=p2[2]), p2[3])
    assert plugin.less(a, b) is expected


def test_less_keeps_a_groups_pods_together_and_breaks_ties_by_name() -> None:
    """Equal priority and group time: ``namespace/name`` decides, so one group's pods pop back to back."""
    plugin, _, _ = setup(groups=[pod_group("pg1", 1, namespace="ns1"), pod_group("pg2", 1, namespace="ns1")])
    a, b = Queued(member("a", "pg1", namespace="ns1"), 5.0), Queued(member("b", "pg2", namespace="ns1"), 1.0)
    assert plugin.less(a, b)
    assert not plugin.less(b, a)


def test_less_after_schedule_failure_orders_the_group_by_its_failure() -> None:
    """A group that failed sorts by the time of its failure, behind a group created after it but not failed."""
    plugin, _, _ = setup(groups=LESS_GROUPS)
    a, b = Queued(member("p1", "pg1", namespace="ns1"), 0.0), Queued(member("p2", "pg2", namespace="ns2"), 0.0)
    assert plugin.less(a, b)
    plugin.manager.mark_failure("ns1/pg1")
    assert not plugin.less(a, b)
    plugin.manager.clear_failure("ns1/pg1")
    assert plugin.less(a, b)


def test_less_takes_the_pods_own_time_for_a_podgroup_with_a_malformed_creation_time() -> None:
    plugin, _, _ = setup(groups=[pod_group("pg1", 1, namespace="ns1", created="yesterday"), LESS_GROUPS[1]])
    plugin._wall_offset = 0.0
    a, b = Queued(member("p1", "pg1", namespace="ns1"), 5.0), Queued(member("p2", "pg2", namespace="ns2"), 1.0)
    assert plugin.less(a, b)  # p1 by its own time (5 s after the epoch), before pg2's creation
    a.initial_attempt_timestamp = None
    a.timestamp = 2e12
    assert not plugin.less(a, b)  # before its first attempt: when it entered the queue


def test_less_reads_the_cache_once_and_sees_podgroups_added_later() -> None:
    """QueueSort looks the PodGroup up on every comparison: through the handle's cache, read once (a snapshot per
    look-up was a sixth of a gang member's cycle), which is the live cache (a group added later counts)."""
    plugin, handle, cache = setup(groups=LESS_GROUPS[:1])
    plugin._wall_offset = 0.0
    taken: list[int] = []
    snapshot = handle.snapshot
    handle.snapshot = lambda: taken.append(1) or snapshot()  # type: ignore[method-assign]
    a, b = Queued(member("p1", "pg1", namespace="ns1"), 5.0), Queued(member("p2", "pg2", namespace="ns2"), 1.0)
    assert not plugin.less(a, b)  # pg2 not there yet: p2 by its own time (before pg1 was created)
    cache.objects.apply(KIND, "ADDED", pod_group("pg2", 1, namespace="ns2", created="2026-01-01T00:00:01Z"))
    assert plugin.less(a, b)  # pg1 created before pg2
    for _ in range(10):
        plugin.less(b, a)
    assert len(taken) <= 1


# -- PreFilter (core_test.go TestPreFilter) ---------------------------------------------------------------------
def pg1_members(count: int, *, gated: tuple[int, ...] = ()) -> list[PodInfo]:
    return [member(f"p1{chr(ord('a') + i)}", "pg1", gated=i in gated) for i in range(count)]


@pytest.mark.parametrize(
    ("pod", "pods", "groups", "message"),
    [
        pytest.param(member("p", None), [member("p1", "pg1")], [pod_group("pg1", 1)], None, id="no pg"),
        pytest.param(member("p", "pg-non-existent"), [], [pod_group("pg1", 1)], None, id="non-existent pg"),
        pytest.param(
            member("p", "pg1"),
            [member("p", "pg1"), member("pg2-1", "pg2")],
            [pod_group("pg1", 2), pod_group("pg2", 2)],
            "pre-filter pod p cannot find enough sibling pods, current pods number: 1, minMember of group: 2",
            id="fewer than minMember",
        ),
        pytest.param(pg1_members(1)[0], pg1_members(2), [pod_group("pg1", 2)], None, id="equal to minMember"),
        pytest.param(pg1_members(1)[0], pg1_members(3), [pod_group("pg1", 2)], None, id="more than minMember"),
        pytest.param(pg1_members(1)[0], pg1_members(3, gated=(2,)), [pod_group("pg1", 2)], None, id="gated, quorum"),
        pytest.param(
            pg1_members(1)[0],
            pg1_members(3, gated=(1,)),
            [pod_group("pg1", 3)],
            "pre-filter pod p1a cannot proceed due to gated pods in the same PodGroup",
            id="gated below quorum",
        ),
        pytest.param(
            pg1_members(1)[0],
            pg1_members(3, gated=(1, 2)),
            [pod_group("pg1", 2)],
            "pre-filter pod p1a cannot proceed due to gated pods in the same PodGroup",
            id="all siblings gated",
        ),
        pytest.param(
            pg1_members(1)[0], pg1_members(3), [pod_group("pg1", 2, min_resources={"cpu": "6"})], None, id="minRes fits"
        ),
        pytest.param(
            pg1_members(1)[0],
            pg1_members(3),
            [pod_group("pg1", 2, min_resources={"cpu": "10"})],
            "resource gap: map[cpu:{{2000 -3} {<nil>}  DecimalSI}]",
            id="minRes does not fit",
        ),
    ],
)
def test_pre_filter(pod: PodInfo, pods: list[PodInfo], groups: list[dict[str, Any]], message: str | None) -> None:
    plugin, _handle, cache = setup(pods=pods, groups=groups)
    _, status = plugin.pre_filter(new_state(), pod, cache.snapshot())
    if message is None:
        assert status.is_success
    else:
        assert (status.code, status.message, status.plugin) == (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            message,
            "Coscheduling",
        )


def test_pre_filter_min_resources_counts_the_pods_and_leaves_the_groups_own_pods_out() -> None:
    """minResources gets ``pods: minMember``; a node's free resources leave out the group's own bound pods (they
    are part of what the group asks) but not other pods; a passing group is not checked again for a while."""
    nodes = [make_node("n1", cpu="4", pods=2)]
    others = member("other", None, node="n1", requests={"cpu": "3"})
    mine = member("mine", "pg1", node="n1", requests={"cpu": "1"})
    pods = [others, mine, *pg1_members(2)]
    group = pod_group("pg1", 3, min_resources={"cpu": "1"})
    plugin, _, cache = setup(pods=pods, groups=[group], nodes=nodes)
    _, status = plugin.pre_filter(new_state(), pods[2], cache.snapshot())
    assert status.message == "resource gap: map[pods:{{2 0} {<nil>}  DecimalSI}]"
    assert check_cluster_resource(cache.snapshot().node_infos(), {"cpu": "500m", "pods": 1}, "ns/pg1") is None
    assert plugin.manager.permitted("ns/pg1") is False
    plugin2, _, cache2 = setup(pods=pods, groups=[pod_group("pg1", 1, min_resources={"cpu": "1"})], nodes=nodes)
    assert plugin2.pre_filter(new_state(), pods[2], cache2.snapshot())[1].is_success
    assert plugin2.manager.permitted("ns/pg1")


def test_pre_filter_refuses_a_backed_off_group() -> None:
    plugin, _, cache = setup(pods=pg1_members(2), groups=[pod_group("pg1", 2)])
    plugin.manager.backoff("ns/pg1", 30)
    _, status = plugin.pre_filter(new_state(), pg1_members(1)[0], cache.snapshot())
    assert (status.code, status.message) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "podGroup ns/pg1 failed recently")


# -- Permit (TestPermit, core_test.go TestPermit) -----------------------------------------------------------
def test_permit_of_a_pod_of_no_group_succeeds() -> None:
    plugin, _, _ = setup(groups=[pod_group("pg1", 2)])
    status, timeout = plugin.permit(new_state(), member("p", None), "node-a")
    assert (status.is_success, timeout) == (True, 0.0)


def test_permit_of_a_pod_whose_pod_group_is_missing_is_unschedulable() -> None:
    plugin, _, _ = setup(groups=[pod_group("pg1", 2)])
    status, _ = plugin.permit(new_state(), member("p", "pg-non-existent"), "node-a")
    assert (status.code, status.message) == (Code.UNSCHEDULABLE, "PodGroup not found")


@pytest.mark.parametrize(
    ("group", "args", "timeout"),
    [
        (pod_group("pg1", 2), None, 60.0),
        (pod_group("pg1", 2), CoschedulingArgs(permit_waiting_time_seconds=10), 10.0),
        (pod_group("pg1", 2, timeout=5), CoschedulingArgs(permit_waiting_time_seconds=10), 5.0),
        (pod_group("pg1", 2), CoschedulingArgs(permit_waiting_time_seconds=0), 60.0),
    ],
)
def test_permit_waits_without_quorum_and_activates_the_siblings(
    group: dict[str, Any], args: CoschedulingArgs | None, timeout: float
) -> None:
    pods = pg1_members(2)
    plugin, handle, cache = setup(pods=pods, groups=[group], args=args)
    cache.assume(pods[0], "node-a")
    status, waited = plugin.permit(new_state(), pods[0], "node-a")
    assert (status.code, waited) == (Code.WAIT, timeout)
    assert handle.activated == ["p1b"]


def test_permit_with_the_quorum_allows_every_waiting_member() -> None:
    bound = member("p1b", "pg1", node="node-a")
    pods = [*pg1_members(1), member("p1c", "pg1")]
    plugin, handle, cache = setup(pods=[bound, *pods], groups=[pod_group("pg1", 3)])
    cache.assume(pods[1], "node-b")
    handle.waiting = {"p1c"}
    cache.assume(pods[0], "node-a")
    plugin.manager.mark_failure("ns/pg1")
    status, waited = plugin.permit(new_state(), pods[0], "node-a")
    assert (status.is_success, waited) == (True, 0.0)
    assert handle.allowed == ["p1c"]
    assert plugin.manager.last_failure("ns/pg1") is None


# -- PostFilter (TestPostFilter, TestPostFilterRejectThreshold, TestPodGroupBackoffTime) ----------------------
def test_post_filter_of_a_pod_of_no_group() -> None:
    plugin, _, _ = setup()
    _, status = plugin.post_filter(new_state(), member("p", None), {})
    assert (status.code, status.message) == (Code.UNSCHEDULABLE, "can not find pod group")


def test_post_filter_leaves_a_group_with_enough_pods_assigned() -> None:
    bound = [member(f"b{i}", "pg1", node="node-a") for i in range(3)]
    plugin, handle, _ = setup(pods=[*bound, *pg1_members(1)], groups=[pod_group("pg1", 3)])
    _, status = plugin.post_filter(new_state(), pg1_members(1)[0], {})
    assert (status.code, status.message, handle.rejected) == (Code.UNSCHEDULABLE, "", [])


@pytest.mark.parametrize(
    ("percentage", "assigned", "rejects"),
    [(10, 9, False), (10, 8, True), (0, 9, True), (100, 0, False), (50, 6, False), (50, 4, True)],
)
def test_post_filter_reject_threshold(percentage: int, assigned: int, rejects: bool) -> None:
    bound = [member(f"b{i}", "pg1", node="node-a") for i in range(assigned)]
    waiting = member("w", "pg1")
    args = CoschedulingArgs(pod_group_reject_percentage=percentage)
    plugin, _handle, _cache = setup(pods=[*bound, waiting, *pg1_members(1)], groups=[pod_group("pg1", 10)], args=args)
    _, status = plugin.post_filter(new_state(), pg1_members(1)[0], {})
    assert (status.message != "") is rejects
    assert (plugin.manager.last_failure("ns/pg1") is not None) is rejects


def test_post_filter_rejects_the_whole_group_and_backs_it_off() -> None:
    pods = pg1_members(3)
    args = CoschedulingArgs(pod_group_backoff_seconds=30)
    plugin, handle, cache = setup(pods=pods, groups=[pod_group("pg1", 3, min_resources={"cpu": "1"})], args=args)
    cache.assume(pods[1], "node-a")
    handle.waiting = {"p1b"}
    plugin.manager.permit("ns/pg1")
    _, status = plugin.post_filter(new_state(), pods[0], {})
    assert (status.code, status.message) == (
        Code.UNSCHEDULABLE,
        "PodGroup ns/pg1 gets rejected due to Pod p1a is unschedulable even after PostFilter",
    )
    assert handle.rejected == [("p1b", "Coscheduling", "optimistic rejection in PostFilter")]
    assert plugin.manager.backed_off("ns/pg1")
    assert not plugin.manager.permitted("ns/pg1")
    _, again = plugin.pre_filter(new_state(), pods[2], cache.snapshot())
    assert again.message == "podGroup ns/pg1 failed recently"


def test_post_filter_does_not_back_off_a_group_short_of_pods() -> None:
    pods = pg1_members(2)
    plugin, _, _ = setup(pods=pods, groups=[pod_group("pg1", 3)], args=CoschedulingArgs(pod_group_backoff_seconds=30))
    plugin.post_filter(new_state(), pods[0], {})
    assert not plugin.manager.backed_off("ns/pg1")


# -- Reserve / Unreserve ----------------------------------------------------------------------------------
def test_unreserve_rejects_every_waiting_member() -> None:
    pods = pg1_members(3)
    plugin, handle, cache = setup(pods=pods, groups=[pod_group("pg1", 3)])
    for pod, node in zip(pods[:2], ("node-a", "node-b"), strict=True):
        cache.assume(pod, node)
    handle.waiting = {"p1a", "p1b"}
    assert plugin.reserve(new_state(), pods[0], "node-a").is_success
    plugin.unreserve(new_state(), pods[0], "node-a")
    assert sorted(handle.rejected) == [
        ("p1a", "Coscheduling", "rejection in Unreserve"),
        ("p1b", "Coscheduling", "rejection in Unreserve"),
    ]
    assert plugin.manager.last_failure("ns/pg1") is not None


def test_unreserve_of_a_pod_of_no_group_does_nothing() -> None:
    plugin, handle, _ = setup()
    plugin.unreserve(new_state(), member("p", None), "node-a")
    assert handle.rejected == []


# -- profiles: Coscheduling as scheduler-plugins configures it; never with GangScheduling -------------------------
def _resolve(plugins: dict[str, Any]) -> Any:
    from kopf_scheduler.api.profile import SchedulerProfileSpec
    from kopf_scheduler.framework.builder import resolve_profile
    from kopf_scheduler.plugins.registry import in_tree_registry

    return resolve_profile("gangs", SchedulerProfileSpec.model_validate({"plugins": plugins}), in_tree_registry())


def test_a_profile_enables_coscheduling_as_scheduler_plugins_documents_it() -> None:
    resolved = _resolve(
        {
            "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
            "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
        }
    )
    names = {point.value: [ref.name for ref in refs] for point, refs in resolved.plugins.items()}
    assert names["queueSort"] == ["Coscheduling"]
    for point in ("preFilter", "postFilter", "permit", "reserve"):
        assert names[point][-1] == "Coscheduling", point
    assert names["postFilter"] == ["DynamicResources", "DefaultPreemption", "Coscheduling"]


def test_a_profile_cannot_enable_both_gang_apis() -> None:
    from kopf_scheduler.framework.builder import ProfileError

    with pytest.raises(ProfileError) as caught:
        _resolve(
            {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}, {"name": "GangScheduling"}]},
                "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
            }
        )
    assert [str(e) for e in caught.value.errors] == [
        'plugins: Invalid value: ["Coscheduling","GangScheduling"]: a profile may enable the plugins of one gang API '
        "only, not of scheduling.k8s.io/v1alpha2 PodGroup and scheduling.x-k8s.io/v1alpha1 PodGroup"
    ]


# -- the cache's Coscheduling groups --------------------------------------------------------------------------
def test_the_cache_keeps_coscheduling_groups_apart_from_workload_aware_ones() -> None:
    cache = ClusterCache()
    cache.add_or_update_node(make_node("node-a"))
    pending = member("p", "g")
    cache.add_pod_group_member(pending)
    assert cache.coscheduling_groups.get("ns", "g").all_pods_count() == 1
    assert len(cache.pod_groups) == 0
    assumed = cache.assume(pending, "node-a")
    assert cache.coscheduling_groups.get("ns", "g").assumed_pod_uids() == {"p"}
    cache.forget(assumed.uid)
    assert cache.coscheduling_groups.get("ns", "g").unscheduled_pods() == {"p": pending}
    moved = member("p", "h")  # its label changed while pending
    cache.update_pod_group_member(pending, moved)
    assert list(cache.coscheduling_groups) == [("ns", "h")]
    cache.remove_pod_group_member(moved)
    assert len(cache.coscheduling_groups) == 0
    bound = member("b", "g", node="node-a")
    cache.add_or_update_pod(bound.obj)
    assert cache.coscheduling_groups.get("ns", "g").assigned_pod_uids() == {"b"}
    relabelled = {**bound.obj, "metadata": {**bound.obj["metadata"], "labels": {LABEL: "h"}, "resourceVersion": "2"}}
    cache.add_or_update_pod(relabelled)  # a bound pod's new version with other labels: it changes groups
    assert list(cache.coscheduling_groups) == [("ns", "h")]
    cache.remove_pod("b")
    assert len(cache.coscheduling_groups) == 0
