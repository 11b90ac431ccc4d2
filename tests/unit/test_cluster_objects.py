"""The storage store the volume plugins read (state/objects.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.objects import (
    DEVICE_CLASS,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    VOLUME_ATTACHMENT,
    ClusterObjects,
)


def _obj(name: str, namespace: str | None = None, rv: str = "1") -> dict:
    meta = {"name": name, "resourceVersion": rv}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"metadata": meta}


def test_apply_returns_old_and_new_and_deletes() -> None:
    store = ClusterObjects()
    first = _obj("c", "ns")
    assert store.apply(PERSISTENT_VOLUME_CLAIM, "ADDED", first) == (None, first)
    second = _obj("c", "ns", rv="2")
    assert store.apply(PERSISTENT_VOLUME_CLAIM, "MODIFIED", second) == (first, second)
    assert store.pvc("ns", "c") is second
    assert store.pvc("other", "c") is None
    assert store.apply(PERSISTENT_VOLUME_CLAIM, "DELETED", second) == (second, None)
    assert store.count(PERSISTENT_VOLUME_CLAIM) == 0


def test_cluster_scoped_kinds_ignore_a_namespace() -> None:
    store = ClusterObjects()
    pv = _obj("pv-1", "stray")
    store.apply(PERSISTENT_VOLUME, None, pv)
    assert store.pv("pv-1") is pv
    assert store.keys(PERSISTENT_VOLUME) == {("", "pv-1")}
    assert store.remove(PERSISTENT_VOLUME, ("", "pv-1")) is pv
    assert list(store.all(PERSISTENT_VOLUME)) == []


def test_the_cache_carries_one_store() -> None:
    assert isinstance(ClusterCache().objects, ClusterObjects)


def _attachment(name: str, node: str | None, rv: str = "1") -> dict:
    body = _obj(name, rv=rv)
    body["spec"] = {"attacher": "d.csi.io", "source": {"persistentVolumeName": "pv"}}
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def _names(store: ClusterObjects, node: str) -> list[str]:
    return sorted(obj["metadata"]["name"] for obj in store.by_node(VOLUME_ATTACHMENT, node))


def _move(store: ClusterObjects) -> None:
    store.apply(VOLUME_ATTACHMENT, "MODIFIED", _attachment("a", "n2", rv="2"))


def _delete(store: ClusterObjects) -> None:
    store.apply(VOLUME_ATTACHMENT, "DELETED", _attachment("a", "n1"))


def _remove(store: ClusterObjects) -> None:
    store.remove(VOLUME_ATTACHMENT, ("", "a"))


def _same_node_update(store: ClusterObjects) -> None:
    store.apply(VOLUME_ATTACHMENT, "MODIFIED", _attachment("a", "n1", rv="2"))


@pytest.mark.parametrize(
    ("change", "on_n1", "on_n2"),
    [
        pytest.param(lambda store: None, ["a", "b"], ["c"], id="added"),
        pytest.param(_same_node_update, ["a", "b"], ["c"], id="updated-same-node"),
        pytest.param(_move, ["b"], ["a", "c"], id="moved-to-another-node"),
        pytest.param(_delete, ["b"], ["c"], id="deleted"),
        pytest.param(_remove, ["b"], ["c"], id="removed-by-relist"),
    ],
)
def test_volume_attachments_are_indexed_by_node(
    change: Callable[[ClusterObjects], None], on_n1: list[str], on_n2: list[str]
) -> None:
    store = ClusterObjects()
    for name, node in (("a", "n1"), ("b", "n1"), ("c", "n2"), ("d", None)):
        store.apply(VOLUME_ATTACHMENT, "ADDED", _attachment(name, node))
    change(store)
    assert _names(store, "n1") == on_n1
    assert _names(store, "n2") == on_n2
    assert _names(store, "n3") == []
    assert _names(store, "") == ["d"]  # no nodeName: indexed under "", as upstream's indexer does


def test_the_index_holds_the_latest_version() -> None:
    store = ClusterObjects()
    store.apply(VOLUME_ATTACHMENT, "ADDED", _attachment("a", "n1"))
    latest = _attachment("a", "n1", rv="2")
    store.apply(VOLUME_ATTACHMENT, "MODIFIED", latest)
    assert list(store.by_node(VOLUME_ATTACHMENT, "n1")) == [latest]


def test_resource_slices_are_indexed_by_node_and_claims_are_namespaced() -> None:
    store = ClusterObjects()
    local = {"metadata": {"name": "s1"}, "spec": {"nodeName": "n1", "driver": "gpu.example.com"}}
    shared = {"metadata": {"name": "s2"}, "spec": {"allNodes": True, "driver": "gpu.example.com"}}
    store.apply(RESOURCE_SLICE, "ADDED", local)
    store.apply(RESOURCE_SLICE, "ADDED", shared)
    assert list(store.by_node(RESOURCE_SLICE, "n1")) == [local]
    assert list(store.by_node(RESOURCE_SLICE, "")) == [shared]
    store.apply(RESOURCE_CLAIM, "ADDED", _obj("c", "ns"))
    assert store.get(RESOURCE_CLAIM, "c", "ns") is not None
    assert store.get(RESOURCE_CLAIM, "c", "other") is None
    store.apply(DEVICE_CLASS, "ADDED", _obj("gpu", "stray"))
    assert store.keys(DEVICE_CLASS) == {("", "gpu")}


def test_observers_hear_every_store_and_drop_of_their_kind_only() -> None:
    store = ClusterObjects()
    heard: list[tuple[tuple[str, str], str | None, str | None]] = []

    def rv(obj: dict | None) -> str | None:
        return None if obj is None else obj["metadata"]["resourceVersion"]

    store.observe(RESOURCE_CLAIM, lambda key, old, new: heard.append((key, rv(old), rv(new))))
    store.apply(RESOURCE_CLAIM, "ADDED", _obj("c", "ns"))
    store.apply(RESOURCE_CLAIM, "MODIFIED", _obj("c", "ns", rv="2"))
    store.apply(PERSISTENT_VOLUME_CLAIM, "ADDED", _obj("c", "ns"))  # another kind: not heard
    store.remove(RESOURCE_CLAIM, ("ns", "c"))  # the reconciling LIST drops it
    store.apply(RESOURCE_CLAIM, "ADDED", _obj("d", "ns"))
    store.apply(RESOURCE_CLAIM, "DELETED", _obj("d", "ns"))
    assert heard == [
        (("ns", "c"), None, "1"),
        (("ns", "c"), "1", "2"),
        (("ns", "c"), "2", None),
        (("ns", "d"), None, "1"),
        (("ns", "d"), "1", None),
    ]
