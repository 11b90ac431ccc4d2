"""The storage store the volume plugins read (state/storage.py)."""

from __future__ import annotations

from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.storage import (
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    VOLUME_ATTACHMENT,
    StorageObjects,
)


def _obj(name: str, namespace: str | None = None, rv: str = "1") -> dict:
    meta = {"name": name, "resourceVersion": rv}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"metadata": meta}


def test_apply_returns_old_and_new_and_deletes() -> None:
    store = StorageObjects()
    first = _obj("c", "ns")
    assert store.apply(PERSISTENT_VOLUME_CLAIM, "ADDED", first) == (None, first)
    second = _obj("c", "ns", rv="2")
    assert store.apply(PERSISTENT_VOLUME_CLAIM, "MODIFIED", second) == (first, second)
    assert store.pvc("ns", "c") is second
    assert store.pvc("other", "c") is None
    assert store.apply(PERSISTENT_VOLUME_CLAIM, "DELETED", second) == (second, None)
    assert store.count(PERSISTENT_VOLUME_CLAIM) == 0


def test_cluster_scoped_kinds_ignore_a_namespace() -> None:
    store = StorageObjects()
    pv = _obj("pv-1", "stray")
    store.apply(PERSISTENT_VOLUME, None, pv)
    assert store.pv("pv-1") is pv
    assert store.keys(PERSISTENT_VOLUME) == {("", "pv-1")}
    assert store.remove(PERSISTENT_VOLUME, ("", "pv-1")) is pv
    assert list(store.all(PERSISTENT_VOLUME)) == []


def test_the_cache_carries_one_store() -> None:
    assert isinstance(ClusterCache().storage, StorageObjects)


def _attachment(name: str, node: str, rv: str = "1") -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv}, "spec": {"nodeName": node}}


def test_volume_attachments_are_indexed_by_node_through_moves_deletes_and_purges() -> None:
    store = StorageObjects()
    store.apply(VOLUME_ATTACHMENT, "ADDED", _attachment("a", "n1"))
    store.apply(VOLUME_ATTACHMENT, "ADDED", _attachment("b", "n1"))
    assert sorted(a["metadata"]["name"] for a in store.attachments_on("n1")) == ["a", "b"]
    moved = _attachment("a", "n2", rv="2")
    store.apply(VOLUME_ATTACHMENT, "MODIFIED", moved)
    assert [a["metadata"]["name"] for a in store.attachments_on("n1")] == ["b"]
    assert list(store.attachments_on("n2")) == [moved]
    store.apply(VOLUME_ATTACHMENT, "DELETED", moved)
    assert list(store.attachments_on("n2")) == []
    store.remove(VOLUME_ATTACHMENT, ("", "b"))
    assert list(store.attachments_on("n1")) == []
    assert store.count(VOLUME_ATTACHMENT) == 0
