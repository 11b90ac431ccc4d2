"""Unit tests of the default-profile timelines' pure parts: the generator and the report (no cluster needed)."""

from __future__ import annotations

from typing import Any

from tests.conformance.default_timelines import GATE, TIER_KEY, generate_default_timeline
from tests.conformance.gang_timelines import CLASS_ANNOTATION
from tests.conformance.timeline_harness import StepResult, TimelineResult, summary
from tests.conformance.timeline_report import SECTION_END, SECTION_START, feature_table, section, timing

SEEDS = range(1, 121)


def test_timelines_are_a_function_of_their_seed() -> None:
    one = generate_default_timeline(5, "p")
    assert one == generate_default_timeline(5, "p")
    assert one != generate_default_timeline(6, "p")
    assert one.namespace == "tl-5"
    assert one.steps[0].node_sync
    assert {a.kind for a in one.steps[0].actions} >= {"Node"}


def test_every_pod_runs_under_the_profile_and_every_name_is_new() -> None:
    for seed in SEEDS:
        timeline = generate_default_timeline(seed, "p")
        created = [a.name for s in timeline.steps for a in s.actions if a.verb == "create" and a.kind == "Pod"]
        assert len(created) == len(set(created)), seed
        for step in timeline.steps:
            for action in step.actions:
                if action.kind == "Pod" and action.verb == "create":
                    assert action.body is not None
                    assert action.body["spec"]["schedulerName"] == "p"
                    assert action.body["metadata"]["annotations"][CLASS_ANNOTATION]


def test_events_refer_to_what_exists() -> None:
    for seed in SEEDS:
        timeline = generate_default_timeline(seed, "p")
        nodes: set[str] = set()
        gated: set[str] = set()
        claims: set[str] = set()
        for step in timeline.steps:
            assert step.node_sync == any(a.kind == "Node" and a.verb in ("create", "delete") for a in step.actions)
            for action in step.actions:
                body: dict[str, Any] = action.body or {}
                if action.kind == "Node" and action.verb == "create":
                    nodes.add(action.name)
                elif action.kind == "Node":
                    assert action.name in nodes, (seed, step.label)
                    if action.verb == "delete":
                        nodes.discard(action.name)
                elif action.kind == "Pod" and action.verb == "create":
                    if body["spec"].get("schedulingGates"):
                        assert body["spec"]["schedulingGates"] == [{"name": GATE}]
                        gated.add(action.name)
                elif action.kind == "Pod" and action.verb == "patch":
                    assert action.name in gated
                    assert body["operations"][0]["path"] == "/spec/schedulingGates"
                elif action.kind == "PersistentVolumeClaim":
                    claims.add(action.name)
                elif action.kind == "PersistentVolume":
                    assert action.name.split("-pv-")[1] in claims, (seed, step.label)


def test_the_features_appear_across_seeds() -> None:
    found = {f for seed in SEEDS for f in generate_default_timeline(seed, "p").features}
    expected = {
        "node-added", "node-labelled", "node-tainted", "node-untainted", "node-cordoned", "node-uncordoned",
        "node-deleted", "pods-deleted", "gate-removed", "pv-created", "resourceslice-created", "pdb", "preemption",
        "replicas", "node-selector", "toleration", "scheduling-gates", "volumes", "devices",
    }  # fmt: skip
    assert expected <= found, expected - found


def test_a_pdb_covers_the_low_priority_pods_with_a_written_status() -> None:
    pdbs = [
        a.body
        for seed in SEEDS
        for s in generate_default_timeline(seed, "p").steps
        for a in s.actions
        if a.kind == "PodDisruptionBudget" and a.body
    ]
    assert pdbs
    for body in pdbs:
        assert body["spec"]["selector"] == {"matchLabels": {TIER_KEY: "low"}}
        assert body["status"]["disruptionsAllowed"] in (0, 1)


def _result(seed: int, features: list[str], problems: list[str], tie: int | None = None) -> TimelineResult:
    step = StepResult(0, "nodes", problems, {"pods": {"a": "n0"}, "groups": {}}, {"pods": {}, "groups": {}})
    return TimelineResult(seed, "p", features, "0: nodes", [step], 30.0, diverged_on_tie=tie)


def test_the_report_section_tables_features_and_lists_disagreements() -> None:
    results = [_result(1, ["pdb", "volumes"], []), _result(2, ["pdb"], ["a: upstream n0, ours n1"], None)]
    table = feature_table(results)
    assert table["pdb"] == {"timelines": 2, "agree": 1, "tie": 0}
    data = {**summary(results), "feature_table": table, "timing": timing(results), "requested": 2, "run": {}}
    text = section(data, results)
    assert text.startswith(SECTION_START)
    assert text.endswith(SECTION_END)
    assert "| pdb | 2 | 1 | 0 |" in text
    assert "seed 2 (p)" in text
    assert "a: upstream n0, ours n1" in text
