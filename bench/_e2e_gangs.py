"""The gang workload of ``bench/e2e.py``: PodGroups of scheduling.k8s.io/v1alpha2 and their members.

Each gang is a PodGroup with ``schedulingPolicy.gang.minCount`` = its size and that many pods naming it in
``spec.schedulingGroup`` (pod-default otherwise), all created before the scheduler starts. kopf-scheduler schedules
them with a SchedulerProfile that enables GangScheduling (``examples/gang-scheduling.yaml``'s); kube-scheduler
runs with upstream's four workload-aware gates (:data:`KUBE_GATES`) and its default profile minus the two
TopologyAwareWorkloadScheduling plugins the gate adds, which our profile does not enable, so both run the same
plugins. After a run :func:`gang_outcome` counts the gangs bound whole, partly, or not at all (nothing may be lost:
a complete run has every gang whole). The light control plane runs no podgroup-protection controller, so
:func:`delete_pod_groups` drops the finalizer admission puts on every PodGroup before deleting them.

The same gangs as scheduler-plugins' Coscheduling PodGroups (``gangs-coscheduling``, issue 36's "within 10% of the
same gangs on the upstream API"): a ``scheduling.x-k8s.io/v1alpha1`` PodGroup with ``minMember`` = the size, its pods
labelled ``scheduling.x-k8s.io/pod-group``, scheduled by a profile with Coscheduling as
``examples/coscheduling.yaml`` configures it (:data:`KOPF_COSCHEDULING_SPEC`). kube-scheduler has no such plugin,
so only kopf-scheduler runs it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from tools.localcluster import feature_gates_flag

#: kube-scheduler's flags for the gang workload (the gates of the local control plane's API server).
KUBE_GATES = feature_gates_flag()
#: What the TopologyAwareWorkloadScheduling gate adds to kube-scheduler's default profile (upstream
#: ``applyTopologyAwareWorkloadScheduling``); GangScheduling, which its gate adds, stays.
KUBE_GATE_PLUGINS_NOT_IN_OUR_PROFILE = ("TopologyPlacementGenerator", "PodGroupPodsCount")
#: Pods per gang (the issue's "500 gangs of 8").
GANG_SIZE = 8
#: kopf-scheduler's profile for the gang workload: upstream's defaults and GangScheduling.
KOPF_GANG_SPEC: dict[str, Any] = {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}
POD_GROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/podgroups"
#: kopf-scheduler's profile for the topology-constrained gangs: GangScheduling and what upstream's
#: TopologyAwareWorkloadScheduling gate adds to the default profile (``applyTopologyAwareWorkloadScheduling``).
KOPF_TOPOLOGY_GANG_SPEC: dict[str, Any] = {
    "plugins": {
        "multiPoint": {
            "enabled": [
                {"name": "GangScheduling"},
                {"name": "TopologyPlacementGenerator"},
                {"name": "PodGroupPodsCount", "weight": 1},
            ]
        }
    }
}
#: The node label the topology-constrained gangs keep to (one value per rack of :data:`RACK_SIZE` nodes).
RACK_KEY = "topology.example.com/rack"
RACK_SIZE = 50
#: kopf-scheduler's profile for the Coscheduling gangs: scheduler-plugins' configuration of the plugin.
KOPF_COSCHEDULING_SPEC: dict[str, Any] = {
    "plugins": {
        "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
        "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
    }
}
COSCHEDULING_POD_GROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"


class Requests(Protocol):
    """What the harness's ``Api`` offers here."""

    async def request(
        self, method: str, path: str, *, body: Any = None, params: dict[str, str] | None = None, ok404: bool = False
    ) -> dict[str, Any]: ...

    async def merge_patch(self, path: str, body: dict[str, Any]) -> None: ...

    async def create_many(self, path: str, bodies: Sequence[dict[str, Any]], *, concurrency: int = 32) -> None: ...


def gang_name(pod_index: int, gang_size: int) -> str:
    return f"gang-{pod_index // gang_size:05d}"


def pod_group_manifest(name: str, min_count: int, *, topology: bool = False) -> dict[str, Any]:
    """Upstream's PodGroup; with ``topology`` its members must share one rack (``schedulingConstraints``)."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": RACK_KEY}]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def rack_of(node_index: int) -> str:
    return f"rack-{node_index // RACK_SIZE:03d}"


def coscheduling_pod_group_manifest(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }


def with_coscheduling_group(pod: dict[str, Any], group: str) -> dict[str, Any]:
    pod["metadata"]["labels"][COSCHEDULING_LABEL] = group
    pod["metadata"]["labels"]["gang"] = group
    return pod


def with_scheduling_group(pod: dict[str, Any], group: str) -> dict[str, Any]:
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    pod["metadata"]["labels"]["gang"] = group
    return pod


async def create_pod_groups(
    api: Requests, namespace: str, pods: int, gang_size: int, *, coscheduling: bool = False, topology: bool = False
) -> None:
    """One PodGroup per ``gang_size`` pods (the last one smaller if ``pods`` is not a multiple): upstream's (kept to
    one rack with ``topology``), or scheduler-plugins' with ``coscheduling``."""
    sizes = Counter(gang_name(i, gang_size) for i in range(pods))
    if coscheduling:
        groups = [coscheduling_pod_group_manifest(name, size) for name, size in sorted(sizes.items())]
        await api.create_many(COSCHEDULING_POD_GROUPS.format(namespace=namespace), groups)
        return
    groups = [pod_group_manifest(name, size, topology=topology) for name, size in sorted(sizes.items())]
    await api.create_many(POD_GROUPS.format(namespace=namespace), groups)


def gang_outcome(pod_names: Mapping[str, str], node_of: Mapping[str, str], gang_size: int) -> dict[str, int]:
    """Gangs bound whole, partly and not at all, and bound over more than one rack, from the watch's uid → name and
    uid → node (bound pods; a bench node's name ends in its index)."""
    size: Counter[str] = Counter()
    bound: Counter[str] = Counter()
    racks: dict[str, set[str]] = {}
    for uid, name in pod_names.items():
        gang = gang_name(int(name.rsplit("-", 1)[1]), gang_size)
        size[gang] += 1
        bound[gang] += uid in node_of
        if uid in node_of:
            racks.setdefault(gang, set()).add(rack_of(int(node_of[uid].rsplit("-", 1)[1])))
    whole = sum(1 for gang, n in size.items() if bound[gang] == n)
    unbound = sum(1 for gang in size if bound[gang] == 0)
    across = sum(1 for used in racks.values() if len(used) > 1)
    return {
        "gangs": len(size),
        "gangs_whole": whole,
        "gangs_partial": len(size) - whole - unbound,
        "gangs_across_racks": across,
    }


async def delete_pod_groups(
    api: Requests,
    namespace: str,
    for_each: Callable[[Sequence[str], Callable[[str], Awaitable[None]]], Awaitable[None]],
    *,
    coscheduling: bool = False,
) -> None:
    """Delete the run's PodGroups, their protection finalizers dropped first (no controller here does it).

    scheduler-plugins' PodGroups (``coscheduling``) carry no finalizer; left behind, they stayed in the next
    repetition's cluster with their pods gone, and its status keeper rightly moved each back to Pending (the
    controller does so for a group with fewer than minMember pods): 500 status writes in that repetition's
    measurement that were not its gangs' (the 1500 writes of docs/benchmarks.md's second Coscheduling runs)."""
    if coscheduling:
        await api.request("DELETE", COSCHEDULING_POD_GROUPS.format(namespace=namespace), ok404=True)
        return
    path = POD_GROUPS.format(namespace=namespace)
    listed = await api.request("GET", path, ok404=True)
    names = [item["metadata"]["name"] for item in listed.get("items") or []]

    async def unprotect(name: str) -> None:
        with contextlib.suppress(RuntimeError):  # already gone
            await api.merge_patch(f"{path}/{name}", {"metadata": {"finalizers": None}})

    await for_each(names, unprotect)
    await api.request("DELETE", path, ok404=True)
