"""GangScheduling through the real operator on the local control plane, which serves scheduling.k8s.io/v1alpha2
(``tools/localcluster.py``: the GenericWorkload gate and the runtime config).

A profile enables GangScheduling; a PodGroup asks for a gang of four. Three of its pods stay unbound and
unreported: they wait at PreEnqueue with upstream's message, and upstream reports nothing for a pod PreEnqueue
holds (no FailedScheduling event, no PodScheduled condition), as our queue does for gated pods. The fourth pod
completes the gang: all four pass PreEnqueue, wait at Permit until the fourth is assumed, and bind.

A gang of eight where only seven fit binds nothing and holds nothing: its pod-group cycle (upstream 1.36's
``scheduleOnePodGroup``) places the members in the cycle's snapshot only, finds no quorum there and undoes
every placement, so no member is assumed, reserved or parked at Permit, and upstream's five-minute Permit
timeout never comes into play (a gang that does wait at Permit is tests/e2e/test_operator_gang_failover.py's; the
timeout itself, and what it frees, is tests/unit/test_gang_app.py's, with the event loop's clock moved on rather
than five minutes waited). What it held is free at once: a plain pod asking for the whole node binds there. A
node with room for all eight appears and the eight bind in one pod-group cycle.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    namespace_events,
    pod_condition,
    pod_manifest,
    pod_nodes,
    ready_condition,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
    wait_scheduled_events,
)

GROUP, VERSION = "scheduling.k8s.io", "v1alpha2"
GANG = {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}


def pod_group(name: str, min_count: int) -> dict[str, Any]:
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
        GROUP, VERSION, namespace, "podgroups", pod_group("gang", 4)
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


def pod_group_condition(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The PodGroup's ``PodGroupScheduled`` condition, as the API server has it."""
    found = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups", name
    )
    conditions = (found.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodGroupScheduled"), None)


def group_cycles(operator: OperatorProcess, namespace: str, name: str) -> list[str]:
    """The operator's log lines of the group's successful pod-group cycles (upstream's text)."""
    return operator.log_lines(f"Successfully scheduled a pod group {namespace}/{name}: ")


def test_a_gang_of_eight_where_seven_fit_holds_nothing_and_binds_whole_once_a_node_appears(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    small = kwok_nodes(cpu="7500m", memory="32Gi", labels=labels)  # room for seven members of one CPU
    profile = profiles(GANG)
    operator = operator_factory()
    wait_profile_status(cluster.api, profile, ready=True)
    operator.wait_log("cache reconciled")
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups", pod_group("gang", 8)
    )
    spec = {"schedulingGroup": {"podGroupName": "gang"}}
    members = [f"m{i}" for i in range(8)]
    create_pods(
        cluster.core,
        namespace,
        [pod_manifest(name, profile, cpu="1", node_selector=labels, spec=spec) for name in members],
    )

    # The group's cycle fails whole: upstream's condition on the PodGroup, FailedScheduling on every member.
    condition = wait_for(
        lambda: pod_group_condition(cluster, namespace, "gang"), timeout=60, message="no PodGroupScheduled condition"
    )
    # The placement algorithm's verdict (one placement of every node, as upstream with its gates on), then
    # workload-aware preemption's answer: nothing of lower priority to evict.
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        "0/1 placements are available, first placement status: pod group is unschedulable, "
        "No preemption victims found for incoming preemptor",
    )

    def failed_members() -> set[str] | None:
        events = namespace_events(cluster.api, namespace)
        failed = {e.regarding.name for e in events if e.reason == "FailedScheduling"}
        return failed if failed >= set(members) else None

    wait_for(failed_members, timeout=30, message="not every member has a FailedScheduling event")
    assert pod_nodes(cluster.core, namespace) == dict.fromkeys(members)
    # Nothing held: the node's whole room goes to a plain pod at once.
    create_pods(cluster.core, namespace, [pod_manifest("plain", profile, cpu="7500m", node_selector=labels)])
    assert wait_pods_bound(cluster.core, namespace, ["plain"], timeout=30) == {"plain": small}
    assert pod_nodes(cluster.core, namespace) == {**dict.fromkeys(members), "plain": small}
    assert group_cycles(operator, namespace, "gang") == []

    big = kwok_nodes(cpu="8", memory="32Gi", labels=labels)  # room for the eight
    assert wait_pods_bound(cluster.core, namespace, members, timeout=60) == dict.fromkeys(members, big)
    # In one pod-group cycle: one success line, with all eight scheduled.
    [line] = wait_for(lambda: group_cycles(operator, namespace, "gang"), timeout=10, message="no group success")
    assert line.endswith("scheduledPods=8 unschedulablePods=0"), line

    def marked_scheduled() -> dict[str, Any] | None:
        condition = pod_group_condition(cluster, namespace, "gang")
        return condition if condition is not None and condition["status"] == "True" else None

    scheduled = wait_for(marked_scheduled, timeout=30, message="the PodGroup is not marked scheduled")
    assert scheduled["reason"] == "Scheduled"
    assert operator.alive()
    assert operator.log_lines("Traceback") == []
