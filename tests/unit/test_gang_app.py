"""GangScheduling end to end in the app: a profile enables it, the event handlers keep the pod groups' members
(upstream ``eventhandlers.go``'s Add/Update/RemovePodGroupMember) and nudge the workload-aware queues on each
new member (``EventUnscheduledPodAdd``), the pods wait at PreEnqueue, then the pod-group cycle places the whole
gang at once; a gang that cannot fit binds and holds nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from kopf_scheduler.app import WORKLOAD_API_NOT_SERVED, SchedulerApp
from kopf_scheduler.live_profiles import ProfileRuntime
from kopf_scheduler.queue import GATED
from tests.unit.app_harness import FakeClient, FakeClock, apply_manifests, new_app, pending
from tests.unit.factories import make_node

GANG = {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}
API = "/apis/scheduling.k8s.io/v1alpha2"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gang-scheduling.yaml"
TO_APPEAR = "waiting for minCount pods from a gang to appear in scheduling queue"


def pod_group(name: str, min_count: int, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": f"pg-{name}", "resourceVersion": "1"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def member(name: str, group: str = "pg", **kwargs: Any) -> dict[str, Any]:
    return pending(name, uid=name, spec={"schedulingGroup": {"podGroupName": group}}, **kwargs)


def gang_app(*, served: bool = True, clock: FakeClock | None = None) -> tuple[SchedulerApp, FakeClient]:
    """An app whose API server serves the workload API (or not), discovered, with a profile ``sp`` of GangScheduling."""
    client = FakeClient()
    if served:
        client.discovery[API] = {"workloads", "podgroups"}
    app = new_app(client, clock)
    asyncio.run(app.watch.discover())
    return app, client


class TimeTravelLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock the test moves on (Permit's five-minute timer fires at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=TimeTravelLoop) as runner:
        runner.run(scenario())


def schedule_all(app: SchedulerApp, runtime: ProfileRuntime) -> None:
    """One scheduling cycle for every pod poppable now (binding cycles go on as tasks)."""
    while (qpod := runtime.queue.pop_nowait()) is not None:
        app.cycles.schedule_one(runtime, qpod)


def pre_enqueue_message(app: SchedulerApp, runtime: ProfileRuntime, uid: str) -> str:
    pod = app.unassigned.get(uid)
    assert pod is not None
    return runtime.pre_enqueue(pod).message


def test_a_gang_of_three_waits_at_pre_enqueue_then_binds_together_in_one_pod_group_cycle() -> None:
    app, client = gang_app()
    app.on_node_event(None, make_node("n1", cpu="8"))
    outcome = app.apply_profile(name="sp", spec=GANG, generation=1)
    assert outcome.ready
    assert WORKLOAD_API_NOT_SERVED not in outcome.message
    runtime = app.profiles["sp"]
    assert runtime.framework.workload_aware
    app.on_watch_event("PodGroup", "ADDED", pod_group("pg", 3))

    async def scenario() -> None:
        for name in ("p1", "p2"):
            app.on_pod_event("ADDED", member(name, requests={"cpu": "1"}))
        assert [runtime.queue.location(uid) for uid in ("p1", "p2")] == [GATED, GATED]
        assert pre_enqueue_message(app, runtime, "p1") == TO_APPEAR
        app.on_pod_event("ADDED", member("p3", requests={"cpu": "1"}))  # the third: the nudge moves the first two
        assert [runtime.queue.location(uid) for uid in ("p1", "p2", "p3")] == ["active"] * 3

        qpod = runtime.queue.pop_nowait()  # one pop: the pod-group cycle takes the other two members with it
        assert qpod is not None
        app.cycles.schedule_one(runtime, qpod)
        assert runtime.queue.pop_nowait() is None
        await app.drain()

    run(scenario)
    assert sorted(name for _, name, _ in client.bindings) == ["p1", "p2", "p3"]
    assert not app.profiles["sp"].framework.waiting_pods
    assert [e["reason"] for e in client.events] == ["Scheduled"] * 3  # nothing reported while they waited
    [(_, name, patch)] = client.pod_group_patches
    [condition] = patch["status"]["conditions"]
    assert (name, condition["type"], condition["status"]) == ("pg", "PodGroupScheduled", "True")


def test_a_gang_that_cannot_fit_holds_nothing_and_is_requeued_whole() -> None:
    """Two of three fit: the pod-group cycle places none (upstream 1.36), so nothing is assumed, reserved or held
    at Permit, and all three go back to the queue with their own verdicts."""
    app, client = gang_app()
    app.on_node_event(None, make_node("n1", cpu="2"))
    app.apply_profile(name="sp", spec=GANG, generation=1)
    runtime = app.profiles["sp"]
    app.on_watch_event("PodGroup", "ADDED", pod_group("pg", 3))
    for name in ("p1", "p2", "p3"):
        app.on_pod_event("ADDED", member(name, requests={"cpu": "1"}))

    async def scenario() -> None:
        qpod = runtime.queue.pop_nowait()  # one pod-group cycle for the three
        assert qpod is not None
        app.cycles.schedule_one(runtime, qpod)
        await app.drain()

    run(scenario)
    assert client.bindings == []
    assert int(app.cache.table.pod_count.sum()) == 0
    assert not runtime.framework.waiting_pods
    assert all(app.cache.pod(uid) is None and not app.cache.is_assumed(uid) for uid in ("p1", "p2", "p3"))
    assert app.cache.pod_groups.get("default", "pg").scheduled_pods_count() == 0
    assert all(runtime.queue.location(uid) is not None for uid in ("p1", "p2", "p3"))
    assert sorted(e["regarding"]["name"] for e in client.events if e["reason"] == "FailedScheduling") == [
        "p1",
        "p2",
        "p3",
    ]
    [(_, _, patch)] = client.pod_group_patches
    [condition] = patch["status"]["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")


def test_pods_wait_for_their_pod_group_which_moves_them_when_added() -> None:
    app, _ = gang_app()
    app.on_node_event(None, make_node("n1", cpu="8"))
    app.apply_profile(name="sp", spec=GANG, generation=1)
    runtime = app.profiles["sp"]
    for name in ("p1", "p2"):
        app.on_pod_event("ADDED", member(name))
    assert pre_enqueue_message(app, runtime, "p1") == (
        'waiting for pods\'s pod group "pg" to appear in scheduling queue'
    )
    app.on_watch_event("PodGroup", "ADDED", pod_group("other", 1))  # another group's: nobody moves
    assert [runtime.queue.location(uid) for uid in ("p1", "p2")] == [GATED, GATED]
    app.on_watch_event("PodGroup", "ADDED", pod_group("pg", 2))  # PodGroup/Add, the hint says Queue
    assert [runtime.queue.location(uid) for uid in ("p1", "p2")] == ["active", "active"]


def test_without_the_workload_api_the_profile_says_so_and_stays_ready() -> None:
    app, _ = gang_app(served=False)
    assert not app.workload_api_served
    outcome = asyncio.run(app.profile_changed(name="sp", spec=GANG, generation=1))
    assert outcome.ready
    assert outcome.message == "pipeline built from generation 1" + WORKLOAD_API_NOT_SERVED
    assert asyncio.run(app.profile_changed(name="plain", spec={}, generation=1)).message == (
        "pipeline built from generation 1"
    )
    app.on_pod_event("ADDED", member("p1"))
    runtime = app.profiles["sp"]
    assert runtime.queue.location("p1") == GATED
    assert pre_enqueue_message(app, runtime, "p1") == (
        'waiting for pods\'s pod group "pg" to appear in scheduling queue'
    )


def test_members_follow_the_pending_pods_of_live_profiles() -> None:
    """Upstream Add/Update/RemovePodGroupMember for the pods of its profiles: a profile created later adopts its
    pending pods into their groups before any PreEnqueue counts them; one removed drops them; a deletion too."""
    app, _ = gang_app()
    app.on_node_event(None, make_node("n1", cpu="8"))
    app.on_watch_event("PodGroup", "ADDED", pod_group("pg", 3))
    for name in ("p1", "p2", "p3"):
        app.on_pod_event("ADDED", member(name))
    app.on_pod_event("ADDED", member("stranger", scheduler="nobody"))
    assert len(app.cache.pod_groups) == 0  # no profile of ours: no member

    app.apply_profile(name="sp", spec=GANG, generation=1)
    state = app.cache.pod_groups.get("default", "pg")
    assert state.all_pod_uids() == {"p1", "p2", "p3"}
    runtime = app.profiles["sp"]
    assert [runtime.queue.location(uid) for uid in ("p1", "p2", "p3")] == ["active"] * 3  # all counted at once

    changed = member("p1")
    changed["metadata"]["labels"] = {"new": "label"}
    changed["metadata"]["resourceVersion"] = "2"
    app.on_pod_event("MODIFIED", changed)
    assert app.cache.pod_groups.get("default", "pg").all_pods["p1"].labels == {"new": "label"}
    app.on_pod_event("DELETED", member("p3"))
    assert app.cache.pod_groups.get("default", "pg").all_pod_uids() == {"p1", "p2"}

    app.remove_profile("sp")
    assert len(app.cache.pod_groups) == 0


def test_only_workload_aware_queues_are_nudged_and_only_by_pods_of_a_group(monkeypatch: Any) -> None:
    app, _ = gang_app()
    app.apply_profile(name="sp", spec=GANG, generation=1)
    app.apply_profile(name="plain", spec={}, generation=1)
    moves: list[tuple[str, str]] = []
    for name, runtime in app.profiles.items():

        def record(event: Any, old: Any, new: Any, *, pre_check: Any = None, profile: str = name) -> None:
            moves.append((profile, event.label))

        monkeypatch.setattr(runtime.queue, "move_all_to_active_or_backoff", record)
    app.on_pod_event("ADDED", pending("ordinary"))
    app.on_pod_event("ADDED", pending("ordinary-of-plain", scheduler="plain"))
    assert moves == []
    app.on_pod_event("ADDED", member("m1", scheduler="plain"))
    app.on_pod_event("ADDED", member("m2"))
    assert moves == [("sp", "UnschedulablePodAdd"), ("sp", "UnschedulablePodAdd")]


def test_a_plain_profile_ignores_scheduling_groups() -> None:
    app, client = gang_app()
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    assert not app.profiles["sp"].framework.workload_aware
    app.on_watch_event("PodGroup", "ADDED", pod_group("pg", 3))
    app.on_pod_event("ADDED", member("lonely"))

    async def scenario() -> None:
        schedule_all(app, app.profiles["sp"])
        await app.drain()

    run(scenario)
    assert client.bindings == [("default", "lonely", "n1")]


def test_the_example_binds_its_gang() -> None:
    """``examples/gang-scheduling.yaml`` as the operator would see it applied: every pod binds, together."""
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    assert [doc["kind"] for doc in docs] == ["SchedulerProfile", "PodGroup", "Pod", "Pod", "Pod"]
    app, client = gang_app()
    app.on_node_event(None, make_node("n1"))
    apply_manifests(app, docs)
    runtime = app.profiles["gang-scheduling"]

    async def scenario() -> None:
        schedule_all(app, runtime)
        await app.drain()

    run(scenario)
    assert sorted(name for _, name, _ in client.bindings) == ["training-0", "training-1", "training-2"]
