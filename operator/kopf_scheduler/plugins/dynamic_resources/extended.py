"""Extended resources backed by DRA (DRAExtendedResource, beta and on in 1.36): a pod asks for
``example.com/gpu: 2`` (a DeviceClass's ``spec.extendedResourceName``) or
``deviceclass.resource.kubernetes.io/<class>: 2`` in its containers' requests, and where the node does not
advertise the resource, DynamicResources allocates devices of that class through a ResourceClaim of the
scheduler's own (upstream ``plugins/dynamicresources/extendeddynamicresources.go``).

How the claim travels through the cycle, as upstream:

* PreFilter: a claim left from an earlier cycle (annotation ``resource.kubernetes.io/extended-resource-claim:
  "true"``, controlled by the pod) is found among all claims; otherwise an in-memory claim named
  ``<extended-resources>`` (not a valid name, so it never meets a real one) with a temporary UID and no
  requests stands in for it.
* Filter: per node, the resources the node does not advertise but a DeviceClass backs become device requests
  (:func:`requests_and_mappings`: one ``container-<i>-request-<j>`` per container and resource, init containers
  reusing what later long-lived containers request); a claim from an earlier cycle that already has requests
  is refused ("cannot schedule extended resource claim") so that PostFilter deletes it.
* PreBind creates the claim (``generateName: <pod>-extended-resources-``, the pod as controller owner), writes
  its allocation and reservation like any claim's, then records ``status.extendedResourceClaimStatus`` in the
  pod (which container's resource maps to which request); Unreserve or PostFilter delete a created claim
  again (the finalizer first), so no device stays claimed for a pod that did not bind.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.framework import APIClient, APIError
from kopf_scheduler.framework.interface import PluginMetrics
from kopf_scheduler.plugins.dynamic_resources.binding import CONFLICT_ATTEMPTS, FINALIZER
from kopf_scheduler.plugins.dynamic_resources.tracker import ClaimTracker
from kopf_scheduler.plugins.helper.device_class_mapping import device_class_for, is_dra_extended_resource_name
from kopf_scheduler.state.objects import DEVICE_CLASS, ClusterObjects
from kopf_scheduler.state.pod_info import PodInfo, is_scalar_resource_name
from kopf_scheduler.state.quantity import QuantityError, parse_quantity

Claim = dict[str, Any]

#: Upstream ``specialClaimInMemName``: the in-memory claim's name until PreBind creates it.
SPECIAL_CLAIM_NAME = "<extended-resources>"
#: Upstream ``resourceapi.ExtendedResourceClaimAnnotation``.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
#: Upstream ``AssumeExtendedResourceTimeoutDefaultSeconds``: how long PreBind waits for the watch to deliver
#: the created claim before it stops counting the claim's devices as in flight.
ASSUME_TIMEOUT_SECONDS = 120.0
#: Upstream polls its assume cache every second for the created claim.
ASSUME_POLL_SECONDS = 1.0

CANNOT_SCHEDULE_CLAIM = "cannot schedule extended resource claim"
CANNOT_FIT_RESOURCE = "cannot fit resource"


@dataclass(slots=True)
class ExtendedRequests:
    """What PreFilter found for a pod with DRA-backed extended resources (upstream ``draExtendedResource``)."""

    #: The pod's scalar requests (upstream ``podScalarResources``), some of them DRA-backed.
    scalar: dict[str, int]
    #: The in-memory claim's temporary UID, or the found claim's (upstream ``initialExtendedResourceClaimUID``).
    initial_uid: str
    #: Node name → (the node's variant of the claim, container→request mappings), set by Filter.
    by_node: dict[str, tuple[Claim | None, list[dict[str, str]]]] = field(default_factory=dict)


def is_special(claim: Claim) -> bool:
    """Upstream ``isSpecialClaimName``: the claim exists only in memory (not created yet)."""
    return (claim.get("metadata") or {}).get("name") == SPECIAL_CLAIM_NAME


def pod_scalar_requests(pod: PodInfo, objects: ClusterObjects) -> dict[str, int] | None:
    """Upstream ``hasDeviceClassMappedExtendedResource`` over the pod's requests: its scalar requests if a
    DeviceClass backs one of them, else None (the pod has nothing for DRA to allocate this way)."""
    if not objects.count(DEVICE_CLASS):
        return None  # the common case: no DeviceClass, nothing can be backed
    requests = pod.requests
    if not any(
        value and is_dra_extended_resource_name(name) and device_class_for(objects, name) is not None
        for name, value in requests.items()
    ):
        return None
    return {name: value for name, value in requests.items() if is_scalar_resource_name(name)}


def find_extended_claim(pod: PodInfo, claims: Iterable[Claim]) -> Claim | None:
    """Upstream ``findExtendedResourceClaim``: the claim an earlier cycle created for the pod, if any."""
    for claim in claims:
        meta = claim.get("metadata") or {}
        if (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) != "true":
            continue
        for ref in meta.get("ownerReferences") or ():
            if ref.get("name") == pod.name and ref.get("controller") and ref.get("uid") == pod.uid:
                return claim
    return None


def in_memory_claim(pod: PodInfo) -> Claim:
    """Upstream PreFilter's in-memory claim: no requests yet, a temporary UID, the pod as controller owner."""
    return {
        "metadata": {
            "namespace": pod.namespace,
            "name": SPECIAL_CLAIM_NAME,
            "uid": str(uuid.uuid4()),
            "generateName": f"{pod.name}-extended-resources-",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
            ],
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
        },
        "spec": {},
    }


def has_requests(claim: Claim) -> bool:
    """Go's ``claim.Spec.Devices.Requests != nil`` (a created claim always has some)."""
    return ((claim.get("spec") or {}).get("devices") or {}).get("requests") is not None


def node_claim(
    claim: Claim,
    extended: ExtendedRequests,
    pod: PodInfo,
    node_allocatable: Mapping[str, int],
    objects: ClusterObjects,
    *,
    has_user_claims: bool,
) -> tuple[Claim | None, list[dict[str, str]], str | None]:
    """Upstream ``filterExtendedResources``: the node's variant of the claim (None: nothing for DRA here), its
    container→request mappings, or an unschedulable reason."""
    if has_requests(claim):
        return None, [], CANNOT_SCHEDULE_CLAIM
    to_allocate: dict[str, int] = {}
    for name, value in extended.scalar.items():
        if not is_dra_extended_resource_name(name) or value == 0:
            continue
        backed = device_class_for(objects, name) is not None
        if backed and node_allocatable.get(name, 0) == 0:
            to_allocate[name] = value
        elif name not in node_allocatable:
            return None, [], CANNOT_FIT_RESOURCE
    if not has_user_claims and not to_allocate:
        return None, [], None  # a device plugin provides everything here
    if (claim.get("status") or {}).get("allocation"):
        return None, [], None
    requests, mappings = requests_and_mappings(pod, to_allocate, objects)
    # Without requests (user claims, and a device plugin provides the resource here) the variant keeps Go's
    # nil request list; PreBind then has no mappings to record, as upstream.
    variant = {**claim, "spec": {"devices": {"requests": requests}} if requests else {}}
    return variant, mappings, None


# -- the claim's requests --------------------------------------------------------------------------------------
def _count(quantity: Any) -> int:
    """Go's ``Quantity.AsInt64`` of a container request; 0 where it is not an integer (no request made)."""
    try:
        value = parse_quantity(quantity)
    except QuantityError:
        return 0
    return int(value) if value.denominator == 1 else 0


def _container_request(
    index: int,
    container: Mapping[str, Any],
    resource: str,
    class_name: str,
    reusable: list[dict[str, Any] | None],
) -> tuple[dict[str, Any] | None, list[dict[str, str]]]:
    """Upstream ``createResourceRequestAndMappings``: the container's own request for ``resource`` (None when
    it needs none beyond ``reusable``, the later long-lived containers' requests) and its mappings."""
    requests = (container.get("resources") or {}).get("requests") or {}
    if resource not in requests:
        return None, []
    wanted = _count(requests[resource])
    if wanted == 0:
        return None, []
    name = container.get("name") or ""
    mappings: list[dict[str, str]] = []
    covered = 0
    for request in reusable:
        if request is None:
            continue
        covered += request["exactly"]["count"]
        mappings.append({"containerName": name, "resourceName": resource, "requestName": request["name"]})
        if covered >= wanted:
            return None, mappings
    request_name = f"container-{index}-request-{sorted(requests).index(resource)}"
    device_request = {
        "name": request_name,
        "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": wanted - covered},
    }
    mappings.append({"containerName": name, "resourceName": resource, "requestName": request_name})
    return device_request, mappings


def requests_and_mappings(
    pod: PodInfo, resources: Mapping[str, int], objects: ClusterObjects
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Upstream ``createRequestsAndMappings``: the device requests for ``resources`` (sorted by name) and
    which container's resource each serves. Long-lived containers (regular and sidecar) each get their own
    request; non-sidecar init containers first reuse the requests of the long-lived containers after them,
    and the largest of their remaining requests serves them all."""
    spec = pod.obj.get("spec") or {}
    init = list(spec.get("initContainers") or ())
    containers = init + list(spec.get("containers") or ())
    short_lived = [i for i in range(len(init)) if (containers[i].get("restartPolicy") or "") != "Always"]
    long_lived = [i for i in range(len(containers)) if i not in short_lived]
    device_requests: list[dict[str, Any]] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(resources):
        device_class = device_class_for(objects, resource)
        if device_class is None:
            continue
        class_name = (device_class.get("metadata") or {}).get("name") or ""
        long_requests: list[dict[str, Any] | None] = [None] * len(containers)
        long_mappings: list[dict[str, str]] = []
        for i in long_lived:
            long_requests[i], found = _container_request(i, containers[i], resource, class_name, [])
            long_mappings.extend(found)
        largest: dict[str, Any] | None = None
        short_names: set[str] = set()
        short_mappings: list[dict[str, str]] = []
        for i in short_lived:
            request, found = _container_request(i, containers[i], resource, class_name, long_requests[i:])
            if request is not None:
                short_names.add(request["name"])
                if largest is None or largest["exactly"]["count"] < request["exactly"]["count"]:
                    largest = request
            short_mappings.extend(found)
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest["name"])
            for mapping in short_mappings:
                if mapping["requestName"] in short_names:
                    mapping["requestName"] = largest["name"]
        if largest is not None:
            device_requests.append(largest)
        device_requests.extend(request for request in long_requests if request is not None)
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    device_requests.sort(key=lambda request: request["name"])
    return device_requests, mappings


# -- PreBind's writes ------------------------------------------------------------------------------------------
def creation_body(claim: Claim) -> Claim:
    """Upstream ``createExtendedResourceClaimInAPI``: the node's variant without name, UID and allocation."""
    meta = {k: v for k, v in (claim.get("metadata") or {}).items() if k not in ("name", "uid", "resourceVersion")}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": claim.get("spec")}


def pod_status_patch(claim_name: str, mappings: list[dict[str, str]]) -> dict[str, Any]:
    """Upstream ``patchPodExtendedResourceClaimStatus``: the pod's ``status.extendedResourceClaimStatus``."""
    return {
        "status": {"extendedResourceClaimStatus": {"requestMappings": list(mappings), "resourceClaimName": claim_name}}
    }


async def delete_claim(client: APIClient, claim: Claim) -> None:
    """Upstream ``deleteClaim``: drop the scheduler's finalizer (a normal update, re-read after a conflict),
    then delete the claim. Raises upstream's texts."""
    meta = claim.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    current = claim
    for attempt in range(CONFLICT_ATTEMPTS):
        if attempt:
            try:
                current = await client.get_resource_claim(namespace=namespace, name=name)
            except APIError as error:
                raise APIError(error.status, f"get resourceclaim {namespace}/{name}: {error}") from error
        updated = {**current, "metadata": dict(current.get("metadata") or {})}
        finalizers = list(updated["metadata"].get("finalizers") or ())
        if FINALIZER in finalizers:
            finalizers.remove(FINALIZER)
            updated["metadata"]["finalizers"] = finalizers
        try:
            await client.update_resource_claim(namespace=namespace, name=name, claim=updated)
            break
        except APIError as error:
            if error.status != 409 or attempt == CONFLICT_ATTEMPTS - 1:
                raise APIError(error.status, f"update resourceclaim {namespace}/{name}: {error}") from error
    await client.delete_resource_claim(namespace=namespace, name=name)


async def create_extended_claim(
    client: APIClient, metrics: PluginMetrics, variant: Claim | None, node_name: str
) -> Claim:
    """Upstream ``createExtendedResourceClaimInAPI``: create the node's variant of the claim, counted in
    ``scheduler_resourceclaim_creates_total``."""
    if variant is None:
        raise RuntimeError(f"extended resource claim not found for node {node_name}")
    body = creation_body(variant)
    namespace = body["metadata"].get("namespace") or ""
    try:
        created = await client.create_resource_claim(namespace=namespace, claim=body)
    except APIError as error:
        metrics.resource_claim_create("failure")
        raise APIError(
            # klog.KObj of the body, whose name upstream cleared: "<namespace>/".
            error.status,
            f"create claim for extended resources {namespace}/: {error}",
        ) from error
    metrics.resource_claim_create("success")
    return created


async def wait_for_watched(tracker: ClaimTracker, claim: Claim, give_up_after: float, poll: float) -> None:
    """Upstream ``waitForExtendedClaimInAssumeCache``: poll (every ``poll`` seconds, up to ``give_up_after``)
    until the watch knows the created claim, then assume the API server's answer; giving up is only logged
    upstream."""
    meta = claim.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    deadline = time.monotonic() + give_up_after
    while tracker.get(namespace, name) is None:
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(poll)
    tracker.assume_after_api_call(claim)
