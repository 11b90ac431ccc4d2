"""Never bind blind: a pod with ResourceClaims is bound only where DynamicResources can allocate its devices.

design.md "Never bind blind": against the real API server and the operator as a process, under the default
profile (which runs kube-scheduler's whole default profile, DynamicResources included) a pod whose claim asks
for a DeviceClass that does not exist stays Pending with upstream's FailedScheduling text
(``0/N nodes are available: request gpu: device class ... does not exist. ...``) and ``PodScheduled=False``;
the profile's status omits nothing; a profile that disables DynamicResources binds the same kind of pod, as
its author asked (no device is allocated). The refused pod's claim is created first (else the pod would wait
at PreEnqueue, without an event); the allowed pod's claim need not exist: the API server accepts a pod naming
a missing claim (kubelet would wait for it; kwok just runs the pod).
"""

from __future__ import annotations

import secrets
from typing import Any

from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    pod_condition,
    pod_events,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)

NO_CLASS = "request gpu: device class gpu.example.com does not exist"


def _claiming_pod(name: str, profile: str, labels: dict[str, str], claim: str = "") -> dict[str, Any]:
    pod = pod_manifest(name, profile, cpu="100m", node_selector=labels)
    claim = claim or f"claim-{secrets.token_hex(3)}"
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return pod


def test_a_pod_with_resource_claims_is_refused_unless_the_profile_disables_dynamic_resources(
    cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    default = profiles({}, suffix="default")
    disabled = profiles({"plugins": {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}}, suffix="nodra")
    status = wait_profile_status(cluster.api, default, ready=True)["status"]
    assert not status.get("omittedDefaultPlugins")
    assert "DynamicResources" not in wait_profile_status(cluster.api, disabled, ready=True)["status"].get(
        "omittedDefaultPlugins", []
    )

    claim = f"claim-{secrets.token_hex(3)}"
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        "resource.k8s.io",
        "v1",
        namespace,
        "resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": claim},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
        },
    )
    create_pods(
        cluster.core,
        namespace,
        [
            _claiming_pod("refused", default, labels, claim),
            _claiming_pod("allowed", disabled, labels),
            pod_manifest("plain", default, cpu="100m", node_selector=labels),
        ],
    )
    assert wait_pods_bound(cluster.core, namespace, ["allowed", "plain"], timeout=60) == {
        "allowed": node,
        "plain": node,
    }

    def reported() -> Any:
        pod = cluster.core.read_namespaced_pod("refused", namespace)
        events = pod_events(cluster.api, namespace, "refused", reason="FailedScheduling")
        return (pod, events) if events and pod_condition(pod) is not None else None

    pod, events = wait_for(reported, timeout=30, message="refused: no FailedScheduling event and condition")
    total = len(cluster.core.list_node().items)
    # The refusal is UnschedulableAndUnresolvable (PreFilter): DefaultPreemption finds nothing worth trying, and
    # DynamicResources' PostFilter has no claim of the pod to deallocate (PreFilter stopped before reading them).
    preemption = f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
    message = f"0/{total} nodes are available: {NO_CLASS}. no new claims to deallocate, {preemption}"
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"
    condition = pod_condition(pod)
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", message)
    assert {e.note for e in events} == {message}
    assert all(e.type == "Warning" and e.reporting_controller == default for e in events)
