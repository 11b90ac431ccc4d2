"""DynamicResources against the real control plane: a pod with a ResourceClaimTemplate (issue 12).

The controller-manager's resourceclaim controller creates the pod's claim from the template and records it
in ``pod.status.resourceClaimStatuses``. Until then the pod waits at PreEnqueue (no FailedScheduling event);
the pod's own update (``UpdatePodGeneratedResourceClaim``) or the claim's arrival brings it back. What
follows depends on the allocator: today the plugin refuses the pod at PreFilter with the stand-in's text,
so the test checks that the pod got that far (the claim was found, owned by the pod) and was not bound.
The full flow (allocation, reservedFor, release) is left for when ``allocator.py`` lands.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import ProfileFactory
from tests.e2e.operator_process import OperatorProcess, create_pods, pod_events, pod_manifest, wait_for

STAND_IN = (
    "pod uses ResourceClaims: DynamicResources cannot allocate devices in kopf-scheduler yet; "
    "disable it in the profile to bind such pods without device allocation"
)


def _template(name: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def test_a_template_claim_is_generated_found_and_the_pod_is_not_bound_blind(
    cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    if not cluster.has_controller_manager:
        pytest.skip("needs the resourceclaim controller (kube-controller-manager)")
    labels = {"e2e-group": secrets.token_hex(4)}
    kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    profile = profiles({}, suffix="dra")
    template = f"gpu-{secrets.token_hex(3)}"
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", _template(template)
    )
    pod = pod_manifest("gpu-pod", profile, cpu="100m", node_selector=labels)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    create_pods(cluster.core, namespace, [pod])

    def refused() -> Any:
        events = pod_events(cluster.api, namespace, "gpu-pod", reason="FailedScheduling")
        return events or None

    events = wait_for(refused, timeout=60, message="gpu-pod: no FailedScheduling after its claim was generated")
    assert all(STAND_IN in e.note for e in events)
    latest = cluster.core.read_namespaced_pod("gpu-pod", namespace)
    assert latest.spec.node_name is None
    [status] = latest.status.resource_claim_statuses
    assert status.name == "gpu"
    assert status.resource_claim_name
