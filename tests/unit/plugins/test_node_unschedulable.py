"""NodeUnschedulable (reference §2.3): cordoned nodes are UUR unless the pod tolerates the taint."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, Code, EventResource, QueueingHint
from kopf_scheduler.plugins.node_unschedulable import ERR_REASON_UNSCHEDULABLE, NodeUnschedulable
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, new_state, pod_info, slots

NODES = ["cordoned-1", "open-1", "cordoned-2", "open-2"]


def cache_with_cordons() -> Any:
    return make_cache([make_node(name, unschedulable=name.startswith("cordoned")) for name in NODES])


@pytest.mark.parametrize(
    ("tolerations", "rejected"),
    [
        pytest.param(None, ["cordoned-1", "cordoned-2"], id="no-tolerations"),
        pytest.param(
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
            [],
            id="exists-noschedule",
        ),
        pytest.param([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}], [], id="exists-any-effect"),
        pytest.param([{"operator": "Exists"}], [], id="tolerate-everything"),
        pytest.param([{"key": "node.kubernetes.io/unschedulable", "value": ""}], [], id="equal-empty-value"),
        pytest.param(
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Equal", "value": "true"}],
            ["cordoned-1", "cordoned-2"],
            id="equal-wrong-value",
        ),
        pytest.param(
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}],
            ["cordoned-1", "cordoned-2"],
            id="wrong-effect",
        ),
        pytest.param(
            [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
            ["cordoned-1", "cordoned-2"],
            id="other-key",
        ),
    ],
)
def test_filter(tolerations: list[dict[str, str]] | None, rejected: list[str]) -> None:
    cache = cache_with_cordons()
    snapshot = cache.snapshot()
    nodes = slots(snapshot, NODES)
    pod = pod_info(make_pod(spec={"tolerations": tolerations} if tolerations else {}))
    result = NodeUnschedulable(handle=FakeHandle(cache)).filter(new_state(), pod, nodes, snapshot)
    if not rejected:
        assert result is None
        return
    assert result is not None
    assert [name for name, r in zip(NODES, result.rejected, strict=True) if r] == rejected
    for position in np.flatnonzero(result.rejected):
        status = result.status_at(int(position))
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == (ERR_REASON_UNSCHEDULABLE,)
    assert ERR_REASON_UNSCHEDULABLE == "node(s) were unschedulable"


def test_uncordon_is_seen_without_rebuilding() -> None:
    cache = cache_with_cordons()
    cache.add_or_update_node(make_node("cordoned-1", unschedulable=False))
    snapshot = cache.snapshot()
    result = NodeUnschedulable(handle=FakeHandle(cache)).filter(
        new_state(), pod_info(make_pod()), slots(snapshot, NODES), snapshot
    )
    assert result is not None
    assert result.rejected.tolist() == [False, False, True, False]


def test_judges_only_the_given_nodes() -> None:
    cache = cache_with_cordons()
    snapshot = cache.snapshot()
    result = NodeUnschedulable(handle=FakeHandle(cache)).filter(
        new_state(), pod_info(make_pod()), slots(snapshot, ["open-1", "open-2"]), snapshot
    )
    assert result is None


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------
NODE_ADD_TAINT = ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT)
NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)
OWN_TOLERATION = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_TOLERATION)


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent) -> QueueingHint:
    """Run the hint NodeUnschedulable registered for ``event`` (exactly one registration matches)."""
    return hint_for(NodeUnschedulable(handle=FakeHandle()), event)(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in NodeUnschedulable(handle=FakeHandle()).events_to_register()] == [
        NODE_ADD_TAINT,
        ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION),
    ]


TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


def test_own_toleration_hints() -> None:
    pod = pod_info(make_pod("t", uid="t"))
    mine = make_pod(
        "t", uid="t", spec={"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}
    )
    mine_other_toleration = make_pod("t", uid="t", spec={"tolerations": [{"key": "x", "operator": "Exists"}]})
    someone_else = make_pod("o", uid="o", spec={"tolerations": [{"operator": "Exists"}]})
    assert hint(pod, pod, mine, event=OWN_TOLERATION) is QUEUE
    assert hint(pod, pod, mine_other_toleration, event=OWN_TOLERATION) is QUEUE_SKIP
    assert hint(pod, someone_else, someone_else, event=OWN_TOLERATION) is QUEUE_SKIP


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, make_node("n"), QUEUE),
        (None, make_node("n", unschedulable=True), QUEUE_SKIP),
        (make_node("n", unschedulable=True), make_node("n"), QUEUE),
        (make_node("n"), make_node("n", taints=[TAINT]), QUEUE_SKIP),
    ],
    ids=["add", "add-cordoned", "uncordoned", "taint-only"],
)
def test_node_unschedulable_node_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    event = NODE_ADD if old is None else NODE_TAINT
    assert hint(pod_info(make_pod()), old, new, event=event) is expected
