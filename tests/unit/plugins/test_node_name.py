"""NodeName (reference §2.4): a pod naming a node fits only there; UUR elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.framework import ActionType, ClusterEvent, Code, EventResource, QueueingHint
from kopf_scheduler.plugins.node_name import ERR_REASON, NodeName
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, new_state, pod_info, slots

NODES = ["a", "b", "c"]


@pytest.mark.parametrize(
    ("node_name", "rejected"),
    [
        pytest.param("", None, id="unset-fits-everywhere"),
        pytest.param("b", [True, False, True], id="named-node"),
        pytest.param("missing", [True, True, True], id="unknown-node"),
    ],
)
def test_filter(node_name: str, rejected: list[bool] | None) -> None:
    cache = make_cache([make_node(name) for name in NODES])
    snapshot = cache.snapshot()
    pod = pod_info(make_pod(spec={"nodeName": node_name} if node_name else {}))
    result = NodeName(handle=FakeHandle(cache)).filter(new_state(), pod, slots(snapshot, NODES), snapshot)
    if rejected is None:
        assert result is None
        return
    assert result is not None
    assert result.rejected.tolist() == rejected
    status = result.status_at(0)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == ("node(s) didn't match the requested node name",) == (ERR_REASON,)


def test_only_the_named_node_given_passes() -> None:
    cache = make_cache([make_node(name) for name in NODES])
    snapshot = cache.snapshot()
    pod = pod_info(make_pod(spec={"nodeName": "c"}))
    assert NodeName(handle=FakeHandle(cache)).filter(new_state(), pod, slots(snapshot, ["c"]), snapshot) is None


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent) -> QueueingHint:
    """Run the hint NodeName registered for ``event`` (exactly one registration matches)."""
    return hint_for(NodeName(handle=FakeHandle()), event)(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in NodeName(handle=FakeHandle()).events_to_register()] == [
        ClusterEvent(EventResource.NODE, ActionType.ADD)
    ]


def test_node_add_has_no_hint() -> None:
    # Only a new node can carry the wanted name; always Queue.
    (registration,) = NodeName(handle=FakeHandle()).events_to_register()
    assert registration.hint is None
