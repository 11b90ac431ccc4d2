"""PodInfo: a pod parsed once into what the scheduler needs, with upstream's resource accounting.

Parsing a pod's requests, ports and tolerations is the same work every cycle; upstream caches it in its
own PodInfo and so do we. ``requests``, ``non_zero_cpu`` and ``non_zero_memory`` follow component-helpers'
``PodRequests`` and the scheduler's ``PodInfo.CalculateResource`` of v1.36 (reference §3): containers summed,
init containers walked with restartable sidecars accumulating, the element-wise max of the two, pod-level
resources replacing the aggregate, overhead on top, and containers being resized in place counted at the
largest of desired, actuated and allocated requests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from sys import intern
from typing import Any

from kopf_scheduler import json_codec
from kopf_scheduler.state.quantity import parse_quantity
from kopf_scheduler.state.tolerations import Toleration, parse_tolerations

#: Upstream's defaults for containers that name no CPU/memory request (used only for scoring).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

#: Pod-level ``spec.resources`` may set only these (and ``hugepages-*``).
_POD_LEVEL_RESOURCES = ("cpu", "memory")

Resources = dict[str, int]
#: A pod group as upstream keys its state: (namespace, podGroupName).
PodGroupKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class HostPort:
    """One wanted host port; empty protocol means TCP and empty IP means 0.0.0.0 (upstream defaults)."""

    protocol: str
    host_ip: str
    port: int

    def conflicts_with(self, other: HostPort) -> bool:
        if self.protocol != other.protocol or self.port != other.port:
            return False
        return self.host_ip == "0.0.0.0" or other.host_ip == "0.0.0.0" or self.host_ip == other.host_ip


@dataclass(slots=True, eq=False)
class PodInfo:
    """What the scheduler reads of one pod. ``obj`` keeps the raw API object for anything rarer.

    The object is held as compact JSON once the event handlers have stored the pod (:meth:`compact`) and
    decoded again on the first read of ``obj``: nearly everything the scheduler reads of a pod is parsed into
    the fields below, and a pod's object as Python dicts is ~6.6 KB against ~1 KB of JSON, which at 50000
    pods was most of the operator's memory (docs/benchmarks.md).
    """

    raw: dict[str, Any] | bytes
    uid: str
    namespace: str
    name: str
    labels: dict[str, str]
    priority: int
    scheduler_name: str
    node_name: str
    phase: str
    terminating: bool
    scheduling_gates: tuple[str, ...]
    node_selector: dict[str, str]
    affinity: dict[str, Any]
    tolerations: tuple[Toleration, ...]
    topology_spread_constraints: tuple[dict[str, Any], ...]
    host_ports: tuple[HostPort, ...]
    images: tuple[str, ...]
    num_containers: int
    #: Real requests (no defaults); what Filter and BalancedAllocation compare.
    requests: Resources
    #: CPU (millicores) and memory (bytes) with upstream's non-zero defaults; what Least/MostAllocated use.
    non_zero_cpu: int
    non_zero_memory: int
    #: Plugins park parsed pod-side data here under their own name (e.g. parsed affinity terms).
    memo: dict[str, Any] = field(default_factory=dict)
    #: ``metadata.resourceVersion``: what the event handlers compare a repeated version by, without decoding
    #: a compact object (which would keep it decoded).
    resource_version: str = ""
    #: ``status.nominatedNodeName`` (the queue's nominator reads it as pods enter, compact or not).
    nominated_node: str = ""
    #: ``status.startTime`` as written (preemption orders victims by it: read without decoding a compact object).
    start_time: str = ""
    #: ``spec.schedulingGroup.podGroupName``: the pod group of workload-aware scheduling the pod belongs to, None
    #: for the pods of no group (nearly all). Parsed with the spec, so a compact pod is never decoded to ask.
    scheduling_group: str | None = None
    #: The ``scheduling.x-k8s.io/pod-group`` label: the PodGroup of scheduler-plugins' Coscheduling the pod belongs
    #: to, None without the label (or with an empty one, as scheduler-plugins reads it). Read with the labels.
    coscheduling_group: str | None = None

    @property
    def scheduling_group_key(self) -> PodGroupKey | None:
        """(namespace, podGroupName), the key upstream keeps the group's state by; None without a group."""
        group = self.scheduling_group
        return None if group is None else (self.namespace, group)

    @property
    def coscheduling_group_key(self) -> PodGroupKey | None:
        """(namespace, pod-group label), the key Coscheduling's groups are kept by; None without the label."""
        group = self.coscheduling_group
        return None if group is None else (self.namespace, group)

    @property
    def in_pod_group(self) -> bool:
        """A member of a group of either gang API (what the cache's group states hold)."""
        return self.scheduling_group is not None or self.coscheduling_group is not None

    @property
    def obj(self) -> dict[str, Any]:
        """The pod's API object (decoded once after :meth:`compact`, then kept as a dict again)."""
        raw = self.raw
        if isinstance(raw, bytes):
            raw = self.raw = json_codec.loads(raw)
        return raw

    def may_have_field(self, name: str) -> bool:
        """False when the object surely has no field ``name`` anywhere: it is compact and its JSON never names it
        (our encoders never escape ASCII). Lets rare-field checks (volumes, resource claims) skip decoding a
        compact pod, which would also keep it decoded until its next event."""
        raw = self.raw
        return not isinstance(raw, bytes) or f'"{name}"'.encode() in raw

    def compact(self) -> None:
        """Keep the object as compact JSON until it is read again (an object JSON cannot hold stays as is)."""
        raw = self.raw
        if isinstance(raw, dict):
            with contextlib.suppress(TypeError, ValueError):
                self.raw = json_codec.dumps(raw)

    @property
    def key(self) -> str:
        """``namespace/name``, as upstream prints pods in events and logs."""
        return f"{self.namespace}/{self.name}"

    @property
    def has_required_anti_affinity(self) -> bool:
        return bool(self.affinity.get("podAntiAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution"))

    @property
    def has_pod_affinity_terms(self) -> bool:
        """Any pod (anti-)affinity at all, required or preferred (upstream ``PodsWithAffinity``)."""
        return bool(self.affinity.get("podAffinity") or self.affinity.get("podAntiAffinity"))

    def with_obj(self, obj: dict[str, Any]) -> PodInfo:
        """This pod's parse for a newer version ``obj`` of it whose :func:`same_scheduling_inputs` hold (with
        ``but_labels``: its labels are read again); plugins' memos start empty (they may read more of the
        object than the parse does)."""
        labels = _labels(obj)
        return dataclasses.replace(
            self,
            raw=obj,
            labels=labels,
            coscheduling_group=intern(group) if (group := labels.get(COSCHEDULING_POD_GROUP_LABEL)) else None,
            memo={},
            resource_version=_resource_version(obj),
            nominated_node=_nominated_node(obj),
            start_time=_start_time(obj),
        )

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> PodInfo:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        containers = spec.get("containers") or []
        init_containers = spec.get("initContainers") or []
        requests, non_zero_cpu, non_zero_memory = pod_resources(obj)
        labels = _labels(obj)
        return cls(
            raw=obj,
            uid=pod_uid(obj),
            namespace=intern(meta.get("namespace") or "default"),
            name=meta.get("name") or "",
            labels=labels,
            priority=int(spec.get("priority") or 0),
            scheduler_name=intern(spec.get("schedulerName") or "default-scheduler"),
            node_name=intern(spec.get("nodeName") or ""),
            phase=intern(status.get("phase") or ""),
            terminating=meta.get("deletionTimestamp") is not None,
            scheduling_gates=tuple(g.get("name", "") for g in spec.get("schedulingGates") or ()),
            node_selector=dict(spec.get("nodeSelector") or {}),
            affinity=dict(spec.get("affinity") or {}),
            tolerations=parse_tolerations(spec.get("tolerations")),
            topology_spread_constraints=tuple(spec.get("topologySpreadConstraints") or ()),
            host_ports=_host_ports(containers, init_containers),
            images=tuple(intern(c.get("image", "")) for c in (*init_containers, *containers)),
            num_containers=len(containers) + len(init_containers),
            requests=requests,
            non_zero_cpu=non_zero_cpu,
            non_zero_memory=non_zero_memory,
            resource_version=_resource_version(obj),
            nominated_node=_nominated_node(obj),
            start_time=_start_time(obj),
            scheduling_group=_scheduling_group(spec),
            coscheduling_group=intern(group) if (group := labels.get(COSCHEDULING_POD_GROUP_LABEL)) else None,
        )


#: The label that names a pod's Coscheduling PodGroup (scheduler-plugins' ``v1alpha1.PodGroupLabel``). A pod's
#: ``coscheduling_group`` is its value, interned (read inline where a PodInfo is built: every pod's hot path); an
#: empty value is no group (scheduler-plugins' ``GetPodGroupFullName`` treats it so).
COSCHEDULING_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def _scheduling_group(spec: Mapping[str, Any]) -> str | None:
    """``spec.schedulingGroup.podGroupName`` (interned: a group's pods share it). The API requires the name
    whenever the field is set; a group without one counts as none (upstream would dereference a nil name)."""
    group = spec.get("schedulingGroup")
    if group is None:  # nearly every pod: no ABC isinstance on the pod-event path
        return None
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return intern(name) if isinstance(name, str) else None


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _resource_version(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion") or ""


def _nominated_node(obj: Mapping[str, Any]) -> str:
    return (obj.get("status") or {}).get("nominatedNodeName") or ""


def _start_time(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("startTime") or "")


def pod_uid(obj: Mapping[str, Any]) -> str:
    """A pod object's uid (``namespace/name`` for the uid-less objects of tests), as :attr:`PodInfo.uid`."""
    meta = obj.get("metadata") or {}
    return meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"


#: The metadata :meth:`PodInfo.from_obj` reads.
_PARSED_METADATA = ("uid", "name", "namespace", "labels", "deletionTimestamp")
_PARSED_METADATA_BUT_LABELS = tuple(key for key in _PARSED_METADATA if key != "labels")


def same_scheduling_inputs(old: Mapping[str, Any], new: Mapping[str, Any], *, but_labels: bool = False) -> bool:
    """Whether :meth:`PodInfo.from_obj` would parse ``new`` exactly as ``old`` (with ``but_labels``: apart
    from the labels): the same spec, the metadata and phase it reads, and the resource status its accounting
    reads (in-place resizes). A Binding confirmed by the watch changes only what nothing parses
    (``status.conditions``, ``resourceVersion``) and, with the API server's PodTopologyLabels admission
    plugin (beta and on since 1.35), the labels: it copies the node's zone and region labels to the pod.
    The very same object may have been changed in place since it was parsed, so it never counts as
    unchanged."""
    if old is new or old.get("spec") != new.get("spec"):
        return False
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    compared = _PARSED_METADATA_BUT_LABELS if but_labels else _PARSED_METADATA
    if any(old_meta.get(key) != new_meta.get(key) for key in compared):
        return False
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    return old_status.get("phase") == new_status.get("phase") and _resource_status(old_status) == _resource_status(
        new_status
    )


def _resource_status(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a pod's status :func:`pod_request_list` reads."""
    containers = (*(status.get("containerStatuses") or ()), *(status.get("initContainerStatuses") or ()))
    return (
        [(c.get("name"), c.get("resources"), c.get("allocatedResources")) for c in containers],
        status.get("resources"),
        status.get("allocatedResources"),
        _resize_infeasible(status),
    )


def _host_ports(containers: list[dict[str, Any]], init_containers: list[dict[str, Any]]) -> tuple[HostPort, ...]:
    ports: list[HostPort] = []
    for container in (*containers, *(c for c in init_containers if _is_sidecar(c))):
        for port in container.get("ports") or ():
            host_port = int(port.get("hostPort") or 0)
            if host_port > 0:
                ports.append(HostPort(port.get("protocol") or "TCP", port.get("hostIP") or "0.0.0.0", host_port))
    return tuple(ports)


# -- resource accounting (component-helpers ``resource.PodRequests``, scheduler ``PodInfo.CalculateResource``) --
#
# Quantities are summed exactly (as ``resource.Quantity`` does) and only turned into the scheduler's integers at
# the end, rounding up (``MilliValue`` for cpu, ``Value`` otherwise): two containers asking for 0.5m cpu each
# make 1m, not 2m. Feature gates are those of v1.36 defaults: PodLevelResources (beta, on),
# InPlacePodVerticalScaling (GA), InPlacePodLevelResourcesVerticalScaling (beta, on), SidecarContainers (GA),
# DRANodeAllocatableResources (alpha, off).

#: An exact resource list, as upstream's ``v1.ResourceList`` (name → quantity).
ResourceList = dict[str, Fraction]

_CPU, _MEMORY, _EPHEMERAL_STORAGE = "cpu", "memory", "ephemeral-storage"
_HUGEPAGES_PREFIX = "hugepages-"
_ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"
_NATIVE_PREFIX = "kubernetes.io/"
_QUOTA_REQUESTS_PREFIX = "requests."
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_NON_MISSING_DEFAULTS: ResourceList = {
    _CPU: Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000),
    _MEMORY: Fraction(DEFAULT_MEMORY_REQUEST),
}


def _is_qualified_name(value: str) -> bool:
    """apimachinery ``IsQualifiedName``: ``[dns-subdomain/]name`` with a ≤63-character name part."""
    parts = value.split("/")
    if len(parts) > 2:
        return False
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return False
    name = parts[-1]
    return 0 < len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name) is not None


def is_prefixed_native_resource(name: str) -> bool:
    """v1helper ``IsPrefixedNativeResource``: the name lies in the ``*kubernetes.io/`` namespace."""
    return _NATIVE_PREFIX in name


def is_native_resource(name: str) -> bool:
    """v1helper ``IsNativeResource``: unprefixed names are implicitly native too."""
    return "/" not in name or is_prefixed_native_resource(name)


def is_extended_resource_name(name: str) -> bool:
    """v1helper ``IsExtendedResourceName``: a non-native, domain-prefixed name (``example.com/gpu``).

    Only these honour NodeResourcesFit's ``ignoredResources`` / ``ignoredResourceGroups``.
    """
    if is_native_resource(name) or name.startswith(_QUOTA_REQUESTS_PREFIX):
        return False
    return _is_qualified_name(_QUOTA_REQUESTS_PREFIX + name)


def is_scalar_resource_name(name: str) -> bool:
    """scheduler util ``IsScalarResourceName``: extended, hugepages, prefixed native or attachable volumes.

    These are the names (besides cpu, memory and ephemeral-storage) the scheduler's ``Resource`` keeps; any
    other name in a pod's requests or a node's allocatable is invisible to NodeResourcesFit.
    """
    return (
        is_extended_resource_name(name)
        or name.startswith(_HUGEPAGES_PREFIX)
        or is_prefixed_native_resource(name)
        or name.startswith(_ATTACHABLE_VOLUMES_PREFIX)
    )


def scheduler_value(name: str, quantity: Fraction) -> int:
    """The integer the scheduler compares: ``MilliValue`` for cpu, ``Value`` otherwise, both rounded up."""
    return math.ceil(quantity * 1000) if name == _CPU else math.ceil(quantity)


def _resource_list(raw: Mapping[str, Any] | None) -> ResourceList:
    return {name: parse_quantity(value) for name, value in (raw or {}).items()}


def _add_list(into: ResourceList, other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        into[name] = into.get(name, 0) + value


def _max_list(into: ResourceList, other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        if name not in into or value > into[name]:
            into[name] = value


def _max_of(first: ResourceList | None, *others: ResourceList | None) -> ResourceList:
    result = dict(first or {})
    for other in others:
        _max_list(result, other or {})
    return result


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _resize_infeasible(status: Mapping[str, Any]) -> bool:
    """component-helpers ``IsPodResizeInfeasible``: the first PodResizePending condition says Infeasible."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return False


def _effective_requests(
    spec: ResourceList, actuated: ResourceList | None, allocated: ResourceList | None, *, infeasible: bool
) -> ResourceList:
    """``determineEffectiveRequests``: during an in-place resize the largest of desired, actuated, allocated."""
    if infeasible:
        return _max_of(actuated, allocated)
    return _max_of(spec, actuated, allocated)


def is_pod_level_requests_set(spec: Mapping[str, Any]) -> bool:
    """``IsPodLevelRequestsSet``: ``spec.resources.requests`` names cpu, memory or a hugepages size."""
    requests = (spec.get("resources") or {}).get("requests") or {}
    return any(name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX) for name in requests)


def pod_request_list(obj: Mapping[str, Any], *, non_missing: Mapping[str, Fraction] | None = None) -> ResourceList:
    """component-helpers ``PodRequests`` with the options kube-scheduler 1.36 uses, as exact quantities.

    Containers are summed; init containers are walked in order, restartable (sidecar) ones accumulating, and
    the element-wise max of the two taken; pod-level ``spec.resources.requests`` replace the aggregate for
    cpu/memory/hugepages; ``spec.overhead`` is added. A container being resized in place counts with the
    largest of its desired, actuated and allocated requests (from ``status``); a pending pod has no status,
    so this is only visible for pods already on a node. ``non_missing`` fills in cpu/memory a container
    does not name at all (an explicit 0 stays 0), as ``NonMissingContainerRequests``.
    """
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    infeasible = _resize_infeasible(status)
    statuses: dict[str, Mapping[str, Any]] = {}
    for container_status in (*(status.get("containerStatuses") or ()), *(status.get("initContainerStatuses") or ())):
        statuses[container_status.get("name", "")] = container_status

    def container_requests(container: Mapping[str, Any], *, resizable: bool) -> ResourceList:
        requests = _resource_list((container.get("resources") or {}).get("requests"))
        container_status = statuses.get(container.get("name", "")) if resizable else None
        if container_status is not None and container_status.get("resources") is not None:
            actuated = _resource_list((container_status.get("resources") or {}).get("requests"))
            allocated = _resource_list(container_status.get("allocatedResources"))
            requests = _effective_requests(requests, actuated, allocated, infeasible=infeasible)
        if non_missing:
            for name, value in non_missing.items():
                requests.setdefault(name, value)
        return requests

    total: ResourceList = {}
    for container in spec.get("containers") or ():
        _add_list(total, container_requests(container, resizable=True))
    init_max: ResourceList = {}
    sidecars: ResourceList = {}
    for container in spec.get("initContainers") or ():
        sidecar = _is_sidecar(container)
        requests = container_requests(container, resizable=sidecar)
        if sidecar:
            _add_list(total, requests)
            _add_list(sidecars, requests)
            candidate = dict(sidecars)
        else:
            candidate = dict(requests)
            _add_list(candidate, sidecars)
        _max_list(init_max, candidate)
    _max_list(total, init_max)

    if is_pod_level_requests_set(spec):
        pod_level = _resource_list((spec.get("resources") or {}).get("requests"))
        effective: ResourceList | None = None
        pod_status_resources = status.get("resources")
        if pod_status_resources is not None:
            effective = _effective_requests(
                pod_level,
                _resource_list(pod_status_resources.get("requests")),
                _resource_list(status.get("allocatedResources")),
                infeasible=infeasible,
            )
        for name, value in pod_level.items():
            if name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX):
                total[name] = value if effective is None else effective.get(name, Fraction(0))

    _add_list(total, _resource_list(spec.get("overhead")))
    return total


def scheduler_resources(requests: Mapping[str, Fraction]) -> Resources:
    """framework ``Resource.Add``: the integers of cpu, memory, ephemeral-storage and scalar resources only."""
    return {
        name: scheduler_value(name, value)
        for name, value in requests.items()
        if name in (_CPU, _MEMORY, _EPHEMERAL_STORAGE) or is_scalar_resource_name(name)
    }


#: :func:`pod_resources` of pods whose accounting depends on their containers' requests alone, by those requests
#: (a cluster's pods come in few shapes; summing exact quantities is most of the cost of parsing a pod).
_RESOURCES_BY_SHAPE: dict[tuple[tuple[tuple[str, Any], ...], ...], tuple[Resources, int, int]] = {}
_MAX_SHAPES = 4096
#: The status fields an in-place resize fills (they go into the accounting of pods that have them).
_RESOURCE_STATUS_KEYS = ("containerStatuses", "initContainerStatuses", "resources", "allocatedResources")


def pod_resources(obj: Mapping[str, Any]) -> tuple[Resources, int, int]:
    """(requests, non-zero cpu, non-zero memory) of a pod as NodeInfo accounts it (``CalculateResource``).

    The non-zero variant gives containers that name no cpu/memory request 100m / 200Mi. With pod-level
    requests set, the defaults apply only to cpu/memory absent from the pod's whole request list.
    """
    shape = _requests_shape(obj)
    if shape is None:
        return _pod_resources(obj)
    found = _RESOURCES_BY_SHAPE.get(shape)
    if found is None:
        if len(_RESOURCES_BY_SHAPE) >= _MAX_SHAPES:
            _RESOURCES_BY_SHAPE.clear()
        found = _RESOURCES_BY_SHAPE[shape] = _pod_resources(obj)
    requests, non_zero_cpu, non_zero_memory = found
    return dict(requests), non_zero_cpu, non_zero_memory


def _requests_shape(obj: Mapping[str, Any]) -> tuple[tuple[tuple[str, Any], ...], ...] | None:
    """The containers' requests, if nothing else goes into the pod's accounting: no init containers, pod-level
    resources or overhead, no resource status (in-place resizes); None otherwise (or if a value is unhashable)."""
    spec = obj.get("spec") or {}
    if spec.get("initContainers") or spec.get("resources") or spec.get("overhead"):
        return None
    status = obj.get("status") or {}
    if any(status.get(key) for key in _RESOURCE_STATUS_KEYS):
        return None
    shape = tuple(
        tuple(((container.get("resources") or {}).get("requests") or {}).items())
        for container in spec.get("containers") or ()
    )
    try:
        hash(shape)
    except TypeError:
        return None
    return shape


def _pod_resources(obj: Mapping[str, Any]) -> tuple[Resources, int, int]:
    spec = obj.get("spec") or {}
    requests = pod_request_list(obj)
    if is_pod_level_requests_set(spec):
        non_missing = {name: value for name, value in _NON_MISSING_DEFAULTS.items() if name not in requests}
    else:
        non_missing = _NON_MISSING_DEFAULTS
    non_zero = pod_request_list(obj, non_missing=non_missing) if non_missing else requests
    return (
        scheduler_resources(requests),
        scheduler_value(_CPU, non_zero.get(_CPU, Fraction(0))),
        scheduler_value(_MEMORY, non_zero.get(_MEMORY, Fraction(0))),
    )


def pod_requests(spec: Mapping[str, Any], status: Mapping[str, Any] | None = None) -> tuple[Resources, Resources]:
    """(real requests, requests with the non-zero cpu/memory defaults) of a pod spec (and status)."""
    requests, non_zero_cpu, non_zero_memory = pod_resources({"spec": spec, "status": status or {}})
    return requests, {**requests, _CPU: non_zero_cpu, _MEMORY: non_zero_memory}
