"""The gang timelines' part of the report: ``bench/results/conformance-gangs.json`` and a section of
docs/conformance.md, generated whole from a run (the rest of the page is written by report.py; this section is
kept when that page is rewritten, as the extender and validation sections are).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kopf_scheduler._version import __version__
from tests.conformance import page_sections
from tests.conformance.gang_known import PENDING
from tests.conformance.report import JSON_PATH
from tests.conformance.timeline_harness import TimelineResult
from tools.localcluster import kube_version

SECTION_START = "<!-- gang-timelines:start -->"
SECTION_END = "<!-- gang-timelines:end -->"
GANG_JSON_PATH = JSON_PATH.parent / "conformance-gangs.json"


#: What the gang timelines found in our scheduler, and how it was fixed (static: the record of earlier runs).
FOUND_AND_FIXED = (
    "**A member of an unschedulable gang had another PodScheduled message** (seed 103 of the first trial runs). "
    "Upstream's `RunPermitPlugins` returns the last waiting plugin's status with `one or more plugins asked to wait "
    "and no plugin rejected pod` appended, without the pod's name, so such a member reads `pod group is "
    "unschedulable, waiting for minCount pods from a gang to be scheduled, one or more plugins asked to wait and no "
    "plugin rejected pod`; ours said `pod group is unschedulable, one or more plugins asked to wait and no plugin "
    'rejected pod "pg1-0"` (an older upstream wording). Fixed in `framework/runtime/binding.py`.',
    "**A basic-policy PodGroup went back to Unschedulable after it was Scheduled** (seed 908630). One member "
    "placed (group True), the other alone in the next cycle 60 ms later (group Unschedulable, which must not regress "
    "a True). Upstream patches the condition synchronously, so its next cycle reads its own True; ours patches "
    "asynchronously and read the cached PodGroup, which did not show the True yet. Fixed: the pod-group cycle goes "
    "by the condition it last wrote until the watch shows it (`schedule_one_pod_group.py`).",
)


def write_json(data: Mapping[str, Any], results: Sequence[TimelineResult], path: Path = GANG_JSON_PATH) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**data, "results": [r.to_json() for r in results]}
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def section(data: Mapping[str, Any], results: Sequence[TimelineResult]) -> str:
    run = data.get("run") or {}
    seeds = data.get("seeds") or []
    lines = [
        SECTION_START,
        "## Workload-aware (gang) scheduling: timelines",
        "",
        "A workload-aware SchedulerProfile (one enabling GangScheduling, e.g. `examples/gang-scheduling.yaml`) is",
        "compared with kube-scheduler v1.36.3 run with `--feature-gates=GenericWorkload=true,GangScheduling=true,",
        "TopologyAwareWorkloadScheduling=true,WorkloadAwarePreemption=true` and the same plugin set (the gated",
        "defaults our profile does not enable are disabled in upstream's profile). Each scheduler has a light control",
        "plane of its own and binds for real; both play the same timeline (`tests/conformance/gang_timelines.py`:",
        "nodes, then 4-7 steps of gangs whose minCount is met or not, late members, members beyond minCount, pods",
        "before their PodGroup, basic-policy groups, plain pods, nodes added, pods deleted), and after every step the",
        "states are compared (`tests/conformance/timeline_harness.py`): every pod's node, PodScheduled condition and",
        "nomination (the members of one gang as a multiset), every PodGroup's conditions, byte for byte. A tie that",
        "upstream broke the other way (our node among its highest-score nodes, or a gang in another of the",
        "placements upstream scored alike: `tests/conformance/gang_ties.py`) ends the comparison of that timeline",
        "without a verdict against us. Upstream tries a gang's placements in random order (a Go map) and words an",
        "unschedulable gang's members after the first one, and may retry such a gang for as long as the timeline",
        "runs: when only pods' messages keep changing for 10 s, the step is judged on the states upstream cycled",
        "through (ours must show one of them). A step whose differences none of that explains is not reported at",
        "once: upstream's cluster is emptied and the timeline replayed on it alone up to that step, up to three times",
        "(`tests/conformance/timeline_replay.py`). When upstream reaches our state after every step in one replay,",
        "our outcome is one of upstream's own (an outcome that hangs on when actions land against its backoff",
        "windows), the step agrees and the timeline goes on from there; the first run's differences are listed below.",
        "Otherwise it is a disagreement.",
        "",
        f"- run: `{run.get('command', '')}`, {round(float(run.get('seconds') or 0), 1)} s, "
        f"started {run.get('started', '?')}, "
        f"commit {run.get('commit', '?')}, machine: {run.get('machine', '?')}",
        f"- versions: kube-scheduler, kube-apiserver and etcd of Kubernetes v{kube_version()} (light control planes "
        f"with the four gates and scheduling.k8s.io/v1alpha2), kopf-scheduler {__version__}",
        f"- seeds: {seeds[0] if seeds else '-'}..{seeds[-1] if seeds else '-'} (drawn fresh for this run; replay one "
        "with `python -m tests.conformance --gang-only --gang-timelines 1 --gang-seed-start SEED`); switches: "
        f"{', '.join(data.get('switches') or []) or 'none'}",
        f"- timelines: {data.get('timelines')}, agree: **{data.get('agree')}** (of which after an upstream replay: "
        f"{data.get('agree_on_replay', 0)}), disagree: {data.get('disagree')} "
        f"({data.get('errors')} harness errors), diverged on a tie: {data.get('diverged_on_tie')}",
        f"- steps: {data.get('steps')}, agree: {data.get('steps_agree')}; steps with differences that a feature not "
        f"yet on main explains: {data.get('steps_pending')} ({_features(data.get('pending_features') or {})})",
        f"- pods at the end of the timelines: {data.get('pods')}; features: {_features(data.get('features') or {})}",
        "",
        "Features main lacked when the timelines were written are recognised by their exact shape",
        f"(`tests/conformance/gang_known.py`; excused now: {', '.join(sorted(PENDING)) or 'none'}). Before",
        "TopologyAwareWorkloadScheduling and WorkloadAwarePreemption were merged, every unschedulable gang differed",
        "so: upstream runs the placement algorithm for every pod group (`0/1 placements are available, first",
        "placement status: pod group is unschedulable`), refuses per-pod preemption for group members (`preemption:",
        "not eligible due to workload aware preemption enabled`) and appends the group preemption's verdict to the",
        "group's message (`, No preemption victims found for incoming preemptor`).",
        "",
        "The switches `topology` and `preemption` (both on by default; `--gang-switches none` turns them off) give",
        "PodGroups `schedulingConstraints.topology` (a zone or rack key), priority classes and `disruptionMode`, and",
        "add low-priority fillers that only preemption makes room beside (each action of such a timeline waits for",
        "quiet: victims go asynchronously).",
        "",
    ]
    lines += ["Found and fixed:", ""]
    lines += [f"- {item}" for item in FOUND_AND_FIXED]
    lines.append("")
    lines += disagreement_lines(results)
    lines.append(SECTION_END)
    return "\n".join(lines)


def _features(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"


def put_section(text: str, path: Path) -> None:
    """Replace the page's gang section with ``text``, or append it."""
    page_sections.put_section(text, path, SECTION_START, SECTION_END)


def current_section(path: Path) -> str | None:
    """The gang section as the page has it now (markers included), or None."""
    return page_sections.current_section(path, SECTION_START, SECTION_END)


def disagreement_lines(results: Sequence[TimelineResult]) -> list[str]:
    """The page's account of the timelines that disagree, step by step (or that none did); the gang and the
    default-profile timeline sections share it."""
    lines = replay_lines(results)
    failing = [r for r in results if not r.agree]
    if not failing:
        return [*lines, "No disagreement."]
    lines += ["Disagreements:", ""]
    for result in failing:
        lines.append(f"- seed {result.seed} ({result.profile}): {result.description}")
        if result.error:
            lines.append(f"  - harness error: {result.error}")
        for step in result.steps:
            lines += [f"  - step {step.index} ({step.label}): {problem}" for problem in step.problems]
    return lines


def replay_lines(results: Sequence[TimelineResult]) -> list[str]:
    """The steps that differed on the first run and agreed once upstream, replayed alone, reached our states
    (timeline_replay.py): each with the first run's differences, so the reader judges the evidence too."""
    replayed = [(r, s) for r in results for s in r.steps if s.upstream_replay]
    if not replayed:
        return []
    lines = [
        "Steps that differed on the first run and agree because upstream, replayed alone from the start of the "
        "timeline, reached our state after every step up to them (`tests/conformance/timeline_replay.py`; the "
        "first run's differences as they were):",
        "",
    ]
    for result, step in replayed:
        lines.append(
            f"- seed {result.seed} ({result.profile}), step {step.index} ({step.label}): upstream reached ours on "
            f"replay {step.upstream_replay}"
        )
        lines += [f"  - first run: {problem}" for problem in step.replayed]
    lines.append("")
    return lines
