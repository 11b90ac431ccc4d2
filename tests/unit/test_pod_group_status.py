"""The Coscheduling PodGroups' status (pod_group_status.py), restating scheduler-plugins v0.34.7's controller
tests (pkg/controllers/podgroup_controller_test.go: Test_Run, TestFillGroupStatusOccupied), and its keeper."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopf_scheduler.pod_group_status import LABEL, CoschedulingStatus, GroupMembers, next_status, status_patch
from tests.unit.app_harness import FakeClient

NOW = "2026-11-28T06:00:00Z"


def pod_group(phase: str, min_member: int, *, created: str = NOW, start: str = NOW) -> dict[str, Any]:
    return {
        "metadata": {"name": "pg", "namespace": "default", "creationTimestamp": created},
        "spec": {"minMember": min_member},
        "status": {"occupiedBy": "test", "scheduleStartTime": start, "phase": phase},
    }


def pods(names: list[str], phase: str, owners: list[str] = ()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    return [
        {
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "labels": {LABEL: "pg"},
                "ownerReferences": [{"name": owner} for owner in owners],
            },
            "status": {"phase": phase},
        }
        for name in names
    ]


def reconcile(group: dict[str, Any], members: list[dict[str, Any]], times: int) -> dict[str, Any]:
    """The controller reconciles once per pod event (Test_Run updates each pod's status, then reconciles)."""
    for _ in range(times):
        status = next_status(group, members)
        if status is not None:
            group = {**group, "status": status}
    return group


@pytest.mark.parametrize(
    ("names", "phase", "next_phase", "previous", "min_member", "expected", "created"),
    [
        pytest.param(["pod1", "pod2"], "Running", "", "Scheduling", 2, "Running", NOW, id="running"),
        pytest.param(["pod11", "pod21", "pod31", "pod41"], "Running", "", "Scheduling", 2, "Running", NOW, id="more"),
        pytest.param(["pod1", "pod2"], "Failed", "", "Scheduling", 2, "Failed", NOW, id="failed"),
        pytest.param(["pod1", "pod2"], "Succeeded", "", "Scheduling", 2, "Finished", NOW, id="finished"),
        pytest.param(["pod1", "pod2"], "Pending", "", "Pending", 2, "Scheduling", NOW, id="pending to scheduling"),
        pytest.param(["pod1", "pod2"], "Pending", "Succeeded", "Scheduling", 2, "Finished", NOW, id="to finished"),
        pytest.param(["pod1", "pod2"], "Running", "", "Pending", 3, "Pending", NOW, id="keeps pending"),
        pytest.param(["pod1", "pod2"], "Pending", "Succeeded", "Pending", 2, "Finished", NOW, id="pending to finished"),
        pytest.param(
            ["pod1", "pod2"], "Running", "", "Pending", 2, "Pending", "2026-11-25T06:00:00Z", id="created too long ago"
        ),
        pytest.param(["pod91", "pod92"], "Pending", "", "Pending", 3, "Pending", NOW, id="fewer pods than min"),
        pytest.param(["pod101", "pod102"], "Pending", "", "Running", 4, "Pending", NOW, id="running to pending"),
    ],
)
def test_run(
    names: list[str], phase: str, next_phase: str, previous: str, min_member: int, expected: str, created: str
) -> None:
    members = pods(names, next_phase or phase)
    group = reconcile(pod_group(previous, min_member, created=created), members, len(names))
    assert group["status"]["phase"] == expected


@pytest.mark.parametrize(
    ("owners", "expected"),
    [
        (["new-occupied"], "default/new-occupied"),
        (["new-occupied-2", "new-occupied-1"], "default/new-occupied-1,default/new-occupied-2"),
    ],
)
def test_fill_group_status_occupied(owners: list[str], expected: str) -> None:
    status = next_status(pod_group("Pending", 2), pods(["pod1", "pod2"], "Pending", owners))
    assert status is not None
    assert (status["phase"], status["occupiedBy"]) == ("Scheduling", expected)


def test_a_new_group_becomes_pending_and_counts_come_once_it_schedules() -> None:
    group = {"metadata": {"name": "pg", "namespace": "default"}, "spec": {"minMember": 2}}
    assert next_status(group, []) == {"phase": "Pending"}
    members = pods(["a", "b"], "Running")
    scheduling = next_status({**group, "status": {"phase": "Pending"}}, members)
    assert scheduling == {"phase": "Scheduling"}  # no owners: occupiedBy stays unset
    running = next_status({**group, "status": scheduling}, members)
    assert running == {"phase": "Running", "running": 2}  # zero counts are omitted, as the API type's omitempty
    assert status_patch(scheduling, running) == {"status": {"phase": "Running", "running": 2}}
    assert status_patch(running, {"phase": "Pending"}) == {"status": {"phase": "Pending", "running": None}}
    assert status_patch(running, running) is None
    assert next_status({**group, "status": {"phase": "Finished"}}, members) is None


def test_the_keeper_patches_only_when_enabled_and_only_what_changed() -> None:
    client = FakeClient()
    group = {
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"minMember": 1},
        "status": {"phase": "Pending"},
    }
    client.lists["/api/v1/pods"] = pods(["a"], "Pending", ["job"])
    groups = {("default", "pg"): group}

    async def run() -> None:
        tasks: list[asyncio.Task[None]] = []
        keeper = CoschedulingStatus(
            client=lambda: client, pod_groups=lambda: groups, spawn=lambda c: tasks.append(asyncio.ensure_future(c))
        )
        keeper.observe_pod(None, client.lists["/api/v1/pods"][0])
        keeper.flush()
        assert tasks == []  # off until a profile enables Coscheduling
        keeper.enabled = True
        keeper.flush()  # the first flush reconciles every PodGroup
        await asyncio.gather(*tasks)
        assert client.coscheduling_patches == [
            ("default", "pg", {"status": {"phase": "Scheduling", "occupiedBy": "default/job"}})
        ]
        keeper.flush()  # the write is reconciled once more (the next step; here none)
        await asyncio.gather(*tasks)
        assert len(tasks) == 2
        assert len(client.coscheduling_patches) == 1
        keeper.flush()  # nothing touched since
        assert len(tasks) == 2
        keeper.observe_pod("MODIFIED", client.lists["/api/v1/pods"][0])
        keeper.touch("default", "no-such-group")
        groups[("default", "pg")] = {**group, "status": {"phase": "Scheduling", "occupiedBy": "default/job"}}
        keeper.flush()
        await asyncio.gather(*tasks)
        assert client.coscheduling_patches[1:] == []  # Scheduling with nothing running: nothing to write
        client.lists["/api/v1/pods"][0]["status"]["phase"] = "Running"
        keeper.observe_pod("MODIFIED", client.lists["/api/v1/pods"][0])
        keeper.flush()
        await asyncio.gather(*tasks)
        assert client.coscheduling_patches[1:] == [("default", "pg", {"status": {"phase": "Running", "running": 1}})]

    asyncio.run(run())


def test_the_members_follow_the_pod_events_relabels_and_deletions() -> None:
    members = GroupMembers()
    a, b = pods(["b", "a"], "Pending", ["job"])
    assert members.observe(None, {"metadata": {"uid": "plain", "namespace": "default"}}) == (None, None)
    assert members.observe(None, a) == (None, ("default", "pg"))
    assert members.observe("ADDED", b) == (None, ("default", "pg"))
    assert [pod["metadata"]["name"] for pod in members.pods(("default", "pg"))] == ["a", "b"]  # by name
    assert members.pods(("default", "pg"))[0] == {
        "metadata": {"name": "a", "namespace": "default", "ownerReferences": [{"name": "job"}]},
        "status": {"phase": "Pending"},
    }
    bound = {**b, "spec": {"nodeName": "n1"}, "status": {"phase": "Pending", "nominatedNodeName": "n1"}}
    assert members.observe("MODIFIED", bound) == (None, None)  # nothing the controller reads: no reconcile
    running = {**bound, "status": {"phase": "Running"}}
    assert members.observe("MODIFIED", running) == (None, ("default", "pg"))
    assert members.observe("MODIFIED", running) == (None, None)
    moved = {**b, "metadata": {**b["metadata"], "labels": {LABEL: "other"}}}
    assert members.observe("MODIFIED", moved) == (("default", "pg"), ("default", "other"))
    assert members.observe("DELETED", moved) == (("default", "other"), None)
    assert members.pods(("default", "other")) == []
    unlabelled = {**a, "metadata": {**a["metadata"], "labels": {}}}
    assert members.observe("MODIFIED", unlabelled) == (("default", "pg"), None)
    assert members.pods(("default", "pg")) == []


def test_the_keeper_counts_from_the_watch_and_lists_only_for_a_group_with_a_terminal_pod() -> None:
    """The controller reads its informer's cache: so does the keeper, but where its view may be incomplete."""
    client = FakeClient()
    group = {"metadata": {"name": "pg", "namespace": "default", "resourceVersion": "1"}, "spec": {"minMember": 2}}
    groups = {("default", "pg"): group}

    async def run() -> None:
        tasks: list[asyncio.Task[None]] = []
        keeper = CoschedulingStatus(
            client=lambda: client, pod_groups=lambda: groups, spawn=lambda c: tasks.append(asyncio.ensure_future(c))
        )
        for pod in pods(["a", "b"], "Pending"):
            keeper.observe_pod(None, pod)  # seen before a profile switched the keeper on
        keeper.enabled = True
        keeper.flush()
        await asyncio.gather(*tasks)
        keeper.observe_pod("MODIFIED", pods(["a"], "Pending")[0])  # nothing a reconcile reads changed
        keeper.flush()  # but its write is reconciled again: the watch has not shown it yet, the keeper goes on from it
        await asyncio.gather(*tasks)
        assert client.list_counts == {}  # nothing asked of the API server
        assert client.coscheduling_patches == [
            ("default", "pg", {"status": {"phase": "Pending"}}),
            ("default", "pg", {"status": {"phase": "Scheduling"}}),
        ]
        group.update(metadata={**group["metadata"], "resourceVersion": "3"}, status={"phase": "Scheduling"})
        client.lists["/api/v1/pods"] = pods(["a"], "Succeeded") + pods(["b"], "Running")
        keeper.observe_pod("MODIFIED", client.lists["/api/v1/pods"][0])  # terminal: the keeper asks
        keeper.flush()
        await asyncio.gather(*tasks)
        assert client.list_counts == {"/api/v1/namespaces/default/pods": 1}
        assert client.coscheduling_patches[-1] == (
            "default",
            "pg",
            {"status": {"phase": "Running", "running": 1, "succeeded": 1}},
        )
        keeper.resync()  # a takeover: every group reconciled, from what the watch showed
        keeper.flush()
        await asyncio.gather(*tasks)
        assert len(client.coscheduling_patches) == 3

    asyncio.run(run())


def test_a_watch_that_shows_the_first_of_two_quick_writes_writes_nothing_again() -> None:
    """The bench's extra writes (1510 where 1000 were due): the keeper wrote Pending, then Scheduling (the pods
    were there) before the watch showed its first write; the watch then showed the PodGroup at the version the
    first write made, with Pending, and the keeper, no longer knowing that version, wrote Scheduling again. Each
    step is written once; a version it did not make (someone else's write) is reconciled from the cached object,
    so nothing of the last state is lost."""
    client = FakeClient()
    group: dict[str, Any] = {
        "metadata": {"name": "pg", "namespace": "default", "resourceVersion": "1"},
        "spec": {"minMember": 2},
    }
    groups = {("default", "pg"): group}
    members = pods(["a", "b"], "Pending")

    def shown(version: str, status: dict[str, Any]) -> None:
        """The watch shows the PodGroup at ``version`` (the app touches it)."""
        groups[("default", "pg")] = {**group, "metadata": {**group["metadata"], "resourceVersion": version}}
        groups[("default", "pg")]["status"] = status
        keeper.touch("default", "pg")

    tasks: list[asyncio.Task[None]] = []
    keeper = CoschedulingStatus(
        client=lambda: client, pod_groups=lambda: groups, spawn=lambda c: tasks.append(asyncio.ensure_future(c))
    )

    async def flush() -> None:
        keeper.flush()
        await asyncio.gather(*tasks)

    async def run() -> None:
        keeper.enabled = True
        await flush()  # no phase: Pending, made version w1
        for pod in members:
            keeper.observe_pod("ADDED", pod)
        await flush()  # the watch still shows version 1: on from our Pending, Scheduling (w2)
        assert [patch for _, _, patch in client.coscheduling_patches] == [
            {"status": {"phase": "Pending"}},
            {"status": {"phase": "Scheduling"}},
        ]
        shown("w1", {"phase": "Pending"})  # the watch shows our first write: it is behind our second
        await flush()
        keeper.observe_pod("MODIFIED", members[0])
        await flush()
        assert len(client.coscheduling_patches) == 2
        shown("w2", {"phase": "Scheduling"})  # caught up
        await flush()
        assert len(client.coscheduling_patches) == 2
        shown("7", {"phase": "Pending"})  # someone else's write after ours: reconciled from what it says
        await flush()
        assert client.coscheduling_patches[2:] == [("default", "pg", {"status": {"phase": "Scheduling"}})]
        keeper.observe_pod("MODIFIED", members[1])  # the watch still at 7: behind that write (w3)
        await flush()
        shown("w3", {"phase": "Scheduling"})
        await flush()
        assert len(client.coscheduling_patches) == 3

    asyncio.run(run())


COSCHEDULING_PROFILE = {
    "plugins": {
        "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
        "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
    }
}


def test_the_app_keeps_the_status_while_a_profile_enables_coscheduling() -> None:
    from tests.unit.app_harness import new_app

    client = FakeClient()
    app = new_app(client)
    assert app.apply_profile(name="default-scheduler", spec={}).ready
    assert not app.coscheduling_status.enabled
    assert app.apply_profile(name="gangs", spec=COSCHEDULING_PROFILE).ready
    assert app.coscheduling_status.enabled
    group = {"metadata": {"name": "pg", "namespace": "ns", "uid": "u"}, "spec": {"minMember": 1}}

    async def run() -> None:
        app.on_watch_event("CoschedulingPodGroup", "ADDED", group)
        app.coscheduling_status.flush()
        await app.drain()

    asyncio.run(run())
    assert client.coscheduling_patches == [("ns", "pg", {"status": {"phase": "Pending"}})]
    app.remove_profile("gangs")
    assert not app.coscheduling_status.enabled


def test_schedule_start_time_is_never_written_and_never_cleared() -> None:
    """v0.34.7 writes ``scheduleStartTime`` nowhere: its controller only reads it (the 48-hour give-up) and the
    Coscheduling plugin stopped setting it with the ``scheduled`` count (v0.26; up to v0.25 its PostBind set it
    on a group's first bound pod). A group walked from no status to Running gets none; one someone else wrote
    stays as it is (the merge patch never names it)."""
    group = pod_group("", 2)
    group["status"] = {}
    members = pods(["pod1", "pod2"], "Running", owners=["job"])
    walked = reconcile(group, members, 3)
    assert walked["status"]["phase"] == "Running"
    assert "scheduleStartTime" not in walked["status"]
    written = {**group, "status": {"phase": "Pending", "scheduleStartTime": NOW}}
    new = next_status(written, members)
    assert new is not None
    assert new["scheduleStartTime"] == NOW
    patch = status_patch(written["status"], new)
    assert patch is not None
    assert "scheduleStartTime" not in patch["status"]
