"""The objects of default-profile timelines on a real API server: what :mod:`tests.conformance.timeline_harness`
creates, patches and deletes beyond nodes, pods and PodGroups, and the controllers it stands in for.

Why a module of its own: the gang timelines need nodes, pods and PodGroups only; the default-profile timelines
(:mod:`tests.conformance.default_timelines`, issue 37 item 1) also change nodes (labels, taints,
``spec.unschedulable``), remove pods' scheduling gates, and create PersistentVolumes, claims, ResourceSlices,
ResourceClaims and PodDisruptionBudgets between steps. The light control planes run no controllers, so:

- a PodDisruptionBudget is created with the status the generator drew (``disruptionsAllowed``), written once as
  the disruption controller would (upstream's DefaultPreemption reads only the status);
- a PersistentVolume or claim is created with its status (``Available``, ``Pending``), as
  :func:`tests.conformance.volume_harness.create_storage` does for the single-pod scenarios;
- the PV controller's half of a binding a scheduler's PreBind started (VolumeBinding writes the PV's
  ``claimRef`` and waits until the claim is Bound) is done by :func:`stand_in` on both sides alike while the
  harness waits for the state to settle (:func:`tests.conformance.volume_harness.complete_bindings`).

Patches are JSON patches (a list of operations): ``add`` on an existing path replaces it, so one shape sets a
label, a node's taints, ``spec.unschedulable`` or a pod's remaining scheduling gates.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conformance.volume_harness import complete_bindings, create_storage

RESOURCE = ("resource.k8s.io", "v1")
_RESOURCE_PLURALS = {
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
}
#: Every cluster-scoped object a timeline creates carries this label (its seed), so cleanup finds them.
TIMELINE_LABEL = "conformance/seed"
STORAGE_KINDS = ("StorageClass", "PersistentVolume", "PersistentVolumeClaim")

Obj = dict[str, Any]


def create(api: client.ApiClient, kind: str, body: Obj, namespace: str) -> None:
    """Create one object of a kind the gang harness does not know (its status too, where a controller would)."""
    if kind in STORAGE_KINDS:
        obj = dict(body)
        if kind == "PersistentVolumeClaim":
            obj["metadata"] = {**body["metadata"], "namespace": namespace}
        create_storage(api, obj)
    elif kind in _RESOURCE_PLURALS:
        objects = client.CustomObjectsApi(api)
        plural = _RESOURCE_PLURALS[kind]
        if kind == "ResourceClaim":
            objects.create_namespaced_custom_object(*RESOURCE, namespace, plural, body)
        else:
            objects.create_cluster_custom_object(*RESOURCE, plural, body)
    elif kind == "PodDisruptionBudget":
        policy = client.PolicyV1Api(api)
        spec = {k: v for k, v in body.items() if k != "status"}
        policy.create_namespaced_pod_disruption_budget(namespace, spec)
        if body.get("status"):
            name = body["metadata"]["name"]
            policy.patch_namespaced_pod_disruption_budget_status(name, namespace, {"status": body["status"]})
    else:
        raise ValueError(f"cannot create {kind}")


def patch(api: client.ApiClient, kind: str, name: str, operations: list[Obj], namespace: str) -> None:
    """A JSON patch of a node or a pod."""
    core = client.CoreV1Api(api)
    if kind == "Node":
        core.patch_node(name, operations)
    elif kind == "Pod":
        core.patch_namespaced_pod(name, namespace, operations)
    else:
        raise ValueError(f"cannot patch {kind}")


def delete(api: client.ApiClient, kind: str, name: str, namespace: str) -> None:
    if kind == "PodDisruptionBudget":
        client.PolicyV1Api(api).delete_namespaced_pod_disruption_budget(name, namespace)
    elif kind == "PersistentVolumeClaim":
        core = client.CoreV1Api(api)
        core.patch_namespaced_persistent_volume_claim(name, namespace, {"metadata": {"finalizers": None}})
        core.delete_namespaced_persistent_volume_claim(name, namespace)
    else:
        raise ValueError(f"cannot delete {kind}")


def stand_in(api: client.ApiClient, seed: int) -> None:
    """The PV controller's half of the bindings a PreBind started on this side (the timeline's PVs only)."""
    with contextlib.suppress(ApiException):
        complete_bindings(api, types.SimpleNamespace(seed=seed, claims=[]))


def cleanup(api: client.ApiClient, seed: int, namespace: str) -> None:
    """Remove what a timeline left beyond its pods and nodes (protection finalizers dropped: no controller would)."""
    core, objects = client.CoreV1Api(api), client.CustomObjectsApi(api)
    unhold = {"metadata": {"finalizers": None}}
    selector = f"{TIMELINE_LABEL}={seed}"
    with contextlib.suppress(ApiException):
        for claim in core.list_namespaced_persistent_volume_claim(namespace).items:
            with contextlib.suppress(ApiException):
                delete(api, "PersistentVolumeClaim", claim.metadata.name, namespace)
    with contextlib.suppress(ApiException):
        for pv in core.list_persistent_volume(label_selector=selector).items:
            with contextlib.suppress(ApiException):
                core.patch_persistent_volume(pv.metadata.name, unhold)
                core.delete_persistent_volume(pv.metadata.name)
    with contextlib.suppress(ApiException):
        claims = objects.list_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims")["items"]
        for claim in claims:
            name = claim["metadata"]["name"]
            with contextlib.suppress(ApiException):
                objects.patch_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims", name, unhold)
                objects.delete_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims", name)
    with contextlib.suppress(ApiException):
        objects.delete_collection_cluster_custom_object(*RESOURCE, "resourceslices", label_selector=selector)
    with contextlib.suppress(ApiException):
        objects.delete_collection_cluster_custom_object(*RESOURCE, "deviceclasses", label_selector=selector)
    with contextlib.suppress(ApiException):
        client.StorageV1Api(api).delete_collection_storage_class(label_selector=selector)
    with contextlib.suppress(ApiException):
        client.PolicyV1Api(api).delete_collection_namespaced_pod_disruption_budget(namespace)
