"""1000 pods over 100 nodes: all bound, none twice, no node over its allocatable.

Acceptance of the operator issue, fifth bullet. Every node holds exactly ten of the pods by both cpu and
pod count, so the run only completes if every assumption the cache makes is right: one pod placed on a
node the cache thought had room but had not would leave another pod with nowhere to go.
"""

from __future__ import annotations

import secrets
import time

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods_parallel,
    overcommitted_nodes,
    pod_manifest,
    scheduled_events_per_pod,
    wait_pods_bound,
    wait_profile_status,
    wait_scheduled_events,
)
from tools.localcluster import wait_nodes_ready

NODES = 100
PODS = 1000
PODS_PER_NODE = PODS // NODES


def test_1000_pods_over_100_nodes_all_bound_once_none_over_allocatable(
    cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    nodes = [
        kwok_nodes(cpu="1", memory="8Gi", pods=PODS_PER_NODE, labels=labels, wait_ready=False) for _ in range(NODES)
    ]
    wait_nodes_ready(cluster.core, nodes, timeout=120)
    profile = profiles({})
    wait_profile_status(cluster.api, profile, ready=True)

    started = time.monotonic()
    create_pods_parallel(
        cluster.core,
        namespace,
        [pod_manifest(f"p-{i}", profile, cpu="100m", node_selector=labels) for i in range(PODS)],
    )
    created = time.monotonic() - started
    bound = wait_pods_bound(cluster.core, namespace, timeout=240)
    elapsed = time.monotonic() - started
    print(f"\n{PODS} pods over {NODES} nodes: created in {created:.1f}s, all bound {elapsed:.1f}s after the first")

    assert len(bound) == PODS
    per_node: dict[str, int] = {}
    for node in bound.values():
        per_node[node] = per_node.get(node, 0) + 1
    assert set(per_node) <= set(nodes)
    assert overcommitted_nodes(cluster.core, nodes) == {}
    assert sorted(per_node.values()) == [PODS_PER_NODE] * NODES
    wait_scheduled_events(cluster.api, namespace, bound, timeout=60)  # posted after each Binding lands
    scheduled = scheduled_events_per_pod(cluster.api, namespace)
    assert set(scheduled) == set(bound)
    assert set(scheduled.values()) == {1}
    assert operator.scheduled_count(profile) == PODS
    assert operator.metric("scheduler_schedule_attempts_total", result="error") == 0
    # Equal pods and room for exactly all of them: a pod can only fail if the cache lost track of room.
    assert operator.metric("scheduler_schedule_attempts_total", result="unschedulable") == 0

    # Leave less for the node fixture to clean up one by one.
    cluster.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
