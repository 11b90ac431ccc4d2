"""Devices (DRA) in generated scenarios, and how the harness keeps upstream from allocating them.

Why a pass of its own: DynamicResources (upstream ``pkg/scheduler/framework/plugins/dynamicresources`` with
``k8s.io/dynamic-resource-allocation/structured``) only judges pods with ResourceClaims, so a fraction of
scenarios (:data:`DEVICE_FRACTION`) get devices after everything else is built, from
``random.Random(f"devices-{seed}")``: every other object of a seed stays as it was.

What a device scenario holds (cluster-scoped names carry the seed, so scenarios never meet):

- two DeviceClasses of one fake driver (:data:`DRIVER`): any device of the driver, and only devices with at
  least 40 (GiB) of the ``memory`` attribute (a CEL comparison);
- ResourceSlices for most nodes (seven in ten; one pool per node, generation 1, one slice): one to four
  devices each, with a ``model`` string and a ``memory`` int attribute; nodes without a slice have no devices;
- for some pending pods, a ResourceClaim of their own (the pod names it in ``spec.resourceClaims``): one
  request of either class, one or two devices, sometimes a CEL selector on the model, sometimes
  ``allocationMode: All``. A claim is created with the ``resource.kubernetes.io/delete-protection`` finalizer,
  so that a scheduler's PreBind goes straight to the status update (the finalizer update comes first only
  when the finalizer is missing).

DRA-backed extended resources (DRAExtendedResource, :func:`add_extended_resources`, its own RNG
``extended-{seed}`` so the device pass above draws as before): in half of the device scenarios a third class
backs ``conformance.example.com/gpu-<seed>`` (``spec.extendedResourceName``), and some pending pods ask for
one or two of it, or of the class's implicit ``deviceclass.resource.kubernetes.io/<class>``, in their first
container (requests and limits); no node advertises either, so both schedulers leave it to DynamicResources,
which allocates it through a claim the scheduler creates in PreBind.

Upstream never allocates: a ValidatingAdmissionPolicy denies its claim status updates with a message that
carries the allocation it tried to write (``request=pool/device``, comma separated), so upstream's choice of
devices is read from the pod's SchedulerError condition, as its node is read from the nomination it sets
before PreBind. Its claim for DRA-backed extended resources goes through the same door: upstream's PreBind
(``bindClaim``) creates that claim without an allocation (a CREATE, let through), adds the finalizer (an
update of the claim itself, let through), then writes the allocation in a status update: denied, with the
devices in the message. Its request names are upstream's ``container-<i>-request-<j>``, as ours names them,
so the same ``request=pool/device`` strings are compared. User claims come first in upstream's PreBind (the
extended-resource claim is the claim store's last), so a pod with both has its user claim's devices
compared, and upstream never creates its extended-resource claim.

Upstream's claim, created and never allocated, must not outlive the pod's verdict. Upstream deletes it itself:
the failed PreBind's Unreserve (``unreserveExtendedResourceClaim``: finalizer dropped, claim deleted) runs
before the failure handler writes the SchedulerError condition the harness waits for. Between the two,
upstream's assume cache briefly holds the claim *with* the denied allocation (``bindClaim``'s deferred
``waitForExtendedClaimInAssumeCache`` assumes the in-memory copy the status update failed to write), so its
allocated-devices index logs those devices taken and, once the finalizer update or the deletion reaches the
informer, free again: the harness waits for that ``Observed device deallocation`` before ours runs
(:func:`upstream_claim_lines`), and deletes a claim of upstream's pod that is still there (none, so far).

Ours allocates for real; a claim ours allocated (its extended-resource claim too) stays allocated for the next
pods (both schedulers see its devices taken; the harness waits for upstream's ``allocateddevices.go`` line
saying so).
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conformance.oracle import parse_line

DEVICE_FRACTION = 0.35
#: Of the device scenarios, those that also get DRA-backed extended resources.
EXTENDED_FRACTION = 0.5
#: Upstream ``resourceapi.ResourceDeviceClassPrefix``: a DeviceClass's implicit extended resource name.
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
#: The explicit extended resource names of the backing classes (``<prefix><seed>``).
EXTENDED_PREFIX = "conformance.example.com/gpu-"
#: Upstream ``resourceapi.ExtendedResourceClaimAnnotation``: the claims a scheduler created for such resources.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
DRIVER = "gpu.conformance.example.com"
FINALIZER = "resource.kubernetes.io/delete-protection"
MODELS = ("a100", "h100", "t4")
MEMORIES = (16, 40, 80)
GROUP, VERSION = "resource.k8s.io", "v1"
#: What the harness feeds the in-process model and creates through the generic API.
DEVICE_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim")
_PLURALS = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices", "ResourceClaim": "resourceclaims"}

NO_CLAIM_WRITES_POLICY = "conformance-no-claim-writes"
CLAIMS_DENIED_MARKER = "conformance: upstream may not write claims"
_ALLOCATED = re.compile(re.escape(CLAIMS_DENIED_MARKER) + r"; allocated \[([^\]]*)\]")

Obj = dict[str, Any]


# -- the generator pass ---------------------------------------------------------------------------------------
def add_devices(scenario: Any, seed: int) -> None:
    """Give ``scenario`` devices and some of its pending pods claims (in :data:`DEVICE_FRACTION` of the seeds)."""
    rng = random.Random(f"devices-{seed}")
    if rng.random() >= DEVICE_FRACTION:
        return
    any_gpu, big_gpu = f"gpu-{seed}", f"big-gpu-{seed}"
    scenario.device_classes = [
        _device_class(any_gpu, f'device.driver == "{DRIVER}"'),
        _device_class(big_gpu, f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].memory >= 40'),
    ]
    for node in scenario.nodes:
        if rng.random() < 0.7:
            scenario.resource_slices.append(_slice(node["metadata"]["name"], rng))
    for pending in scenario.pending:
        if rng.random() < 0.4:
            claim = _claim(pending.namespace, f"{pending.name}-gpu", rng.choice((any_gpu, big_gpu)), rng)
            scenario.resource_claims.append(claim)
            spec = pending.manifest["spec"]
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]
            spec["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]
            pending.features = tuple(sorted({*pending.features, "DynamicResources"}))
    add_extended_resources(scenario, seed)


def add_extended_resources(scenario: Any, seed: int) -> None:
    """In :data:`EXTENDED_FRACTION` of the device scenarios: a class backing an extended resource, and pods
    asking for it (by that name or the class's implicit one)."""
    if not scenario.device_classes:
        return
    rng = random.Random(f"extended-{seed}")
    if rng.random() >= EXTENDED_FRACTION:
        return
    name, explicit = f"ext-gpu-{seed}", f"{EXTENDED_PREFIX}{seed}"
    scenario.device_classes.append(_device_class(name, f'device.driver == "{DRIVER}"', extended=explicit))
    for pending in scenario.pending:
        if rng.random() < 0.35:
            resource = rng.choice((explicit, DEVICE_CLASS_PREFIX + name))
            count = str(rng.choice((1, 1, 2)))
            resources = pending.manifest["spec"]["containers"][0].setdefault("resources", {})
            resources.setdefault("requests", {})[resource] = count
            resources.setdefault("limits", {})[resource] = count
            pending.features = tuple(sorted({*pending.features, "DynamicResources"}))


def _device_class(name: str, expression: str, *, extended: str = "") -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": expression}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def _slice(node: str, rng: random.Random) -> Obj:
    devices = [
        {
            "name": f"gpu-{index}",
            "attributes": {"model": {"string": rng.choice(MODELS)}, "memory": {"int": rng.choice(MEMORIES)}},
        }
        for index in range(rng.randint(1, 4))
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _claim(namespace: str, name: str, device_class: str, rng: random.Random) -> Obj:
    exactly: Obj = {"deviceClassName": device_class}
    roll = rng.random()
    if roll < 0.15:
        exactly["allocationMode"] = "All"
    elif roll < 0.4:
        exactly["count"] = 2
    if rng.random() < 0.4:
        model = rng.choice(MODELS)
        exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{model}"'}}]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "finalizers": [FINALIZER]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


# -- the harness ----------------------------------------------------------------------------------------------
def create_device_object(api: client.ApiClient, obj: Obj) -> Obj:
    objects = client.CustomObjectsApi(api)
    plural = _PLURALS[obj["kind"]]
    namespace = (obj.get("metadata") or {}).get("namespace")
    if namespace:
        return objects.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, obj)  # type: ignore[no-any-return]
    return objects.create_cluster_custom_object(GROUP, VERSION, plural, obj)  # type: ignore[no-any-return]


def read_claim(api: client.ApiClient, namespace: str, name: str) -> Obj | None:
    try:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, namespace, "resourceclaims", name
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def pod_claim_names(manifest: Obj) -> list[str]:
    return [c["resourceClaimName"] for c in manifest["spec"].get("resourceClaims") or () if c.get("resourceClaimName")]


def allocated_devices(claim: Obj | None) -> list[str]:
    """``request=pool/device`` for each device of the claim's allocation (what the policy message prints)."""
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    return [f"{r['request']}={r['pool']}/{r['device']}" for r in (allocation.get("devices") or {}).get("results") or ()]


def denied_devices(message: str | None) -> list[str] | None:
    """Upstream's allocation, from its PreBind error (the policy's message); None when the message has none."""
    found = _ALLOCATED.search(message or "")
    if found is None:
        return None
    return [item for item in found.group(1).split(",") if item]


def extended_claim_name(pod: Obj | None) -> str | None:
    """The claim a scheduler created for the pod's DRA-backed extended resources (its status says which)."""
    status = ((pod or {}).get("status") or {}).get("extendedResourceClaimStatus") or {}
    return status.get("resourceClaimName") or None


def asks_for_extended_devices(manifest: Mapping[str, Any]) -> bool:
    """The pod asks for a DRA-backed extended resource of :func:`add_extended_resources` in some container."""
    spec = manifest.get("spec") or {}
    return any(
        name.startswith((EXTENDED_PREFIX, DEVICE_CLASS_PREFIX))
        for container in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ()))
        for name in ((container.get("resources") or {}).get("requests") or {})
    )


def compared_claims(user_claims: list[str], extended: str | None) -> list[str]:
    """Ours' claims whose devices stand against upstream's denied write: its PreBind writes the user claims
    first (the extended-resource claim is the last of its claim store), so the first denial is a user claim's
    when the pod has one, else the extended-resource claim's."""
    if user_claims:
        return list(user_claims)
    return [extended] if extended else []


def extended_devices_compared(manifest: Mapping[str, Any]) -> bool:
    """The devices compared for the pod are its extended-resource claim's (see :func:`compared_claims`)."""
    return asks_for_extended_devices(manifest) and not pod_claim_names(dict(manifest))


def upstream_claim_lines(lines: Iterable[str], namespace: str, pod: str) -> list[tuple[str, str, str]]:
    """The ``Observed device deallocation`` lines upstream owes for its extended-resource claim of the pod: one
    per ``Observed device allocation`` line of it (its assume cache held the denied allocation for a moment,
    see the module docstring), each (message, key, value) as the harness's log waits take them."""
    prefix = f"{namespace}/{pod}-extended-resources-"
    wanted: list[tuple[str, str, str]] = []
    for parsed in map(parse_line, lines):
        if parsed is None or parsed[1] != "Observed device allocation":
            continue
        claim = parsed[2].get("claim", "")
        if claim.startswith(prefix):
            wanted.append(("Observed device deallocation", "claim", claim))
    return wanted


def delete_owned_extended_claims(api: client.ApiClient, namespace: str, owner_uid: str) -> list[str]:
    """Delete the extended-resource claims the pod ``owner_uid`` owns (finalizers dropped); their names."""
    objects = client.CustomObjectsApi(api)
    owned = [
        claim["metadata"]["name"]
        for claim in objects.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]
        if (claim["metadata"].get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
        and any(ref.get("uid") == owner_uid for ref in claim["metadata"].get("ownerReferences") or ())
    ]
    for name in owned:
        _delete_claim(objects, namespace, name)
    return owned


def _delete_claim(objects: client.CustomObjectsApi, namespace: str, name: str) -> None:
    with contextlib.suppress(ApiException):
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "resourceclaims", name, {"metadata": {"finalizers": None}}
        )
    with contextlib.suppress(ApiException):
        objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name)


def delete_devices(api: client.ApiClient, scenario: Any) -> None:
    """Remove the scenario's claims and the ones ours created for extended resources (finalizers dropped: no
    controller runs here), slices and classes."""
    objects = client.CustomObjectsApi(api)
    created = [
        claim
        for namespace in scenario.namespace_names
        for claim in objects.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]
        if (claim["metadata"].get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
    ]
    for claim in (*scenario.resource_claims, *created):
        _delete_claim(objects, claim["metadata"]["namespace"], claim["metadata"]["name"])
    for obj in (*scenario.resource_slices, *scenario.device_classes):
        with contextlib.suppress(ApiException):
            objects.delete_cluster_custom_object(GROUP, VERSION, _PLURALS[obj["kind"]], obj["metadata"]["name"])


def no_claim_writes_policy(upstream_user: str) -> tuple[Obj, Obj]:
    """The policy and binding that deny ``upstream_user``'s claim status updates, saying what it tried to
    allocate (nothing, for a status update without an allocation). Creations and updates of the claim itself
    pass: upstream's extended-resource claim is created, given its finalizer and deleted again (its Unreserve)
    through those, and its allocation still goes through the status."""
    results = "object.status.allocation.devices.results"
    allocated = (
        f"(has(object.status) && has(object.status.allocation) ? "
        f"{results}.map(r, r.request + '=' + r.pool + '/' + r.device).join(',') : '')"
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NO_CLAIM_WRITES_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        # Only the status: allocations and reservations (PATCH is an UPDATE here).
                        "operations": ["UPDATE"],
                        "resources": ["resourceclaims/status"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"request.userInfo.username != '{upstream_user}'",
                    "messageExpression": f"'{CLAIMS_DENIED_MARKER}; allocated [' + {allocated} + ']'",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NO_CLAIM_WRITES_POLICY},
        "spec": {"policyName": NO_CLAIM_WRITES_POLICY, "validationActions": ["Deny"]},
    }
    return policy, binding
