"""ClusterCache: every node and every assigned, non-terminal pod, kept current from watch events.

Upstream's scheduler cache, restated: NodeInfo per node (its pods, used host ports, images), pods that
are *assumed* on a node the moment a cycle picks it (so the next cycle already sees the resources gone)
and *forgotten* if binding fails, plus the node tree that interleaves zones. Unlike upstream there is no
copying snapshot of the nodes: the scheduling cycle runs synchronously between events, so :meth:`snapshot` is
a cheap view that only caches the node order. Numbers the plugins compare live in :class:`NodeTable` columns.
Pod groups (workload-aware scheduling) are kept as upstream's cache keeps them (``pod_group_state.py``), with
the copy a pod-group cycle changes as it tries placements.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from kopf_scheduler.go_format import go_quote
from kopf_scheduler.state.node_table import NodeTable
from kopf_scheduler.state.objects import ClusterObjects
from kopf_scheduler.state.pod_group_state import PodGroupSnapshot, PodGroupStates, coscheduling_group_key
from kopf_scheduler.state.pod_info import HostPort, PodInfo, pod_uid, same_scheduling_inputs
from kopf_scheduler.state.quantity import resource_value
from kopf_scheduler.state.selector_counts import SelectorPodCounts
from kopf_scheduler.state.selectors import LabelSelector
from kopf_scheduler.state.tolerations import Taint, parse_taints

T = TypeVar("T")

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def zone_key(labels: Mapping[str, str]) -> str:
    """Upstream ``GetZoneKey``: region and zone joined; nodes with neither share the key ""."""
    zone = next((labels[k] for k in ZONE_LABELS if labels.get(k)), "")
    region = next((labels[k] for k in REGION_LABELS if labels.get(k)), "")
    if not zone and not region:
        return ""
    return f"{region}:\x00:{zone}"


@dataclass(slots=True, eq=False)
class NodeInfo:
    """One node and what runs on it (bound and assumed pods)."""

    name: str
    slot: int
    obj: dict[str, Any]
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: dict[str, int]
    #: Image name → size in bytes, for every name each image is known by.
    images: dict[str, int]
    pods: dict[str, PodInfo] = field(default_factory=dict)
    pods_with_affinity: dict[str, PodInfo] = field(default_factory=dict)
    pods_with_required_anti_affinity: dict[str, PodInfo] = field(default_factory=dict)
    used_ports: Counter[HostPort] = field(default_factory=Counter)


def affinity_signature(pod: PodInfo) -> str:
    """What makes two pods' pod (anti-)affinity terms identical: namespace and the two specs, canonicalised."""
    affinity = pod.affinity
    return json.dumps(
        [pod.namespace, affinity.get("podAffinity"), affinity.get("podAntiAffinity")],
        sort_keys=True,
        separators=(",", ":"),
    )


@dataclass(slots=True, eq=False)
class AffinityGroup:
    """Assigned pods (on known nodes) of one namespace with identical pod (anti-)affinity specs.

    Their parsed terms are identical, so InterPodAffinity matches a group's terms against the incoming pod
    once and adds the group's per-node pod counts with numpy, instead of visiting every such pod per cycle.
    """

    pods: dict[str, PodInfo] = field(default_factory=dict)
    #: Node slot → member pods on that node.
    slots: Counter[int] = field(default_factory=Counter)
    has_required_anti_affinity: bool = False
    _arrays: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def sample(self) -> PodInfo:
        """Any member: all of them parse to the same terms."""
        return next(iter(self.pods.values()))

    def add(self, pod: PodInfo, slot: int) -> None:
        self.pods[pod.uid] = pod
        self.slots[slot] += 1
        self._arrays = None

    def remove(self, pod: PodInfo, slot: int) -> None:
        if self.pods.pop(pod.uid, None) is None:
            return
        self.slots[slot] -= 1
        if self.slots[slot] <= 0:
            del self.slots[slot]
        self._arrays = None

    def slot_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(slots, member pods per slot) as int64 arrays; rebuilt only after the group changed."""
        if self._arrays is None:
            self._arrays = (
                np.fromiter(self.slots.keys(), dtype=np.int64, count=len(self.slots)),
                np.fromiter(self.slots.values(), dtype=np.int64, count=len(self.slots)),
            )
        return self._arrays


class ClusterCache:
    """Nodes, assigned pods and the other objects plugins read (workload selectors, namespaces, storage)."""

    def __init__(self) -> None:
        self.table = NodeTable()
        self._nodes: dict[str, NodeInfo] = {}
        self._by_slot: dict[int, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._assumed: set[str] = set()
        #: Pods bound to nodes the cache has not seen yet (upstream keeps node-less NodeInfos for them).
        self._orphans: dict[str, dict[str, PodInfo]] = {}
        #: namespace → uid → assigned pod; and namespace → label key → value → uids (selector lookups).
        self._pods_by_namespace: dict[str, dict[str, PodInfo]] = {}
        self._label_index: dict[str, dict[str, dict[str, set[str]]]] = {}
        #: Image name → {slot: size}; ImageLocality's spread is the number of nodes holding the image.
        self.image_nodes: dict[str, dict[int, int]] = {}
        #: Zones in order of first appearance → node names in insertion order (upstream node tree).
        self._zones: dict[str, list[str]] = {}
        self._order: np.ndarray | None = None
        #: (kind, namespace, name) → selector of Services, ReplicationControllers, ReplicaSets, StatefulSets.
        self.workload_selectors: dict[tuple[str, str, str], LabelSelector] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        #: Pods with pod (anti-)affinity on known nodes, grouped by :func:`affinity_signature`, so that
        #: InterPodAffinity visits a few groups instead of every NodeInfo or every such pod each cycle.
        self.affinity_groups: dict[str, AffinityGroup] = {}
        #: (protocol, host port) → slot → host IP → count: the used host ports of every node, indexed so that
        #: NodePorts finds the few nodes using a wanted port without visiting every NodeInfo.
        self.host_port_users: dict[tuple[str, int], dict[int, Counter[str]]] = {}
        #: Per-node counts of pods matching the recently asked (namespace, selector) pairs, kept current.
        self._selector_counts = SelectorPodCounts()
        #: PVs, PVCs, StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities (the volume plugins' listers).
        self.objects = ClusterObjects()
        #: Scheduler-wide state a plugin keeps for every profile, one instance per type (:meth:`shared`).
        self._shared: dict[type[Any], Any] = {}
        #: Every known pod group's members, unscheduled, assumed and assigned (upstream ``podGroupStates``).
        self.pod_groups = PodGroupStates()
        #: The copy of :attr:`pod_groups` a cycle reads, brought up to date by :meth:`update_pod_group_snapshot`.
        self.pod_group_snapshot = PodGroupSnapshot()
        #: The same for scheduler-plugins' Coscheduling groups (pods labelled ``scheduling.x-k8s.io/pod-group``),
        #: kept apart: the two APIs key their groups differently and may name them alike.
        self.coscheduling_groups = PodGroupStates(coscheduling_group_key)
        self.generation = 0

    # -- nodes ---------------------------------------------------------------------------------------
    def add_or_update_node(self, obj: dict[str, Any]) -> NodeInfo:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        name = meta["name"]
        labels = dict(meta.get("labels") or {})
        allocatable = {k: resource_value(k, v) for k, v in (status.get("allocatable") or {}).items()}
        images: dict[str, int] = {}
        for image in status.get("images") or ():
            for image_name in image.get("names") or ():
                images[image_name] = int(image.get("sizeBytes") or 0)
        info = self._nodes.get(name)
        if info is None:
            slot = self.table.allocate(name)
            info = NodeInfo(name, slot, obj, labels, (), False, allocatable, images)
            self._nodes[name] = info
            self._by_slot[slot] = info
            self._zones.setdefault(zone_key(labels), []).append(name)
            self._order = None
            for pod in self._orphans.pop(name, {}).values():
                self._attach(pod, info)
        else:
            old_zone, new_zone = zone_key(info.labels), zone_key(labels)
            if old_zone != new_zone:
                self._remove_from_zone(old_zone, name)
                self._zones.setdefault(new_zone, []).append(name)
                self._order = None
            self._set_images(info, {})
            info.obj, info.labels, info.allocatable = obj, labels, allocatable
        info.taints = parse_taints(spec.get("taints"))
        info.unschedulable = bool(spec.get("unschedulable"))
        slot = info.slot
        self.table.set_allocatable(slot, allocatable)
        self.table.set_labels(slot, labels)
        self.table.set_taints(slot, info.taints)
        self.table.unschedulable[slot] = info.unschedulable
        self.table.set_declared_features(slot, frozenset(status.get("declaredFeatures") or ()))
        self._set_images(info, images)
        self.generation += 1
        return info

    def remove_node(self, name: str) -> None:
        info = self._nodes.pop(name, None)
        if info is None:
            return
        self._set_images(info, {})
        del self._by_slot[info.slot]
        self._remove_from_zone(zone_key(info.labels), name)
        self._order = None
        # Pods still bound to a deleted node stay accounted for until their own delete events arrive.
        if info.pods:
            self._orphans[name] = dict(info.pods)
            for pod in info.pods.values():
                self._selector_counts.update(pod, info.slot, -1)
            for pod in info.pods_with_affinity.values():
                self._ungroup_affinity(pod, info.slot)
        for port in info.used_ports:
            self._unindex_host_port(port, info.slot, drop_slot=True)
        self.table.release(info.slot)
        self.generation += 1

    def _remove_from_zone(self, key: str, name: str) -> None:
        names = self._zones.get(key)
        if names is not None and name in names:
            names.remove(name)
            if not names:
                del self._zones[key]

    def _set_images(self, info: NodeInfo, images: dict[str, int]) -> None:
        for image_name in info.images:
            holders = self.image_nodes.get(image_name)
            if holders is not None:
                holders.pop(info.slot, None)
                if not holders:
                    del self.image_nodes[image_name]
        info.images = images
        for image_name, size in images.items():
            self.image_nodes.setdefault(image_name, {})[info.slot] = size

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def node_at(self, slot: int) -> NodeInfo:
        return self._by_slot[slot]

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    def sizes(self) -> dict[str, int]:
        """``scheduler_cache_size{type}`` (upstream ``cacheImpl.updateMetrics``); pods include assumed ones."""
        return {"nodes": len(self._nodes), "pods": len(self._pods), "assumed_pods": len(self._assumed)}

    def node_names(self) -> Iterator[str]:
        return iter(self._nodes)

    def node_order(self) -> np.ndarray:
        """Slots in upstream node-tree order: the 1st node of each zone, then the 2nd of each, …"""
        if self._order is None:
            zones = list(self._zones.values())
            order: list[int] = []
            depth = 0
            while True:
                row = [names[depth] for names in zones if depth < len(names)]
                if not row:
                    break
                order.extend(self._nodes[n].slot for n in row)
                depth += 1
            self._order = np.asarray(order, dtype=np.int64)
        return self._order

    # -- pods ----------------------------------------------------------------------------------------
    def add_or_update_pod(self, obj: dict[str, Any]) -> PodInfo | None:
        """Account an assigned pod (or drop it when it turned terminal). Unassigned pods are ignored.

        A new version of a pod the cache holds whose scheduling inputs are unchanged but for its labels (the
        watch event that confirms our own Binding of an assumed pod, with the node's topology labels the API
        server adds; a kubelet's status update) keeps the parsed PodInfo and takes only the new object and
        labels: parsing a pod again (quantities, tolerations, ports) was most of what a bound pod's watch event
        cost us.

        A member of a pod group leaves its group and joins it again as the new version (upstream's cache
        updates a pod as remove and add): the watch event that confirms an assumed member makes it assigned.
        """
        old = self._pods.get(pod_uid(obj))
        if old is None or not same_scheduling_inputs(old.obj, obj, but_labels=True):
            pod = PodInfo.from_obj(obj)
        else:
            pod = old.with_obj(obj)
            if self._replace(old, pod):
                self._assumed.discard(pod.uid)
                if pod.scheduling_group is not None:  # the same spec: the same group as ``old``'s
                    self.pod_groups.remove_member(old)
                    self.pod_groups.add_member(pod)
                if old.coscheduling_group is not None or pod.coscheduling_group is not None:
                    self._leave_coscheduling_group(old)  # its labels were read again: maybe another group
                    self._join_coscheduling_group(pod)
                return pod
        if old is not None:
            self._detach(old)
            self._assumed.discard(pod.uid)
            if old.scheduling_group is not None:
                self.pod_groups.remove_member(old)
            if old.coscheduling_group is not None:  # (tested inline, here and below: the hot path of every pod)
                self.coscheduling_groups.remove_member(old)
        if not pod.node_name or pod.phase in TERMINAL_PHASES:
            return None
        self._add(pod)
        if pod.scheduling_group is not None:
            self.pod_groups.add_member(pod)
        if pod.coscheduling_group is not None:
            self.coscheduling_groups.add_member(pod)
        return pod

    def _join_coscheduling_group(self, pod: PodInfo) -> None:
        if pod.coscheduling_group is not None:
            self.coscheduling_groups.add_member(pod)

    def _leave_coscheduling_group(self, pod: PodInfo) -> None:
        if pod.coscheduling_group is not None:
            self.coscheduling_groups.remove_member(pod)

    def remove_pod(self, uid: str, *, dry_run: bool = False) -> None:
        """Drop the pod (its delete event; upstream ``RemovePod``): a member leaves its pod group, and a group
        whose last member left is dropped. A ``dry_run`` (preemption's victims, put back by :meth:`restore_pod`)
        leaves the pod groups alone: upstream dry-runs on copies of NodeInfos."""
        pod = self._pods.get(uid)
        if pod is not None:
            self._detach(pod)
            self._assumed.discard(uid)
            if pod.scheduling_group is not None and not dry_run:
                self.pod_groups.remove_member(pod)
            if not dry_run:
                self._leave_coscheduling_group(pod)

    def restore_pod(self, pod: PodInfo, *, assumed: bool) -> None:
        """Put back the very pod object :meth:`remove_pod` took off in a dry run (e.g. preemption's), with its
        assumed mark; unlike :meth:`assume` or :meth:`add_or_update_pod` nothing is copied or re-parsed, and the
        pod groups (which the dry run left alone) are not touched."""
        if pod.uid in self._pods:
            raise ValueError(f"pod {pod.key} is already in the cache")
        self._add(pod)
        if assumed:
            self._assumed.add(pod.uid)

    def assume(self, pod: PodInfo, node_name: str, *, dry_run: bool = False) -> PodInfo:
        """Account ``pod`` on ``node_name`` before the Binding lands (upstream ``AssumePod``); a member of a pod
        group becomes assumed there. A ``dry_run`` (a Filter pass with nominated pods accounted, undone by
        :meth:`forget` with ``dry_run``) leaves the pod groups alone: upstream adds those pods to a NodeInfo copy."""
        if pod.uid in self._pods:
            raise ValueError(f"pod {pod.key} is already in the cache")
        assumed = self.placed_copy(pod, node_name)
        self._add(assumed)
        self._assumed.add(assumed.uid)
        if assumed.scheduling_group is not None and not dry_run:
            self.pod_groups.assume_member(assumed)
        if assumed.coscheduling_group is not None and not dry_run:
            self.coscheduling_groups.assume_member(assumed)
        return assumed

    @staticmethod
    def placed_copy(pod: PodInfo, node_name: str) -> PodInfo:
        """A copy of the pending ``pod`` bound to ``node_name`` (what :meth:`assume` accounts)."""
        obj = {**pod.obj, "spec": {**(pod.obj.get("spec") or {}), "nodeName": node_name}}
        # The pending pod's parsed requests hold for the copy: only where it runs changes.
        return dataclasses.replace(pod, raw=obj, node_name=node_name, memo=dict(pod.memo))

    def forget(self, uid: str, *, dry_run: bool = False) -> None:
        """Undo :meth:`assume` after a failed bind (upstream ``ForgetPod``); a pod already confirmed by a watch
        event stays. A member of a pod group returns to unscheduled there (unless ``dry_run``, as :meth:`assume`)."""
        if uid in self._assumed:
            pod = self._pods[uid]
            self._detach(pod)
            self._assumed.discard(uid)
            if pod.scheduling_group is not None and not dry_run:
                self.pod_groups.forget_member(pod)
            if pod.coscheduling_group is not None and not dry_run:
                self.coscheduling_groups.forget_member(pod)

    # -- pending members of pod groups (upstream ``AddPodGroupMember`` and its siblings) -------------
    def add_pod_group_member(self, pod: PodInfo) -> None:
        """A new pending pod of our profiles joins its pod group as unscheduled (the event handlers' add of an
        unscheduled pod); pods of no group are ignored."""
        if pod.scheduling_group is not None:
            self.pod_groups.add_member(pod)
        self._join_coscheduling_group(pod)

    def update_pod_group_member(self, old: PodInfo, new: PodInfo) -> None:
        """A newer version of a pending member (the event handlers' update of an unscheduled pod); a pod whose
        ``scheduling.x-k8s.io/pod-group`` label changed moves to its new Coscheduling group."""
        if new.scheduling_group is not None:
            self.pod_groups.update_member(old, new)
        if old.coscheduling_group != new.coscheduling_group:
            self._leave_coscheduling_group(old)
            self._join_coscheduling_group(new)
        elif new.coscheduling_group is not None:
            self.coscheduling_groups.update_member(old, new)

    def remove_pod_group_member(self, pod: PodInfo) -> None:
        """A pending member deleted from the cluster leaves its group (not one that got bound: the cache's own
        path moves that one)."""
        if pod.scheduling_group is not None:
            self.pod_groups.remove_member(pod)
        self._leave_coscheduling_group(pod)

    def update_pod_group_snapshot(self) -> PodGroupSnapshot:
        """Bring :attr:`pod_group_snapshot` up to date for a cycle (upstream ``UpdateSnapshot``'s pod-group part):
        only the groups changed since the last update are copied again."""
        self.pod_groups.update_snapshot(self.pod_group_snapshot)
        return self.pod_group_snapshot

    # -- the pod-group cycle's trial placements (upstream ``Snapshot.AssumePod`` / ``Snapshot.ForgetPod``) ----
    def assume_in_snapshot(self, pod: PodInfo, node_name: str) -> PodInfo:
        """Account ``pod`` on ``node_name`` for the rest of a pod-group cycle only: on the nodes (the cycle's
        view of them is this cache) and, for a member of a pod group, in the cycle's copy of its group
        (:attr:`pod_group_snapshot`), while the live pod groups stay as they are. Undone by
        :meth:`forget_in_snapshot`."""
        assumed = self.assume(pod, node_name, dry_run=True)
        key = assumed.scheduling_group_key
        if key is not None:
            copy = self.pod_group_snapshot.states.get(key)
            if copy is not None:
                copy.assume_pod(assumed)
        return assumed

    def forget_in_snapshot(self, pod: PodInfo) -> None:
        """Undo :meth:`assume_in_snapshot`; a pod it did not assume is upstream's error."""
        if pod.uid not in self._assumed:
            raise LookupError(f"assumed pod {go_quote(pod.key)} not found in the snapshot")
        self.forget(pod.uid, dry_run=True)
        key = pod.scheduling_group_key
        if key is not None:
            copy = self.pod_group_snapshot.states.get(key)
            if copy is not None:
                copy.forget_pod(pod.uid)

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    def pod(self, uid: str) -> PodInfo | None:
        return self._pods.get(uid)

    def pods(self) -> Iterator[PodInfo]:
        return iter(self._pods.values())

    def _replace(self, old: PodInfo, pod: PodInfo) -> bool:
        """``pod``, a newer parse of ``old`` with the same scheduling inputs but perhaps its labels, takes its place
        without leaving its node: the node's accounting (its node-table row, ports) is the same, so the node keeps
        its :attr:`NodeTable.version` and what plugins derived from it stays current. Only the label index and
        the selector counts follow new labels. A pod with pod (anti-)affinity terms is left to the full path
        (False): its affinity group holds it. The confirmation of each Binding we post comes this way."""
        if old.has_pod_affinity_terms or old.has_required_anti_affinity:
            return False
        uid = pod.uid
        info = self._nodes.get(old.node_name)
        on_node = info is not None and uid in info.pods
        if old.labels != pod.labels:
            self._unindex_labels(old)
            self._index_labels(pod)
            if info is not None and on_node:
                self._selector_counts.update(old, info.slot, -1)
                self._selector_counts.update(pod, info.slot, +1)
        self._pods[uid] = pod
        self._pods_by_namespace[pod.namespace][uid] = pod
        if info is not None and on_node:
            info.pods[uid] = pod
        else:
            orphans = self._orphans.get(old.node_name)
            if orphans is not None and uid in orphans:
                orphans[uid] = pod
        self.generation += 1
        return True

    def _index_labels(self, pod: PodInfo) -> None:
        index = self._label_index.setdefault(pod.namespace, {})
        for key, value in pod.labels.items():
            index.setdefault(key, {}).setdefault(value, set()).add(pod.uid)

    def _unindex_labels(self, pod: PodInfo) -> None:
        index = self._label_index.get(pod.namespace, {})
        for key, value in pod.labels.items():
            uids = index.get(key, {}).get(value)
            if uids is not None:
                uids.discard(pod.uid)
                if not uids:
                    del index[key][value]
                    if not index[key]:
                        del index[key]

    def _add(self, pod: PodInfo) -> None:
        self._pods[pod.uid] = pod
        by_ns = self._pods_by_namespace.setdefault(pod.namespace, {})
        by_ns[pod.uid] = pod
        self._index_labels(pod)
        info = self._nodes.get(pod.node_name)
        if info is None:
            self._orphans.setdefault(pod.node_name, {})[pod.uid] = pod
        else:
            self._attach(pod, info)
        self.generation += 1

    def take_off_node(self, pod: PodInfo) -> None:
        """Take ``pod`` off its node's own accounting only: the node's pod dicts, ports and node-table columns.

        For Filter passes that read nothing else (DefaultPreemption's batched dry run and the batched pass with
        nominated pods, while no PreFilter extension runs: :meth:`Framework.pre_filter_extensions_idle`): the
        pod stays in the cluster-wide indexes (by uid, namespace and label, selector counts, affinity groups),
        which a dry run taking thousands of victims off and putting them back would otherwise update twice per
        victim. Undo with :meth:`put_on_node` before anything else reads the cache."""
        info = self._nodes.get(pod.node_name)
        if info is None or pod.uid not in info.pods:
            raise ValueError(f"pod {pod.key} is not on a node of the cache")
        self._detach_from_node(pod, info)
        self.generation += 1

    def put_on_node(self, pod: PodInfo) -> None:
        """Undo :meth:`take_off_node` (the very same pod object), or account a :meth:`placed_copy` on its node
        only, for such a pass (taken off again with :meth:`take_off_node`)."""
        info = self._nodes.get(pod.node_name)
        if info is None or pod.uid in info.pods:
            raise ValueError(f"pod {pod.key} cannot be put back on its node")
        self._attach_to_node(pod, info)
        self.generation += 1

    def take_off_nodes(self, pods: Sequence[PodInfo]) -> None:
        """:meth:`take_off_node` for many pods at once, their node-table columns in one update each
        (DefaultPreemption's batched dry run: thousands of victims a cycle at 5000 nodes). Nothing changes when
        one of them cannot be taken off (``ValueError``)."""
        infos = self._nodes_of(pods, on_node=True)
        for pod, info in zip(pods, infos, strict=True):
            self._unlink_from_node(pod, info)
        self._account_on_nodes(pods, infos, -1)

    def put_on_nodes(self, pods: Sequence[PodInfo]) -> None:
        """:meth:`put_on_node` for many pods at once (undoes :meth:`take_off_nodes`, in any grouping)."""
        infos = self._nodes_of(pods, on_node=False)
        for pod, info in zip(pods, infos, strict=True):
            self._link_to_node(pod, info)
        self._account_on_nodes(pods, infos, +1)

    def _nodes_of(self, pods: Sequence[PodInfo], *, on_node: bool) -> list[NodeInfo]:
        """Each pod's node, checked before anything changes: on it (or not) as asked, and no pod twice."""
        infos: list[NodeInfo] = []
        seen: set[str] = set()
        for pod in pods:
            info = self._nodes.get(pod.node_name)
            if info is None or (pod.uid in info.pods) is not on_node or pod.uid in seen:
                verb = "taken off" if on_node else "put back on"
                raise ValueError(f"pod {pod.key} cannot be {verb} its node")
            seen.add(pod.uid)
            infos.append(info)
        return infos

    def _account_on_nodes(self, pods: Sequence[PodInfo], infos: Sequence[NodeInfo], sign: int) -> None:
        if pods:
            slots = [info.slot for info in infos]
            non_zero = [(pod.non_zero_cpu, pod.non_zero_memory) for pod in pods]
            self.table.add_pods(slots, [pod.requests for pod in pods], non_zero, sign)
            self.generation += 1

    def _attach(self, pod: PodInfo, info: NodeInfo) -> None:
        if pod.has_pod_affinity_terms:
            signature = affinity_signature(pod)
            group = self.affinity_groups.get(signature)
            if group is None:
                group = AffinityGroup(has_required_anti_affinity=pod.has_required_anti_affinity)
                self.affinity_groups[signature] = group
            group.add(pod, info.slot)
        self._selector_counts.update(pod, info.slot, +1)
        self._attach_to_node(pod, info)

    def _attach_to_node(self, pod: PodInfo, info: NodeInfo) -> None:
        self._link_to_node(pod, info)
        self.table.add_pod(info.slot, pod.requests, (pod.non_zero_cpu, pod.non_zero_memory), +1)

    def _link_to_node(self, pod: PodInfo, info: NodeInfo) -> None:
        """The node's pod dicts and ports (the rest of :meth:`_attach_to_node` is the node-table columns)."""
        info.pods[pod.uid] = pod
        if pod.has_pod_affinity_terms:
            info.pods_with_affinity[pod.uid] = pod
        if pod.has_required_anti_affinity:
            info.pods_with_required_anti_affinity[pod.uid] = pod
        if pod.host_ports:
            info.used_ports.update(pod.host_ports)
            for port in pod.host_ports:
                users = self.host_port_users.setdefault((port.protocol, port.port), {})
                users.setdefault(info.slot, Counter())[port.host_ip] += 1

    def _detach(self, pod: PodInfo) -> None:
        del self._pods[pod.uid]
        by_ns = self._pods_by_namespace.get(pod.namespace, {})
        by_ns.pop(pod.uid, None)
        self._unindex_labels(pod)
        orphans = self._orphans.get(pod.node_name)
        if orphans is not None and pod.uid in orphans:
            del orphans[pod.uid]
            if not orphans:
                del self._orphans[pod.node_name]
        info = self._nodes.get(pod.node_name)
        if info is not None and pod.uid in info.pods:
            self._selector_counts.update(pod, info.slot, -1)
            if pod.uid in info.pods_with_affinity:
                self._ungroup_affinity(pod, info.slot)
            self._detach_from_node(pod, info)
        self.generation += 1

    def _detach_from_node(self, pod: PodInfo, info: NodeInfo) -> None:
        """The node-local half of :meth:`_detach` (the reverse of :meth:`_attach_to_node`)."""
        self._unlink_from_node(pod, info)
        self.table.add_pod(info.slot, pod.requests, (pod.non_zero_cpu, pod.non_zero_memory), -1)

    def _unlink_from_node(self, pod: PodInfo, info: NodeInfo) -> None:
        """The reverse of :meth:`_link_to_node`."""
        del info.pods[pod.uid]
        info.pods_with_affinity.pop(pod.uid, None)
        info.pods_with_required_anti_affinity.pop(pod.uid, None)
        if pod.host_ports:  # most pods have none: no Counter arithmetic for them
            info.used_ports.subtract(pod.host_ports)
            info.used_ports += Counter()  # drop zero counts
            for port in pod.host_ports:
                self._unindex_host_port(port, info.slot)

    def _ungroup_affinity(self, pod: PodInfo, slot: int) -> None:
        signature = affinity_signature(pod)
        group = self.affinity_groups.get(signature)
        if group is not None:
            group.remove(pod, slot)
            if not group.pods:
                del self.affinity_groups[signature]

    def _unindex_host_port(self, port: HostPort, slot: int, *, drop_slot: bool = False) -> None:
        users = self.host_port_users.get((port.protocol, port.port))
        if users is None or slot not in users:
            return
        ips = users[slot]
        if not drop_slot:
            ips[port.host_ip] -= 1
            if ips[port.host_ip] > 0:
                return
            del ips[port.host_ip]
        if drop_slot or not ips:
            del users[slot]
        if not users:
            del self.host_port_users[(port.protocol, port.port)]

    # -- selector lookups ----------------------------------------------------------------------------
    def pod_namespaces(self) -> Iterable[str]:
        """Namespaces that hold (or held) assigned pods: what an all-namespaces affinity term walks."""
        return self._pods_by_namespace.keys()

    def pods_in_namespace(self, namespace: str) -> Iterable[PodInfo]:
        return self._pods_by_namespace.get(namespace, {}).values()

    def matching_pod_counts(
        self, namespace: str, selector: LabelSelector, *, include_terminating: bool = False
    ) -> np.ndarray:
        """int64 indexed by node slot: assigned pods of ``namespace`` matching ``selector`` (terminating ones
        only if ``include_terminating``: PodTopologySpread skips them, InterPodAffinity counts them).

        Built once per (namespace, selector, include_terminating) and then kept current by pod events (see
        :mod:`kopf_scheduler.state.selector_counts`). Read-only; valid until the next cache change.
        """
        return self._selector_counts.get(self, namespace, selector, include_terminating=include_terminating)

    def matching_pods(self, namespace: str, selector: LabelSelector) -> list[PodInfo]:
        """Assigned pods of ``namespace`` whose labels match ``selector``, narrowed through the label index."""
        if selector.matches_nothing:
            return []
        pods = self._pods_by_namespace.get(namespace)
        if not pods:
            return []
        index = self._label_index.get(namespace, {})
        candidates: set[str] | None = None
        for req in selector.requirements:
            if req.operator == "In":
                values = index.get(req.key, {})
                found = set().union(*(values.get(v, ()) for v in req.values)) if req.values else set()
            elif req.operator == "Exists":
                found = set().union(*index.get(req.key, {}).values())
            else:
                continue
            candidates = found if candidates is None else candidates & found
            if not candidates:
                return []
        if candidates is None:
            return [p for p in pods.values() if selector.matches(p.labels)]
        return [pods[uid] for uid in candidates if selector.matches(pods[uid].labels)]

    # -- other objects plugins read ------------------------------------------------------------------
    def set_workload_selector(self, kind: str, namespace: str, name: str, selector: LabelSelector | None) -> None:
        key = (kind, namespace, name)
        if selector is None:
            self.workload_selectors.pop(key, None)
        else:
            self.workload_selectors[key] = selector

    def set_namespace_labels(self, name: str, labels: dict[str, str] | None) -> None:
        if labels is None:
            self.namespace_labels.pop(name, None)
        else:
            self.namespace_labels[name] = dict(labels)

    def shared(self, kind: type[T], factory: Callable[[ClusterCache], T]) -> T:
        """The one ``kind`` of this scheduler, every profile's, made by ``factory`` on first use.

        Upstream passes such state to all profiles through the framework Handle (DynamicResources' claim tracker
        is its ``SharedDRAManager``); here it lives beside the cluster state it follows, keyed by its type.
        """
        found: T | None = self._shared.get(kind)
        if found is None:
            found = self._shared[kind] = factory(self)
        return found

    def has_shared(self, kind: type[Any]) -> bool:
        """Whether :meth:`shared` made a ``kind`` yet."""
        return kind in self._shared

    def snapshot(self) -> Snapshot:
        return Snapshot(self)


class Snapshot:
    """The view one scheduling cycle works on: the cache plus the node order, frozen for the cycle."""

    __slots__ = ("_placement", "_placement_set", "cache", "order", "table")

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.table = cache.table
        #: All nodes as table slots, in node-tree order.
        self.order = cache.node_order()
        #: The pod-group cycle's assumed placement: the only candidate nodes of the algorithm, None for all nodes.
        self._placement: np.ndarray | None = None
        self._placement_set: frozenset[int] = frozenset()

    # -- the pod-group cycle's placement (upstream ``Snapshot.AssumePlacement`` and ``ForgetPlacement``) ------------
    def assume_placement(self, nodes: np.ndarray) -> None:
        """Limit the nodes the scheduling algorithm considers on this snapshot to ``nodes`` (slots, in the
        placement's order) until :meth:`forget_placement`; plugins still see every node, as upstream's do. A
        placement of every node is no placement. ``LookupError`` (and no placement) if a slot holds no node."""
        if len(nodes) == len(self.order):
            self.forget_placement()
            return
        alive, names = self.table.alive, self.table.names
        for slot in nodes.tolist():
            if not 0 <= slot < len(alive) or not alive[slot]:
                self.forget_placement()
                name = names[slot] if 0 <= slot < len(names) else None
                raise LookupError(f"node {name or slot} in placement is not present in snapshot")
        self._placement = nodes
        self._placement_set = frozenset(nodes.tolist())

    def forget_placement(self) -> None:
        """Every node is a candidate again (upstream ``ForgetPlacement``)."""
        self._placement = None
        self._placement_set = frozenset()

    @property
    def nodes_in_placement(self) -> np.ndarray:
        """The algorithm's candidate nodes: the placement's, or every node (upstream ``ListNodesInPlacement``)."""
        return self.order if self._placement is None else self._placement

    @property
    def num_nodes_in_placement(self) -> int:
        """How many nodes the algorithm considers (upstream ``NumNodesInPlacement``): the ``N`` of ``0/N nodes``."""
        return len(self.order if self._placement is None else self._placement)

    def in_placement(self, slot: int) -> bool:
        """Whether the node at ``slot`` is a candidate (upstream ``GetNodeInPlacement`` finds it)."""
        return self._placement is None or slot in self._placement_set

    @property
    def num_nodes(self) -> int:
        return len(self.order)

    @property
    def pod_group_states(self) -> PodGroupSnapshot:
        """The cycle's copy of the pod groups (upstream ``Snapshot.PodGroupStates``), as last brought up to date
        by :meth:`ClusterCache.update_pod_group_snapshot`."""
        return self.cache.pod_group_snapshot

    def node_info(self, slot: int) -> NodeInfo:
        return self.cache.node_at(slot)

    def node_infos(self, slots: Iterable[int] | None = None) -> Iterator[NodeInfo]:
        for slot in self.order if slots is None else slots:
            yield self.cache.node_at(int(slot))

    def node_names(self) -> list[str]:
        """Every node's name, in node-tree order (as :meth:`node_infos` gives them)."""
        names = self.table.names
        return [str(names[slot]) for slot in self.order.tolist()]

    def slot_of(self, node_name: str) -> int | None:
        info = self.cache.node(node_name)
        return None if info is None else info.slot
