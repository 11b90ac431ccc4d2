"""ClusterEvents, their derivation from old/new objects, and the in-tree registrations and QueueingHints.

Expected values restate upstream v1.36.3 (``framework/events.go``, ``kube-scheduler/framework/types.go`` and
each plugin's ``EventsToRegister`` / hint functions).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kopf_scheduler.framework.events import (
    ALL_EVENTS,
    EVENT_ASSIGNED_POD_ADD,
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_FORCE_ACTIVATE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULABLE_TIMEOUT,
    EVENT_UNSCHEDULED_POD_ADD,
    EVENT_UNSCHEDULED_POD_DELETE,
    ActionType,
    ClusterEvent,
    EventResource,
    QueueingHint,
    match_any_cluster_event,
    node_events,
    node_scheduling_properties_change,
    object_events,
    pod_events,
    pod_scheduling_properties_change,
)
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.profile import PluginRef, ResolvedProfile
from kopf_scheduler.framework.queueing_hints import events_for_profile, events_to_register
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import make_node, make_pod

A = ActionType
R = EventResource
Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP


def ev(resource: EventResource, action: ActionType) -> ClusterEvent:
    return ClusterEvent(resource, action)


def pinfo(name: str = "p", **kwargs: Any) -> PodInfo:
    return PodInfo.from_obj(make_pod(name, **kwargs))


def with_status(pod_obj: dict[str, Any], **status: Any) -> dict[str, Any]:
    pod_obj["status"].update(status)
    return pod_obj


# -- ActionType / ClusterEvent ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("action", "label"),
    [
        (A.ADD, "Add"),
        (A.DELETE, "Delete"),
        (A.UPDATE_NODE_ALLOCATABLE, "UpdateNodeAllocatable"),
        (A.UPDATE_NODE_TAINT, "UpdateNodeTaint"),
        (A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED, "UpdatePodSchedulingGatesEliminated"),
        (A.UPDATE, "Update"),
        (A.ALL, "All"),
        (A.ADD | A.UPDATE_NODE_LABEL, "Add|UpdateNodeLabel"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_action_labels(action: ActionType, label: str) -> None:
    assert action.label == label


def test_action_bits_follow_upstream() -> None:
    assert int(A.ADD) == 1
    assert int(A.DELETE) == 2
    assert int(A.UPDATE_NODE_ALLOCATABLE) == 4
    assert int(A.UPDATE_POD_LABEL) == 128
    assert int(A.ALL) == 4095
    assert int(A.UPDATE) == 4092


@pytest.mark.parametrize(
    ("event", "label"),
    [
        (EVENT_NODE_ADD, "NodeAdd"),
        (EVENT_ASSIGNED_POD_DELETE, "AssignedPodDelete"),
        (EVENT_UNSCHEDULED_POD_ADD, "UnschedulablePodAdd"),
        (ev(R.NODE, A.UPDATE_NODE_TAINT), "NodeUpdateNodeTaint"),
        (EVENT_UNSCHEDULABLE_TIMEOUT, "UnschedulableTimeout"),
        (EVENT_FORCE_ACTIVATE, "ForceActivate"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_event_labels(event: ClusterEvent, label: str) -> None:
    assert event.label == label


@pytest.mark.parametrize(
    ("registered", "incoming", "expected"),
    [
        (ev(R.NODE, A.ADD), ev(R.NODE, A.ADD), True),
        (ev(R.NODE, A.ADD), ev(R.NODE, A.DELETE), False),
        (ev(R.NODE, A.UPDATE), ev(R.NODE, A.UPDATE_NODE_LABEL), True),
        # a generic incoming Update is not as specific as a registered sub-kind
        (ev(R.NODE, A.UPDATE_NODE_LABEL), ev(R.NODE, A.UPDATE), False),
        (ev(R.NODE, A.ADD | A.UPDATE_NODE_TAINT), ev(R.NODE, A.UPDATE_NODE_TAINT), True),
        (ev(R.NODE, A.ALL), ev(R.POD, A.ADD), False),
        (ev(R.POD, A.DELETE), ev(R.ASSIGNED_POD, A.DELETE), True),
        (ev(R.POD, A.DELETE), ev(R.UNSCHEDULED_POD, A.DELETE), True),
        (ev(R.POD, A.UPDATE_POD_LABEL), ev(R.ASSIGNED_POD, A.UPDATE_POD_LABEL), True),
        (ev(R.POD, A.UPDATE_POD_LABEL), ev(R.ASSIGNED_POD, A.UPDATE), False),
        (ev(R.POD, A.ALL), ev(R.ASSIGNED_POD, A.UPDATE), True),
        (ev(R.ASSIGNED_POD, A.ADD), ev(R.POD, A.ADD), False),
        (ev(R.WILDCARD, A.ALL), ev(R.SERVICE, A.ADD), True),
        (ev(R.WILDCARD, A.ADD), ev(R.NODE, A.ADD), True),
        (ev(R.NODE, A.ALL), EVENT_UNSCHEDULABLE_TIMEOUT, False),
        (ev(R.WILDCARD, A.ALL), EVENT_UNSCHEDULABLE_TIMEOUT, True),
    ],
    ids=lambda v: v.label if isinstance(v, ClusterEvent) else str(v),
)
def test_match_cluster_events(registered: ClusterEvent, incoming: ClusterEvent, expected: bool) -> None:
    assert registered.matches(incoming) is expected
    assert match_any_cluster_event(incoming, [ev(R.PERSISTENT_VOLUME, A.ADD), registered]) is expected


def test_wildcard_events() -> None:
    assert EVENT_UNSCHEDULABLE_TIMEOUT.is_wildcard
    assert EVENT_FORCE_ACTIVATE.is_wildcard
    assert not ev(R.WILDCARD, A.ADD).is_wildcard
    assert not ev(R.NODE, A.ALL).is_wildcard


def test_all_events_is_upstreams_unrolled_wildcard() -> None:
    assert [e.event.resource for e in ALL_EVENTS] == [
        R.POD,
        R.NODE,
        R.PERSISTENT_VOLUME,
        R.PERSISTENT_VOLUME_CLAIM,
        R.CSI_NODE,
        R.CSI_DRIVER,
        R.CSI_STORAGE_CAPACITY,
        R.STORAGE_CLASS,
        R.RESOURCE_CLAIM,
        R.DEVICE_CLASS,
    ]
    assert all(e.event.action_type == A.ALL and e.hint is None for e in ALL_EVENTS)


# -- deriving events from node pairs ---------------------------------------------------------------------------
def _node_change(change: str) -> dict[str, Any]:
    node = make_node("n1")
    match change:
        case "nothing":
            pass
        case "heartbeat":
            node["metadata"]["resourceVersion"] = "2"
            node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "later"}]
        case "allocatable":
            node["status"]["allocatable"]["cpu"] = "8"
        case "allocatable-same-quantity":
            node["status"]["allocatable"]["cpu"] = "4000m"
        case "label":
            node["metadata"]["labels"]["zone"] = "a"
        case "taint":
            node["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
        case "schedulable":
            node["spec"]["unschedulable"] = False
        case "unschedulable":
            node["spec"]["unschedulable"] = True
        case "condition":
            node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        case "annotation":
            node["metadata"]["annotations"] = {"a": "b"}
        case "label+taint+allocatable":
            node["metadata"]["labels"]["zone"] = "a"
            node["spec"]["taints"] = [{"key": "k", "effect": "NoExecute"}]
            node["status"]["allocatable"]["memory"] = "64Gi"
    return node


def _old_node(change: str) -> dict[str, Any]:
    node = make_node("n1")
    node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "earlier"}]
    if change == "schedulable":
        node["spec"]["unschedulable"] = True
    if change == "taint-and-schedulable":
        node["spec"]["unschedulable"] = True
    return node


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("heartbeat", []),
        ("allocatable", [A.UPDATE_NODE_ALLOCATABLE]),
        ("allocatable-same-quantity", []),
        ("label", [A.UPDATE_NODE_LABEL]),
        ("taint", [A.UPDATE_NODE_TAINT]),
        ("schedulable", [A.UPDATE_NODE_TAINT]),
        # only unschedulable → schedulable can help a pod
        ("unschedulable", []),
        ("condition", [A.UPDATE_NODE_CONDITION]),
        ("annotation", [A.UPDATE_NODE_ANNOTATION]),
        ("label+taint+allocatable", [A.UPDATE_NODE_ALLOCATABLE, A.UPDATE_NODE_LABEL, A.UPDATE_NODE_TAINT]),
    ],
)
def test_node_scheduling_properties_change(change: str, expected: list[ActionType]) -> None:
    old, new = _old_node(change), _node_change(change)
    if change != "heartbeat" and change != "condition":
        new["status"]["conditions"] = copy.deepcopy(old["status"]["conditions"])
    assert node_scheduling_properties_change(new, old) == [ev(R.NODE, a) for a in expected]


def test_unschedulable_cleared_and_taints_changed_report_one_taint_event() -> None:
    old = make_node("n1", unschedulable=True)
    new = make_node("n1", taints=[{"key": "k", "effect": "NoSchedule"}])
    assert node_scheduling_properties_change(new, old) == [ev(R.NODE, A.UPDATE_NODE_TAINT)]


def test_node_events_add_update_delete() -> None:
    node = make_node("n1")
    assert node_events(None, node) == [EVENT_NODE_ADD]
    assert node_events(node, None) == [EVENT_NODE_DELETE]
    assert node_events(node, copy.deepcopy(node)) == []
    assert object_events(R.NODE, None, node) == [EVENT_NODE_ADD]


# -- deriving events from pod pairs ----------------------------------------------------------------------------
def _pod_pair(change: str) -> tuple[dict[str, Any], dict[str, Any]]:
    old = make_pod("p", uid="u1", labels={"app": "a"}, requests={"cpu": "1", "memory": "1Gi"})
    new = copy.deepcopy(old)
    match change:
        case "status-only":
            new["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
        case "label":
            new["metadata"]["labels"]["app"] = "b"
        case "scale-down":
            new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
        case "request-removed":
            del new["spec"]["containers"][0]["resources"]["requests"]["memory"]
        case "scale-up":
            new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
        case "toleration":
            new["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
        case "gates-eliminated":
            old["spec"]["schedulingGates"] = [{"name": "g1"}, {"name": "g2"}]
        case "one-gate-removed":
            old["spec"]["schedulingGates"] = [{"name": "g1"}, {"name": "g2"}]
            new["spec"]["schedulingGates"] = [{"name": "g2"}]
        case "claims":
            new["status"]["resourceClaimStatuses"] = [{"name": "c", "resourceClaimName": "p-c"}]
        case "label+scale-down+toleration":
            new["metadata"]["labels"]["app"] = "b"
            new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
            new["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    return old, new


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("status-only", [A.UPDATE]),
        ("label", [A.UPDATE_POD_LABEL]),
        ("scale-down", [A.UPDATE_POD_SCALE_DOWN]),
        ("request-removed", [A.UPDATE_POD_SCALE_DOWN]),
        ("scale-up", [A.UPDATE]),
        ("toleration", [A.UPDATE_POD_TOLERATION]),
        ("gates-eliminated", [A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED]),
        ("one-gate-removed", [A.UPDATE]),
        ("claims", [A.UPDATE_POD_GENERATED_RESOURCE_CLAIM]),
        (
            "label+scale-down+toleration",
            [A.UPDATE_POD_LABEL, A.UPDATE_POD_SCALE_DOWN, A.UPDATE_POD_TOLERATION],
        ),
    ],
)
def test_pod_scheduling_properties_change(change: str, expected: list[ActionType]) -> None:
    old, new = _pod_pair(change)
    assert pod_scheduling_properties_change(new, old) == [ev(R.UNSCHEDULED_POD, a) for a in expected]
    # PodInfo and raw dicts are accepted alike
    assert pod_scheduling_properties_change(PodInfo.from_obj(new), PodInfo.from_obj(old)) == [
        ev(R.UNSCHEDULED_POD, a) for a in expected
    ]


def test_assigned_pod_update_uses_assigned_resource() -> None:
    old = make_pod("p", uid="u1", node_name="n1", labels={"a": "1"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["a"] = "2"
    assert pod_scheduling_properties_change(new, old) == [ev(R.ASSIGNED_POD, A.UPDATE_POD_LABEL)]


def test_pod_events() -> None:
    unbound = make_pod("p", uid="u1")
    bound = copy.deepcopy(unbound)
    bound["spec"]["nodeName"] = "n1"
    assert pod_events(None, unbound) == [EVENT_UNSCHEDULED_POD_ADD]
    assert pod_events(None, bound) == [EVENT_ASSIGNED_POD_ADD]
    assert pod_events(unbound, None) == [EVENT_UNSCHEDULED_POD_DELETE]
    assert pod_events(bound, None) == [EVENT_ASSIGNED_POD_DELETE]
    # getting bound is an assigned-pod add, as upstream's updatePod handler treats it
    assert pod_events(unbound, bound) == [EVENT_ASSIGNED_POD_ADD]
    assert object_events(R.POD, None, bound) == [EVENT_ASSIGNED_POD_ADD]


def test_object_events_for_other_kinds() -> None:
    svc = {"metadata": {"name": "s"}}
    assert object_events(R.SERVICE, None, svc) == [ev(R.SERVICE, A.ADD)]
    assert object_events(R.SERVICE, svc, svc) == [ev(R.SERVICE, A.UPDATE)]
    assert object_events(R.NAMESPACE, svc, None) == [ev(R.NAMESPACE, A.DELETE)]
    assert object_events(R.SERVICE, None, None) == []


# -- registrations ---------------------------------------------------------------------------------------------
NODE_ADD_TAINT = ev(R.NODE, A.ADD | A.UPDATE_NODE_TAINT)


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        (
            "NodeResourcesFit",
            [
                ev(R.POD, A.DELETE | A.UPDATE_POD_SCALE_DOWN),
                ev(R.NODE, A.ADD | A.UPDATE_NODE_ALLOCATABLE),
                ev(R.DEVICE_CLASS, A.ADD | A.UPDATE),
            ],
        ),
        ("TaintToleration", [NODE_ADD_TAINT, ev(R.POD, A.UPDATE_POD_TOLERATION)]),
        ("NodeUnschedulable", [NODE_ADD_TAINT, ev(R.POD, A.UPDATE_POD_TOLERATION)]),
        ("NodeName", [ev(R.NODE, A.ADD)]),
        ("NodePorts", [ev(R.POD, A.DELETE), ev(R.NODE, A.ADD)]),
        ("NodeAffinity", [ev(R.NODE, A.ADD | A.UPDATE_NODE_LABEL)]),
        (
            "PodTopologySpread",
            [
                ev(R.POD, A.ADD | A.UPDATE_POD_LABEL | A.UPDATE_POD_TOLERATION | A.DELETE),
                ev(R.NODE, A.ADD | A.DELETE | A.UPDATE_NODE_LABEL | A.UPDATE_NODE_TAINT),
            ],
        ),
        (
            "InterPodAffinity",
            [ev(R.POD, A.ADD | A.UPDATE_POD_LABEL | A.DELETE), ev(R.NODE, A.ADD | A.UPDATE_NODE_LABEL)],
        ),
        ("SchedulingGates", [ev(R.POD, A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)]),
        ("DefaultPreemption", [ev(R.POD, A.DELETE)]),
        ("ImageLocality", []),
        ("NodeResourcesBalancedAllocation", []),
    ],
)
def test_events_to_register(plugin: str, expected: list[ClusterEvent]) -> None:
    assert [r.event for r in events_to_register([plugin])[plugin]] == expected


def test_unknown_plugin_gets_all_events() -> None:
    assert events_to_register(["MyPlugin"])["MyPlugin"] == list(ALL_EVENTS)


def test_events_for_profile_takes_rejecting_points_only() -> None:
    profile = ResolvedProfile(
        "p",
        plugins={
            ExtensionPoint.PRE_ENQUEUE: (PluginRef("SchedulingGates"),),
            ExtensionPoint.FILTER: (PluginRef("NodeResourcesFit"), PluginRef("Custom")),
            ExtensionPoint.SCORE: (PluginRef("ImageLocality"), PluginRef("ScoreOnly")),
        },
    )
    assert set(events_for_profile(profile)) == {"SchedulingGates", "NodeResourcesFit", "Custom"}


# -- hints -----------------------------------------------------------------------------------------------------
def hint(plugin: str, pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent, args: Any = None) -> QueueingHint:
    """Run the hint of ``plugin`` registered for ``event`` (there is exactly one that matches)."""
    registrations = events_to_register([plugin], {plugin: args} if args is not None else None)[plugin]
    matching = [r for r in registrations if r.event.matches(event)]
    assert len(matching) == 1, matching
    assert matching[0].hint is not None
    return matching[0].hint(pod, old, new)


NODE_ADD = EVENT_NODE_ADD
NODE_ALLOC = ev(R.NODE, A.UPDATE_NODE_ALLOCATABLE)
NODE_LABEL = ev(R.NODE, A.UPDATE_NODE_LABEL)
NODE_TAINT = ev(R.NODE, A.UPDATE_NODE_TAINT)
NODE_DELETE = EVENT_NODE_DELETE
POD_DELETE = EVENT_ASSIGNED_POD_DELETE
POD_ADD = EVENT_ASSIGNED_POD_ADD
POD_LABEL = ev(R.ASSIGNED_POD, A.UPDATE_POD_LABEL)
POD_SCALE_DOWN = ev(R.ASSIGNED_POD, A.UPDATE_POD_SCALE_DOWN)
OWN_TOLERATION = ev(R.UNSCHEDULED_POD, A.UPDATE_POD_TOLERATION)
OWN_GATES = ev(R.UNSCHEDULED_POD, A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)

BIG = pinfo("big", uid="big", requests={"cpu": "2", "memory": "1Gi"})


@pytest.mark.parametrize(
    ("old", "new", "event", "expected"),
    [
        (None, make_node("n", cpu="1"), NODE_ADD, SKIP),  # too small even when empty
        (None, make_node("n", cpu="4"), NODE_ADD, Q),
        (None, make_node("n", cpu="4", pods=0), NODE_ADD, SKIP),  # no pod slots
        (make_node("n", cpu="4"), make_node("n", cpu="8"), NODE_ALLOC, Q),
        (make_node("n", cpu="1"), make_node("n", cpu="1", memory="64Gi"), NODE_ALLOC, SKIP),
        (make_node("n", cpu="4", memory="2Gi"), make_node("n", cpu="4", memory="3Gi"), NODE_ALLOC, Q),
        (make_node("n", cpu="4", pods=10), make_node("n", cpu="4", pods=20), NODE_ALLOC, Q),
        (
            make_node("n", cpu="4", extra={"x.com/gpu": 1}),
            make_node("n", cpu="4", extra={"x.com/gpu": 2}),
            NODE_ALLOC,
            SKIP,
        ),
        (make_node("n", cpu="4"), make_node("n", cpu="4", labels={"a": "b"}), NODE_ALLOC, SKIP),
    ],
    ids=[
        "small-add",
        "big-add",
        "no-pod-slots",
        "cpu-up",
        "cpu-still-short",
        "memory-up",
        "pods-up",
        "unrequested-up",
        "no-change",
    ],
)
def test_node_resources_fit_node_hint(old: Any, new: Any, event: ClusterEvent, expected: QueueingHint) -> None:
    assert hint("NodeResourcesFit", BIG, old, new, event=event) is expected


def test_node_resources_fit_ignores_ignored_extended_resources() -> None:
    pod = pinfo("g", requests={"cpu": "1", "example.com/foo": "1"})
    node = make_node("n", cpu="4")
    assert hint("NodeResourcesFit", pod, None, node, event=NODE_ADD) is SKIP
    args = {"ignored_resources": ["example.com/foo"]}
    assert hint("NodeResourcesFit", pod, None, node, event=NODE_ADD, args=args) is Q
    args = {"ignored_resource_groups": ["example.com"]}
    assert hint("NodeResourcesFit", pod, None, node, event=NODE_ADD, args=args) is Q


@pytest.mark.parametrize(
    ("deleted", "expected"),
    [
        (make_pod("gone", node_name="n1"), Q),
        (make_pod("gone"), SKIP),  # never held room on a node
        (with_status(make_pod("gone"), nominatedNodeName="n1"), Q),
    ],
    ids=["bound", "unbound", "nominated"],
)
def test_node_resources_fit_pod_delete_hint(deleted: dict[str, Any], expected: QueueingHint) -> None:
    assert hint("NodeResourcesFit", BIG, deleted, None, event=POD_DELETE) is expected


@pytest.mark.parametrize(
    ("old_requests", "new_requests", "node_name", "same_pod", "expected"),
    [
        ({"cpu": "2"}, {"cpu": "1"}, "n1", False, Q),
        ({"memory": "2Gi"}, {"memory": "1Gi"}, "n1", False, Q),
        ({"x.com/gpu": "2"}, {"x.com/gpu": "1"}, "n1", False, SKIP),  # BIG does not request it
        ({"cpu": "2"}, {"cpu": "1"}, "", False, SKIP),  # an unbound pod frees nothing
        ({"cpu": "4"}, {"cpu": "3"}, "", True, Q),  # the rejected pod itself shrank
    ],
    ids=["cpu", "memory", "unrequested", "unbound", "self"],
)
def test_node_resources_fit_scale_down_hint(
    old_requests: dict[str, str], new_requests: dict[str, str], node_name: str, same_pod: bool, expected: QueueingHint
) -> None:
    uid = "big" if same_pod else "other"
    old = make_pod("x", uid=uid, node_name=node_name, requests=old_requests)
    new = make_pod("x", uid=uid, node_name=node_name, requests=new_requests)
    assert hint("NodeResourcesFit", BIG, old, new, event=POD_SCALE_DOWN) is expected


def test_node_resources_fit_device_class_hint() -> None:
    pod = pinfo("d", requests={"example.com/gpu": "1", "deviceclass.resource.kubernetes.io/gpus": "1"})
    event = ev(R.DEVICE_CLASS, A.ADD)
    named = {"metadata": {"name": "gpus"}, "spec": {}}
    other = {"metadata": {"name": "other"}, "spec": {}}
    mapped = {"metadata": {"name": "other"}, "spec": {"extendedResourceName": "example.com/gpu"}}
    assert hint("NodeResourcesFit", pod, None, named, event=event) is Q
    assert hint("NodeResourcesFit", pod, None, other, event=event) is SKIP
    assert hint("NodeResourcesFit", pod, None, mapped, event=event) is Q
    assert hint("NodeResourcesFit", pod, mapped, mapped, event=ev(R.DEVICE_CLASS, A.UPDATE)) is SKIP
    assert hint("NodeResourcesFit", pod, other, mapped, event=ev(R.DEVICE_CLASS, A.UPDATE)) is Q


TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}
SOFT_TAINT = {"key": "s", "effect": "PreferNoSchedule"}


@pytest.mark.parametrize(
    ("old", "new", "tolerations", "expected"),
    [
        (None, make_node("n"), [], Q),
        (None, make_node("n", taints=[TAINT]), [], SKIP),
        (None, make_node("n", taints=[TAINT]), [{"key": "k", "operator": "Exists"}], Q),
        (make_node("n", taints=[TAINT]), make_node("n"), [], Q),
        (make_node("n", taints=[TAINT]), make_node("n", taints=[SOFT_TAINT]), [], Q),
        (make_node("n"), make_node("n", taints=[TAINT]), [], SKIP),
        (make_node("n"), make_node("n", taints=[SOFT_TAINT]), [], SKIP),  # was already fine: nothing new
    ],
    ids=["add-clean", "add-tainted", "add-tolerated", "taint-removed", "to-soft", "taint-added", "clean-to-soft"],
)
def test_taint_toleration_node_hint(
    old: Any, new: Any, tolerations: list[dict[str, Any]], expected: QueueingHint
) -> None:
    pod = pinfo("t", spec={"tolerations": tolerations})
    event = NODE_ADD if old is None else NODE_TAINT
    assert hint("TaintToleration", pod, old, new, event=event) is expected


def test_own_toleration_hints() -> None:
    pod = pinfo("t", uid="t")
    mine = make_pod(
        "t", uid="t", spec={"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}
    )
    mine_other_toleration = make_pod("t", uid="t", spec={"tolerations": [{"key": "x", "operator": "Exists"}]})
    someone_else = make_pod("o", uid="o", spec={"tolerations": [{"operator": "Exists"}]})
    assert hint("TaintToleration", pod, pod, mine_other_toleration, event=OWN_TOLERATION) is Q
    assert hint("TaintToleration", pod, someone_else, someone_else, event=OWN_TOLERATION) is SKIP
    assert hint("NodeUnschedulable", pod, pod, mine, event=OWN_TOLERATION) is Q
    assert hint("NodeUnschedulable", pod, pod, mine_other_toleration, event=OWN_TOLERATION) is SKIP
    assert hint("NodeUnschedulable", pod, someone_else, someone_else, event=OWN_TOLERATION) is SKIP


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, make_node("n"), Q),
        (None, make_node("n", unschedulable=True), SKIP),
        (make_node("n", unschedulable=True), make_node("n"), Q),
        (make_node("n"), make_node("n", taints=[TAINT]), SKIP),
    ],
    ids=["add", "add-cordoned", "uncordoned", "taint-only"],
)
def test_node_unschedulable_node_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    event = NODE_ADD if old is None else NODE_TAINT
    assert hint("NodeUnschedulable", pinfo(), old, new, event=event) is expected


PORT_POD = pinfo("web", spec={"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]})


def _port_pod(host_port: int, *, node_name: str = "n1", protocol: str = "TCP", host_ip: str = "") -> dict[str, Any]:
    port: dict[str, Any] = {"containerPort": 80, "hostPort": host_port, "protocol": protocol}
    if host_ip:
        port["hostIP"] = host_ip
    return make_pod("old", node_name=node_name, spec={"containers": [{"name": "c", "ports": [port]}]})


@pytest.mark.parametrize(
    ("deleted", "expected"),
    [
        (_port_pod(8080), Q),
        (_port_pod(9090), SKIP),
        (_port_pod(8080, protocol="UDP"), SKIP),
        (_port_pod(8080, host_ip="10.0.0.1"), Q),  # the wanted 0.0.0.0 conflicts with any IP
        (_port_pod(8080, node_name=""), SKIP),
        (make_pod("plain", node_name="n1"), SKIP),
    ],
    ids=["same-port", "other-port", "other-protocol", "specific-ip", "unbound", "no-ports"],
)
def test_node_ports_pod_delete_hint(deleted: dict[str, Any], expected: QueueingHint) -> None:
    assert hint("NodePorts", PORT_POD, deleted, None, event=POD_DELETE) is expected


AFFINITY_POD = pinfo(
    "a",
    spec={
        "nodeSelector": {"disk": "ssd"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
                    ]
                }
            }
        },
    },
)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, make_node("n", labels={"disk": "ssd", "zone": "a"}), Q),
        (None, make_node("n", labels={"disk": "ssd", "zone": "c"}), SKIP),
        (None, make_node("n", labels={"zone": "a"}), SKIP),  # nodeSelector unmet
        (None, make_node("special", labels={"disk": "ssd"}), Q),  # matchFields term
        (make_node("n", labels={"disk": "ssd"}), make_node("n", labels={"disk": "ssd", "zone": "b"}), Q),
        (
            make_node("n", labels={"disk": "ssd", "zone": "a"}),
            make_node("n", labels={"disk": "ssd", "zone": "b"}),
            SKIP,
        ),
    ],
    ids=["add-match", "add-wrong-zone", "add-no-disk", "add-by-name", "label-now-matches", "matched-before"],
)
def test_node_affinity_node_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    event = NODE_ADD if old is None else NODE_LABEL
    assert hint("NodeAffinity", AFFINITY_POD, old, new, event=event) is expected


def test_node_affinity_added_affinity_filters_nodes() -> None:
    args = {
        "added_affinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]
            }
        }
    }
    plain = pinfo("plain")
    assert hint("NodeAffinity", plain, None, make_node("n"), event=NODE_ADD, args=args) is SKIP
    assert hint("NodeAffinity", plain, None, make_node("n", labels={"pool": "x"}), event=NODE_ADD, args=args) is Q


def test_node_affinity_gt_uses_integers() -> None:
    pod = pinfo(
        "g",
        spec={
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}]
                    }
                }
            }
        },
    )
    assert hint("NodeAffinity", pod, None, make_node("n", labels={"gen": "4"}), event=NODE_ADD) is Q
    assert hint("NodeAffinity", pod, None, make_node("n", labels={"gen": "3"}), event=NODE_ADD) is SKIP
    assert hint("NodeAffinity", pod, None, make_node("n", labels={"gen": "4.5"}), event=NODE_ADD) is SKIP


SPREAD = {
    "maxSkew": 1,
    "topologyKey": "zone",
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "web"}},
}
SPREAD_POD = pinfo("s", uid="s", labels={"app": "web"}, spec={"topologySpreadConstraints": [SPREAD]})


def _web(labels: dict[str, str], *, node_name: str = "n1", namespace: str = "default") -> dict[str, Any]:
    return make_pod("w", uid="w", node_name=node_name, namespace=namespace, labels=labels)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, _web({"app": "web"}), Q),
        (None, _web({"app": "db"}), SKIP),
        (None, _web({"app": "web"}, node_name=""), SKIP),  # not placed: does not count
        (None, _web({"app": "web"}, namespace="other"), SKIP),
        (_web({"app": "web"}), None, Q),
        (_web({"app": "web"}), _web({"app": "db"}), Q),
        (_web({"app": "web", "x": "1"}), _web({"app": "web", "x": "2"}), SKIP),  # selector unaffected
        (_web({"app": "db", "x": "1"}), _web({"app": "db", "x": "1"}), SKIP),
    ],
    ids=[
        "add-match",
        "add-other",
        "add-unbound",
        "add-other-ns",
        "delete",
        "relabel-out",
        "relabel-irrelevant",
        "same",
    ],
)
def test_pod_topology_spread_pod_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    event = POD_ADD if old is None else POD_DELETE if new is None else POD_LABEL
    assert hint("PodTopologySpread", SPREAD_POD, old, new, event=event) is expected


def test_pod_topology_spread_match_label_keys_and_own_toleration() -> None:
    constraint = dict(SPREAD, matchLabelKeys=["rev"], nodeTaintsPolicy="Honor")
    pod = pinfo("s", uid="s", labels={"app": "web", "rev": "1"}, spec={"topologySpreadConstraints": [constraint]})
    assert hint("PodTopologySpread", pod, None, _web({"app": "web", "rev": "1"}), event=POD_ADD) is Q
    assert hint("PodTopologySpread", pod, None, _web({"app": "web", "rev": "2"}), event=POD_ADD) is SKIP
    tolerating = make_pod(
        "s", uid="s", labels={"app": "web", "rev": "1"}, spec={"tolerations": [{"operator": "Exists"}]}
    )
    assert hint("PodTopologySpread", pod, pod, tolerating, event=ev(R.UNSCHEDULED_POD, A.UPDATE_POD_TOLERATION)) is Q


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, make_node("n", labels={"zone": "a"}), Q),
        (None, make_node("n"), SKIP),
        (make_node("n", labels={"zone": "a"}), None, Q),
        (make_node("n"), make_node("n", labels={"zone": "a"}), Q),
        (make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "b"}), Q),
        (make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "a", "x": "y"}), SKIP),
        (make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "a"}, taints=[TAINT]), Q),
    ],
    ids=["add-keyed", "add-unkeyed", "delete-keyed", "gains-key", "zone-moves", "other-label", "taints"],
)
def test_pod_topology_spread_node_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    event = NODE_ADD if old is None else NODE_DELETE if new is None else NODE_LABEL
    assert hint("PodTopologySpread", SPREAD_POD, old, new, event=event) is expected


def test_pod_topology_spread_defaulted_constraints_queue_conservatively() -> None:
    args = {
        "defaulting_type": "List",
        "default_constraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
    }
    plain = pinfo("d", uid="d", labels={"app": "x"})
    assert hint("PodTopologySpread", plain, None, _web({"anything": "1"}), event=POD_ADD, args=args) is Q
    assert hint("PodTopologySpread", plain, None, make_node("n"), event=NODE_ADD, args=args) is SKIP


def _affinity_pod(kind: str, *, uid: str = "me", labels: dict[str, str] | None = None) -> PodInfo:
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    return pinfo(
        "me",
        uid=uid,
        labels=labels or {},
        spec={"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}},
    )


def _db(labels: dict[str, str], *, node_name: str = "n1", uid: str = "db") -> dict[str, Any]:
    return make_pod("db", uid=uid, node_name=node_name, labels=labels)


@pytest.mark.parametrize(
    ("kind", "old", "new", "expected"),
    [
        ("podAffinity", None, _db({"app": "db"}), Q),
        ("podAffinity", None, _db({"app": "web"}), SKIP),
        ("podAffinity", None, _db({"app": "db"}, node_name=""), SKIP),
        ("podAffinity", _db({"app": "web"}), _db({"app": "db"}), Q),
        ("podAffinity", _db({"app": "db"}), None, SKIP),
        ("podAntiAffinity", _db({"app": "db"}), None, Q),
        ("podAntiAffinity", _db({"app": "db"}), _db({"app": "web"}), Q),
        ("podAntiAffinity", None, _db({"app": "db"}), SKIP),
    ],
    ids=[
        "aff-add",
        "aff-add-other",
        "aff-add-unbound",
        "aff-relabel-in",
        "aff-delete",
        "anti-delete",
        "anti-relabel-out",
        "anti-add",
    ],
)
def test_inter_pod_affinity_pod_hint(kind: str, old: Any, new: Any, expected: QueueingHint) -> None:
    event = POD_ADD if old is None else POD_DELETE if new is None else POD_LABEL
    assert hint("InterPodAffinity", _affinity_pod(kind), old, new, event=event) is expected


def test_inter_pod_affinity_deleted_pods_own_anti_affinity() -> None:
    plain = pinfo("me", uid="me", labels={"app": "web"})
    blocker = make_pod(
        "b",
        uid="b",
        node_name="n1",
        spec={
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
                    ]
                }
            }
        },
    )
    assert hint("InterPodAffinity", plain, blocker, None, event=POD_DELETE) is Q
    assert hint("InterPodAffinity", plain, make_pod("x", uid="x", node_name="n1"), None, event=POD_DELETE) is SKIP
    # the pod's own label update always queues
    relabelled = make_pod("me", uid="me", labels={"app": "other"})
    assert hint("InterPodAffinity", plain, plain, relabelled, event=ev(R.UNSCHEDULED_POD, A.UPDATE_POD_LABEL)) is Q


@pytest.mark.parametrize(
    ("kind", "old", "new", "expected"),
    [
        ("podAffinity", None, make_node("n", labels={"zone": "a"}), Q),
        ("podAffinity", None, make_node("n"), SKIP),
        ("podAffinity", make_node("n"), make_node("n", labels={"zone": "a"}), Q),
        ("podAffinity", make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "b"}), Q),
        ("podAffinity", make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "a", "q": "1"}), SKIP),
        ("podAntiAffinity", None, make_node("n"), Q),
        ("podAntiAffinity", make_node("n", labels={"zone": "a"}), make_node("n"), Q),
        ("podAntiAffinity", make_node("n"), make_node("n", labels={"zone": "a"}), SKIP),
    ],
    ids=[
        "aff-add",
        "aff-add-unkeyed",
        "aff-gains-key",
        "aff-moves",
        "aff-other",
        "anti-add",
        "anti-loses-key",
        "anti-gains-key",
    ],
)
def test_inter_pod_affinity_node_hint(kind: str, old: Any, new: Any, expected: QueueingHint) -> None:
    event = NODE_ADD if old is None else NODE_LABEL
    assert hint("InterPodAffinity", _affinity_pod(kind), old, new, event=event) is expected


def test_scheduling_gates_and_default_preemption_hints() -> None:
    pod = pinfo("g", uid="g")
    assert hint("SchedulingGates", pod, pod, make_pod("g", uid="g"), event=OWN_GATES) is Q
    assert hint("SchedulingGates", pod, pod, make_pod("o", uid="o"), event=OWN_GATES) is SKIP
    assert hint("DefaultPreemption", pod, make_pod("o", uid="o", node_name="n"), None, event=POD_DELETE) is SKIP


def test_hint_rejects_objects_of_the_wrong_type() -> None:
    # The queue turns a raising hint into Queue; the hints themselves refuse what they cannot read.
    with pytest.raises(TypeError):
        hint("TaintToleration", pinfo(), None, 42, event=NODE_ADD)
