"""A placement assumed on the snapshot (upstream ``Snapshot.AssumePlacement``/``ForgetPlacement`` and the algorithm's
``*InPlacement`` calls in schedule_one.go): the algorithm's candidate nodes, the ``N`` of ``0/N nodes are
available``, the round-robin start's modulus and the nominated-node fast path are the placement's; a placement of
every node is no placement; a slot without a node is refused."""

from __future__ import annotations

import numpy as np
import pytest

from kopf_scheduler.algorithm import FitError, schedule_pod
from kopf_scheduler.framework import CycleState, ExtensionPoint, Status
from kopf_scheduler.framework.status import Code
from tests.unit.factories import make_cache, make_node, make_pod, pod_info
from tests.unit.test_runtime import (
    _reset_calls,  # noqa: F401  (autouse fixture clearing the call log)
    build,
    calls,
    node_filter,
)

E = ExtensionPoint
NAMES = [f"n{i}" for i in range(5)]


def slots_of(snapshot: object, names: list[str]) -> np.ndarray:
    return np.asarray([snapshot.slot_of(n) for n in names], dtype=np.int64)  # type: ignore[attr-defined]


def test_a_placement_of_every_node_is_no_placement() -> None:
    snapshot = make_cache([make_node(n) for n in NAMES]).snapshot()
    snapshot.assume_placement(snapshot.order[::-1].copy())
    assert snapshot.nodes_in_placement is snapshot.order
    assert snapshot.num_nodes_in_placement == 5


def test_a_placement_limits_the_search_and_the_node_count() -> None:
    cache = make_cache([make_node(n) for n in NAMES])
    framework = build(
        [node_filter("Reject", {n: Status(Code.UNSCHEDULABLE, ("nope",)) for n in NAMES})],
        {E.FILTER: ("Reject",)},
        cache=cache,
    )
    snapshot = cache.snapshot()
    snapshot.assume_placement(slots_of(snapshot, ["n1", "n3"]))
    assert snapshot.in_placement(int(snapshot.slot_of("n1")))  # type: ignore[arg-type]
    assert not snapshot.in_placement(int(snapshot.slot_of("n0")))  # type: ignore[arg-type]
    with pytest.raises(FitError) as caught:
        schedule_pod(framework, CycleState(), pod_info(make_pod()), snapshot)
    assert caught.value.message == "0/2 nodes are available: 2 nope."
    assert [detail for _, detail in calls("filter")] == [["n1", "n3"]]
    assert framework.next_start_node_index == 0  # (0 + 2 processed) % 2 nodes in the placement
    snapshot.forget_placement()
    with pytest.raises(FitError) as caught:
        schedule_pod(framework, CycleState(), pod_info(make_pod()), snapshot)
    assert caught.value.message == "0/5 nodes are available: 5 nope."


def test_a_nominated_node_outside_the_placement_is_not_tried() -> None:
    cache = make_cache([make_node(n) for n in NAMES])
    framework = build([node_filter("Any", {})], {E.FILTER: ("Any",)}, cache=cache)
    snapshot = cache.snapshot()
    snapshot.assume_placement(slots_of(snapshot, ["n1", "n2"]))
    obj = make_pod("preemptor")
    obj["status"]["nominatedNodeName"] = "n4"
    result = schedule_pod(framework, CycleState(), pod_info(obj), snapshot)
    assert result.suggested_host in {"n1", "n2"}
    assert ["n4"] not in [detail for _, detail in calls("filter")]


def test_a_slot_without_a_node_is_refused() -> None:
    cache = make_cache([make_node(n) for n in NAMES])
    snapshot = cache.snapshot()
    gone = int(snapshot.slot_of("n2"))  # type: ignore[arg-type]
    cache.remove_node("n2")
    with pytest.raises(LookupError, match="in placement is not present in snapshot"):
        snapshot.assume_placement(np.asarray([gone], dtype=np.int64))
    assert snapshot.num_nodes_in_placement == len(snapshot.order)  # no placement left behind
