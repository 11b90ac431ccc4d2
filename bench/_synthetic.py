"""Synthetic clusters and pods for the algorithm benchmark, shaped like upstream's ``scheduler_perf`` templates.

Upstream's scheduler_perf creates nodes from ``node-default.yaml`` (4 CPU, 32Gi, 110 pods) and pods from
``pod-default.yaml`` (requests 100m CPU / 500Mi). We use the same sizes so our numbers can be read next to
theirs, add the labels the topology-aware workloads need (hostname, one of three zones, one region), and build
everything as API-shaped dicts fed through :class:`ClusterCache`'s public methods, exactly as watch events
would be, so the benchmark measures the cache and plugins the operator really runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kopf_scheduler.state.cache import ClusterCache

NAMESPACE = "bench"
HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"
REGION_KEY = "topology.kubernetes.io/region"
ZONES = ("zone-a", "zone-b", "zone-c")
REGION = "region-1"
EXISTING_PODS_PER_NODE = 2

#: scheduler_perf's node-default.yaml.
NODE_ALLOCATABLE: dict[str, str | int] = {"cpu": "4", "memory": "32Gi", "pods": 110}
#: scheduler_perf's pod-default.yaml.
POD_REQUESTS: dict[str, str] = {"cpu": "100m", "memory": "500Mi"}
#: The label every pre-existing pod carries; workload (c)'s required affinity points at it.
EXISTING_LABELS: dict[str, str] = {"app": "existing", "tier": "backend"}

PodFactory = Callable[[int], dict[str, Any]]


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def make_node(index: int) -> dict[str, Any]:
    name = node_name(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"node-uid-{index}",
            "labels": {HOSTNAME_KEY: name, ZONE_KEY: ZONES[index % len(ZONES)], REGION_KEY: REGION},
        },
        "spec": {},
        "status": {"allocatable": dict(NODE_ALLOCATABLE), "capacity": dict(NODE_ALLOCATABLE)},
    }


def _pod(
    name: str, labels: dict[str, str], *, node: str = "", extra_spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "containers": [
            {"name": "pause", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": dict(POD_REQUESTS)}}
        ],
        **(extra_spec or {}),
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "labels": dict(labels)},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def make_cluster(num_nodes: int) -> ClusterCache:
    """``num_nodes`` nodes, each already running :data:`EXISTING_PODS_PER_NODE` plain pods."""
    cache = ClusterCache()
    for i in range(num_nodes):
        cache.add_or_update_node(make_node(i))
    for i in range(num_nodes):
        for j in range(EXISTING_PODS_PER_NODE):
            cache.add_or_update_pod(_pod(f"existing-{i}-{j}", EXISTING_LABELS, node=node_name(i)))
    return cache


# -- the workloads ---------------------------------------------------------------------------------------
def plain_pod(index: int) -> dict[str, Any]:
    """(a) requests only: the Filter/Score path every pod takes."""
    return _pod(f"plain-{index}", {"app": "plain"})


def spread_pod(index: int) -> dict[str, Any]:
    """(b) one hard PodTopologySpread constraint over zones, selecting the workload's own pods."""
    labels = {"app": "spread"}
    constraint = {
        "maxSkew": 1,
        "topologyKey": ZONE_KEY,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": labels},
    }
    return _pod(f"spread-{index}", labels, extra_spec={"topologySpreadConstraints": [constraint]})


def affinity_pod(index: int) -> dict[str, Any]:
    """(c) required zone affinity to the existing pods, preferred hostname anti-affinity to its own kind."""
    labels = {"app": "affinity"}
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": EXISTING_LABELS["app"]}}, "topologyKey": ZONE_KEY}
            ]
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME_KEY},
                }
            ]
        },
    }
    return _pod(f"affinity-{index}", labels, extra_spec={"affinity": affinity})


#: Workload name → pod factory, in report order.
WORKLOADS: dict[str, PodFactory] = {
    "plain": plain_pod,
    "topology-spread": spread_pod,
    "inter-pod-affinity": affinity_pod,
}
