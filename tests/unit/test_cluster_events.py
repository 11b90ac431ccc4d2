"""ClusterEvents, their derivation from old/new objects, and how a pipeline's plugins register theirs.

Expected values restate upstream v1.36.3 (``framework/events.go``, ``kube-scheduler/framework/types.go``,
``scheduler.go`` ``buildQueueingHintMap``). Each in-tree plugin's own registrations and QueueingHints are
tested beside it, in ``tests/unit/plugins``.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import numpy as np
import pytest

from kopf_scheduler.framework import (
    SUCCESS,
    ClusterEventWithHint,
    CycleState,
    FilterPlugin,
    FilterResult,
    ScorePlugin,
    Snapshot,
    object_labels,
)
from kopf_scheduler.framework.enqueue import events_for_framework, registrations_of
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
    node_events,
    node_scheduling_properties_change,
    object_events,
    pod_events,
    pod_scheduling_properties_change,
)
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.profile import PluginRef, ResolvedProfile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.plugins.registry import in_tree_registry
from kopf_scheduler.queue import SchedulingQueue
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, make_node, make_pod, node_event

A = ActionType
R = EventResource
Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP


def ev(resource: EventResource, action: ActionType) -> ClusterEvent:
    return ClusterEvent(resource, action)


def pinfo(name: str = "p", **kwargs: Any) -> PodInfo:
    return PodInfo.from_obj(make_pod(name, **kwargs))


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
    assert int(A.UPDATE_NODE_DECLARED_FEATURE) == 128
    assert int(A.UPDATE_POD_LABEL) == 256
    assert int(A.ALL) == 8191
    assert int(A.UPDATE) == 8188


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


# -- registrations of a pipeline (the generic dispatch) -----------------------------------------------------------
class _FilterStub(FilterPlugin):
    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        return None


class NoHook(_FilterStub):
    """An out-of-tree Filter that does not implement ``events_to_register``."""

    name: ClassVar[str] = "NoHook"


class Silent(_FilterStub):
    """A Filter that says no event can undo its rejections."""

    name: ClassVar[str] = "Silent"

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []


def _ready(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    return Q if object_labels(new).get("ready") == "yes" else SKIP


class LabelGate(_FilterStub):
    """A Filter with its own registration and hint: only a node relabelled ``ready=yes`` helps."""

    name: ClassVar[str] = "LabelGate"

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ev(R.NODE, A.UPDATE_NODE_LABEL), _ready)]


class ScoreOnly(ScorePlugin):
    name: ClassVar[str] = "ScoreOnly"


def _framework() -> Framework:
    profile = ResolvedProfile(
        "p",
        plugins={
            ExtensionPoint.PRE_ENQUEUE: (PluginRef("SchedulingGates"),),
            ExtensionPoint.QUEUE_SORT: (PluginRef("PrioritySort"),),
            ExtensionPoint.FILTER: (
                PluginRef("NodeResourcesFit"),
                PluginRef("NoHook"),
                PluginRef("Silent"),
                PluginRef("LabelGate"),
            ),
            ExtensionPoint.SCORE: (PluginRef("ImageLocality"), PluginRef("ScoreOnly")),
            ExtensionPoint.BIND: (PluginRef("DefaultBinder"),),
        },
    )
    registry = in_tree_registry().merged(Registry([NoHook, Silent, LabelGate, ScoreOnly]))
    return Framework(profile, registry, FakeHandle())


def test_events_for_framework_takes_rejecting_points_only() -> None:
    assert set(events_for_framework(_framework())) == {
        "SchedulingGates",
        "NodeResourcesFit",
        "NoHook",
        "Silent",
        "LabelGate",
    }


def test_each_plugin_instance_answers_for_itself() -> None:
    framework = _framework()
    events = events_for_framework(framework)
    assert events["NodeResourcesFit"] == framework.plugins["NodeResourcesFit"].events_to_register()
    assert events["LabelGate"] == [ClusterEventWithHint(ev(R.NODE, A.UPDATE_NODE_LABEL), _ready)]
    assert events["Silent"] == []


def test_plugin_without_the_hook_gets_all_events() -> None:
    plugin = NoHook(handle=FakeHandle())
    assert plugin.events_to_register() is None
    assert registrations_of(plugin) == list(ALL_EVENTS)
    assert events_for_framework(_framework())["NoHook"] == list(ALL_EVENTS)


def test_plugin_with_its_own_hint_gets_exactly_its_registrations_in_the_queue() -> None:
    queue = SchedulingQueue(
        less=lambda a, b: a.timestamp < b.timestamp,
        pre_enqueue=lambda pod: SUCCESS,
        plugin_events=events_for_framework(_framework()),
        clock=lambda: 1000.0,
    )
    pod = pinfo("p", uid="p")
    queue.add(pod)
    qpod = queue.pop_nowait()
    assert qpod is not None
    qpod.unschedulable_plugins.add("LabelGate")
    queue.add_unschedulable_if_not_present(qpod)
    assert queue.location(pod.uid) == "unschedulable"

    plain = make_node("n1")
    node_event(queue, None, plain)  # not registered: no ALL_EVENTS fallback for a plugin with the hook
    assert queue.location(pod.uid) == "unschedulable"
    not_ready = make_node("n1", labels={"ready": "no"})
    node_event(queue, plain, not_ready)  # registered, but its hint says QueueSkip
    assert queue.location(pod.uid) == "unschedulable"
    node_event(queue, not_ready, make_node("n1", labels={"ready": "yes"}))
    assert queue.location(pod.uid) == "backoff"
