"""NodeResourcesFit as a PlacementScore plugin (upstream fit_test.go's TestScorePlacement_Resources): a placement's
nodes scored as one node, MostAllocated over the scoring strategy's resources, the proposed members' requests and
the pods already there counted, a scalar resource only when a member requests it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.args import NodeResourcesFitArgs
from kopf_scheduler.framework import (
    CycleState,
    Placement,
    PodGroupAssignments,
    PodGroupInfo,
    ProposedAssignment,
)
from kopf_scheduler.plugins.node_resources_fit import NodeResourcesFit
from tests.unit.factories import FakeHandle, make_cache, make_node, make_pod, pod_info

GPU = "nvidia.com/gpu"
CPU_MEMORY = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]


def node(name: str, *, gpu: bool = False) -> dict[str, Any]:
    return make_node(name, cpu="5000m", memory="5000", extra={GPU: "5"} if gpu else None)


def requests(cpu: str, memory: str, gpu: str | None = None) -> dict[str, str | int]:
    found: dict[str, str | int] = {"cpu": cpu, "memory": memory}
    if gpu is not None:
        found[GPU] = gpu
    return found


@pytest.mark.parametrize(
    ("nodes", "placement", "members", "existing", "resources", "expected"),
    [
        pytest.param(
            [node("node1"), node("node2")],
            ["node1", "node2"],
            [(requests("1000m", "0"), "node1"), (requests("2000m", "2000"), "node2")],
            [],
            CPU_MEMORY,
            25,  # cpu 3000/10000, memory 2000/10000: 100 * (0.3 + 0.2) / 2
            id="total-requests",
        ),
        pytest.param(
            [node("node1"), node("node2")],
            ["node1", "node2"],
            [(requests("1000m", "0"), "node1"), (requests("2000m", "2000"), "node2")],
            [],
            [{"name": "cpu", "weight": 4}, {"name": "memory", "weight": 1}],
            28,  # (4 * 30 + 20) / 5
            id="weights",
        ),
        pytest.param(
            [node("node1"), node("node2")],
            ["node1", "node2"],
            [(requests("1000m", "0"), "node1"), (requests("2000m", "2000"), "node1")],
            [],
            [{"name": "cpu", "weight": 4}, {"name": "memory", "weight": 1}],
            28,
            id="several-members-on-one-node",
        ),
        pytest.param(
            [node("node1"), node("node2"), node("node3")],
            ["node1", "node2"],
            [(requests("1000m", "0"), "node1"), (requests("2000m", "2000"), "node2")],
            [],
            CPU_MEMORY,
            25,
            id="nodes-outside-the-placement-do-not-count",
        ),
        pytest.param(
            [node("node1"), node("node2")],
            ["node1", "node2"],
            [(requests("1000m", "0"), "node1"), (requests("2000m", "2000"), "node2")],
            [(requests("1000m", "0"), "node1")],
            CPU_MEMORY,
            30,  # cpu 4000/10000
            id="pods-already-there-count",
        ),
        pytest.param(
            [node("node1", gpu=True), node("node2", gpu=True)],
            ["node1", "node2"],
            [(requests("1000m", "0", "0"), "node1"), (requests("1000m", "2000", "1"), "node2")],
            [(requests("1000m", "0", "0"), "node1")],
            [*CPU_MEMORY, {"name": GPU, "weight": 1}],
            20,  # cpu 0.3, memory 0.2, gpu 1/10
            id="a-scalar-a-member-requests",
        ),
        pytest.param(
            [node("node1", gpu=True), node("node2", gpu=True)],
            ["node1", "node2"],
            [(requests("1000m", "0", "0"), "node1"), (requests("1000m", "2000", "0"), "node2")],
            [(requests("1000m", "0", "1"), "node1")],
            [*CPU_MEMORY, {"name": GPU, "weight": 1}],
            25,  # the GPU is left out: no member requests one
            id="a-scalar-no-member-requests",
        ),
    ],
)
def test_score_placement(
    nodes: list[dict[str, Any]],
    placement: list[str],
    members: list[tuple[dict[str, str | int], str]],
    existing: list[tuple[dict[str, str | int], str]],
    resources: list[dict[str, Any]],
    expected: int,
) -> None:
    pods = [make_pod(f"existing-{i}", requests=r, node_name=where) for i, (r, where) in enumerate(existing)]
    cache = make_cache(nodes, pods)
    snapshot = cache.snapshot()
    args = NodeResourcesFitArgs.model_validate({"scoringStrategy": {"type": "LeastAllocated", "resources": resources}})
    plugin = NodeResourcesFit(handle=FakeHandle(cache), args=args)
    slots = np.asarray([snapshot.slot_of(name) for name in placement], dtype=np.int64)
    proposed = tuple(
        ProposedAssignment(pod_info(make_pod(f"member-{i}", requests=r)), where) for i, (r, where) in enumerate(members)
    )
    score, status = plugin.score_placement(
        CycleState(), PodGroupInfo("default", "pg"), PodGroupAssignments(Placement("", slots), proposed)
    )
    assert status.is_success
    assert score == expected


def test_no_normalize_placement_score() -> None:
    assert NodeResourcesFit.has_placement_normalize is False
