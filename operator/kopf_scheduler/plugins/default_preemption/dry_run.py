"""DefaultPreemption's dry runs on the shared cache: victims taken off and put back exactly.

Upstream's ``SelectVictimsOnNode`` (``plugins/defaultpreemption/default_preemption.go``) dry-runs on a *copy*
of a NodeInfo; our plugins read the shared cache's node-table columns, so the victims are taken out of the real
cache for the dry run and put back exactly (same PodInfo objects, same per-node order, assumed marks) when it
ends, even on exceptions: :class:`DryRunRemoval` for one node, :class:`NodesDryRun` for a batch of nodes,
:class:`ClusterDryRun` for a pod group's victims anywhere in the cluster (upstream's ``BackupSnapshot`` and its
restore around workload-aware preemption).
"""

from __future__ import annotations

from collections.abc import Sequence

from kopf_scheduler.state.cache import ClusterCache, NodeInfo
from kopf_scheduler.state.pod_info import PodInfo


class DryRunRemoval:
    """Takes pods off one node of the real cache for a dry run and puts them back exactly.

    Used as a context manager: :meth:`remove` / :meth:`restore` may be called in any order inside; on exit
    every pod still removed is re-added (same object, assumed mark kept) and the node's pod dicts get their
    original order back, so the cache is as before apart from a higher ``generation`` (never lowered: caches
    keyed by generation must not mistake the dry-run states for later real ones).
    """

    def __init__(self, cache: ClusterCache, node: NodeInfo) -> None:
        self.cache = cache
        self.node = node
        self._removed: dict[str, tuple[PodInfo, bool]] = {}
        self._order = _pod_order(node)

    def __enter__(self) -> DryRunRemoval:
        return self

    def __exit__(self, *exc: object) -> None:
        for uid in list(self._removed):
            self.restore(uid)
        _restore_pod_order(self.node, self._order)

    def remove(self, pod: PodInfo) -> None:
        assumed = self.cache.is_assumed(pod.uid)
        self.cache.remove_pod(pod.uid, dry_run=True)
        self._removed[pod.uid] = (pod, assumed)

    def restore(self, uid: str) -> None:
        pod, assumed = self._removed.pop(uid)
        self.cache.restore_pod(pod, assumed=assumed)  # the same object: identities and memos as they were


class NodesDryRun:
    """Takes pods off many nodes' own accounting for a batched dry run, and puts them back exactly.

    For Filter passes that read nothing but the nodes' own accounting (DefaultPreemption's batched dry run,
    while no PreFilter extension runs): the pods leave only their nodes (:meth:`ClusterCache.take_off_nodes`,
    all of a call's pods in one node-table update per column) and stay in the cluster-wide indexes. A context
    manager like :class:`DryRunRemoval`: on exit every pod still off is put back and each node's pod dicts
    get their original order back.
    """

    def __init__(self, cache: ClusterCache, nodes: Sequence[NodeInfo]) -> None:
        self.cache = cache
        self._orders = [(node, _pod_order(node)) for node in nodes]
        self._removed: dict[str, PodInfo] = {}

    def __enter__(self) -> NodesDryRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore(list(self._removed.values()))
        for node, order in self._orders:
            _restore_pod_order(node, order)

    def remove(self, pods: Sequence[PodInfo]) -> None:
        self.cache.take_off_nodes(pods)
        self._removed.update((pod.uid, pod) for pod in pods)

    def restore(self, pods: Sequence[PodInfo]) -> None:
        self.cache.put_on_nodes(pods)
        for pod in pods:
            del self._removed[pod.uid]


class ClusterDryRun:
    """Takes pods off the real cache anywhere in the cluster for workload-aware preemption, and puts them back.

    Upstream removes a pod group's potential victims from the snapshot's NodeInfos and re-runs the group's whole
    algorithm (PreFilter included) on them, restoring the snapshot afterwards. Here the pods leave the cache as a
    dry run (:meth:`ClusterCache.remove_pod`: every index, so PreFilter sees them gone; the pod groups' state is
    left alone, as upstream's NodeInfo removal leaves it) and come back as the same objects. A context manager
    like :class:`DryRunRemoval`: on exit every pod still off is put back and every touched node's pod dicts get
    their original order back.
    """

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._removed: dict[str, tuple[PodInfo, bool]] = {}
        self._orders: dict[str, tuple[NodeInfo, _PodOrder]] = {}

    def __enter__(self) -> ClusterDryRun:
        return self

    def __exit__(self, *exc: object) -> None:
        for uid in list(self._removed):
            self._restore(uid)
        for node, order in self._orders.values():
            _restore_pod_order(node, order)

    def remove(self, pods: Sequence[PodInfo]) -> None:
        for pod in pods:
            node = self.cache.node(pod.node_name)
            if node is not None and node.name not in self._orders:
                self._orders[node.name] = (node, _pod_order(node))
            assumed = self.cache.is_assumed(pod.uid)
            self.cache.remove_pod(pod.uid, dry_run=True)
            self._removed[pod.uid] = (pod, assumed)

    def restore(self, pods: Sequence[PodInfo]) -> None:
        for pod in pods:
            self._restore(pod.uid)

    def _restore(self, uid: str) -> None:
        pod, assumed = self._removed.pop(uid)
        self.cache.restore_pod(pod, assumed=assumed)


_PodOrder = tuple[list[str], list[str], list[str]]


def _pod_order(node: NodeInfo) -> _PodOrder:
    return list(node.pods), list(node.pods_with_affinity), list(node.pods_with_required_anti_affinity)


def _restore_pod_order(node: NodeInfo, order: _PodOrder) -> None:
    """Give the node's pod dicts the order they had (a dry run's removals and re-adds move pods to the end)."""
    targets = (node.pods, node.pods_with_affinity, node.pods_with_required_anti_affinity)
    for target, uids in zip(targets, order, strict=True):
        if list(target) != uids:
            items = dict(target)
            target.clear()
            target.update((uid, items[uid]) for uid in uids if uid in items)
            target.update((uid, pod) for uid, pod in items.items() if uid not in target)
