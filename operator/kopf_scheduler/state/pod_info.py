"""PodInfo: a pod parsed once into what the scheduler needs, with upstream's resource accounting.

Parsing a pod's requests, ports and tolerations is the same work every cycle; upstream caches it in its
own PodInfo and so do we. ``requests`` and ``non_zero_requests`` follow component-helpers'
``PodRequests`` (reference §3): containers summed, init containers walked with restartable sidecars
accumulating, the element-wise max of the two, pod-level resources replacing the aggregate, overhead on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.state.quantity import resource_value
from kopf_scheduler.state.tolerations import Toleration, parse_tolerations

#: Upstream's defaults for containers that name no CPU/memory request (used only for scoring).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

#: Pod-level ``spec.resources`` may set only these (and ``hugepages-*``).
_POD_LEVEL_RESOURCES = ("cpu", "memory")

Resources = dict[str, int]


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
    """What the scheduler reads of one pod. ``obj`` keeps the raw API object for anything rarer."""

    obj: dict[str, Any]
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

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> PodInfo:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        containers = spec.get("containers") or []
        init_containers = spec.get("initContainers") or []
        requests, non_zero = pod_requests(spec)
        return cls(
            obj=obj,
            uid=meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            namespace=meta.get("namespace") or "default",
            name=meta.get("name") or "",
            labels=dict(meta.get("labels") or {}),
            priority=int(spec.get("priority") or 0),
            scheduler_name=spec.get("schedulerName") or "default-scheduler",
            node_name=spec.get("nodeName") or "",
            phase=status.get("phase") or "",
            terminating=meta.get("deletionTimestamp") is not None,
            scheduling_gates=tuple(g.get("name", "") for g in spec.get("schedulingGates") or ()),
            node_selector=dict(spec.get("nodeSelector") or {}),
            affinity=dict(spec.get("affinity") or {}),
            tolerations=parse_tolerations(spec.get("tolerations")),
            topology_spread_constraints=tuple(spec.get("topologySpreadConstraints") or ()),
            host_ports=_host_ports(containers, init_containers),
            images=tuple(c.get("image", "") for c in (*init_containers, *containers)),
            num_containers=len(containers) + len(init_containers),
            requests=requests,
            non_zero_cpu=non_zero.get("cpu", 0),
            non_zero_memory=non_zero.get("memory", 0),
        )


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _host_ports(containers: list[dict[str, Any]], init_containers: list[dict[str, Any]]) -> tuple[HostPort, ...]:
    ports: list[HostPort] = []
    for container in (*containers, *(c for c in init_containers if _is_sidecar(c))):
        for port in container.get("ports") or ():
            host_port = int(port.get("hostPort") or 0)
            if host_port > 0:
                ports.append(HostPort(port.get("protocol") or "TCP", port.get("hostIP") or "0.0.0.0", host_port))
    return tuple(ports)


def _container_requests(container: Mapping[str, Any], *, non_zero: bool) -> Resources:
    raw = (container.get("resources") or {}).get("requests") or {}
    result = {name: resource_value(name, value) for name, value in raw.items()}
    if non_zero:
        result.setdefault("cpu", DEFAULT_MILLI_CPU_REQUEST)
        result.setdefault("memory", DEFAULT_MEMORY_REQUEST)
    return result


def _add(into: Resources, other: Mapping[str, int]) -> None:
    for name, value in other.items():
        into[name] = into.get(name, 0) + value


def _max(into: Resources, other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > into.get(name, 0):
            into[name] = value


def _aggregate(spec: Mapping[str, Any], *, non_zero: bool) -> Resources:
    total: Resources = {}
    for container in spec.get("containers") or ():
        _add(total, _container_requests(container, non_zero=non_zero))
    init_max: Resources = {}
    sidecars: Resources = {}
    for container in spec.get("initContainers") or ():
        requests = _container_requests(container, non_zero=non_zero)
        if _is_sidecar(container):
            _add(total, requests)
            _add(sidecars, requests)
            candidate = dict(sidecars)
        else:
            candidate = dict(requests)
            _add(candidate, sidecars)
        _max(init_max, candidate)
    _max(total, init_max)
    pod_level = (spec.get("resources") or {}).get("requests") or {}
    for name, value in pod_level.items():
        if name in _POD_LEVEL_RESOURCES or name.startswith("hugepages-"):
            total[name] = resource_value(name, value)
    _add(total, {name: resource_value(name, value) for name, value in (spec.get("overhead") or {}).items()})
    return total


def pod_requests(spec: Mapping[str, Any]) -> tuple[Resources, Resources]:
    """(real requests, requests with non-zero CPU/memory defaults) of a pod spec."""
    return _aggregate(spec, non_zero=False), _aggregate(spec, non_zero=True)
