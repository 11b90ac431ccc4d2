"""NodeResourcesBalancedAllocation (reference §2.9, upstream v1.36 ``noderesources/balanced_allocation.go``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.args import NodeResourcesBalancedAllocationArgs, ResourceSpec
from kopf_scheduler.framework.status import Code
from kopf_scheduler.plugins.helper.resource_allocation import balanced_resource_score
from kopf_scheduler.plugins.node_resources_balanced_allocation import (
    PRE_SCORE_STATE_KEY,
    NodeResourcesBalancedAllocation,
)
from tests.unit.factories import FakeHandle, make_cache, make_node, make_pod, new_state, pod_info, slots

GPU = "nvidia.com/gpu"


def node(name: str, milli_cpu: int, memory: int, gpus: int | None = None) -> dict[str, Any]:
    """A node sized like upstream's ``makeNode`` (millicores, bytes, optional GPUs)."""
    return make_node(name, cpu=f"{milli_cpu}m", memory=memory, extra=None if gpus is None else {GPU: gpus})


def pod_of(*requests: dict[str, str], name: str = "pod", node_name: str = "") -> dict[str, Any]:
    """One container per request map, as upstream's ``st.MakePod().Req(...).Req(...)``."""
    spec = {
        "containers": [{"name": f"c{i}", "image": "img", "resources": {"requests": r}} for i, r in enumerate(requests)]
    }
    return make_pod(name, node_name=node_name, spec=spec)


def cpu_mem(cpu: str, memory: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory}


def args_with(*names: str) -> NodeResourcesBalancedAllocationArgs:
    return NodeResourcesBalancedAllocationArgs(resources=[ResourceSpec(name=n, weight=1) for n in names])


def balance(requested: list[list[int]], allocatable: list[list[int]]) -> np.ndarray:
    """``balanced_resource_score`` over (resources × nodes) matrices, with 0 allocatable masked as upstream."""
    rows = []
    for req, alloc in zip(requested, allocatable, strict=True):
        req_array, alloc_array = np.asarray(req, dtype=np.int64), np.asarray(alloc, dtype=np.int64)
        present = alloc_array != 0
        rows.append((req_array, np.where(present, alloc_array, 1), None if present.all() else present))
    return balanced_resource_score(rows, len(requested[0]))


def run(
    nodes: list[dict[str, Any]],
    existing: list[dict[str, Any]],
    pod: dict[str, Any],
    args: NodeResourcesBalancedAllocationArgs | None = None,
    *,
    pre_score: bool = True,
) -> list[int] | str:
    """Scores per node in order, or "skip" when PreScore skips the plugin."""
    cache = make_cache(nodes, existing)
    plugin = NodeResourcesBalancedAllocation(handle=FakeHandle(cache), args=args)
    snapshot = cache.snapshot()
    state = new_state()
    info = pod_info(pod)
    names = [n["metadata"]["name"] for n in nodes]
    if pre_score:
        status = plugin.pre_score(state, info, slots(snapshot, names), snapshot)
        if status.is_skip:
            assert status.code is Code.SKIP
            return "skip"
        assert status.is_success
    scores = plugin.score(state, info, slots(snapshot, names), snapshot)
    assert scores.dtype == np.int64
    return scores.tolist()


TWO = (cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))

CASES = [
    pytest.param(
        [node("a", 4000, 10000), node("b", 4000, 10000)], [], pod_of({}), None, "skip", id="best-effort-skipped"
    ),
    pytest.param(
        [node("a", 4000, 10000)],
        [],
        pod_of(cpu_mem("0", "0")),
        None,
        "skip",
        id="explicit-zero-requests-are-best-effort",
    ),
    pytest.param(
        [node("a", 4000, 10000, gpus=8)],
        [],
        pod_of({GPU: "1"}),
        None,
        "skip",
        id="best-effort-for-the-configured-resources",
    ),
    pytest.param(
        # a: cpu 0 → 75%, memory 0 → 50%: balance 100 → 87 → 68. b: 50% / 50%: 100 → 100 → 75.
        [node("a", 4000, 10000), node("b", 6000, 10000)],
        [],
        pod_of(*TWO),
        None,
        [68, 75],
        id="nothing-scheduled-differently-sized-nodes",
    ),
    pytest.param(
        # a: cpu 30% → 60%, memory 0 → 25%: 85 → 82 → 73. b: 30/25% → 60/50%: 97 → 95 → 74.
        [node("a", 10000, 20000), node("b", 10000, 20000)],
        [
            pod_of(cpu_mem("1000m", "0"), cpu_mem("2000m", "0"), name="e1", node_name="a"),
            pod_of(*TWO, name="e2", node_name="b"),
        ],
        pod_of(*TWO),
        None,
        [73, 74],
        id="pods-scheduled-with-resources",
    ),
    pytest.param(
        [node("a", 10000, 20000), node("b", 10000, 50000)],
        [
            pod_of(cpu_mem("1000m", "0"), cpu_mem("2000m", "0"), name="e1", node_name="a"),
            pod_of(*TWO, name="e2", node_name="b"),
        ],
        pod_of(*TWO),
        None,
        [73, 70],
        id="pods-scheduled-differently-sized-nodes",
    ),
    pytest.param(
        # a: cpu 100%, memory 0 → 100%: 50 → 100 → 100. b: 0/0 → 0/100%: 100 → 50 → 50.
        [node("a", 3000, 5000), node("b", 3000, 5000)],
        [pod_of({"cpu": "1000m"}, {"cpu": "2000m"}, name="e1", node_name="a")],
        pod_of({"memory": "2000"}, {"memory": "3000"}),
        None,
        [100, 50],
        id="reaching-min-and-max",
    ),
    pytest.param(
        [node("a", 6000, 10000), node("b", 6000, 10000)],
        [pod_of({"cpu": "1000m"}, {"cpu": "2000m"}, name="e1", node_name="a"), pod_of(*TWO, name="e2", node_name="b")],
        pod_of({"cpu": "1000m"}, {"cpu": "2000m"}),
        None,
        [62, 62],
        id="requested-at-node-capacity",
    ),
    pytest.param(
        # Three fractions: population standard deviation. a: 69 → 70 → 75; b: 62 → 65 → 76.
        [node("a", 3500, 40000, gpus=8), node("b", 3500, 40000, gpus=8)],
        [
            pod_of(cpu_mem("1000m", "2000"), {"cpu": "2000m", "memory": "3000", GPU: "3"}, name="e1", node_name="a"),
            pod_of(*TWO, name="e2", node_name="b"),
        ],
        pod_of({"cpu": "0", "memory": "0", GPU: "1"}),
        args_with("cpu", "memory", GPU),
        [75, 76],
        id="scalar-requested-is-scored",
    ),
    pytest.param(
        [node("a", 3500, 40000, gpus=8), node("b", 3500, 40000)],
        [],
        pod_of(*TWO),
        args_with("cpu", "memory", GPU),
        [56, 56],
        id="scalar-not-requested-is-left-out",
    ),
    pytest.param(
        # Existing pods' missing requests are not defaulted: the node looks empty.
        [node("a", 4000, 8 * 2**30)],
        [pod_of({}, name="e1", node_name="a"), pod_of({}, name="e2", node_name="a")],
        pod_of(cpu_mem("2", "2Gi")),
        None,
        # without: 0/0 → 100; with: 50% / 25% → 87 → 50 + (50 + 87 − 100) / 2 = 68.
        [68],
        id="real-requests-no-defaults",
    ),
    pytest.param(
        [make_node("a", cpu="0", memory="0")],
        [],
        pod_of(cpu_mem("1", "1Gi")),
        None,
        # Nothing allocatable: both balances are 100 → 75.
        [75],
        id="no-allocatable",
    ),
]


@pytest.mark.parametrize(("nodes", "existing", "pod", "args", "want"), CASES)
def test_score(
    nodes: list[dict[str, Any]],
    existing: list[dict[str, Any]],
    pod: dict[str, Any],
    args: NodeResourcesBalancedAllocationArgs | None,
    want: list[int] | str,
) -> None:
    assert run(nodes, existing, pod, args) == want


def test_worked_example_2_22() -> None:
    """§2.22: alloc 4000m/8Gi, requested 1000m/1Gi, pod 1000m/1Gi → fractions 0.5, 0.25 → balance 87.

    1.36 scores the improvement: without the pod 0.25/0.125 → 93, so 50 + (50 + 87 − 93) / 2 = 72.
    """
    gib = 2**30
    with_pod = balance([[2000], [2 * gib]], [[4000], [8 * gib]])
    without_pod = balance([[1000], [gib]], [[4000], [8 * gib]])
    assert (with_pod.tolist(), without_pod.tolist()) == ([87], [93])
    existing = [pod_of(cpu_mem("1000m", "1Gi"), name="e", node_name="a")]
    assert run([node("a", 4000, 8 * gib)], existing, pod_of(cpu_mem("1000m", "1Gi"))) == [72]


@pytest.mark.parametrize(
    ("requested", "allocatable", "want"),
    [
        pytest.param([[1], [1]], [[0], [0]], 100, id="none-included"),
        pytest.param([[3], [0]], [[4], [0]], 100, id="one-included"),
        pytest.param([[5], [1]], [[4], [4]], 62, id="capped-at-one"),
        # Two of three included (gpu has no allocatable): |0.5 − 0.25| / 2 → 87.
        pytest.param([[2], [1], [1]], [[4], [4], [0]], 87, id="two-of-three-included"),
        # Three: fractions 0.1, 0.5, 0.9 → mean 0.5, std sqrt(0.32/3) = 0.3266 → 67.
        pytest.param([[1], [5], [9]], [[10], [10], [10]], 67, id="population-std"),
    ],
)
def test_balanced_resource_score(requested: list[list[int]], allocatable: list[list[int]], want: int) -> None:
    assert balance(requested, allocatable).tolist() == [want]


def test_balanced_resource_score_mixed_nodes() -> None:
    """Nodes including different resource sets in one call each take their own branch."""
    # Node 0 has all three (population std), node 1 lacks the third (two: |f1 − f2| / 2), node 2 only one.
    requested = [[1, 2, 3], [5, 1, 0], [9, 0, 0]]
    allocatable = [[10, 4, 4], [10, 4, 0], [10, 0, 0]]
    assert balance(requested, allocatable).tolist() == [67, 87, 100]


def test_score_without_pre_score() -> None:
    nodes = [node("a", 10000, 20000), node("b", 10000, 20000)]
    existing = [pod_of(*TWO, name="e", node_name="b")]
    assert run(nodes, existing, pod_of(*TWO), pre_score=False) == run(nodes, existing, pod_of(*TWO)) == [73, 74]


def test_score_without_pre_score_best_effort_is_zero() -> None:
    assert run([node("a", 4000, 10000)], [], pod_of({}), pre_score=False) == [0]


def test_pre_score_state() -> None:
    cache = make_cache([node("a", 4000, 10000)])
    plugin = NodeResourcesBalancedAllocation(handle=FakeHandle(cache), args=args_with("memory", "cpu"))
    state = new_state()
    snapshot = cache.snapshot()
    assert plugin.pre_score(state, pod_info(pod_of({"cpu": "1"})), slots(snapshot), snapshot).is_success
    assert state.read(PRE_SCORE_STATE_KEY).pod_requests == (0, 1000)
    assert state.clone().read(PRE_SCORE_STATE_KEY) is state.read(PRE_SCORE_STATE_KEY)


def test_has_no_normalize() -> None:
    assert NodeResourcesBalancedAllocation.has_normalize is False


def test_registers_no_events() -> None:
    # It never rejects a pod, so no cluster event needs to requeue one.
    assert NodeResourcesBalancedAllocation(handle=FakeHandle()).events_to_register() == []
