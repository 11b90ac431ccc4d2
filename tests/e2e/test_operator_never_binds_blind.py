"""Never bind blind: a pod with ResourceClaims is not bound by a profile that cannot judge it.

design.md "Never bind blind", issue 10 item 5: DynamicResources is not implemented yet (issue 12), so the
default profile runs a stand-in in its place. Against the real API server and the operator as a process:
under the default profile a pod referencing a ResourceClaim stays Pending with the stand-in's FailedScheduling
text (upstream's ``0/N nodes are available: ...`` form) and ``PodScheduled=False``, and the profile's status
names the stand-in; a profile that disables DynamicResources binds the same kind of pod, as its author asked.
The claim itself need not exist: the API server accepts a pod naming a missing claim (kubelet would wait
for it; kwok just runs the pod).
"""

from __future__ import annotations

import secrets
from typing import Any

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

STAND_IN = (
    "pod uses ResourceClaims: DynamicResources is not implemented by kopf-scheduler yet; "
    "disable it in the profile to bind such pods without device allocation"
)


def _claiming_pod(name: str, profile: str, labels: dict[str, str]) -> dict[str, Any]:
    pod = pod_manifest(name, profile, cpu="100m", node_selector=labels)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"claim-{secrets.token_hex(3)}"}]
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
    assert status["standInPlugins"] == ["DynamicResources"]
    assert "DynamicResources" in status["omittedDefaultPlugins"]
    assert not wait_profile_status(cluster.api, disabled, ready=True)["status"].get("standInPlugins")

    create_pods(
        cluster.core,
        namespace,
        [
            _claiming_pod("refused", default, labels),
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
    # The refusal is UnschedulableAndUnresolvable on every node: DefaultPreemption finds nothing worth trying.
    preemption = f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
    message = f"0/{total} nodes are available: {STAND_IN}. {preemption}"
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"
    condition = pod_condition(pod)
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", message)
    assert {e.note for e in events} == {message}
    assert all(e.type == "Warning" and e.reporting_controller == default for e in events)
