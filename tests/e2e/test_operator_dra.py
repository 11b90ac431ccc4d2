"""DynamicResources against the real control plane (issue 12): the journey a new user takes.

A DeviceClass for a fake driver, ResourceSlices the test publishes for two kwok nodes (only one has the
requested model: no driver is needed to allocate), and pods with a ResourceClaimTemplate whose CEL selector
asks for that model. The controller-manager's resourceclaim controller creates each pod's claim from the
template (found through ``pod.status.resourceClaimStatuses``). Then, with the operator as a real process:

* the first pod is bound to the node with the device, and its claim is allocated that device and reserved for
  it (``status.allocation`` and ``status.reservedFor``, written by PreBind before the Binding);
* a second such pod is refused everywhere: ``cannot allocate all claims`` (the only device is taken);
* deleting the first pod frees the device (the controller deallocates its claim), and the second pod is bound;
* a device with binding conditions holds the pod in PreBind; the operator is SIGKILLed there; the claim is
  reserved for the pod but the pod is not bound; a new replica completes the pod once the device reports its
  condition, on the node of the claim's allocation, with no second allocation.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import create_pods, pod_events, pod_manifest, wait_for, wait_pods_bound

GROUP, VERSION = "resource.k8s.io", "v1"


class DRA:
    """The test's DRA objects: one driver, its class, slices per node and claim templates."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.objects = client.CustomObjectsApi(cluster.api)
        self.namespace = namespace
        self.driver = f"gpu-{secrets.token_hex(3)}.example.com"
        self.device_class = self.driver
        self.created: list[tuple[str, str]] = []

    def create_class(self) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DeviceClass",
            "metadata": {"name": self.device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{self.driver}"'}}]},
        }
        self.objects.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", body)
        self.created.append(("deviceclasses", self.device_class))

    def publish(self, node: str, model: str, **device_extra: Any) -> None:
        name = f"{node}-{self.driver}"
        device = {"name": "gpu-0", "attributes": {"model": {"string": model}}, **device_extra}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": self.driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [device],
            },
        }
        self.objects.create_cluster_custom_object(GROUP, VERSION, "resourceslices", body)
        self.created.append(("resourceslices", name))

    def template(self, model: str) -> str:
        name = f"gpu-{secrets.token_hex(3)}"
        selector = {"cel": {"expression": f'device.attributes["{self.driver}"].model == "{model}"'}}
        request = {"name": "gpu", "exactly": {"deviceClassName": self.device_class, "selectors": [selector]}}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        }
        self.objects.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "resourceclaimtemplates", body)
        return name

    def claim_of(self, core: client.CoreV1Api, pod: str) -> dict[str, Any]:
        [status] = core.read_namespaced_pod(pod, self.namespace).status.resource_claim_statuses
        return self.objects.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "resourceclaims", status.resource_claim_name
        )

    def cleanup(self) -> None:
        for plural, name in reversed(self.created):
            try:
                self.objects.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except client.ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture
def dra(cluster: Cluster, namespace: str) -> Any:
    if not cluster.has_controller_manager:
        pytest.skip("needs the resourceclaim controller (kube-controller-manager)")
    objects = DRA(cluster, namespace)
    objects.create_class()
    yield objects
    objects.cleanup()


def _gpu_pod(name: str, profile: str, template: str, labels: dict[str, str]) -> dict[str, Any]:
    pod = pod_manifest(name, profile, cpu="100m", node_selector=labels)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return pod


def _allocated_device(claim: dict[str, Any]) -> tuple[str, str, str]:
    [result] = claim["status"]["allocation"]["devices"]["results"]
    return result["driver"], result["pool"], result["device"]


def test_the_device_decides_the_node_a_second_pod_waits_and_gets_it_when_released(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    dra: DRA,
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    with_a100 = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    with_t4 = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    dra.publish(with_a100, "a100")
    dra.publish(with_t4, "t4")
    template = dra.template("a100")
    operator_factory()
    profile = profiles({}, suffix="dra")

    create_pods(cluster.core, namespace, [_gpu_pod("first", profile, template, labels)])
    assert wait_pods_bound(cluster.core, namespace, ["first"], timeout=60) == {"first": with_a100}
    claim = dra.claim_of(cluster.core, "first")
    assert _allocated_device(claim) == (dra.driver, with_a100, "gpu-0")
    assert [(r["resource"], r["name"]) for r in claim["status"]["reservedFor"]] == [("pods", "first")]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        with_a100
    ]

    create_pods(cluster.core, namespace, [_gpu_pod("second", profile, template, labels)])

    def refused() -> Any:
        return pod_events(cluster.api, namespace, "second", reason="FailedScheduling") or None

    [event, *_] = wait_for(refused, timeout=60, message="second: no FailedScheduling")
    assert "2 cannot allocate all claims" in event.note, event.note
    assert "still not schedulable, preemption: " in event.note, event.note
    assert cluster.core.read_namespaced_pod("second", namespace).spec.node_name is None

    cluster.core.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
    assert wait_pods_bound(cluster.core, namespace, ["second"], timeout=90) == {"second": with_a100}
    released = dra.claim_of(cluster.core, "second")
    assert _allocated_device(released) == (dra.driver, with_a100, "gpu-0")


def test_an_operator_killed_in_pre_bind_leaves_the_claim_to_the_next_leader(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    dra: DRA,
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    kwok_nodes(cpu="4", memory="16Gi", labels=labels)  # a node without devices: the claim decides
    dra.publish(node, "a100", bindingConditions=["Attached"], bindingFailureConditions=["Failed"])
    template = dra.template("a100")
    first = operator_factory()
    profile = profiles({}, suffix="dra")
    create_pods(cluster.core, namespace, [_gpu_pod("held", profile, template, labels)])

    def reserved() -> dict[str, Any] | None:
        try:
            claim = dra.claim_of(cluster.core, "held")
        except (ValueError, TypeError):
            return None
        return claim if (claim.get("status") or {}).get("reservedFor") else None

    claim = wait_for(reserved, timeout=60, message="held: its claim was not allocated and reserved")
    assert wait_for(
        lambda: pod_events(cluster.api, namespace, "held", reason="BindingConditionsPending") or None,
        timeout=30,
        message="held: no BindingConditionsPending event",
    )
    first.kill()
    time.sleep(1)
    pod = cluster.core.read_namespaced_pod("held", namespace)
    assert pod.spec.node_name is None  # reserved for the pod, not bound: the next leader must finish it
    assert _allocated_device(claim) == (dra.driver, node, "gpu-0")

    operator_factory(peering_priority=1, name="operator-next")  # outranks the dead record at once
    # The driver reports the device attached: the new leader's PreBind sees the condition and binds.
    meta = claim["metadata"]
    status = {
        "status": {
            "allocation": claim["status"]["allocation"],
            "reservedFor": claim["status"]["reservedFor"],
            "devices": [
                {
                    "driver": dra.driver,
                    "pool": node,
                    "device": "gpu-0",
                    "conditions": [
                        {
                            "type": "Attached",
                            "status": "True",
                            "reason": "Test",
                            "message": "attached by the test",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ],
                }
            ],
        }
    }
    dra.objects.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "resourceclaims", meta["name"], status)
    assert wait_pods_bound(cluster.core, namespace, ["held"], timeout=90) == {"held": node}
    final = dra.claim_of(cluster.core, "held")
    assert _allocated_device(final) == (dra.driver, node, "gpu-0")
    assert [r["name"] for r in final["status"]["reservedFor"]] == ["held"]


def test_an_extended_resource_backed_by_a_device_class_gets_a_claim_of_the_schedulers(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    dra: DRA,
) -> None:
    """DRAExtendedResource: a DeviceClass names ``<driver>/gpu``; no node advertises it, so NodeResourcesFit
    leaves it to DynamicResources, which creates the pod's claim in PreBind (allocated, reserved for the pod,
    the pod as its controller) and records it in ``status.extendedResourceClaimStatus``. A second pod finds
    the only device taken and stays Pending with upstream's text."""
    extended = f"{dra.driver}/gpu"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": f"{dra.device_class}-ext"},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{dra.driver}"'}}],
            "extendedResourceName": extended,
        },
    }
    dra.objects.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", body)
    dra.created.append(("deviceclasses", body["metadata"]["name"]))
    labels = {"e2e-group": secrets.token_hex(4)}
    with_device = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    kwok_nodes(cpu="4", memory="16Gi", labels=labels)  # no device here
    dra.publish(with_device, "a100")
    operator = operator_factory()
    profile = profiles({}, suffix="dra-ext")

    def extended_pod(name: str) -> dict[str, Any]:
        pod = pod_manifest(name, profile, cpu="100m", node_selector=labels)
        pod["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "100m", extended: "1"},
            "limits": {extended: "1"},
        }
        return pod

    create_pods(cluster.core, namespace, [extended_pod("first")])
    assert wait_pods_bound(cluster.core, namespace, ["first"], timeout=60) == {"first": with_device}
    pod = cluster.core.read_namespaced_pod("first", namespace)
    status = pod.status.extended_resource_claim_status
    assert status is not None, "first: no status.extendedResourceClaimStatus"
    [only] = status.request_mappings
    assert (only.container_name, only.resource_name, only.request_name) == ("c", extended, "container-0-request-1")
    claim = dra.objects.get_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", status.resource_claim_name
    )
    meta = claim["metadata"]
    assert meta["name"].startswith("first-extended-resources-")
    assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "first",
        pod.metadata.uid,
        True,
    )
    assert "resource.kubernetes.io/delete-protection" in meta["finalizers"]
    [request] = claim["spec"]["devices"]["requests"]
    assert request["name"] == "container-0-request-1"
    assert (request["exactly"]["deviceClassName"], request["exactly"]["count"]) == (body["metadata"]["name"], 1)
    assert _allocated_device(claim) == (dra.driver, with_device, "gpu-0")
    assert [(r["resource"], r["name"]) for r in claim["status"]["reservedFor"]] == [("pods", "first")]
    assert operator.metric("scheduler_resourceclaim_creates_total", status="success") == 1.0

    create_pods(cluster.core, namespace, [extended_pod("second")])

    def refused() -> Any:
        return pod_events(cluster.api, namespace, "second", reason="FailedScheduling") or None

    [event, *_] = wait_for(refused, timeout=60, message="second: no FailedScheduling")
    assert "2 cannot allocate all claims" in event.note, event.note
    assert "still not schedulable, preemption: " in event.note, event.note
    assert cluster.core.read_namespaced_pod("second", namespace).spec.node_name is None
    claims = dra.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]
    assert [c["metadata"]["name"] for c in claims] == [meta["name"]]  # nothing created for the refused pod
    assert operator.metric("scheduler_resourceclaim_creates_total") == 1.0
