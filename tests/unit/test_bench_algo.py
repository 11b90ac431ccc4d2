"""Smoke run of the algorithm benchmark at 50 nodes, so ``make bench-algo`` cannot rot unnoticed.

Nothing here is timed: the tests check that every workload schedules all its pods through the default profile,
that the pods land where the workload's constraints say, and that the JSON rows and the docs block are
written as the report expects (the docs block is replaced in place, the prose around it kept).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench import algo
from bench._synthetic import EXISTING_PODS_PER_NODE, HOSTNAME_KEY, WORKLOADS, ZONE_KEY, ZONES, make_cluster

NODES = 50
CYCLES = 20
WARMUP = 5


def _placed(cache: object, app: str) -> list[str]:
    return [p.node_name for p in cache.pods() if p.labels.get("app") == app]  # type: ignore[attr-defined]


def test_default_profile_runs_the_implemented_defaults() -> None:
    cache = make_cluster(3)
    framework = algo.default_framework(cache)
    names = set(framework.plugins)
    assert {"NodeResourcesFit", "PodTopologySpread", "InterPodAffinity", "TaintToleration"} <= names
    assert framework.profile.omitted_defaults == ()  # upstream's whole default profile
    assert "DynamicResources" in names


def test_synthetic_cluster_shape() -> None:
    cache = make_cluster(6)
    assert cache.num_nodes == 6
    assert sum(1 for _ in cache.pods()) == 6 * EXISTING_PODS_PER_NODE
    zones = Counter(cache.node_at(slot).labels[ZONE_KEY] for slot in cache.node_order())
    assert zones == dict.fromkeys(ZONES, 2)


@pytest.mark.parametrize("workload", list(WORKLOADS), ids=list(WORKLOADS))
def test_every_cycle_schedules_and_assumes(workload: str) -> None:
    run, cache = algo.measure(workload, NODES, cycles=CYCLES, warmup=WARMUP)
    assert run.durations_ns.shape == (CYCLES,)
    assert (run.durations_ns > 0).all()
    # Below 100 nodes every node is a candidate (numFeasibleNodesToFind).
    assert run.evaluated_nodes == NODES
    app = WORKLOADS[workload](0)["metadata"]["labels"]["app"]
    placed = _placed(cache, app)
    assert len(placed) == WARMUP + CYCLES
    assert all(cache.is_assumed(p.uid) for p in cache.pods() if p.labels.get("app") == app)


def test_topology_spread_pods_stay_within_max_skew() -> None:
    run, cache = algo.measure("topology-spread", NODES, cycles=CYCLES, warmup=WARMUP)
    by_zone = Counter(cache.node(name).labels[ZONE_KEY] for name in _placed(cache, "spread"))
    counts = [by_zone.get(zone, 0) for zone in ZONES]
    assert max(counts) - min(counts) <= 1
    # The constraint rejects the fuller zones each cycle, so a third or two thirds of the nodes are feasible.
    assert run.feasible_nodes < NODES


def test_affinity_pods_spread_over_hosts_by_preferred_anti_affinity() -> None:
    _, cache = algo.measure("inter-pod-affinity", NODES, cycles=CYCLES, warmup=WARMUP)
    hosts = [cache.node(name).labels[HOSTNAME_KEY] for name in _placed(cache, "affinity")]
    # 25 pods over 50 nodes: the anti-affinity preference keeps them on distinct hosts.
    assert len(set(hosts)) == len(hosts)


def test_main_writes_rows_and_replaces_the_docs_block(tmp_path: Path) -> None:
    output, docs = tmp_path / "algo.json", tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## End-to-end benchmark\n\nkept\n")
    argv = ["--sizes", "20,40", "--cycles", "5", "--warmup", "2", "--repeat", "2"]
    assert algo.main([*argv, "--output", str(output), "--docs", str(docs)]) == 0

    rows = json.loads(output.read_text())
    assert [(r["workload"], r["nodes"]) for r in rows] == [(w, n) for w in WORKLOADS for n in (20, 40)]
    for row in rows:
        assert {"workload", "nodes", "cycles_per_s", "p50_ms", "p99_ms"} <= set(row)
        assert row["cycles_per_s"] > 0
        assert 0 < row["p50_ms"] <= row["p99_ms"]
        assert len(row["runs"]) == 2
        assert row["p50_ms"] == min(r["p50_ms"] for r in row["runs"])

    text = docs.read_text()
    assert "## End-to-end benchmark\n\nkept" in text
    assert text.count(algo.SECTION_HEADING) == 1
    assert "| plain | 40 | 5 |" in text
    # Hand-written analysis in the section survives a re-run; only the generated block changes.
    docs.write_text(text.replace(algo.END_MARKER, algo.END_MARKER + "\n\nWhere the time goes: analysis."))
    assert (
        algo.main(
            [
                "--sizes",
                "20",
                "--cycles",
                "5",
                "--warmup",
                "2",
                "--repeat",
                "1",
                "--output",
                str(output),
                "--docs",
                str(docs),
            ]
        )
        == 0
    )
    text = docs.read_text()
    assert "Where the time goes: analysis." in text
    assert "## End-to-end benchmark\n\nkept" in text
    assert text.count(algo.BEGIN_MARKER) == 1
    assert "| plain | 40 |" not in text
