"""The scheduling queue (upstream PriorityQueue, v1.36): ordering, backoff, gates, event moves, in-flight events.

A fake clock drives every timing; nothing sleeps. ``pop`` is exercised with asyncio.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Sequence
from typing import Any

import pytest

from kopf_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    EVENT_UNSCHEDULED_POD_DELETE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.queue import IN_FLIGHT, QueueClosedError, QueuedPodInfo, SchedulingQueue
from kopf_scheduler.queue import hints as hints_module
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import events_to_register, make_node, make_pod, node_event, pod_event

START = 1000.25

#: The default profile's plugins (reference §1.1, without volumes/DRA).
DEFAULT_PLUGINS = [
    "SchedulingGates",
    "PrioritySort",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "PodTopologySpread",
    "InterPodAffinity",
    "DefaultPreemption",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
    "DefaultBinder",
]


class FakeClock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def at(self, when: float) -> None:
        self.now = when


def priority_sort(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    """PrioritySort.Less: higher priority first, then earlier queue timestamp."""
    if a.pod.priority != b.pod.priority:
        return a.pod.priority > b.pod.priority
    return a.timestamp < b.timestamp


def scheduling_gates(pod: PodInfo) -> Status:
    if pod.scheduling_gates:
        message = f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]"
        return Status.unschedulable(message, plugin="SchedulingGates", unresolvable=True)
    return SUCCESS


def new_queue(clock: FakeClock | None = None, **kwargs: Any) -> tuple[SchedulingQueue, FakeClock]:
    clock = clock or FakeClock()
    kwargs.setdefault("plugin_events", events_to_register(DEFAULT_PLUGINS))
    queue = SchedulingQueue(less=priority_sort, pre_enqueue=scheduling_gates, clock=clock, **kwargs)
    return queue, clock


def pod(
    name: str,
    *,
    priority: int = 0,
    gates: Sequence[str] = (),
    labels: dict[str, str] | None = None,
    requests: dict[str, str | int] | None = None,
    spec: dict[str, Any] | None = None,
    node_name: str = "",
) -> PodInfo:
    body: dict[str, Any] = {"priority": priority, **(spec or {})}
    if gates:
        body["schedulingGates"] = [{"name": g} for g in gates]
    obj = make_pod(name, uid=f"uid-{name}", labels=labels, requests=requests, spec=body, node_name=node_name)
    return PodInfo.from_obj(obj)


def changed(p: PodInfo, mutate: Any) -> PodInfo:
    """A new version of ``p`` after ``mutate(obj)``."""
    obj = copy.deepcopy(p.obj)
    mutate(obj)
    return PodInfo.from_obj(obj)


def fail(queue: SchedulingQueue, qpod: QueuedPodInfo, *plugins: str, pending: Sequence[str] = ()) -> None:
    """What the scheduling cycle does on failure: record the rejectors (none = error) and hand the pod back."""
    qpod.clear_rejector_plugins()
    qpod.unschedulable_plugins.update(plugins)
    qpod.pending_plugins.update(pending)
    queue.add_unschedulable_if_not_present(qpod)


def pop(queue: SchedulingQueue, expected: PodInfo | None = None) -> QueuedPodInfo:
    qpod = queue.pop_nowait()
    assert qpod is not None
    if expected is not None:
        assert qpod.uid == expected.uid
    return qpod


def reject(queue: SchedulingQueue, p: PodInfo, *plugins: str, pending: Sequence[str] = ()) -> QueuedPodInfo:
    """Add ``p``, pop it and fail it with ``plugins`` (it must be the only pod queued)."""
    queue.add(p)
    qpod = pop(queue, p)
    fail(queue, qpod, *plugins, pending=pending)
    return qpod


def big_node(name: str = "n1", **kwargs: Any) -> dict[str, Any]:
    return make_node(name, cpu="16", memory="64Gi", **kwargs)


NEEDS_CPU = {"cpu": "8"}


# -- ordering --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([("a", 0, 0.0), ("b", 0, 1.0), ("c", 0, 2.0)], ["a", "b", "c"]),
        ([("a", 0, 0.0), ("b", 10, 1.0), ("c", 5, 2.0)], ["b", "c", "a"]),
        ([("a", 5, 2.0), ("b", 5, 1.0), ("c", 100, 3.0), ("d", -1, 0.0)], ["c", "b", "a", "d"]),
        # equal priority and timestamp: FIFO
        ([("a", 1, 0.0), ("b", 1, 0.0), ("c", 1, 0.0)], ["a", "b", "c"]),
    ],
    ids=["fifo", "priority-first", "mixed", "ties"],
)
def test_priority_sort_order(pods: list[tuple[str, int, float]], expected: list[str]) -> None:
    queue, clock = new_queue()
    for name, priority, at in pods:
        clock.at(START + at)
        queue.add(pod(name, priority=priority))
    assert [pop(queue).pod.name for _ in pods] == expected
    assert queue.pop_nowait() is None


def test_requeued_pod_gets_a_fresh_timestamp() -> None:
    queue, clock = new_queue()
    first = reject(queue, pod("first"), "Custom")
    assert first.timestamp == START
    clock.advance(5)
    queue.add(pod("second"))
    queue.activate([first.uid])
    # first failed at START, so it still sorts by that; a newer failure moves it behind
    assert pop(queue).pod.name == "first"
    clock.advance(1)
    fail(queue, first, "Custom")
    assert first.timestamp == START + 6
    queue.activate([first.uid])
    assert [pop(queue).pod.name, pop(queue).pod.name] == ["second", "first"]


# -- backoff ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("initial", "maximum", "expected"),
    [
        (1.0, 10.0, [0, 1, 2, 4, 8, 10, 10, 10]),
        (2.0, 5.0, [0, 2, 4, 5, 5, 5, 5, 5]),
        (1.0, 1.0, [0, 1, 1, 1, 1, 1, 1, 1]),
    ],
    ids=["defaults", "custom", "flat"],
)
def test_backoff_duration(initial: float, maximum: float, expected: list[float]) -> None:
    queue, _ = new_queue(initial_backoff=initial, max_backoff=maximum)
    assert [queue.backoff_duration(n) for n in range(8)] == expected
    assert queue.backoff_duration(10_000) == maximum


@pytest.mark.parametrize(
    ("outcomes", "unschedulable_count", "errors", "backoff"),
    [
        ("U", 1, 0, 1),
        ("UUU", 3, 0, 4),
        ("UUUUUU", 6, 0, 10),
        ("E", 0, 1, 1),
        ("EE", 0, 2, 2),
        ("UUUE", 3, 1, 1),  # errors back off on their own count (1.35+), not on attempts
        ("EEU", 1, 0, 1),  # a rejection resets the error streak
        ("UEU", 2, 0, 2),
        ("EEEEU", 1, 0, 1),
    ],
)
def test_backoff_counts_rejections_and_error_streaks(
    outcomes: str, unschedulable_count: int, errors: int, backoff: float
) -> None:
    queue, clock = new_queue(pop_from_backoff_q=False)
    queue.add(pod("p"))
    qpod = None
    for outcome in outcomes:
        if qpod is not None:
            clock.advance(60)
            queue.activate([qpod.uid])
        qpod = pop(queue)
        if outcome == "U":
            fail(queue, qpod, "Custom")
        else:
            fail(queue, qpod)
    assert qpod is not None
    assert qpod.attempts == len(outcomes)
    assert (qpod.unschedulable_count, qpod.consecutive_errors_count) == (unschedulable_count, errors)
    failed_at = clock.now
    # The backoff actually served: still backing off just before failed_at + backoff, done just after.
    clock.at(failed_at + backoff - 0.01)
    node_event(queue, None, big_node())  # moves a rejected pod (unknown plugin: every event) into backoffQ
    queue.flush_backoff_completed()
    assert queue.location(qpod.uid) == "backoff"
    clock.at(failed_at + backoff + 0.01)
    queue.flush_backoff_completed()
    assert queue.location(qpod.uid) == "active"


def test_backoff_expiry_is_timestamp_plus_duration_without_window() -> None:
    queue, clock = new_queue(pop_from_backoff_q=False)
    p = pod("p", requests=NEEDS_CPU)
    reject(queue, p, "NodeResourcesFit")  # at START: backoff 1 s → expires START + 1
    clock.advance(0.5)
    node_event(queue, None, big_node())
    assert queue.location(p.uid) == "backoff"
    for now, where in [(START + 0.999, "backoff"), (START + 1.0, "backoff"), (START + 1.001, "active")]:
        clock.at(now)
        queue.flush_backoff_completed()
        assert queue.location(p.uid) == where, now


def test_backoff_expiry_is_aligned_to_one_second_windows() -> None:
    # PopFromBackoffQ (on in 1.36): expiry floor(1000.25 + 1) = 1001; backing off while floor(now) <= 1001.
    queue, clock = new_queue()
    p = pod("p", requests=NEEDS_CPU)
    reject(queue, p, "NodeResourcesFit")
    queue.add(pod("busy"))  # keep activeQ non-empty so the flush, not an early pop, is observed
    node_event(queue, None, big_node())
    assert queue.location(p.uid) == "backoff"
    for now, where in [(1001.5, "backoff"), (1001.999, "backoff"), (1002.0, "active")]:
        clock.at(now)
        queue.flush_backoff_completed()
        assert queue.location(p.uid) == where, now


def test_event_after_backoff_expired_goes_straight_to_active() -> None:
    queue, clock = new_queue()
    p = pod("p", requests=NEEDS_CPU)
    reject(queue, p, "NodeResourcesFit")
    clock.advance(30)
    node_event(queue, None, big_node())
    assert queue.location(p.uid) == "active"


@pytest.mark.parametrize(
    ("pop_from_backoff_q", "expected"),
    [(True, ["high", "low"]), (False, ["low", "high"])],
    ids=["window-priority", "expiry-only"],
)
def test_backoff_order_within_a_window(pop_from_backoff_q: bool, expected: list[str]) -> None:
    queue, clock = new_queue(pop_from_backoff_q=pop_from_backoff_q)
    clock.at(1000.1)
    reject(queue, pod("low", requests=NEEDS_CPU), "NodeResourcesFit")
    clock.at(1000.6)
    reject(queue, pod("high", priority=10, requests=NEEDS_CPU), "NodeResourcesFit")
    node_event(queue, None, big_node())
    assert queue.pending_pods()["backoff"] == 2
    clock.at(1010)
    queue.flush_backoff_completed()
    order = [pop(queue).pod.name, pop(queue).pod.name]
    # Flushed pods keep their old timestamps; activeQ orders by priority regardless.
    assert order == ["high", "low"]
    # The backoffQ's own order shows when popping early from it (PopFromBackoffQ only).
    queue2, clock2 = new_queue(pop_from_backoff_q=pop_from_backoff_q)
    clock2.at(1000.1)
    reject(queue2, pod("low", requests=NEEDS_CPU), "NodeResourcesFit")
    clock2.at(1000.6)
    reject(queue2, pod("high", priority=10, requests=NEEDS_CPU), "NodeResourcesFit")
    node_event(queue2, None, big_node())
    if pop_from_backoff_q:
        assert [pop(queue2).pod.name, pop(queue2).pod.name] == expected
    else:
        assert queue2.pop_nowait() is None
        clock2.at(1010)
        queue2.flush_backoff_completed()
        assert queue2.pending_pods()["active"] == 2


def test_idle_pop_takes_backoff_head_early_but_never_error_backoff() -> None:
    queue, clock = new_queue()
    p = pod("p", requests=NEEDS_CPU)
    reject(queue, p, "NodeResourcesFit")
    err = reject(queue, pod("err"))  # error: no rejecting plugin
    assert queue.location(err.uid) == "backoff"
    node_event(queue, None, big_node())
    assert queue.location(p.uid) == "backoff"
    again = pop(queue, p)  # activeQ empty: the rejected pod is retried before its backoff ends
    assert again.attempts == 2
    assert queue.pop_nowait() is None  # the errored pod waits for its flush
    clock.advance(2)
    queue.flush_backoff_completed()
    assert pop(queue, err.pod).attempts == 2


def test_plain_mode_pop_waits_for_backoff() -> None:
    queue, clock = new_queue(pop_from_backoff_q=False)
    p = pod("p", requests=NEEDS_CPU)
    reject(queue, p, "NodeResourcesFit")
    node_event(queue, None, big_node())
    assert queue.pop_nowait() is None
    clock.advance(1.5)
    queue.flush_backoff_completed()
    assert pop(queue, p).attempts == 2


def test_error_goes_to_backoff_even_without_events() -> None:
    queue, clock = new_queue()
    qpod = reject(queue, pod("p"))
    assert queue.location(qpod.uid) == "backoff"
    assert queue.pending_pods() == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0}
    clock.advance(0.5)
    queue.flush_backoff_completed()
    assert queue.location(qpod.uid) == "backoff"
    clock.advance(1.5)
    queue.flush_backoff_completed()
    assert queue.location(qpod.uid) == "active"


# -- scheduling gates ------------------------------------------------------------------------------------------
def test_gated_pod_is_parked_never_popped_and_released_by_its_update() -> None:
    calls: list[str] = []

    def counting_gates(p: PodInfo) -> Status:
        calls.append(p.name)
        return scheduling_gates(p)

    clock = FakeClock()
    queue = SchedulingQueue(
        less=priority_sort,
        pre_enqueue=counting_gates,
        clock=clock,
        plugin_events=events_to_register(DEFAULT_PLUGINS),
    )
    gated = pod("g", gates=["a", "b"])
    queue.add(gated)
    entry = queue.get(gated.uid)
    assert entry is not None
    assert entry.gated
    assert entry.gating_plugin == "SchedulingGates"
    assert queue.location(gated.uid) == "gated"
    assert queue.pending_pods() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 1}
    assert queue.pop_nowait() is None

    # Cluster events and the leftover flush do not touch it.
    node_event(queue, None, big_node())
    pod_event(queue, pod("x", node_name="n1"), None)
    clock.advance(3600)
    queue.flush_unschedulable_leftover()
    queue.flush_backoff_completed()
    assert queue.location(gated.uid) == "gated"
    assert calls == ["g"]  # only events the gating plugin registered re-run PreEnqueue

    # Removing one gate is not enough.
    one_left = changed(gated, lambda o: o["spec"].update(schedulingGates=[{"name": "b"}]))
    queue.update(gated, one_left)
    assert queue.location(gated.uid) == "gated"

    ungated = changed(one_left, lambda o: o["spec"].pop("schedulingGates"))
    queue.update(one_left, ungated)
    assert queue.location(gated.uid) == "active"
    qpod = pop(queue, gated)
    assert qpod.attempts == 1
    assert not qpod.gated
    assert qpod.pod is ungated
    assert qpod.initial_attempt_timestamp == clock.now  # entered activeQ only now


def test_gate_without_plugin_name_reruns_pre_enqueue_on_any_update() -> None:
    clock = FakeClock()
    allowed: set[str] = set()

    def pre_enqueue(p: PodInfo) -> Status:
        return SUCCESS if p.labels.get("ok") == "yes" or p.uid in allowed else Status.unschedulable("not yet")

    queue = SchedulingQueue(
        less=priority_sort,
        pre_enqueue=pre_enqueue,
        clock=clock,
        plugin_events=events_to_register(DEFAULT_PLUGINS),
    )
    p = pod("p")
    queue.add(p)
    assert queue.location(p.uid) == "gated"
    entry = queue.get(p.uid)
    assert entry is not None
    assert entry.gated
    queue.update(p, changed(p, lambda o: o["metadata"]["labels"].update(ok="yes")))
    assert queue.location(p.uid) == "active"


def test_pre_enqueue_error_gates_the_pod() -> None:
    def broken(p: PodInfo) -> Status:
        raise RuntimeError("boom")

    queue = SchedulingQueue(less=priority_sort, pre_enqueue=broken, clock=FakeClock())
    queue.add(pod("p"))
    assert queue.location("uid-p") == "gated"


# -- cluster events move only the pods they can help ---------------------------------------------------------------
TAINT = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}


def _node_update(old: dict[str, Any], mutate: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    new = copy.deepcopy(old)
    mutate(new)
    return old, new


MOVES = [
    # (id, rejecting plugins, how to trigger, expected location)
    ("fit/node-add-big", ["NodeResourcesFit"], ("node-add", big_node()), "backoff"),
    ("fit/node-add-small", ["NodeResourcesFit"], ("node-add", make_node("n", cpu="2")), "unschedulable"),
    (
        "fit/node-label",
        ["NodeResourcesFit"],
        ("node-update", _node_update(big_node(), lambda n: n["metadata"]["labels"].update(a="b"))),
        "unschedulable",
    ),
    # Node/Add registrants also get Node/UpdateNodeTaint with an always-Queue hint (issue 109437).
    (
        "fit/node-taint",
        ["NodeResourcesFit"],
        ("node-update", _node_update(big_node(), lambda n: n["spec"].update(taints=[TAINT]))),
        "backoff",
    ),
    (
        "fit/assigned-delete",
        ["NodeResourcesFit"],
        ("event", EVENT_ASSIGNED_POD_DELETE, pod("x", node_name="n1"), None),
        "backoff",
    ),
    (
        "fit/unscheduled-delete",
        ["NodeResourcesFit"],
        ("event", EVENT_UNSCHEDULED_POD_DELETE, pod("x"), None),
        "unschedulable",
    ),
    (
        "fit/service",
        ["NodeResourcesFit"],
        ("event", ClusterEvent(EventResource.SERVICE, ActionType.ADD), None, {}),
        "unschedulable",
    ),
    (
        "taint/node-label",
        ["TaintToleration"],
        ("node-update", _node_update(big_node(taints=[TAINT]), lambda n: n["metadata"]["labels"].update(a="b"))),
        "unschedulable",
    ),
    (
        "taint/taint-removed",
        ["TaintToleration"],
        ("node-update", _node_update(big_node(taints=[TAINT]), lambda n: n["spec"].update(taints=[]))),
        "backoff",
    ),
    (
        "taint/condition",
        ["TaintToleration"],
        (
            "node-update",
            _node_update(big_node(), lambda n: n["status"].update(conditions=[{"type": "Ready", "status": "False"}])),
        ),
        "unschedulable",
    ),
    (
        "unschedulable/uncordon",
        ["NodeUnschedulable"],
        ("node-update", _node_update(big_node(unschedulable=True), lambda n: n["spec"].update(unschedulable=False))),
        "backoff",
    ),
    (
        "two-rejectors/one-says-queue",
        ["TaintToleration", "NodeResourcesFit"],
        ("node-add", big_node(taints=[TAINT])),
        "backoff",
    ),
    (
        "two-rejectors/none-says-queue",
        ["TaintToleration", "NodeResourcesFit"],
        ("node-add", make_node("n", cpu="1", taints=[TAINT])),
        "unschedulable",
    ),
    (
        "unknown-plugin/any-node-event",
        ["Custom"],
        ("node-update", _node_update(big_node(), lambda n: n["metadata"]["labels"].update(a="b"))),
        "backoff",
    ),
    ("score-only/never", ["ImageLocality"], ("node-add", big_node()), "unschedulable"),
]


@pytest.mark.parametrize(("plugins", "trigger", "expected"), [m[1:] for m in MOVES], ids=[m[0] for m in MOVES])
def test_cluster_event_moves(plugins: list[str], trigger: tuple[Any, ...], expected: str) -> None:
    queue, clock = new_queue()
    p = pod("p", requests=NEEDS_CPU)
    reject(queue, p, *plugins)
    queue.add(pod("bystander"))  # a pod that must stay where it is
    assert queue.location(p.uid) == "unschedulable"
    clock.advance(0.25)  # still backing off
    kind = trigger[0]
    if kind == "node-add":
        node_event(queue, None, trigger[1])
    elif kind == "node-update":
        node_event(queue, *trigger[1])
    else:
        queue.move_all_to_active_or_backoff(trigger[1], trigger[2], trigger[3])
    assert queue.location(p.uid) == expected
    assert queue.location("uid-bystander") == "active"
    assert len(queue) == 2


def test_hint_error_counts_as_queue() -> None:
    def broken(p: PodInfo, old: Any, new: Any) -> QueueingHint:
        raise ValueError("cannot read")

    def never(p: PodInfo, old: Any, new: Any) -> QueueingHint:
        return QueueingHint.QUEUE_SKIP

    events = {
        "Boom": [ClusterEventWithHint(EVENT_NODE_ADD, broken)],
        "Never": [ClusterEventWithHint(EVENT_NODE_ADD, never)],
    }
    queue, _ = new_queue(plugin_events=events)
    boom, quiet = pod("boom"), pod("quiet")
    reject(queue, boom, "Boom")
    reject(queue, quiet, "Never")
    node_event(queue, None, big_node())
    assert queue.location(boom.uid) == "backoff"
    assert queue.location(quiet.uid) == "unschedulable"


def test_pending_plugin_skips_backoff() -> None:
    events = {
        "Waiter": [ClusterEventWithHint(ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.UPDATE))],
        "NodeResourcesFit": events_to_register(["NodeResourcesFit"])["NodeResourcesFit"],
    }
    queue, _ = new_queue(plugin_events=events)
    waiting = pod("w", requests=NEEDS_CPU)
    reject(queue, waiting, "NodeResourcesFit", pending=["Waiter"])
    claim_update = ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.UPDATE)
    queue.move_all_to_active_or_backoff(claim_update, {}, {})
    assert queue.location(waiting.uid) == "active"  # still within its backoff, but Pending means "go now"
    # the same pod rejected only as Unschedulable would have waited its backoff
    queue2, _ = new_queue(plugin_events=events)
    reject(queue2, waiting, "Waiter")
    queue2.move_all_to_active_or_backoff(claim_update, {}, {})
    assert queue2.location(waiting.uid) == "backoff"


def test_without_plugin_events_every_watched_event_moves() -> None:
    queue, _ = new_queue(plugin_events=None)
    p = pod("p")
    reject(queue, p, "Whatever")
    queue.move_all_to_active_or_backoff(ClusterEvent(EventResource.SERVICE, ActionType.ADD), None, {})
    assert queue.location(p.uid) == "unschedulable"  # Service is not a watched event kind
    node_event(queue, big_node(), big_node(labels={"a": "b"}))
    assert queue.location(p.uid) == "backoff"


def test_pre_check_limits_candidates() -> None:
    queue, _ = new_queue()
    low, high = pod("low", requests=NEEDS_CPU), pod("high", priority=100, requests=NEEDS_CPU)
    reject(queue, low, "NodeResourcesFit")
    reject(queue, high, "NodeResourcesFit")
    victim = pod("victim", priority=50, node_name="n1")
    queue.move_all_to_active_or_backoff(
        EVENT_ASSIGNED_POD_DELETE, victim, None, pre_check=lambda p: p.priority <= victim.priority
    )
    assert queue.location(low.uid) == "backoff"
    assert queue.location(high.uid) == "unschedulable"


def test_assigned_pod_wrappers() -> None:
    queue, _ = new_queue()
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    follower = pod(
        "follower", spec={"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    )
    hungry = pod("hungry", requests=NEEDS_CPU)
    reject(queue, follower, "InterPodAffinity")
    reject(queue, hungry, "NodeResourcesFit")

    pod_event(queue, None, pod("web", node_name="n1", labels={"app": "web"}))
    assert (queue.location(follower.uid), queue.location(hungry.uid)) == ("unschedulable", "unschedulable")

    web = pod("web", node_name="n1", labels={"app": "web"})
    pod_event(queue, web, changed(web, lambda o: o["metadata"]["labels"].update(app="db")))
    assert (queue.location(follower.uid), queue.location(hungry.uid)) == ("backoff", "unschedulable")

    pod_event(queue, web, None)
    assert queue.location(hungry.uid) == "backoff"


# -- events during a cycle are not lost ------------------------------------------------------------------------
def test_relevant_event_during_flight_requeues_to_backoff() -> None:
    queue, _ = new_queue()
    p = pod("p", requests=NEEDS_CPU)
    queue.add(p)
    qpod = pop(queue, p)
    assert queue.location(p.uid) == IN_FLIGHT
    node_event(queue, None, big_node())  # lands while the cycle runs
    fail(queue, qpod, "NodeResourcesFit")
    assert queue.location(p.uid) == "backoff"
    assert queue.location(p.uid) != IN_FLIGHT


@pytest.mark.parametrize(
    ("when", "event", "expected"),
    [
        ("during", "irrelevant-node-condition", "unschedulable"),
        ("during", "small-node", "unschedulable"),
        ("before-pop", "big-node", "unschedulable"),
        ("during", "big-node", "backoff"),
    ],
)
def test_in_flight_event_replay(when: str, event: str, expected: str) -> None:
    queue, _ = new_queue()
    p = pod("p", requests=NEEDS_CPU)

    def trigger() -> None:
        if event == "irrelevant-node-condition":
            old = big_node()
            new = copy.deepcopy(old)
            new["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
            node_event(queue, old, new)
        elif event == "small-node":
            node_event(queue, None, make_node("small", cpu="1"))
        else:
            node_event(queue, None, big_node())

    queue.add(p)
    if when == "before-pop":
        trigger()
    qpod = pop(queue, p)
    if when == "during":
        trigger()
    fail(queue, qpod, "NodeResourcesFit")
    assert queue.location(p.uid) == expected


def test_in_flight_pending_plugin_goes_to_active() -> None:
    events = {"Waiter": [ClusterEventWithHint(EVENT_NODE_ADD)]}
    queue, _ = new_queue(plugin_events=events)
    p = pod("p")
    queue.add(p)
    qpod = pop(queue, p)
    node_event(queue, None, big_node())
    fail(queue, qpod, pending=["Waiter"])
    assert queue.location(p.uid) == "active"


def test_each_in_flight_pod_sees_only_events_after_its_pop() -> None:
    queue, _ = new_queue()
    a, b = pod("a", requests=NEEDS_CPU), pod("b", requests=NEEDS_CPU)
    queue.add(a)
    queue.add(b)
    qa = pop(queue, a)
    node_event(queue, None, big_node("n1"))  # a is in flight, b is not yet
    qb = pop(queue, b)
    fail(queue, qa, "NodeResourcesFit")
    fail(queue, qb, "NodeResourcesFit")
    assert queue.location(a.uid) == "backoff"
    assert queue.location(b.uid) == "unschedulable"


def test_a_pod_done_before_an_older_one_leaves_the_older_ones_events() -> None:
    """Pods finish out of pop order (binds complete at different times): the events the oldest in-flight pod
    has not been judged against stay in the log."""
    queue, _ = new_queue()
    a, b, c = (pod(name, requests=NEEDS_CPU) for name in "abc")
    for p in (a, b, c):
        queue.add(p)
    qa = pop(queue, a)
    node_event(queue, None, big_node("n1"))  # after a's pop, before b's and c's
    pop(queue, b)
    pop(queue, c)
    queue.done(b.uid)
    queue.done(c.uid)
    fail(queue, qa, "NodeResourcesFit")
    assert queue.location(a.uid) == "backoff"


def test_own_update_during_flight_is_replayed_and_latest_copy_requeued() -> None:
    queue, _ = new_queue()
    p = pod("p")
    queue.add(p)
    qpod = pop(queue, p)
    tolerating = changed(p, lambda o: o["spec"].update(tolerations=[{"operator": "Exists"}]))
    queue.update(p, tolerating)
    assert len(queue) == 0  # no duplicate while in flight
    fail(queue, qpod, "TaintToleration")
    assert queue.location(p.uid) == "backoff"
    entry = queue.get(p.uid)
    assert entry is not None
    assert entry.pod is tolerating


def test_events_are_not_recorded_when_nothing_is_in_flight() -> None:
    queue, _ = new_queue()
    for i in range(50):
        node_event(queue, None, big_node(f"n{i}"))
    assert queue._in_flight.events == []
    p = pod("p")
    queue.add(p)
    qpod = pop(queue, p)
    node_event(queue, None, big_node("x"))
    assert len(queue._in_flight.events) == 1
    queue.done(qpod.uid)
    assert queue._in_flight.events == []


# -- leftover flush ---------------------------------------------------------------------------------------------
def test_unschedulable_leftover_flush_after_max_duration() -> None:
    queue, clock = new_queue(max_in_unschedulable=300)
    p = pod("p")
    reject(queue, p, "NodeAffinity")
    clock.advance(300)
    queue.flush_unschedulable_leftover()
    assert queue.location(p.uid) == "unschedulable"  # strictly longer than the maximum
    clock.advance(0.5)
    queue.flush_unschedulable_leftover()
    assert queue.location(p.uid) == "active"  # its 1 s backoff is long over


def test_leftover_flush_respects_backoff() -> None:
    queue, clock = new_queue(max_in_unschedulable=0.5, max_backoff=60, initial_backoff=60)
    p = pod("p")
    reject(queue, p, "NodeAffinity")
    queue.add(pod("busy"))
    clock.advance(1)
    queue.flush_unschedulable_leftover()
    assert queue.location(p.uid) == "backoff"


# -- updates of queued pods ----------------------------------------------------------------------------------
def _add_toleration(o: dict[str, Any]) -> None:
    o["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]


def _scale_down(o: dict[str, Any]) -> None:
    o["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"


def _relabel(o: dict[str, Any]) -> None:
    o["metadata"]["labels"]["app"] = "other"


@pytest.mark.parametrize(
    ("plugin", "mutate", "expected"),
    [
        ("TaintToleration", _add_toleration, "backoff"),
        ("NodeUnschedulable", _add_toleration, "unschedulable"),  # not the unschedulable taint
        ("NodeResourcesFit", _scale_down, "backoff"),
        ("NodeResourcesFit", _relabel, "unschedulable"),
        ("InterPodAffinity", _relabel, "backoff"),
        # 1.36: NodeAffinity registers no pod update, so a relabel does not retry it (QueueingHints on)
        ("NodeAffinity", _relabel, "unschedulable"),
        ("Custom", _relabel, "backoff"),  # unknown plugins react to every update
    ],
    ids=["toleration", "toleration-wrong", "scale-down", "fit-relabel", "affinity-relabel", "node-affinity", "custom"],
)
def test_update_of_unschedulable_pod(plugin: str, mutate: Any, expected: str) -> None:
    queue, _ = new_queue()
    p = pod("p", labels={"app": "web"}, requests=NEEDS_CPU)
    reject(queue, p, plugin)
    queue.add(pod("busy"))
    new = changed(p, mutate)
    queue.update(p, new)
    assert queue.location(p.uid) == expected
    entry = queue.get(p.uid)
    assert entry is not None
    assert entry.pod is new


def test_update_in_active_queue_resorts() -> None:
    queue, _ = new_queue()
    a, b = pod("a"), pod("b")
    queue.add(a)
    queue.add(b)
    urgent = changed(b, lambda o: o["spec"].update(priority=10))
    queue.update(b, urgent)
    first = pop(queue)
    assert first.uid == b.uid
    assert first.pod is urgent
    assert len(queue) == 1


def test_update_of_unknown_pod_adds_it_and_binding_removes_it() -> None:
    queue, _ = new_queue()
    p = pod("p")
    queue.update(None, p)
    assert queue.location(p.uid) == "active"
    queue.update(p, changed(p, lambda o: o["spec"].update(nodeName="n1")))
    assert p.uid not in queue
    assert len(queue) == 0


def test_assigned_or_finished_pods_are_not_added() -> None:
    queue, _ = new_queue()
    queue.add(pod("bound", node_name="n1"))
    done = changed(pod("done"), lambda o: o["status"].update(phase="Succeeded"))
    queue.add(done)
    assert len(queue) == 0


# -- delete and duplicates -------------------------------------------------------------------------------------
def _place(queue: SchedulingQueue, where: str) -> PodInfo:
    p = pod("p", requests=NEEDS_CPU, gates=["g"] if where == "gated" else ())
    if where in ("active", "gated"):
        queue.add(p)
    elif where == "unschedulable":
        reject(queue, p, "NodeResourcesFit")
    elif where == "backoff":
        reject(queue, p, "NodeResourcesFit")
        node_event(queue, None, big_node())
    elif where == "error-backoff":
        reject(queue, p)
    assert queue.location(p.uid) == ("backoff" if where == "error-backoff" else where)
    return p


@pytest.mark.parametrize("where", ["active", "backoff", "error-backoff", "unschedulable", "gated"])
def test_delete_removes_from_anywhere(where: str) -> None:
    queue, clock = new_queue()
    p = _place(queue, where)
    queue.delete(p.uid)
    assert p.uid not in queue
    assert queue.location(p.uid) is None
    assert len(queue) == 0
    assert queue.pending_pods() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
    clock.advance(3600)
    queue.flush_backoff_completed()
    queue.flush_unschedulable_leftover()
    node_event(queue, None, big_node("late"))
    assert queue.pop_nowait() is None


def test_pod_deleted_in_flight_is_not_requeued() -> None:
    queue, _ = new_queue()
    p = pod("p")
    queue.add(p)
    qpod = pop(queue, p)
    queue.delete(p.uid)
    fail(queue, qpod, "NodeResourcesFit")
    assert len(queue) == 0
    assert queue.location(p.uid) != IN_FLIGHT


def test_pod_bound_elsewhere_in_flight_is_not_requeued() -> None:
    queue, _ = new_queue()
    p = pod("p")
    queue.add(p)
    qpod = pop(queue, p)
    queue.update(p, changed(p, lambda o: o["spec"].update(nodeName="n1")))
    fail(queue, qpod, "NodeResourcesFit")
    assert len(queue) == 0


@pytest.mark.parametrize("where", ["active", "backoff", "error-backoff", "unschedulable", "gated", "in-flight"])
def test_duplicates_never_appear(where: str) -> None:
    queue, _ = new_queue()
    if where == "in-flight":
        p = pod("p")
        queue.add(p)
        pop(queue, p)
    else:
        p = _place(queue, where)
    before = len(queue)
    queue.add(p)
    queue.add(copy.copy(p))
    queue.update(p, p)
    assert len(queue) == before
    assert sum(queue.pending_pods().values()) == before
    popped = [queue.pop_nowait() for _ in range(3)]
    assert sum(1 for q in popped if q is not None) <= 1


def test_handing_back_a_pod_that_is_queued_is_ignored() -> None:
    queue, _ = new_queue()
    p = pod("p")
    queue.add(p)
    stray = QueuedPodInfo(p, 0.0)
    stray.unschedulable_plugins.add("NodeResourcesFit")
    queue.add_unschedulable_if_not_present(stray)
    assert queue.location(p.uid) == "active"
    assert len(queue) == 1


# -- activate --------------------------------------------------------------------------------------------------
def test_activate() -> None:
    queue, _ = new_queue()
    u, b = pod("u", requests=NEEDS_CPU), pod("b", requests=NEEDS_CPU)
    reject(queue, u, "NodeResourcesFit")
    reject(queue, b, "NodeResourcesFit")
    queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod("x", node_name="n1"), None)
    assert queue.location(b.uid) == "backoff"
    queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod("y", node_name="n1"), None)
    queue.add(pod("z"))
    # u is in backoff too now; put it back to unschedulable by failing again
    qz = pop(queue)
    queue.done(qz.uid)
    queue.activate([u.uid, b.uid, "unknown"])
    assert queue.location(u.uid) == "active"
    assert queue.location(b.uid) == "active"

    # an in-flight pod gets a ForceActivate recorded: it comes back to active/backoff instead of unschedulable
    inflight = pop(queue)
    queue.activate([inflight.uid])
    fail(queue, inflight, "NodeResourcesFit")
    assert queue.location(inflight.uid) == "backoff"


# -- counts ----------------------------------------------------------------------------------------------------
def test_pending_pods_counts() -> None:
    queue, _ = new_queue()
    reject(queue, pod("unsched1", requests=NEEDS_CPU), "NodeResourcesFit")
    reject(queue, pod("unsched2", spec={"nodeSelector": {"disk": "ssd"}}), "NodeAffinity")
    reject(queue, pod("backoff", requests=NEEDS_CPU), "TaintToleration")
    node_event(queue, None, big_node())  # moves the TaintToleration pod (clean node) and unsched1 (fits)
    reject(queue, pod("err"))
    queue.add(pod("gated", gates=["x"]))
    queue.add(pod("active1"))
    queue.add(pod("active2"))
    inflight = pod("inflight", priority=100)
    queue.add(inflight)
    pop(queue, inflight)
    assert queue.pending_pods() == {"active": 2, "backoff": 3, "unschedulable": 1, "gated": 1}
    assert len(queue) == 7
    assert "uid-active1" in queue
    assert "uid-gated" in queue
    assert "uid-inflight" not in queue
    assert queue.location("uid-inflight") == IN_FLIGHT
    assert queue.location("uid-inflight") == "in-flight"


# -- pop -------------------------------------------------------------------------------------------------------
def test_pop_blocks_until_a_pod_arrives() -> None:
    async def scenario() -> None:
        queue, _ = new_queue()
        waiter = asyncio.create_task(queue.pop())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not waiter.done()
        p = pod("p")
        queue.add(p)
        got = await asyncio.wait_for(waiter, 1)
        assert got.uid == p.uid
        assert got.attempts == 1
        assert queue.location(p.uid) == IN_FLIGHT

    asyncio.run(scenario())


def test_pop_wakes_when_an_event_moves_a_pod() -> None:
    async def scenario() -> None:
        queue, clock = new_queue()
        p = pod("p", requests=NEEDS_CPU)
        reject(queue, p, "NodeResourcesFit")
        waiter = asyncio.create_task(queue.pop())
        await asyncio.sleep(0)
        assert not waiter.done()
        node_event(queue, None, make_node("small", cpu="1"))  # irrelevant: stays asleep
        await asyncio.sleep(0)
        assert not waiter.done()
        clock.advance(10)
        node_event(queue, None, big_node())
        got = await asyncio.wait_for(waiter, 1)
        assert got.uid == p.uid
        assert got.attempts == 2

    asyncio.run(scenario())


def test_close_wakes_pop_with_an_error() -> None:
    async def scenario() -> None:
        queue, _ = new_queue()
        waiters = [asyncio.create_task(queue.pop()) for _ in range(2)]
        await asyncio.sleep(0)
        queue.close()
        for waiter in waiters:
            with pytest.raises(QueueClosedError):
                await asyncio.wait_for(waiter, 1)
        queue.add(pod("late"))
        with pytest.raises(QueueClosedError):
            await queue.pop()
        assert queue.pop_nowait() is None

    asyncio.run(scenario())


def test_cancelled_pop_leaves_no_waiter() -> None:
    async def scenario() -> None:
        queue, _ = new_queue()
        waiter = asyncio.create_task(queue.pop())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert queue._wakers.pending == []
        queue.add(pod("p"))
        assert (await queue.pop()).pod.name == "p"

    asyncio.run(scenario())


def test_initial_attempt_timestamp_survives_retries() -> None:
    queue, clock = new_queue()
    qpod = reject(queue, pod("p"), "NodeAffinity")
    first = qpod.initial_attempt_timestamp
    assert first == START
    clock.advance(100)
    queue.activate([qpod.uid])
    again = pop(queue)
    assert again is qpod
    assert again.initial_attempt_timestamp == first


# -- scale -----------------------------------------------------------------------------------------------------
def test_ten_thousand_pods_are_cheap() -> None:
    """Adds, deletes and pops stay O(log n) each: counted in QueueSort comparisons, not timed."""
    rng = random.Random(42)
    comparisons = 0

    def counting_less(a: Any, b: Any) -> bool:
        nonlocal comparisons
        comparisons += 1
        return priority_sort(a, b)

    clock = FakeClock()
    queue = SchedulingQueue(
        less=counting_less, pre_enqueue=scheduling_gates, clock=clock, plugin_events=events_to_register(DEFAULT_PLUGINS)
    )
    pods = [pod(f"p{i}", priority=rng.randrange(5)) for i in range(10_000)]
    for i, p in enumerate(pods):
        clock.at(START + i * 0.001)
        queue.add(p)
    for p in pods[::2]:
        queue.delete(p.uid)
    order = []
    while (qpod := queue.pop_nowait()) is not None:
        order.append(qpod)
        queue.done(qpod.uid)
    assert len(order) == 5_000
    keys = [(-q.pod.priority, q.timestamp) for q in order]
    assert keys == sorted(keys)
    # 10000 adds, 5000 deletes, 5000 pops on a binary heap: a few comparisons per level, log2(10000) ≈ 14
    # levels. A linear scan anywhere (e.g. a sorted-list insert) would need tens of millions.
    assert comparisons < 20_000 * 2 * 14, comparisons


def test_ten_thousand_unschedulable_pods_and_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """At scale an event asks only the plugins that rejected a pod, and only for events they registered.

    Counted, not timed: the hints asked per event are what makes a move cheap or expensive.
    """
    asked: list[str] = []
    real_hint = hints_module._hint

    def counting_hint(plugin: str, *args: Any) -> Any:
        asked.append(plugin)
        return real_hint(plugin, *args)

    monkeypatch.setattr(hints_module, "_hint", counting_hint)
    queue, clock = new_queue()
    for i in range(10_000):
        spec = {"nodeSelector": {"disk": "ssd"}} if i % 2 else None
        queue.add(pod(f"p{i}", requests=NEEDS_CPU, spec=spec))
    while (qpod := queue.pop_nowait()) is not None:
        fail(queue, qpod, "NodeAffinity" if qpod.pod.node_selector else "NodeResourcesFit")
    assert queue.pending_pods()["unschedulable"] == 10_000
    for i in range(20):
        # label changes: only the NodeAffinity pods are asked, and their selector does not match
        node_event(queue, big_node(f"n{i}"), big_node(f"n{i}", labels={"x": str(i)}))
    assert set(asked) == {"NodeAffinity"}
    assert len(asked) == 20 * 5_000
    asked.clear()
    ready = big_node("cond")
    not_ready = copy.deepcopy(ready)
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    node_event(queue, ready, not_ready)  # no plugin registered condition changes: nobody is asked
    assert asked == []
    assert queue.pending_pods()["unschedulable"] == 10_000
    clock.advance(30)
    node_event(queue, None, big_node("big"))  # fits every NodeResourcesFit pod; the NodeAffinity ones need ssd
    assert queue.pending_pods() == {"active": 5_000, "backoff": 0, "unschedulable": 5_000, "gated": 0}


# -- hot reload ------------------------------------------------------------------------------------------------
def test_reconfigure_keeps_pods_and_applies_new_plugins() -> None:
    queue, _ = new_queue()
    gated = pod("gated", gates=["g"])
    hungry = pod("hungry", requests=NEEDS_CPU)
    queue.add(gated)
    reject(queue, hungry, "NodeResourcesFit")
    queue.add(pod("active"))
    relabel = (big_node(), big_node(labels={"a": "b"}))
    node_event(queue, *relabel)
    assert queue.location(hungry.uid) == "unschedulable"

    # The new profile has no SchedulingGates and does not know NodeResourcesFit any more.
    queue.reconfigure(pre_enqueue=lambda p: SUCCESS, plugin_events=events_to_register(["NodeAffinity"]))
    assert queue.location(gated.uid) == "active"
    assert queue.location("uid-active") == "active"
    assert queue.location(hungry.uid) == "unschedulable"
    node_event(queue, *relabel)  # an unregistered rejector reacts to every event now
    assert queue.location(hungry.uid) == "backoff"
    assert len(queue) == 3


def test_reconfigure_can_gate_pods_already_gated_by_another_plugin() -> None:
    queue, _ = new_queue()
    p = pod("p", gates=["g"])
    queue.add(p)

    def hold(x: PodInfo) -> Status:
        return Status.unschedulable("held", plugin="Hold")

    queue.reconfigure(pre_enqueue=hold, plugin_events=None)
    entry = queue.get(p.uid)
    assert entry is not None
    assert (queue.location(p.uid), entry.gating_plugin) == ("gated", "Hold")
