"""The renew-deadline gate inside the app (``standing.py`` wired by ``app.py`` and ``schedule_one.py``): a bind the
gate refuses loses no pod, writes nothing and posts no event; the loop runs no cycle while the gate is shut."""

from __future__ import annotations

import asyncio
import random

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.settings import RunSettings
from kopf_scheduler.standing import PeeringView
from tests.unit.app_harness import FakeClient, FakeClock, pending
from tests.unit.factories import make_node

LEADING = PeeringView(leading=True, others_alive=False)


def _app(client: FakeClient, clock: FakeClock) -> SchedulerApp:
    app = SchedulerApp(
        settings=RunSettings(), client=client, rng=random.Random(1), hostname="test", clock=clock, identity="me"
    )
    assert app.apply_profile(name="sp", spec={}).ready
    app.on_node_event(None, make_node("n1", cpu="4"))
    return app


def test_a_bind_refused_by_the_gate_queues_the_pod_again_with_no_write_and_no_event() -> None:
    client, clock = FakeClient(), FakeClock()
    app = _app(client, clock)
    pod = pending("p1", requests={"cpu": "1"})
    app.on_pod_event("ADDED", pod)
    uid = pod["metadata"]["uid"]
    app.standing.renewed(clock(), LEADING)
    runtime = app.profiles["sp"]

    async def cycle_then_lapse() -> None:
        qpod = runtime.queue.pop_nowait()
        assert qpod is not None
        app.cycles.schedule_one(runtime, qpod)  # assumed; its binding cycle is spawned, not run yet
        assert app.cache.is_assumed(uid)
        clock.now += 11  # frozen past the renew deadline before the Binding goes out
        await app.drain()

    asyncio.run(cycle_then_lapse())
    assert client.bindings == []
    assert client.events == []
    assert client.status_patches == []
    assert not app.cache.is_assumed(uid)
    assert runtime.queue.location(uid) is not None  # back in a queue, not lost

    # Standing confirmed again and the view refreshed: the same pod binds.
    clock.now += 30  # past its backoff
    runtime.queue.flush_backoff_completed()
    app.standing.renewed(clock(), LEADING)
    assert not app.standing.may_bind()  # the view first
    app.standing.refreshed(app.standing.epoch)

    async def cycle() -> None:
        qpod = runtime.queue.pop_nowait()
        assert qpod is not None
        app.cycles.schedule_one(runtime, qpod)
        await app.drain()

    asyncio.run(cycle())
    assert client.bindings == [("default", "p1", "n1")]


def test_the_loop_runs_no_cycle_while_the_standing_is_not_confirmed() -> None:
    client, clock = FakeClient(), FakeClock()
    app = _app(client, clock)
    pod = pending("p1", requests={"cpu": "1"})
    app.on_pod_event("ADDED", pod)
    client.lists = {"/api/v1/nodes": [make_node("n1", cpu="4")], "/api/v1/pods": [pod]}  # the loop's first LIST
    stop = False

    async def run_briefly() -> None:
        loop = asyncio.create_task(app.run_profile("sp", stopped=lambda: stop, poll=0.01))
        await asyncio.sleep(0.2)
        assert client.bindings == []
        assert len(app.profiles["sp"].queue) == 1  # still queued: never popped
        app.standing.renewed(clock(), LEADING)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if client.bindings:
                break
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await app.drain()

    asyncio.run(run_briefly())
    assert client.bindings == [("default", "p1", "n1")]


def test_a_lagging_watch_event_older_than_the_listed_pod_is_ignored() -> None:
    """After the refresh LIST, a stream still replaying older events (the pod pending before the other replica
    bound it) must not undo the LIST: the pod stays on its node, its requests counted."""
    client, clock = FakeClient(), FakeClock()
    app = _app(client, clock)
    pod = pending("p1", requests={"cpu": "1"})
    pod["metadata"]["resourceVersion"] = "5"
    app.on_pod_event("ADDED", pod)
    bound = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "9"}, "spec": {**pod["spec"], "nodeName": "n1"}}
    app.on_pod_event(None, bound)  # the refresh LIST
    uid = pod["metadata"]["uid"]
    assert app.cache.pod(uid) is not None
    app.on_pod_event("MODIFIED", pod)  # the lagging stream's older version (pending, resourceVersion 5)
    assert app.cache.pod(uid) is not None
    assert uid not in app.unassigned
    app.on_pod_event("DELETED", pod)  # a deletion always counts
    assert app.cache.pod(uid) is None
