"""Upstream kube-scheduler as the oracle: its configuration, and what its log says about each decision.

Equivalent profile. A SchedulerProfile's ``spec`` is one KubeSchedulerConfiguration profile minus
``schedulerName``, so upstream gets the same spec under another scheduler name. Our builder would leave
upstream's unimplemented default plugins out of the pipeline (``omitted_defaults``) and upstream's profile
would disable exactly those in ``multiPoint``; since issue 12 there are none, so upstream runs its unmodified
default profile. With DynamicResources and DefaultPreemption on both sides, FailedScheduling texts carry
``no new claims to deallocate, preemption: ...`` when preemption does not help, and no PostFilter part when
it nominated a node (the first successful PostFilter plugin's empty message wins).

Preemption. Upstream's ``-v=2`` log names the node preemption chose (``preemption.go``) and, from the
asynchronous goroutine of ``executor.go`` (keyed ``preemptor=``), each victim: refused by the harness as
NotFound ("Victim Pod is already deleted"), skipped as already terminating, or (a harness failure) really
preempted; :func:`parse_cycle` folds those into the cycle.

Scores. kube-scheduler prints, at verbosity 10 in ``schedule_one.go``, every plugin's weighted score per
node and every node's total; its binder says which node it picked (verbosity 3)::

    I1122 02:10:21.932441 14216 schedule_one.go:982] "Plugin scored node for pod" pod="ns/p" plugin="X"
        node="n" score=300
    I1122 02:10:21.932485 14216 schedule_one.go:1050] "Calculated node's final score for pod" pod="ns/p"
        node="n" score=454
    I1122 02:10:21.934016 14216 default_binder.go:69] "Attempting to bind pod to node" pod="ns/p" node="n"

(one line each in the log). When opportunistic batching (beta, on in 1.36) offers the previous cycle's
next-best node for an identical pod, ``batch.go`` says so at verbosity 3 ("OpportunisticBatch provided
node hint"); if that node passes the filters upstream takes it without scoring. Only those files are
turned up (``-v=2 --vmodule=schedule_one=10,...``): a
global ``-v=10`` would also log every HTTP request and response body. When a single node is feasible
upstream skips scoring and prints no score lines; that node is then the whole top set.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Flags for upstream's log: per-node scores from schedule_one.go only.
LOG_FLAGS = ("-v=2", "--vmodule=schedule_one=10")

_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
_MSG = re.compile(r'^[IWEF]\d{4} [\d:.]+\s+\d+ (\S+):\d+\] "((?:[^"\\]|\\.)*)"(.*)$')


def upstream_profile(scheduler_name: str, spec: Mapping[str, Any], omitted: Iterable[str]) -> dict[str, Any]:
    """The KubeSchedulerConfiguration profile equivalent to a SchedulerProfile ``spec`` under our builder."""
    profile: dict[str, Any] = {"schedulerName": scheduler_name, **copy.deepcopy(dict(spec))}
    omitted = list(omitted)
    if omitted:
        plugins = profile.setdefault("plugins", {})
        multi = plugins.setdefault("multiPoint", {})
        disabled = multi.setdefault("disabled", [])
        present = {entry.get("name") for entry in disabled}
        disabled.extend({"name": name} for name in omitted if name not in present)
    return profile


def scheduler_config(profiles: Iterable[Mapping[str, Any]], *, parallelism: int | None = None) -> dict[str, Any]:
    """A KubeSchedulerConfiguration body (LocalCluster adds the kubeconfig, QPS and leader election).

    ``parallelism=1`` (the scenario harness): with several workers upstream's sampled node search (clusters of
    100 nodes or more) keeps whichever feasible nodes the goroutines met first; with one it judges nodes in
    order from its start index, as ours does (big_clusters.py). Below 100 nodes every node is judged either way.
    """
    config: dict[str, Any] = {"profiles": [dict(p) for p in profiles]}
    if parallelism is not None:
        config["parallelism"] = parallelism
    return config


def _unquote(value: str) -> str:
    """klog quotes values with Go's strconv.Quote, which JSON reads (bar rare \\x escapes)."""
    if value.startswith('"') and value.endswith('"'):
        try:
            return str(json.loads(value))
        except ValueError:
            return value[1:-1]
    return value


def parse_line(line: str) -> tuple[str, str, dict[str, str]] | None:
    """(source file, message, key/values) of one klog text line, or None if it is not one."""
    match = _MSG.match(line)
    if match is None:
        return None
    source, message, rest = match.groups()
    return source, message, {k: _unquote(v) for k, v in _KV.findall(rest)}


@dataclass
class UpstreamCycle:
    """What upstream's log says about the last scheduling cycle of one pod."""

    #: plugin → node → weighted score.
    plugin_scores: dict[str, dict[str, int]] = field(default_factory=dict)
    #: node → total score (empty when scoring did not run).
    final_scores: dict[str, int] = field(default_factory=dict)
    #: The node upstream chose (its binder's "Attempting to bind" line, or the "Successfully bound" line).
    bound_node: str | None = None
    evaluated_nodes: int | None = None
    feasible_nodes: int | None = None
    #: "Unable to schedule pod; no fit; waiting" err text (the FitError), if the last cycle failed.
    fit_error: str | None = None
    #: The node opportunistic batching offered (``batch.go``: the previous cycle's next-best node for a pod
    #: with the same signature, tried alone before any other node); None when it offered nothing.
    hint: str | None = None
    #: Preemption (upstream's log at -v=2): the node it nominated the pod for (``preemption.go``), the
    #: victims whose DisruptionTarget patch the harness refused as NotFound ("already deleted"), those it
    #: skipped as already terminating, and whether the asynchronous goroutine started and how it ended.
    preemption_node: str | None = None
    victims: list[str] = field(default_factory=list)
    terminating_victims: list[str] = field(default_factory=list)
    preemption_started: bool = False
    preemption_result: str | None = None
    #: Victims upstream really preempted, and its errors while preempting: the harness failed if any.
    preempted_for_real: list[str] = field(default_factory=list)
    preemption_errors: list[str] = field(default_factory=list)

    @property
    def preemption_done(self) -> bool:
        """Upstream's preemption for this cycle is complete in the log (or there was none)."""
        if self.preemption_node is None:
            return True
        return self.preemption_result is not None or not self.preemption_started

    @property
    def upstream_victims(self) -> list[str]:
        """Every victim upstream chose, sorted (refused, skipped as terminating, or really preempted)."""
        return sorted({*self.victims, *self.terminating_victims, *self.preempted_for_real})

    @property
    def used_hint(self) -> bool:
        """Upstream took the batching hint: it filtered only that node and scored nothing."""
        return self.hint is not None and self.bound_node == self.hint and not self.final_scores

    @property
    def top_nodes(self) -> set[str]:
        """The nodes with the highest total score; the bound node alone when scoring did not run."""
        if self.final_scores:
            best = max(self.final_scores.values())
            return {node for node, score in self.final_scores.items() if score == best}
        return {self.bound_node} if self.bound_node else set()

    @property
    def feasible(self) -> set[str]:
        """Nodes that passed filtering (known when scoring ran, or when exactly one was feasible)."""
        if self.final_scores:
            return set(self.final_scores)
        return {self.bound_node} if self.bound_node else set()


def parse_cycle(lines: Iterable[str], pod_key: str) -> UpstreamCycle:
    """Fold upstream's log lines into the pod's *last* cycle (a retried pod starts a fresh one)."""
    cycle = UpstreamCycle()
    quoted = (f'pod="{pod_key}"', f'preemptor="{pod_key}"')
    for line in lines:
        if quoted[0] not in line and quoted[1] not in line:
            continue
        parsed = parse_line(line)
        if parsed is None:
            continue
        _source, message, kv = parsed
        if kv.get("preemptor") == pod_key:
            _preemption_line(cycle, message, kv)
            continue
        if kv.get("pod") != pod_key:
            continue
        if message == "Attempting to schedule pod":
            cycle = UpstreamCycle()
        elif message == "Plugin scored node for pod":
            cycle.plugin_scores.setdefault(kv["plugin"], {})[kv["node"]] = int(kv["score"])
        elif message == "Calculated node's final score for pod":
            cycle.final_scores[kv["node"]] = int(kv["score"])
        elif message == "Attempting to bind pod to node":
            cycle.bound_node = kv["node"]
        elif message == "Successfully bound pod to node":
            cycle.bound_node = kv["node"]
            cycle.evaluated_nodes = int(kv.get("evaluatedNodes", "0"))
            cycle.feasible_nodes = int(kv.get("feasibleNodes", "0"))
        elif message == "OpportunisticBatch provided node hint":
            cycle.hint = kv.get("hint")
        elif message == "Unable to schedule pod; no fit; waiting":
            cycle.fit_error = kv.get("err")
        elif message == "the target node for the preemption is determined":
            cycle.preemption_node = kv.get("node")
    return cycle


#: executor.go's lines about one victim (keyed ``preemptor=``, ``victim=``) and where they go.
_VICTIM_LINES = {
    "Victim Pod is already deleted": "victims",
    "Victim Pod is already being deleted, skipping the API call for it": "terminating_victims",
    "Preemptor Pod preempted victim Pod": "preempted_for_real",
}


def _preemption_line(cycle: UpstreamCycle, message: str, kv: Mapping[str, str]) -> None:
    """Fold one of the asynchronous preemption's lines (``executor.go``) into the cycle."""
    if message in _VICTIM_LINES:
        victims: list[str] = getattr(cycle, _VICTIM_LINES[message])
        if kv.get("victim") and kv["victim"] not in victims:
            victims.append(kv["victim"])
    elif message == "Start the preemption asynchronously":
        cycle.preemption_started = True
    elif message == "Async Preemption finished completely":
        cycle.preemption_result = kv.get("result", "")
    elif "victim" in kv or "err" in kv:  # "Could not add DisruptionTarget condition ...", "Tried to preempted pod"
        cycle.preemption_errors.append(f"{message}: {kv.get('victim', '')} {kv.get('err', '')}".strip())


class LogCursor:
    """Reads a growing log file from where the last read stopped (one position per component log)."""

    def __init__(self, path: Any) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> int:
        """Remember the current end of the file; :meth:`since` reads from here."""
        try:
            with open(self.path, "rb") as f:
                f.seek(0, 2)
                self.offset = f.tell()
        except OSError:
            self.offset = 0
        return self.offset

    def since(self) -> list[str]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        # A line being written right now may be cut; it is re-read next time from the mark.
        return data.decode(errors="replace").splitlines()


# -- reasons → plugins ---------------------------------------------------------------------------------
#: Substrings of upstream's reason texts and the plugin that produces them.
REASON_PLUGINS: tuple[tuple[str, str], ...] = (
    ("untolerated taint", "TaintToleration"),
    ("were unschedulable", "NodeUnschedulable"),
    ("Insufficient ", "NodeResourcesFit"),
    ("Too many pods", "NodeResourcesFit"),
    ("free ports", "NodePorts"),
    ("node affinity/selector", "NodeAffinity"),
    ("pod topology spread constraints", "PodTopologySpread"),
    ("anti-affinity rules", "InterPodAffinity"),
    ("pod affinity rules", "InterPodAffinity"),
    ("didn't match Pod's node affinity", "NodeAffinity"),
    ("had no available disk", "VolumeRestrictions"),
    ("ReadWriteOncePod access mode", "VolumeRestrictions"),
    ("exceed max volume count", "NodeVolumeLimits"),
    ("available persistent volumes to bind", "VolumeBinding"),
    ("PersistentVolume's node affinity", "VolumeBinding"),
    ("enough free storage", "VolumeBinding"),
    ("bound to non-existent pv", "VolumeBinding"),
    ("unbound immediate PersistentVolumeClaims", "VolumeBinding"),
    ('persistentvolumeclaim "', "VolumeBinding"),
    ("had no available volume zone", "VolumeZone"),
    ("didn't match Pod's required features", "NodeDeclaredFeatures"),
    ("ResourceClaim not created yet", "DynamicResources"),
)
_PLUGIN_LIST = re.compile(r"didn't satisfy plugin\(s\) \[([^\]]*)\]")


def plugins_in_message(message: str) -> set[str]:
    """The plugins whose reasons appear in a FailedScheduling text."""
    found = {plugin for needle, plugin in REASON_PLUGINS if needle in message}
    for match in _PLUGIN_LIST.finditer(message):
        found.update(name.strip() for name in match.group(1).split() if name.strip())
    return found


def varying_plugins(plugin_scores: Mapping[str, Mapping[str, int]]) -> set[str]:
    """Plugins whose score differs between feasible nodes (they influenced the choice)."""
    return {plugin for plugin, scores in plugin_scores.items() if len(set(scores.values())) > 1}
