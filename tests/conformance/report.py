"""Turn scenario results into bench/results/conformance.json and docs/conformance.md.

The JSON is the machine-readable summary (``{"scenarios", "pods", "agree", "disagree", "by_plugin": {...}}``
plus how and where it was measured); the Markdown page explains the method, gives the per-plugin,
per-feature and per-profile tables, and lists every disagreement with a reproducer (the pod, the nodes it is
about and the pods on them, as YAML) and why it happens. Everything on the page is generated from the run (or
is the method, which does not change with a run): no hand-written result (issue 37).

Per plugin, a pod is *decisive* for a plugin when the plugin demonstrably decided something for it:
upstream's FailedScheduling text names the plugin's reason, or upstream's per-node scores of the plugin
differed between the feasible nodes, or the plugin filtered out a node in the in-process model while the
model matched upstream (same verdict, feasible set, scores and message). A pod *exercises* a plugin when
it is decisive or the pod's spec uses what the plugin reads (tolerations, node affinity, host ports,
spread constraints, (anti-)affinity, requests, images). A pod counts for every plugin it exercised; its
agreement is the whole pod's. Per feature (tests/conformance/features.py), a pod counts when its generated
manifest and scenario use the feature (a gate, a claim template, a spread...), and is decisive when one of the
plugins that judge the feature was.
"""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.conformance import parts_report
from tests.conformance.devices import extended_devices_compared
from tests.conformance.features import FEATURES, by_feature
from tests.conformance.generator import PLUGINS
from tests.conformance.known import FIXED, KNOWN, explain
from tests.conformance.runner import REPO_ROOT, UNTOUCHED_KINDS, PodResult, ProfileDef, ScenarioResult

JSON_PATH = REPO_ROOT / "bench" / "results" / "conformance.json"
#: The files a conformance result depends on (for the "uncommitted changes" note).
RELEVANT_PATHS = ("operator", "tests/conformance", "tests/e2e/operator_process.py", "tools/localcluster.py", "examples")
DOC_PATH = REPO_ROOT / "docs" / "conformance.md"


@dataclass
class RunInfo:
    """How, where and when the results were measured."""

    command: str
    seed_start: int
    sizes: str
    seconds: float
    started: str
    commit: str
    machine: str
    #: The first seed was drawn at random for this run (not given with --seed-start).
    seeds_fresh: bool = False

    @classmethod
    def collect(
        cls, *, command: str, seed_start: int, sizes: str, seconds: float, started: str, seeds_fresh: bool = False
    ) -> RunInfo:
        return cls(command, seed_start, sizes, seconds, started, _commit(), _machine(), seeds_fresh)


#: How preemption is compared (method only: the measured numbers are in the Result tables).
PREEMPTION_METHOD = (
    "Preemption: DefaultPreemption runs on both sides, so every unschedulable pod's texts carry its",
    "`preemption: ...` part, and a pod that outranks running pods preempts. Upstream must still leave the cluster",
    "as it found it: a validating webhook served by the harness (`tests/conformance/preemption_harness.py`)",
    "refuses each victim's DisruptionTarget patch with 404 NotFound, on which upstream's executor logs",
    '`"Victim Pod is already deleted"` and goes on to the next victim; a ValidatingAdmissionPolicy denies it every',
    "pod DELETE (a safety net). Upstream's `-v=2` log gives the node it chose and each victim; ours preempts for",
    "real, and the harness follows our pod until it binds. A kubelet stand-in gives every pod on a node a",
    "distinct `status.startTime`, so upstream's last tie-breaks are deterministic and the nominated node and",
    "victims are compared exactly. A share of the seeds (`tests/conformance/preemptions.py`) get priorities,",
    "low-priority filler pods, PodDisruptionBudgets (with the status the disruption controller would write) and",
    "`conformance-high` and `conformance-high-never` preemptors.",
)


def _not_exercised(what: str, names: Sequence[str]) -> str:
    return f"{what} no pod of this run exercised: {', '.join(names)}." if names else f"{what}: every one exercised."


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def _seed_origin(run: dict[str, Any]) -> str:
    return "drawn fresh for this run" if run.get("seeds_fresh") else "given with --seed-start"


def _commit() -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        # Only what the result depends on: the operator, the harness, the launcher and the compared profiles.
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", *RELEVANT_PATHS],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    changed = [line[3:] for line in dirty.splitlines() if line.strip()]  # "XY path": status, space, path
    if not changed:
        return rev
    more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
    return f"{rev} + uncommitted changes to {', '.join(changed[:5])}{more}"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import os

        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = 0
    memory = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB RAM"
                break
    except OSError:
        pass
    return (
        f"{cores} cores ({cpu}){memory}, {platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


# -- aggregation -----------------------------------------------------------------------------------------
def all_pods(results: Sequence[ScenarioResult]) -> list[PodResult]:
    return [pod for scenario in results for pod in scenario.pods]


def annotate_known(results: Sequence[ScenarioResult]) -> None:
    for pod in all_pods(results):
        if not pod.agree or pod.model_notes:
            known = explain(pod)
            pod.known = known.key if known else None


def _devices_compared(pod: PodResult) -> bool:
    """Both bound on one node, and upstream's denied PreBind told its devices."""
    return pod.upstream.devices is not None and pod.ours.node == pod.upstream.node


def summary(results: Sequence[ScenarioResult], profiles: Sequence[ProfileDef], run: RunInfo) -> dict[str, Any]:
    pods = all_pods(results)
    by_plugin: dict[str, dict[str, int]] = {}
    for plugin in PLUGINS:
        exercised = [p for p in pods if plugin in p.plugins]
        by_plugin[plugin] = {
            "scenarios": len({(p.seed, p.profile) for p in exercised}),
            "pods": len(exercised),
            "decisive": sum(plugin in p.decisive for p in exercised),
            "agree": sum(p.agree for p in exercised),
            "disagree": sum(not p.agree for p in exercised),
        }
    by_profile: dict[str, dict[str, int]] = {}
    for profile in profiles:
        mine = [p for p in pods if p.profile == profile.name]
        by_profile[profile.name] = {
            "scenarios": sum(1 for s in results if s.profile == profile.name),
            "pods": len(mine),
            "agree": sum(p.agree for p in mine),
            "disagree": sum(not p.agree for p in mine),
        }
    bound = [p for p in pods if p.upstream.kind == "bound" and p.ours.kind == "bound"]
    unschedulable = [p for p in pods if p.upstream.kind == "unschedulable" and p.ours.kind == "unschedulable"]
    preempting = [p for p in unschedulable if p.upstream.nominated or p.ours.nominated]
    return {
        "scenarios": len(results),
        "pods": len(pods),
        "agree": sum(p.agree for p in pods),
        "disagree": sum(not p.agree for p in pods),
        "known": sum(1 for p in pods if not p.agree and p.known),
        "by_plugin": by_plugin,
        "by_feature": by_feature(pods),
        "by_profile": by_profile,
        "checks": {
            "verdicts_equal": sum(p.upstream.kind == p.ours.kind for p in pods),
            "both_bound": len(bound),
            "our_node_in_upstream_top_set": sum(p.ours.node in p.upstream_top for p in bound),
            "upstream_top_set_size_above_1": sum(len(p.upstream_top) > 1 for p in bound),
            "upstream_took_batching_hint": sum(p.upstream_hint is not None for p in bound),
            "batching_hint_widened_by_a_tie": sum(p.hint_tie for p in bound),
            "both_unschedulable": len(unschedulable),
            "failed_scheduling_note_equal": sum(p.upstream.note == p.ours.note for p in unschedulable),
            "pod_scheduled_message_equal": sum(p.upstream.condition == p.ours.condition for p in unschedulable),
            "preempting": len(preempting),
            "nominated_node_equal": sum(p.upstream.nominated == p.ours.nominated for p in preempting),
            "victims_equal": sum(p.upstream.victims == p.ours.victims for p in preempting),
            "upstream_terminating_victims": sum(bool(p.upstream.terminating_victims) for p in preempting),
            "ours_bound_on_nominated_node": sum(
                p.ours.nominated is not None and p.ours.final_node == p.ours.nominated for p in preempting
            ),
            "preemption_suffix_in_note": sum("preemption: " in (p.upstream.note or "") for p in unschedulable),
            # Allocations (allocations.py): the PVs of upstream's static bindings, the devices of the claims, the
            # Scheduled event and PodScheduled condition of every pod ours bound.
            "static_volume_bindings_compared": sum(p.ours.volumes is not None for p in bound),
            "static_volume_bindings_equal": sum(
                p.ours.volumes is not None and p.ours.volumes == p.upstream.volumes for p in bound
            ),
            "devices_compared": sum(_devices_compared(p) for p in bound),
            "devices_equal": sum(_devices_compared(p) and p.ours.devices == p.upstream.devices for p in bound),
            # ... of which those of the claim each scheduler created for DRA-backed extended resources.
            "extended_devices_compared": sum(
                _devices_compared(p) and extended_devices_compared(p.manifest) for p in bound
            ),
            "extended_devices_equal": sum(
                _devices_compared(p) and extended_devices_compared(p.manifest) and p.ours.devices == p.upstream.devices
                for p in bound
            ),
            "binding_record_equal": sum(not any(q.startswith("binding record") for q in p.problems) for p in bound),
            # Pods no scheduler may act on (gated, spec.nodeName preset, waiting in PreEnqueue for a claim).
            "untouched": sum(p.upstream.kind in UNTOUCHED_KINDS for p in pods),
            "untouched_state_equal": sum(
                p.upstream.kind in UNTOUCHED_KINDS
                and (p.upstream.kind, p.upstream.node, p.upstream.condition, p.upstream.detail)
                == (p.ours.kind, p.ours.node, p.ours.condition, p.ours.detail)
                for p in pods
            ),
        },
        "model": {
            "pods_with_differences": sum(bool(p.model_notes) for p in pods),
            "explained_by_known": sum(bool(p.model_notes) and bool(p.known) for p in pods),
            "notes": _count(note for p in pods for note in p.model_notes),
        },
        "invalid_generated_pods": sum(len(s.invalid) for s in results),
        # The preempting pods ours did not bind on their nominated node: named, so the check's shortfall can be
        # read after the run (a pod whose victims upstream found already terminating is not a disagreement).
        "not_on_nominated_node": [
            {
                "seed": p.seed,
                "profile": p.profile,
                "pod": f"{p.namespace}/{p.name}",
                "nominated": p.ours.nominated,
                "final_node": p.ours.final_node,
                "upstream_terminating_victims": p.upstream.terminating_victims,
            }
            for p in preempting
            if p.ours.final_node != p.ours.nominated
        ],
        "disagreements": [
            {
                "seed": p.seed,
                "profile": p.profile,
                "pod": f"{p.namespace}/{p.name}",
                "problems": p.problems,
                "known": p.known,
                # The evidence, so that a disagreement seen once can be explained after the run.
                "texts": {
                    side: {"note": decision.note, "condition": decision.condition}
                    for side, decision in (("upstream", p.upstream), ("ours", p.ours))
                },
            }
            for p in pods
            if not p.agree
        ],
        "profiles": [{"name": p.name, "source": p.source} for p in profiles],
        "run": {
            "command": run.command,
            "seeds": f"{run.seed_start}..{run.seed_start + len(results) - 1}",
            "seeds_fresh": run.seeds_fresh,
            "sizes": run.sizes,
            "seconds": round(run.seconds, 1),
            "date": run.started,
            "commit": run.commit,
            "machine": run.machine,
            "kube_scheduler": "v1.36.3 (tools/versions.env), built from k8s.io/kubernetes",
        },
    }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items()))


def write_json(data: dict[str, Any], path: Path = JSON_PATH) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


# -- markdown ----------------------------------------------------------------------------------------------
def _yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, width=120).rstrip()


def _reproducer(pod: PodResult) -> str:
    manifest = dict(pod.manifest)
    manifest["spec"] = {"schedulerName": "<scheduler>", **manifest.get("spec", {})}
    context = pod.context or {}
    parts = [
        f"#### seed {pod.seed}, profile `{pod.profile}`, pod `{pod.namespace}/{pod.name}`",
        "",
        *(f"- {problem}" for problem in pod.problems),
        f"- upstream: {_decision(pod.upstream)}",
        f"- ours: {_decision(pod.ours)}",
    ]
    if pod.upstream_scores:
        parts.append(f"- upstream's totals: {json.dumps(pod.upstream_scores, sort_keys=True)}")
    if pod.model.get("scores"):
        parts.append(f"- our model's totals: {json.dumps(pod.model['scores'], sort_keys=True)}")
    if pod.model_notes:
        parts.append(f"- model vs upstream: {', '.join(pod.model_notes)}")
    known = explain(pod)
    if known is not None:
        parts.append(f"- why: known difference `{known.key}` ({known.summary}; see *Known differences* below)")
    else:
        parts.append("- why: not explained yet (see the report of the run)")
    parts += [
        "",
        f"Rerun: `python -m tests.conformance --seed-start {pod.seed} --scenarios 1 --profiles {pod.profile}`",
        "",
        "<details><summary>pod, relevant nodes and the pods on them (YAML)</summary>",
        "",
        "```yaml",
        _yaml(manifest),
    ]
    for obj in context.get("nodes", []) + context.get("pods", []):
        parts += ["---", _yaml(obj)]
    parts += ["```", "", "</details>", ""]
    return "\n".join(parts)


def _decision(decision: Any) -> str:
    if decision.kind == "bound":
        return f"bound to `{decision.node}`"
    if decision.kind == "unschedulable" and decision.nominated:
        final = f", then bound to `{decision.final_node}`" if decision.final_node else ""
        return (
            f"unschedulable: `{decision.note}`, nominated for `{decision.nominated}`, victims "
            f"{decision.victims} (already terminating: {decision.terminating_victims}){final}"
        )
    if decision.kind == "unschedulable":
        return f"unschedulable: `{decision.note}`"
    return f"{decision.kind} ({decision.detail or decision.condition})"


def write_markdown(
    data: dict[str, Any], results: Sequence[ScenarioResult], profiles: Sequence[ProfileDef], path: Path = DOC_PATH
) -> None:
    run = data["run"]
    checks = data["checks"]
    lines = [
        "# Conformance: kopf-scheduler against upstream kube-scheduler v1.36.3",
        "",
        "Generated by `make conformance` (`python -m tests.conformance`); do not edit by hand. The method is in",
        "[`tests/conformance/`](../tests/conformance/) (module docstrings of `generator.py`, `runner.py`,",
        "`oracle.py`, `sim.py`, `features.py`); the numbers below are one measured run, also in",
        "[`bench/results/conformance.json`](../bench/results/conformance.json).",
        "",
        f"**This run**: commit `{run['commit']}`, seeds {run['seeds']} ({_seed_origin(run)}), "
        f"{_duration(run['seconds'])} for the scenarios, started {run['date']}; `{run['command']}`.",
        "",
        parts_report.SECTION_START,
        parts_report.SECTION_END,
        "",
        "## What is compared",
        "",
        "Seeded random clusters (fewer than 100 nodes, so upstream evaluates every node) with existing pods,",
        "Services and ReplicaSets, and pending pods that use the features of every plugin we implement, are loaded",
        "into a local control plane (etcd + kube-apiserver). Each pending pod is scheduled, one at a time and in",
        "the same order, by upstream kube-scheduler (the pinned build, at `-v=2 --vmodule=schedule_one=10,...` for",
        "its per-node scores) and by `kopf-scheduler run` as a real process, with equivalent profiles: the same",
        "spec (with `spec: {}` upstream runs its unmodified default profile: we implement every default plugin).",
        "Upstream never binds (a ValidatingAdmissionPolicy denies its ServiceAccount's bindings and names the node",
        "it chose) and never preempts (a webhook refuses its victims' DisruptionTarget patches as NotFound, so it",
        "goes on to the next victim, and its -v=2 log names each one), so both decide on exactly the same state;",
        "our copy stays bound for the next pod, and our victims really go. Per pod: the verdict (bound or not); the",
        "FailedScheduling note and PodScheduled message, byte for byte (with DefaultPreemption's `preemption: ...`",
        "suffix); whether our node is among upstream's highest-total nodes; for a pod that preempts, the node it",
        "was nominated for and its victims. A seed fixes a scenario's objects (a kubelet stand-in gives pods",
        "distinct start times, so preemption's tie-breaks are fixed too); scoring ties are broken at random on both",
        "sides, so the later pods of a scenario may meet",
        "a slightly different state from one run to the next. Each run draws a fresh seed range unless",
        "`--seed-start` is given; a disagreement found on a seed is pinned in the quick suite",
        "(`QUICK_SCENARIOS` in `tests/conformance/test_quick.py`).",
        "",
        *PREEMPTION_METHOD,
        "",
        "## Result",
        "",
        f"Measured {run['date']} at commit `{run['commit']}` on {run['machine']}: `{run['command']}`,",
        f"seeds {run['seeds']} (sizes: {run['sizes']}), {run['seconds']} s ({_duration(run['seconds'])}) in all.",
        "",
        "| scenarios | pods compared | agree | disagree | of which known |",
        "|---:|---:|---:|---:|---:|",
        f"| {data['scenarios']} | {data['pods']} | {data['agree']} | {data['disagree']} | {data['known']} |",
        "",
        "| check | pods | equal |",
        "|---|---:|---:|",
        f"| verdict (bound or not) | {data['pods']} | {checks['verdicts_equal']} |",
        f"| our node in upstream's top-score set (both bound; {checks['upstream_top_set_size_above_1']} "
        f"with ties, {checks['upstream_took_batching_hint']} where upstream took an opportunistic-batching hint) "
        f"| {checks['both_bound']} | {checks['our_node_in_upstream_top_set']} |",
        f"| FailedScheduling note (both unschedulable) | {checks['both_unschedulable']} "
        f"| {checks['failed_scheduling_note_equal']} |",
        f"| PodScheduled message (both unschedulable) | {checks['both_unschedulable']} "
        f"| {checks['pod_scheduled_message_equal']} |",
        f"| nominated node (either side preempted) | {checks['preempting']} | {checks['nominated_node_equal']} |",
        f"| victims preempted through the API (either side preempted; upstream's already terminating ones "
        f"listed apart, in {checks['upstream_terminating_victims']}) | {checks['preempting']} "
        f"| {checks['victims_equal']} |",
        f"| ours bound on its nominated node once its victims went (not expected in the "
        f"{checks['upstream_terminating_victims']} with a victim already terminating, which never goes; every pod "
        f"not bound there is named in the JSON's `not_on_nominated_node`) "
        f"| {checks['preempting']} | {checks['ours_bound_on_nominated_node']} |",
        f"| PV of each claim bound statically (both bound on one node, upstream's Reserve log) "
        f"| {checks.get('static_volume_bindings_compared', 0)} | {checks.get('static_volume_bindings_equal', 0)} |",
        f"| devices of the pod's claims (both bound on one node; upstream's denied PreBind) "
        f"| {checks.get('devices_compared', 0)} | {checks.get('devices_equal', 0)} |",
        f"| ... of which the claim created for DRA-backed extended resources "
        f"| {checks.get('extended_devices_compared', 0)} | {checks.get('extended_devices_equal', 0)} |",
        f"| Scheduled event and PodScheduled condition of a bound pod (ours read back; upstream's restated, its "
        f"bind being denied) | {checks['both_bound']} | {checks.get('binding_record_equal', 0)} |",
        f"| pods no scheduler may act on (gated, spec.nodeName preset, a claim from a template): left alone, "
        f"same condition and events | {checks.get('untouched', 0)} | {checks.get('untouched_state_equal', 0)} |",
        "",
        "Upstream's top-score set is the nodes with the highest total in its V(10) log, or the only feasible",
        "node when it did not score. When it took an opportunistic-batching hint (the previous cycle's next-best",
        "node for an identical pod, filtered alone and not scored), the set is that node, widened by the nodes",
        "a full ranking of our in-process model ties with it "
        f"(widened in this run: {checks['batching_hint_widened_by_a_tie']}).",
        "",
        "### Per plugin",
        "",
        "*Decisive*: the plugin demonstrably decided something for the pod: upstream's FailedScheduling text",
        "names its reason, or upstream's scores of it differed between the feasible nodes, or it filtered out a",
        "node in the in-process model while the model matched upstream exactly. *Pods*: decisive, or the pod's",
        "spec uses what the plugin reads. Scenarios count (seed, profile) pairs with such pods; agreement is",
        "the whole pod's.",
        "",
        "| plugin | scenarios | pods | decisive | agree | disagree |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for plugin, row in data["by_plugin"].items():
        lines.append(
            f"| {plugin} | {row['scenarios']} | {row['pods']} | {row['decisive']} | {row['agree']} "
            f"| {row['disagree']} |"
        )
    lines += ["", _not_exercised("Plugins", [name for name, row in data["by_plugin"].items() if not row["pods"]])]
    lines += [
        "",
        "DynamicResources runs on both: some scenarios have DeviceClasses, ResourceSlices and claims",
        "(tests/conformance/devices.py); upstream is denied its claim status writes by a policy whose message",
        "carries the devices it chose, which are compared with the devices our claims got (the claim each creates",
        "for DRA-backed extended resources too). The volume plugins run on both",
        "sides; some scenarios have storage (tests/conformance/volumes.py), upstream is denied its volume-binding",
        "writes and our claims are bound by a stand-in PV controller (tests/conformance/volume_harness.py).",
        "DefaultPreemption is decisive where upstream nominated the pod.",
        "",
        "### Per feature",
        "",
        "What the pods put in front of both schedulers, read from each pod's generated manifest and its scenario",
        "(`tests/conformance/features.py`). *Decisive*: one of the plugins that judge the feature was decisive",
        "for the pod (as above); agreement is the whole pod's.",
        "",
        "| feature | judged by | pods | decisive | agree | disagree |",
        "|---|---|---:|---:|---:|---:|",
    ]
    judges = {feature.name: ", ".join(feature.plugins) for feature in FEATURES}
    for name, row in data["by_feature"].items():
        lines.append(
            f"| {name} | {judges.get(name, '')} | {row['pods']} | {row['decisive']} | {row['agree']} "
            f"| {row['disagree']} |"
        )
    lines += ["", _not_exercised("Features", [name for name, row in data["by_feature"].items() if not row["pods"]])]
    lines += [
        "A pod with `spec.nodeName` preset is an assigned pod to kube-scheduler: it never enters the queue, so",
        "NodeName cannot be decisive in v1.36.3; its pods are compared as left alone on their node",
        "(`tests/conformance/coverage.py`).",
    ]
    lines += [
        "",
        "### Per profile",
        "",
        f"A scenario runs upstream's default profile unmodified (`spec: {{}}`) with probability "
        f"{data.get('default_profile_share', 0):.0%}, else one of the other profiles (a function of its seed,",
        "`profile_for` in `tests/conformance/__main__.py`): the examples' SchedulerProfiles in `examples/` and the",
        "built-in ones with other args and weights.",
        "",
        "| profile | from | scenarios | pods | agree | disagree |",
        "|---|---|---:|---:|---:|---:|",
    ]
    sources = {p.name: p.source for p in profiles}
    for name, row in data["by_profile"].items():
        lines.append(
            f"| `{name}` | {sources.get(name, '')} | {row['scenarios']} | {row['pods']} | {row['agree']} "
            f"| {row['disagree']} |"
        )
    lines += ["", "## Disagreements", ""]
    pods = [p for s in results for p in s.pods if not p.agree]
    if not pods:
        lines += ["None in this run.", ""]
    for pod in pods:
        lines.append(_reproducer(pod))
    lines += [
        "## Diagnostics: the in-process model",
        "",
        "Beside the operator process, the runner feeds the same objects into an in-process `SchedulerApp` and",
        "compares its per-plugin, per-node scores and feasible sets with upstream's V(10) log lines. These are",
        "diagnostics (a difference that does not change the outcome is not a disagreement above), but any",
        "difference is a behaviour difference somewhere.",
        "",
    ]
    notes = data["model"]["notes"]
    if notes:
        lines += ["| difference | pods |", "|---|---:|"]
        lines += [f"| {note} | {count} |" for note, count in notes.items()]
        lines.append("")
        for pod in [p for s in results for p in s.pods if p.agree and p.model_notes]:
            lines.append(_reproducer(pod))
    else:
        lines += [
            "No differences: every plugin's score on every feasible node, every feasible set, every top-score",
            "set and every FailedScheduling text of the model matched upstream's.",
            "",
        ]
    lines += [
        "## Known differences",
        "",
        "Listed in `tests/conformance/known.py`; a disagreement they explain is counted under *known* above and",
        "does not fail the quick test, which also pins each one with its reproducer (so a change on either side",
        "shows up).",
        "",
    ]
    for known in KNOWN:
        lines += [f"### {known.summary} (`{known.key}`)", "", known.reason, ""]
        if known.reproducer:
            lines += ["```yaml", known.reproducer.rstrip(), "```", ""]
    lines += ["## Found and fixed", ""]
    for finding in FIXED:
        lines += [f"- **{finding.summary}**", f"  Cause: {finding.cause}", f"  Fix: {finding.fix}"]
        if finding.reproducer:
            lines += ["", "  ```yaml", *(f"  {line}".rstrip() for line in finding.reproducer.splitlines()), "  ```", ""]
    lines += [
        "",
        "## Running it",
        "",
        "```bash",
        "make conformance              # the four parts below, one after the other, each on fresh seeds",
        "make conformance-scenarios    # these scenarios, the extenders and profile validation (CONFORMANCE_SCENARIOS)",
        "make conformance-timelines    # the default-profile timelines",
        "make conformance-gangs        # the gang timelines",
        "make conformance-big          # the big clusters",
        f".venv/bin/python -m tests.conformance --seed-start {run['seeds'].split('..')[0]} --timelines 0 "
        "--gang-timelines 0 --big-clusters 0   # this run's scenario seeds again",
        ".venv/bin/python -m tests.conformance --seed-start 34 --scenarios 1 --profiles bin-packing --size normal",
        "```",
        "",
        "A quick subset (small scenarios, and the seeds pinned after a disagreement) runs in `make test` as",
        "`tests/conformance/test_quick.py` and fails on any disagreement that `tests/conformance/known.py` does not",
        "explain.",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
