"""TopologyPlacementGenerator: one placement per topology domain of a PodGroup's topology constraint (upstream
1.36's ``plugins/topologyaware/topology_placement.go``, alpha behind TopologyAwareWorkloadScheduling there;
enabled per profile here).

A PodGroup may ask that all its pods land in one domain of a node label (``spec.schedulingConstraints.topology[0]
.key``, e.g. a rack label). The pod-group cycle asks this plugin for placements: without a constraint the parent
placement (every node) as it is; with one, a placement per value of the label among the parent's nodes (nodes
without the label are in none), named after the value. Once members of the group are scheduled (assumed or bound,
as the cycle's snapshot of the group says), only their domain is offered: they must all share one, or the cycle
fails with upstream's error.

The PodGroup comes from ``cache.objects`` (upstream's lister) and the group's members from the cycle's pod-group
snapshot. Domains are offered in the order their first node appears in the parent placement (node-tree order);
upstream's come out of a Go map, in no order.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kopf_scheduler.framework import (
    SUCCESS,
    CycleState,
    Placement,
    PlacementGeneratePlugin,
    PodGroupInfo,
    PodInfo,
    Snapshot,
    Status,
)
from kopf_scheduler.go_format import go_quote
from kopf_scheduler.plugins.helper.pod_groups import POD_GROUP, pod_group_not_found
from kopf_scheduler.state.pod_group_state import PodGroupStateNotFound

NAME = "TopologyPlacementGenerator"


class DomainError(Exception):
    """The already scheduled members of a group do not name one domain (upstream's errors, texts included)."""


def topology_key(pod_group: dict[str, Any]) -> str | None:
    """The key of a PodGroup's (first and only) topology constraint; None without one."""
    constraints = (pod_group.get("spec") or {}).get("schedulingConstraints") or {}
    topology = constraints.get("topology") or []
    if not topology:
        return None
    return str((topology[0] or {}).get("key") or "")


class TopologyPlacementGenerator(PlacementGeneratePlugin):
    """Upstream's TopologyPlacement: a placement per domain of the PodGroup's topology key."""

    name: ClassVar[str] = NAME
    workload_aware: ClassVar[bool] = True

    def generate_placements(
        self, state: CycleState, pod_group: PodGroupInfo, parent: Placement
    ) -> tuple[list[Placement] | None, Status]:
        snapshot = self.handle.snapshot()
        obj = snapshot.cache.objects.get(POD_GROUP, pod_group.name, pod_group.namespace)
        if obj is None:
            return None, Status.as_error(LookupError(pod_group_not_found(pod_group.name)))
        key = topology_key(obj)
        if key is None:  # no constraint: the parent placement as it is
            return [parent], SUCCESS
        try:
            scheduled = snapshot.pod_group_states.get(pod_group.namespace, pod_group.name).scheduled_pods()
        except PodGroupStateNotFound as error:
            return None, Status.as_error(error)
        required: str | None = None
        if scheduled:
            try:
                required = scheduled_domain(snapshot, key, scheduled)
            except DomainError as error:
                text = f"cannot determine domain for already scheduled pods: {error}"
                return None, Status.as_error(DomainError(text))
        return domain_placements(snapshot, key, parent.nodes, required), SUCCESS


def scheduled_domain(snapshot: Snapshot, key: str, pods: list[PodInfo]) -> str:
    """Upstream ``getScheduledPodsTopologyDomain``: the one domain the scheduled members' nodes are in."""
    domain = ""
    for pod in pods:
        node = snapshot.cache.node(pod.node_name or "")
        if node is None:
            raise DomainError(
                f"getting node for pod {pod.key}: nodeinfo not found for node name {go_quote(pod.node_name or '')}"
            )
        found = node.labels.get(key)
        if found is None:
            raise DomainError(f"no topology domain found for pod {pod.key}")
        if domain and domain != found:
            raise DomainError(f"more than 1 domain found for pod group: {domain}, {found}")
        domain = found
    return domain


def domain_placements(snapshot: Snapshot, key: str, nodes: np.ndarray, required: str | None) -> list[Placement]:
    """A placement per value of label ``key`` among ``nodes`` (only ``required``'s when given), each holding its
    nodes in ``nodes``' order, in the order of the values' first nodes."""
    column = snapshot.table.label_column(key)
    if column is None or not len(nodes):
        return []
    ids = column.ids[nodes]
    if required is not None:
        wanted = column.value_ids.get(required)
        if wanted is None:
            return []
        ids = np.where(ids == wanted, ids, -1)
    present = ids >= 0
    values, first = np.unique(ids[present], return_index=True)
    placements: list[Placement] = []
    for value in values[np.argsort(first)].tolist():
        placements.append(Placement(column.values[value], nodes[ids == value]))
    return placements


__all__ = ["NAME", "DomainError", "TopologyPlacementGenerator", "domain_placements", "scheduled_domain", "topology_key"]
