"""The pieces the SchedulingQueue facade composes, each on its own (the facade's behaviour is pinned by
tests/unit/test_queue.py)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from kopf_scheduler.framework.events import (
    EVENT_NODE_ADD,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from kopf_scheduler.queue.active_queue import ActiveQueue
from kopf_scheduler.queue.backoff_queue import BackoffQueue, backoff_duration
from kopf_scheduler.queue.heap import LazyHeap
from kopf_scheduler.queue.hints import QueueingHints, Strategy, with_node_taint_mitigation
from kopf_scheduler.queue.in_flight import InFlightPods
from kopf_scheduler.queue.queued_pod import QueuedPodInfo
from kopf_scheduler.queue.unschedulable_pods import UnschedulablePods
from kopf_scheduler.queue.waiters import Waiters
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import make_pod

NODE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)


def qpod(name: str, *, timestamp: float = 0.0, priority: int = 0, rejected_by: str = "") -> QueuedPodInfo:
    obj = make_pod(name, uid=f"uid-{name}", spec={"priority": priority})
    q = QueuedPodInfo(PodInfo.from_obj(obj), timestamp)
    if rejected_by:
        q.unschedulable_plugins.add(rejected_by)
    return q


def by_priority(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    return a.pod.priority > b.pod.priority


class _Entry:
    def __init__(self, q: QueuedPodInfo, key: int) -> None:
        self.qpod, self.key, self.alive = q, key, True

    def __lt__(self, other: _Entry) -> bool:
        return self.key < other.key


# -- heap ------------------------------------------------------------------------------------------------------
def test_lazy_heap_skips_removed_entries_and_rebuilds_when_they_dominate() -> None:
    heap: LazyHeap[_Entry] = LazyHeap()
    pods = [qpod(f"p{i}") for i in range(200)]
    for i, q in enumerate(pods):
        heap.push(q.uid, _Entry(q, i))
    for q in pods[:150]:
        heap.remove(q.uid)
    assert len(heap) == 50
    assert len(heap.heap) < 200  # rebuilt once the dead outnumbered the live
    assert heap.pop().qpod is pods[150]  # type: ignore[union-attr]
    heap.push(pods[199].uid, _Entry(pods[199], -1))  # a push replaces the pod's entry
    assert [heap.pop().qpod.uid for _ in range(2)] == ["uid-p199", "uid-p151"]  # type: ignore[union-attr]
    assert pods[199].uid not in heap


# -- activeQ ---------------------------------------------------------------------------------------------------
def test_active_queue_orders_by_less_then_arrival_and_a_re_push_keeps_the_rank() -> None:
    active = ActiveQueue(by_priority, itertools.count())
    a, b, c = qpod("a"), qpod("b"), qpod("c", priority=5)
    for q in (a, b, c):
        active.push(q)
    active.push(a)  # an update re-sorts but keeps a ahead of b
    assert [active.pop(), active.pop(), active.pop(), active.pop()] == [c, a, b, None]


# -- backoffQ --------------------------------------------------------------------------------------------------
def test_backoff_duration_doubles_up_to_the_cap() -> None:
    assert [backoff_duration(n, 1.0, 10.0) for n in range(7)] == [0.0, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def backoff(now: list[float], *, window: bool) -> BackoffQueue:
    return BackoffQueue(
        less=by_priority,
        seq=itertools.count(),
        clock=lambda: now[0],
        initial_backoff=1.0,
        max_backoff=10.0,
        pop_from_backoff_q=window,
    )


@pytest.mark.parametrize(("window", "expiry", "backing_off_at_12_9"), [(True, 12.0, True), (False, 12.5, False)])
def test_backoff_expiry_is_aligned_to_whole_seconds_only_with_pop_from_backoff_q(
    window: bool, expiry: float, backing_off_at_12_9: bool
) -> None:
    now = [10.5]
    queue = backoff(now, window=window)
    q = qpod("p", timestamp=10.5, rejected_by="NodeAffinity")
    q.unschedulable_count = 2
    assert queue.expiry(q) == expiry
    now[0] = 12.9
    assert queue.is_backing_off(q) is backing_off_at_12_9


def test_backoff_keeps_errors_apart_and_flushes_rejected_pods_first() -> None:
    now = [0.0]
    queue = backoff(now, window=True)
    error, low, high = qpod("error"), qpod("low", rejected_by="X"), qpod("high", priority=9, rejected_by="X")
    for q in (error, low, high):
        q.consecutive_errors_count = 1 if q is error else 0
        q.unschedulable_count = 0 if q is error else 1
        queue.push(q)
    assert len(queue) == 3
    assert not list(queue.pop_completed())  # everyone still backing off at t=0
    now[0] = 5.0
    assert list(queue.pop_completed()) == [high, low, error]  # one window: QueueSort order; errors last
    queue.push(error)
    assert queue.pop_rejected() is None  # the early pop never takes a pod that failed with an error
    assert queue.remove(error.uid) is error


# -- unschedulablePods -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("filler", [0, 100])
def test_unschedulable_pods_by_rejector_in_arrival_order(filler: int) -> None:
    pods = UnschedulablePods(itertools.count())
    late, early, error, other = qpod("late", rejected_by="A"), qpod("early", rejected_by="A"), qpod("err"), qpod("o")
    other.unschedulable_plugins.add("B")
    for q in (early, error, other, late, *(qpod(f"f{i}", rejected_by="C") for i in range(filler))):
        pods.put(q)
    pods.put(early)  # re-parking keeps its arrival rank
    assert pods.rejected_by(["A"]) == [early, error, late]  # pods no plugin rejected concern every event
    early.unschedulable_plugins = {"B"}
    pods.put(early)  # re-indexed under its new rejector
    assert pods.rejected_by(["A"]) == [error, late]
    assert pods.remove(other.uid) is other
    assert pods.rejected_by(["B"]) == [early, error]


def test_unschedulable_pods_count_gated_pods() -> None:
    pods = UnschedulablePods(itertools.count())
    gated = qpod("g", rejected_by="SchedulingGates")
    gated.gated = True
    pods.put(gated)
    assert (pods.gated_count, pods.is_gated(gated.uid)) == (1, True)
    pods.remove(gated.uid)
    assert (pods.gated_count, len(pods)) == (0, 0)


# -- hints -----------------------------------------------------------------------------------------------------
def test_node_add_registration_also_gets_node_taint_updates() -> None:
    events = with_node_taint_mitigation([ClusterEventWithHint(EVENT_NODE_ADD)])
    assert [r.event for r in events] == [EVENT_NODE_ADD, NODE_TAINT]
    assert with_node_taint_mitigation(events) == events


def test_hints_ask_only_the_rejectors_and_unregistered_plugins_hear_everything() -> None:
    skip = ClusterEventWithHint(EVENT_NODE_ADD, lambda pod, old, new: QueueingHint.QUEUE_SKIP)
    hints = QueueingHints({"Fussy": [skip]})
    fussy = qpod("p", rejected_by="Fussy")
    assert hints.worth_requeuing(fussy, EVENT_NODE_ADD, None, {}) is Strategy.SKIP
    assert hints.worth_requeuing(qpod("err"), EVENT_NODE_ADD, None, {}) is Strategy.AFTER_BACKOFF
    assert hints.interested_plugins(NODE_TAINT) == {"Fussy"}
    hints.note_plugins(["Unknown"])
    assert hints.interested_plugins(NODE_TAINT) == {"Fussy", "Unknown"}
    assert hints.worth_requeuing(qpod("u", rejected_by="Unknown"), NODE_TAINT, None, {}) is Strategy.AFTER_BACKOFF


# -- in flight -------------------------------------------------------------------------------------------------
def test_in_flight_replays_only_events_after_the_pop_and_drops_them_when_nobody_flies() -> None:
    flights = InFlightPods(itertools.count())
    hints = QueueingHints({"NodeResourcesFit": [ClusterEventWithHint(EVENT_NODE_ADD)]})
    first, second = qpod("first", rejected_by="NodeResourcesFit"), qpod("second", rejected_by="NodeResourcesFit")
    flights.start(first)
    flights.record(EVENT_NODE_ADD, None, {})
    flights.start(second)
    assert flights.replay(first, hints) is Strategy.AFTER_BACKOFF
    assert flights.replay(second, hints) is Strategy.SKIP
    flights.end(first.uid)
    assert flights.events != []  # second still flies
    flights.end(second.uid)
    assert (flights.events, bool(flights)) == ([], False)


# -- waiters ---------------------------------------------------------------------------------------------------
def test_waiters_are_woken_on_the_spot_and_forgotten() -> None:
    async def scenario() -> None:
        waiters = Waiters()
        loop = asyncio.get_running_loop()
        here = waiters.park(loop)
        waiters.wake_all()
        assert here.done()  # resolved on the spot
        assert waiters.pending == []
        gone = waiters.park(loop)
        waiters.forget(gone)
        assert waiters.pending == []

    asyncio.run(scenario())
