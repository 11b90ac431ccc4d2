"""ProfileHandle (live_profiles.py): what the framework Handle tells plugins about the pods the watches know, and the
services every profile shares (nominator, queues, waiting pods, events, background jobs, metrics)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.framework.status import Code
from kopf_scheduler.framework.waiting_pods import WaitingPod
from kopf_scheduler.live_profiles import BackgroundJobs, ProfileHandle
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.app_harness import FakeClient, drive, new_app
from tests.unit.app_harness import pending as pending_pod
from tests.unit.factories import make_cache, make_node, make_pod, pod_info

POD = pod_info(make_pod("web-0", uid="uid-1"))
#: The same namespace and name under another uid (deleted and re-created).
RECREATED = pod_info(make_pod("web-0", uid="uid-2"))
ELSEWHERE = pod_info(make_pod("web-0", namespace="other", uid="uid-3"))


def pending(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    pods[POD.uid] = POD


def assumed(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    cache.assume(POD, "n1")


def bound(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    cache.add_or_update_pod(make_pod("web-0", uid="uid-1", node_name="n1"))


def recreated_pending(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    pods[RECREATED.uid] = RECREATED


def recreated_bound(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    cache.add_or_update_pod(make_pod("web-0", uid="uid-2", node_name="n1"))


def other_namespace(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    pods[ELSEWHERE.uid] = ELSEWHERE
    cache.add_or_update_pod(make_pod("web-0", namespace="other", uid="uid-4", node_name="n1"))


def deleted(pods: dict[str, PodInfo], cache: ClusterCache) -> None:
    pods[POD.uid] = POD
    cache.assume(POD, "n1")
    del pods[POD.uid]  # the DELETED watch event drops it from both
    cache.remove_pod(POD.uid)


@pytest.mark.parametrize(
    ("known", "exists"),
    [
        (pending, True),
        (assumed, True),
        (bound, True),
        (recreated_pending, True),  # upstream's lister looks pods up by namespace and name
        (recreated_bound, True),
        (other_namespace, False),
        (deleted, False),
    ],
)
def test_pod_exists(known: Callable[[dict[str, PodInfo], ClusterCache], None], exists: bool) -> None:
    cache = make_cache([make_node("n1")])
    unassigned: dict[str, PodInfo] = {}
    handle = ProfileHandle("default-scheduler", client=lambda: None, cache=cache, unassigned=unassigned)
    known(unassigned, cache)
    assert handle.pod_exists(POD) is exists


# -- the Handle of a live profile, as the app builds it ----------------------------------------------------
def two_profiles(client: FakeClient | None = None) -> SchedulerApp:
    app = new_app(client)
    app.on_node_event(None, make_node("n1", cpu="1"))
    for name in ("sp", "sp2"):
        assert app.apply_profile(name=name, spec={}, generation=1).ready
    return app


def handle_of(app: SchedulerApp, profile: str = "sp") -> ProfileHandle:
    handle = app.profiles[profile].framework.handle
    assert isinstance(handle, ProfileHandle)
    return handle


def test_get_pod_answers_the_latest_watched_version() -> None:
    app = two_profiles()
    app.on_pod_event("ADDED", pending_pod("p", uid="u-p"))
    app.on_pod_event(None, make_pod("running", uid="u-r", node_name="n1"))
    handle = handle_of(app)
    pod = handle.get_pod("u-p")
    assert pod is not None
    assert pod.name == "p"
    running = handle.get_pod("u-r")
    assert running is not None
    assert running.node_name == "n1"
    app.on_pod_event("DELETED", pending_pod("p", uid="u-p"))
    assert handle.get_pod("u-p") is None


def test_every_profile_shares_the_one_nominator() -> None:
    app = two_profiles()
    assert handle_of(app).nominator is app.nominator
    assert handle_of(app, "sp2").nominator is app.nominator
    assert app.profiles["sp2"].framework.nominator is app.nominator


def test_activate_reaches_the_queue_of_the_pods_own_profile() -> None:
    app = two_profiles()
    app.on_pod_event("ADDED", pending_pod("big", scheduler="sp2", uid="u-big", requests={"cpu": "2"}))
    drive(app, "sp2")
    queue = app.profiles["sp2"].queue
    assert queue.location("u-big") == "unschedulable"
    big = app.unassigned["u-big"]
    handle_of(app, "sp").activate([big, pod_info(make_pod("unknown", uid="u-x"))])
    assert queue.location("u-big") == "active"


def test_reject_waiting_pod_looks_in_every_profile() -> None:
    app = two_profiles()
    waiting = WaitingPod(POD, {"SomePermit": 30.0})
    app.profiles["sp2"].framework.waiting_pods[POD.uid] = waiting
    handle = handle_of(app, "sp")
    assert handle.reject_waiting_pod(POD.uid) is True
    assert handle.reject_waiting_pod("nobody") is False
    status = asyncio.run(waiting.wait())
    assert status.is_rejected


def test_preempt_waiting_pod_looks_in_every_profile() -> None:
    app = two_profiles()
    waiting = WaitingPod(POD, {"SomePermit": 30.0})
    app.profiles["sp2"].framework.waiting_pods[POD.uid] = waiting
    handle = handle_of(app, "sp")
    assert handle.preempt_waiting_pod(POD.uid, "DefaultPreemption") is True
    assert handle.preempt_waiting_pod("nobody", "DefaultPreemption") is False
    status = asyncio.run(waiting.wait())
    assert (status.code, status.plugin, status.message) == (Code.ERROR, "DefaultPreemption", "preempted")


def test_record_event_posts_through_the_reporter_as_this_profile() -> None:
    client = FakeClient()
    app = two_profiles(client)
    victim = pod_info(pending_pod("victim"))

    async def scenario() -> None:  # plugins call it from the cycle, inside the event loop
        handle_of(app, "sp2").record_event(
            victim,
            event_type="Normal",
            reason="Preempted",
            action="Preempting",
            note="Preempted by pod u on node n1",
            related=pod_info(pending_pod("preemptor")),
        )
        await app.drain()

    asyncio.run(scenario())
    [event] = client.events
    assert (event["type"], event["reason"], event["action"]) == ("Normal", "Preempted", "Preempting")
    assert event["note"] == "Preempted by pod u on node n1"
    assert event["reportingController"] == "sp2"
    assert event["regarding"]["name"] == "victim"
    assert (event["related"]["kind"], event["related"]["name"]) == ("Pod", "preemptor")


def test_spawned_jobs_run_their_failures_are_logged_and_shutdown_cancels_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = two_profiles()
    handle = handle_of(app)
    done: list[str] = []
    cancelled: list[str] = []

    async def ok() -> None:
        done.append("ok")

    async def broken() -> None:
        raise RuntimeError("boom")

    async def slow() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise

    async def scenario() -> None:
        handle.spawn(ok(), name="ok")
        handle.spawn(broken(), name="preemption of default/p")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        handle.spawn(slow(), name="slow")
        await asyncio.sleep(0)
        await app.shutdown()

    with caplog.at_level(logging.ERROR, logger="kopf_scheduler"):
        asyncio.run(scenario())
    assert done == ["ok"]
    assert cancelled == ["slow"]
    assert app.jobs.pending == 0
    assert any("preemption of default/p" in r.getMessage() for r in caplog.records)


def test_background_jobs_wait_sees_jobs_spawned_by_jobs() -> None:
    jobs = BackgroundJobs()
    seen: list[int] = []

    async def second() -> None:
        seen.append(2)

    async def first() -> None:
        seen.append(1)
        jobs.spawn(second(), name="second")

    async def scenario() -> None:
        jobs.spawn(first(), name="first")
        await jobs.wait()

    asyncio.run(scenario())
    assert seen == [1, 2]


def test_plugin_metrics_are_the_apps_preemption_metrics() -> None:
    app = two_profiles()
    metrics = handle_of(app).metrics
    metrics.preemption_attempt()
    metrics.preemption_attempt()
    metrics.preemption_victims(3)
    registry = app.metrics.registry
    assert registry.get_sample_value("scheduler_preemption_attempts_total") == 2
    assert registry.get_sample_value("scheduler_preemption_victims_count") == 1
    assert registry.get_sample_value("scheduler_preemption_victims_bucket", {"le": "2.0"}) == 0
    assert registry.get_sample_value("scheduler_preemption_victims_bucket", {"le": "4.0"}) == 1
    # Upstream's buckets: 1, 2, 4, ..., 64.
    buckets = {
        s.labels["le"]
        for m in registry.collect()
        if m.name == "scheduler_preemption_victims"
        for s in m.samples
        if s.name.endswith("_bucket")
    }
    assert buckets == {"1.0", "2.0", "4.0", "8.0", "16.0", "32.0", "64.0", "+Inf"}
