"""A feasible group keeps its trial placement (``PodGroupCycle._default_algorithm``'s ``keep_feasible``) instead of
undoing it and placing every member again, as upstream's cycle does: the two must end the same. The same cluster and
gangs run both ways; everything users and the next cycles see is compared."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.schedule_one_pod_group import PodGroupCycle, QueuedPodGroupInfo
from tests.unit.app_harness import FakeClient
from tests.unit.factories import make_node
from tests.unit.test_gang_app import GANG, gang_app, member, pod_group, run

#: (gang, minCount, members, cpu of each, priority)
GANGS = [
    ("fits", 3, 3, "1", 0),
    ("quorum-of-three", 2, 3, "2", 0),
    ("too-big", 4, 4, "3", 0),
    ("small", 2, 2, "1", 0),
    ("urgent", 2, 2, "3", 1000),
]


def bound_pod(name: str, node: str, cpu: str) -> dict[str, Any]:
    pod = member(name, group="none", requests={"cpu": cpu})
    pod["spec"] = {**pod["spec"], "nodeName": node, "priority": 0}
    pod["spec"].pop("schedulingGroup", None)
    pod["status"] = {"phase": "Running"}
    return pod


def outcome(keep: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if not keep:
        original = PodGroupCycle.decide

        def decide_without_keeping(
            self: PodGroupCycle, framework: Any, group: QueuedPodGroupInfo, *, keep_trial: bool = False
        ) -> Any:
            return original(self, framework, group, keep_trial=False)

        monkeypatch.setattr(PodGroupCycle, "decide", decide_without_keeping)
    app, client = gang_app()
    for i in range(4):
        app.on_node_event(None, make_node(f"n{i}", cpu="4"))
    app.on_pod_event(None, bound_pod("filler", "n3", "2"))
    assert app.apply_profile(name="sp", spec=GANG, generation=1).ready
    runtime = app.profiles["sp"]
    for gang, min_count, members, cpu, priority in GANGS:
        app.on_watch_event("PodGroup", "ADDED", pod_group(gang, min_count))
        for k in range(members):
            pod = member(f"{gang}-{k}", group=gang, requests={"cpu": cpu})
            pod["spec"]["priority"] = priority
            app.on_pod_event("ADDED", pod)

    async def scenario() -> None:
        for _ in range(len(GANGS) * 2):  # each gang once, and again where something woke it
            qpod = runtime.queue.pop_nowait()
            if qpod is None:
                break
            app.cycles.schedule_one(runtime, qpod)
            await app.drain()

    run(scenario)
    monkeypatch.undo()
    return observed(app, client)


def observed(app: SchedulerApp, client: FakeClient) -> dict[str, Any]:
    groups = {}
    for gang, *_ in GANGS:
        state = app.cache.pod_groups.get("default", gang)
        groups[gang] = (
            None if state is None else (sorted(state.assumed), sorted(state.assigned), sorted(state.unscheduled))
        )
    return {
        "bindings": sorted(client.bindings),
        "events": sorted((e["regarding"]["name"], e["reason"], e.get("note", "")) for e in client.events),
        "pod status": sorted((name, _timeless(patch)) for name, patch in client.status_patches),
        "pod groups": sorted(
            (name, repr(patch["status"]["conditions"][0]["message"])) for _, name, patch in client.pod_group_patches
        ),
        "assumed": sorted(uid for uid in (p.uid for p in app.cache.pods()) if app.cache.is_assumed(uid)),
        "requested": app.cache.table.requested.tolist(),
        "group states": groups,
        "queued": sorted((uid, app.profiles["sp"].queue.location(uid)) for uid in app.unassigned),
    }


def _timeless(patch: dict[str, Any]) -> str:
    return re.sub(r"'last\w*Time': '[^']*'", "", repr(patch))


def test_keeping_the_trial_ends_as_undoing_and_placing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = outcome(True, monkeypatch)
    again = outcome(False, monkeypatch)
    assert kept["bindings"], "some gang must bind, or the comparison says nothing"
    assert any(reason == "FailedScheduling" for _, reason, _ in kept["events"]), "some gang must fail as well"
    for key in kept:
        assert kept[key] == again[key], key


def test_kept_trials_of_members_that_do_not_go_on_are_undone_last_first() -> None:
    from kopf_scheduler.algorithm import ScheduleResult
    from kopf_scheduler.framework import CycleState, Status
    from kopf_scheduler.framework.status import SUCCESS, Code
    from kopf_scheduler.schedule_one_pod_group import AlgorithmResult, PodGroupAlgorithmResult, _undo_trials_not_kept

    undone: list[str] = []

    def kept(name: str, status: Status) -> AlgorithmResult:
        result = AlgorithmResult(qpod=None, state=CycleState(), status=status)  # type: ignore[arg-type]
        result.result = ScheduleResult("n1", 1, 1, 0, None)  # type: ignore[arg-type]
        result.undo_trial = lambda: undone.append(name)
        return result

    rejected = Status(Code.UNSCHEDULABLE, ("needs preemption",))
    going = PodGroupAlgorithmResult(SUCCESS, [kept("a", SUCCESS), kept("b", rejected), kept("c", SUCCESS)])
    _undo_trials_not_kept(going)
    assert undone == ["b"]
    assert [r.undo_trial is not None for r in going.pod_results] == [True, False, True]
    undone.clear()
    failed = PodGroupAlgorithmResult(rejected, [kept("a", SUCCESS), kept("b", SUCCESS)])
    _undo_trials_not_kept(failed)
    assert undone == ["b", "a"]
