"""The big-cluster scenarios' pure parts (big_clusters.py, big_report.py): no cluster needed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from tests.conformance.big_clusters import (
    BIG_SIZES,
    create_nodes,
    generate_big,
    sampling_problems,
)
from tests.conformance.big_report import put_section, scenario_row, section, summary, write_json
from tests.conformance.generator import ZONE_KEY
from tests.conformance.oracle import scheduler_config
from tests.conformance.runner import DEFAULT_PROFILE, Decision, PodResult, ScenarioResult


def test_a_big_scenario_is_a_function_of_its_seed() -> None:
    first, again = generate_big(7, 1000), generate_big(7, 1000)
    assert json.dumps(first.nodes) == json.dumps(again.nodes)
    assert [p.manifest for p in first.pending] == [p.manifest for p in again.pending]
    assert len(first.nodes) == 1000
    assert 10 <= len(first.pending) <= 16
    assert json.dumps(generate_big(8, 1000).nodes) != json.dumps(first.nodes)
    assert min(BIG_SIZES) >= 1000
    assert max(BIG_SIZES) == 5000


def test_zones_are_unequal_and_not_in_name_order() -> None:
    scenario = generate_big(3, 2000)
    zones = [node["metadata"]["labels"].get(ZONE_KEY, "") for node in scenario.nodes]
    counts = Counter(zones)
    assert len([z for z in counts if z]) >= 2
    assert max(counts.values()) > 1.2 * min(c for z, c in counts.items() if z)
    # The node tree interleaves zones: name order must not already be that order.
    assert zones[:20] != sorted(zones[:20])


def test_pending_pods_avoid_what_is_random_upstream() -> None:
    for seed in range(1, 30):
        scenario = generate_big(seed, 500)
        cpus = []
        for pod in scenario.pending:
            spec = pod.manifest["spec"]
            text = json.dumps(spec)
            # No PreFilter node-name result (a Go map upstream), no preemption (a random offset).
            assert "matchFields" not in text
            assert "metadata.name" not in text
            assert "priorityClassName" not in spec
            assert "nodeName" not in spec
            cpus.append(spec["containers"][0]["resources"]["requests"]["cpu"])
        assert len(set(cpus)) == len(cpus), "two pods could share a batching signature"


def test_nodes_come_back_in_resource_version_order() -> None:
    versions = iter([5, 3, 9, 1, 7] * 40)

    def create(node: Any) -> dict[str, Any]:
        return {"metadata": {"name": node["metadata"]["name"], "resourceVersion": str(next(versions))}}

    nodes = [{"metadata": {"name": f"n{i}"}} for i in range(200)]
    created = create_nodes(create, nodes)
    rvs = [int(obj["metadata"]["resourceVersion"]) for obj in created]
    assert rvs == sorted(rvs)
    assert len(created) == 200


def test_sampling_problems() -> None:
    assert sampling_problems({"a": 1, "b": 2}, {"a", "b"}, False) == []
    assert sampling_problems({}, {"a"}, False) == []  # one feasible node: upstream scored nothing
    assert sampling_problems({"a": 1, "b": 2}, {"a", "c"}, False) == [
        "sampling: upstream scored 2 nodes, ours 2 (1 only upstream's, 1 only ours)"
    ]
    assert sampling_problems({"a": 1}, {"a"}, True)[0].startswith("sampling: upstream took a batching hint")


def test_the_scenario_harness_runs_upstream_with_one_worker() -> None:
    assert scheduler_config([{"schedulerName": "x"}], parallelism=1)["parallelism"] == 1
    assert "parallelism" not in scheduler_config([{"schedulerName": "x"}])


def _pod(name: str, kind: str, scored: int, problems: list[str]) -> PodResult:
    scores = {f"n{i}": 1 for i in range(scored)}
    return PodResult(1, "p", 0, name, "ns", [], [], Decision(kind), Decision(kind), upstream_scores=scores,
                     problems=problems)  # fmt: skip


def test_report_rows_count_compared_samples(tmp_path: Path) -> None:
    pods = [_pod("a", "bound", 420, []), _pod("b", "bound", 12, []), _pod("c", "unschedulable", 0, ["x"])]
    result = ScenarioResult(seed=4, size="big-1000", profile="p", nodes=1000, existing_pods=9, pods=pods, seconds=3)
    row = scenario_row(result, DEFAULT_PROFILE)
    assert (row["nodes_to_score"], row["sampled"], row["agree"], row["bound"]) == (420, 1, 2, 2)
    data = summary([row], {"command": "c", "seed_start": 4, "commit": "abc", "seconds": 5})
    assert (data["pods"], data["disagree"], data["scenarios_1000_plus"]) == (3, 1, 1)
    main_json = tmp_path / "conformance.json"
    main_json.write_text(json.dumps({"scenarios": 100}))
    path = write_json(data, main_json)
    assert json.loads(path.read_text())["rows"][0]["seed"] == 4
    assert json.loads(main_json.read_text())["big_clusters"]["pods"] == 3
    page = tmp_path / "conformance.md"
    page.write_text("# Conformance\n\nbody\n")
    put_section(section(data), page)
    put_section(section(data), page)  # replaced, not appended twice
    text = page.read_text()
    assert text.count("## Big clusters, exactly") == 1
    assert "**2 of 3 pods agree**" in text
    assert "- seed 4 ns/c: ['x']" in text
