"""GangScheduling through the real operator on the local control plane, which serves scheduling.k8s.io/v1alpha2
(``tools/localcluster.py``: the GenericWorkload gate and the runtime config).

A profile enables GangScheduling; a PodGroup asks for a gang of four. Three of its pods stay unbound and
unreported: they wait at PreEnqueue with upstream's message, and upstream reports nothing for a pod PreEnqueue
holds (no FailedScheduling event, no PodScheduled condition), as our queue does for gated pods. The fourth pod
completes the gang: all four pass PreEnqueue, wait at Permit until the fourth is assumed, and bind.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    create_pods,
    namespace_events,
    pod_condition,
    pod_manifest,
    pod_nodes,
    ready_condition,
    wait_pods_bound,
    wait_profile_status,
    wait_scheduled_events,
)

GROUP, VERSION = "scheduling.k8s.io", "v1alpha2"
GANG = {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}


def _pod_group(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def test_a_gang_of_four_binds_only_once_its_fourth_pod_exists(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="8", memory="16Gi", labels=labels)
    profile = profiles(GANG)
    operator = operator_factory()
    status = wait_profile_status(cluster.api, profile, ready=True)
    condition = ready_condition(status)
    assert condition is not None
    assert "does not serve" not in condition["message"]  # the workload API is served here
    operator.wait_log("cache reconciled")

    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups", _pod_group("gang", 4)
    )

    def member(name: str) -> dict[str, Any]:
        spec = {"schedulingGroup": {"podGroupName": "gang"}}
        return pod_manifest(name, profile, cpu="100m", node_selector=labels, spec=spec)

    first = ["w0", "w1", "w2"]
    create_pods(cluster.core, namespace, [member(name) for name in first])
    time.sleep(4)  # the operator sees all three at once; none may bind without the fourth
    assert pod_nodes(cluster.core, namespace) == dict.fromkeys(first)
    # Held at PreEnqueue: nothing reported, as upstream (and as for pods held by scheduling gates).
    assert [e for e in namespace_events(cluster.api, namespace) if e.regarding.name in first] == []
    for name in first:
        assert pod_condition(cluster.core.read_namespaced_pod(name, namespace)) is None

    create_pods(cluster.core, namespace, [member("w3")])
    everyone = [*first, "w3"]
    assert wait_pods_bound(cluster.core, namespace, everyone, timeout=60) == dict.fromkeys(everyone, node)
    events = wait_scheduled_events(cluster.api, namespace, everyone)
    assert {e.reason for e in events if e.regarding.name in everyone} == {"Scheduled"}
    assert operator.alive()
    assert operator.log_lines("Traceback") == []
