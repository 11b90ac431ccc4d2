"""The API objects plugins read besides nodes and pods, as the API server last reported them.

Storage objects, PodDisruptionBudgets and DynamicResources' objects: what upstream's plugins read through
informer listers. Upstream's volume plugins (VolumeBinding, VolumeZone, VolumeRestrictions, NodeVolumeLimits) read
PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities and
VolumeAttachments through informer listers from the framework handle's SharedInformerFactory. Here the watch handlers
(``eventhandlers.py``) keep one :class:`ClusterObjects` inside the :class:`~kopf_scheduler.state.cache.ClusterCache`
current, and plugins read it through ``snapshot.cache.objects``. Objects are the API dicts as watched (the
scheduler never mutates them: VolumeBinding keeps its assumed versions beside them, as upstream's
AssumeCache does beside the informer).

The kinds are the watched kinds that feed this store (``watched.py``). Keys: cluster-scoped kinds by name,
namespaced kinds (PVCs, CSIStorageCapacities, PDBs, ResourceClaims and their templates) by ``(namespace, name)``.
VolumeAttachments are also indexed by ``spec.nodeName`` (:meth:`ClusterObjects.by_node`), as upstream's
NodeVolumeLimits lists them through an informer indexer on that field instead of walking them all per node;
ResourceSlices likewise (``spec.nodeName``; slices without one, for node selectors or all nodes, sit under "").
The resource.k8s.io kinds (ResourceClaims, ResourceClaimTemplates, ResourceSlices, DeviceClasses) are
DynamicResources' listers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kopf_scheduler.watched import Feed, of_feed

PERSISTENT_VOLUME = "PersistentVolume"
PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
STORAGE_CLASS = "StorageClass"
CSI_NODE = "CSINode"
CSI_DRIVER = "CSIDriver"
CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
VOLUME_ATTACHMENT = "VolumeAttachment"
#: Not storage, but read the same way (DefaultPreemption's PDB lister): policy/v1 PodDisruptionBudgets.
POD_DISRUPTION_BUDGET = "PodDisruptionBudget"
#: DynamicResources' objects (resource.k8s.io/v1), read the same way as upstream's DRA manager reads its listers.
RESOURCE_CLAIM = "ResourceClaim"
RESOURCE_SLICE = "ResourceSlice"
DEVICE_CLASS = "DeviceClass"

#: Every kind this store holds → whether it is namespaced: the watched kinds that feed it (``watched.py``).
KINDS: Mapping[str, bool] = {watched.kind: watched.namespaced for watched in of_feed(Feed.OBJECTS)}

Key = tuple[str, str]
Obj = dict[str, Any]
#: Told of every change of one kind: ``(key, old, new)``, ``new`` None for a drop.
Observer = Callable[[Key, "Obj | None", "Obj | None"], None]

#: The kinds indexed by the node they concern.
NODE_INDEXED = frozenset({VOLUME_ATTACHMENT, RESOURCE_SLICE})


def object_key(kind: str, obj: Mapping[str, Any]) -> Key:
    """``(namespace, name)`` of ``obj``; the namespace is "" for cluster-scoped kinds."""
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "" if KINDS[kind] else "", meta.get("name") or "")


class ClusterObjects:
    """The latest watched version of every storage object, by kind and key."""

    __slots__ = ("_by_kind", "_by_node", "_changes", "_observers")

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[Key, Obj]] = {kind: {} for kind in KINDS}
        #: kind → how many times an object of that kind was stored or dropped (see :meth:`changes`).
        self._changes: dict[str, int] = dict.fromkeys(KINDS, 0)
        #: kind (of :data:`NODE_INDEXED`) → ``spec.nodeName`` → key → object.
        self._by_node: dict[str, dict[str, dict[Key, Obj]]] = {kind: {} for kind in NODE_INDEXED}
        #: kind → who keeps something derived from its objects current (see :meth:`observe`).
        self._observers: dict[str, list[Observer]] = {}

    def observe(self, kind: str, observer: Observer) -> None:
        """Call ``observer(key, old, new)`` after every store (``new`` set) or drop (``new`` None) of an object
        of ``kind``: for an index a plugin keeps object by object instead of rebuilding it from :meth:`all`."""
        self._observers.setdefault(kind, []).append(observer)

    def _notify(self, kind: str, key: Key, old: Obj | None, new: Obj | None) -> None:
        for observer in self._observers.get(kind, ()):
            observer(key, old, new)

    # -- feeding (the watch handlers and the reconciling LIST) -------------------------------------------
    def apply(self, kind: str, event_type: str | None, obj: Obj) -> tuple[Obj | None, Obj | None]:
        """Store or drop ``obj`` after a watch event; return ``(old, new)`` for the cluster event."""
        objects = self._by_kind[kind]
        key = object_key(kind, obj)
        old = objects.get(key)
        self._unindex(kind, key, old)
        self._changes[kind] += 1
        if event_type == "DELETED":
            objects.pop(key, None)
            self._notify(kind, key, old, None)
            return old, None
        objects[key] = obj
        self._index(kind, key, obj)
        self._notify(kind, key, old, obj)
        return old, obj

    def keys(self, kind: str) -> set[Key]:
        return set(self._by_kind[kind])

    def remove(self, kind: str, key: Key) -> Obj | None:
        """Drop an object the reconciling LIST no longer returns; the dropped object, if any."""
        old = self._by_kind[kind].pop(key, None)
        self._unindex(kind, key, old)
        self._changes[kind] += 1
        self._notify(kind, key, old, None)
        return old

    def _index(self, kind: str, key: Key, obj: Obj) -> None:
        index = self._by_node.get(kind)
        if index is not None:
            index.setdefault(_node_name(obj), {})[key] = obj

    def _unindex(self, kind: str, key: Key, old: Obj | None) -> None:
        index = self._by_node.get(kind)
        if index is None or old is None:
            return
        node = _node_name(old)
        bucket = index.get(node)
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del index[node]

    # -- reading (the plugins) -------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        return self._by_kind[kind].get((namespace if KINDS[kind] else "", name))

    def all(self, kind: str) -> Iterator[Obj]:
        return iter(self._by_kind[kind].values())

    def by_node(self, kind: str, node_name: str) -> Iterator[Obj]:
        """The objects of ``kind`` (one of :data:`NODE_INDEXED`) whose ``spec.nodeName`` is ``node_name``."""
        return iter((self._by_node[kind].get(node_name) or {}).values())

    def count(self, kind: str) -> int:
        return len(self._by_kind[kind])

    def changes(self, kinds: Iterable[str]) -> int:
        """A number that grows whenever an object of one of ``kinds`` is stored or dropped: what a plugin
        derived from those kinds alone is still current while it stays the same."""
        return sum(self._changes[kind] for kind in kinds)

    def pv(self, name: str) -> Obj | None:
        return self.get(PERSISTENT_VOLUME, name)

    def pvc(self, namespace: str, name: str) -> Obj | None:
        return self.get(PERSISTENT_VOLUME_CLAIM, name, namespace)

    def storage_class(self, name: str) -> Obj | None:
        return self.get(STORAGE_CLASS, name)

    def csi_node(self, node_name: str) -> Obj | None:
        return self.get(CSI_NODE, node_name)

    def csi_driver(self, name: str) -> Obj | None:
        return self.get(CSI_DRIVER, name)


def _node_name(obj: Obj) -> str:
    return (obj.get("spec") or {}).get("nodeName") or ""
