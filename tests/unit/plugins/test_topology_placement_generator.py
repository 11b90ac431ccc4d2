"""TopologyPlacementGenerator (upstream ``plugins/topologyaware/topology_placement_test.go``, TestGeneratePlacements):
a placement per domain of the PodGroup's topology key among the parent placement's nodes, only the domain of the
members already scheduled, and upstream's errors when those members do not name one domain."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.framework import CycleState, Placement, PodGroupInfo
from kopf_scheduler.framework.status import Code
from kopf_scheduler.plugins.topology_placement_generator import TopologyPlacementGenerator, topology_key
from kopf_scheduler.state.cache import ClusterCache
from tests.unit.factories import FakeHandle, make_cache, make_node, make_pod, pod_info

NS = "default"
PARENT = "test-placement"


def node(name: str, **labels: str) -> dict[str, Any]:
    return make_node(name, labels=labels)


def pod_group(key: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"basic": {}}}
    if key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg1", "namespace": NS},
        "spec": spec,
    }


def member(name: str, node_name: str = "") -> dict[str, Any]:
    return make_pod(
        name, namespace=NS, uid=name, node_name=node_name, spec={"schedulingGroup": {"podGroupName": "pg1"}}
    )


def generate(
    group: dict[str, Any],
    placement_nodes: list[dict[str, Any]],
    other_nodes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    scheduled: dict[str, str] | None = None,
) -> tuple[dict[str, list[str]] | None, Code]:
    """Upstream's test body: the cluster's nodes, the group's scheduled members and one unscheduled member in the
    cache and its snapshot of the groups; the parent placement of ``placement_nodes``; names per placement."""
    cache: ClusterCache = make_cache([*placement_nodes, *other_nodes])
    cache.objects.apply("PodGroup", "ADDED", group)
    cache.add_pod_group_member(pod_info(member("unscheduled")))
    for name, node_name in (scheduled or {}).items():
        cache.add_or_update_pod(member(name, node_name))
    cache.update_pod_group_snapshot()
    snapshot = cache.snapshot()
    parent_slots = np.asarray([snapshot.slot_of(n["metadata"]["name"]) for n in placement_nodes], dtype=np.int64)
    plugin = TopologyPlacementGenerator(handle=FakeHandle(cache))
    placements, status = plugin.generate_placements(
        CycleState(), PodGroupInfo(NS, "pg1"), Placement(PARENT, parent_slots)
    )
    if not status.is_success:
        return None, status.code
    assert placements is not None
    names = snapshot.table.names
    return {p.name: [str(names[s]) for s in p.nodes.tolist()] for p in placements}, status.code


def test_without_constraint_returns_the_parent_placement() -> None:
    got, code = generate(pod_group(None), [node("node1"), node("node2", foo="bar")], [node("node3")])
    assert (got, code) == ({PARENT: ["node1", "node2"]}, Code.SUCCESS)


def test_with_topology_key_constraint_returns_a_placement_per_domain() -> None:
    nodes = [
        node("node0", topology2="d1"),
        node("node1", topology2="d4"),
        node("node2", topology1="d1"),
        node("node3", topology1="d2"),
        node("node4", topology1="d1"),
        node("node5", topology1="d3"),
    ]
    got, code = generate(pod_group("topology1"), nodes)
    assert code is Code.SUCCESS
    assert got == {"d1": ["node2", "node4"], "d2": ["node3"], "d3": ["node5"]}


def test_without_matching_topology_label_returns_no_placement() -> None:
    nodes = [node("node0", topology2="d1"), node("node2", topology1="d1"), node("node3", topology1="d2")]
    assert generate(pod_group("topology3"), nodes) == ({}, Code.SUCCESS)


def test_with_pods_already_scheduled_in_one_domain_returns_that_domain() -> None:
    got, code = generate(
        pod_group("topology"),
        [node("node0", topology="d2"), node("node1", topology="d1")],
        [node("node2", topology="d1"), node("node3", topology="d1")],
        {"pod1": "node2", "pod2": "node3"},
    )
    assert (got, code) == ({"d1": ["node1"]}, Code.SUCCESS)


def test_with_pods_scheduled_in_a_domain_outside_the_placement_returns_no_placement() -> None:
    got, code = generate(
        pod_group("topology"),
        [node("node0", topology="d2")],
        [node("node2", topology="d1"), node("node3", topology="d1")],
        {"pod1": "node2", "pod2": "node3"},
    )
    assert (got, code) == ({}, Code.SUCCESS)


@pytest.mark.parametrize(
    ("other_nodes", "scheduled", "message"),
    [
        pytest.param(
            [node("node2", topology="d0"), node("node3", topology="d1")],
            {"pod1": "node2", "pod2": "node3"},
            "cannot determine domain for already scheduled pods: more than 1 domain found for pod group: d0, d1",
            id="conflicting-domains",
        ),
        pytest.param(
            [node("node2", topology="d1"), node("node3", topology="d1")],
            {"pod1": "node2", "pod2": "node4"},
            "cannot determine domain for already scheduled pods: getting node for pod default/pod2: nodeinfo not found "
            'for node name "node4"',
            id="scheduled-on-a-node-outside-the-snapshot",
        ),
        pytest.param(
            [node("node2", foo="bar")],
            {"pod1": "node2"},
            "cannot determine domain for already scheduled pods: no topology domain found for pod default/pod1",
            id="scheduled-on-a-node-without-the-label",
        ),
    ],
)
def test_scheduled_pods_that_name_no_single_domain_are_an_error(
    other_nodes: list[dict[str, Any]], scheduled: dict[str, str], message: str
) -> None:
    cache = make_cache([node("node0", topology="d2"), node("node1", topology="d1"), *other_nodes])
    cache.objects.apply("PodGroup", "ADDED", pod_group("topology"))
    for name, node_name in scheduled.items():
        cache.add_or_update_pod(member(name, node_name))
    cache.update_pod_group_snapshot()
    plugin = TopologyPlacementGenerator(handle=FakeHandle(cache))
    placements, status = plugin.generate_placements(
        CycleState(), PodGroupInfo(NS, "pg1"), Placement(PARENT, cache.snapshot().order)
    )
    assert placements is None
    assert status.code is Code.ERROR
    assert status.message == message


def test_a_missing_pod_group_is_the_listers_not_found_error() -> None:
    cache = make_cache([node("node0", topology="d1")])
    plugin = TopologyPlacementGenerator(handle=FakeHandle(cache))
    _, status = plugin.generate_placements(CycleState(), PodGroupInfo(NS, "pg1"), Placement("", cache.snapshot().order))
    assert (status.code, status.message) == (Code.ERROR, 'podgroup.scheduling.k8s.io "pg1" not found')


def test_a_constrained_group_without_state_is_an_error() -> None:
    cache = make_cache([node("node0", topology="d1")])
    cache.objects.apply("PodGroup", "ADDED", pod_group("topology"))
    cache.update_pod_group_snapshot()
    plugin = TopologyPlacementGenerator(handle=FakeHandle(cache))
    _, status = plugin.generate_placements(CycleState(), PodGroupInfo(NS, "pg1"), Placement("", cache.snapshot().order))
    assert (status.code, status.message) == (Code.ERROR, "pod group state not found for pod group default/pg1")


def test_topology_key_reads_the_first_constraint() -> None:
    assert topology_key(pod_group("rack")) == "rack"
    assert topology_key(pod_group(None)) is None
    assert topology_key({"spec": {"schedulingConstraints": {"topology": []}}}) is None
