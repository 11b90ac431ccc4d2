"""TaintToleration: Filter verdicts and reason, PreferNoSchedule counting, reversed normalisation (§2.5, §2.22)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
    QueueingHint,
)
from kopf_scheduler.plugins.taint_toleration import (
    ERR_REASON_UNTOLERATED,
    PRE_SCORE_STATE_KEY,
    TaintToleration,
)
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.taints import count_untolerated_taints, untolerated_taint_set_mask
from kopf_scheduler.state.tolerations import parse_tolerations
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, new_state, pod_info, slots


def taint(key: str, effect: str, value: str = "") -> dict[str, Any]:
    return {"key": key, "value": value, "effect": effect}


def tol(key: str = "", operator: str = "", value: str = "", effect: str = "") -> dict[str, Any]:
    return {"key": key, "operator": operator, "value": value, "effect": effect}


def run_filter(node_taints: list[list[dict[str, Any]]], tolerations: list[dict[str, Any]]) -> list[bool]:
    """Which nodes (one per taint list, in order) the Filter rejects."""
    cache = make_cache([make_node(f"n{i}", taints=t) for i, t in enumerate(node_taints)])
    snapshot = cache.snapshot()
    nodes = slots(snapshot, [f"n{i}" for i in range(len(node_taints))])
    plugin = TaintToleration(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"tolerations": tolerations}))
    result = plugin.filter(new_state(), pod, nodes, snapshot)
    if result is None:
        return [False] * len(node_taints)
    for position in np.flatnonzero(result.rejected):
        status = result.status_at(int(position))
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == (ERR_REASON_UNTOLERATED,)
    return result.rejected.tolist()


@pytest.mark.parametrize(
    ("node_taints", "tolerations", "rejected"),
    [
        pytest.param([[]], [], [False], id="no-taints"),
        pytest.param([[taint("k", "NoSchedule", "v")]], [], [True], id="noschedule-untolerated"),
        pytest.param([[taint("k", "NoExecute", "v")]], [], [True], id="noexecute-untolerated"),
        pytest.param([[taint("k", "PreferNoSchedule", "v")]], [], [False], id="prefernoschedule-never-filters"),
        pytest.param(
            [[taint("k", "NoSchedule", "v")]], [tol("k", "Equal", "v", "NoSchedule")], [False], id="equal-match"
        ),
        pytest.param([[taint("k", "NoSchedule", "v")]], [tol("k", "", "v")], [False], id="empty-operator-is-equal"),
        pytest.param([[taint("k", "NoSchedule", "v")]], [tol("k", "Equal", "w")], [True], id="equal-value-differs"),
        pytest.param([[taint("k", "NoSchedule", "v")]], [tol("k", "Exists")], [False], id="exists-ignores-value"),
        pytest.param([[taint("k", "NoSchedule", "v")]], [tol("", "Exists")], [False], id="empty-key-exists-all"),
        pytest.param([[taint("k", "NoSchedule")]], [tol("k", "Equal", "")], [False], id="empty-value-equal"),
        pytest.param(
            [[taint("k", "NoSchedule", "v")]], [tol("k", "Exists", effect="NoExecute")], [True], id="effect-differs"
        ),
        pytest.param(
            [[taint("k", "NoExecute", "v")]], [tol("k", "Exists", effect="NoExecute")], [False], id="effect-equal"
        ),
        pytest.param([[taint("k", "NoSchedule", "v")]], [tol("other", "Exists")], [True], id="key-differs"),
        pytest.param(
            [[taint("a", "NoSchedule"), taint("b", "NoSchedule")]], [tol("a", "Exists")], [True], id="one-of-two-left"
        ),
        pytest.param(
            [[taint("a", "NoSchedule"), taint("b", "PreferNoSchedule")]],
            [tol("a", "Exists")],
            [False],
            id="only-soft-left",
        ),
        pytest.param(
            [[], [taint("a", "NoSchedule")], [taint("a", "NoSchedule")], [taint("b", "NoExecute")]],
            [tol("a", "Exists")],
            [False, False, False, True],
            id="shared-taint-sets",
        ),
        pytest.param(
            [[taint("k", "NoSchedule", "1")]], [tol("k", "Gt", "0")], [True], id="alpha-gt-operator-is-off-in-1-36"
        ),
    ],
)
def test_filter(
    node_taints: list[list[dict[str, Any]]], tolerations: list[dict[str, Any]], rejected: list[bool]
) -> None:
    assert run_filter(node_taints, tolerations) == rejected


def test_filter_without_any_taints_in_cluster_passes_everything() -> None:
    cache = make_cache([make_node("a"), make_node("b")])
    snapshot = cache.snapshot()
    plugin = TaintToleration(handle=FakeHandle(cache))
    assert plugin.filter(new_state(), pod_info(make_pod()), slots(snapshot), snapshot) is None


def test_reason_is_the_generic_1_36_text() -> None:
    assert ERR_REASON_UNTOLERATED == "node(s) had untolerated taint(s)"


def score(node_taints: list[list[dict[str, Any]]], tolerations: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """(raw, normalised) scores of the nodes, one per taint list, in order."""
    cache = make_cache([make_node(f"n{i}", taints=t) for i, t in enumerate(node_taints)])
    snapshot = cache.snapshot()
    nodes = slots(snapshot, [f"n{i}" for i in range(len(node_taints))])
    plugin = TaintToleration(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"tolerations": tolerations}))
    state = CycleState()
    assert plugin.pre_score(state, pod, nodes, snapshot).is_success
    raw = plugin.score(state, pod, nodes, snapshot)
    assert raw.dtype == np.int64
    return raw.tolist(), plugin.normalize_score(state, pod, nodes, raw).tolist()


@pytest.mark.parametrize(
    ("node_taints", "tolerations", "raw", "normalized"),
    [
        pytest.param(
            [
                [taint("a", "PreferNoSchedule"), taint("b", "PreferNoSchedule")],
                [taint("a", "PreferNoSchedule")],
                [],
            ],
            [],
            [2, 1, 0],
            [0, 50, 100],
            id="worked-example-2.22",
        ),
        pytest.param([[], []], [], [0, 0], [100, 100], id="all-zero-reverse-is-100"),
        pytest.param(
            [[taint("a", "PreferNoSchedule")], [taint("b", "PreferNoSchedule")]],
            [tol("a", "Exists", effect="PreferNoSchedule")],
            [0, 1],
            [100, 0],
            id="prefer-effect-toleration-counts",
        ),
        pytest.param(
            [[taint("a", "PreferNoSchedule")], [taint("b", "PreferNoSchedule")]],
            [tol("a", "Exists")],
            [0, 1],
            [100, 0],
            id="empty-effect-toleration-counts",
        ),
        pytest.param(
            [[taint("a", "PreferNoSchedule")], []],
            [tol("a", "Exists", effect="NoSchedule")],
            [1, 0],
            [0, 100],
            id="noschedule-toleration-ignored-for-score",
        ),
        pytest.param(
            [[taint("a", "NoSchedule"), taint("b", "NoExecute")], []],
            [],
            [0, 0],
            [100, 100],
            id="hard-taints-not-counted",
        ),
        pytest.param(
            [[taint(k, "PreferNoSchedule") for k in "abc"], [taint("a", "PreferNoSchedule")], []],
            [],
            [3, 1, 0],
            [0, 67, 100],
            id="integer-division-then-reverse",
        ),
    ],
)
def test_score(
    node_taints: list[list[dict[str, Any]]], tolerations: list[dict[str, Any]], raw: list[int], normalized: list[int]
) -> None:
    assert score(node_taints, tolerations) == (raw, normalized)


def test_worked_example_weighted() -> None:
    _, normalized = score(
        [[taint("a", "PreferNoSchedule"), taint("b", "PreferNoSchedule")], [taint("a", "PreferNoSchedule")], []], []
    )
    assert [3 * s for s in normalized] == [0, 150, 300]


def test_pre_score_keeps_only_empty_and_prefer_effects() -> None:
    cache = make_cache([make_node("a")])
    snapshot = cache.snapshot()
    plugin = TaintToleration(handle=FakeHandle(cache))
    tolerations = [
        tol("x", "Exists", effect="NoSchedule"),
        tol("y", "Exists"),
        tol("z", "Exists", effect="PreferNoSchedule"),
    ]
    state = CycleState()
    plugin.pre_score(state, pod_info(make_pod(spec={"tolerations": tolerations})), slots(snapshot), snapshot)
    assert [t.key for t in state.read(PRE_SCORE_STATE_KEY)] == ["y", "z"]


def test_score_without_pre_score_is_an_error() -> None:
    cache = make_cache([make_node("a")])
    snapshot = cache.snapshot()
    with pytest.raises(KeyError):
        TaintToleration(handle=FakeHandle(cache)).score(CycleState(), pod_info(make_pod()), slots(snapshot), snapshot)


def test_helpers_judge_many_taint_sets_by_the_sets_in_use() -> None:
    # More than 32 distinct sets takes the np.unique path; verdicts must not change.
    node_taints = [[taint(f"k{i}", "NoSchedule")] for i in range(40)] + [[taint("soft", "PreferNoSchedule")] * 1]
    cache = make_cache([make_node(f"n{i}", taints=t) for i, t in enumerate(node_taints)])
    table = cache.table
    nodes = slots(cache.snapshot(), [f"n{i}" for i in (0, 7, 39, 40)])
    tolerations = parse_tolerations([tol("k7", "Exists")])
    assert untolerated_taint_set_mask(table, nodes, tolerations).tolist() == [True, False, True, False]
    assert count_untolerated_taints(table, nodes, tolerations).tolist() == [0, 0, 0, 1]


def test_taint_update_moves_node_to_new_set() -> None:
    cache = make_cache([make_node("a", taints=[taint("k", "NoSchedule")])])
    cache.add_or_update_node(make_node("a"))
    snapshot = cache.snapshot()
    plugin = TaintToleration(handle=FakeHandle(cache))
    assert plugin.filter(new_state(), pod_info(make_pod()), slots(snapshot), snapshot) is None


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------
NODE_ADD_TAINT = ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT)
NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)
OWN_TOLERATION = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_TOLERATION)


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent) -> QueueingHint:
    """Run the hint TaintToleration registered for ``event`` (exactly one registration matches)."""
    return hint_for(TaintToleration(handle=FakeHandle()), event)(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in TaintToleration(handle=FakeHandle()).events_to_register()] == [
        NODE_ADD_TAINT,
        ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION),
    ]


TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}
SOFT_TAINT = {"key": "s", "effect": "PreferNoSchedule"}


@pytest.mark.parametrize(
    ("old", "new", "tolerations", "expected"),
    [
        (None, make_node("n"), [], QUEUE),
        (None, make_node("n", taints=[TAINT]), [], QUEUE_SKIP),
        (None, make_node("n", taints=[TAINT]), [{"key": "k", "operator": "Exists"}], QUEUE),
        (make_node("n", taints=[TAINT]), make_node("n"), [], QUEUE),
        (make_node("n", taints=[TAINT]), make_node("n", taints=[SOFT_TAINT]), [], QUEUE),
        (make_node("n"), make_node("n", taints=[TAINT]), [], QUEUE_SKIP),
        (make_node("n"), make_node("n", taints=[SOFT_TAINT]), [], QUEUE_SKIP),  # was already fine: nothing new
    ],
    ids=["add-clean", "add-tainted", "add-tolerated", "taint-removed", "to-soft", "taint-added", "clean-to-soft"],
)
def test_taint_toleration_node_hint(
    old: Any, new: Any, tolerations: list[dict[str, Any]], expected: QueueingHint
) -> None:
    pod = pod_info(make_pod("t", spec={"tolerations": tolerations}))
    event = NODE_ADD if old is None else NODE_TAINT
    assert hint(pod, old, new, event=event) is expected


def test_own_toleration_hints() -> None:
    pod = pod_info(make_pod("t", uid="t"))
    mine_other_toleration = make_pod("t", uid="t", spec={"tolerations": [{"key": "x", "operator": "Exists"}]})
    someone_else = make_pod("o", uid="o", spec={"tolerations": [{"operator": "Exists"}]})
    assert hint(pod, pod, mine_other_toleration, event=OWN_TOLERATION) is QUEUE
    assert hint(pod, someone_else, someone_else, event=OWN_TOLERATION) is QUEUE_SKIP


def test_hint_rejects_objects_of_the_wrong_type() -> None:
    # The queue turns a raising hint into Queue; the hints themselves refuse what they cannot read.
    with pytest.raises(TypeError):
        hint(pod_info(make_pod()), None, 42, event=NODE_ADD)
