"""PodGroupPodsCount (upstream ``plugins/podgrouppodscount/podgroup_pods_count_test.go``): a placement scores the
group's scheduled members (assumed and assigned, from the cycle's snapshot of the group) plus the members it would
place; NormalizePlacementScore scales by the best placement."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.framework import (
    CycleState,
    Placement,
    PlacementScore,
    PodGroupAssignments,
    PodGroupInfo,
    ProposedAssignment,
)
from kopf_scheduler.framework.status import Code
from kopf_scheduler.plugins.pod_group_pods_count import PodGroupPodsCount
from tests.unit.factories import FakeHandle, make_cache, make_node, make_pod, pod_info

NS = "default"
GROUP = PodGroupInfo(NS, "pg1")


def member(name: str, node_name: str = "") -> dict[str, Any]:
    return make_pod(
        name, namespace=NS, uid=name, node_name=node_name, spec={"schedulingGroup": {"podGroupName": "pg1"}}
    )


PROPOSED = (
    ProposedAssignment(pod_info(member("proposed-pod-1")), "node1"),
    ProposedAssignment(pod_info(member("proposed-pod-2")), "node2"),
)


@pytest.mark.parametrize(
    ("assigned", "assumed", "expected"),
    [
        pytest.param({"p2": "node2", "p3": "node3"}, {"p1": "node1"}, 5, id="assigned-and-assumed"),  # 1 + 2 + 2
        pytest.param({"p1": "node1"}, {}, 3, id="no-assumed-pods"),
        pytest.param({}, {"p1": "node1"}, 3, id="no-assigned-pods"),
        pytest.param({}, {}, 2, id="neither"),
    ],
)
def test_score_placement(assigned: dict[str, str], assumed: dict[str, str], expected: int) -> None:
    cache = make_cache([make_node(f"node{i}") for i in (1, 2, 3)])
    for name, node_name in assigned.items():
        cache.add_or_update_pod(member(name, node_name))
    for name, node_name in assumed.items():
        pod = pod_info(member(name))
        cache.add_pod_group_member(pod)
        cache.assume(pod, node_name)
    for proposed in PROPOSED:
        cache.add_pod_group_member(proposed.pod)
    cache.update_pod_group_snapshot()
    plugin = PodGroupPodsCount(handle=FakeHandle(cache))
    placement = PodGroupAssignments(Placement("p", np.zeros(0, dtype=np.int64)), PROPOSED)
    score, status = plugin.score_placement(CycleState(), GROUP, placement)
    assert status.is_success
    assert score == expected


def test_score_placement_of_an_unknown_group_is_an_error() -> None:
    plugin = PodGroupPodsCount(handle=FakeHandle(make_cache([make_node("node1")])))
    placement = PodGroupAssignments(Placement("p", np.zeros(0, dtype=np.int64)), PROPOSED)
    score, status = plugin.score_placement(CycleState(), GROUP, placement)
    assert (score, status.code, status.message) == (
        0,
        Code.ERROR,
        "pod group state not found for pod group default/pg1",
    )


@pytest.mark.parametrize(
    ("scores", "normalized"),
    [
        pytest.param([10, 50, 110], [9, 45, 100], id="distinct"),
        pytest.param([50, 50], [100, 100], id="equal"),
        pytest.param([50], [100], id="single"),
        pytest.param([11, 100, 101, 102], [10, 98, 99, 100], id="one-far-from-a-close-group"),
    ],
)
def test_normalize_placement_score(scores: list[int], normalized: list[int]) -> None:
    rows = [PlacementScore(Placement(str(i), np.zeros(0, dtype=np.int64)), s) for i, s in enumerate(scores)]
    status = PodGroupPodsCount(handle=FakeHandle()).normalize_placement_score(CycleState(), GROUP, rows)
    assert status.is_success
    assert [row.score for row in rows] == normalized


def test_normalize_all_zero_scores_is_an_error() -> None:
    rows = [PlacementScore(Placement(str(i), np.zeros(0, dtype=np.int64)), 0) for i in range(2)]
    status = PodGroupPodsCount(handle=FakeHandle()).normalize_placement_score(CycleState(), GROUP, rows)
    assert (status.code, status.message) == (
        Code.ERROR,
        "no pods from pod group are assigned to any of the candidate placements",
    )
