"""NodeResourcesFit (reference §2.8, upstream v1.36 ``noderesources/fit.go`` and the scoring strategies)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.args import (
    NodeResourcesFitArgs,
    RequestedToCapacityRatioParam,
    ResourceSpec,
    ScoringStrategy,
    UtilizationShapePoint,
)
from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, EventResource, QueueingHint
from kopf_scheduler.framework.status import Code, Status
from kopf_scheduler.plugins.helper.resource_allocation import broken_linear, round_half_away, trunc_div
from kopf_scheduler.plugins.node_resources_fit import (
    PRE_FILTER_STATE_KEY,
    PRE_SCORE_STATE_KEY,
    REASON_INSUFFICIENT_CPU,
    REASON_INSUFFICIENT_EPHEMERAL_STORAGE,
    REASON_INSUFFICIENT_MEMORY,
    REASON_TOO_MANY_PODS,
    NodeResourcesFit,
)
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, new_state, pod_info, slots

U = Code.UNSCHEDULABLE
UUR = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
GPU = "example.com/gpu"


def plugin_for(cache: ClusterCache, args: NodeResourcesFitArgs | None = None) -> NodeResourcesFit:
    return NodeResourcesFit(handle=FakeHandle(cache), args=args)


def run_filter(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    pod: dict[str, Any],
    args: NodeResourcesFitArgs | None = None,
) -> dict[str, Status | None]:
    """Node name → the rejecting Status, or None when the node fits."""
    cache = make_cache(nodes, pods)
    plugin = plugin_for(cache, args)
    snapshot = cache.snapshot()
    state = new_state()
    info = pod_info(pod)
    _, status = plugin.pre_filter(state, info, snapshot)
    assert status.is_success
    names = [node["metadata"]["name"] for node in nodes]
    result = plugin.filter(state, info, slots(snapshot, names), snapshot)
    if result is None:
        return dict.fromkeys(names)
    return {name: result.status_at(i) if result.rejected[i] else None for i, name in enumerate(names)}


def verdict(status: Status | None) -> tuple[Code, tuple[str, ...]] | None:
    return None if status is None else (status.code, status.reasons)


def containers(*requests: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "image": "img", "resources": {"requests": r}} for i, r in enumerate(requests)]
    }
    if init is not None:
        body["initContainers"] = [
            {"name": f"i{i}", "image": "img", "resources": {"requests": r}} for i, r in enumerate(init)
        ]
    body.update(spec)
    return body


# -- Filter -------------------------------------------------------------------------------------------------
FILTER_CASES = [
    pytest.param(
        make_node("n", cpu="1", memory="1Gi"),
        [make_pod("e", node_name="n", requests={"cpu": "1", "memory": "1Gi"})],
        make_pod(),
        None,
        None,
        id="no-requests-always-fits",
    ),
    pytest.param(
        make_node("n", cpu="4", memory="8Gi"),
        [make_pod("e", node_name="n", requests={"cpu": "2", "memory": "4Gi"})],
        make_pod(requests={"cpu": "2", "memory": "4Gi"}),
        None,
        None,
        id="equal-edge-fits",
    ),
    pytest.param(
        make_node("n", pods=1),
        [make_pod("e", node_name="n")],
        make_pod(),
        None,
        (U, (REASON_TOO_MANY_PODS,)),
        id="too-many-pods-even-without-requests",
    ),
    pytest.param(
        make_node("n", cpu="4"),
        [make_pod("e", node_name="n", requests={"cpu": "3"})],
        make_pod(requests={"cpu": "2"}),
        None,
        (U, (REASON_INSUFFICIENT_CPU,)),
        id="insufficient-cpu",
    ),
    pytest.param(
        make_node("n", cpu="4"),
        [],
        make_pod(requests={"cpu": "4001m"}),
        None,
        (UUR, (REASON_INSUFFICIENT_CPU,)),
        id="cpu-beyond-total-allocatable-unresolvable",
    ),
    pytest.param(
        make_node("n", memory="1Gi"),
        [make_pod("e", node_name="n", requests={"memory": "512Mi"})],
        make_pod(requests={"memory": "513Mi"}),
        None,
        (U, (REASON_INSUFFICIENT_MEMORY,)),
        id="insufficient-memory",
    ),
    pytest.param(
        make_node("n", cpu="4", memory="1Gi"),
        [make_pod("e", node_name="n", requests={"cpu": "3", "memory": "1Gi"})],
        make_pod(requests={"cpu": "2", "memory": "2Gi"}),
        None,
        (UUR, (REASON_INSUFFICIENT_CPU, REASON_INSUFFICIENT_MEMORY)),
        id="cpu-and-memory-one-unresolvable",
    ),
    pytest.param(
        make_node("n", pods=1, cpu="4"),
        [make_pod("e", node_name="n", requests={"cpu": "3"})],
        make_pod(requests={"cpu": "2"}),
        None,
        (U, (REASON_TOO_MANY_PODS, REASON_INSUFFICIENT_CPU)),
        id="too-many-pods-never-unresolvable",
    ),
    pytest.param(
        make_node("n", pods=1, cpu="4"),
        [make_pod("e", node_name="n")],
        make_pod(requests={"cpu": "5"}),
        None,
        (UUR, (REASON_TOO_MANY_PODS, REASON_INSUFFICIENT_CPU)),
        id="too-many-pods-and-cpu-beyond-total",
    ),
    pytest.param(
        make_node("n", extra={"ephemeral-storage": "10Gi"}),
        [make_pod("e", node_name="n", requests={"ephemeral-storage": "6Gi"})],
        make_pod(requests={"ephemeral-storage": "5Gi"}),
        None,
        (U, (REASON_INSUFFICIENT_EPHEMERAL_STORAGE,)),
        id="insufficient-ephemeral-storage",
    ),
    pytest.param(
        make_node("n"),
        [],
        make_pod(requests={"ephemeral-storage": "1"}),
        None,
        (UUR, (REASON_INSUFFICIENT_EPHEMERAL_STORAGE,)),
        id="ephemeral-storage-not-advertised",
    ),
    pytest.param(
        make_node("n", extra={GPU: 5}),
        [make_pod("e", node_name="n", requests={GPU: 2})],
        make_pod(requests={GPU: 3}),
        None,
        None,
        id="extended-fits",
    ),
    pytest.param(
        make_node("n", extra={GPU: 5}),
        [make_pod("e", node_name="n", requests={GPU: 2})],
        make_pod(requests={GPU: 4}),
        None,
        (U, (f"Insufficient {GPU}",)),
        id="extended-insufficient",
    ),
    pytest.param(
        make_node("n", extra={GPU: 5}),
        [],
        make_pod(requests={GPU: 10}),
        None,
        (UUR, (f"Insufficient {GPU}",)),
        id="extended-beyond-total",
    ),
    pytest.param(
        make_node("n"),
        [],
        make_pod(requests={"example.com/unknown": 1}),
        None,
        (UUR, ("Insufficient example.com/unknown",)),
        id="extended-nobody-has",
    ),
    pytest.param(
        make_node("n"),
        [],
        make_pod(requests={"example.com/unknown": 0, "cpu": "1"}),
        None,
        None,
        id="zero-extended-request-skipped",
    ),
    pytest.param(
        make_node("n", extra={"hugepages-2Mi": "10Mi"}),
        [],
        make_pod(requests={"hugepages-2Mi": "12Mi"}),
        None,
        (UUR, ("Insufficient hugepages-2Mi",)),
        id="hugepages-beyond-total",
    ),
    pytest.param(
        make_node("n"),
        [],
        make_pod(requests={"kubernetes.io/something": 1}),
        None,
        (UUR, ("Insufficient kubernetes.io/something",)),
        id="prefixed-native-checked",
    ),
    pytest.param(
        make_node("n"),
        [],
        make_pod(requests={GPU: 1}),
        NodeResourcesFitArgs(ignored_resources=[GPU]),
        None,
        id="ignored-resources",
    ),
    pytest.param(
        make_node("n"),
        [],
        make_pod(requests={GPU: 1, "example.org/fpga": 1}),
        NodeResourcesFitArgs(ignored_resource_groups=["example.com"]),
        (UUR, ("Insufficient example.org/fpga",)),
        id="ignored-resource-groups-by-prefix",
    ),
    pytest.param(
        make_node("n"),
        [],
        make_pod(requests={"kubernetes.io/something": 1, "hugepages-2Mi": "2Mi"}),
        NodeResourcesFitArgs(
            ignored_resources=["kubernetes.io/something", "hugepages-2Mi"], ignored_resource_groups=["kubernetes.io"]
        ),
        (UUR, ("Insufficient hugepages-2Mi", "Insufficient kubernetes.io/something")),
        id="ignore-lists-apply-to-extended-only",
    ),
    pytest.param(
        make_node("n", cpu="8", memory="8Gi", extra={"example.com/b": 1, "example.com/a": 1}),
        [],
        make_pod(requests={"example.com/b": 2, "memory": "9Gi", "example.com/a": 2, "cpu": "1"}),
        None,
        (UUR, (REASON_INSUFFICIENT_MEMORY, "Insufficient example.com/a", "Insufficient example.com/b")),
        id="reason-order-base-then-scalars-sorted",
    ),
    pytest.param(
        make_node("n", cpu="4"),
        [],
        make_pod(spec=containers({"cpu": "1"}, init=[{"cpu": "5"}])),
        None,
        (UUR, (REASON_INSUFFICIENT_CPU,)),
        id="init-container-counts",
    ),
    pytest.param(
        make_node("n", cpu="4"),
        [],
        make_pod(spec=containers({"cpu": "2"}, {"cpu": "1"}, init=[{"cpu": "3"}])),
        None,
        None,
        id="init-container-max-not-sum",
    ),
    pytest.param(
        make_node("n", memory="1Gi"),
        [],
        make_pod(spec=containers({"memory": "1000Mi"}, overhead={"memory": "100Mi"})),
        None,
        (UUR, (REASON_INSUFFICIENT_MEMORY,)),
        id="overhead-counts",
    ),
    pytest.param(
        make_node("n", cpu="4"),
        [make_pod("e", node_name="n", requests={"cpu": "1"})],
        make_pod(spec=containers({"cpu": "1"}, resources={"requests": {"cpu": "3500m"}})),
        None,
        (U, (REASON_INSUFFICIENT_CPU,)),
        id="pod-level-requests",
    ),
]


@pytest.mark.parametrize(("node", "existing", "pod", "args", "want"), FILTER_CASES)
def test_filter(
    node: dict[str, Any],
    existing: list[dict[str, Any]],
    pod: dict[str, Any],
    args: NodeResourcesFitArgs | None,
    want: tuple[Code, tuple[str, ...]] | None,
) -> None:
    assert verdict(run_filter([node], existing, pod, args)["n"]) == want


def test_filter_palette_over_many_nodes() -> None:
    nodes = [
        make_node("fits", cpu="8", memory="8Gi"),
        make_node("cpu-a", cpu="2", memory="8Gi"),
        make_node("cpu-b", cpu="2", memory="8Gi"),
        make_node("busy", cpu="8", memory="8Gi"),
        make_node("full", cpu="8", memory="8Gi", pods=1),
    ]
    pods = [make_pod("e1", node_name="busy", requests={"cpu": "6"}), make_pod("e2", node_name="full")]
    got = run_filter(nodes, pods, make_pod(requests={"cpu": "3", "memory": "1Gi"}))
    assert {name: verdict(status) for name, status in got.items()} == {
        "fits": None,
        "cpu-a": (UUR, (REASON_INSUFFICIENT_CPU,)),
        "cpu-b": (UUR, (REASON_INSUFFICIENT_CPU,)),
        "busy": (U, (REASON_INSUFFICIENT_CPU,)),
        "full": (U, (REASON_TOO_MANY_PODS,)),
    }
    # Identical verdicts share one palette entry.
    assert got["cpu-a"] is got["cpu-b"]
    assert got["cpu-a"].plugin == "NodeResourcesFit"


def test_filter_many_scalar_resources_beyond_packed_key() -> None:
    names = [f"example.com/r{i:02d}" for i in range(70)]
    node = make_node("n", extra={name: 1 for name in names[::2]})
    got = run_filter([node], [], make_pod(requests=dict.fromkeys(names, 1)))["n"]
    assert got is not None
    assert got.code is UUR
    assert got.reasons == tuple(f"Insufficient {name}" for name in names[1::2])


def test_filter_counts_assumed_pods() -> None:
    cache = make_cache([make_node("n", cpu="4")])
    cache.assume(pod_info(make_pod("assumed", requests={"cpu": "3"})), "n")
    plugin = plugin_for(cache)
    snapshot = cache.snapshot()
    state = new_state()
    info = pod_info(make_pod(requests={"cpu": "2"}))
    plugin.pre_filter(state, info, snapshot)
    result = plugin.filter(state, info, slots(snapshot), snapshot)
    assert result is not None
    assert verdict(result.status_at(0)) == (U, (REASON_INSUFFICIENT_CPU,))


def test_filter_without_pre_filter_computes_requests() -> None:
    cache = make_cache([make_node("n", cpu="1")])
    snapshot = cache.snapshot()
    state = new_state()
    result = plugin_for(cache).filter(state, pod_info(make_pod(requests={"cpu": "2"})), slots(snapshot), snapshot)
    assert result is not None
    assert verdict(result.status_at(0)) == (UUR, (REASON_INSUFFICIENT_CPU,))
    assert PRE_FILTER_STATE_KEY not in state._data


def test_pre_filter_state_clone_is_shared() -> None:
    cache = make_cache([make_node("n")])
    state = new_state()
    plugin_for(cache).pre_filter(state, pod_info(make_pod(requests={"cpu": "1"})), cache.snapshot())
    assert state.clone().read(PRE_FILTER_STATE_KEY) is state.read(PRE_FILTER_STATE_KEY)


# -- Score --------------------------------------------------------------------------------------------------
def run_score(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    pod: dict[str, Any],
    args: NodeResourcesFitArgs | None = None,
    *,
    pre_score: bool = True,
) -> list[int]:
    cache = make_cache(nodes, pods)
    plugin = plugin_for(cache, args)
    snapshot = cache.snapshot()
    state = new_state()
    info = pod_info(pod)
    names = [node["metadata"]["name"] for node in nodes]
    if pre_score:
        assert plugin.pre_score(state, info, slots(snapshot, names), snapshot).is_success
    scores = plugin.score(state, info, slots(snapshot, names), snapshot)
    assert scores.dtype == np.int64
    return scores.tolist()


def strategy(
    kind: str, *resources: tuple[str, int], shape: list[tuple[int, int]] | None = None
) -> NodeResourcesFitArgs:
    specs = [ResourceSpec(name=name, weight=weight) for name, weight in resources] or None
    ratio = None
    if shape is not None:
        points = [UtilizationShapePoint(utilization=u, score=s) for u, s in shape]
        ratio = RequestedToCapacityRatioParam(shape=points)
    body: dict[str, Any] = {"type": kind, "requested_to_capacity_ratio": ratio}
    if specs:
        body["resources"] = specs
    return NodeResourcesFitArgs(scoring_strategy=ScoringStrategy(**body))


def cores(name: str, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    """A node sized like upstream's test nodes (cpu in cores, memory in bytes)."""
    return make_node(name, cpu=cpu, memory=memory, extra=extra or None)


TWO_CONTAINERS = containers({"cpu": "1000", "memory": "2000"}, {"cpu": "2000", "memory": "3000"})
EXT = "example.com/ext"
EXTENDED_SET = (("cpu", 1), ("memory", 1), (EXT, 1))

SCORE_CASES = [
    # §2.8 worked example: (4000−1500)·100//4000 = 62 for cpu and 62 for memory → 62.
    pytest.param(
        [make_node("n", cpu="4", memory="8Gi")],
        [make_pod("e", node_name="n", requests={"cpu": "1", "memory": "2Gi"})],
        make_pod(requests={"cpu": "500m", "memory": "1Gi"}),
        None,
        [62],
        id="least-worked-example",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "4000", "10000")],
        [],
        make_pod(),
        strategy("LeastAllocated", ("cpu", 1), ("memory", 1)),
        # The defaults (100m, 200Mi) exceed the 10000-byte memory: memory scores 0, cpu 99 → 49.
        [49, 49],
        id="least-best-effort-pod-counts-defaults",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "6000", "10000")],
        [],
        make_pod(spec=TWO_CONTAINERS),
        None,
        [37, 50],
        id="least-differently-sized-nodes",
    ),
    pytest.param(
        [cores("a", "10000", "20000"), cores("b", "10000", "20000")],
        [
            make_pod("e1", node_name="a", requests={"cpu": "3000", "memory": "0"}),
            make_pod("e2", node_name="b", requests={"cpu": "3000", "memory": "5000"}),
        ],
        make_pod(spec=TWO_CONTAINERS),
        None,
        [57, 45],
        id="least-with-existing-pods",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "4000", "10000")],
        [
            make_pod("e1", node_name="a", requests={"cpu": "3000", "memory": "0"}),
            make_pod("e2", node_name="b", requests={"cpu": "3000", "memory": "5000"}),
        ],
        make_pod(requests={"cpu": "3000", "memory": "0"}),
        None,
        [50, 25],
        id="least-over-capacity-scores-zero",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "6000", "10000")],
        [],
        make_pod(spec=TWO_CONTAINERS),
        strategy("LeastAllocated", ("memory", 2), ("cpu", 1)),
        [41, 50],
        id="least-weights",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "6000", "10000")],
        [],
        make_pod(spec=TWO_CONTAINERS),
        strategy("LeastAllocated", ("memory", 2), ("cpu", 0)),
        # An unset (0) weight defaults to 1.
        [41, 50],
        id="least-zero-weight-defaults-to-one",
    ),
    pytest.param(
        [cores("a", "6000", "10000"), cores("b", "6000", "10000", **{EXT: "4"})],
        [],
        make_pod(spec=TWO_CONTAINERS),
        strategy("LeastAllocated", *EXTENDED_SET),
        [50, 50],
        id="least-extended-not-requested-is-bypassed",
    ),
    pytest.param(
        [cores("a", "6000", "10000", **{EXT: "4"}), cores("b", "6000", "10000", **{EXT: "10"})],
        [],
        make_pod(requests={"cpu": "3000", "memory": "5000", EXT: "2"}),
        strategy("LeastAllocated", *EXTENDED_SET),
        [50, 60],
        id="least-extended-requested-is-scored",
    ),
    pytest.param(
        [cores("a", "6000", "10000"), cores("b", "6000", "10000", **{EXT: "4"})],
        [],
        make_pod(requests={"cpu": "3000", "memory": "4000"}),
        strategy("LeastAllocated", (EXT, 2), ("cpu", 1), ("memory", 1)),
        [55, 55],
        id="least-node-without-resource",
    ),
    pytest.param(
        [make_node("a", cpu="0", memory="0"), make_node("b", cpu="0", memory="0")],
        [],
        make_pod(requests={"cpu": "1", "memory": "1"}),
        None,
        [0, 0],
        id="least-no-allocatable-scores-zero",
    ),
    pytest.param(
        [make_node("a", extra={"ephemeral-storage": "100"})],
        [make_pod("e", node_name="a", requests={"ephemeral-storage": "30"})],
        make_pod(requests={"cpu": "1"}),
        strategy("LeastAllocated", ("ephemeral-storage", 1)),
        # ephemeral-storage is not a scalar resource: scored even though the pod does not request it.
        [70],
        id="least-ephemeral-storage-uses-real-requests",
    ),
    pytest.param(
        [make_node("a")],
        [],
        make_pod(requests={"cpu": "1"}),
        strategy("LeastAllocated", ("pods", 1), ("foo", 1)),
        [0],
        id="least-names-outside-the-resource-model-skipped",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "6000", "10000")],
        [],
        make_pod(spec=TWO_CONTAINERS),
        strategy("MostAllocated"),
        [62, 50],
        id="most-differently-sized-nodes",
    ),
    pytest.param(
        [cores("a", "10000", "20000"), cores("b", "10000", "20000")],
        [
            make_pod("e1", node_name="a", requests={"cpu": "3000", "memory": "0"}),
            make_pod("e2", node_name="b", requests={"cpu": "3000", "memory": "5000"}),
        ],
        make_pod(spec=TWO_CONTAINERS),
        strategy("MostAllocated"),
        [42, 55],
        id="most-with-existing-pods",
    ),
    pytest.param(
        [cores("a", "5000", "10000"), cores("b", "10000", "9000")],
        [],
        make_pod(spec=containers({"cpu": "2000", "memory": "4000"}, {"cpu": "3000", "memory": "5000"})),
        strategy("MostAllocated"),
        [95, 75],
        id="most-at-capacity",
    ),
    pytest.param(
        [make_node("a", cpu="250m", memory="1000Mi"), make_node("b", cpu="250m", memory="1000Mi")],
        [make_pod("e1", node_name="a"), make_pod("e2", node_name="a")],
        make_pod(),
        strategy("MostAllocated"),
        # Defaults: a has 300m (capped at 250m) / 600Mi → (100 + 60) / 2; b has 100m / 200Mi → (40 + 20) / 2.
        [80, 30],
        id="most-non-zero-defaults",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "6000", "10000")],
        [],
        make_pod(spec=TWO_CONTAINERS),
        strategy("MostAllocated", ("memory", 2), ("cpu", 1)),
        [58, 50],
        id="most-weights",
    ),
    pytest.param(
        [cores("a", "6000", "10000", **{EXT: "4"}), cores("b", "6000", "10000", **{EXT: "10"})],
        [],
        make_pod(requests={"cpu": "3000", "memory": "5000", EXT: "2"}),
        strategy("MostAllocated", *EXTENDED_SET),
        [50, 40],
        id="most-extended-requested",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "4000", "10000")],
        [make_pod("e1", node_name="a"), make_pod("e2", node_name="a")],
        make_pod(),
        strategy("RequestedToCapacityRatio", ("cpu", 1), ("memory", 1), shape=[(0, 10), (100, 0)]),
        # Memory is over capacity everywhere (defaults vs 10000 bytes) → f(100) = 0, left out; cpu ~0% → 100.
        [100, 100],
        id="rtcr-nothing-requested",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "6000", "10000")],
        [],
        make_pod(spec=TWO_CONTAINERS),
        strategy("RequestedToCapacityRatio", ("cpu", 1), ("memory", 1), shape=[(0, 10), (100, 0)]),
        # a: cpu 75% → 25, memory 50% → 50 → round(37.5) = 38; b: 50, 50 → 50.
        [38, 50],
        id="rtcr-rounds-half-away-from-zero",
    ),
    pytest.param(
        [cores("a", "4000", "10000"), cores("b", "6000", "10000")],
        [
            make_pod("e1", node_name="a", requests={"cpu": "3000", "memory": "5000"}),
            make_pod("e2", node_name="b", requests={"cpu": "3000", "memory": "5000"}),
        ],
        # A pod without containers requests nothing at all (no per-container defaults).
        make_pod(spec={"containers": []}),
        strategy("RequestedToCapacityRatio", ("cpu", 1), ("memory", 1), shape=[(0, 10), (100, 0)]),
        [38, 50],
        id="rtcr-existing-pods",
    ),
    pytest.param(
        [cores("a", "1000", "1000")],
        [],
        make_pod(requests={"cpu": "400", "memory": "1000"}),
        strategy("RequestedToCapacityRatio", ("cpu", 3), ("memory", 1), shape=[(0, 0), (100, 10)]),
        # Bin packing: cpu 40% → 40 (w 3), memory 100% → 100 (w 1) → 220/4 = 55.
        [55],
        id="rtcr-bin-packing-weights",
    ),
    pytest.param(
        [cores("a", "1000", "1000")],
        [],
        make_pod(requests={"cpu": "0", "memory": "500"}),
        strategy("RequestedToCapacityRatio", ("cpu", 5), ("memory", 1), shape=[(0, 0), (100, 10)]),
        # cpu scores 0 and is left out of the average (weight too): memory 50 alone → 50, not 50/6.
        [50],
        id="rtcr-zero-scores-left-out",
    ),
    pytest.param(
        [cores("a", "1000", "1000")],
        [],
        make_pod(requests={"cpu": "150", "memory": "350"}),
        strategy("RequestedToCapacityRatio", ("cpu", 1), ("memory", 2), shape=[(0, 0), (100, 10)]),
        # cpu 15, memory 35 (w 2) → 85/3 = 28.33 → 28.
        [28],
        id="rtcr-rounds-down-below-half",
    ),
]


@pytest.mark.parametrize(("nodes", "existing", "pod", "args", "want"), SCORE_CASES)
def test_score(
    nodes: list[dict[str, Any]],
    existing: list[dict[str, Any]],
    pod: dict[str, Any],
    args: NodeResourcesFitArgs | None,
    want: list[int],
) -> None:
    assert run_score(nodes, existing, pod, args) == want


@pytest.mark.parametrize("args", [None, strategy("MostAllocated")], ids=["least", "most"])
def test_score_without_pre_score(args: NodeResourcesFitArgs | None) -> None:
    nodes = [cores("a", "10000", "20000"), cores("b", "10000", "20000")]
    existing = [make_pod("e", node_name="b", requests={"cpu": "3000", "memory": "5000"})]
    pod = make_pod(spec=TWO_CONTAINERS)
    assert run_score(nodes, existing, pod, args, pre_score=False) == run_score(nodes, existing, pod, args)


def test_pre_score_writes_pod_requests_in_configured_order() -> None:
    cache = make_cache([make_node("n")])
    plugin = plugin_for(cache, strategy("LeastAllocated", (GPU, 1), ("memory", 1), ("cpu", 1)))
    state = new_state()
    snapshot = cache.snapshot()
    plugin.pre_score(state, pod_info(make_pod(requests={GPU: 2})), slots(snapshot), snapshot)
    assert state.read(PRE_SCORE_STATE_KEY).pod_requests == (2, 200 * 1024 * 1024, 100)


def test_score_pod_level_requests_with_overhead_uses_scoring_defaults() -> None:
    # The scorer fills in container defaults even with pod-level requests: memory 200Mi + 10Mi overhead.
    pod = make_pod(spec={"resources": {"requests": {"cpu": "1"}}, "overhead": {"memory": "10Mi"}})
    got = run_score([make_node("n", cpu="4", memory="420Mi")], [], pod, strategy("MostAllocated", ("memory", 1)))
    assert got == [50]


def test_score_ignores_pod_level_requests_of_the_incoming_pod() -> None:
    # Upstream v1.36 quirk (found by tests/conformance, seed 34): Fit's scorer never gets the PodLevelResources
    # flag, so it scores the containers' aggregate (100m cpu, default 200Mi memory), not the pod-level 2 cpu /
    # 4Gi: cpu (3500−100)·100//3500 = 97, memory (8192−200)·100//8192 Mi = 97 → 97 (pod-level would give 46).
    pod = make_pod(requests={"cpu": "100m"}, spec={"resources": {"requests": {"cpu": "2", "memory": "4Gi"}}})
    assert run_score([make_node("n", cpu="3500m", memory="8Gi")], [], pod) == [97]
    # Other scored resources come from the containers too; Filter still counts the pod-level requests.
    pod_gpu = make_pod(requests={"cpu": "1", GPU: 1}, spec={"resources": {"requests": {"cpu": "2"}}})
    cache = make_cache([make_node("n", cpu="4", memory="8Gi", extra={GPU: 2})])
    plugin = plugin_for(cache, strategy("MostAllocated", ("cpu", 1), (GPU, 1)))
    assert plugin.pod_requests(pod_info(pod_gpu)) == (1000, 1)
    assert run_filter([make_node("n", cpu="1500m", memory="8Gi")], [], pod)["n"] is not None


def test_rtcr_requires_a_shape() -> None:
    # Args validation rejects this first; the plugin still refuses to build a scorer without a shape.
    strategy_without_shape = ScoringStrategy.model_construct(
        type="RequestedToCapacityRatio", resources=[], requested_to_capacity_ratio=None
    )
    args = NodeResourcesFitArgs.model_construct(
        ignored_resources=[], ignored_resource_groups=[], scoring_strategy=strategy_without_shape
    )
    with pytest.raises(ValueError, match="shape"):
        NodeResourcesFit(handle=FakeHandle(), args=args)


# -- helpers with Go semantics ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "points"),
    [
        pytest.param(
            [(10, 1), (90, 9)],
            [
                (-10, 1),
                (0, 1),
                (9, 1),
                (10, 1),
                (15, 1),
                (19, 1),
                (20, 2),
                (89, 8),
                (90, 9),
                (99, 9),
                (100, 9),
                (110, 9),
            ],
            id="rising",
        ),
        pytest.param(
            [(0, 2), (40, 10), (100, 0)],
            [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)],
            id="rising-then-falling",
        ),
        pytest.param(
            [(0, 10), (100, 0)],
            # Falling segments truncate toward zero: 10 + (−10·33)/100 = 10 − 3 = 7 (floor would give 6).
            [(33, 7), (99, 1), (1, 10)],
            id="falling-truncates-toward-zero",
        ),
    ],
)
def test_broken_linear(shape: list[tuple[int, int]], points: list[tuple[int, int]]) -> None:
    utilization = np.asarray([p for p, _ in points], dtype=np.int64)
    assert broken_linear(shape, utilization).tolist() == [want for _, want in points]


def test_go_integer_helpers() -> None:
    assert trunc_div(np.asarray([7, -7, 7, -7]), np.asarray([2, 2, -2, -2])).tolist() == [3, -3, -3, 3]
    assert round_half_away(np.asarray([0.5, 1.5, 2.5, 37.5, 28.33, -2.5, 0.49999999999999994])).tolist() == [
        1,
        2,
        3,
        38,
        28,
        -3,
        0,
    ]


def test_extension_points_and_no_normalize() -> None:
    points = {point.value for point in NodeResourcesFit.extension_points()}
    assert points == {"preFilter", "filter", "preScore", "score", "placementScore"}
    assert NodeResourcesFit.has_normalize is False


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------
NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_ALLOC = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_ALLOCATABLE)
POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
POD_SCALE_DOWN = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN)


def with_status(pod_obj: dict[str, Any], **status: Any) -> dict[str, Any]:
    pod_obj["status"].update(status)
    return pod_obj


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent, args: dict[str, Any] | None = None) -> QueueingHint:
    """Run the hint NodeResourcesFit registered for ``event`` (exactly one registration matches)."""
    return hint_for(
        NodeResourcesFit(handle=FakeHandle(), args=NodeResourcesFitArgs.model_validate(args) if args else None), event
    )(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in NodeResourcesFit(handle=FakeHandle()).events_to_register()] == [
        ClusterEvent(EventResource.POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN),
        ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
    ]


BIG = pod_info(make_pod("big", uid="big", requests={"cpu": "2", "memory": "1Gi"}))


@pytest.mark.parametrize(
    ("old", "new", "event", "expected"),
    [
        (None, make_node("n", cpu="1"), NODE_ADD, QUEUE_SKIP),  # too small even when empty
        (None, make_node("n", cpu="4"), NODE_ADD, QUEUE),
        (None, make_node("n", cpu="4", pods=0), NODE_ADD, QUEUE_SKIP),  # no pod slots
        (make_node("n", cpu="4"), make_node("n", cpu="8"), NODE_ALLOC, QUEUE),
        (make_node("n", cpu="1"), make_node("n", cpu="1", memory="64Gi"), NODE_ALLOC, QUEUE_SKIP),
        (make_node("n", cpu="4", memory="2Gi"), make_node("n", cpu="4", memory="3Gi"), NODE_ALLOC, QUEUE),
        (make_node("n", cpu="4", pods=10), make_node("n", cpu="4", pods=20), NODE_ALLOC, QUEUE),
        (
            make_node("n", cpu="4", extra={"x.com/gpu": 1}),
            make_node("n", cpu="4", extra={"x.com/gpu": 2}),
            NODE_ALLOC,
            QUEUE_SKIP,
        ),
        (make_node("n", cpu="4"), make_node("n", cpu="4", labels={"a": "b"}), NODE_ALLOC, QUEUE_SKIP),
    ],
    ids=[
        "small-add",
        "big-add",
        "no-pod-slots",
        "cpu-up",
        "cpu-still-short",
        "memory-up",
        "pods-up",
        "unrequested-up",
        "no-change",
    ],
)
def test_node_resources_fit_node_hint(old: Any, new: Any, event: ClusterEvent, expected: QueueingHint) -> None:
    assert hint(BIG, old, new, event=event) is expected


def test_node_resources_fit_ignores_ignored_extended_resources() -> None:
    pod = pod_info(make_pod("g", requests={"cpu": "1", "example.com/foo": "1"}))
    node = make_node("n", cpu="4")
    assert hint(pod, None, node, event=NODE_ADD) is QUEUE_SKIP
    args = {"ignored_resources": ["example.com/foo"]}
    assert hint(pod, None, node, event=NODE_ADD, args=args) is QUEUE
    args = {"ignored_resource_groups": ["example.com"]}
    assert hint(pod, None, node, event=NODE_ADD, args=args) is QUEUE


@pytest.mark.parametrize(
    ("deleted", "expected"),
    [
        (make_pod("gone", node_name="n1"), QUEUE),
        (make_pod("gone"), QUEUE_SKIP),  # never held room on a node
        (with_status(make_pod("gone"), nominatedNodeName="n1"), QUEUE),
    ],
    ids=["bound", "unbound", "nominated"],
)
def test_node_resources_fit_pod_delete_hint(deleted: dict[str, Any], expected: QueueingHint) -> None:
    assert hint(BIG, deleted, None, event=POD_DELETE) is expected


@pytest.mark.parametrize(
    ("old_requests", "new_requests", "node_name", "same_pod", "expected"),
    [
        ({"cpu": "2"}, {"cpu": "1"}, "n1", False, QUEUE),
        ({"memory": "2Gi"}, {"memory": "1Gi"}, "n1", False, QUEUE),
        ({"x.com/gpu": "2"}, {"x.com/gpu": "1"}, "n1", False, QUEUE_SKIP),  # BIG does not request it
        ({"cpu": "2"}, {"cpu": "1"}, "", False, QUEUE_SKIP),  # an unbound pod frees nothing
        ({"cpu": "4"}, {"cpu": "3"}, "", True, QUEUE),  # the rejected pod itself shrank
    ],
    ids=["cpu", "memory", "unrequested", "unbound", "self"],
)
def test_node_resources_fit_scale_down_hint(
    old_requests: dict[str, str], new_requests: dict[str, str], node_name: str, same_pod: bool, expected: QueueingHint
) -> None:
    uid = "big" if same_pod else "other"
    old = make_pod("x", uid=uid, node_name=node_name, requests=old_requests)
    new = make_pod("x", uid=uid, node_name=node_name, requests=new_requests)
    assert hint(BIG, old, new, event=POD_SCALE_DOWN) is expected


def test_node_resources_fit_device_class_hint() -> None:
    pod = pod_info(make_pod("d", requests={"example.com/gpu": "1", "deviceclass.resource.kubernetes.io/gpus": "1"}))
    event = ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD)
    named = {"metadata": {"name": "gpus"}, "spec": {}}
    other = {"metadata": {"name": "other"}, "spec": {}}
    mapped = {"metadata": {"name": "other"}, "spec": {"extendedResourceName": "example.com/gpu"}}
    assert hint(pod, None, named, event=event) is QUEUE
    assert hint(pod, None, other, event=event) is QUEUE_SKIP
    assert hint(pod, None, mapped, event=event) is QUEUE
    assert hint(pod, mapped, mapped, event=ClusterEvent(EventResource.DEVICE_CLASS, ActionType.UPDATE)) is QUEUE_SKIP
    assert hint(pod, other, mapped, event=ClusterEvent(EventResource.DEVICE_CLASS, ActionType.UPDATE)) is QUEUE


# -- DRA-backed extended resources (DRAExtendedResource: upstream shouldDelegateResourceToDRA) --------------
IMPLICIT = "deviceclass.resource.kubernetes.io/gpus"


def _device_class(name: str, extended: str = "", created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    spec = {"extendedResourceName": extended} if extended else {}
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def run_filter_with_classes(
    nodes: list[dict[str, Any]], pod: dict[str, Any], classes: list[dict[str, Any]], pods: list[dict[str, Any]] = ()
) -> dict[str, tuple[Code, tuple[str, ...]] | None]:
    cache = make_cache(nodes, list(pods))
    for device_class in classes:
        cache.objects.apply("DeviceClass", "ADDED", device_class)
    plugin = plugin_for(cache)
    snapshot = cache.snapshot()
    state = new_state()
    info = pod_info(pod)
    plugin.pre_filter(state, info, snapshot)
    names = [node["metadata"]["name"] for node in nodes]
    result = plugin.filter(state, info, slots(snapshot, names), snapshot)
    if result is None:
        return dict.fromkeys(names)
    return {name: verdict(result.status_at(i)) if result.rejected[i] else None for i, name in enumerate(names)}


DRA_FILTER_CASES = [
    pytest.param(
        [make_node("n1"), make_node("n2")],
        {GPU: "1"},
        [],
        {"n1": (UUR, ("Insufficient example.com/gpu",)), "n2": (UUR, ("Insufficient example.com/gpu",))},
        id="no-class-no-node-advertises",
    ),
    pytest.param(
        [make_node("n1"), make_node("n2")],
        {GPU: "1"},
        [_device_class("gpus", GPU)],
        {"n1": None, "n2": None},
        id="explicit-name-left-to-dra-everywhere",
    ),
    pytest.param(
        [make_node("n1"), make_node("n2")],
        {IMPLICIT: "2"},
        [_device_class("gpus")],
        {"n1": None, "n2": None},
        id="implicit-name",
    ),
    pytest.param(
        [make_node("n1"), make_node("n2")],
        {IMPLICIT: "2"},
        [_device_class("other")],
        {"n1": (UUR, (f"Insufficient {IMPLICIT}",)), "n2": (UUR, (f"Insufficient {IMPLICIT}",))},
        id="implicit-name-of-another-class",
    ),
    pytest.param(
        [make_node("n1", extra={GPU: 1}), make_node("n2")],
        {GPU: "2"},
        [_device_class("gpus", GPU)],
        {"n1": (UUR, ("Insufficient example.com/gpu",)), "n2": None},
        id="a-device-plugin-node-is-checked-as-usual",
    ),
    pytest.param(
        [make_node("n1", extra={GPU: 0}), make_node("n2", extra={GPU: 4})],
        {GPU: "2", "cpu": "8"},
        [_device_class("gpus", GPU)],
        {"n1": (UUR, (REASON_INSUFFICIENT_CPU,)), "n2": (UUR, (REASON_INSUFFICIENT_CPU,))},
        id="zero-allocatable-is-delegated-cpu-still-checked",
    ),
]


@pytest.mark.parametrize(("nodes", "requests", "classes", "expected"), DRA_FILTER_CASES)
def test_filter_leaves_dra_backed_extended_resources_to_dynamic_resources(
    nodes: list[dict[str, Any]],
    requests: dict[str, str],
    classes: list[dict[str, Any]],
    expected: dict[str, Any],
) -> None:
    assert run_filter_with_classes(nodes, make_pod("p", requests=requests), classes) == expected


def test_a_delegated_resource_is_checked_against_what_device_plugin_nodes_have_left() -> None:
    nodes = [make_node("n1", extra={GPU: 2}), make_node("n2")]
    taken = make_pod("taken", node_name="n1", requests={GPU: "2"})
    result = run_filter_with_classes(nodes, make_pod("p", requests={GPU: "1"}), [_device_class("gpus", GPU)], [taken])
    assert result == {"n1": (U, ("Insufficient example.com/gpu",)), "n2": None}


def test_the_older_class_backs_an_explicit_name() -> None:
    from kopf_scheduler.plugins.helper.device_class_mapping import device_class_for

    cache = ClusterCache()
    for device_class in (
        _device_class("b-new", GPU, "2026-02-01T00:00:00Z"),
        _device_class("z-old", GPU, "2026-01-01T00:00:00Z"),
        _device_class("a-old", GPU, "2026-01-01T00:00:00Z"),
    ):
        cache.objects.apply("DeviceClass", "ADDED", device_class)
    assert device_class_for(cache.objects, GPU)["metadata"]["name"] == "a-old"
    assert device_class_for(cache.objects, "deviceclass.resource.kubernetes.io/b-new")["metadata"]["name"] == "b-new"
    assert device_class_for(cache.objects, "example.com/other") is None


def _hint_with_classes(pod: PodInfo, old: Any, new: Any, event: ClusterEvent, *classes: dict[str, Any]) -> Any:
    cache = ClusterCache()
    for device_class in classes:
        cache.objects.apply("DeviceClass", "ADDED", device_class)
    return hint_for(plugin_for(cache), event)(pod, old, new)


@pytest.mark.parametrize(
    ("old", "new", "classes", "expected"),
    [
        (None, make_node("n"), [], QUEUE_SKIP),  # nothing provides the GPU
        (None, make_node("n"), [_device_class("gpus", GPU)], QUEUE),  # DRA may
        (make_node("n", cpu="4"), make_node("n", cpu="4", labels={"a": "b"}), [_device_class("gpus", GPU)], QUEUE),
        (make_node("n", cpu="4"), make_node("n", cpu="4", labels={"a": "b"}), [], QUEUE_SKIP),
        (None, make_node("n", extra={GPU: 0}), [_device_class("gpus", GPU)], QUEUE),
    ],
    ids=["add-no-class", "add-backed", "update-backed", "update-no-class", "add-zero-allocatable"],
)
def test_node_hint_delegates_dra_backed_resources(old: Any, new: Any, classes: list[Any], expected: Any) -> None:
    pod = pod_info(make_pod("g", requests={"cpu": "1", GPU: "1"}))
    event = NODE_ADD if old is None else NODE_ALLOC
    assert _hint_with_classes(pod, old, new, event, *classes) is expected


# -- scoring DRA-backed extended resources (upstream calculateDRAResourceTotals) -----------------------------
DRA_DRIVER = "gpu.example.com"


def _gpu_slice(node: str, count: int, **spec: Any) -> dict[str, Any]:
    body = {
        "driver": DRA_DRIVER,
        "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": f"gpu-{i}"} for i in range(count)],
    }
    body.update(spec)
    return {"metadata": {"name": f"{node}-{DRA_DRIVER}"}, "spec": body}


def _allocated_claim(node: str, *devices: str) -> dict[str, Any]:
    results = [{"request": "r", "driver": DRA_DRIVER, "pool": node, "device": d} for d in devices]
    return {
        "metadata": {"name": f"taken-{node}", "namespace": "default", "uid": f"taken-{node}"},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def run_dra_score(nodes: list[dict[str, Any]], objects: list[tuple[str, dict[str, Any]]], args: Any) -> list[int]:
    cache = make_cache(nodes)
    for kind, obj in objects:
        cache.objects.apply(kind, "ADDED", obj)
    plugin = plugin_for(cache, args)
    snapshot = cache.snapshot()
    state = new_state()
    info = pod_info(make_pod("p", requests={GPU: "1"}))
    plugin.pre_score(state, info, slots(snapshot), snapshot)
    return plugin.score(state, info, slots(snapshot), snapshot).tolist()


def test_a_dra_backed_scoring_resource_counts_the_nodes_devices() -> None:
    backing = {**_device_class("gpus", GPU), "spec": {"extendedResourceName": GPU}}
    objects = [
        ("DeviceClass", backing),
        ("ResourceSlice", _gpu_slice("n1", 4)),
        ("ResourceSlice", _gpu_slice("n2", 3)),
        ("ResourceClaim", _allocated_claim("n1", "gpu-0")),
    ]
    nodes = [make_node("n1"), make_node("n2"), make_node("n3", extra={GPU: 8}), make_node("n4")]
    # LeastAllocated over the GPU alone: n1 4 devices, 1 taken + 1 → 50; n2 3, 0 + 1 → 66; n3's device plugin
    # (8, none requested) → 87; n4 has no devices: the resource is left out → 0.
    assert run_dra_score(nodes, objects, strategy("LeastAllocated", (GPU, 1))) == [50, 66, 87, 0]
    # Without the DeviceClass the devices do not count (as upstream without a mapping).
    assert run_dra_score(nodes, objects[1:], strategy("LeastAllocated", (GPU, 1))) == [0, 0, 87, 0]


@pytest.mark.parametrize(
    ("slice_spec", "selectors", "expected"),
    [
        pytest.param({}, [], (2, 1), id="node-name"),
        pytest.param({"nodeName": None, "allNodes": True}, [], (2, 1), id="all-nodes"),
        pytest.param(
            {
                "nodeName": None,
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                    ]
                },
            },
            [],
            (2, 1),
            id="node-selector",
        ),
        pytest.param({"nodeName": "n2"}, [], (0, 0), id="another-node"),
        pytest.param({}, ['device.driver == "other.example.com"'], (0, 0), id="class-selector-mismatch"),
        pytest.param({}, [f'device.driver == "{DRA_DRIVER}"'], (2, 1), id="class-selector-match"),
        pytest.param(
            {
                "nodeName": None,
                "perDeviceNodeSelection": True,
                "devices": [
                    {"name": "gpu-0", "nodeName": "n1"},
                    {"name": "gpu-1", "nodeName": "n2"},
                    {"name": "gpu-2", "allNodes": True},
                ],
            },
            [],
            (2, 1),
            id="per-device",
        ),
    ],
)
def test_device_totals(slice_spec: dict[str, Any], selectors: list[str], expected: tuple[int, int]) -> None:
    from kopf_scheduler.plugins.dynamic_resources.allocator import allocated_state
    from kopf_scheduler.plugins.dynamic_resources.capacity import device_totals

    resource_slice = _gpu_slice("n1", 2)
    resource_slice["spec"].update(slice_spec)
    resource_slice["spec"] = {k: v for k, v in resource_slice["spec"].items() if v is not None}
    device_class = {
        "metadata": {"name": "gpus"},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in selectors]},
    }
    state = allocated_state([_allocated_claim("n1", "gpu-0")])
    assert device_totals(make_node("n1"), device_class, [resource_slice], state) == expected


def test_balanced_allocation_counts_dra_backed_devices_too() -> None:
    from kopf_scheduler.api.args import NodeResourcesBalancedAllocationArgs
    from kopf_scheduler.plugins.node_resources_balanced_allocation import NodeResourcesBalancedAllocation

    def scores(with_class: bool) -> list[int]:
        cache = make_cache([make_node("n1"), make_node("n4")])
        if with_class:
            cache.objects.apply(
                "DeviceClass", "ADDED", {**_device_class("gpus"), "spec": {"extendedResourceName": GPU}}
            )
        cache.objects.apply("ResourceSlice", "ADDED", _gpu_slice("n1", 4))
        cache.objects.apply("ResourceClaim", "ADDED", _allocated_claim("n1", "gpu-0"))
        args = NodeResourcesBalancedAllocationArgs(
            resources=[ResourceSpec(name="cpu", weight=1), ResourceSpec(name=GPU, weight=1)]
        )
        plugin = NodeResourcesBalancedAllocation(handle=FakeHandle(cache), args=args)
        snapshot, state = cache.snapshot(), new_state()
        info = pod_info(make_pod("p", requests={GPU: "1"}))
        plugin.pre_score(state, info, slots(snapshot), snapshot)
        return plugin.score(state, info, slots(snapshot), snapshot).tolist()

    # n1: cpu 0 of 4 cores, GPU 1 taken of 4 devices, 2 with the pod: balance 87 without the pod, 75 with it →
    # 50 + (50 − 12) / 2 = 69; n4 has no devices (GPU left out) and the pod changes nothing there → 75.
    assert scores(with_class=True) == [69, 75]
    assert scores(with_class=False) == [75, 75]  # without the mapping the devices do not count
