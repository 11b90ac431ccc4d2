"""The placement algorithm of the pod-group cycle (pod_group_placement.py), through SchedulerApp with a fake client:
upstream schedule_one_podgroup_test.go's TestPodGroupSchedulingPlacementAlgorithm and _Scoring with a fake
placement plugin, then the real TopologyPlacementGenerator and PodGroupPodsCount on racks, and what ``/explain``
keeps of the placements tried."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import yaml

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.explain import format_account
from kopf_scheduler.framework import (
    SUCCESS,
    CycleState,
    NodeFilterPlugin,
    NodeInfo,
    Placement,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    PodGroupAssignments,
    PodGroupInfo,
    PodInfo,
    Status,
)
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.status import Code
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.schedule_one_pod_group import POD_GROUP_KIND
from tests.unit.app_harness import FakeClient, FakeClock, apply_manifests, drive, new_app
from tests.unit.factories import make_node
from tests.unit.test_schedule_one_pod_group import add_member, failed_scheduling, member, one_cycle


class FakePlacement(NodeFilterPlugin, PlacementGeneratePlugin, PlacementScorePlugin):
    """Upstream's fakePlacementPlugin: Filter by node name, placements by name, scores by placement name."""

    name: ClassVar[str] = "FakePlacementPlugin"
    workload_aware: ClassVar[bool] = True
    filter_status: ClassVar[dict[str, Status]] = {}
    placements: ClassVar[dict[str, list[str]]] = {}
    generate_status: ClassVar[Status] = SUCCESS
    scores: ClassVar[dict[str, int]] = {}
    score_status: ClassVar[dict[str, Status]] = {}

    def filter_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return self.filter_status.get(node.name, SUCCESS)

    def generate_placements(
        self, state: CycleState, pod_group: PodGroupInfo, parent: Placement
    ) -> tuple[list[Placement] | None, Status]:
        snapshot = self.handle.snapshot()
        by_name = {str(snapshot.table.names[slot]): slot for slot in parent.nodes.tolist()}
        made = [
            Placement(name, parent.nodes[[list(by_name.values()).index(by_name[n]) for n in nodes]])
            for name, nodes in self.placements.items()
        ]
        return made, self.generate_status

    def score_placement(
        self, state: CycleState, pod_group: PodGroupInfo, assignments: PodGroupAssignments
    ) -> tuple[int, Status]:
        name = assignments.placement.name
        return self.scores.get(name, 0), self.score_status.get(name, SUCCESS)


@pytest.fixture(autouse=True)
def _reset_fake() -> None:
    FakePlacement.filter_status = {}
    FakePlacement.placements = {"placement1": ["node1"], "placement2": ["node2"]}
    FakePlacement.generate_status = SUCCESS
    FakePlacement.scores = {}
    FakePlacement.score_status = {}


NO_CONSTRAINED_PREEMPTION = "workload aware preemption is not supported for pod groups with scheduling constraints"
NO_RACK_HOLDS_IT = (
    "0/2 placements are available, first placement status: pod group is unschedulable, " + NO_CONSTRAINED_PREEMPTION
)
FAKE_SPEC: dict[str, Any] = {"plugins": {"multiPoint": {"enabled": [{"name": "FakePlacementPlugin"}]}}}


def pod_group(name: str = "pg", *, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "generation": 1},
        "spec": spec or {"schedulingPolicy": {"basic": {}}},
        "status": {"conditions": []},
    }


def new_placement_app(
    client: FakeClient,
    spec: dict[str, Any],
    nodes: list[dict[str, Any]],
    group: dict[str, Any],
    *extra: type[Any],
) -> SchedulerApp:
    app = new_app(client, FakeClock(), registry=default_registry().merged(Registry([FakePlacement, *extra])))
    for node in nodes:
        app.on_node_event(None, node)
    assert app.apply_profile(name="sp", spec=spec, generation=1).ready
    app.cache.objects.apply(POD_GROUP_KIND, "ADDED", group)
    return app


def condition(client: FakeClient) -> tuple[str, str, str]:
    [(_, _, patch)] = client.pod_group_patches[-1:]
    [cond] = patch["status"]["conditions"]
    return cond["status"], cond["reason"], cond["message"]


def run_fake(spec: dict[str, Any] = FAKE_SPEC, *extra: type[Any]) -> tuple[FakeClient, SchedulerApp]:
    client = FakeClient()
    app = new_placement_app(client, spec, [make_node("node1"), make_node("node2")], pod_group(), *extra)
    add_member(app, member("foo", requests={"cpu": "1"}))
    one_cycle(app)
    return client, app


# -- TestPodGroupSchedulingPlacementAlgorithm -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("scores", "node"),
    [
        pytest.param({"placement1": 2, "placement2": 1}, "node1", id="higher-score-of-placement1"),
        pytest.param({"placement1": 1, "placement2": 2}, "node2", id="higher-score-of-placement2"),
    ],
)
def test_the_best_scored_placement_is_chosen(scores: dict[str, int], node: str) -> None:
    FakePlacement.scores = scores
    client, _ = run_fake()
    assert client.bindings == [("default", "foo", node)]
    assert condition(client) == ("True", "Scheduled", "")


def test_no_placements_generated_is_unschedulable() -> None:
    FakePlacement.placements = {}
    client, app = run_fake()
    assert client.bindings == []
    # Workload-aware preemption (on in every workload-aware profile) found nothing to preempt: its answer follows.
    message = "no feasible placements found, No preemption victims found for incoming preemptor"
    assert condition(client) == ("False", "Unschedulable", message)
    assert failed_scheduling(client) == {"foo": message}
    assert len(app.profiles["sp"].queue) == 1


def test_all_placements_infeasible_reports_the_first_placement() -> None:
    FakePlacement.scores = {"placement1": 1, "placement2": 2}
    FakePlacement.filter_status = {
        "node1": Status(Code.UNSCHEDULABLE, ("fake rejects node1",)),
        "node2": Status(Code.UNSCHEDULABLE, ("fake rejects node2",)),
    }
    client, _ = run_fake()
    assert client.bindings == []
    assert condition(client) == (
        "False",
        "Unschedulable",
        "0/2 placements are available, first placement status: pod group is unschedulable, "
        "No preemption victims found for incoming preemptor",
    )
    # The member's own account is the first placement's: one node, the placement's.
    assert failed_scheduling(client)["foo"].startswith("0/1 nodes are available: 1 fake rejects node1.")


def test_infeasible_placements_are_filtered_out() -> None:
    FakePlacement.scores = {"placement1": 1}
    FakePlacement.filter_status = {"node2": Status(Code.UNSCHEDULABLE, ("fake rejects node2",))}
    client, _ = run_fake()
    assert client.bindings == [("default", "foo", "node1")]


def test_a_failing_generator_is_the_groups_error() -> None:
    FakePlacement.generate_status = Status(Code.ERROR, ("error for test",))
    client, app = run_fake()
    assert client.bindings == []
    assert condition(client) == ("False", "SchedulerError", "error for test")
    assert app.metrics.registry.get_sample_value(
        "scheduler_podgroup_schedule_attempts_total", {"result": "error", "profile": "sp"}
    )


def test_a_failing_scorer_is_the_groups_error() -> None:
    FakePlacement.scores = {"placement1": 1}
    FakePlacement.score_status = {"placement2": Status(Code.ERROR, ("error for test",))}
    client, _ = run_fake()
    assert client.bindings == []
    assert condition(client) == (
        "False",
        "SchedulerError",
        'running PlacementScore plugins: plugin "FakePlacementPlugin" failed with: error for test',
    )


# -- TestPodGroupSchedulingPlacementAlgorithm_Scoring ---------------------------------------------------------------
def weighted_scorer(name: str, scores: dict[str, int]) -> type[Any]:
    class Scorer(PlacementScorePlugin):
        workload_aware: ClassVar[bool] = True

        def score_placement(
            self, state: CycleState, pod_group: PodGroupInfo, assignments: PodGroupAssignments
        ) -> tuple[int, Status]:
            return scores[assignments.placement.name], SUCCESS

    Scorer.name = name
    return Scorer


@pytest.mark.parametrize(
    ("first", "second", "node"),
    [
        pytest.param({"placement1": 50, "placement2": 75}, {"placement1": 25, "placement2": 10}, "node1", id="p1"),
        pytest.param({"placement1": 75, "placement2": 50}, {"placement1": 10, "placement2": 25}, "node2", id="p2"),
    ],
)
def test_placement_scores_are_weighted(first: dict[str, int], second: dict[str, int], node: str) -> None:
    score0, score1 = weighted_scorer("FakeScorePlugin[0]", first), weighted_scorer("FakeScorePlugin[1]", second)
    spec = {
        "plugins": {
            "multiPoint": {"enabled": [{"name": "FakePlacementPlugin"}]},
            "placementScore": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "FakeScorePlugin[0]", "weight": 1}, {"name": "FakeScorePlugin[1]", "weight": 2}],
            },
        }
    }
    client, _ = run_fake(spec, score0, score1)
    assert client.bindings == [("default", "foo", node)]


# -- the real plugins: a gang inside one rack -----------------------------------------------------------------------
TOPOLOGY_SPEC: dict[str, Any] = {
    "plugins": {
        "multiPoint": {
            "enabled": [
                {"name": "GangScheduling"},
                {"name": "TopologyPlacementGenerator"},
                {"name": "PodGroupPodsCount", "weight": 1},
            ]
        }
    }
}


def rack_node(name: str, rack: str | None, cpu: str) -> dict[str, Any]:
    return make_node(name, cpu=cpu, labels={"rack": rack} if rack else {})


def gang(min_count: int, key: str = "rack") -> dict[str, Any]:
    return pod_group(
        spec={
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": key}]},
        }
    )


def racks_app(client: FakeClient, group: dict[str, Any], members: int) -> SchedulerApp:
    """Rack a: three nodes of 1 CPU; rack b: two nodes of 2 CPUs; a node without a rack label with 8 CPUs.
    Free capacity for 1-CPU members: 3 in a, 4 in b, 8 outside any rack."""
    nodes = [
        rack_node("a1", "a", "1"),
        rack_node("a2", "a", "1"),
        rack_node("a3", "a", "1"),
        rack_node("b1", "b", "2"),
        rack_node("b2", "b", "2"),
        rack_node("big", None, "8"),
    ]
    app = new_placement_app(client, TOPOLOGY_SPEC, nodes, group)
    for i in range(members):
        add_member(app, member(f"w{i}", requests={"cpu": "1"}))
    return app


def test_a_gang_lands_wholly_inside_the_rack_that_holds_most_of_it() -> None:
    client = FakeClient()
    app = racks_app(client, gang(4), 4)
    drive(app)
    nodes = {name: node for _, name, node in client.bindings}
    assert len(nodes) == 4
    assert set(nodes.values()) <= {"b1", "b2"}  # rack a holds 3 of 4, "big" is in no rack
    assert condition(client) == ("True", "Scheduled", "")
    section = app.explain("default/w0")
    assert section is not None
    placements = section["podGroup"]["placements"]
    # Both racks' bounds tie (NodeResourcesFit 50, PodGroupPodsCount 100), so either is tried first; b holds the
    # gang whole and ends the walk.
    tried = [(p["name"], p["nodes"], p["code"]) for p in placements["tried"]]
    assert tried in ([("a", 3, "Unschedulable"), ("b", 2, "Success")], [("b", 2, "Success")])
    assert placements["generator"] == "TopologyPlacementGenerator"
    assert placements["tried"][-1]["chosen"] is True


def test_two_fitting_racks_the_one_with_more_members_placed_wins() -> None:
    # A gang of minCount 2 with 4 members: rack a places 3 (one member left out), rack b all 4. PodGroupPodsCount:
    # 3 and 4 members, 75 and 100; NodeResourcesFit (at placementScore with weight 1 in every profile, as
    # upstream's): MostAllocated over each rack as one node, cpu 3/3 and 4/4 full, memory 600Mi of 96Gi and 800Mi
    # of 64Gi, (100 + 0) // 2 and (100 + 1) // 2: 50 each.
    client = FakeClient()
    app = racks_app(client, gang(2), 4)
    drive(app)
    assert sorted(node for _, _, node in client.bindings) == ["b1", "b1", "b2", "b2"]
    tried = app.explain("default/w0")["podGroup"]["placements"]["tried"]  # type: ignore[index]
    assert [(p["name"], p.get("score"), p.get("chosen", False)) for p in tried] == [
        ("a", 125, False),
        ("b", 150, True),
    ]


def test_no_rack_can_hold_the_gang_so_it_stays_pending_with_upstreams_message() -> None:
    client = FakeClient()
    app = racks_app(client, gang(5), 5)
    one_cycle(app)
    assert client.bindings == []
    # Workload-aware preemption declines a group with scheduling constraints (upstream's), and says so.
    assert condition(client) == ("False", "Unschedulable", NO_RACK_HOLDS_IT)
    # Nothing held: no node accounting, no assumed member.
    assert app.cache.table.requested.sum() == 0
    assert not any(app.cache.is_assumed(uid) for uid in app.unassigned)
    # Each member's own account is the first placement's (rack a): three placed there wait at Permit, two fit
    # nowhere in its three nodes.
    notes = failed_scheduling(client)
    waiting = {
        name
        for name, note in notes.items()
        if note == "pod group is unschedulable, waiting for minCount pods from a gang to be scheduled, "
        "one or more plugins asked to wait and no plugin rejected pod"
    }
    refused = {name for name, note in notes.items() if note.startswith("0/3 nodes are available: 3 Insufficient cpu.")}
    assert (len(waiting), len(refused), waiting | refused) == (3, 2, {f"w{i}" for i in range(5)})
    account = app.explain("default/w3")
    assert account is not None
    placements = account["podGroup"]["placements"]
    assert placements["status"]["message"] == (
        "0/2 placements are available, first placement status: pod group is unschedulable"
    )  # the placement algorithm's verdict, before preemption's answer joined it
    assert sorted(m.get("node") or m["message"][:40] for m in placements["tried"][0]["members"]) == [
        "0/3 nodes are available: 3 Insufficient ",
        "0/3 nodes are available: 3 Insufficient ",
        "a1",
        "a2",
        "a3",
    ]


def test_a_label_no_node_has_leaves_no_placement() -> None:
    client = FakeClient()
    app = racks_app(client, gang(2, key="zone"), 2)
    one_cycle(app)
    assert client.bindings == []
    assert condition(client) == ("False", "Unschedulable", "no feasible placements found, " + NO_CONSTRAINED_PREEMPTION)
    placements = app.explain("default/w0")["podGroup"]["placements"]  # type: ignore[index]
    assert placements["generateStatus"] == {
        "code": "Unschedulable",
        "message": "no feasible placements found",
        "plugin": "TopologyPlacementGenerator",
    }


def test_a_group_without_constraint_is_one_placement_of_every_node() -> None:
    client = FakeClient()
    app = racks_app(client, pod_group(spec={"schedulingPolicy": {"gang": {"minCount": 5}}}), 5)
    drive(app)
    assert len(client.bindings) == 5
    tried = app.explain("default/w0")["podGroup"]["placements"]["tried"]  # type: ignore[index]
    assert [(p["name"], p["nodes"]) for p in tried] == [("", 6)]


def test_explain_prints_the_placements_tried() -> None:
    client = FakeClient()
    app = racks_app(client, gang(5), 5)
    one_cycle(app)
    account = app.explain("default/w3")
    assert account is not None
    tried = account["podGroup"]["placements"]["tried"]
    lines = format_account(account).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  Placements tried at "))
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    assert lines[start].endswith("(TopologyPlacementGenerator): 2")
    block = lines[start + 1 : end]
    assert block[0] == "    a, 3 node(s): Unschedulable: pod group is unschedulable"
    assert block[6] == "    b, 2 node(s): Unschedulable: pod group is unschedulable"
    assert block[-1] == (
        "    Result: Unschedulable: 0/2 placements are available, first placement status: pod group is unschedulable"
    )
    for placement, members in ((tried[0], block[1:6]), (tried[1], block[7:12])):
        expected = [
            f"      {m['pod']}: on {m['node']}" if "node" in m else f"      {m['pod']}: {m['message']}"
            for m in placement["members"]
        ]
        assert members == expected
    # Rack a placed three members, rack b four; the rest were refused with the placement's own node count.
    assert sorted("node" in m for m in tried[0]["members"]) == [False, False, True, True, True]
    assert sorted("node" in m for m in tried[1]["members"]) == [False, True, True, True, True]
    assert [m["message"][:45] for m in tried[1]["members"] if "message" in m] == [
        "0/2 nodes are available: 2 Insufficient cpu. "
    ]


def test_the_example_puts_its_gang_in_one_rack() -> None:
    """``examples/topology-aware-gangs.yaml`` as the operator would see it applied, on two racks with room for three
    and five of its pods: all four bind, in the rack that holds them."""
    example = Path(__file__).resolve().parents[2] / "examples" / "topology-aware-gangs.yaml"
    docs = list(yaml.safe_load_all(example.read_text()))
    assert [doc["kind"] for doc in docs] == ["SchedulerProfile", "PodGroup", "Pod", "Pod", "Pod", "Pod"]
    client = FakeClient()
    app = new_app(client, FakeClock())
    key = docs[1]["spec"]["schedulingConstraints"]["topology"][0]["key"]
    for name, rack, cpu in (("r1-a", "r1", "2"), ("r1-b", "r1", "1"), ("r2-a", "r2", "3"), ("r2-b", "r2", "2")):
        app.on_node_event(None, make_node(name, cpu=cpu, labels={key: rack}))
    apply_manifests(app, docs)
    drive(app, "topology-aware-gangs")
    assert sorted(name for _, name, _ in client.bindings) == [f"allreduce-{i}" for i in range(4)]
    assert {node for _, _, node in client.bindings} <= {"r2-a", "r2-b"}


class BrokenPlacement(FakePlacement):
    """A generator whose placement names a node the snapshot does not have."""

    name: ClassVar[str] = "BrokenPlacement"

    def generate_placements(
        self, state: CycleState, pod_group: PodGroupInfo, parent: Placement
    ) -> tuple[list[Placement] | None, Status]:
        gone = self.handle.snapshot().table.capacity - 1  # a slot no node holds
        return [Placement("broken", parent.nodes[:1]), Placement("gone", np.asarray([gone], dtype=np.int64))], SUCCESS


def test_a_placement_the_snapshot_cannot_assume_is_the_groups_error() -> None:
    spec = {"plugins": {"multiPoint": {"enabled": [{"name": "BrokenPlacement"}]}}}
    client, _ = run_fake(spec, BrokenPlacement)
    assert client.bindings == []
    status, reason, message = condition(client)
    assert (status, reason) == ("False", "SchedulerError")
    assert message.startswith("failed to assume pod group placement: node ")
    assert message.endswith(" in placement is not present in snapshot")
