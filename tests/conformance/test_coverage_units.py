"""Unit tests of the coverage pass (coverage.py) and the allocation comparison (allocations.py): no cluster."""

from __future__ import annotations

from collections import Counter

from tests.conformance import allocations, coverage, features
from tests.conformance.generator import generate


def _uses(seeds: range) -> Counter[str]:
    used: Counter[str] = Counter()
    for seed in seeds:
        scenario = generate(seed)
        for pending in scenario.pending:
            used.update(features.pod_uses(pending.manifest, scenario))
    return used


def test_the_coverage_pass_puts_every_new_input_in_front_of_the_schedulers() -> None:
    used = _uses(range(1, 60))
    for row in (
        "scheduling gates",
        "spec.nodeName",
        "generic ephemeral volumes",
        "DRA claim templates",
        "DRA shared claims",
        "DRA firstAvailable requests",
        "node declared features",
        "PDBs with percentages",
        "every preemption candidate violates a PDB",
    ):
        assert used[row] > 0, row


def test_untouched_pods_come_last_or_never_bind() -> None:
    for seed in range(1, 40):
        scenario = generate(seed)
        preset = [p for p in scenario.pending if p.manifest["spec"].get("nodeName")]
        if preset:
            assert preset == scenario.pending[-1:]  # it may overcommit its node: nothing is decided after it
            assert preset[0].features == ("NodeName",)
        for pending in scenario.pending:
            assert coverage.not_for_a_scheduler(pending.manifest) == bool(
                pending.manifest["spec"].get("schedulingGates")
                or pending.manifest["spec"].get("nodeName")
                or coverage.from_template(pending.manifest)
            )
        assert [p.index for p in scenario.pending] == list(range(len(scenario.pending)))


def test_declared_feature_pods_carry_the_rule_the_framework_infers_from() -> None:
    for seed in range(1, 40):
        scenario = generate(seed)
        for pending in scenario.pending:
            rules = pending.manifest["spec"]["containers"][0].get("restartPolicyRules")
            if rules and not coverage.not_for_a_scheduler(pending.manifest):  # gated copies run no plugin
                assert rules[0]["action"] == "RestartAllContainers"
                assert pending.manifest["spec"]["containers"][0]["restartPolicy"] == "Never"
                assert "NodeDeclaredFeatures" in pending.features


def test_percentages_are_scaled_up_as_the_disruption_controller_does() -> None:
    assert coverage.scaled("50%", 3) == 2
    assert coverage.scaled("25%", 3) == 1
    assert coverage.scaled("0%", 5) == 0
    assert coverage.scaled("100%", 4) == 4
    pods = [{"metadata": {"name": f"p{i}", "labels": {"app": "a"}}} for i in range(3)]
    status = coverage._status({"maxUnavailable": "34%"}, pods, {})  # 2 may go: 1 desired
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (1, 2)
    status = coverage._status({"minAvailable": "100%"}, pods, {})
    assert status["disruptionsAllowed"] == 0


def test_an_exhausted_budget_covers_every_existing_pod() -> None:
    found = 0
    for seed in range(1, 80):
        scenario = generate(seed)
        if not coverage.exhausted(scenario):
            continue
        found += 1
        [budget] = [b for b in scenario.budgets if b["metadata"]["name"] == coverage.EXHAUSTED_BUDGET]
        namespace = budget["metadata"]["namespace"]
        pods = [p for p in scenario.existing_pods if p["metadata"]["namespace"] == namespace]
        assert budget["status"]["expectedPods"] == len(pods)
        assert budget["status"]["disruptionsAllowed"] == 0
    assert found


def test_upstream_static_bindings_are_read_from_its_reserve_line() -> None:
    line = (
        'I1128 10:00:00.000000    1 binder.go:421] "AssumePodVolumes: GetBindVolumeToClaim" pod="ns/p1" '
        'PV="pv-3" PVC="ns/wffc0" newPV="pv-3" dirty=true'
    )
    other = line.replace('pod="ns/p1"', 'pod="ns/p2"').replace("wffc0", "wffc1")
    assert allocations.upstream_static_bindings([line, other, "garbage"], "ns/p1") == {"ns/wffc0": "pv-3"}
    assert allocations.upstream_static_bindings([other], "ns/p1") == {}


def test_the_binding_record_is_compared_with_upstreams_restated_one() -> None:
    expected = allocations.expected_record("ns", "p", "n1", "sched")
    event = {
        "type": "Normal",
        "reason": "Scheduled",
        "action": "Binding",
        "message": "Successfully assigned ns/p to n1",
        "reportingComponent": "sched",
    }
    pod = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    assert allocations.record_problems(expected, allocations.record_of(pod, [event])) == []
    wrong = dict(event, message="Successfully assigned ns/p to n2")
    assert allocations.record_problems(expected, allocations.record_of(pod, [wrong]))[0].startswith(
        "binding record: event"
    )
    assert len(allocations.record_problems(expected, allocations.record_of({}, [event, event]))) == 2
