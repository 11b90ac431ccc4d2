"""What users see of a failed attempt (reporting.py): upstream's FailedScheduling text, one event per message,
the PodScheduled condition; and the Reporter on its own, with nothing but a client, a clock and a spawn.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopf_scheduler.app import PROFILE_CHANGED
from kopf_scheduler.framework import APIError
from kopf_scheduler.reporting import Reporter
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.app_harness import FakeClient, FakeClock, drive, new_app, pending
from tests.unit.factories import make_node


def test_unschedulable_pod_gets_upstream_text_condition_and_one_event() -> None:
    client = FakeClient()
    app = new_app(client)
    for name in ("n1", "n2"):
        app.on_node_event(None, make_node(name, cpu="1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "3"}))
    drive(app)
    # DefaultPreemption (default profile) adds its part: the pod asks more than any node has (UUR everywhere).
    message = (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
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


# -- the Reporter on its own: a client, a clock, a spawn ------------------------------------------------
def reporter(client: FakeClient, clock: FakeClock, *, repeat_after: float = 10.0) -> tuple[Reporter, list[Any]]:
    spawned: list[Any] = []
    return Reporter(
        client=lambda: client, hostname="test", clock=clock, repeat_after=repeat_after, spawn=spawned.append
    ), spawned


def settle(spawned: list[Any]) -> None:
    async def go() -> None:
        while spawned:
            await spawned.pop(0)

    asyncio.run(go())


def test_failed_scheduling_repeats_only_for_a_new_message_or_after_the_repeat_interval() -> None:
    client, clock = FakeClient(), FakeClock()
    report, spawned = reporter(client, clock, repeat_after=10.0)
    pod = PodInfo.from_obj(pending("p"))
    for message, advance in [("a", 0.0), ("a", 9.0), ("b", 0.0), ("b", 10.0)]:
        clock.now += advance
        report.failed(pod, "sp", reason="Unschedulable", message=message)
    settle(spawned)
    assert [e["note"] for e in client.events] == ["a", "b", "b"]
    assert {e["reason"] for e in client.events} == {"FailedScheduling"}


def test_forgetting_a_pod_lets_its_next_failure_be_posted_and_drops_its_explanation() -> None:
    client, clock = FakeClient(), FakeClock()
    report, spawned = reporter(client, clock)
    pod = PodInfo.from_obj(pending("p"))
    report.explanations.record(pod.key, {"pod": pod.key})
    report.failed(pod, "sp", reason="Unschedulable", message="a")
    report.forget(pod.uid, pod.key)
    assert report.explanations.get(pod.key) is None
    report.failed(pod, "sp", reason="Unschedulable", message="a")
    settle(spawned)
    assert [e["note"] for e in client.events] == ["a", "a"]
    account = report.explanations.get(pod.key)  # a failure without a FitError account is still history
    assert account is not None
    assert [(h["result"], h["message"]) for h in account["history"]] == [("Unschedulable", "a")]  # a fresh start


def test_condition_is_patched_only_when_it_would_change() -> None:
    client, clock = FakeClient(), FakeClock()
    report, spawned = reporter(client, clock)
    obj = pending("p")
    obj["status"] = {
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "a"}]
    }
    pod = PodInfo.from_obj(obj)
    report.failed(pod, "sp", reason="Unschedulable", message="a")
    report.failed(pod, "sp", reason="SchedulerError", message="a")
    settle(spawned)
    assert [patch["status"]["conditions"][0]["reason"] for _, patch in client.status_patches] == ["SchedulerError"]


def test_a_failing_api_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(FakeClient):
        async def create_event(self, *, namespace: str, body: dict[str, Any]) -> Any:
            raise APIError(500, "down")

        async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> Any:
            raise APIError(404, "gone")

    report, spawned = reporter(Broken(), FakeClock())
    pod = PodInfo.from_obj(pending("p"))
    report.failed(pod, "sp", reason="Unschedulable", message="a")
    asyncio.run(report.scheduled(pod, "sp", "n1"))
    settle(spawned)
    assert "could not post FailedScheduling event for default/p" in caplog.text
    assert "could not post Scheduled event for default/p" in caplog.text
    assert "could not patch" not in caplog.text  # a pod gone meanwhile (404) is not worth a warning


def test_scheduled_event_names_the_profile_and_instance() -> None:
    client = FakeClient()
    report, _ = reporter(client, FakeClock())
    asyncio.run(report.scheduled(PodInfo.from_obj(pending("p")), "sp", "n1"))
    [event] = client.events
    assert (event["reason"], event["note"]) == ("Scheduled", "Successfully assigned default/p to n1")
    assert (event["reportingController"], event["reportingInstance"]) == ("sp", "sp-test")


def _nominated(node: str | None) -> PodInfo:
    obj = pending("p")
    if node is not None:
        obj["status"] = {"nominatedNodeName": node}
    return PodInfo.from_obj(obj)


@pytest.mark.parametrize(("current", "patched"), [(None, True), ("n2", True), ("n1", False)])
def test_nominate_patches_nominated_node_name_only_when_it_changes(current: str | None, patched: bool) -> None:
    client = FakeClient()
    rep, _ = reporter(client, FakeClock())
    asyncio.run(rep.nominate(_nominated(current), "n1"))
    assert client.status_patches == ([("p", {"status": {"nominatedNodeName": "n1"}})] if patched else [])


def test_a_failed_binding_clears_the_nomination_in_the_same_patch() -> None:
    client = FakeClient()
    rep, spawned = reporter(client, FakeClock())
    rep.failed(_nominated("n1"), "sp", reason="SchedulerError", message="boom", nominated_node="")
    settle(spawned)
    [(_, patch)] = client.status_patches
    assert patch["status"]["nominatedNodeName"] is None
    assert patch["status"]["conditions"][0]["message"] == "boom"


def test_clearing_alone_when_the_condition_is_unchanged_and_nothing_without_a_nomination() -> None:
    client = FakeClient()
    rep, spawned = reporter(client, FakeClock())
    pod = _nominated("n1")
    condition = {"type": "PodScheduled", "status": "False", "reason": "SchedulerError", "message": "boom"}
    pod.obj["status"]["conditions"] = [condition]
    rep.failed(pod, "sp", reason="SchedulerError", message="boom", nominated_node="")
    rep.failed(_nominated(None), "sp", reason="SchedulerError", message="boom", nominated_node="")
    rep.failed(pod, "sp", reason="SchedulerError", message="boom")  # a scheduling-cycle failure keeps it
    settle(spawned)
    patches = [patch for _, patch in client.status_patches]
    assert patches[0] == {"status": {"nominatedNodeName": None}}
    assert [("nominatedNodeName" in p["status"]) for p in patches] == [True, False]


@pytest.mark.parametrize(("current", "patched"), [(None, True), ("n2", True), ("n1", False)])
def test_a_preemptions_nomination_joins_the_failures_patch_only_when_it_changes(
    current: str | None, patched: bool
) -> None:
    client = FakeClient()
    rep, spawned = reporter(client, FakeClock())
    pod = _nominated(current)
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
    pod.obj["status"]["conditions"] = [condition]  # unchanged condition: only the nomination may need a patch
    rep.failed(pod, "sp", reason="Unschedulable", message="m", nominated_node="n1")
    settle(spawned)
    patches = [patch for _, patch in client.status_patches]
    assert patches == ([{"status": {"nominatedNodeName": "n1"}}] if patched else [])


def test_record_event_posts_a_plugins_event_in_the_background() -> None:
    client = FakeClient()
    rep, spawned = reporter(client, FakeClock())
    rep.record_event(_nominated(None), "sp", "Normal", "Preempted", "Preempting", "Preempted by pod u1 on node n1")
    assert client.events == []  # not before the spawned post runs
    settle(spawned)
    [event] = client.events
    assert (event["reason"], event["action"], event["note"]) == (
        "Preempted",
        "Preempting",
        "Preempted by pod u1 on node n1",
    )
    assert event["reportingInstance"] == "sp-test"


def test_a_pods_status_patches_go_out_in_order_and_its_binding_waits_for_them() -> None:
    """Upstream's API dispatcher keeps one call per pod in flight: a slow PodScheduled=False patch must land
    before the Binding (which sets PodScheduled=True), and a later patch must not overtake an earlier one."""
    gate = asyncio.Event()
    happened: list[str] = []

    class Slow(FakeClient):
        async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> Any:
            message = patch["status"]["conditions"][0]["message"]
            if message == "first":
                await gate.wait()
            happened.append(f"patched {message}")
            return {}

    async def scenario() -> None:
        tasks: list[asyncio.Task[Any]] = []
        report = Reporter(
            client=lambda: Slow(),
            hostname="test",
            clock=FakeClock(),
            repeat_after=10.0,
            spawn=lambda coro: tasks.append(asyncio.ensure_future(coro)),
        )
        pod = PodInfo.from_obj(pending("p"))
        report.failed(pod, "sp", reason="Unschedulable", message="first")
        report.failed(pod, "sp", reason="Unschedulable", message="second")

        async def bind() -> None:
            await report.status_settled(pod.uid)
            happened.append("bound")

        binding = asyncio.ensure_future(bind())
        await asyncio.sleep(0.01)
        assert happened == []  # the first patch is still on its way: neither the second nor the bind overtakes
        gate.set()
        await asyncio.gather(binding, *tasks)
        await report.status_settled("another-uid")  # nothing in flight: returns at once

    asyncio.run(scenario())
    assert happened == ["patched first", "patched second", "bound"]


@pytest.mark.parametrize(
    ("errors", "attempts", "patched"),
    [
        ([APIError(503, "unavailable"), APIError(500, "etcd"), ConnectionRefusedError()], 4, True),
        ([APIError(409, "conflict")] * 4, 4, False),  # four attempts in all, as client-go's DefaultBackoff
        ([APIError(429, "throttled")], 1, False),  # not upstream's Retriable: the next attempt's patch will do
        ([ConnectionResetError(), BrokenPipeError()], 3, True),  # ours: a lost connection, the patch sent again
        ([ValueError("not an API answer")], 1, False),
    ],
)
def test_a_status_patch_is_retried_on_upstreams_retriable_errors(
    errors: list[Exception], attempts: int, patched: bool
) -> None:
    """As upstream's ``util.PatchPodStatus``: ``retry.OnError(retry.DefaultBackoff, Retriable, ...)``."""

    class Flaky(FakeClient):
        calls = 0

        async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> Any:
            Flaky.calls += 1
            if errors:
                raise errors.pop(0)
            return await super().patch_pod_status(namespace=namespace, name=name, patch=patch)

    client = Flaky()
    app = new_app(client)
    app.on_node_event(None, make_node("n1", cpu="1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "3"}))
    drive(app)
    assert Flaky.calls == attempts
    assert bool(client.status_patches) is patched
