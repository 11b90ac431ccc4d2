"""Placements tried best bound first (pod_group_placement.py): the pod-group cycle stops at the first placement that
holds the whole group when no untried placement could score above it, and the answer is one upstream's
try-every-placement algorithm could have given, each of the best with the same chance.

The differential test runs seeded rack layouts twice, once best first and once with every placement tried and
scored (the plugins' bounds withheld, which is upstream's walk), and checks that the rack chosen best first is one
of the highest-scored racks of the full walk, with the same verdict and the same PodGroup condition."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.explain import format_account
from kopf_scheduler.framework.runtime.placement import PlacementRunner
from kopf_scheduler.schedule_one_pod_group import POD_GROUP_KIND
from kopf_scheduler.settings import RunSettings
from tests.unit.app_harness import FakeClient, FakeClock, drive
from tests.unit.factories import make_node, make_pod
from tests.unit.test_pod_group_placement import TOPOLOGY_SPEC, condition, gang
from tests.unit.test_schedule_one_pod_group import add_member, member, one_cycle


def racks_app(client: FakeClient, racks: list[list[tuple[str, int]]], *, seed: int = 1) -> SchedulerApp:
    """Racks r0, r1, …; each node given as (cpu, CPUs already taken by a running pod)."""
    app = SchedulerApp(
        settings=RunSettings(), client=client, rng=random.Random(seed), hostname="test", clock=FakeClock()
    )
    for r, nodes in enumerate(racks):
        for n, (cpu, taken) in enumerate(nodes):
            name = f"r{r}-n{n}"
            app.on_node_event(None, make_node(name, cpu=cpu, labels={"rack": f"r{r}"}))
            if taken:
                app.on_pod_event("ADDED", make_pod(f"{name}-busy", node_name=name, requests={"cpu": str(taken)}))
    assert app.apply_profile(name="sp", spec=TOPOLOGY_SPEC, generation=1).ready
    return app


def add_gang(app: SchedulerApp, members: int, min_count: int, cpu: str = "1") -> None:
    app.cache.objects.apply(POD_GROUP_KIND, "ADDED", gang(min_count))
    for i in range(members):
        add_member(app, member(f"w{i}", requests={"cpu": cpu}))


def placements(app: SchedulerApp) -> dict[str, Any]:
    section = app.explain("default/w0")
    assert section is not None
    return section["podGroup"]["placements"]  # type: ignore[no-any-return]


def racks_bound(client: FakeClient) -> set[str]:
    return {node.split("-")[0] for _, _, node in client.bindings}


def test_the_fullest_rack_that_holds_the_gang_is_tried_alone() -> None:
    # Three racks of two 4-CPU nodes; r1 already runs 2 CPUs: NodeResourcesFit's placement score (MostAllocated
    # over the rack as one node) is highest there, and it holds the gang of 4: the other two are never tried.
    client = FakeClient()
    app = racks_app(client, [[("4", 0), ("4", 0)], [("4", 2), ("4", 0)], [("4", 0), ("4", 0)]])
    add_gang(app, 4, 4)
    drive(app)
    assert len(client.bindings) == 4
    assert racks_bound(client) == {"r1"}
    tried = placements(app)
    assert [(p["name"], p["code"], p.get("chosen")) for p in tried["tried"]] == [("r1", "Success", True)]
    assert (tried["count"], tried["notTried"]) == (1, 2)
    assert condition(client) == ("True", "Scheduled", "")
    text = format_account(app.explain("default/w0"))  # type: ignore[arg-type]
    assert "    (2 not tried: none could score above the chosen one, which holds every member;" in text


def test_a_fuller_rack_too_small_for_the_gang_is_tried_then_passed_over() -> None:
    # r0 is the fullest but holds 3 of the 4 members; r1 and r2 hold all: r0 is tried first (its bound is the
    # highest), fails, then the better of r1 and r2.
    client = FakeClient()
    app = racks_app(client, [[("2", 1), ("2", 0)], [("4", 1), ("4", 0)], [("4", 0), ("4", 0)]])
    add_gang(app, 4, 4)
    drive(app)
    assert racks_bound(client) == {"r1"}
    assert [(p["name"], p["code"]) for p in placements(app)["tried"]] == [("r0", "Unschedulable"), ("r1", "Success")]


def test_equal_racks_are_each_chosen_with_the_same_chance() -> None:
    chosen: Counter[str] = Counter()
    for seed in range(60):
        client = FakeClient()
        app = racks_app(client, [[("4", 0)], [("4", 0)], [("4", 0)]], seed=seed)
        add_gang(app, 2, 2)
        drive(app)
        [rack] = racks_bound(client)
        chosen[rack] += 1
        assert len(placements(app)["tried"]) == 1
    assert set(chosen) == {"r0", "r1", "r2"}
    assert min(chosen.values()) >= 10, chosen


def test_a_rack_that_holds_part_of_the_gang_makes_every_rack_tried() -> None:
    # minCount 2 of 4 members: r0 (fullest) fits 3 of them, which is feasible but not the whole group; a part may
    # outscore the rest, so every rack is tried and scored as upstream does (r1 holds all 4: PodGroupPodsCount 100
    # against 75).
    client = FakeClient()
    app = racks_app(client, [[("2", 1), ("2", 0)], [("4", 0), ("4", 0)], [("8", 0), ("8", 0)]])
    add_gang(app, 4, 2)
    drive(app)
    tried = placements(app)
    assert sorted(p["name"] for p in tried["tried"]) == ["r0", "r1", "r2"]
    assert "notTried" not in tried
    best = max(p["score"] for p in tried["tried"])
    assert {p["name"] for p in tried["tried"] if p.get("chosen")} <= {
        p["name"] for p in tried["tried"] if p["score"] == best
    }


def full_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's walk: no plugin bound known, so every placement is tried and the fitting ones scored."""
    monkeypatch.setattr(PlacementRunner, "run_placement_score_bounds", lambda self, state, group, placements: None)


def layout(seed: int) -> tuple[list[list[tuple[str, int]]], int, int, str]:
    rng = random.Random(seed)
    racks = []
    for _ in range(rng.randint(2, 5)):
        nodes = []
        for _ in range(rng.randint(1, 3)):
            cpu = rng.choice([1, 2, 4])
            nodes.append((str(cpu), rng.randint(0, cpu)))
        racks.append(nodes)
    members = rng.randint(1, 6)
    return racks, members, rng.randint(1, members), rng.choice(["1", "500m"])


def outcome(client: FakeClient, app: SchedulerApp) -> tuple[int, tuple[str, str, str]]:
    return len(client.bindings), condition(client)


@pytest.mark.parametrize("seed", range(40))
def test_best_first_chooses_one_of_the_racks_the_full_walk_ranks_highest(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    racks, members, min_count, cpu = layout(seed)
    fast_client = FakeClient()
    fast = racks_app(fast_client, racks, seed=seed)
    add_gang(fast, members, min_count, cpu)
    one_cycle(fast)

    full_walk(monkeypatch)
    full_client = FakeClient()
    full = racks_app(full_client, racks, seed=seed)
    add_gang(full, members, min_count, cpu)
    one_cycle(full)

    assert outcome(fast_client, fast) == outcome(full_client, full)
    if not fast_client.bindings:
        return
    walked = placements(full)["tried"]
    assert len(walked) == len(racks)
    fitting = [p for p in walked if p["code"] == "Success" or p.get("waitingOnPreemption")]
    best = max((p.get("score", 0) for p in fitting), default=0)
    winners = {p["name"] for p in fitting if p.get("score", 0) == best}
    assert racks_bound(fast_client) <= winners
    assert len(racks_bound(fast_client)) == 1
