"""Which cluster events can undo each in-tree plugin's rejection, and the QueueingHints that judge them.

This is upstream's ``EventsToRegister`` of every in-tree plugin (v1.36.3, default feature gates: queueing
hints GA, InPlacePodVerticalScaling GA, DRAExtendedResource beta on, SchedulerAsyncPreemption beta on),
restated. The scheduling queue keeps a pod in ``unschedulablePods`` until an event arrives that one of the
plugins that rejected it registered here, *and* that plugin's hint says ``Queue`` for this pod and this
old/new object pair. A good hint saves cycles; a wrong ``QueueSkip`` strands a pod until the 5-minute
flush, so every hint here errs towards ``Queue`` when unsure.

Only plugins that can reject (PreEnqueue, PreFilter, Filter, Reserve, Permit) take part. Score-only plugins
(ImageLocality, NodeResourcesBalancedAllocation) register nothing: they never reject. A plugin unknown to
this module is registered for every event with an always-Queue hint (``events.ALL_EVENTS``), as upstream
does for plugins that do not implement ``EnqueueExtensions``.

Hints receive the rejected pod as :class:`~kopf_scheduler.state.pod_info.PodInfo`, pod event objects as
PodInfo or API dicts, and node / DeviceClass objects as API dicts. Where this port simplifies:

- PodTopologySpread: for a pod without its own constraints the defaulted constraints' selectors (built from
  the pod's Services and controllers) are not rebuilt; such a constraint is taken to match every pod (Queue).
- NodeResourcesFit: the Node hint's "would the pod fit an empty node" check looks at the pod count and the
  requested cpu / memory / ephemeral-storage / scalar resources only; DRA-backed extended resources are not
  delegated to the DRA manager (a node without the resource reads as 0, so such pods may wait for the flush).
- TaintToleration: toleration comparison operators (``Gt``/``Lt``, alpha, off) are not supported.
- NodeAffinity: a malformed ``addedAffinity`` is ignored here (the profile builder rejects it).
- DefaultPreemption registers ``Pod/Delete`` with an always-QueueSkip hint, as upstream's async-preemption
  path; it only matters if a PreEnqueue of DefaultPreemption ever gates pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kopf_scheduler.framework.events import (
    ALL_EVENTS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
    as_object,
    as_pod,
    nominated_node_name,
)
from kopf_scheduler.framework.extension_points import ALL_EXTENSION_POINTS, ExtensionPoint
from kopf_scheduler.state.node_affinity import (
    OBJECT_NAME_FIELD,
    NodeSelector,
    NodeSelectorTerm,
    RequiredNodeAffinity,
    parse_go_int64,
)
from kopf_scheduler.state.quantity import resource_value
from kopf_scheduler.state.selectors import NOTHING, LabelSelector, Requirement
from kopf_scheduler.state.taints import DO_NOT_SCHEDULE_EFFECTS
from kopf_scheduler.state.tolerations import Taint, first_untolerated, parse_taints, tolerates

if TYPE_CHECKING:
    from kopf_scheduler.framework.profile import ResolvedProfile
    from kopf_scheduler.state.pod_info import PodInfo

QUEUE = QueueingHint.QUEUE
QUEUE_SKIP = QueueingHint.QUEUE_SKIP

#: The extension points whose plugins can reject a pod and therefore register events (upstream
#: ``shouldHaveEnqueueExtensions``).
REJECTING_EXTENSION_POINTS: frozenset[ExtensionPoint] = frozenset(
    {
        ExtensionPoint.PRE_ENQUEUE,
        ExtensionPoint.PRE_FILTER,
        ExtensionPoint.FILTER,
        ExtensionPoint.RESERVE,
        ExtensionPoint.PERMIT,
    }
)

_NODE = EventResource.NODE
_POD = EventResource.POD
_CPU, _MEMORY, _EPHEMERAL_STORAGE, _PODS = "cpu", "memory", "ephemeral-storage", "pods"
_UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"


# -- small helpers -------------------------------------------------------------------------------------------
def _event(resource: EventResource, action: ActionType) -> ClusterEvent:
    return ClusterEvent(resource, action)


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _name(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


def _node_pair(old: Any, new: Any) -> tuple[Mapping[str, Any] | None, Mapping[str, Any]]:
    original, modified = as_object(old), as_object(new)
    if modified is None:
        raise ValueError("node hint called without the new node")
    return original, modified


def _is_assigned_or_nominated(pod: PodInfo) -> bool:
    return bool(pod.node_name or nominated_node_name(pod))


def _arg(args: Any, name: str, default: Any) -> Any:
    """Read a field of a typed args model or a raw dict (profiles may carry either)."""
    if args is None:
        return default
    if isinstance(args, Mapping):
        return args.get(name, default)
    return getattr(args, name, default)


def _is_counted_resource(name: str) -> bool:
    """The names NodeResourcesFit compares: cpu, memory, ephemeral-storage and scalar resources (extended
    ``example.com/x``, ``hugepages-*``, prefixed native ``*kubernetes.io/*``, ``attachable-volumes-*``)."""
    return (
        name in (_CPU, _MEMORY, _EPHEMERAL_STORAGE)
        or "/" in name
        or name.startswith(("hugepages-", "attachable-volumes-"))
    )


def _allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {name: resource_value(name, value) for name, value in raw.items()}


# -- NodeResourcesFit ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _FitHints:
    ignored_resources: frozenset[str]
    ignored_groups: frozenset[str]

    def _ignored(self, name: str) -> bool:
        # Only extended resources can be ignored (upstream checks IsExtendedResourceName first).
        if "/" not in name or "kubernetes.io/" in name:
            return False
        return name in self.ignored_resources or name.split("/", 1)[0] in self.ignored_groups

    def _requested(self, pod: PodInfo) -> dict[str, int]:
        return {
            name: value
            for name, value in pod.requests.items()
            if value > 0 and _is_counted_resource(name) and not self._ignored(name)
        }

    def fits_empty_node(self, pod: PodInfo, node: Mapping[str, Any]) -> bool:
        """Upstream ``isFit``: would the pod fit this node if nothing ran on it?"""
        allocatable = _allocatable(node)
        if allocatable.get(_PODS, 0) < 1:
            return False
        return all(want <= allocatable.get(name, 0) for name, want in self._requested(pod).items())

    def any_requested_increased(self, pod: PodInfo, original: Mapping[str, Any], modified: Mapping[str, Any]) -> bool:
        """Upstream ``haveAnyRequestedResourcesIncreased``: more pods allowed, or more of something requested."""
        before, after = _allocatable(original), _allocatable(modified)
        if after.get(_PODS, 0) > before.get(_PODS, 0):
            return True
        return any(after.get(name, 0) > before.get(name, 0) for name in self._requested(pod))

    def after_pod_event(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A pod was deleted or scaled down (upstream ``isSchedulableAfterPodEvent``)."""
        original, modified = as_pod(old), as_pod(new)
        if modified is None:
            assert original is not None
            # Only a pod that held (or was promised) room on a node frees anything.
            return QUEUE if _is_assigned_or_nominated(original) else QUEUE_SKIP
        if modified.uid == pod.uid:
            return QUEUE  # the rejected pod itself asks for less now
        if not modified.node_name or original is None:
            return QUEUE_SKIP
        for name in self._requested(pod):
            if original.requests.get(name, 0) > modified.requests.get(name, 0):
                return QUEUE
        return QUEUE_SKIP

    def after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A node was added or its allocatable changed (upstream ``isSchedulableAfterNodeChange``)."""
        original, modified = _node_pair(old, new)
        if not self.fits_empty_node(pod, modified):
            return QUEUE_SKIP
        if original is None:
            return QUEUE
        return QUEUE if self.any_requested_increased(pod, original, modified) else QUEUE_SKIP

    @staticmethod
    def after_device_class_event(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A DeviceClass appeared or changed its extended resource name (DRAExtendedResource)."""
        original, modified = as_object(old), as_object(new)
        if modified is None:
            raise ValueError("DeviceClass hint called without the new object")
        new_name = (modified.get("spec") or {}).get("extendedResourceName") or ""
        if original is not None:
            if ((original.get("spec") or {}).get("extendedResourceName") or "") == new_name:
                return QUEUE_SKIP
        elif _DEVICE_CLASS_PREFIX + _name(modified) in pod.requests:
            return QUEUE
        return QUEUE if new_name and new_name in pod.requests else QUEUE_SKIP


def node_resources_fit_events(args: Any = None) -> list[ClusterEventWithHint]:
    fit = _FitHints(
        frozenset(_arg(args, "ignored_resources", ()) or ()),
        frozenset(_arg(args, "ignored_resource_groups", ()) or ()),
    )
    return [
        # Delete frees room; UpdatePodScaleDown because InPlacePodVerticalScaling is GA.
        ClusterEventWithHint(_event(_POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN), fit.after_pod_event),
        ClusterEventWithHint(_event(_NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE), fit.after_node_change),
        ClusterEventWithHint(
            _event(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE), fit.after_device_class_event
        ),
    ]


# -- TaintToleration -----------------------------------------------------------------------------------------
def _has_untolerated(node: Mapping[str, Any], pod: PodInfo) -> bool:
    taints = parse_taints((node.get("spec") or {}).get("taints"))
    return first_untolerated(taints, pod.tolerations, DO_NOT_SCHEDULE_EFFECTS) is not None


def taint_toleration_after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue only if the node went from having an untolerated NoSchedule/NoExecute taint to having none."""
    original, modified = _node_pair(old, new)
    was_untolerated = True if original is None else _has_untolerated(original, pod)
    return QUEUE if was_untolerated and not _has_untolerated(modified, pod) else QUEUE_SKIP


def _own_update(pod: PodInfo, new: Any) -> bool:
    modified = as_pod(new)
    if modified is None:
        raise ValueError("pod update hint called without the new pod")
    return modified.uid == pod.uid


def taint_toleration_after_pod_toleration_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The rejected pod gained a toleration."""
    return QUEUE if _own_update(pod, new) else QUEUE_SKIP


def taint_toleration_events(args: Any = None) -> list[ClusterEventWithHint]:
    return [
        ClusterEventWithHint(
            _event(_NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT), taint_toleration_after_node_change
        ),
        ClusterEventWithHint(
            _event(_POD, ActionType.UPDATE_POD_TOLERATION), taint_toleration_after_pod_toleration_change
        ),
    ]


# -- NodeUnschedulable ---------------------------------------------------------------------------------------
def node_unschedulable_after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A schedulable node appeared, or a node stopped being ``spec.unschedulable``."""
    original, modified = _node_pair(old, new)
    now_unschedulable = bool((modified.get("spec") or {}).get("unschedulable"))
    if original is None:
        return QUEUE_SKIP if now_unschedulable else QUEUE
    was_unschedulable = bool((original.get("spec") or {}).get("unschedulable"))
    return QUEUE if was_unschedulable and not now_unschedulable else QUEUE_SKIP


def node_unschedulable_after_pod_toleration_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The rejected pod now tolerates ``node.kubernetes.io/unschedulable:NoSchedule``."""
    modified = as_pod(new)
    if modified is None or modified.uid != pod.uid:
        return QUEUE_SKIP
    return QUEUE if tolerates(modified.tolerations, _UNSCHEDULABLE_TAINT) else QUEUE_SKIP


def node_unschedulable_events(args: Any = None) -> list[ClusterEventWithHint]:
    return [
        ClusterEventWithHint(
            _event(_NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT), node_unschedulable_after_node_change
        ),
        ClusterEventWithHint(
            _event(_POD, ActionType.UPDATE_POD_TOLERATION), node_unschedulable_after_pod_toleration_change
        ),
    ]


# -- NodeName ------------------------------------------------------------------------------------------------
def node_name_events(args: Any = None) -> list[ClusterEventWithHint]:
    # Only a new node can carry the wanted name; no hint (always Queue).
    return [ClusterEventWithHint(_event(_NODE, ActionType.ADD))]


# -- NodePorts -----------------------------------------------------------------------------------------------
def node_ports_after_pod_deleted(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A bound (or nominated) pod holding a host port the rejected pod wants went away."""
    deleted = as_pod(old)
    if deleted is None:
        raise ValueError("pod delete hint called without the deleted pod")
    if not _is_assigned_or_nominated(deleted) or not deleted.host_ports:
        return QUEUE_SKIP
    conflict = any(want.conflicts_with(used) for want in pod.host_ports for used in deleted.host_ports)
    return QUEUE if conflict else QUEUE_SKIP


def node_ports_events(args: Any = None) -> list[ClusterEventWithHint]:
    return [
        ClusterEventWithHint(_event(_POD, ActionType.DELETE), node_ports_after_pod_deleted),
        ClusterEventWithHint(_event(_NODE, ActionType.ADD)),
    ]


# -- NodeAffinity --------------------------------------------------------------------------------------------
def _requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    if req.operator in ("Gt", "Lt"):
        # Go integer semantics (node_affinity validated the wanted value at parse time).
        have = parse_go_int64(labels[req.key]) if req.key in labels else None
        want = parse_go_int64(req.values[0]) if req.values else None
        if have is None or want is None:
            return False
        return have > want if req.operator == "Gt" else have < want
    return req.matches(labels)


def _term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], name: str) -> bool:
    if term.is_empty or term.errors:
        return False
    if not all(_requirement_matches(req, labels) for req in term.labels or ()):
        return False
    for field_req in term.fields or ():
        hit = (name == field_req.value) if field_req.key == OBJECT_NAME_FIELD else field_req.value == ""
        if hit != (field_req.operator == "In"):
            return False
    return True


def node_selector_matches(selector: NodeSelector, node: Mapping[str, Any]) -> bool:
    """A parsed ``v1.NodeSelector`` against one node (terms ORed)."""
    labels, name = _labels(node), _name(node)
    return any(_term_matches(term, labels, name) for term in selector.terms)


def required_node_affinity_matches(pod: PodInfo, node: Mapping[str, Any]) -> bool:
    """Upstream ``GetRequiredNodeAffinity(pod).Match(node)`` for one node: nodeSelector AND required terms."""
    affinity = RequiredNodeAffinity.from_pod(pod)
    labels = _labels(node)
    if any(labels.get(key) != value for key, value in affinity.node_selector):
        return False
    return affinity.required is None or node_selector_matches(affinity.required, node)


@dataclass(frozen=True, slots=True)
class _NodeAffinityHints:
    added: NodeSelector | None

    def after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """The node now matches the pod's required affinity (and the profile's addedAffinity) and did not."""
        original, modified = _node_pair(old, new)
        if self.added is not None and not node_selector_matches(self.added, modified):
            return QUEUE_SKIP
        if not required_node_affinity_matches(pod, modified):
            return QUEUE_SKIP
        if original is None:
            return QUEUE
        return QUEUE_SKIP if required_node_affinity_matches(pod, original) else QUEUE


def node_affinity_events(args: Any = None) -> list[ClusterEventWithHint]:
    added_affinity = _arg(args, "added_affinity", None) or {}
    required = added_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    hints = _NodeAffinityHints(None if required is None else NodeSelector.parse(required))
    return [ClusterEventWithHint(_event(_NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL), hints.after_node_change)]


# -- PodTopologySpread ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _SpreadConstraint:
    topology_key: str
    #: None: the selector is not known here (defaulted constraints); it then matches every pod.
    selector: LabelSelector | None
    taints_honored: bool

    def selects(self, labels: Mapping[str, str]) -> bool:
        return self.selector is None or self.selector.matches(labels)


def _spread_constraints(pod: PodInfo, default_constraints: Sequence[Mapping[str, Any]]) -> list[_SpreadConstraint]:
    """The pod's hard (DoNotSchedule) constraints, as upstream's ``getConstraints``."""
    constraints: list[_SpreadConstraint] = []
    if pod.topology_spread_constraints:
        for raw in pod.topology_spread_constraints:
            if raw.get("whenUnsatisfiable") != "DoNotSchedule":
                continue
            selector = LabelSelector.parse(raw.get("labelSelector"))
            # matchLabelKeys: the pod's own values for those keys are ANDed into the selector.
            keys = [key for key in raw.get("matchLabelKeys") or () if key in pod.labels]
            selector = selector.and_requirements([Requirement(key, "In", (pod.labels[key],)) for key in keys])
            constraints.append(
                _SpreadConstraint(raw.get("topologyKey") or "", selector, raw.get("nodeTaintsPolicy") == "Honor")
            )
        return constraints
    for raw in default_constraints:
        if raw.get("whenUnsatisfiable") == "DoNotSchedule":
            constraints.append(
                _SpreadConstraint(raw.get("topologyKey") or "", None, raw.get("nodeTaintsPolicy") == "Honor")
            )
    return constraints


def _involved_in_spreading(incoming: PodInfo, pod: PodInfo) -> bool:
    if incoming.uid == pod.uid:
        return True
    if not _is_assigned_or_nominated(incoming):
        return False
    return incoming.namespace == pod.namespace


def _node_has_topology_keys(labels: Mapping[str, str], constraints: Sequence[_SpreadConstraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)


@dataclass(frozen=True, slots=True)
class _SpreadHints:
    default_constraints: tuple[Mapping[str, Any], ...]

    def after_pod_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A pod that counts in one of the pod's domains appeared, went, or changed labels (or tolerations)."""
        original, modified = as_pod(old), as_pod(new)
        if (modified is not None and not _involved_in_spreading(modified, pod)) or (
            original is not None and not _involved_in_spreading(original, pod)
        ):
            return QUEUE_SKIP
        constraints = _spread_constraints(pod, self.default_constraints)
        if modified is not None and original is not None:
            if (
                modified.uid == pod.uid
                and modified.tolerations != original.tolerations
                and any(c.taints_honored for c in constraints)
            ):
                return QUEUE
            if dict(modified.labels) == dict(original.labels):
                return QUEUE_SKIP
            if any(c.selects(original.labels) != c.selects(modified.labels) for c in constraints):
                return QUEUE
            return QUEUE_SKIP
        changed = modified if modified is not None else original
        assert changed is not None
        return QUEUE if any(c.selects(changed.labels) for c in constraints) else QUEUE_SKIP

    def after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A node carrying all the topology keys came, went, or changed a topology label or its taints."""
        original, modified = as_object(old), as_object(new)
        constraints = _spread_constraints(pod, self.default_constraints)
        original_labels = _labels(original) if original is not None else {}
        modified_labels = _labels(modified) if modified is not None else {}
        original_matching = original is not None and _node_has_topology_keys(original_labels, constraints)
        modified_matching = modified is not None and _node_has_topology_keys(modified_labels, constraints)
        if original is not None and modified is not None:
            if original_matching != modified_matching:
                return QUEUE
            if modified_matching and (
                any(
                    original_labels.get(c.topology_key, "") != modified_labels.get(c.topology_key, "")
                    for c in constraints
                )
                or parse_taints((original.get("spec") or {}).get("taints"))
                != parse_taints((modified.get("spec") or {}).get("taints"))
            ):
                return QUEUE
            return QUEUE_SKIP
        if modified is not None:
            return QUEUE if modified_matching else QUEUE_SKIP
        if original is None:
            raise ValueError("node hint called without any node")
        return QUEUE if original_matching else QUEUE_SKIP


def pod_topology_spread_events(args: Any = None) -> list[ClusterEventWithHint]:
    defaulting = _arg(args, "defaulting_type", "System")
    # The System defaults are ScheduleAnyway only, so they never make hard constraints.
    defaults = tuple(_arg(args, "default_constraints", ()) or ()) if defaulting == "List" else ()
    hints = _SpreadHints(defaults)
    return [
        ClusterEventWithHint(
            _event(
                _POD,
                ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.UPDATE_POD_TOLERATION | ActionType.DELETE,
            ),
            hints.after_pod_change,
        ),
        ClusterEventWithHint(
            _event(
                _NODE,
                ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT,
            ),
            hints.after_node_change,
        ),
    ]


# -- InterPodAffinity ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _AffinityTerm:
    """A required pod (anti-)affinity term as upstream's ``AffinityTerm`` (namespace selector unmerged)."""

    namespaces: frozenset[str]
    namespace_selector: LabelSelector
    selector: LabelSelector
    topology_key: str

    def matches(self, pod: PodInfo) -> bool:
        # Upstream's hints call Matches(pod, nil): a namespace selector sees no labels, so only `{}` matches.
        in_namespace = pod.namespace in self.namespaces or self.namespace_selector.matches({})
        return in_namespace and self.selector.matches(pod.labels)


def _required_terms(pod: PodInfo, kind: str) -> list[_AffinityTerm]:
    raw_terms = (pod.affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()
    terms = []
    for raw in raw_terms:
        names = raw.get("namespaces") or ()
        ns_selector_raw = raw.get("namespaceSelector")
        namespaces = frozenset([pod.namespace]) if not names and ns_selector_raw is None else frozenset(names)
        terms.append(
            _AffinityTerm(
                namespaces,
                NOTHING if ns_selector_raw is None else LabelSelector.parse(ns_selector_raw),
                LabelSelector.parse(raw.get("labelSelector")),
                raw.get("topologyKey") or "",
            )
        )
    return terms


def _matches_all_terms(terms: Sequence[_AffinityTerm], pod: PodInfo) -> bool:
    return bool(terms) and all(term.matches(pod) for term in terms)


def inter_pod_affinity_after_pod_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A bound pod now satisfies the pod's affinity, or no longer blocks it through anti-affinity."""
    original, modified = as_pod(old), as_pod(new)
    if modified is not None and original is not None and modified.uid == pod.uid:
        return QUEUE  # the pod's own labels changed: its existing anti-affinity peers may stop matching
    if (modified is not None and not _is_assigned_or_nominated(modified)) or (
        original is not None and not _is_assigned_or_nominated(original)
    ):
        return QUEUE_SKIP
    terms = _required_terms(pod, "podAffinity")
    anti_terms = _required_terms(pod, "podAntiAffinity")
    if modified is not None and original is not None:
        if not _matches_all_terms(terms, original) and _matches_all_terms(terms, modified):
            return QUEUE
        if _matches_all_terms(anti_terms, original) and not _matches_all_terms(anti_terms, modified):
            return QUEUE
        return QUEUE_SKIP
    if modified is not None:
        return QUEUE if _matches_all_terms(terms, modified) else QUEUE_SKIP
    assert original is not None
    if _matches_all_terms(anti_terms, original):
        return QUEUE
    # The deleted pod's own anti-affinity may have kept the pod away.
    return QUEUE if _matches_all_terms(_required_terms(original, "podAntiAffinity"), pod) else QUEUE_SKIP


def inter_pod_affinity_after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A node gained (affinity) or lost/changed (anti-affinity) a topology label the pod's terms use."""
    original, modified = _node_pair(old, new)
    modified_labels = _labels(modified)
    original_labels = _labels(original) if original is not None else {}
    for term in _required_terms(pod, "podAffinity"):
        if original is None:
            if term.topology_key in modified_labels:
                return QUEUE
            continue
        had, has = term.topology_key in original_labels, term.topology_key in modified_labels
        if (not had and has) or (
            had and has and original_labels[term.topology_key] != modified_labels[term.topology_key]
        ):
            return QUEUE
    for term in _required_terms(pod, "podAntiAffinity"):
        if original is None:
            return QUEUE
        had, has = term.topology_key in original_labels, term.topology_key in modified_labels
        if (had and not has) or (
            had and has and original_labels[term.topology_key] != modified_labels[term.topology_key]
        ):
            return QUEUE
    return QUEUE_SKIP


def inter_pod_affinity_events(args: Any = None) -> list[ClusterEventWithHint]:
    return [
        ClusterEventWithHint(
            _event(_POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE),
            inter_pod_affinity_after_pod_change,
        ),
        ClusterEventWithHint(
            _event(_NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL), inter_pod_affinity_after_node_change
        ),
    ]


# -- SchedulingGates -----------------------------------------------------------------------------------------
def scheduling_gates_after_gates_eliminated(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Only the pod's own update can lift its gates."""
    return QUEUE if _own_update(pod, new) else QUEUE_SKIP


def scheduling_gates_events(args: Any = None) -> list[ClusterEventWithHint]:
    return [
        ClusterEventWithHint(
            _event(_POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED), scheduling_gates_after_gates_eliminated
        )
    ]


# -- DefaultPreemption ---------------------------------------------------------------------------------------
def default_preemption_after_pod_deletion(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    # Upstream: the async preemption un-gates its pod itself (Activate); deletions never requeue.
    return QUEUE_SKIP


def default_preemption_events(args: Any = None) -> list[ClusterEventWithHint]:
    return [ClusterEventWithHint(_event(_POD, ActionType.DELETE), default_preemption_after_pod_deletion)]


def _no_events(args: Any = None) -> list[ClusterEventWithHint]:
    return []


#: In-tree plugin name → builder of its registrations from the plugin's args (typed model, dict or None).
IN_TREE: dict[str, Callable[[Any], list[ClusterEventWithHint]]] = {
    "NodeResourcesFit": node_resources_fit_events,
    "TaintToleration": taint_toleration_events,
    "NodeUnschedulable": node_unschedulable_events,
    "NodeName": node_name_events,
    "NodePorts": node_ports_events,
    "NodeAffinity": node_affinity_events,
    "PodTopologySpread": pod_topology_spread_events,
    "InterPodAffinity": inter_pod_affinity_events,
    "SchedulingGates": scheduling_gates_events,
    "DefaultPreemption": default_preemption_events,
    # Score-only / never-rejecting plugins: nothing to register.
    "ImageLocality": _no_events,
    "NodeResourcesBalancedAllocation": _no_events,
    "PrioritySort": _no_events,
    "DefaultBinder": _no_events,
}


def events_to_register(
    plugin_names: Iterable[str], plugin_args: Mapping[str, Any] | None = None
) -> dict[str, list[ClusterEventWithHint]]:
    """Registrations for a profile's plugins, ready for ``SchedulingQueue(plugin_events=...)``.

    Known in-tree plugins get their upstream lists (built with their args); any other name gets
    :data:`ALL_EVENTS` (always Queue), the fallback for plugins that declare nothing.
    """
    args = plugin_args or {}
    result: dict[str, list[ClusterEventWithHint]] = {}
    for name in plugin_names:
        builder = IN_TREE.get(name)
        result[name] = builder(args.get(name)) if builder is not None else list(ALL_EVENTS)
    return result


def events_for_profile(profile: ResolvedProfile) -> dict[str, list[ClusterEventWithHint]]:
    """:func:`events_to_register` for every plugin a profile enables at a point where it can reject."""
    names: dict[str, None] = {}
    for point in ALL_EXTENSION_POINTS:
        if point not in REJECTING_EXTENSION_POINTS:
            continue
        for ref in profile.enabled(point):
            names.setdefault(ref.name, None)
    return events_to_register(names, profile.plugin_args)
