"""One pod through the scheduling and binding cycles (schedule_one.py), through SchedulerApp with a fake client.

These pin the Binding and its Scheduled event, and the safety rules of the binding cycle: 409 and 404 on bind
never lose or duplicate a pod; other bind errors requeue it with backoff and report it.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

from kopf_scheduler.framework import APIError
from tests.unit.app_harness import FakeClient, drive, new_app, pending
from tests.unit.factories import make_node


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
    app.schedule_one(runtime, qpod)
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
        app.schedule_one(runtime, qpod)
        await app.drain()

    asyncio.run(cycle())
    assert client.bindings == [("default", "p", "n1")]
