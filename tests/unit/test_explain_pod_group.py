"""``/explain`` for a pod of a pod group: the group's live state (policy, members, who waits at Permit and how
long is left, the PreEnqueue verdict holding the pod) beside the stored account, or alone when no cycle ran."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.explain import format_account, format_pod_group, pod_group_section
from kopf_scheduler.framework.status import Status
from kopf_scheduler.framework.waiting_pods import WaitingPod
from kopf_scheduler.plugins.gang_scheduling import waiting_for_pod_group_message
from kopf_scheduler.web import build_app
from tests.unit.app_harness import pending
from tests.unit.factories import make_node
from tests.unit.test_gang_app import GANG, TO_APPEAR, gang_app, member, pod_group


def waiting_gang(min_count: int, members: int) -> SchedulerApp:
    """A profile ``sp`` of GangScheduling, a node, the PodGroup ``pg`` and ``members`` pending members p1, p2, ..."""
    app, _ = gang_app()
    app.on_node_event(None, make_node("n1", cpu="8"))
    app.apply_profile(name="sp", spec=GANG, generation=1)
    app.on_watch_event("PodGroup", "ADDED", pod_group("pg", min_count))
    for i in range(1, members + 1):
        app.on_pod_event("ADDED", member(f"p{i}", requests={"cpu": "1"}))
    return app


def test_a_pod_held_at_pre_enqueue_is_explained_by_its_group_alone() -> None:
    app = waiting_gang(3, 2)
    assert app.explanations.get("default/p1") is None  # no cycle ran: nothing stored
    account = app.explain("default/p1")
    assert account is not None
    assert set(account) == {"pod", "podGroup"}
    group = account["podGroup"]
    assert (group["name"], group["policy"], group["minCount"]) == ("pg", "gang", 3)
    assert group["members"] == {
        "known": 2,
        "unscheduled": {"count": 2, "pods": ["p1", "p2"]},
        "assumed": {"count": 0, "pods": []},
        "assigned": {"count": 0, "pods": []},
    }
    assert group["preEnqueue"] == {"plugin": "GangScheduling", "message": TO_APPEAR}
    assert group["waitingAtPermit"] == {"count": 0, "pods": []}
    assert format_account(account) == (
        "Pod default/p1: no scheduling attempt recorded\n"
        "\n"
        "Pod group pg: gang, minCount 3\n"
        "  Members: 2 known, 2 unscheduled (p1, p2), 0 assumed, 0 assigned\n"
        f"  Held at PreEnqueue by GangScheduling: {TO_APPEAR}"
    )


def test_a_missing_pod_group_is_said_with_the_pre_enqueue_message() -> None:
    app, _ = gang_app()
    app.apply_profile(name="sp", spec=GANG, generation=1)
    app.on_pod_event("ADDED", member("p1"))
    account = app.explain("default/p1")
    assert account is not None
    group = account["podGroup"]
    assert (group["policy"], group["message"]) == (None, "PodGroup not found")
    assert group["members"]["known"] == 1
    assert group["preEnqueue"] == {"plugin": "GangScheduling", "message": waiting_for_pod_group_message("pg")}
    assert format_pod_group(group).splitlines()[0] == "Pod group pg: PodGroup not found"


def test_assumed_members_waiting_at_permit_show_since_when_and_the_time_left() -> None:
    app = waiting_gang(3, 3)
    framework = app.profiles["sp"].framework

    async def scenario() -> dict[str, Any] | None:
        # What the binding cycle does when Permit says Wait: the pod is assumed, then held in waiting_pods.
        for uid in ("p1", "p2"):
            assumed = app.cache.assume(app.unassigned[uid], "n1")
            framework.waiting_pods[uid] = WaitingPod(assumed, {"GangScheduling": 300.0})
        return app.explain("default/p3")

    before = time.time()
    account = asyncio.run(scenario())
    assert account is not None
    group = account["podGroup"]
    assert group["members"]["assumed"] == {"count": 2, "pods": ["p1", "p2"]}
    assert group["members"]["unscheduled"] == {"count": 1, "pods": ["p3"]}
    assert "preEnqueue" not in group  # the quorum is known: p3 is not held
    waiting = group["waitingAtPermit"]
    assert waiting["count"] == 2
    assert [w["pod"] for w in waiting["pods"]] == ["p1", "p2"]
    [plugin] = waiting["pods"][0]["plugins"]
    assert plugin["plugin"] == "GangScheduling"
    assert 295 <= plugin["secondsLeft"] <= 300
    assert waiting["pods"][0]["since"] >= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(before))
    lines = format_pod_group(group).splitlines()
    assert lines[1] == "  Members: 3 known, 1 unscheduled (p3), 2 assumed (p1, p2), 0 assigned"
    assert lines[2] == "  Waiting at Permit: 2 pod(s)"
    assert lines[3].startswith("    p1 since ")
    assert " left (until " in lines[3]
    assert "GangScheduling 4m5" in lines[3] or "GangScheduling 5m0s" in lines[3]


def test_the_group_section_follows_a_stored_account_and_names_a_few_members() -> None:
    app = waiting_gang(2, 7)
    app.explanations.record(  # as a failed cycle records it
        "default/p1", {"pod": "default/p1", "profile": "sp", "time": "T", "result": "Unschedulable", "message": "m"}
    )
    account = app.explain("default/p1")
    assert account is not None
    assert account["result"] == "Unschedulable"
    assert account["podGroup"]["members"]["unscheduled"] == {"count": 7, "pods": ["p1", "p2", "p3", "p4", "p5"]}
    text = format_account(account)
    assert "  Members: 7 known, 7 unscheduled (p1, p2, p3, p4, p5, +2 more), 0 assumed, 0 assigned" in text
    assert text.index("Pod group pg") < text.index("History (last 1 attempt(s)")


def test_a_basic_policy_and_a_plain_pod() -> None:
    section = pod_group_section("pg", {"spec": {"schedulingPolicy": {"basic": {}}}}, None)
    assert (section["policy"], section["members"]["known"]) == ("basic", 0)
    assert format_pod_group(section).splitlines()[0] == "Pod group pg: basic"
    held = pod_group_section("pg", None, None, pre_enqueue=Status.unschedulable("gated", plugin="SchedulingGates"))
    assert held["preEnqueue"] == {"plugin": "SchedulingGates", "message": "gated"}

    app = waiting_gang(3, 1)
    app.on_pod_event("ADDED", pending("plain"))
    assert app.explain("default/plain") is None  # no group, no account: the 404 as before
    app.explanations.record("default/plain", {"pod": "default/plain", "result": "Unschedulable", "message": "m"})
    assert app.explain("default/plain") == app.explanations.get("default/plain")


def test_the_endpoint_answers_for_a_gang_pod_without_an_account() -> None:
    app = waiting_gang(3, 2)

    async def main() -> tuple[int, Any, int]:
        runner = web.AppRunner(build_app(registry=CollectorRegistry(), explain=app.explain))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/explain/default/p2") as response:
                    status, body = response.status, await response.json()
                async with session.get(f"http://127.0.0.1:{port}/explain/default/nobody") as response:
                    missing = response.status
        finally:
            await runner.cleanup()
        return status, body, missing

    status, body, missing = asyncio.run(main())
    assert status == 200
    assert body["pod"] == "default/p2"
    assert body["podGroup"]["preEnqueue"]["message"] == TO_APPEAR
    assert body["podGroup"]["members"]["known"] == 2
    assert missing == 404
