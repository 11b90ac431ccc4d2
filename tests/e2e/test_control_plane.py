"""Smoke tests proving the control plane is real: every later e2e test relies on these behaviours.

The Binding test makes exactly the API call our scheduler makes (POST pods/<name>/binding), including the
409 Conflict for an already-bound pod that makes binds idempotent across replicas.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import Cluster, NodeFactory
from tools.localcluster import kube_version

NO_SCHEDULER = "no-such-scheduler"


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def pending_pod(name: str, scheduler: str = NO_SCHEDULER) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1PodSpec(
            scheduler_name=scheduler,
            containers=[
                client.V1Container(
                    name="main",
                    image="registry.invalid/pause:never-pulled",  # kwok never pulls images
                    resources=client.V1ResourceRequirements(requests={"cpu": "100m", "memory": "64Mi"}),
                )
            ],
        ),
    )


def bind(cluster: Cluster, namespace: str, pod: str, node: str) -> None:
    """POST /api/v1/namespaces/{ns}/pods/{pod}/binding: how a scheduler assigns a pod to a node.

    ``_preload_content=False``: the response is a Status object, which the generated client would try
    (and fail) to deserialize as a V1Binding.
    """
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    response = cluster.core.create_namespaced_pod_binding(pod, namespace, body, _preload_content=False)
    assert response.status == 201, response.data


def test_server_version_is_the_pinned_release(cluster: Cluster) -> None:
    if cluster.local is None:
        pytest.skip("an external cluster runs whatever version it runs")
    info = client.VersionApi(cluster.api).get_code()
    assert info.git_version == f"v{kube_version()}"
    assert info.major == "1"
    assert info.minor == kube_version().split(".")[1]


def test_kwok_node_turns_ready(cluster: Cluster, kwok_nodes: NodeFactory) -> None:
    name = kwok_nodes(cpu="8", memory="32Gi", pods=50, labels={"topology.kubernetes.io/zone": "a"})
    node = cluster.core.read_node(name)
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready
    assert ready[0].status == "True"
    # The not-ready taint that admission puts on every new node was lifted by the node-lifecycle controller.
    assert not [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
    assert node.status.allocatable["cpu"] == "8"
    assert node.status.allocatable["pods"] == "50"


def test_deployment_creates_pods(cluster: Cluster, namespace: str) -> None:
    if not cluster.has_controller_manager:
        pytest.skip("needs kube-controller-manager")
    template = pending_pod("web")
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=3,
            selector=client.V1LabelSelector(match_labels={"app": "web"}),
            template=client.V1PodTemplateSpec(metadata=template.metadata, spec=template.spec),
        ),
    )
    deployment.spec.template.metadata.name = None
    cluster.apps.create_namespaced_deployment(namespace, deployment)

    def pods() -> list[client.V1Pod]:
        items = cluster.core.list_namespaced_pod(namespace, label_selector="app=web").items
        return items if len(items) == 3 else []

    created = wait_for(pods, 60, "the Deployment's 3 pods")
    for pod in created:
        (owner,) = pod.metadata.owner_references
        assert owner.kind == "ReplicaSet"
        assert pod.spec.scheduler_name == NO_SCHEDULER


def test_pod_with_unknown_scheduler_stays_pending(cluster: Cluster, namespace: str, kwok_nodes: NodeFactory) -> None:
    kwok_nodes()  # a schedulable node exists, yet nobody is responsible for this pod
    cluster.core.create_namespaced_pod(namespace, pending_pod("orphan"))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        pod = cluster.core.read_namespaced_pod("orphan", namespace)
        assert pod.spec.node_name is None
        assert pod.status.phase == "Pending"
        time.sleep(0.5)


def test_binding_assigns_pod_and_second_binding_conflicts(
    cluster: Cluster, namespace: str, kwok_nodes: NodeFactory
) -> None:
    first, second = kwok_nodes(), kwok_nodes()
    cluster.core.create_namespaced_pod(namespace, pending_pod("bound"))

    bind(cluster, namespace, "bound", first)
    pod = cluster.core.read_namespaced_pod("bound", namespace)
    assert pod.spec.node_name == first
    scheduled = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
    assert scheduled
    assert scheduled[0].status == "True"

    # kwok plays the kubelet: the bound pod starts "running".
    wait_for(
        lambda: cluster.core.read_namespaced_pod("bound", namespace).status.phase == "Running",
        60,
        "kwok to run the bound pod",
    )

    # A second Binding (e.g. from a replica that lost the race) is refused, whatever its target.
    for target in (second, first):
        with pytest.raises(ApiException) as excinfo:
            bind(cluster, namespace, "bound", target)
        assert excinfo.value.status == 409
        assert json.loads(excinfo.value.body)["reason"] == "Conflict"
    assert cluster.core.read_namespaced_pod("bound", namespace).spec.node_name == first
