"""NodeTable: the batched accounting of many pods equals the one-pod updates it replaces; a snapshot's names."""

from __future__ import annotations

from kopf_scheduler.state.node_table import NodeTable
from tests.unit.factories import make_cache, make_node


def test_add_pods_accounts_repeated_slots_and_new_resources_as_one_pod_at_a_time() -> None:
    tables = NodeTable(), NodeTable()
    for table in tables:
        for name in ("n0", "n1", "n2"):
            table.allocate(name)
    batch, single = tables
    slots = [1, 0, 1, 1]
    requests = [{"cpu": 100}, {"memory": 5}, {"cpu": 200, "example.com/gpu": 1}, {}]
    non_zero = [(100, 200), (100, 5), (200, 200), (100, 200)]
    versions = batch.version.copy()
    batch.add_pods(slots, requests, non_zero, +1)
    for slot, pod_requests, pod_non_zero in zip(slots, requests, non_zero, strict=True):
        single.add_pod(slot, pod_requests, pod_non_zero, +1)
    assert batch.resources == single.resources  # the GPU column made on the way
    assert batch.requested.tolist() == single.requested.tolist()
    assert batch.non_zero_requested.tolist() == single.non_zero_requested.tolist()
    assert batch.pod_count.tolist() == single.pod_count.tolist() == [1, 3, 0] + [0] * (batch.capacity - 3)
    touched = batch.version[[0, 1]]
    assert (touched > versions.max()).all()  # new, unused versions
    assert touched[0] != touched[1]
    assert batch.version[2] == versions[2]
    batch.add_pods(slots, requests, non_zero, -1)
    assert not batch.requested.any()
    assert not batch.non_zero_requested.any()
    assert not batch.pod_count.any()
    batch.add_pods([], [], [], -1)  # nothing to do


def test_a_snapshots_node_names_come_in_node_tree_order() -> None:
    nodes = [make_node(f"n{i}", labels={"topology.kubernetes.io/zone": f"z{i % 2}"}) for i in range(5)]
    cache = make_cache(nodes)
    cache.remove_node("n2")
    snapshot = cache.snapshot()
    assert snapshot.node_names() == [info.name for info in snapshot.node_infos()]
    assert sorted(snapshot.node_names()) == ["n0", "n1", "n3", "n4"]
