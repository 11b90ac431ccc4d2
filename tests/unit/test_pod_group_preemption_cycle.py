"""Workload-aware preemption in the pod-group cycle (schedule_one_pod_group.py's ``_run_workload_aware_preemption``),
restating upstream v1.36.3's schedule_one_podgroup_test.go (TestRunWorkloadAwarePreemption,
TestPodGroupCycle_PodGroupPostFilter) through SchedulerApp with a fake client, and the whole flow: a gang that
fits only once lower-priority pods go preempts them (a PodGroup-mode group as a whole, a Pod-mode group only the
pods needed), waits on preemption, and binds once the victims are gone.

The profile enables ``Quorum`` (a gang of three, tests/unit/test_schedule_one_pod_group.py) on top of the default
profile, so it is workload-aware and has DefaultPreemption.
"""

from __future__ import annotations

from typing import Any

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.explain import format_pod_group
from kopf_scheduler.schedule_one_pod_group import POD_GROUP_KIND
from tests.unit.app_harness import FakeClient, drive
from tests.unit.factories import make_pod
from tests.unit.test_schedule_one_pod_group import (
    QUORUM_SPEC,
    add_member,
    attempts,
    failed_scheduling,
    member,
    new_group_app,
    one_cycle,
    pod_group,
)

NOT_ELIGIBLE = "preemption: not eligible due to workload aware preemption enabled"

#: The placement algorithm's verdict (TopologyAwareWorkloadScheduling, on in a workload-aware profile): one placement
#: of every node without a PlacementGenerate plugin; workload-aware preemption's answer follows it.
ONE_PLACEMENT = "0/1 placements are available, first placement status: "


def gang_app(client: FakeClient, *, spec: dict[str, Any] | None = None, **pg_spec: Any) -> SchedulerApp:
    """One node of 4 cpus; the gang's PodGroup ``pg`` (priority 100, its uid set) replaces the harness's."""
    app = new_group_app(client, cpu="4", spec=spec)
    group = pod_group()
    group["metadata"]["uid"] = "uid-pg"
    group["spec"].update({"priority": 100, **pg_spec})
    app.cache.objects.apply(POD_GROUP_KIND, "MODIFIED", group)
    return app


def victim_group(app: SchedulerApp, mode: str) -> None:
    """A low-priority PodGroup ``low`` with two running pods of 1 cpu, and a running single pod of 1 cpu."""
    low = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "low", "namespace": "default", "uid": "uid-low"},
        "spec": {"schedulingPolicy": {"basic": {}}, "disruptionMode": mode, "priority": 0},
    }
    app.cache.objects.apply(POD_GROUP_KIND, "ADDED", low)
    for name in ("v1", "v2"):
        spec = {"priority": 0, "schedulingGroup": {"podGroupName": "low"}}
        app.on_pod_event("ADDED", make_pod(name, node_name="n1", requests={"cpu": "1"}, spec=spec, uid=f"uid-{name}"))
    single = make_pod("single", node_name="n1", requests={"cpu": "1"}, spec={"priority": 0}, uid="uid-single")
    app.on_pod_event("ADDED", single)


def add_gang(app: SchedulerApp) -> None:
    for name in ("p1", "p2", "p3"):
        add_member(app, member(name, requests={"cpu": "1"}))


def condition(client: FakeClient) -> tuple[str, str, str]:
    [(_, _, patch), *_] = client.pod_group_patches[-1:]
    [found] = patch["status"]["conditions"]
    return found["status"], found["reason"], found["message"]


def test_a_gang_preempts_a_pod_group_as_a_whole_and_binds_once_it_is_gone() -> None:
    """3 cpus needed, 1 free: the PodGroup-mode group (two pods) is more important than the single pod of the
    same priority, so it is reprieved first; it does not leave room, so it goes, both pods, and the single pod
    stays. The gang waits on preemption (its members held at PreEnqueue), then binds in one cycle."""
    client = FakeClient()
    app = gang_app(client)
    victim_group(app, "PodGroup")
    add_gang(app)
    one_cycle(app)
    assert sorted(name for _, name, _ in client.deleted) == ["v1", "v2"]
    disrupted = [name for name, patch in client.status_patches if "DisruptionTarget" in str(patch)]
    assert sorted(disrupted) == ["v1", "v2"]
    preempted = [e for e in client.events if e["reason"] == "Preempted"]
    assert sorted(e["regarding"]["name"] for e in preempted) == ["v1", "v2"]
    assert {e["note"] for e in preempted} == {"Preempted by podgroup uid-pg on node cluster"}
    assert {e["related"]["kind"] for e in preempted} == {"PodGroup"}
    assert condition(client) == ("False", "Unschedulable", ONE_PLACEMENT + "pod group is unschedulable")
    assert attempts(app, "waiting_on_preemption") == 1
    notes = failed_scheduling(client)
    # p1 fitted in the free cpu: it waits for the group, nominated to its node (upstream's Override nomination);
    # the others did not fit and did not preempt on their own.
    assert notes["p1"] == ONE_PLACEMENT + "pod group is unschedulable"
    assert any(
        name == "p1" and patch["status"].get("nominatedNodeName") == "n1" for name, patch in client.status_patches
    )
    assert notes["p2"] == notes["p3"].replace("p3", "p2")
    assert notes["p3"] == f"0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, {NOT_ELIGIBLE}"
    assert client.bindings == []
    # Explain shows the group's last preemption: its victims, and where they are now.
    section = app.explain("default/p2")["podGroup"]
    assert [v["pod"] for v in section["preemption"]["victims"]] == ["default/v1", "default/v2"]
    assert {v["state"] for v in section["preemption"]["victims"]} == {"running"}
    # The victims' deletions are watched: the gang comes back and binds, all three at once.
    for name in ("v1", "v2"):
        app.on_pod_event("DELETED", make_pod(name, node_name="n1", uid=f"uid-{name}"))
    section = app.explain("default/p2")["podGroup"]
    assert {v["state"] for v in section["preemption"]["victims"]} == {"gone"}
    assert "Last preemption for the group at " in format_pod_group(section)
    assert format_pod_group(section).endswith(": 2 victim(s): default/v1 (gone), default/v2 (gone)")
    drive(app)
    assert sorted(client.bindings) == [("default", n, "n1") for n in ("p1", "p2", "p3")]
    assert app.cache.pod("uid-single") is not None


def test_a_pod_mode_group_loses_only_the_pods_needed() -> None:
    """With ``disruptionMode: Pod`` each pod of the group is a victim of its own (still more important than a pod
    of no group at the same priority): v1 is reprieved, v2 and the single pod go."""
    client = FakeClient()
    app = gang_app(client)
    victim_group(app, "Pod")
    add_gang(app)
    one_cycle(app)
    assert sorted(name for _, name, _ in client.deleted) == ["single", "v2"]
    assert attempts(app, "waiting_on_preemption") == 1


def test_no_victims_of_lower_priority() -> None:
    """Nothing below the group's priority: upstream appends the preemption's answer to the group's message."""
    client = FakeClient()
    app = gang_app(client, priority=0)
    victim_group(app, "PodGroup")
    add_gang(app)
    one_cycle(app)
    assert client.deleted == []
    assert condition(client) == (
        "False",
        "Unschedulable",
        ONE_PLACEMENT + "pod group is unschedulable, No preemption victims found for incoming preemptor",
    )
    assert attempts(app, "unschedulable") == 1


def test_a_member_with_preemption_policy_never_keeps_the_group_from_preempting() -> None:
    client = FakeClient()
    app = gang_app(client)
    victim_group(app, "PodGroup")
    for name in ("p1", "p2", "p3"):
        pod = member(name, requests={"cpu": "1"})
        if name == "p2":
            pod["spec"]["preemptionPolicy"] = "Never"
        add_member(app, pod)
    one_cycle(app)
    assert client.deleted == []
    assert (
        condition(client)[2]
        == ONE_PLACEMENT + "pod group is unschedulable, not eligible due to preemptionPolicy=Never."
    )


def test_a_group_that_does_not_fit_even_without_every_victim() -> None:
    """Upstream: the group's own status after removing every possible victim is appended (``String()`` of the
    pod group's Unschedulable status is its error text)."""
    client = FakeClient()
    app = gang_app(client)
    victim_group(app, "PodGroup")
    for name in ("p1", "p2", "p3"):
        add_member(app, member(name, requests={"cpu": "2"}))  # 6 cpus on a node of 4
    one_cycle(app)
    assert client.deleted == []
    # The preemption's answer is the group's algorithm's status without victims: the placement algorithm's again.
    assert (
        condition(client)[2] == f"{ONE_PLACEMENT}pod group is unschedulable, {ONE_PLACEMENT}pod group is unschedulable"
    )


def test_no_pod_group_post_filter_plugin_in_the_profile() -> None:
    """Upstream "error when no PodGroupPostFilter plugin is registered" (DefaultPreemption disabled)."""
    client = FakeClient()
    spec = {
        "plugins": {
            "multiPoint": {"enabled": [{"name": "Quorum"}], "disabled": [{"name": "DefaultPreemption"}]},
        }
    }
    app = gang_app(client, spec=spec)
    victim_group(app, "PodGroup")
    add_gang(app)
    one_cycle(app)
    assert client.deleted == []
    assert condition(client)[2] == (
        ONE_PLACEMENT + "pod group is unschedulable, default preemption plugin is not registered, workload aware "
        "preemption is disabled"
    )


def test_a_pod_group_with_scheduling_constraints_is_not_preempted_for() -> None:
    """Upstream "error when pod group has scheduling constraints"."""
    client = FakeClient()
    app = gang_app(client, schedulingConstraints={"topology": [{"key": "rack"}]})
    victim_group(app, "PodGroup")
    add_gang(app)
    one_cycle(app)
    assert client.deleted == []
    assert condition(client)[2] == (
        ONE_PLACEMENT + "pod group is unschedulable, workload aware preemption is not supported for pod groups with "
        "scheduling constraints"
    )


def test_the_pod_group_object_missing_is_an_error() -> None:
    """Upstream "error when pod group is not found in informer": the group fails with the error (no condition:
    there is no PodGroup to patch)."""
    client = FakeClient()
    app = gang_app(client)
    victim_group(app, "PodGroup")
    add_gang(app)
    app.cache.objects.apply(POD_GROUP_KIND, "DELETED", pod_group())
    one_cycle(app)
    assert client.deleted == []
    notes = failed_scheduling(client)
    assert set(notes.values()) == {'failed to get pod group object: podgroup.scheduling.k8s.io "pg" not found'}
    assert attempts(app, "error") == 1
    assert client.pod_group_patches == []


def test_the_quorum_profile_is_workload_aware() -> None:
    """The harness's profile is the one these cases need (a workload-aware plugin and DefaultPreemption)."""
    app = new_group_app(FakeClient(), spec=QUORUM_SPEC)
    framework = app.profiles["sp"].framework
    assert framework.workload_aware
    assert [type(p).__name__ for p in framework.pod_group_post_filter_plugins] == ["DefaultPreemption"]
