"""The storage objects the volume plugins read, as the API server last reported them.

Upstream's volume plugins (VolumeBinding, VolumeZone, VolumeRestrictions, NodeVolumeLimits) read
PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities and
VolumeAttachments through informer listers from the framework handle's SharedInformerFactory. Here the watch handlers
(``eventhandlers.py``) keep one :class:`StorageObjects` inside the :class:`~kopf_scheduler.state.cache.ClusterCache`
current, and plugins read it through ``snapshot.cache.storage``. Objects are the API dicts as watched (the
scheduler never mutates them: VolumeBinding keeps its assumed versions beside them, as upstream's
AssumeCache does beside the informer).

Keys: cluster-scoped kinds by name, namespaced kinds (PVCs, CSIStorageCapacities) by ``(namespace, name)``.
VolumeAttachments are also indexed by ``spec.nodeName`` (upstream's NodeVolumeLimits keeps the same index on
its informer), so a node's attachments are found without scanning all of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

PERSISTENT_VOLUME = "PersistentVolume"
PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
STORAGE_CLASS = "StorageClass"
CSI_NODE = "CSINode"
CSI_DRIVER = "CSIDriver"
CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
VOLUME_ATTACHMENT = "VolumeAttachment"

#: Every kind this store holds → whether it is namespaced.
KINDS: Mapping[str, bool] = {
    PERSISTENT_VOLUME: False,
    PERSISTENT_VOLUME_CLAIM: True,
    STORAGE_CLASS: False,
    CSI_NODE: False,
    CSI_DRIVER: False,
    CSI_STORAGE_CAPACITY: True,
    VOLUME_ATTACHMENT: False,
}

Key = tuple[str, str]
Obj = dict[str, Any]


def object_key(kind: str, obj: Mapping[str, Any]) -> Key:
    """``(namespace, name)`` of ``obj``; the namespace is "" for cluster-scoped kinds."""
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "" if KINDS[kind] else "", meta.get("name") or "")


class StorageObjects:
    """The latest watched version of every storage object, by kind and key."""

    __slots__ = ("_attachments_by_node", "_by_kind")

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[Key, Obj]] = {kind: {} for kind in KINDS}
        #: node name → key → VolumeAttachment attached to that node.
        self._attachments_by_node: dict[str, dict[Key, Obj]] = {}

    # -- feeding (the watch handlers and the reconciling LIST) -------------------------------------------
    def apply(self, kind: str, event_type: str | None, obj: Obj) -> tuple[Obj | None, Obj | None]:
        """Store or drop ``obj`` after a watch event; return ``(old, new)`` for the cluster event."""
        objects = self._by_kind[kind]
        key = object_key(kind, obj)
        old = objects.get(key)
        if event_type == "DELETED":
            self.remove(kind, key)
            return old, None
        objects[key] = obj
        if kind == VOLUME_ATTACHMENT:
            self._unindex_attachment(key, old)
            self._attachments_by_node.setdefault(_attached_node(obj), {})[key] = obj
        return old, obj

    def keys(self, kind: str) -> set[Key]:
        return set(self._by_kind[kind])

    def remove(self, kind: str, key: Key) -> Obj | None:
        """Drop an object the reconciling LIST no longer returns; the dropped object, if any."""
        dropped = self._by_kind[kind].pop(key, None)
        if kind == VOLUME_ATTACHMENT:
            self._unindex_attachment(key, dropped)
        return dropped

    def _unindex_attachment(self, key: Key, attachment: Obj | None) -> None:
        if attachment is None:
            return
        node = _attached_node(attachment)
        on_node = self._attachments_by_node.get(node)
        if on_node is not None:
            on_node.pop(key, None)
            if not on_node:
                del self._attachments_by_node[node]

    # -- reading (the plugins) -------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        return self._by_kind[kind].get((namespace if KINDS[kind] else "", name))

    def all(self, kind: str) -> Iterator[Obj]:
        return iter(self._by_kind[kind].values())

    def count(self, kind: str) -> int:
        return len(self._by_kind[kind])

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

    def attachments_on(self, node_name: str) -> Iterator[Obj]:
        """The VolumeAttachments whose ``spec.nodeName`` is ``node_name``."""
        return iter(self._attachments_by_node.get(node_name, {}).values())


def _attached_node(attachment: Mapping[str, Any]) -> str:
    return (attachment.get("spec") or {}).get("nodeName") or ""
