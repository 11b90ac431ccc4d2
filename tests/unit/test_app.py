"""SchedulerApp with a fake API client: the operator's decisions without kopf or a cluster.

These pin what users see (Binding, Scheduled and FailedScheduling events, the PodScheduled condition) and
the safety rules (invalid profiles keep the old pipeline; 409 and 404 on bind never lose or duplicate a pod).
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_scheduler.app import PROFILE_CHANGED, SchedulerApp
from kopf_scheduler.framework import APIError
from kopf_scheduler.settings import RunSettings
from tests.unit.factories import make_node, make_pod


class FakeClient:
    """Records calls; ``bind_errors`` maps pod name → APIError raised by bind."""

    def __init__(self) -> None:
        self.bindings: list[tuple[str, str, str]] = []
        self.events: list[dict[str, Any]] = []
        self.status_patches: list[tuple[str, dict[str, Any]]] = []
        self.bind_errors: dict[str, APIError] = {}
        self.lists: dict[str, list[dict[str, Any]]] = {}

    async def bind(self, *, namespace: str, name: str, uid: str, node_name: str) -> None:
        if name in self.bind_errors:
            raise self.bind_errors[name]
        self.bindings.append((namespace, name, node_name))

    async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        self.status_patches.append((name, patch))
        return {}

    async def create_event(self, *, namespace: str, body: dict[str, Any]) -> Any:
        self.events.append(body)
        return body

    async def list_all(self, path: str) -> list[dict[str, Any]]:
        return self.lists.get(path, [])

    async def list_pages(self, path: str) -> AsyncIterator[list[dict[str, Any]]]:
        """Two pages (a one-item first page), so page-by-page application is exercised."""
        items = await self.list_all(path)
        yield items[:1]
        if items[1:]:
            yield items[1:]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def new_app(client: FakeClient | None = None, clock: FakeClock | None = None) -> SchedulerApp:
    return SchedulerApp(
        settings=RunSettings(),
        client=client or FakeClient(),
        rng=random.Random(1),
        hostname="test",
        clock=clock or FakeClock(),
    )


def pending(name: str, *, scheduler: str = "sp", **kwargs: Any) -> dict[str, Any]:
    pod = make_pod(name, **kwargs)
    pod["spec"]["schedulerName"] = scheduler
    return pod


def drive(app: SchedulerApp, profile: str = "sp") -> None:
    """Run every currently poppable pod of ``profile`` through one cycle and let binds/reports finish."""

    async def go() -> None:
        runtime = app.profiles[profile]
        while (qpod := runtime.queue.pop_nowait()) is not None:
            app.schedule_one(runtime, qpod)
        await app.drain()

    asyncio.run(go())


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


def test_pods_of_other_schedulers_are_left_alone() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("theirs", scheduler="default-scheduler"))
    drive(app)
    assert client.bindings == []
    assert client.events == []


def test_unschedulable_pod_gets_upstream_text_condition_and_one_event() -> None:
    client = FakeClient()
    app = new_app(client)
    for name in ("n1", "n2"):
        app.on_node_event(None, make_node(name, cpu="1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "3"}))
    drive(app)
    message = "0/2 nodes are available: 2 Insufficient cpu."
    [event] = client.events
    assert (event["reason"], event["type"], event["note"]) == ("FailedScheduling", "Warning", message)
    [(name, patch)] = client.status_patches
    [condition] = patch["status"]["conditions"]
    assert (name, condition["type"], condition["status"], condition["reason"], condition["message"]) == (
        "big",
        "PodScheduled",
        "False",
        "Unschedulable",
        message,
    )
    # Retried with the same outcome: the event is not posted again (deduplicated by message).
    runtime = app.profiles["sp"]
    runtime.queue.move_all_to_active_or_backoff(PROFILE_CHANGED)
    runtime.queue.flush_backoff_completed()
    drive(app)
    assert len(client.events) == 1


def test_freeing_capacity_schedules_the_parked_pod() -> None:
    client = FakeClient()
    clock = FakeClock()
    app = new_app(client, clock)
    app.on_node_event(None, make_node("n1", cpu="2"))
    app.apply_profile(name="sp", spec={}, generation=1)
    blocker = make_pod("blocker", requests={"cpu": "2"}, node_name="n1")
    app.on_pod_event(None, blocker)
    app.on_pod_event("ADDED", pending("waiting", requests={"cpu": "1"}))
    drive(app)
    assert client.bindings == []
    app.on_pod_event("DELETED", blocker)
    queue = app.profiles["sp"].queue
    assert queue.pending_pods()["unschedulable"] == 0  # moved by the AssignedPod delete event
    clock.now += 60  # past any backoff
    queue.flush_backoff_completed()
    drive(app)
    assert client.bindings == [("default", "waiting", "n1")]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        pytest.param({"plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}}, "NoSuchPlugin", id="unknown"),
        pytest.param(
            {"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 500}}]},
            "hardPodAffinityWeight",
            id="out-of-range-arg",
        ),
        pytest.param({"percentageOfNodesToScore": 300}, "percentageOfNodesToScore", id="bad-percentage"),
    ],
)
def test_invalid_profile_keeps_previous_pipeline(spec: dict[str, Any], fragment: str) -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    assert app.apply_profile(name="sp", spec={}, generation=1).ready
    serving = app.profiles["sp"].framework
    outcome = app.apply_profile(name="sp", spec=spec, generation=2)
    assert not outcome.ready
    assert fragment in outcome.message
    assert "previous valid pipeline keeps serving" in outcome.message
    assert app.profiles["sp"].framework is serving
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    assert client.bindings == [("default", "p", "n1")]


def test_profile_change_swaps_scoring_live() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("empty", cpu="4", memory="8Gi"))
    app.on_node_event(None, make_node("busy", cpu="4", memory="8Gi"))
    app.on_pod_event(None, make_pod("existing", requests={"cpu": "2", "memory": "4Gi"}, node_name="busy"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("spread", requests={"cpu": "1", "memory": "1Gi"}))
    drive(app)
    most_allocated = {
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}},
        ]
    }
    assert app.apply_profile(name="sp", spec=most_allocated, generation=2).ready
    app.on_pod_event("ADDED", pending("packed", requests={"cpu": "1", "memory": "1Gi"}))
    drive(app)
    placed = {name: node for _, name, node in client.bindings}
    assert placed == {"spread": "empty", "packed": "busy"}


@pytest.mark.parametrize("status", [409, 404])
def test_bind_conflict_or_gone_drops_the_assumption_without_requeue(status: int) -> None:
    client = FakeClient()
    client.bind_errors["p"] = APIError(status, "nope")
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("p", requests={"cpu": "1"}))
    drive(app)
    queue = app.profiles["sp"].queue
    assert not any(app.cache.is_assumed(u) for u in list(app.unassigned))
    assert app.cache.table.requested.sum() == 0
    assert len(queue) == 0  # nothing requeued: the watch event decides
    assert [e["reason"] for e in client.events] == []


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


def test_bound_pod_event_confirms_assumption_and_leaves_queue() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("p", requests={"cpu": "1"})
    app.on_pod_event("ADDED", pod)
    drive(app)
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    app.on_pod_event("MODIFIED", bound)
    uid = pod["metadata"]["uid"]
    assert not app.cache.is_assumed(uid)
    assert app.cache.pod(uid) is not None
    assert uid not in app.unassigned
    assert app.cache.table.requested[:, 0].sum() == 1000


def test_reconcile_purges_objects_deleted_while_paused() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("kept"))
    app.on_node_event(None, make_node("gone"))
    ghost = make_pod("ghost", requests={"cpu": "1"}, node_name="kept")
    app.on_pod_event(None, ghost)
    client.lists["/api/v1/nodes"] = [make_node("kept")]
    asyncio.run(app.ensure_reconciled())
    assert sorted(app.cache.node_names()) == ["kept"]
    assert app.cache.pod(ghost["metadata"]["uid"]) is None
    assert app.cache.table.requested.sum() == 0


def test_reconcile_keeps_what_watches_changed_while_the_list_was_in_flight() -> None:
    """A LIST is older than watch events that arrive while it is in flight: it must not undo them."""
    app = new_app()
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    created = pending("created-during-list")
    deleted = pending("deleted-during-list")
    app.on_pod_event("ADDED", deleted)

    class RacingClient(FakeClient):
        async def list_all(self, path: str) -> list[dict[str, Any]]:
            if path == "/api/v1/pods":
                # The LIST snapshot was taken before these two watch events were delivered.
                app.on_pod_event("ADDED", created)
                app.on_pod_event("DELETED", deleted)
                return [deleted]
            if path == "/api/v1/nodes":
                return [make_node("n1")]
            return []

    app.client = RacingClient()
    asyncio.run(app.ensure_reconciled())
    assert created["metadata"]["uid"] in app.unassigned
    assert created["metadata"]["uid"] in app.profiles["sp"].queue
    assert deleted["metadata"]["uid"] not in app.unassigned
    assert deleted["metadata"]["uid"] not in app.profiles["sp"].queue


def test_reconcile_applies_pages_as_they_arrive_and_purges_only_after_the_last() -> None:
    """Page 1 is in the cache before page 2 is fetched; a known pod listed on page 2 is not purged early;
    one deleted by a watch between the pages stays deleted."""
    app = new_app()
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    first, second, third = pending("first"), pending("second"), pending("third")
    app.on_pod_event("ADDED", second)
    seen_between: list[bool] = []

    class PagedClient(FakeClient):
        async def list_pages(self, path: str) -> AsyncIterator[list[dict[str, Any]]]:
            if path == "/api/v1/nodes":
                yield [make_node("n1")]
            elif path == "/api/v1/pods":
                yield [first]
                seen_between.append(first["metadata"]["uid"] in app.unassigned)
                seen_between.append(second["metadata"]["uid"] in app.unassigned)
                app.on_pod_event("DELETED", third)  # a watch deletion racing the second page
                yield [second, third]

    app.client = PagedClient()
    asyncio.run(app.ensure_reconciled())
    assert seen_between == [True, True]
    assert set(app.unassigned) == {first["metadata"]["uid"], second["metadata"]["uid"]}
    assert len(app.profiles["sp"].queue) == 2


def test_pending_pods_metric_sums_every_profile() -> None:
    app = new_app()
    app.on_node_event(None, make_node("n1", cpu="1"))
    for profile in ("sp", "other"):
        app.apply_profile(name=profile, spec={}, generation=1)
    app.on_pod_event("ADDED", pending("a", scheduler="sp"))
    app.on_pod_event("ADDED", pending("b", scheduler="other"))
    app.on_pod_event("ADDED", pending("c", scheduler="other"))
    app._publish_pending()
    gauge = app.metrics.registry.get_sample_value
    assert gauge("scheduler_pending_pods", {"queue": "active"}) == 3
    assert gauge("scheduler_pending_pods", {"queue": "unschedulable"}) == 0


def test_managed_fields_are_not_kept() -> None:
    app = new_app()
    node = make_node("n1")
    node["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    pod = make_pod("bound", node_name="n1")
    pod["metadata"]["managedFields"] = [{"manager": "kube-scheduler"}]
    app.on_node_event(None, node)
    app.on_pod_event(None, pod)
    assert "managedFields" not in app.cache.node("n1").obj["metadata"]
    assert "managedFields" not in app.cache.pod(pod["metadata"]["uid"]).obj["metadata"]
    assert "managedFields" in pod["metadata"]  # the watch's own object is left as it was


def test_cached_objects_drop_managed_fields_without_touching_the_event() -> None:
    pod = pending("p", node_name="n1")
    pod["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    app = new_app()
    app.on_node_event(None, make_node("n1"))
    app.on_pod_event(None, pod)
    cached = app.cache.pod(pod["metadata"]["uid"])
    assert cached is not None
    assert "managedFields" not in cached.obj["metadata"]
    assert pod["metadata"]["managedFields"] == [{"manager": "kubectl"}]


def test_a_version_the_cache_holds_is_not_applied_again() -> None:
    """kopf's initial LIST repeats what the reconciling LIST applied: skipped before any parsing (the queue
    would keep an unchanged pod parked anyway); a new version of it is an update as usual."""
    app = new_app()
    app.on_node_event(None, make_node("n1", cpu="1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    big = pending("big", requests={"cpu": "3"})
    big["metadata"]["resourceVersion"] = "10"
    app.on_pod_event(None, big)
    drive(app)
    queue = app.profiles["sp"].queue
    assert queue.pending_pods()["unschedulable"] == 1
    parsed = app.unassigned[big["metadata"]["uid"]]
    app.on_pod_event(None, copy.deepcopy(big))
    assert app.unassigned[big["metadata"]["uid"]] is parsed  # not even parsed again
    assert queue.pending_pods()["unschedulable"] == 1
    smaller = copy.deepcopy(big)
    smaller["metadata"]["resourceVersion"] = "11"
    smaller["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    app.on_pod_event("MODIFIED", smaller)
    assert queue.pending_pods()["unschedulable"] == 0
