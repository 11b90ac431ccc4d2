"""VolumeRestrictions: in-tree disks that cannot be shared, and ReadWriteOncePod claims (§2.13).

Upstream ``plugins/volumerestrictions``, v1.36. Two rules:

- *Disk conflicts*, per node: the pod's GCE PD, AWS EBS, iSCSI or RBD volume clashes with a volume of a pod
  already on the node when they name the same disk (PD name; EBS volume ID; iSCSI IQN; RBD sharing a Ceph
  monitor, pool and image), unless both mount it read-only (never allowed for EBS). Unschedulable
  ``node(s) had no available disk``.
- *ReadWriteOncePod*, cluster-wide: PreFilter looks up every claim the pod names (a missing one fails the
  pod with UUR and the lister's NotFound text) and counts its RWOP claims already used by a pod on some node
  (upstream's snapshot ``usedPVCSet``). Any: every node fails with Unschedulable
  ``node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by
  another pod``; AddPod/RemovePod adjust the count so preemption can free the claim.

PreFilter returns Skip when the pod has no such disk and no RWOP claim in use, so pods without volumes cost
one look at ``spec.volumes``.

QueueingHints: a pod deleted in the pod's namespace that held a conflicting disk or a claim the pod names;
a node added; a claim the pod names created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    FilterPlugin,
    FilterResult,
    NodeInfo,
    PodInfo,
    PreFilterPlugin,
    PreFilterResult,
    QueueingHint,
    Snapshot,
    Status,
    as_object,
    as_pod,
)
from kopf_scheduler.plugins.helper.volumes import (
    PVC_RESOURCE,
    READ_WRITE_ONCE_POD,
    claim_name,
    claim_names,
    has_access_mode,
    not_found_message,
    pod_volumes,
)
from kopf_scheduler.state.cache import ClusterCache

NAME = "VolumeRestrictions"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)

#: The in-tree volume sources whose disks cannot be shared freely (upstream ``needsRestrictionsCheck``).
RESTRICTED_SOURCES = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi")

Volume = Mapping[str, Any]


def needs_restrictions_check(volume: Volume) -> bool:
    return any(volume.get(source) is not None for source in RESTRICTED_SOURCES)


def _read_only(source: Mapping[str, Any]) -> bool:
    return bool(source.get("readOnly"))


def _same_disk(kind: str, mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    if kind == "gcePersistentDisk":
        return (mine.get("pdName") or "") == (theirs.get("pdName") or "")
    if kind == "awsElasticBlockStore":
        return (mine.get("volumeID") or "") == (theirs.get("volumeID") or "")
    if kind == "iscsi":
        return (mine.get("iqn") or "") == (theirs.get("iqn") or "")
    # rbd: at least one Ceph monitor in common, same pool and image.
    return (
        bool(set(mine.get("monitors") or ()) & set(theirs.get("monitors") or ()))
        and (mine.get("pool") or "") == (theirs.get("pool") or "")
        and (mine.get("image") or "") == (theirs.get("image") or "")
    )


def is_volume_conflict(volume: Volume, existing_volumes: Sequence[Volume]) -> bool:
    """Upstream ``isVolumeConflict``: does ``volume`` clash with one of another pod's volumes?"""
    for existing in existing_volumes:
        for kind in RESTRICTED_SOURCES:
            mine, theirs = volume.get(kind), existing.get(kind)
            if mine is None or theirs is None or not _same_disk(kind, mine, theirs):
                continue
            # An EBS volume conflicts even read-only; the others only unless both mount it read-only.
            if kind == "awsElasticBlockStore" or not (_read_only(mine) and _read_only(theirs)):
                return True
    return False


def satisfies_volume_conflicts(volumes: Sequence[Volume], pods: Any) -> bool:
    """Upstream ``satisfyVolumeConflicts``: none of ``volumes`` clashes with a volume of ``pods``."""
    restricted = [volume for volume in volumes if needs_restrictions_check(volume)]
    if not restricted:
        return True
    for other in pods:
        existing = pod_volumes(other)
        if existing and any(is_volume_conflict(volume, existing) for volume in restricted):
            return False
    return True


@dataclass(slots=True)
class PreFilterState:
    """The pod's RWOP claim names and how many references to them pods on nodes hold."""

    read_write_once_pod_claims: frozenset[str]
    conflicting_claim_refs: int

    def clone(self) -> PreFilterState:
        return PreFilterState(self.read_write_once_pod_claims, self.conflicting_claim_refs)

    def update_with_pod(self, other: PodInfo, multiplier: int) -> None:
        # As upstream: claim names only (the other pod's namespace is not compared).
        refs = sum(1 for name in claim_names(other) if name in self.read_write_once_pod_claims)
        self.conflicting_claim_refs += multiplier * refs


def is_claim_used_by_pods(cache: ClusterCache, namespace: str, name: str) -> bool:
    """Upstream ``StorageInfos().IsPVCUsedByPods``: a pod on a known node references ``namespace/name``."""
    for other in cache.pods_in_namespace(namespace):
        if name in claim_names(other) and cache.node(other.node_name) is not None:
            return True
    return False


class VolumeRestrictions(PreFilterPlugin, FilterPlugin):
    name: ClassVar[str] = NAME

    _disk_conflict = Status.unschedulable(ERR_REASON_DISK_CONFLICT, plugin=NAME)
    _rwop_conflict = Status.unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT, plugin=NAME)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        volumes = pod_volumes(pod)
        if not volumes:
            return None, Status.skip(plugin=NAME)
        needs_check = any(needs_restrictions_check(volume) for volume in volumes)
        storage = snapshot.cache.objects
        rwop: set[str] = set()
        for volume in volumes:
            name = claim_name(volume)
            if name is None:
                continue
            pvc = storage.pvc(pod.namespace, name)
            if pvc is None:
                return None, Status.unschedulable(not_found_message(PVC_RESOURCE, name), plugin=NAME, unresolvable=True)
            if has_access_mode(pvc, READ_WRITE_ONCE_POD):
                rwop.add(name)
        conflicts = sum(1 for name in rwop if is_claim_used_by_pods(snapshot.cache, pod.namespace, name))
        if not needs_check and conflicts == 0:
            return None, Status.skip(plugin=NAME)
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(frozenset(rwop), conflicts))
        return None, Status()

    # -- PreFilterExtensions --------------------------------------------------------------------------------
    def pre_filter_extensions(self) -> VolumeRestrictions:
        return self

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        return self._update_with_pod(state, pod_to_add, +1)

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        return self._update_with_pod(state, pod_to_remove, -1)

    def _update_with_pod(self, state: CycleState, other: PodInfo, multiplier: int) -> Status:
        found: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if found is None:
            return Status.as_error(KeyError(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState'), plugin=NAME)
        found.update_with_pod(other, multiplier)
        return Status()

    # -- Filter ---------------------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        volumes = pod_volumes(pod)
        restricted = [volume for volume in volumes if needs_restrictions_check(volume)]
        disk = np.zeros(len(nodes), dtype=bool)
        if restricted:
            for position, slot in enumerate(nodes):
                disk[position] = not satisfies_volume_conflicts(restricted, snapshot.node_info(int(slot)).pods.values())
        found: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if found is None:
            error = Status.as_error(KeyError(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState'), plugin=NAME)
            # Upstream checks the disks first: a node with a conflict still reports it.
            index = np.where(disk, 0, 1)
            return FilterResult(np.ones(len(nodes), dtype=bool), (self._disk_conflict, error), index)
        if found.conflicting_claim_refs > 0:
            index = np.where(disk, 0, 1)
            return FilterResult(np.ones(len(nodes), dtype=bool), (self._disk_conflict, self._rwop_conflict), index)
        return FilterResult.uniform(disk, self._disk_conflict) if disk.any() else None

    # -- EnqueueExtensions ----------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE), is_schedulable_after_pod_deleted),
            # With QueueingHints on (1.36 default) upstream registers only Node/Add.
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD), is_schedulable_after_pvc_added
            ),
        ]


def is_schedulable_after_pvc_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A claim the pod names was created in its namespace (the pod may have failed on its absence)."""
    pvc = as_object(new)
    if pvc is None:
        raise ValueError("PVC add hint called without the PVC")
    meta = pvc.get("metadata") or {}
    if (meta.get("namespace") or "") != pod.namespace:
        return QUEUE_SKIP
    return QUEUE if (meta.get("name") or "") in claim_names(pod) else QUEUE_SKIP


def is_schedulable_after_pod_deleted(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A pod of the same namespace went away that held a disk the pod clashes with, or a claim it names."""
    deleted = as_pod(old)
    if deleted is None:
        raise ValueError("pod delete hint called without the deleted pod")
    if deleted.namespace != pod.namespace:
        return QUEUE_SKIP
    if not satisfies_volume_conflicts(pod_volumes(pod), (deleted,)):
        return QUEUE
    # Any shared claim name queues: upstream does not look the claim's access mode up here.
    return QUEUE if set(claim_names(pod)) & set(claim_names(deleted)) else QUEUE_SKIP
