"""One pod through the scheduling and binding cycles (schedule_one.py), through SchedulerApp with a fake client.

These pin the Binding and its Scheduled event, and the safety rules of the binding cycle: 409 and 404 on bind
never lose or duplicate a pod; other bind errors requeue it with backoff and report it.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from kopf_scheduler import schedule_one
from kopf_scheduler.algorithm import SchedulingError
from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.framework import (
    APIError,
    ClusterEvent,
    Code,
    CycleState,
    PermitPlugin,
    PostFilterPlugin,
    PostFilterResult,
    Status,
)
from kopf_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from kopf_scheduler.framework.interface import NodeToStatus
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.schedule_one import ScheduleOne
from kopf_scheduler.state.objects import PERSISTENT_VOLUME, PERSISTENT_VOLUME_CLAIM, STORAGE_CLASS
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.app_harness import FakeClient, FakeClock, drive, new_app, pending
from tests.unit.factories import make_node, make_pod
from tests.unit.plugins.test_volume_binding import claim_volume, pv, pvc, storage_class


def test_binds_and_reports_scheduled() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1", cpu="2"))
    assert app.apply_profile(name="sp", spec={}, generation=1).ready
    app.on_pod_event("ADDED", pending("p1", requests={"cpu": "1"}))
    drive(app)
    assert client.bindings == [("default", "p1", "n1")]
    [event] = client.events
    assert (event["reason"], event["type"], event["action"]) == ("Scheduled", "Normal", "Binding")
    assert event["note"] == "Successfully assigned default/p1 to n1"
    assert event["reportingController"] == "sp"
    # The pod is assumed: the next cycle already sees its CPU used.
    assert app.cache.is_assumed(next(iter(app.unassigned)))


def test_bind_gone_drops_the_pod_without_requeue() -> None:
    client = FakeClient()
    client.bind_errors["p"] = APIError(404, "nope")
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("p", requests={"cpu": "1"}))
    drive(app)
    assert app.cache.table.requested.sum() == 0
    assert len(app.profiles["sp"].queue) == 0
    assert len(app.unassigned) == 0
    assert [e["reason"] for e in client.events] == []


def test_bind_conflict_drops_the_assumption_and_waits_in_backoff_unreported() -> None:
    """A 409 with the pod not bound to our node (DefaultBinder's GET): bound elsewhere, its watch event takes it
    off the queue; until then (and if no event ever comes: the pod still unbound) it waits in the backoff queue,
    so a 409 cannot lose a pod (tests/e2e/test_operator_faults.py)."""
    client = FakeClient()
    client.bind_errors["p"] = APIError(409, "already assigned")
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("p", requests={"cpu": "1"})
    app.on_pod_event("ADDED", pod)
    drive(app)
    queue = app.profiles["sp"].queue
    assert not app.cache.is_assumed(pod["metadata"]["uid"])
    assert app.cache.table.requested.sum() == 0
    assert queue.pending_pods()["backoff"] == 1
    assert [e["reason"] for e in client.events] == []
    app.on_pod_event("MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": "n1"}})  # the watch: bound elsewhere
    assert len(queue) == 0


@pytest.mark.parametrize(
    "error", [APIError(409, "already assigned"), APIError(504, "timeout"), TimeoutError("no answer")]
)
def test_a_binding_whose_answer_was_lost_counts_when_the_pod_is_bound_there(error: Exception) -> None:
    """No answer, a 5xx or a 409 may hide a Binding that took effect: DefaultBinder reads the pod, and bound to that
    node it is a success (the assumption stays: no other pod gets its room before the watch confirms it), though
    not reported as our bind (another replica may have bound it to the same node)."""
    client = FakeClient()
    client.bind_errors["p"] = error  # type: ignore[assignment]
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("p", requests={"cpu": "1"})
    client.live_pods["default", "p"] = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    app.on_pod_event("ADDED", pod)
    drive(app)
    assert app.cache.is_assumed(pod["metadata"]["uid"])
    assert app.cache.table.requested.sum() > 0
    assert len(app.profiles["sp"].queue) == 0
    assert client.events == []
    assert app.metrics.registry.get_sample_value(
        "scheduler_schedule_attempts_total", {"result": "scheduled", "profile": "sp"}
    ) in (None, 0.0)


@pytest.mark.parametrize(("error", "live_node"), [(APIError(403, "forbidden"), "n1"), (APIError(409, "x"), "n2")])
def test_a_refused_binding_or_a_pod_bound_elsewhere_is_no_success(error: APIError, live_node: str) -> None:
    client = FakeClient()
    client.bind_errors["p"] = error
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("p", requests={"cpu": "1"})
    client.live_pods["default", "p"] = {**pod, "spec": {**pod["spec"], "nodeName": live_node}}
    app.on_pod_event("ADDED", pod)
    drive(app)
    assert not app.cache.is_assumed(pod["metadata"]["uid"])
    assert "Scheduled" not in [e["reason"] for e in client.events]


def test_bind_error_requeues_with_backoff_and_reports() -> None:
    client = FakeClient()
    client.bind_errors["p"] = APIError(500, "etcd timeout")
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("p", requests={"cpu": "1"}))
    drive(app)
    assert app.cache.table.requested.sum() == 0
    assert app.profiles["sp"].queue.pending_pods()["backoff"] == 1
    [event] = client.events
    assert event["reason"] == "FailedScheduling"
    assert "etcd timeout" in event["note"]


@pytest.mark.parametrize("meanwhile", ["deleted", "bound"])
def test_a_pod_deleted_or_bound_between_pop_and_cycle_is_dropped(meanwhile: str) -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("p")
    app.on_pod_event("ADDED", pod)
    runtime = app.profiles["sp"]
    qpod = runtime.queue.pop_nowait()
    assert qpod is not None
    if meanwhile == "deleted":
        app.on_pod_event("DELETED", pod)
    else:
        app.on_pod_event("MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": "n1"}})
    app.cycles.schedule_one(runtime, qpod)
    asyncio.run(app.drain())
    assert (client.bindings, client.events, client.status_patches) == ([], [], [])
    assert len(runtime.queue) == 0
    assert not app.cache.is_assumed(pod["metadata"]["uid"])


def test_the_cycle_schedules_the_latest_version_of_the_pod() -> None:
    """A pod updated while queued is scheduled as it is now, not as it was when it was queued."""
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1", cpu="2"))
    app.apply_profile(name="sp", spec={}, generation=1)
    big = pending("p", requests={"cpu": "3"})
    big["metadata"]["resourceVersion"] = "1"
    app.on_pod_event("ADDED", big)
    runtime = app.profiles["sp"]
    qpod = runtime.queue.pop_nowait()
    assert qpod is not None
    smaller = copy.deepcopy(big)
    smaller["metadata"]["resourceVersion"] = "2"
    smaller["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    app.on_pod_event("MODIFIED", smaller)

    async def cycle() -> None:  # the binding cycle is a task on the running loop
        app.cycles.schedule_one(runtime, qpod)
        await app.drain()

    asyncio.run(cycle())
    assert client.bindings == [("default", "p", "n1")]


# -- nominatedNodeName when PreBind has work (NominatedNodeNameForExpectation) ------------------------------
def _volume_app(client: FakeClient, *, claim_bound: bool) -> SchedulerApp:
    """One node n1 with a local PV; the pod's claim is either already bound to it or WaitForFirstConsumer."""
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    claim = pvc(volume="pv1", bound=True, phase="Bound") if claim_bound else pvc()
    volume = pv("pv1", node="n1", phase="Bound" if claim_bound else "Available")
    if claim_bound:
        volume["spec"]["claimRef"] = {"namespace": "default", "name": "data", "uid": "uid-data"}
    for kind, obj in (
        (STORAGE_CLASS, storage_class("local")),
        (PERSISTENT_VOLUME, volume),
        (PERSISTENT_VOLUME_CLAIM, claim),
    ):
        app.cache.objects.apply(kind, "ADDED", obj)
    app.on_pod_event("ADDED", pending("p", spec={"volumes": [claim_volume()]}))
    return app


def test_a_pod_whose_prebind_has_work_is_nominated_to_its_node_before_prebind() -> None:
    client = FakeClient()

    async def put_fails(*, body: dict[str, Any]) -> dict[str, Any]:
        assert client.status_patches == [("p", {"status": {"nominatedNodeName": "n1"}})]  # nominated first
        raise APIError(500, "etcd timeout")

    client.replace_persistent_volume = put_fails  # type: ignore[method-assign]
    app = _volume_app(client, claim_bound=False)
    drive(app)
    assert client.bindings == []
    nominate, failure = client.status_patches
    assert nominate == ("p", {"status": {"nominatedNodeName": "n1"}})
    condition = failure[1]["status"]["conditions"][0]
    assert condition["reason"] == "SchedulerError"
    # Upstream's text is the binding cycle's status as it is (no prefix of ours).
    assert condition["message"].startswith('running PreBind plugin "VolumeBinding": ')


def test_a_pod_whose_claims_are_all_bound_is_bound_without_a_nomination() -> None:
    client = FakeClient()
    app = _volume_app(client, claim_bound=True)
    drive(app)
    assert client.bindings == [("default", "p", "n1")]
    assert client.status_patches == []


def test_a_pod_deleted_while_prebind_waits_fails_its_binding_cycle_at_the_next_poll() -> None:
    client = FakeClient()
    app = _volume_app(client, claim_bound=False)
    framework = app.profiles["sp"].framework
    (plugin,) = [p for name, p in framework.pre_bind_plugins if name == "VolumeBinding"]
    (pending_pod,) = app.unassigned.values()
    pod = pending_pod.obj
    polls: list[int] = []

    async def sleep(seconds: float) -> None:  # the PV controller never binds; the pod's deletion is watched
        polls.append(1)
        if len(polls) == 1:
            app.on_pod_event("DELETED", pod)

    plugin.binder.sleep = sleep  # type: ignore[attr-defined]
    drive(app)
    assert len(polls) == 1  # failed at the first poll after the deletion, not at bindTimeoutSeconds
    assert client.bindings == []
    assert not plugin.binder.pv_cache.is_assumed("pv1")  # type: ignore[attr-defined]
    assert not app.cache.is_assumed(pod["metadata"]["uid"])
    assert not any(app.profiles["sp"].queue.pending_pods().values())  # not requeued: it is gone
    assert "pod does not exist any more" in client.events[-1]["note"]


# -- AssignedPodDelete after a failed binding cycle (upstream handleBindingCycleError) -----------------------
def test_a_failed_binding_frees_the_node_for_pods_parked_meanwhile() -> None:
    client = FakeClient()
    client.bind_errors = {"a": APIError(500, "etcd timeout"), "b": APIError(500, "etcd timeout")}
    app = new_app(client)
    app.on_node_event(None, make_node("n1", cpu="2"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("a", requests={"cpu": "2"}))
    app.on_pod_event("ADDED", pending("b", requests={"cpu": "2"}))
    runtime = app.profiles["sp"]

    async def go() -> None:
        for _ in range(2):  # the first is assumed (its Binding in flight), the second finds no CPU and parks
            qpod = runtime.queue.pop_nowait()
            assert qpod is not None
            app.cycles.schedule_one(runtime, qpod)
        assert runtime.queue.pending_pods()["unschedulable"] == 1
        await app.drain()

    asyncio.run(go())
    counts = runtime.queue.pending_pods()
    assert counts["unschedulable"] == 0  # the parked pod heard AssignedPodDelete, not only the flush
    assert counts["backoff"] + counts["active"] == 2


Move = tuple[ClusterEvent, Any, Any, Callable[[PodInfo], bool] | None, dict[str, int]]


@pytest.mark.parametrize("rejected", [True, False])
def test_the_assigned_pod_delete_move_spares_a_rejected_pod_and_comes_after_its_requeue(
    rejected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = new_app(FakeClient())
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("p")
    app.on_pod_event("ADDED", pod)
    runtime = app.profiles["sp"]
    moves: list[Move] = []

    def move_all(event: ClusterEvent, old: Any, new: Any, pre_check: Callable[[PodInfo], bool] | None) -> None:
        moves.append((event, old, new, pre_check, runtime.queue.pending_pods()))

    failure = Status.unschedulable("rejected at Permit", plugin="Gang") if rejected else Status.as_error(OSError("x"))

    async def failed_binding(*args: Any, **kwargs: Any) -> Status:
        return failure

    monkeypatch.setattr(schedule_one, "bind_pod", failed_binding)
    cycles = ScheduleOne(
        cache=app.cache,
        unassigned=app.unassigned,
        reporter=app.reporter,
        metrics=app.metrics,
        clock=FakeClock(),
        spawn=app.spawn,
        move_all=move_all,
    )

    async def go() -> None:
        qpod = runtime.queue.pop_nowait()
        assert qpod is not None
        cycles.schedule_one(runtime, qpod)
        await app.drain()

    asyncio.run(go())
    [(event, old, new, pre_check, counts_then)] = moves
    assert (event, old["spec"]["nodeName"], new) == (EVENT_ASSIGNED_POD_DELETE, "n1", None)
    parked = counts_then["unschedulable"] + counts_then["backoff"]
    if rejected:
        assert pre_check is not None
        assert not pre_check(PodInfo.from_obj(pod))
        assert pre_check(PodInfo.from_obj(pending("q")))
        assert parked == 1  # already requeued when the event is broadcast
    else:
        assert pre_check is None
        assert parked == 0  # still in flight: the event is recorded for it


# -- PostFilter's nomination (upstream handleSchedulingFailure / updatePod) -----------------------------------
class FakePreemption(PostFilterPlugin):
    """A PostFilter answering what the test sets: ``result`` with Unschedulable and "preemption: fake"."""

    name = "FakePreemption"
    result: ClassVar[PostFilterResult | None] = None
    calls: ClassVar[int] = 0

    def post_filter(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status]:
        type(self).calls += 1
        return type(self).result, Status(Code.UNSCHEDULABLE, ("preemption: fake",))


PREEMPTING = {"plugins": {"postFilter": {"enabled": [{"name": "FakePreemption"}], "disabled": [{"name": "*"}]}}}
NO_POST_FILTER = {"plugins": {"postFilter": {"disabled": [{"name": "*"}]}}}


def preempting_app(
    client: FakeClient, result: PostFilterResult | None, spec: dict[str, Any] = PREEMPTING
) -> SchedulerApp:
    FakePreemption.result = result
    FakePreemption.calls = 0
    app = new_app(client, registry=default_registry().merged(Registry([FakePreemption])))
    app.on_node_event(None, make_node("n1", cpu="1"))
    assert app.apply_profile(name="sp", spec=spec, generation=1).ready
    return app


def nominated(name: str, node: str | None, **kwargs: Any) -> dict[str, Any]:
    pod = pending(name, **kwargs)
    if node:
        pod["status"]["nominatedNodeName"] = node
    return pod


def test_a_postfilter_nomination_enters_the_nominator_and_the_failures_status_patch() -> None:
    client = FakeClient()
    app = preempting_app(client, PostFilterResult(nominated_node_name="n1"))
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "2"}))
    drive(app)
    assert [p.name for p in app.nominator.nominated_pods_for_node("n1")] == ["big"]
    [(_, patch)] = client.status_patches
    assert patch["status"]["nominatedNodeName"] == "n1"
    assert patch["status"]["conditions"][0]["reason"] == "Unschedulable"
    [event] = client.events
    assert event["note"] == "0/1 nodes are available: 1 Insufficient cpu. preemption: fake"


def test_a_nominated_pod_holds_its_place_against_lower_priority_pods_of_every_profile() -> None:
    client = FakeClient()
    app = preempting_app(client, PostFilterResult(nominated_node_name="n1"))
    app.on_node_event(None, make_node("n1", cpu="2"))
    assert app.apply_profile(name="other", spec=NO_POST_FILTER, generation=1).ready
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "3"}, spec={"priority": 10}))
    drive(app)
    # The big pod's node now counts it: a lower-priority pod of another profile does not fit beside it.
    app.on_pod_event("ADDED", pending("low", scheduler="other", requests={"cpu": "1"}, spec={"priority": 1}))
    drive(app, "other")
    assert client.bindings == []
    # Once the nomination goes (the big pod bound elsewhere, say), the low one fits.
    [big] = [p for p in app.unassigned.values() if p.name == "big"]
    app.nominator.delete_nominated_pod_if_exists(big)
    app.profiles["other"].queue.activate(list(app.unassigned))
    drive(app, "other")
    assert client.bindings == [("default", "low", "n1")]


@pytest.mark.parametrize(
    ("result", "spec", "kept"),
    [
        (PostFilterResult(clear_nomination=True), PREEMPTING, False),  # preemption cannot help anywhere
        (None, PREEMPTING, True),  # no result: upstream's Noop, the nomination stands
        (None, NO_POST_FILTER, False),  # no PostFilter plugin: upstream clears
    ],
)
def test_a_failure_clears_or_keeps_the_nomination_as_upstream(
    result: PostFilterResult | None, spec: dict[str, Any], kept: bool
) -> None:
    client = FakeClient()
    app = preempting_app(client, result, spec)
    app.on_pod_event("ADDED", nominated("big", "n1", requests={"cpu": "2"}))
    assert app.nominator.nominated_node(next(iter(app.unassigned))) == "n1"  # the watch fed it
    drive(app)
    assert (app.nominator.nominated_node(next(iter(app.unassigned))) == "n1") is kept
    [(_, patch)] = client.status_patches
    assert ("nominatedNodeName" in patch["status"]) is not kept
    if not kept:
        assert patch["status"]["nominatedNodeName"] is None


def test_a_reserve_or_permit_rejection_runs_no_postfilter_and_clears_the_nomination() -> None:
    client = FakeClient()
    app = preempting_app(client, PostFilterResult(nominated_node_name="n1"))
    app.on_pod_event("ADDED", nominated("p", "n1", requests={"cpu": "1"}))
    runtime = app.profiles["sp"]
    rejection = Status(Code.UNSCHEDULABLE, ("no",), "SomeReserve")
    runtime.framework.run_reserve_plugins_reserve = lambda *_: rejection  # type: ignore[method-assign]
    runtime.framework.run_reserve_plugins_unreserve = lambda *_: None  # type: ignore[method-assign]
    drive(app)
    assert FakePreemption.calls == 0
    assert app.nominator.nominated_node(next(iter(app.unassigned))) is None
    [(_, patch)] = client.status_patches
    assert patch["status"]["nominatedNodeName"] is None


@pytest.mark.parametrize("error", [SchedulingError(Status.as_error(RuntimeError("snapshot"))), RuntimeError("bug")])
def test_a_scheduling_error_clears_the_nomination_as_upstream(
    error: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = FakeClient()
    app = preempting_app(client, PostFilterResult(nominated_node_name="n1"))
    app.on_pod_event("ADDED", nominated("p", "n1", requests={"cpu": "1"}))

    def broken(*_: Any, **__: Any) -> Any:
        raise error

    monkeypatch.setattr(schedule_one, "schedule_pod", broken)
    drive(app)
    assert FakePreemption.calls == 0
    assert app.nominator.nominated_node(next(iter(app.unassigned))) is None
    [(_, patch)] = client.status_patches
    assert patch["status"]["nominatedNodeName"] is None
    assert patch["status"]["conditions"][0]["reason"] == "SchedulerError"


def test_default_preemption_end_to_end_through_the_app() -> None:
    """The real plugin in the default profile: victims deleted and told, the preemptor nominated, then bound
    once the victim's deletion is watched (the API server's part played by hand)."""
    client = FakeClient()
    clock = FakeClock()
    app = new_app(client, clock)
    app.on_node_event(None, make_node("n1", cpu="4"))
    assert app.apply_profile(name="sp", spec={}, generation=1).ready
    running: dict[str, dict[str, Any]] = {}
    for name, priority, cpu in (("low", 10, "1"), ("mid", 20, "1"), ("high", 30, "2")):
        running[name] = make_pod(name, requests={"cpu": cpu}, node_name="n1", spec={"priority": priority})
        app.on_pod_event(None, running[name])
    vip = pending("vip", requests={"cpu": "1"}, spec={"priority": 1000})
    app.on_pod_event("ADDED", vip)
    drive(app)

    assert [name for _, name, _ in client.deleted] == ["low"]
    [preempted] = [e for e in client.events if e["reason"] == "Preempted"]
    assert preempted["note"] == f"Preempted by pod {vip['metadata']['uid']} on node n1"
    vip_patch = next(patch for name, patch in client.status_patches if name == "vip")
    assert vip_patch["status"]["nominatedNodeName"] == "n1"
    assert app.nominator.nominated_node(vip["metadata"]["uid"]) == "n1"
    assert app.metrics.registry.get_sample_value("scheduler_preemption_victims_count") == 1

    app.on_pod_event("DELETED", running["low"])
    clock.now += 10
    app.profiles["sp"].queue.flush_backoff_completed()
    drive(app)
    assert client.bindings == [("default", "vip", "n1")]
    assert app.nominator.count == 0  # assumed: the nomination went


class HoldAtPermit(PermitPlugin):
    """Parks every pod at Permit until the test allows it."""

    name: ClassVar[str] = "HoldAtPermit"

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        return Status(Code.WAIT), 30.0


def test_the_binding_cycle_runs_with_the_framework_that_reserved_the_pod() -> None:
    """A profile edited while a pod waits at Permit: the binding cycle still waits on the pipeline that reserved
    the pod (upstream's bindingCycle gets the cycle's framework), so the pod binds only once that Permit allows."""
    client = FakeClient()
    app = new_app(client, registry=default_registry().merged(Registry([HoldAtPermit])))
    app.on_node_event(None, make_node("n1", cpu="1"))
    spec: dict[str, Any] = {"plugins": {"permit": {"enabled": [{"name": "HoldAtPermit"}]}}}
    assert app.apply_profile(name="sp", spec=spec, generation=1).ready
    app.on_pod_event("ADDED", pending("p"))

    async def go() -> None:
        runtime = app.profiles["sp"]
        qpod = runtime.queue.pop_nowait()
        assert qpod is not None
        assert app.cycles.schedule_one(runtime, qpod) is None
        reserving = runtime.framework
        [uid] = reserving.waiting_pods
        assert app.apply_profile(name="sp", spec={**spec, "percentageOfNodesToScore": 50}, generation=2).ready
        assert runtime.framework is not reserving
        for _ in range(10):
            await asyncio.sleep(0)
        assert client.bindings == []  # still parked at the reserving pipeline's Permit
        reserving.waiting_pods[uid].allow("HoldAtPermit")
        await app.drain()
        assert client.bindings == [("default", "p", "n1")]

    asyncio.run(go())
