"""``/explain`` for a pod of a Coscheduling PodGroup (the ``scheduling.x-k8s.io/pod-group`` label): the group's
pods against minMember, the minResources verdict judged now, the members waiting at Permit with the time left,
the backoff left after a failure, beside the stored account."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.explain import format_account, format_pod_group
from kopf_scheduler.framework.waiting_pods import WaitingPod
from kopf_scheduler.plugins.coscheduling import Coscheduling
from tests.unit.app_harness import FakeClient, new_app, pending
from tests.unit.factories import make_node
from tests.unit.test_pod_group_status import COSCHEDULING_PROFILE

LABEL = "scheduling.x-k8s.io/pod-group"


def pod_group(min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "default", "uid": "pg", "resourceVersion": "1"},
        "spec": {"minMember": min_member, **spec},
        "status": {"phase": "Pending"},
    }


def cosched_app(min_member: int, members: int, **spec: Any) -> SchedulerApp:
    """A node of 4 CPUs, a profile ``sp`` of Coscheduling, the PodGroup ``pg`` and ``members`` pending pods."""
    app = new_app(FakeClient())
    app.on_node_event(None, make_node("n1", cpu="4"))
    assert app.apply_profile(name="sp", spec=COSCHEDULING_PROFILE, generation=1).ready
    app.on_watch_event("CoschedulingPodGroup", "ADDED", pod_group(min_member, **spec))
    for i in range(1, members + 1):
        app.on_pod_event("ADDED", pending(f"p{i}", uid=f"p{i}", labels={LABEL: "pg"}, requests={"cpu": "1"}))
    return app


def test_a_coscheduling_pod_is_explained_by_its_group() -> None:
    app = cosched_app(3, 2, minResources={"cpu": "8"}, scheduleTimeoutSeconds=30)
    account = app.explain("default/p1")
    assert account is not None
    group = account["podGroup"]
    assert (group["name"], group["api"], group["policy"], group["minMember"]) == (
        "default/pg",
        "scheduling.x-k8s.io/v1alpha1",
        "coscheduling",
        3,
    )
    assert group["members"]["known"] == 2
    assert group["minResources"] == "resource gap: map[cpu:{{4000 -3} {<nil>}  DecimalSI}]"
    assert format_account(account) == (
        "Pod default/p1: no scheduling attempt recorded\n"
        "\n"
        "Pod group default/pg: Coscheduling (scheduling.x-k8s.io/v1alpha1), minMember 3, phase Pending\n"
        "  Members: 2 known of minMember 3, 2 unscheduled (p1, p2), 0 assumed, 0 assigned\n"
        "  minResources: resource gap: map[cpu:{{4000 -3} {<nil>}  DecimalSI}]\n"
        "  Permit timeout: 30s (scheduleTimeoutSeconds)"
    )


def test_waiting_members_their_time_left_and_a_backoff_are_shown() -> None:
    app = cosched_app(3, 3, minResources={"cpu": "2"})
    framework = app.profiles["sp"].framework
    plugin = framework.plugins["Coscheduling"]
    assert isinstance(plugin, Coscheduling)

    async def scenario() -> dict[str, Any] | None:
        for uid in ("p1", "p2"):
            assumed = app.cache.assume(app.unassigned[uid], "n1")
            framework.waiting_pods[uid] = WaitingPod(assumed, {"Coscheduling": 60.0})
        plugin.manager.backoff("default/pg", 20)
        return app.explain("default/p3")

    account = asyncio.run(scenario())
    assert account is not None
    group = account["podGroup"]
    assert group["minResources"] == "fits"  # the group's own assumed pods do not count against it
    assert group["members"]["assumed"] == {"count": 2, "pods": ["p1", "p2"]}
    assert 18 <= group["backoffSecondsLeft"] <= 20
    waiting = group["waitingAtPermit"]
    assert [w["pod"] for w in waiting["pods"]] == ["p1", "p2"]
    assert 55 <= waiting["pods"][0]["plugins"][0]["secondsLeft"] <= 60
    lines = format_pod_group(group).splitlines()
    assert lines[1] == "  Members: 3 known of minMember 3, 1 unscheduled (p3), 2 assumed (p1, p2), 0 assigned"
    assert lines[2] == "  minResources: fits"
    assert lines[3].startswith("  Backed off after a failure: ")
    assert lines[4] == "  Waiting at Permit: 2 pod(s)"


def test_a_pod_of_no_group_gets_no_group_section() -> None:
    app = cosched_app(1, 0)
    app.on_pod_event("ADDED", pending("solo", uid="solo"))
    assert app.explain("default/solo") is None


def test_the_example_binds_its_group_together() -> None:
    """``examples/coscheduling.yaml`` as the operator would see it applied: nothing binds before the third pod is
    there, then all three bind."""
    import yaml

    from tests.unit.test_gang_app import run, schedule_all

    example = Path(__file__).parents[2] / "examples" / "coscheduling.yaml"
    docs = list(yaml.safe_load_all(example.read_text()))
    assert [doc["kind"] for doc in docs] == ["SchedulerProfile", "PodGroup", "Pod", "Pod", "Pod"]
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    for doc in docs:
        meta = doc["metadata"]
        meta.update(uid=f"uid-{meta['name']}", resourceVersion="1", creationTimestamp="2026-11-28T06:00:00Z")
        if doc["kind"] == "SchedulerProfile":
            assert app.apply_profile(name=meta["name"], spec=doc["spec"], generation=1).ready
        elif doc["kind"] == "PodGroup":
            app.on_watch_event("CoschedulingPodGroup", "ADDED", doc)
    runtime = app.profiles["coscheduling"]

    async def scenario() -> None:
        for doc in docs[2:4]:
            app.on_pod_event("ADDED", doc)
        schedule_all(app, runtime)  # two of three: PreFilter refuses both
        await app.drain()
        assert client.bindings == []
        app.on_pod_event("ADDED", docs[4])
        for _ in range(3):  # the Pod/Add event moves the parked two; each cycle places one, the third allows all
            schedule_all(app, runtime)
            await asyncio.sleep(0)
        await app.drain()

    run(scenario)
    assert sorted(name for _, name, _ in client.bindings) == ["pi-launcher", "pi-worker-0", "pi-worker-1"]
