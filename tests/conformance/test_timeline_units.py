"""Unit tests of the gang timelines' pure parts: the generator, the oracle's profile, the compared state, the
recognised pending-feature differences and the tie rule (no cluster needed)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.gang_known import GROUP_PREEMPTION, PLACEMENT, explain_class, explain_group
from tests.conformance.gang_timelines import CLASS_ANNOTATION, FEATURES, generate_timeline, pinned_timelines
from tests.conformance.runner import ProfileDef
from tests.conformance.timeline_harness import oracle_profile
from tests.conformance.timeline_state import PodOutcome, compare, state_of, tie_explains, top_sets_from_log

GANG = ProfileDef("gang", {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}, "test")
FIT = "0/3 nodes are available: 3 Insufficient cpu. no new claims to deallocate, preemption: "
UP_POD = "False/Unschedulable: " + FIT + "not eligible due to workload aware preemption enabled"
OUR_POD = "False/Unschedulable: " + FIT + "0/3 nodes are available: 3 No preemption victims found for incoming pod."


def _pod(name: str, klass: str, node: str | None = None, message: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if message is not None:
        status_, _, rest = message.partition("/")
        reason, _, text = rest.partition(": ")
        status["conditions"] = [{"type": "PodScheduled", "status": status_, "reason": reason, "message": text}]
    return {
        "metadata": {"name": name, "annotations": {CLASS_ANNOTATION: klass}},
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


def _group(name: str, message: str) -> dict[str, Any]:
    condition = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"metadata": {"name": name}, "status": {"conditions": [condition]}}


def test_timelines_are_a_function_of_their_seed() -> None:
    one, two = generate_timeline(7, "gang"), generate_timeline(7, "gang")
    assert one == two
    assert one != generate_timeline(8, "gang")
    assert one.steps[0].node_sync
    assert all(a.kind == "Node" for a in one.steps[0].actions)
    assert "topology" not in one.features
    assert "preemption" not in one.features


def test_switches_add_topology_and_preemption() -> None:
    found: set[str] = set()
    for seed in range(40):
        timeline = generate_timeline(seed, "gang", FEATURES)
        found.update(timeline.features)
        bodies = [a.body for s in timeline.steps for a in s.actions if a.body and a.kind == "PodGroup"]
        for body in bodies:
            assert set(body["spec"]) <= {"schedulingPolicy", "schedulingConstraints", "priorityClassName",
                                         "disruptionMode"}  # fmt: skip
    assert {"topology", "preemption", "gang", "late-members", "plain-pods"} <= found
    with pytest.raises(ValueError, match="unknown switches"):
        generate_timeline(1, "gang", ["nope"])


def test_every_generated_pod_names_the_profile_and_its_group_exists_in_the_end() -> None:
    for seed in range(30):
        timeline = generate_timeline(seed, "gang")
        groups = {a.name for s in timeline.steps for a in s.actions if a.kind == "PodGroup"}
        for step in timeline.steps:
            for action in step.actions:
                if action.kind == "Pod" and action.body:
                    assert action.body["spec"]["schedulerName"] == "gang"
                    group = action.body["spec"].get("schedulingGroup")
                    assert group is None or group["podGroupName"] in groups


def test_the_oracle_runs_our_plugin_set() -> None:
    profile = oracle_profile(GANG)
    disabled = [p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]]
    assert disabled == ["TopologyPlacementGenerator", "PodGroupPodsCount"]
    assert profile["plugins"]["multiPoint"]["enabled"] == [{"name": "GangScheduling"}]
    assert profile["schedulerName"] == "gang"
    assert pinned_timelines("gang")[0].profile == "gang"


def test_members_of_a_class_compare_as_a_multiset() -> None:
    up = state_of([_pod("a-0", "a", "n1"), _pod("a-1", "a", "n2")], [])
    ours = state_of([_pod("a-0", "a", "n2"), _pod("a-1", "a", "n1")], [])
    assert compare(up, ours) == []
    ours = state_of([_pod("a-0", "a", "n2"), _pod("a-1", "a", "n2")], [])
    (problem,) = compare(up, ours)
    assert problem.klass == "a"
    assert not problem.pending


def test_pending_features_explain_their_exact_differences_only() -> None:
    message = "0/1 placements are available, first placement status: pod group is unschedulable, "
    up = state_of(
        [_pod("b-0", "b", message=UP_POD)],
        [_group("b", message + "No preemption victims found for incoming preemptor")],
    )
    ours = state_of([_pod("b-0", "b", message=OUR_POD)], [_group("b", "pod group is unschedulable")])
    problems = compare(up, ours, frozenset({PLACEMENT, GROUP_PREEMPTION}))
    assert [p.pending for p in problems] == [(GROUP_PREEMPTION,), (PLACEMENT, GROUP_PREEMPTION)]
    # Once the features are merged, the same differences are disagreements.
    assert [p.pending for p in compare(up, ours, frozenset())] == [(), ()]
    # Any other difference is not explained.
    assert (
        explain_group(["T=False/U: 0/1 placements are available, first placement status: x"], ["T=False/U: y"]) is None
    )
    assert explain_class([(None, UP_POD)], [("n1", OUR_POD)]) is None
    assert explain_class([(None, UP_POD)], [(None, OUR_POD.replace("3 Insufficient", "2 Insufficient"))]) is None


def test_a_tie_broken_the_other_way_is_recognised_from_upstreams_scores() -> None:
    score = 'I1128 06:26:19.1 1 schedule_one.go:1050] "Calculated node\'s final score for pod" pod="ns/p"'
    log = [
        f'{score} node="n1" score=200',
        f'{score} node="n2" score=200',
        f'{score} node="n3" score=100',
        'I1128 06:26:19.2 1 default_binder.go:69] "Attempting to bind pod to node" pod="ns/p" node="n1"',
    ]
    tops = top_sets_from_log(log, "ns")
    assert tops == {"p": {"n1", "n2"}}
    up = state_of([_pod("p", "p", "n1")], [])
    assert tie_explains(
        up, state_of([_pod("p", "p", "n2")], []), compare(up, state_of([_pod("p", "p", "n2")], [])), tops
    )
    ours = state_of([_pod("p", "p", "n3")], [])
    assert not tie_explains(up, ours, compare(up, ours), tops)
    assert PodOutcome("n1", None, None).text() == "n1"


def test_the_report_section_is_generated_whole_and_replaced_in_place(tmp_path: Any) -> None:
    from tests.conformance import gang_report
    from tests.conformance.timeline_harness import StepResult, TimelineResult, summary

    bad = StepResult(1, "gang pg0", ["pg0: upstream [...], ours [...]"], {"pods": {"pg0-0": "n1"}, "groups": {}}, {})
    good = StepResult(0, "nodes", [], {"pods": {}, "groups": {}}, {})
    results = [TimelineResult(5, "gang", ["gang"], "0: nodes; 1: gang pg0", [good, bad], 3.0)]
    data = {**summary(results), "switches": [], "run": {"command": "python -m tests.conformance --gang-only"}}
    assert (data["timelines"], data["agree"], data["disagree"], data["steps"], data["steps_agree"]) == (1, 0, 1, 2, 1)
    text = gang_report.section(data, results)
    assert text.startswith(gang_report.SECTION_START)
    assert text.endswith(gang_report.SECTION_END)
    assert "- seed 5 (gang): 0: nodes; 1: gang pg0" in text
    assert "step 1 (gang pg0): pg0: upstream [...], ours [...]" in text
    page = tmp_path / "conformance.md"
    page.write_text("# Conformance\n")
    gang_report.put_section(text, page)
    gang_report.put_section(text.replace("seed 5", "seed 6"), page)
    assert page.read_text().count(gang_report.SECTION_START) == 1
    assert gang_report.current_section(page) == text.replace("seed 5", "seed 6")


def test_a_tie_in_a_burst_explains_what_follows_it_but_not_a_first_real_difference() -> None:
    # Upstream: p0 ties n0/n3 and takes n0, then p1 (scored on that state) takes n1 alone. Ours took n3 for p0, so
    # p1 met another state and took n2: the step diverged on p0's tie.
    tops = {"p0": {"n0", "n3"}, "p1": {"n1"}}
    up = state_of([_pod("p0", "p0", "n0"), _pod("p1", "p1", "n1")], [])
    ours = state_of([_pod("p0", "p0", "n3"), _pod("p1", "p1", "n2")], [])
    problems = compare(up, ours)
    assert tie_explains(up, ours, problems, tops, ["p0", "p1"])
    # Without the creation order every difference must be a tie itself.
    assert not tie_explains(up, ours, problems, tops)
    # p0 agreeing and p1 differing is a real difference, whatever came before.
    ours = state_of([_pod("p0", "p0", "n0"), _pod("p1", "p1", "n2")], [])
    assert not tie_explains(up, ours, compare(up, ours), tops, ["p0", "p1"])
