"""ClusterEvents: what changed in the cluster, in the vocabulary the scheduling queue and QueueingHints share.

Upstream (``k8s.io/kube-scheduler/framework`` types, ``pkg/scheduler/framework/{types,events}.go``) describes
every watch event as a :class:`ClusterEvent` — a resource kind plus an :class:`ActionType` bit set — and lets
each plugin register the events that could undo its rejections (``EventsToRegister``). The queue moves an
unschedulable pod only when an incoming event *matches* a registration of a plugin that rejected it and that
plugin's QueueingHint says :attr:`QueueingHint.QUEUE`.

Updates are split into sub-kinds (``UpdateNodeLabel``, ``UpdatePodToleration`` …) derived from an old/new
object pair (:func:`node_scheduling_properties_change`, :func:`pod_scheduling_properties_change`), so a plugin
that only cares about taints is never asked about a label change. An incoming event matches a registration
when its resource matches (``Pod`` also covers the internal ``AssignedPod`` / ``UnschedulablePod``) and its
action is the same or *more specific* (``UpdateNodeLabel`` matches a registered ``Update``, not vice versa).

Pods may be given as :class:`~kopf_scheduler.state.pod_info.PodInfo` or as raw API dicts; nodes and every
other kind as raw API dicts. The helpers for writing QueueingHints (:func:`node_pair`,
:func:`object_labels`, :func:`is_own_update` …) live here too; plugins import them from
:mod:`kopf_scheduler.framework`. Behaviour follows Kubernetes v1.36 with its default feature gates
(DynamicResourceAllocation, InPlacePodVerticalScaling and NodeDeclaredFeatures on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum, IntFlag, StrEnum
from fractions import Fraction
from typing import Any

from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.quantity import QuantityError, parse_quantity


class ActionType(IntFlag):
    """Upstream ``ActionType``: bits that compose. ``UPDATE`` is every update sub-kind, ``ALL`` everything."""

    NONE = 0
    ADD = 1 << 0
    DELETE = 1 << 1
    # Node-only update sub-kinds.
    UPDATE_NODE_ALLOCATABLE = 1 << 2
    UPDATE_NODE_LABEL = 1 << 3
    #: Taints changed, or ``spec.unschedulable`` went from true to false.
    UPDATE_NODE_TAINT = 1 << 4
    UPDATE_NODE_CONDITION = 1 << 5
    UPDATE_NODE_ANNOTATION = 1 << 6
    #: ``status.declaredFeatures`` changed (NodeDeclaredFeatures gate, beta and on in 1.36).
    UPDATE_NODE_DECLARED_FEATURE = 1 << 7
    # Pod-only update sub-kinds.
    UPDATE_POD_LABEL = 1 << 8
    #: Some resource request went down (or disappeared).
    UPDATE_POD_SCALE_DOWN = 1 << 9
    #: A toleration was added (the API only allows adding).
    UPDATE_POD_TOLERATION = 1 << 10
    #: The last scheduling gate was removed.
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1 << 11
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 1 << 12

    ALL = (1 << 13) - 1
    UPDATE = ALL & ~(ADD | DELETE)

    @property
    def label(self) -> str:
        """Upstream ``ActionType.String()`` (``Add``, ``UpdateNodeLabel``, ``All`` …); combinations join with ``|``."""
        if self in _ACTION_LABELS:
            return _ACTION_LABELS[self]
        return "|".join(_ACTION_LABELS[bit] for bit in _SINGLE_ACTIONS if bit & self)


_ACTION_LABELS: dict[ActionType, str] = {
    ActionType.NONE: "",
    ActionType.ADD: "Add",
    ActionType.DELETE: "Delete",
    ActionType.UPDATE_NODE_ALLOCATABLE: "UpdateNodeAllocatable",
    ActionType.UPDATE_NODE_LABEL: "UpdateNodeLabel",
    ActionType.UPDATE_NODE_TAINT: "UpdateNodeTaint",
    ActionType.UPDATE_NODE_CONDITION: "UpdateNodeCondition",
    ActionType.UPDATE_NODE_ANNOTATION: "UpdateNodeAnnotation",
    ActionType.UPDATE_NODE_DECLARED_FEATURE: "UpdateNodeDeclaredFeature",
    ActionType.UPDATE_POD_LABEL: "UpdatePodLabel",
    ActionType.UPDATE_POD_SCALE_DOWN: "UpdatePodScaleDown",
    ActionType.UPDATE_POD_TOLERATION: "UpdatePodToleration",
    ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED: "UpdatePodSchedulingGatesEliminated",
    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM: "UpdatePodGeneratedResourceClaim",
    ActionType.ALL: "All",
    ActionType.UPDATE: "Update",
}
_SINGLE_ACTIONS = tuple(ActionType(1 << i) for i in range(13))


class EventResource(StrEnum):
    """The kind of object an event is about; values are upstream's ``EventResource`` strings."""

    #: Any pod. Plugins register this; incoming pod events use the two narrower kinds below.
    POD = "Pod"
    #: Internal (never registered): a pod bound to a node.
    ASSIGNED_POD = "AssignedPod"
    #: Internal (never registered): a pod not yet bound. Upstream spells it "UnschedulablePod".
    UNSCHEDULED_POD = "UnschedulablePod"
    NODE = "Node"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    CSI_NODE = "storage.k8s.io/CSINode"
    CSI_DRIVER = "storage.k8s.io/CSIDriver"
    VOLUME_ATTACHMENT = "storage.k8s.io/VolumeAttachment"
    CSI_STORAGE_CAPACITY = "storage.k8s.io/CSIStorageCapacity"
    STORAGE_CLASS = "storage.k8s.io/StorageClass"
    RESOURCE_CLAIM = "resource.k8s.io/ResourceClaim"
    RESOURCE_SLICE = "resource.k8s.io/ResourceSlice"
    DEVICE_CLASS = "resource.k8s.io/DeviceClass"
    POD_GROUP = "scheduling.k8s.io/PodGroup"
    #: scheduler-plugins' Coscheduling PodGroup (a custom resource: ``plural.version.group``, as it registers it).
    COSCHEDULING_POD_GROUP = "podgroups.v1alpha1.scheduling.x-k8s.io"
    # Upstream dropped these kinds from the event vocabulary (no in-tree plugin of 1.36 registers them; the
    # spreading/affinity plugins read them from listers). They are kept so the operator can describe what it
    # saw and a custom plugin could register them; in-tree registrations never match them.
    SERVICE = "Service"
    REPLICA_SET = "ReplicaSet"
    STATEFUL_SET = "StatefulSet"
    REPLICATION_CONTROLLER = "ReplicationController"
    NAMESPACE = "Namespace"
    #: Matches every resource. Registering it is expensive; incoming wildcard events force a move.
    WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """A resource kind and what happened to it. ``custom_label`` names special events in logs and metrics."""

    resource: EventResource
    action_type: ActionType
    custom_label: str = ""

    @property
    def label(self) -> str:
        """Upstream ``ClusterEvent.Label()``: the custom label, else resource + action (``NodeAdd``)."""
        return self.custom_label or f"{self.resource.value}{self.action_type.label}"

    @property
    def is_wildcard(self) -> bool:
        """Upstream ``ClusterEventIsWildCard``: ``*`` resource with ``All`` actions."""
        return self.resource is EventResource.WILDCARD and self.action_type == ActionType.ALL

    def matches(self, incoming: ClusterEvent) -> bool:
        """Upstream ``MatchClusterEvents(self, incoming)``: may this registration react to ``incoming``?

        The incoming event must be the same as or more specific than the registration: its actions must
        overlap and be numerically no larger (an incoming generic ``Update`` does not match a registered
        ``UpdateNodeLabel``). A wildcard registration matches anything; an incoming wildcard matches only a
        wildcard registration (the queue handles incoming wildcards separately: they move everything).
        """
        if self.is_wildcard:
            return True
        return (
            _resource_matches(self.resource, incoming.resource)
            and bool(self.action_type & incoming.action_type)
            and incoming.action_type <= self.action_type
        )


def _resource_matches(registered: EventResource, incoming: EventResource) -> bool:
    return (
        registered is EventResource.WILDCARD
        or registered is incoming
        or (registered is EventResource.POD and incoming in (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD))
    )


class QueueingHint(IntEnum):
    """A plugin's verdict on one event for one pod it rejected."""

    #: The event cannot make the pod schedulable: leave it where it is.
    QUEUE_SKIP = 0
    #: The event may make the pod schedulable: retry it (after its backoff).
    QUEUE = 1


#: ``hint(pod, old, new)``: ``pod`` is the pod the plugin rejected; ``old`` is None for an add, ``new`` None
#: for a delete. Raising counts as :attr:`QueueingHint.QUEUE` (a broken hint must not strand pods).
QueueingHintFn = Callable[[PodInfo, Any, Any], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    """One registration: the event and an optional hint (None behaves as always :attr:`QueueingHint.QUEUE`)."""

    event: ClusterEvent
    hint: QueueingHintFn | None = None


# -- special event labels and well-known events ------------------------------------------------------------
#: Labels of queue moves that are not cluster events (the ``event`` label of queue-incoming metrics).
SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
POP_FROM_BACKOFF_Q = "PopFromBackoffQ"
FORCE_ACTIVATE = "ForceActivate"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"

EVENT_ASSIGNED_POD_ADD = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD)
EVENT_ASSIGNED_POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
EVENT_UNSCHEDULED_POD_ADD = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD)
EVENT_UNSCHEDULED_POD_UPDATE = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE)
EVENT_UNSCHEDULED_POD_DELETE = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.DELETE)
EVENT_NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
EVENT_NODE_DELETE = ClusterEvent(EventResource.NODE, ActionType.DELETE)
#: The leftover flush: pods stuck in unschedulablePods too long. A wildcard: moves every pod it is given.
EVENT_UNSCHEDULABLE_TIMEOUT = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, UNSCHEDULABLE_TIMEOUT)
#: ``Activate``: with a pod as ``new`` object it moves only that pod.
EVENT_FORCE_ACTIVATE = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, FORCE_ACTIVATE)

#: What a plugin that registers nothing is treated as registering (upstream ``UnrollWildCardResource``:
#: every resource the scheduler watches, with all actions, hint always Queue).
ALL_EVENTS: tuple[ClusterEventWithHint, ...] = tuple(
    ClusterEventWithHint(ClusterEvent(resource, ActionType.ALL))
    for resource in (
        EventResource.POD,
        EventResource.NODE,
        EventResource.PERSISTENT_VOLUME,
        EventResource.PERSISTENT_VOLUME_CLAIM,
        EventResource.CSI_NODE,
        EventResource.CSI_DRIVER,
        EventResource.CSI_STORAGE_CAPACITY,
        EventResource.STORAGE_CLASS,
        EventResource.RESOURCE_CLAIM,
        EventResource.DEVICE_CLASS,
    )
)


# -- object access ---------------------------------------------------------------------------------------
def as_pod(obj: Any) -> PodInfo | None:
    """A pod event object as PodInfo (None stays None). Raises TypeError for anything else."""
    if obj is None or isinstance(obj, PodInfo):
        return obj
    if isinstance(obj, Mapping):
        return PodInfo.from_obj(dict(obj))
    raise TypeError(f"expected a pod (PodInfo or API dict), got {type(obj).__name__}")


def as_object(obj: Any) -> Mapping[str, Any] | None:
    """A node (or other) event object as its API dict; a cache ``NodeInfo`` gives its ``obj``."""
    if obj is None or isinstance(obj, Mapping):
        return obj
    inner = getattr(obj, "obj", None)
    if isinstance(inner, Mapping):
        return inner
    raise TypeError(f"expected an API object dict, got {type(obj).__name__}")


def nominated_node_name(pod: PodInfo) -> str:
    return pod.nominated_node


# -- helpers for writing QueueingHints ---------------------------------------------------------------------
#: Shorthands for a hint's two answers.
QUEUE = QueueingHint.QUEUE
QUEUE_SKIP = QueueingHint.QUEUE_SKIP


def object_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """An API object's labels (empty when it has none)."""
    return dict(_meta(obj).get("labels") or {})


def object_name(obj: Mapping[str, Any]) -> str:
    return _meta(obj).get("name") or ""


def node_pair(old: Any, new: Any) -> tuple[Mapping[str, Any] | None, Mapping[str, Any]]:
    """The (old, new) node dicts of a node add or update hint; ``new`` must be there."""
    original, modified = as_object(old), as_object(new)
    if modified is None:
        raise ValueError("node hint called without the new node")
    return original, modified


def is_assigned_or_nominated(pod: PodInfo) -> bool:
    """The pod holds (or was promised) room on a node: bound, or nominated by preemption."""
    return bool(pod.node_name or nominated_node_name(pod))


def is_own_update(pod: PodInfo, new: Any) -> bool:
    """A pod update hint is about the rejected pod itself (``new`` is the updated pod)."""
    modified = as_pod(new)
    if modified is None:
        raise ValueError("pod update hint called without the new pod")
    return modified.uid == pod.uid


def object_uid(obj: Any) -> str | None:
    """The UID of a pod given either way (None if it is not a pod-like object)."""
    if isinstance(obj, PodInfo):
        return obj.uid
    if isinstance(obj, Mapping):
        return (obj.get("metadata") or {}).get("uid")
    return None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("status") or {}


# -- pods --------------------------------------------------------------------------------------------------
def _pod_labels_changed(new: PodInfo, old: PodInfo) -> ActionType:
    return ActionType.UPDATE_POD_LABEL if dict(new.labels) != dict(old.labels) else ActionType.NONE


def _pod_scaled_down(new: PodInfo, old: PodInfo) -> ActionType:
    # Any resource the old pod requested that the new one requests less of, or not at all. PodInfo's
    # requests follow component-helpers' PodRequests (and its resize rules), so this is upstream's
    # extractPodScaleDown on the scheduler's integers.
    for name, old_value in old.requests.items():
        if name not in new.requests or old_value > new.requests[name]:
            return ActionType.UPDATE_POD_SCALE_DOWN
    return ActionType.NONE


def _pod_gates_eliminated(new: PodInfo, old: PodInfo) -> ActionType:
    if not new.scheduling_gates and old.scheduling_gates:
        return ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    return ActionType.NONE


def _pod_toleration_added(new: PodInfo, old: PodInfo) -> ActionType:
    # The API only allows adding tolerations, so a different count is an update (upstream compares lengths).
    if len(new.tolerations) != len(old.tolerations):
        return ActionType.UPDATE_POD_TOLERATION
    return ActionType.NONE


def _pod_generated_claims_changed(new: PodInfo, old: PodInfo) -> ActionType:
    new_status, old_status = _status(new.obj), _status(old.obj)
    for key in ("resourceClaimStatuses", "extendedResourceClaimStatus"):
        if (new_status.get(key) or None) != (old_status.get(key) or None):
            return ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM
    return ActionType.NONE


_POD_EXTRACTORS: tuple[Callable[[PodInfo, PodInfo], ActionType], ...] = (
    _pod_labels_changed,
    _pod_scaled_down,
    _pod_gates_eliminated,
    _pod_toleration_added,
    _pod_generated_claims_changed,
)


def pod_scheduling_properties_change(new: Any, old: Any) -> list[ClusterEvent]:
    """Upstream ``PodSchedulingPropertiesChange``: the update sub-events of a pod update, in upstream order.

    The resource is ``AssignedPod`` if the new pod is bound, else ``UnschedulablePod``. An update that fits
    no sub-kind yields one generic ``Update`` event, which only plugins registering every pod update see.
    """
    new_pod, old_pod = as_pod(new), as_pod(old)
    if new_pod is None or old_pod is None:
        raise ValueError("a pod update needs both the old and the new pod")
    resource = EventResource.ASSIGNED_POD if new_pod.node_name else EventResource.UNSCHEDULED_POD
    events = [
        ClusterEvent(resource, action)
        for extract in _POD_EXTRACTORS
        if (action := extract(new_pod, old_pod)) != ActionType.NONE
    ]
    return events or [ClusterEvent(resource, ActionType.UPDATE)]


def pod_events(old: Any, new: Any) -> list[ClusterEvent]:
    """The events of one pod watch event (add: ``old`` None; delete: ``new`` None), as upstream's handlers
    classify them: a pod that just got bound is an ``AssignedPod`` add, not an update."""
    old_pod, new_pod = as_pod(old), as_pod(new)
    if old_pod is None and new_pod is None:
        return []
    if old_pod is None:
        assert new_pod is not None
        return [EVENT_ASSIGNED_POD_ADD if new_pod.node_name else EVENT_UNSCHEDULED_POD_ADD]
    if new_pod is None:
        return [EVENT_ASSIGNED_POD_DELETE if old_pod.node_name else EVENT_UNSCHEDULED_POD_DELETE]
    if new_pod.node_name and not old_pod.node_name:
        return [EVENT_ASSIGNED_POD_ADD]
    return pod_scheduling_properties_change(new_pod, old_pod)


# -- nodes -------------------------------------------------------------------------------------------------
def _quantities(raw: Mapping[str, Any] | None) -> dict[str, Fraction | str]:
    """A resource list compared semantically (``1`` equals ``1000m``); unparsable values compare as text."""
    result: dict[str, Fraction | str] = {}
    for name, value in (raw or {}).items():
        try:
            result[name] = parse_quantity(value)
        except (QuantityError, ValueError, TypeError):
            result[name] = str(value)
    return result


def _taints(node: Mapping[str, Any]) -> list[tuple[str, str, str, Any]]:
    return [
        (t.get("key") or "", t.get("value") or "", t.get("effect") or "", t.get("timeAdded"))
        for t in _spec(node).get("taints") or ()
    ]


def _condition_statuses(node: Mapping[str, Any]) -> dict[str, str]:
    return {c.get("type") or "": c.get("status") or "" for c in _status(node).get("conditions") or ()}


def _node_unschedulable_cleared(new: Mapping[str, Any], old: Mapping[str, Any]) -> ActionType:
    # Only true → false can help a pod; upstream reports it as a taint update (there is no own sub-kind).
    was, now = bool(_spec(old).get("unschedulable")), bool(_spec(new).get("unschedulable"))
    return ActionType.UPDATE_NODE_TAINT if was != now and not now else ActionType.NONE


def _node_allocatable_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> ActionType:
    changed = _quantities(_status(new).get("allocatable")) != _quantities(_status(old).get("allocatable"))
    return ActionType.UPDATE_NODE_ALLOCATABLE if changed else ActionType.NONE


def _node_labels_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> ActionType:
    changed = dict(_meta(new).get("labels") or {}) != dict(_meta(old).get("labels") or {})
    return ActionType.UPDATE_NODE_LABEL if changed else ActionType.NONE


def _node_taints_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> ActionType:
    return ActionType.UPDATE_NODE_TAINT if _taints(new) != _taints(old) else ActionType.NONE


def _node_conditions_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> ActionType:
    # Only each condition's status counts: heartbeat timestamps change every few seconds and mean nothing.
    changed = _condition_statuses(new) != _condition_statuses(old)
    return ActionType.UPDATE_NODE_CONDITION if changed else ActionType.NONE


def _node_annotations_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> ActionType:
    changed = dict(_meta(new).get("annotations") or {}) != dict(_meta(old).get("annotations") or {})
    return ActionType.UPDATE_NODE_ANNOTATION if changed else ActionType.NONE


def _node_declared_features_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> ActionType:
    # The API server keeps the list sorted, so comparing lists is comparing sets (upstream slices.Equal).
    changed = list(_status(new).get("declaredFeatures") or ()) != list(_status(old).get("declaredFeatures") or ())
    return ActionType.UPDATE_NODE_DECLARED_FEATURE if changed else ActionType.NONE


_NODE_EXTRACTORS: tuple[Callable[[Mapping[str, Any], Mapping[str, Any]], ActionType], ...] = (
    _node_unschedulable_cleared,
    _node_allocatable_changed,
    _node_labels_changed,
    _node_taints_changed,
    _node_conditions_changed,
    _node_annotations_changed,
    _node_declared_features_changed,
)


def node_scheduling_properties_change(new: Any, old: Any) -> list[ClusterEvent]:
    """Upstream ``NodeSchedulingPropertiesChange``: the update sub-events of a node update, upstream order.

    Unlike pods, a node update that changes nothing the scheduler looks at yields no event at all (status
    heartbeats, resourceVersion bumps). Taints and ``unschedulable: false`` both give ``UpdateNodeTaint``; it
    appears once even when both changed.
    """
    new_node, old_node = as_object(new), as_object(old)
    if new_node is None or old_node is None:
        raise ValueError("a node update needs both the old and the new node")
    actions: list[ActionType] = []
    for extract in _NODE_EXTRACTORS:
        action = extract(new_node, old_node)
        if action != ActionType.NONE and action not in actions:
            actions.append(action)
    return [ClusterEvent(EventResource.NODE, action) for action in actions]


def node_events(old: Any, new: Any) -> list[ClusterEvent]:
    """The events of one node watch event (add: ``old`` None; delete: ``new`` None)."""
    if old is None and new is None:
        return []
    if old is None:
        return [EVENT_NODE_ADD]
    if new is None:
        return [EVENT_NODE_DELETE]
    return node_scheduling_properties_change(new, old)


def object_events(resource: EventResource, old: Any, new: Any) -> list[ClusterEvent]:
    """The events of a watch event on any kind: pods and nodes get their sub-kinds, others Add/Update/Delete."""
    if resource in (EventResource.POD, EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD):
        return pod_events(old, new)
    if resource is EventResource.NODE:
        return node_events(old, new)
    if old is None and new is None:
        return []
    if old is None:
        return [ClusterEvent(resource, ActionType.ADD)]
    if new is None:
        return [ClusterEvent(resource, ActionType.DELETE)]
    return [ClusterEvent(resource, ActionType.UPDATE)]
