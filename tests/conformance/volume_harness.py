"""The harness's storage half: upstream never writes a volume binding, ours has a PV controller to finish them.

Why: VolumeBinding's PreBind (upstream ``volumebinding/binder.go`` ``BindPodVolumes``) writes a PV's
``claimRef`` for each claim it matched statically and a claim's ``volume.kubernetes.io/selected-node`` for
each claim to provision dynamically, then waits for the PV controller (and the external provisioner) to
finish the binding. Upstream decides first on every pod and must leave the state as it
found it, so:

- a ValidatingAdmissionPolicy (:data:`NO_VOLUME_WRITES_POLICY`) denies upstream's ServiceAccount every
  UPDATE of PersistentVolumes and PersistentVolumeClaims (the selected-node annotation is a claim UPDATE, so
  it is denied too). Its PreBind fails on the first write, nothing is
  written, and the pod gets a ``SchedulerError`` condition whose message carries :data:`DENIED_MARKER`.
  The node it chose is not in that message: with NominatedNodeNameForExpectation (beta, on in 1.36) upstream
  sets the pod's ``status.nominatedNodeName`` at the start of a binding cycle whose PreBind has work, and its
  failure handler clears it again. The runner's pod watch (preemption_harness.py ``PodWatch``) keeps the
  first nomination each pod UID ever had, which is that node. A pod whose claims are all bound has no PreBind
  work and reaches Bind, denied as before (runner.py);
- the light control plane runs no kube-controller-manager, so the harness stands in for the PV controller
  on our side only (:func:`complete_bindings`, called while waiting for our verdict): a PV whose ``claimRef``
  now carries a claim UID (what our PreBind writes) gets its claim bound (``spec.volumeName`` and
  ``pv.kubernetes.io/bind-completed``) and both statuses set to Bound. Our PreBind then sees the binding
  complete and binds the pod, and the next pod meets the bound claim on both sides, as it would after a
  real cluster's controller. For a claim our PreBind annotated with a selected node it is also the CSI
  provisioner (:func:`provisioned_volume`): it creates a PV for the claim pinned to that node (by
  ``kubernetes.io/hostname``), whose binding it then completes the same way. Published CSIStorageCapacities
  are left as they were: both schedulers see the same ones.

A controller-manager limited to ``--controllers=persistentvolume-binder`` was the other way; it would also
bind Immediate claims on its own the moment a PV matches, which would change the scenario under both
schedulers at a time of its choosing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conformance.volumes import BIND_COMPLETED, CSI_DRIVER, HOSTNAME_KEY, STORAGE_KINDS

__all__ = [
    "STORAGE_KINDS",
    "complete_bindings",
    "create_storage",
    "delete_storage",
    "provisioned_volume",
    "read_storage",
]

NO_VOLUME_WRITES_POLICY = "conformance-upstream-never-writes-volumes"
DENIED_MARKER = "conformance: upstream may not write volume bindings"
SELECTED_NODE = "volume.kubernetes.io/selected-node"

Obj = dict[str, Any]


def _raw(response: Any) -> Obj:
    return json.loads(response.data)  # type: ignore[no-any-return]


def no_volume_writes_policy(upstream_user: str) -> tuple[Obj, Obj]:
    """The policy and its binding that deny ``upstream_user``'s PV and PVC updates."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NO_VOLUME_WRITES_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["persistentvolumes", "persistentvolumeclaims"],
                    }
                ]
            },
            "validations": [
                {"expression": f"request.userInfo.username != '{upstream_user}'", "message": DENIED_MARKER}
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NO_VOLUME_WRITES_POLICY},
        "spec": {"policyName": NO_VOLUME_WRITES_POLICY, "validationActions": ["Deny"]},
    }
    return policy, binding


def create_storage(api: client.ApiClient, obj: Mapping[str, Any]) -> Obj:
    """Create one storage object; a PV's or claim's ``status`` (phase) is then written as the controller would."""
    kind = obj["kind"]
    body = {k: v for k, v in obj.items() if k != "status"}
    core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
    if kind == "StorageClass":
        return _raw(storage.create_storage_class(body, _preload_content=False))
    if kind == "CSINode":
        return _raw(storage.create_csi_node(body, _preload_content=False))
    if kind == "CSIDriver":
        return _raw(storage.create_csi_driver(body, _preload_content=False))
    if kind == "CSIStorageCapacity":
        namespace = obj["metadata"]["namespace"]
        return _raw(storage.create_namespaced_csi_storage_capacity(namespace, body, _preload_content=False))
    status = {"status": obj["status"]} if obj.get("status") else None
    if kind == "PersistentVolume":
        created = _raw(core.create_persistent_volume(body, _preload_content=False))
        if status is None:
            return created
        return _raw(core.patch_persistent_volume_status(created["metadata"]["name"], status, _preload_content=False))
    if kind == "PersistentVolumeClaim":
        namespace = obj["metadata"]["namespace"]
        created = _raw(core.create_namespaced_persistent_volume_claim(namespace, body, _preload_content=False))
        if status is None:
            return created
        name = created["metadata"]["name"]
        return _raw(
            core.patch_namespaced_persistent_volume_claim_status(name, namespace, status, _preload_content=False)
        )
    raise ValueError(kind)


def read_storage(api: client.ApiClient, scenario: Any) -> list[Obj]:
    """The scenario's PVs and claims as they are now (after bindings), for the in-process model."""
    core = client.CoreV1Api(api)
    out: list[Obj] = list(_scenario_volumes(core, scenario))
    for claim in scenario.claims:
        meta = claim["metadata"]
        with contextlib.suppress(ApiException):
            out.append(
                _raw(
                    core.read_namespaced_persistent_volume_claim(
                        meta["name"], meta["namespace"], _preload_content=False
                    )
                )
            )
    for obj in out:
        obj.setdefault("kind", "PersistentVolume" if "namespace" not in obj["metadata"] else "PersistentVolumeClaim")
    return out


def _scenario_volumes(core: client.CoreV1Api, scenario: Any) -> list[Obj]:
    """The scenario's PVs now: the generated ones and those the stand-in provisioner made (all carry its seed)."""
    selector = f"conformance/seed={scenario.seed}"
    items: list[Obj] = _raw(core.list_persistent_volume(label_selector=selector, _preload_content=False))["items"]
    return items


def provisioned_volume(claim: Mapping[str, Any], node: str, seed: int) -> Obj:
    """The PV a CSI provisioner would create for ``claim`` on ``node``, pre-bound to it by UID."""
    meta, spec = claim["metadata"], claim["spec"]
    name = f"c{seed}-prov-{meta['name']}"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"conformance/seed": str(seed)}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": list(spec["accessModes"]),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec["storageClassName"],
            "csi": {"driver": CSI_DRIVER, "volumeHandle": name},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOSTNAME_KEY, "operator": "In", "values": [node]}]}
                    ]
                }
            },
            "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
        },
    }


def provision(api: client.ApiClient, scenario: Any) -> int:
    """The external provisioner's half: a PV for each claim our PreBind gave a selected node; returns how many."""
    core = client.CoreV1Api(api)
    done = 0
    for generated in scenario.claims:
        meta = generated["metadata"]
        with contextlib.suppress(ApiException):
            claim = _raw(
                core.read_namespaced_persistent_volume_claim(meta["name"], meta["namespace"], _preload_content=False)
            )
            node = (claim["metadata"].get("annotations") or {}).get(SELECTED_NODE)
            if node and not claim["spec"].get("volumeName"):
                core.create_persistent_volume(provisioned_volume(claim, node, scenario.seed))
                done += 1
    return done


def complete_bindings(api: client.ApiClient, scenario: Any) -> int:
    """The PV controller's half of a binding our PreBind started (static, or provisioned); returns how many."""
    core = client.CoreV1Api(api)
    provision(api, scenario)
    done = 0
    for pv in _scenario_volumes(core, scenario):
        ref = pv["spec"].get("claimRef") or {}
        if ref.get("uid") and (pv.get("status") or {}).get("phase") != "Bound":
            with contextlib.suppress(ApiException):
                done += _bind_claim(core, pv, ref)
    return done


def _bind_claim(core: client.CoreV1Api, pv: Obj, ref: Mapping[str, str]) -> int:
    namespace, claim_name, name = ref["namespace"], ref["name"], pv["metadata"]["name"]
    claim = _raw(core.read_namespaced_persistent_volume_claim(claim_name, namespace, _preload_content=False))
    if claim["metadata"]["uid"] != ref["uid"]:
        return 0
    if not claim["spec"].get("volumeName"):
        annotations = {BIND_COMPLETED: "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
        patch = {"metadata": {"annotations": annotations}, "spec": {"volumeName": name}}
        core.patch_namespaced_persistent_volume_claim(claim_name, namespace, patch)
    status = {"phase": "Bound", "accessModes": pv["spec"]["accessModes"], "capacity": pv["spec"]["capacity"]}
    core.patch_namespaced_persistent_volume_claim_status(claim_name, namespace, {"status": status})
    core.patch_persistent_volume_status(name, {"status": {"phase": "Bound"}})
    return 1


def delete_storage(api: client.ApiClient, scenario: Any) -> None:
    """Remove the scenario's storage (protection finalizers dropped: no controller would ever drop them)."""
    core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
    unhold = {"metadata": {"finalizers": None}}
    calls: list[tuple[Callable[..., Any], Callable[..., Any], tuple[str, ...]]] = []
    for claim in scenario.claims:
        meta = claim["metadata"]
        calls.append(
            (
                core.patch_namespaced_persistent_volume_claim,
                core.delete_namespaced_persistent_volume_claim,
                (meta["name"], meta["namespace"]),
            )
        )
    names = {pv["metadata"]["name"] for pv in scenario.volumes}
    with contextlib.suppress(ApiException):
        names |= {pv["metadata"]["name"] for pv in _scenario_volumes(core, scenario)}
    for name in sorted(names):
        calls.append((core.patch_persistent_volume, core.delete_persistent_volume, (name,)))
    for patch, delete, args in calls:
        with contextlib.suppress(ApiException):
            patch(*args, unhold)
        with contextlib.suppress(ApiException):
            delete(*args)
    for obj in scenario.storage_classes:
        with contextlib.suppress(ApiException):
            storage.delete_storage_class(obj["metadata"]["name"])
    for obj in scenario.csinodes:
        with contextlib.suppress(ApiException):
            storage.delete_csi_node(obj["metadata"]["name"])
    for obj in scenario.csi_drivers:
        with contextlib.suppress(ApiException):
            storage.delete_csi_driver(obj["metadata"]["name"])
    for obj in scenario.capacities:
        with contextlib.suppress(ApiException):
            meta = obj["metadata"]
            storage.delete_namespaced_csi_storage_capacity(meta["name"], meta["namespace"])
