"""Storage objects for the volume plugins' tests: API-shaped PVs, PVCs, StorageClasses and CSINodes."""

from __future__ import annotations

from typing import Any

from kopf_scheduler.state.cache import ClusterCache


def pvc(
    name: str, *, volume: str = "", sc: str | None = None, modes: list[str] | None = None, ns: str = "default"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": modes or ["ReadWriteOnce"]}
    if volume:
        spec["volumeName"] = volume
    if sc is not None:
        spec["storageClassName"] = sc
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def pv(name: str, *, labels: dict[str, str] | None = None, **source: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": dict(source)}


def storage_class(
    name: str, mode: str | None = "WaitForFirstConsumer", provisioner: str = "x.csi.io"
) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner}
    if mode is not None:
        body["volumeBindingMode"] = mode
    return body


def csi_node(name: str, **limits: int | None) -> dict[str, Any]:
    drivers = []
    for driver, count in limits.items():
        entry: dict[str, Any] = {"name": driver.replace("_", "."), "nodeID": name}
        if count is not None:
            entry["allocatable"] = {"count": count}
        drivers.append(entry)
    return {"metadata": {"name": name}, "spec": {"drivers": drivers}}


def claim_volume(claim: str, name: str = "") -> dict[str, Any]:
    return {"name": name or f"v-{claim}", "persistentVolumeClaim": {"claimName": claim}}


def fill(cache: ClusterCache, *objects: tuple[str, dict[str, Any]]) -> ClusterCache:
    for kind, obj in objects:
        cache.objects.apply(kind, "ADDED", obj)
    return cache
