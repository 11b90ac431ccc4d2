"""The default-profile timelines' part of the report: ``bench/results/conformance-timelines.json`` and a section of
docs/conformance.md, generated whole from a run (kept when report.py rewrites the page, as the gang section is).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kopf_scheduler._version import __version__
from tests.conformance import page_sections
from tests.conformance.gang_report import disagreement_lines
from tests.conformance.report import JSON_PATH
from tests.conformance.timeline_harness import TimelineResult
from tools.localcluster import kube_version

SECTION_START = "<!-- default-timelines:start -->"
SECTION_END = "<!-- default-timelines:end -->"
TIMELINES_JSON_PATH = JSON_PATH.parent / "conformance-timelines.json"
#: Upstream's podMaxInUnschedulablePodsDuration: a timeline shorter than this meets no flush.
FLUSH_SECONDS = 300.0


def write_json(data: Mapping[str, Any], results: Sequence[TimelineResult], path: Path = TIMELINES_JSON_PATH) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**data, "results": [r.to_json() for r in results]}
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def feature_table(results: Sequence[TimelineResult]) -> dict[str, dict[str, int]]:
    """Per feature: the timelines that have it, how many agree, how many were cut short by a tie."""
    table: dict[str, Counter[str]] = {}
    for result in results:
        for feature in result.features:
            row = table.setdefault(feature, Counter())
            row["timelines"] += 1
            row["agree"] += result.agree
            row["tie"] += result.diverged_on_tie is not None
    return {name: dict(row) for name, row in sorted(table.items())}


def timing(results: Sequence[TimelineResult]) -> dict[str, float]:
    seconds = sorted(r.seconds for r in results) or [0.0]
    return {
        "mean": round(sum(seconds) / len(seconds), 1),
        "median": seconds[len(seconds) // 2],
        "max": seconds[-1],
    }


def section(data: Mapping[str, Any], results: Sequence[TimelineResult]) -> str:
    run = data.get("run") or {}
    seeds = data.get("seeds") or []
    times = data.get("timing") or {}
    lines = [
        SECTION_START,
        "## Timelines of the default profile (multi-step scenarios)",
        "",
        "A SchedulerProfile with `spec: {}` (upstream's default profile, unmodified) is compared with kube-scheduler",
        "v1.36.3 run with its own defaults (no feature gate turned on) over timelines: each scheduler has a light",
        "control plane of its own and binds for real; both play the same timeline",
        "(`tests/conformance/default_timelines.py`): nodes, then 5-8 steps, each a burst of pods (plain, identical",
        "replicas, a node selector no node matches yet, a toleration, a scheduling gate, a PVC waiting for a PV, a",
        "ResourceClaim waiting for devices, low and high priority classes) or a cluster event (a node added,",
        "labelled, tainted or untainted, cordoned or uncordoned, deleted; pods deleted; a PV, a ResourceSlice, a",
        "PodDisruptionBudget created; a scheduling gate removed). Pods wait across steps, so the comparison covers",
        "what wakes them (queueing hints), backoff, priority order, nominations and preemption's victims.",
        "",
        "After every step the harness (`tests/conformance/timeline_harness.py`) waits until the state has been",
        "quiet on both sides and both schedulers' active and backoff queues are empty (`scheduler_pending_pods`), so",
        "every retry a backoff holds has happened; then it compares every pod: bound where, or waiting with which",
        "PodScheduled condition (status, reason, message byte for byte), its nomination, whether it is gone (a",
        "victim) or terminating. Identical replicas are compared as a multiset. A timeline takes about a minute, far",
        "below upstream's five-minute flush of unschedulable pods (podMaxInUnschedulablePodsDuration), so no",
        "outcome hangs on that timer. The light control planes run no controllers: a PodDisruptionBudget is created",
        "with the status the generator drew, and the PV controller's half of a binding is done on both sides alike",
        "(`tests/conformance/timeline_objects.py`). A tie upstream broke the other way (our node among its",
        "highest-score nodes) ends the comparison of that timeline without a verdict against us. A step that differs",
        "otherwise is replayed on upstream alone from the timeline's start, up to three times",
        "(`tests/conformance/timeline_replay.py`): if upstream reaches our state after every step, the step agrees",
        "(listed below with the first run's differences) and the timeline goes on; if not, it is a disagreement.",
        "",
        f"- run: `{run.get('command', '')}`, {round(float(run.get('seconds') or 0), 1)} s "
        f"({data.get('workers', 1)} harnesses in parallel), started {run.get('started', '?')}, "
        f"commit {run.get('commit', '?')}, machine: {run.get('machine', '?')}",
        f"- per timeline: mean {times.get('mean')} s, median {times.get('median')} s, longest {times.get('max')} s"
        + (
            " (over five minutes: a pod could have met upstream's flush of unschedulable pods)"
            if float(times.get("max") or 0) > FLUSH_SECONDS
            else " (every timeline under the five-minute flush)"
        ),
        f"- versions: kube-scheduler, kube-apiserver and etcd of Kubernetes v{kube_version()}, "
        f"kopf-scheduler {__version__}",
        f"- seeds: {seeds[0] if seeds else '-'}..{seeds[-1] if seeds else '-'} (drawn fresh for this run; replay one "
        "with `python -m tests.conformance --timelines-only --timelines 1 --timeline-seed-start SEED`)",
        f"- timelines: {data.get('timelines')} of {data.get('requested')} requested"
        + (f" (time budget {data.get('budget_seconds'):.0f} s)" if data.get("budget_seconds") else "")
        + f", agree: **{data.get('agree')}** (of which after an upstream replay: {data.get('agree_on_replay', 0)}), "
        f"disagree: {data.get('disagree')} "
        f"({data.get('errors')} harness errors), diverged on a tie: {data.get('diverged_on_tie')}",
        f"- steps compared: {data.get('steps')}, agree: {data.get('steps_agree')}; pods at the end: {data.get('pods')}",
        "",
        "| feature | timelines | agree | cut short by a tie |",
        "|---|---|---|---|",
    ]
    for name, row in (data.get("feature_table") or {}).items():
        lines.append(f"| {name} | {row.get('timelines', 0)} | {row.get('agree', 0)} | {row.get('tie', 0)} |")
    lines.append("")
    lines += disagreement_lines(results)
    lines.append(SECTION_END)
    return "\n".join(lines)


def put_section(text: str, path: Path) -> None:
    page_sections.put_section(text, path, SECTION_START, SECTION_END)


def current_section(path: Path) -> str | None:
    return page_sections.current_section(path, SECTION_START, SECTION_END)
