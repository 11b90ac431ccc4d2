"""Topology-aware gangs through the real operator on the local control plane, which serves scheduling.k8s.io/v1alpha2
with TopologyAwareWorkloadScheduling on, so a PodGroup keeps its ``schedulingConstraints`` (``tools/localcluster.py``).

A profile enables GangScheduling, TopologyPlacementGenerator and PodGroupPodsCount (upstream v1.36's plugins of the
TopologyAwareWorkloadScheduling gate). Two racks, named by a node label unique to the test: rack a has room for
three 1-CPU pods (a node of 2 CPUs and one of 1), rack b for four (two nodes of 2 CPUs). Spread over both racks there
is room for seven.

- A gang of four whose PodGroup asks for one rack lands wholly in rack b, although the default algorithm alone would
  spread it over both racks' least allocated nodes.
- A gang of five fits in no rack: nothing binds, nothing stays held, and the PodGroup says so with upstream's
  message (``0/2 placements are available, first placement status: pod group is unschedulable, workload aware
  preemption is not supported for pod groups with scheduling constraints``).
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
    pod_manifest,
    pod_nodes,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)

GROUP, VERSION = "scheduling.k8s.io", "v1alpha2"
TOPOLOGY = {
    "plugins": {
        "multiPoint": {
            "enabled": [
                {"name": "GangScheduling"},
                {"name": "TopologyPlacementGenerator"},
                {"name": "PodGroupPodsCount", "weight": 1},
            ]
        }
    }
}
#: The placement algorithm's verdict, then workload-aware preemption's (it declines a group with constraints).
NO_RACK_HOLDS_IT = (
    "0/2 placements are available, first placement status: pod group is unschedulable, "
    "workload aware preemption is not supported for pod groups with scheduling constraints"
)


def _pod_group(name: str, min_count: int, rack_key: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": rack_key}]},
        },
    }


def _racks(kwok_nodes: NodeFactory) -> tuple[dict[str, str], str, dict[str, str]]:
    """The two racks' nodes (name → rack), the rack label key, and the label that selects the test's nodes."""
    token = secrets.token_hex(4)
    rack_key = f"e2e.kopf-scheduler.io/rack-{token}"
    selector = {"e2e-group": token}
    racks: dict[str, str] = {}
    for rack, cpus in (("a", "2"), ("a", "1"), ("b", "2"), ("b", "2")):
        name = kwok_nodes(cpu=cpus, memory="16Gi", labels={**selector, rack_key: rack})
        racks[name] = rack
    return racks, rack_key, selector


def _start(cluster: Cluster, profiles: ProfileFactory, operator_factory: OperatorFactory) -> tuple[str, Any]:
    profile = profiles(TOPOLOGY)
    operator = operator_factory()
    wait_profile_status(cluster.api, profile, ready=True)
    operator.wait_log("cache reconciled")
    return profile, operator


def _members(profile: str, group: str, selector: dict[str, str], count: int) -> list[dict[str, Any]]:
    spec = {"schedulingGroup": {"podGroupName": group}}
    return [
        pod_manifest(f"w{i}", profile, cpu="1", memory="64Mi", node_selector=selector, spec=spec) for i in range(count)
    ]


def _scheduled_condition(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    pod_group = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups", name
    )
    conditions = (pod_group.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodGroupScheduled"), None)


def test_a_gang_with_a_rack_constraint_lands_wholly_inside_one_rack(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    racks, rack_key, selector = _racks(kwok_nodes)
    profile, operator = _start(cluster, profiles, operator_factory)
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups", _pod_group("gang", 4, rack_key)
    )
    members = _members(profile, "gang", selector, 4)
    create_pods(cluster.core, namespace, members)
    names = [m["metadata"]["name"] for m in members]
    bound = wait_pods_bound(cluster.core, namespace, names, timeout=90)
    assert {racks[node] for node in bound.values()} == {"b"}, bound
    condition = wait_for(lambda: _scheduled_condition(cluster, namespace, "gang"), timeout=30)
    assert (condition["status"], condition["reason"]) == ("True", "Scheduled")
    assert operator.alive()
    assert operator.log_lines("Traceback") == []


def test_a_gang_no_rack_can_hold_stays_pending_with_upstreams_message(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    _, rack_key, selector = _racks(kwok_nodes)
    profile, operator = _start(cluster, profiles, operator_factory)
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups", _pod_group("gang", 5, rack_key)
    )
    members = _members(profile, "gang", selector, 5)
    create_pods(cluster.core, namespace, members)
    names = {m["metadata"]["name"] for m in members}

    def unschedulable() -> dict[str, Any] | None:
        condition = _scheduled_condition(cluster, namespace, "gang")
        return condition if condition is not None and condition["status"] == "False" else None

    condition = wait_for(unschedulable, timeout=60, message="no PodGroupScheduled=False on the PodGroup")
    assert (condition["reason"], condition["message"]) == ("Unschedulable", NO_RACK_HOLDS_IT)

    def all_reported() -> bool:
        failed = {e.regarding.name for e in namespace_events(cluster.api, namespace) if e.reason == "FailedScheduling"}
        return failed >= names

    wait_for(all_reported, timeout=60, message="a member without its FailedScheduling event")
    time.sleep(2)  # retries come and go: still nothing may bind
    assert pod_nodes(cluster.core, namespace) == dict.fromkeys(names)
    assert operator.alive()
    assert operator.log_lines("Traceback") == []
