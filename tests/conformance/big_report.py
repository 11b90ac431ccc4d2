"""The big-cluster run (big_clusters.py): its JSON and its generated section of docs/conformance.md.

Its own file (``bench/results/conformance-big-clusters.json``), also copied under ``big_clusters`` into
``bench/results/conformance.json``, and its own section between markers, kept when a run does not redo it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kopf_scheduler.algorithm import num_feasible_nodes_to_find
from tests.conformance import page_sections
from tests.conformance.runner import ProfileDef, ScenarioResult

SECTION_START = "<!-- big-clusters:start -->"
SECTION_END = "<!-- big-clusters:end -->"
BIG_JSON_NAME = "conformance-big-clusters.json"
#: The full run's second profile: an explicit percentage instead of the adaptive one.
SAMPLING_PROFILE = ProfileDef(
    "conformance-sampling-20",
    {"percentageOfNodesToScore": 20},
    "built-in: the default profile scoring 20 % of the nodes",
)


def scenario_row(result: ScenarioResult, profile: ProfileDef) -> dict[str, Any]:
    """One scenario's figures: pods by verdict, and those whose sample was compared (K nodes of more)."""
    wanted = num_feasible_nodes_to_find(profile.spec.get("percentageOfNodesToScore"), result.nodes)
    bound = [p for p in result.pods if p.upstream.kind == "bound"]
    return {
        "seed": result.seed,
        "nodes": result.nodes,
        "profile": result.profile,
        "existing_pods": result.existing_pods,
        "pods": len(result.pods),
        "agree": sum(p.agree for p in result.pods),
        "bound": len(bound),
        "unschedulable": sum(p.upstream.kind == "unschedulable" for p in result.pods),
        "nodes_to_score": wanted,
        "sampled": sum(len(p.upstream_scores) == wanted for p in bound),
        "seconds": round(result.seconds, 1),
        "problems": [f"seed {result.seed} {p.namespace}/{p.name}: {p.problems}" for p in result.pods if p.problems],
    }


def summary(rows: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> dict[str, Any]:
    pods = sum(r["pods"] for r in rows)
    agree = sum(r["agree"] for r in rows)
    return {
        "scenarios": len(rows),
        "scenarios_1000_plus": sum(r["nodes"] >= 1000 for r in rows),
        "pods": pods,
        "agree": agree,
        "disagree": pods - agree,
        "sampled": sum(r["sampled"] for r in rows),
        "rows": list(rows),
        "run": dict(run),
    }


def write_json(data: Mapping[str, Any], json_path: Path) -> Path:
    """``conformance-big-clusters.json`` beside ``json_path``, and the ``big_clusters`` key of ``json_path``."""
    path = json_path.parent / BIG_JSON_NAME
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    if json_path.is_file():
        main = json.loads(json_path.read_text())
        main["big_clusters"] = {k: v for k, v in data.items() if k != "rows"}
        json_path.write_text(json.dumps(main, indent=2) + "\n")  # as report.write_json: the file's own order
    return path


def section(data: Mapping[str, Any]) -> str:
    """The Markdown section of one big-cluster run."""
    run = data.get("run") or {}
    lines = [
        SECTION_START,
        "## Big clusters, exactly",
        "",
        "Scenarios of 1000 to 5000 nodes in 2 to 5 zones of unequal size (`tests/conformance/big_clusters.py`),",
        "where upstream scores only a sample: `percentageOfNodesToScore` (the adaptive `50 - n/125` % in the",
        "default profile, 20 % in `conformance-sampling-20`), from the rotating start index, over the node tree's",
        "zone-interleaved order. Upstream runs with `parallelism: 1`, whose search is not racy: it judges nodes one",
        "by one from its start index and stops at the feasible node after the K-th, so the infeasible nodes passed",
        "on the way move the index; ours does the same. Before each scenario both indexes are brought to 0 (a pod",
        "filtered in a one-node cluster), nodes are created by threads and reach both schedulers (and the model)",
        "in watch order. Per pod, besides the usual comparison, the nodes upstream scored (its V(10) lines) must",
        "be exactly the nodes ours scored (the in-process model, which starts from the same index): any",
        "difference in sample, order or rotation is a disagreement. No disagreement is excused (no `known.py`).",
        "",
        f"Run: `{run.get('command', '')}`, seeds {run.get('seed_start', '?')}.., commit `{run.get('commit', '?')}`, "
        f"started {run.get('started', '?')}, {run.get('seconds', 0):.0f} s, {run.get('machine', '')}.",
        "",
        f"**{data['agree']} of {data['pods']} pods agree** in {data['scenarios']} scenarios "
        f"({data['scenarios_1000_plus']} of 1000 nodes or more); {data['sampled']} bound pods had a sample of the "
        "full size compared (upstream scored K nodes, K = `numFeasibleNodesToFind`).",
        "",
        "| seed | nodes | profile | existing pods | pods | bound | unschedulable | K | sampled | agree | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        lines.append(
            f"| {r['seed']} | {r['nodes']} | {r['profile']} | {r['existing_pods']} | {r['pods']} | {r['bound']} | "
            f"{r['unschedulable']} | {r['nodes_to_score']} | {r['sampled']} | {r['agree']} | {r['seconds']} |"
        )
    problems = [p for r in data["rows"] for p in r["problems"]]
    if problems:
        lines += ["", "Disagreements:", "", *[f"- {p}" for p in problems]]
    lines.append(SECTION_END)
    return "\n".join(lines)


def put_section(text: str, path: Path) -> None:
    page_sections.put_section(text, path, SECTION_START, SECTION_END)


def current_section(path: Path) -> str | None:
    return page_sections.current_section(path, SECTION_START, SECTION_END)
