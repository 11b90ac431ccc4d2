"""The algorithm of one cycle (``algorithm.py``): sampling, round-robin start, scoring shortcuts, host selection,
the nominated node, FitError and SchedulingError."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.algorithm import (
    NoNodesAvailableError,
    ScheduleResult,
    SchedulingError,
    num_feasible_nodes_to_find,
    schedule_pod,
    select_host,
)
from kopf_scheduler.framework import COSTLY_FILTER, Code, CycleState, ExtensionPoint, Status
from kopf_scheduler.framework.runtime import Framework, SearchStart
from kopf_scheduler.state.cache import ClusterCache
from tests.unit.factories import make_cache, make_node, make_pod, pod_info
from tests.unit.test_runtime import (  # shared fakes
    CALLS,
    _reset_calls,  # noqa: F401  (autouse fixture clearing the call log)
    build,
    calls,
    node_filter,
    prefilter,
    scorer,
)

E = ExtensionPoint
U = Status.unschedulable


# -- numFeasibleNodesToFind ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("percentage", "nodes", "expected"),
    [
        # The reference's examples (§4.6, §2.22), adaptive percentage.
        (None, 150, 100),
        (None, 250, 120),
        (None, 500, 230),
        (None, 1000, 420),
        (None, 2000, 680),
        (None, 3000, 780),
        (None, 5000, 500),
        (None, 6000, 300),
        # ≥ 5625 nodes the adaptive percentage bottoms out at 5 %.
        (None, 5625, 281),
        (None, 10000, 500),
        # Below 100 nodes every node is a candidate, whatever the percentage.
        (None, 0, 0),
        (None, 1, 1),
        (None, 99, 99),
        (10, 99, 99),
        (None, 100, 100),
        # 0 means adaptive, like unset.
        (0, 1000, 420),
        # An explicit percentage, still floored at 100 nodes.
        (30, 1000, 300),
        (1, 1000, 100),
        (100, 5000, 5000),
        (50, 333, 166),
    ],
)
def test_num_feasible_nodes_to_find(percentage: int | None, nodes: int, expected: int) -> None:
    assert num_feasible_nodes_to_find(percentage, nodes) == expected


# -- helpers -------------------------------------------------------------------------------------------
def cluster(count: int, **node_kwargs: Any) -> ClusterCache:
    return make_cache([make_node(f"n{i:04d}", **node_kwargs) for i in range(count)])


def index_of(name: str) -> int:
    return int(name[1:])


def every_kth_fails(k: int) -> Any:
    return node_filter("EveryKth", lambda n: U("rejected") if index_of(n) % k == 0 else None)


def flat_scores(count: int) -> Any:
    return scorer("Flat", {f"n{i:04d}": 50 for i in range(count)})


def schedule(framework: Framework, pod: Any = None, **kwargs: Any) -> ScheduleResult:
    return schedule_pod(framework, CycleState(), pod or pod_info(make_pod()), framework.handle.snapshot(), **kwargs)


def filter_calls_nodes() -> list[list[str]]:
    return [detail for _, detail in calls("filter")]


# -- sampling and the round-robin start ----------------------------------------------------------------
def test_first_k_feasible_nodes_from_the_start_index_and_rotation() -> None:
    count = 200  # → 100 feasible nodes wanted per cycle
    cache = cluster(count)
    framework = build(
        [every_kth_fails(4), flat_scores(count)], {E.FILTER: ("EveryKth",), E.SCORE: ("Flat",)}, cache=cache
    )
    result = schedule(framework, rng=random.Random(1))
    # Every 4th node fails, so the 100th feasible node is n0133: 134 nodes judged, 34 of them rejected.
    assert result.feasible_nodes == 100
    assert result.evaluated_nodes == 134
    assert len(result.diagnosis.statuses) == 34
    assert framework.next_start_node_index == 134
    assert result.scores is not None
    scored = sorted(index_of(str(cache.table.names[int(s)])) for s in result.scores.nodes)
    assert scored == [i for i in range(134) if i % 4]

    # The second cycle starts at n0134 and wraps around the end of the node list.
    result = schedule(framework, rng=random.Random(1))
    assert result.scores is not None
    scored = [index_of(str(cache.table.names[int(s)])) for s in result.scores.nodes]
    expected = [i % count for i in range(134, 134 + count) if (i % count) % 4][:100]
    assert scored == expected
    assert expected[:3] == [134, 135, 137]
    assert expected[-1] == 66
    processed = (expected[-1] - 134) % count + 1
    assert result.evaluated_nodes == processed == 133
    assert framework.next_start_node_index == (134 + processed) % count == 67


def test_rejections_before_the_next_feasible_node_count() -> None:
    """Upstream's one-worker search goes on after the K-th feasible node until a (K+1)-th (dropped): the
    rejections met on the way are kept and move the start index; those after the (K+1)-th are not."""
    count = 400  # 400·(50−3)% = 188 feasible nodes wanted; the first window covers 189 + 94 nodes
    cache = cluster(count)
    framework = build(
        [every_kth_fails(2), flat_scores(count)], {E.FILTER: ("EveryKth",), E.SCORE: ("Flat",)}, cache=cache
    )
    result = schedule(framework, rng=random.Random(0))
    assert num_feasible_nodes_to_find(None, count) == 188
    # The 188th feasible node is n0375 (odd indices); 188 rejected even nodes precede it, and n0376 is rejected
    # before n0377, the 189th feasible node, ends the search.
    assert result.feasible_nodes == 188
    assert len(result.diagnosis.statuses) == 189
    assert "n0376" in result.diagnosis.node_to_status
    assert "n0378" not in result.diagnosis.node_to_status
    assert result.evaluated_nodes == 377
    assert framework.next_start_node_index == 377
    assert result.scores is not None
    assert max(index_of(str(cache.table.names[int(s)])) for s in result.scores.nodes) == 375
    # Two windows were needed (the first one held only ~141 feasible nodes).
    assert [len(nodes) for nodes in filter_calls_nodes()] == [283, 117]


def test_a_run_of_rejections_after_the_kth_feasible_node_moves_the_start() -> None:
    count = 300  # → 144 feasible nodes wanted: n0000..n0143 pass, n0144..n0249 fail, n0250 ends the search
    cache = cluster(count)
    framework = build(
        [node_filter("Band", lambda n: U("band") if 144 <= index_of(n) < 250 else None), flat_scores(count)],
        {E.FILTER: ("Band",), E.SCORE: ("Flat",)},
        cache=cache,
    )
    result = schedule(framework, rng=random.Random(0))
    assert (result.feasible_nodes, len(result.diagnosis.statuses)) == (144, 106)
    assert result.evaluated_nodes == 250
    assert framework.next_start_node_index == 250
    # From n0250 there are 50 feasible nodes to the end and 94 from n0000: the 144th is n0093, n0094 ends it.
    result = schedule(framework, rng=random.Random(0))
    assert (result.feasible_nodes, len(result.diagnosis.statuses)) == (144, 0)
    assert framework.next_start_node_index == (250 + 144) % count == 94


def test_without_a_next_feasible_node_every_node_is_judged() -> None:
    count = 200  # → 100 wanted; exactly 100 feasible (odd nodes): every rejection counts, the start goes round
    cache = cluster(count)
    framework = build(
        [every_kth_fails(2), flat_scores(count)], {E.FILTER: ("EveryKth",), E.SCORE: ("Flat",)}, cache=cache
    )
    framework.next_start_node_index = 7
    result = schedule(framework, rng=random.Random(0))
    assert (result.feasible_nodes, len(result.diagnosis.statuses), result.evaluated_nodes) == (100, 100, 200)
    assert framework.next_start_node_index == 7


@pytest.mark.parametrize(
    ("fails_every", "windows"),
    [
        (2, [189, 192]),  # half feasible: the second window is sized by the rate seen in the first
        (3, [189, 95]),
        (400, [189, 2]),  # only n0000 fails: 188 feasible in the first window, one more wanted at 188/189
    ],
)
def test_a_costly_filter_judges_no_node_past_need_with_the_same_verdicts(fails_every: int, windows: list[int]) -> None:
    """A PreFilter that marks its Filter costly (DynamicResources' allocator) gets windows without slack; which
    nodes are feasible, the rejections kept and the next start index are those of the ordinary search."""
    count = 400

    def run(state: CycleState) -> tuple[Any, ...]:
        framework = build(
            [every_kth_fails(fails_every), flat_scores(count)],
            {E.FILTER: ("EveryKth",), E.SCORE: ("Flat",)},
            cache=cluster(count),
        )
        result = schedule_pod(framework, state, pod_info(make_pod()), framework.handle.snapshot())
        assert result.scores is not None
        rejected = sorted(int(slot) for slot in result.diagnosis.statuses.slots())
        return (
            result.feasible_nodes,
            result.evaluated_nodes,
            framework.next_start_node_index,
            sorted(int(s) for s in result.scores.nodes),
            rejected,
        )

    ordinary = run(CycleState())
    CALLS.clear()
    costly = CycleState()
    costly.write(COSTLY_FILTER, True)
    assert run(costly) == ordinary
    assert [len(nodes) for nodes in filter_calls_nodes()] == windows


def test_without_score_plugins_one_feasible_node_is_enough() -> None:
    cache = cluster(10)
    framework = build([every_kth_fails(3)], {E.FILTER: ("EveryKth",)}, cache=cache)
    names, starts = [], []
    for _ in range(5):
        names.append(schedule(framework).suggested_host)
        starts.append(framework.next_start_node_index)
    # The search ends at the second feasible node; rejections before it count. n0000 fails → n0001 (n0002 ends
    # it); start 2 → n0002 (n0003 fails, n0004 ends it); start 4 → n0004; start 5 → n0005 (n0006 fails); 7 → n0007.
    assert names == ["n0001", "n0002", "n0004", "n0005", "n0007"]
    assert starts == [2, 4, 5, 7, 8]


def test_without_filter_plugins_nodes_are_taken_in_rotation() -> None:
    count = 150
    cache = cluster(count)
    framework = build([flat_scores(count)], {E.SCORE: ("Flat",)}, cache=cache)
    framework.next_start_node_index = 120
    result = schedule(framework, rng=random.Random(3))
    assert result.feasible_nodes == 100
    assert result.scores is not None
    assert [index_of(str(cache.table.names[int(s)])) for s in result.scores.nodes] == [
        i % count for i in range(120, 220)
    ]
    assert framework.next_start_node_index == (120 + 100) % count


def test_profiles_share_one_start_index() -> None:
    """Upstream's ``nextStartNodeIndex`` belongs to the scheduler, not a profile: one profile's search moves
    where the next cycle of another profile begins."""
    count = 150  # → 100 wanted, every node feasible: each cycle moves the start by 100
    cache = cluster(count)
    shared = SearchStart()
    first, second = (
        build([flat_scores(count)], {E.SCORE: ("Flat",)}, cache=cache, search_start=shared) for _ in range(2)
    )
    schedule(first, rng=random.Random(0))
    assert (first.next_start_node_index, second.next_start_node_index) == (100, 100)
    result = schedule(second, rng=random.Random(0))
    assert result.scores is not None
    assert index_of(str(cache.table.names[int(result.scores.nodes[0])])) == 100
    assert shared.index == (100 + 100) % count
    alone = build([flat_scores(count)], {E.SCORE: ("Flat",)}, cache=cache)
    assert alone.next_start_node_index == 0


def test_pre_filter_result_restricts_the_search() -> None:
    cache = cluster(6)
    framework = build(
        [prefilter("Pin", nodes=["n0001", "n0004", "ghost"]), flat_scores(6)],
        {E.PRE_FILTER: ("Pin",), E.SCORE: ("Flat",)},
        cache=cache,
    )
    framework.next_start_node_index = 5  # 5 mod 2 restricted nodes → starts at the second one
    result = schedule(framework, rng=random.Random(0))
    assert result.feasible_nodes == 2
    assert result.scores is not None
    assert [cache.table.names[int(s)] for s in result.scores.nodes] == ["n0004", "n0001"]
    # Upstream advances modulo the number of *all* nodes.
    assert framework.next_start_node_index == (5 + 2) % 6


# -- scoring shortcuts ---------------------------------------------------------------------------------
def test_exactly_one_feasible_node_skips_scoring() -> None:
    cache = cluster(4)
    framework = build(
        [node_filter("OnlyTwo", lambda n: None if n == "n0002" else U("no")), flat_scores(4)],
        {E.FILTER: ("OnlyTwo",), E.SCORE: ("Flat",)},
        cache=cache,
    )
    result = schedule(framework)
    assert (result.suggested_host, result.feasible_nodes, result.evaluated_nodes) == ("n0002", 1, 4)
    assert result.scores is None
    assert calls("score") == []
    assert result.plugin_scores() == {}


def test_highest_total_wins_and_explanations_are_kept() -> None:
    cache = cluster(4)
    framework = build(
        [
            scorer("A", {"n0000": 10, "n0001": 90, "n0002": 50, "n0003": 0}),
            scorer("B", {"n0000": 100, "n0001": 0, "n0002": 40, "n0003": 0}, pre_score=Status()),
        ],
        {E.PRE_SCORE: ("B",), E.SCORE: (("A", 1), ("B", 2))},
        cache=cache,
    )
    result = schedule(framework)
    assert result.suggested_host == "n0000"  # 10 + 200 beats 90 and 50 + 80
    assert result.plugin_scores() == {"A": 10, "B": 200}
    assert result.top_nodes(cache.table.names) == [("n0000", 210), ("n0002", 130), ("n0001", 90)]


def test_ties_are_broken_uniformly_and_reproducibly() -> None:
    totals = np.asarray([5, 9, 9, 1, 9], dtype=np.int64)
    rng = random.Random(42)
    picks = Counter(select_host(totals, rng) for _ in range(3000))
    assert set(picks) == {1, 2, 4}
    for count in picks.values():
        assert 850 < count < 1150
    first = [select_host(totals, random.Random(7)) for _ in range(5)]
    again = [select_host(totals, random.Random(7)) for _ in range(5)]
    assert first == again
    assert select_host(np.asarray([1, 3, 2]), random.Random(0)) == 1


def test_schedule_pod_tie_break_is_seedable() -> None:
    cache = cluster(20)
    framework = build([flat_scores(20)], {E.SCORE: ("Flat",)}, cache=cache)
    hosts = [schedule(framework, rng=random.Random(s)).suggested_host for s in range(40)]
    again = [schedule(framework, rng=random.Random(s)).suggested_host for s in range(40)]
    assert hosts == again
    assert len(set(hosts)) > 10


# -- nominated node ------------------------------------------------------------------------------------
def nominated_pod(node: str) -> Any:
    obj = make_pod("preemptor")
    obj["status"]["nominatedNodeName"] = node
    return pod_info(obj)


def test_nominated_node_is_tried_first_and_taken_without_scoring() -> None:
    cache = cluster(5)
    framework = build([node_filter("Any", {}), flat_scores(5)], {E.FILTER: ("Any",), E.SCORE: ("Flat",)}, cache=cache)
    result = schedule(framework, nominated_pod("n0003"))
    assert (result.suggested_host, result.evaluated_nodes, result.feasible_nodes) == ("n0003", 1, 1)
    assert filter_calls_nodes() == [["n0003"]]
    assert calls("score") == []
    assert framework.next_start_node_index == 0


def test_failing_nominated_node_falls_back_to_the_full_search() -> None:
    cache = cluster(5)
    framework = build(
        [node_filter("NotThree", {"n0003": U("taken")}), flat_scores(5)],
        {E.FILTER: ("NotThree",), E.SCORE: ("Flat",)},
        cache=cache,
    )
    result = schedule(framework, nominated_pod("n0003"), rng=random.Random(0))
    assert result.suggested_host != "n0003"
    assert filter_calls_nodes() == [["n0003"], ["n0000", "n0001", "n0002", "n0003", "n0004"]]
    # n0003 was judged twice but counts once, as in upstream's map.
    assert len(result.diagnosis.statuses) == 1
    assert result.evaluated_nodes == 5
    assert framework.next_start_node_index == 0


def test_unknown_nominated_node_is_ignored() -> None:
    cache = cluster(3)
    framework = build([node_filter("Any", {})], {E.FILTER: ("Any",)}, cache=cache)
    assert schedule(framework, nominated_pod("gone")).suggested_host == "n0000"


# -- errors --------------------------------------------------------------------------------------------
def test_no_nodes() -> None:
    framework = build([], {}, cache=ClusterCache())
    with pytest.raises(NoNodesAvailableError) as info:
        schedule(framework)
    assert info.value.message == "no nodes available to schedule pods"
    assert info.value.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_filter_error_is_a_scheduling_error() -> None:
    cache = cluster(5)
    framework = build(
        [node_filter("Bad", lambda n: Status.as_error(RuntimeError("io")) if n == "n0002" else None)],
        {E.FILTER: ("Bad",)},
        cache=cache,
    )
    framework.next_start_node_index = 2
    with pytest.raises(SchedulingError) as info:
        schedule(framework)
    assert info.value.status.message == 'running "Bad" filter plugin: io'


def test_score_error_is_a_scheduling_error() -> None:
    cache = cluster(3)
    framework = build([scorer("Wild", {"n0000": 1, "n0001": 500, "n0002": 3})], {E.SCORE: ("Wild",)}, cache=cache)
    with pytest.raises(SchedulingError, match='plugin "Wild" returns an invalid score 500'):
        schedule(framework)


def test_pre_filter_error_is_a_scheduling_error() -> None:
    framework = build([prefilter("Crash", raises=True)], {E.PRE_FILTER: ("Crash",)}, cache=cluster(2))
    with pytest.raises(SchedulingError, match='running PreFilter plugin "Crash": kaboom'):
        schedule(framework)


def test_the_result_accounts_for_the_decision() -> None:
    cache = cluster(6)
    framework = build(
        [
            node_filter("Cordon", {"n0000": U("cordoned")}),
            node_filter("Fit", {"n0001": U("Insufficient cpu"), "n0002": U("Insufficient cpu")}),
            scorer("A", {"n0003": 10, "n0004": 90, "n0005": 50}),
        ],
        {E.FILTER: ("Cordon", "Fit"), E.SCORE: (("A", 2),)},
        cache=cache,
    )
    result = schedule(framework)
    assert (result.suggested_host, result.evaluated_nodes, result.feasible_nodes) == ("n0004", 6, 3)
    assert result.diagnosis.statuses.counts_by_plugin() == {"Cordon": 1, "Fit": 2}
    assert result.plugin_scores() == {"A": 180}
    assert result.top_nodes(cache.table.names, k=2) == [("n0004", 180), ("n0005", 100)]
    assert result.diagnosis.node_to_status["n0001"].plugin == "Fit"
