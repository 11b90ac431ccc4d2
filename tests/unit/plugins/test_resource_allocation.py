"""The resource strategies' scalar twins and the scores remembered between cycles (helper/resource_allocation.py).

Both must give the vectorised strategies' scores node for node, whatever changed in the node table in between:
random clusters decide.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from kopf_scheduler.plugins.helper.resource_allocation import (
    NODE_SCORERS,
    NodeRow,
    RememberedScores,
    ScoredResource,
    Scorer,
    balanced_allocation,
    calculate_allocation,
    least_allocated,
    most_allocated,
    node_rows_reader,
)
from kopf_scheduler.state.node_table import NodeTable

GPU = "example.com/gpu"
HUGEPAGES = "hugepages-2Mi"
#: Names a strategy may be configured with: base resources, scalar ones, and ``pods`` (never scored).
NAMES = ("cpu", "memory", "ephemeral-storage", GPU, HUGEPAGES, "pods")


def _random_requests(rng: random.Random) -> dict[str, int]:
    requests = {"cpu": rng.choice((0, 100, 250, 1000, 3900)), "memory": rng.choice((0, 1 << 20, 500 << 20, 3 << 30))}
    if rng.random() < 0.3:
        requests["ephemeral-storage"] = rng.choice((1 << 20, 1 << 30))
    if rng.random() < 0.3:
        requests[GPU] = rng.choice((1, 2))
    return requests


def _random_allocatable(rng: random.Random) -> dict[str, int]:
    allocatable = {"cpu": rng.choice((0, 1000, 4000, 64000)), "memory": rng.choice((0, 1 << 30, 32 << 30)), "pods": 110}
    if rng.random() < 0.5:
        allocatable["ephemeral-storage"] = rng.choice((0, 10 << 30))
    if rng.random() < 0.4:
        allocatable[GPU] = rng.choice((0, 1, 8))
    if rng.random() < 0.2:
        allocatable[HUGEPAGES] = 4 << 20
    return allocatable


def _non_zero(requests: dict[str, int]) -> tuple[int, int]:
    return requests.get("cpu") or 100, requests.get("memory") or 200 << 20


def _random_table(rng: random.Random, nodes: int) -> tuple[NodeTable, list[list[dict[str, int]]]]:
    table = NodeTable(capacity=4)
    pods: list[list[dict[str, int]]] = []
    for i in range(nodes):
        slot = table.allocate(f"node-{i}")
        table.set_allocatable(slot, _random_allocatable(rng))
        pods.append([])
        for _ in range(rng.randrange(4)):
            _add(table, pods, slot, _random_requests(rng))
    return table, pods


def _add(table: NodeTable, pods: list[list[dict[str, int]]], slot: int, requests: dict[str, int]) -> None:
    table.add_pod(slot, requests, _non_zero(requests), +1)
    pods[slot].append(requests)


def _random_strategy(rng: random.Random) -> tuple[tuple[ScoredResource, ...], Scorer, bool]:
    strategy = rng.choice((least_allocated, most_allocated, balanced_allocation))
    names = rng.sample(NAMES, rng.randrange(1, 5))
    weights = [1 if strategy is balanced_allocation else rng.randrange(1, 5) for _ in names]
    resources = tuple(ScoredResource(n, w, n in (GPU, HUGEPAGES)) for n, w in zip(names, weights, strict=True))
    return resources, strategy, rng.random() < 0.5


def _pod_requests(rng: random.Random, resources: tuple[ScoredResource, ...]) -> tuple[int, ...]:
    requests = _random_requests(rng)
    return tuple(requests.get(resource.name, 0) for resource in resources)


def _vectorised(
    table: NodeTable,
    nodes: np.ndarray,
    resources: tuple[ScoredResource, ...],
    strategy: Scorer,
    pod_requests: tuple[int, ...],
    use_requested: bool,
) -> np.ndarray:
    return strategy(calculate_allocation(table, nodes, resources, pod_requests, use_requested=use_requested))


@pytest.mark.parametrize("seed", range(60))
def test_the_scalar_twins_score_every_node_as_the_vectorised_strategies(seed: int) -> None:
    rng = random.Random(seed)
    table, _ = _random_table(rng, 40)
    nodes = np.arange(40, dtype=np.int64)
    for _ in range(5):
        resources, strategy, use_requested = _random_strategy(rng)
        pod_requests = _pod_requests(rng, resources)
        want = _vectorised(table, nodes, resources, strategy, pod_requests, use_requested)
        rows = node_rows_reader(table, resources, pod_requests, use_requested=use_requested)
        twin = NODE_SCORERS[strategy]
        assert [twin(rows(slot)) for slot in range(40)] == want.tolist(), (resources, strategy, pod_requests)
        # A node's score does not depend on which other nodes are scored with it.
        subset = np.asarray(sorted(rng.sample(range(40), 7)), dtype=np.int64)
        got = _vectorised(table, subset, resources, strategy, pod_requests, use_requested)
        assert got.tolist() == want[subset].tolist()


def test_balanced_twin_takes_the_float_steps_of_upstream() -> None:
    """Three resources: mean and population deviation summed resource by resource, truncated at the end."""
    rows: list[NodeRow] = [(1, 4000, 1000, 3000), (1, 8 << 30, 2 << 30, 6 << 30), (1, 8, 0, 1)]
    table = NodeTable(capacity=2)
    slot = table.allocate("n")
    table.set_allocatable(slot, {"cpu": 4000, "memory": 8 << 30, GPU: 8})
    table.add_pod(slot, {"cpu": 1000, "memory": 2 << 30}, (1000, 2 << 30), +1)
    resources = (ScoredResource("cpu", 1), ScoredResource("memory", 1), ScoredResource(GPU, 1, scalar=True))
    pod_requests = (2000, 4 << 30, 1)
    nodes = np.asarray([slot], dtype=np.int64)
    reader = node_rows_reader(table, resources, pod_requests, use_requested=True)
    assert reader(slot) == rows
    want = _vectorised(table, nodes, resources, balanced_allocation, pod_requests, True)
    assert NODE_SCORERS[balanced_allocation](rows) == int(want[0])


def _counting(twin: Callable[[list[NodeRow]], int], calls: list[int]) -> Callable[[list[NodeRow]], int]:
    def counted(rows: list[NodeRow]) -> int:
        calls.append(1)
        return twin(rows)

    return counted


def test_only_the_changed_nodes_are_scored_again() -> None:
    rng = random.Random(7)
    table, pods = _random_table(rng, 600)
    resources = (ScoredResource("cpu", 1), ScoredResource("memory", 1))
    remembered = RememberedScores(resources, least_allocated, use_requested=False)
    calls: list[int] = []
    remembered.node_scorer = _counting(NODE_SCORERS[least_allocated], calls)
    window = np.arange(50, 550, dtype=np.int64)
    request = (100, 500 << 20)

    def check() -> None:
        want = _vectorised(table, window, resources, least_allocated, request, False)
        assert remembered.scores(table, window, request).tolist() == want.tolist()

    check()  # seen once: scored directly, nothing kept
    check()  # remembered from now on: every node is new to it (vectorised, not one at a time)
    assert calls == []
    check()  # nothing changed
    assert calls == []
    _add(table, pods, 70, {"cpu": 500, "memory": 1 << 30})
    _add(table, pods, 71, {"cpu": 500})
    table.set_allocatable(300, {"cpu": 8000, "memory": 64 << 30, "pods": 110})
    _add(table, pods, 5, {"cpu": 1})  # outside the window: not scored now
    check()
    assert len(calls) == 3


def test_an_unchanged_allocatable_keeps_the_node_version() -> None:
    table = NodeTable(capacity=2)
    slot = table.allocate("n")
    table.set_allocatable(slot, {"cpu": 4000, "memory": 1 << 30})
    before = int(table.version[slot])
    table.set_allocatable(slot, {"memory": 1 << 30, "cpu": 4000})
    assert table.version[slot] == before
    table.set_allocatable(slot, {"cpu": 4000, "memory": 1 << 30, GPU: 1})
    assert table.version[slot] > before


@pytest.mark.parametrize("seed", range(20))
def test_remembered_scores_follow_every_change_of_the_table(seed: int) -> None:
    """Pods added and removed, allocatable changed or rewritten as it was, nodes deleted and their slots reused,
    the table grown, another table in between: after each, the remembered scores are the strategy's."""
    rng = random.Random(seed)
    table, pods = _random_table(rng, 30)
    resources, strategy, use_requested = _random_strategy(rng)
    remembered = RememberedScores(resources, strategy, use_requested=use_requested)
    requests = [_pod_requests(rng, resources) for _ in range(3)]
    names = [f"node-{i}" for i in range(30)]
    for step in range(120):
        action = rng.randrange(6)
        slot = rng.randrange(len(names))
        if action == 0 and names[slot] is not None:
            _add(table, pods, slot, _random_requests(rng))
        elif action == 1 and pods[slot]:
            gone = pods[slot].pop(rng.randrange(len(pods[slot])))
            table.add_pod(slot, gone, _non_zero(gone), -1)
        elif action == 2 and names[slot] is not None:
            table.set_allocatable(slot, _random_allocatable(rng))
        elif action == 3 and names[slot] is not None:
            table.release(slot)
            names[slot] = None
            pods[slot] = []
        elif action == 4:
            new = table.allocate(f"new-{step}")
            while new >= len(names):
                names.append(None)
                pods.append([])
            names[new] = f"new-{step}"
            table.set_allocatable(new, _random_allocatable(rng))
        elif action == 5:
            other, _ = _random_table(rng, 5)
            nodes = np.arange(5, dtype=np.int64)
            pod_requests = rng.choice(requests)
            want = _vectorised(other, nodes, resources, strategy, pod_requests, use_requested)
            assert remembered.scores(other, nodes, pod_requests).tolist() == want.tolist()
        alive = [i for i, name in enumerate(names) if name is not None]
        nodes = np.asarray(sorted(rng.sample(alive, min(len(alive), rng.randrange(1, 25)))), dtype=np.int64)
        pod_requests = rng.choice(requests)
        want = _vectorised(table, nodes, resources, strategy, pod_requests, use_requested)
        assert remembered.scores(table, nodes, pod_requests).tolist() == want.tolist(), step
