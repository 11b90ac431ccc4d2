"""``kopf-scheduler what-if``: where a pod would go now, and why, computed offline on the live cluster's objects.

The operator's answer comes from one cycle over its cache: ``Scheduler.schedule_pod`` on a snapshot, then PostFilter
after a FitError. What-if makes that very cycle on a :class:`SchedulerApp` with no API client (as ``kopf-scheduler
validate`` builds profiles): the profile goes through ``apply_profile``, every object the operator watches
(``watched.py``, in the table's order; an optional kind only where the cluster serves it) goes through the same
event handlers its kopf watches call (``SchedulerApp.on_watch_event``), and :meth:`OfflineScheduler.decide` runs the
algorithm without assuming or binding, and PostFilter with preemption recorded instead of executed (its victims are
named, nobody is evicted). So the node, the scores and the ``0/N nodes are available: ...`` text are the operator's
own for the same state.
Upstream has no such command; kube-scheduler-simulator needs its own copy of the cluster.

Where it can differ from the operator's next real decision: the cluster changes in between; ties are broken
at random (as upstream's ``selectHost``), so the answer names the tie set; pods of a replay are each judged
on the cluster as it is, as if each were the next pod taken (the operator assumes each placement before the
next); extenders are not called (no HTTP from what-if); the operator hosts all profiles while what-if builds
only the one asked about, so pods nominated by another profile's preemption are seen only through their
``status.nominatedNodeName``, as the operator sees them too.

A whole PodGroup (``--pod-group``): its members are fed as pending pods of the profile, GangScheduling's PreEnqueue
says whether the gang would be tried yet, and the pod-group cycle up to its submit (``PodGroupCycle.decide``:
upstream ``podGroupSchedulingAlgorithm`` places the members on the model's snapshot and undoes every placement, then
workload-aware preemption for a group that does not fit, its victims recorded, not evicted); the answer is what its
submit would do: each member's node, or the
message its failure handler would report (upstream's: ``pod group is unschedulable, one or more plugins asked to
wait and no plugin rejected pod "m0"`` for a placed member of a gang that is not whole, a member's own FitError
text) and the PodGroupScheduled condition's message. Preemption is recorded, not executed, as for one pod.

The conformance harness's in-process model (``tests/conformance/sim.py``) is this class.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.algorithm import FitError, SchedulingError, run_post_filter, schedule_pod
from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.explain import capture_scores, explain_fit_error, format_failure, format_success, success_account
from kopf_scheduler.framework import CycleState
from kopf_scheduler.framework.status import Code
from kopf_scheduler.schedule_one_pod_group import (
    POD_GROUP_KIND,
    AlgorithmResult,
    PodGroupAlgorithmResult,
    pod_group_unschedulable,
)
from kopf_scheduler.settings import RunSettings
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.watched import BY_KIND, WATCHED_KINDS, optional_by_api

#: kind → its objects, as the API server listed them (items carry no ``kind``).
ClusterObjects = Mapping[str, list[dict[str, Any]]]


class WhatIfError(Exception):
    """What-if cannot answer (the profile does not build, a pod manifest is not a pod)."""


@dataclass
class Verdict:
    """What the cycle decides for one pod on the model's state."""

    pod: str = ""
    node: str | None = None
    message: str | None = None
    error: str | None = None
    #: plugin → node → weighted score (empty when scoring did not run).
    plugin_scores: dict[str, dict[str, int]] = field(default_factory=dict)
    final_scores: dict[str, int] = field(default_factory=dict)
    feasible: set[str] = field(default_factory=set)
    #: node → "Plugin: reason; reason" for nodes filtered out.
    rejections: dict[str, str] = field(default_factory=dict)
    #: PostFilter (DefaultPreemption) after a FitError: the node it would nominate and the victims ("ns/name").
    nominated: str | None = None
    victims: list[str] = field(default_factory=list)
    #: explain's account of the attempt: after a FitError, per node the rejecting plugin and its reasons; on
    #: success, the winner's and runners-up's raw, normalized and weighted scores per plugin.
    account: dict[str, Any] | None = None
    num_nodes: int = 0
    #: A PreEnqueue plugin keeps the pod out of the queue (scheduling gates): no cycle runs, this says why.
    waiting: str | None = None

    @property
    def top_nodes(self) -> set[str]:
        """The nodes sharing the best total score: the operator picks one of them at random."""
        if self.final_scores:
            best = max(self.final_scores.values())
            return {n for n, s in self.final_scores.items() if s == best}
        return {self.node} if self.node else set()

    @property
    def result(self) -> str:
        if self.waiting:
            return "Waiting"
        if self.node:
            return "Schedulable"
        return "Error" if self.error else "Unschedulable"

    def ranking(self) -> list[tuple[str, int]]:
        """Feasible nodes by total score, best first (ties by name)."""
        return sorted(self.final_scores.items(), key=lambda item: (-item[1], item[0]))

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "result": self.result}
        if self.node:
            out |= {
                "node": self.node,
                "topNodes": sorted(self.top_nodes),
                "feasibleNodes": len(self.feasible),
                "numNodes": self.num_nodes,
                "totals": dict(self.ranking()),
                "account": self.account,
            }
            if self.rejections:
                out["rejected"] = dict(sorted(self.rejections.items()))
        elif self.waiting or self.error:
            out["message"] = self.waiting or self.error
        else:
            out |= {"message": self.message, "account": self.account}
        return out


@dataclass
class GroupVerdict:
    """What the pod-group cycle decides for a whole PodGroup on the model's state."""

    pod_group: str
    #: "Schedulable" (every placed member would bind), "Unschedulable", "Error", or "Waiting" (PreEnqueue).
    result: str
    #: The PodGroupScheduled condition's message the operator would set (PreEnqueue's message when waiting).
    message: str = ""
    #: Each member ("ns/name") → its node, or None.
    nodes: dict[str, str | None] = field(default_factory=dict)
    #: Each member not placed → what its failure handler would report (FailedScheduling's text).
    messages: dict[str, str] = field(default_factory=dict)
    #: Members that fit only after preemption → the node their PostFilter would nominate.
    nominated: dict[str, str] = field(default_factory=dict)
    #: The victims ("ns/name") workload-aware preemption would evict for the group (none is evicted here).
    victims: list[str] = field(default_factory=list)

    def to_api(self) -> dict[str, Any]:
        pods = []
        for pod, node in self.nodes.items():
            entry: dict[str, Any] = {"pod": pod}
            if node:
                entry["node"] = node
            if pod in self.messages:
                entry["message"] = self.messages[pod]
            if pod in self.nominated:
                entry["nominatedNode"] = self.nominated[pod]
            pods.append(entry)
        out = {"podGroup": self.pod_group, "result": self.result, "message": self.message, "pods": pods}
        if self.victims:
            out["victims"] = list(self.victims)
        return out


class OfflineScheduler:
    """An in-process SchedulerApp with no API client, fed objects as the operator's watches feed it."""

    def __init__(self, profiles: Mapping[str, Mapping[str, Any]]) -> None:
        self.app = SchedulerApp(settings=RunSettings(), client=None)
        for name, spec in profiles.items():
            outcome = self.app.apply_profile(name=name, spec=dict(spec))
            if not outcome.ready:
                raise WhatIfError(f"profile {name} does not build: {outcome.message}")

    def feed(self, kind: str, obj: Mapping[str, Any], event_type: str = "ADDED") -> None:
        """One watch event for an object of ``kind`` (one of :data:`WATCHED_KINDS`, ``watched.py``)."""
        if kind not in BY_KIND:
            raise ValueError(f"the operator does not watch {kind} objects")
        self.app.on_watch_event(kind, event_type, dict(obj))

    def pre_enqueue(self, profile: str, pod_obj: Mapping[str, Any]) -> Verdict | None:
        """The queue's gate (PreEnqueue: SchedulingGates): a verdict when the operator would not try the pod yet."""
        pod = PodInfo.from_obj({**pod_obj, "spec": {**pod_obj["spec"], "schedulerName": profile}})
        status = self.app.profiles[profile].framework.run_pre_enqueue_plugins(pod)
        if status.is_success:
            return None
        return Verdict(pod=pod.key, waiting=f"{status.plugin}: {status.message}")

    def decide(self, profile: str, pod_obj: Mapping[str, Any]) -> Verdict:
        """Schedule ``pod_obj`` with ``profile`` on the current state, without assuming or binding it.

        The pod must not be in the model (a bound pod would occupy its node; a pending one is re-added and
        removed around PostFilter here).
        """
        runtime = self.app.profiles[profile]
        body = {**pod_obj, "spec": {**pod_obj["spec"], "schedulerName": profile}}
        pod = PodInfo.from_obj(body)
        snapshot = self.app.cache.snapshot()
        names = snapshot.table.names
        verdict = Verdict(pod=pod.key, num_nodes=snapshot.num_nodes)
        state = CycleState()
        try:
            result = schedule_pod(runtime.framework, state, pod, snapshot, rng=self.app.rng)
        except FitError as fit:
            verdict.rejections = _rejections(fit.diagnosis, names)
            post_filter = self._post_filter(runtime, state, pod, body, fit, verdict)
            verdict.message = fit.message
            verdict.account = explain_fit_error(fit, profile=profile, at="what-if", post_filter=post_filter)
            return verdict
        except SchedulingError as e:
            verdict.error = e.status.message
            return verdict
        verdict.node = result.suggested_host
        verdict.rejections = _rejections(result.diagnosis, names)
        verdict.account = success_account(pod.key, profile, capture_scores(result, names, at=time.time()))
        scores = result.scores
        if scores is None:
            verdict.feasible = {result.suggested_host}
            return verdict
        node_names = [str(names[int(slot)]) for slot in scores.nodes]
        verdict.feasible = set(node_names)
        for plugin, values in zip(scores.plugins, scores.scores, strict=True):
            verdict.plugin_scores[plugin] = {n: int(v) for n, v in zip(node_names, values, strict=True)}
        verdict.final_scores = {n: int(v) for n, v in zip(node_names, scores.totals, strict=True)}
        return verdict

    def _post_filter(
        self, runtime: Any, state: CycleState, pod: PodInfo, body: dict[str, Any], fit: FitError, verdict: Verdict
    ) -> Any:
        """PostFilter as the operator runs it, but its preemption only recorded, never executed.

        DefaultPreemption re-reads the preemptor (``Handle.get_pod``), so the pod is in the model meanwhile.
        """
        chosen: list[Any] = []
        self.app.on_pod_event("ADDED", body)
        try:
            with _preemption_recorded(runtime, chosen):
                outcome = run_post_filter(runtime.framework, state, pod, fit)
        finally:
            self.app.on_pod_event("DELETED", body)
        verdict.nominated = outcome.nominated_node_name if outcome is not None else None
        if chosen:
            verdict.victims = sorted(victim.key for victim in chosen[-1].victims.pods)
        return outcome

    def decide_group(self, profile: str, namespace: str, name: str) -> GroupVerdict:
        """The pod-group cycle for PodGroup ``namespace/name``, whose members were fed as pending pods of
        ``profile``: PreEnqueue, then the group's algorithm on a snapshot, every placement undone."""
        key = f"{namespace}/{name}"
        if self.app.cache.objects.get(POD_GROUP_KIND, name, namespace) is None:
            raise WhatIfError(f"there is no PodGroup {key}")
        runtime = self.app.profiles[profile]
        members = sorted(self.app.cache.pod_groups.get(namespace, name).unscheduled_pods().values(), key=_by_key)
        if not members:
            raise WhatIfError(f"PodGroup {key} has no pending pod of profile {profile}")
        verdict = GroupVerdict(key, "Waiting", nodes=dict.fromkeys(p.key for p in members))
        for pod in members:
            status = runtime.framework.run_pre_enqueue_plugins(pod)
            if not status.is_success:
                verdict.message = f"{status.plugin}: {status.message}"
                return verdict
        first = runtime.queue.pop_specific_pod(members[0].uid)
        if first is None:
            raise WhatIfError(f"the pods of PodGroup {key} are not queued by profile {profile}")
        cycle = self.app.pod_group_cycles
        group = cycle.pod_group_info_for_pod(runtime, first)
        chosen: list[Any] = []
        with _preemption_recorded(runtime, chosen):
            outcome = cycle.decide(runtime.framework, group)
        _group_outcome(verdict, outcome)
        if outcome.waiting_on_preemption and chosen:
            verdict.victims = sorted(victim.key for victim in chosen[-1].victims.pods)
        return verdict


@contextlib.contextmanager
def _preemption_recorded(runtime: Any, chosen: list[Any]) -> Iterator[None]:
    """PostFilter's preemption executors, and the pod-group cycle's (workload-aware preemption), record their
    candidate in ``chosen`` instead of evicting anyone."""
    plugins = [plugin for _, plugin in runtime.framework.post_filter_plugins]
    plugins += list(runtime.framework.pod_group_post_filter_plugins)
    executors = list({id(p.executor): p.executor for p in plugins if hasattr(p, "executor")}.values())
    originals = [executor.start for executor in executors]
    for executor in executors:
        executor.start = lambda candidate, _preemptor: chosen.append(candidate)
    try:
        yield
    finally:
        for executor, start in zip(executors, originals, strict=True):
            executor.start = start


def _by_key(pod: PodInfo) -> str:
    return pod.key


def _group_outcome(verdict: GroupVerdict, outcome: PodGroupAlgorithmResult) -> None:
    """What the operator's submit (``PodGroupCycle._submit``) makes of the algorithm's result: each placed member
    of a feasible group binds, every other member reports its own verdict or the group's."""
    status = outcome.status
    verdict.result = "Schedulable" if status.is_success else "Unschedulable" if status.is_rejected else "Error"
    verdict.message = status.message
    results: dict[str, AlgorithmResult] = {r.qpod.pod.key: r for r in outcome.pod_results}
    for pod in verdict.nodes:
        result = results.get(pod)
        if status.code is Code.ERROR or result is None:  # a member's own error, or the group's
            own = result is not None and result.status.code is Code.ERROR
            verdict.messages[pod] = result.status.message if result is not None and own else status.message
            continue
        placed = result.result.suggested_host if result.result is not None else None
        if placed is not None and result.status.is_success:
            if status.is_success:
                verdict.nodes[pod] = placed
            elif outcome.waiting_on_preemption:
                verdict.messages[pod] = status.message
            else:
                verdict.messages[pod] = pod_group_unschedulable(_message(result.permit_status)).message
            continue
        if result.requires_preemption and outcome.waiting_on_preemption:
            verdict.messages[pod] = status.message
        elif result.requires_preemption:
            verdict.messages[pod] = pod_group_unschedulable(_message(result.permit_status)).message
        else:  # its own verdict: a FitError's is the FailedScheduling text
            failure = result.failure
            verdict.messages[pod] = failure.message if isinstance(failure, FitError) else result.status.message
        if result.nominated_node:
            verdict.nominated[pod] = result.nominated_node


def _message(status: Any) -> str:
    return "" if status is None else str(status.message)


def _rejections(diagnosis: Any, names: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for slot, status in diagnosis.statuses.items():
        out[str(names[int(slot)])] = f"{status.plugin}: {'; '.join(status.reasons)}"
    return out


# -- the command: read, build, decide -------------------------------------------------------------------------
def pod_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def is_pending(obj: Mapping[str, Any]) -> bool:
    """Waiting for a scheduler: no node yet, not finished, not being deleted."""
    spec, status, meta = obj.get("spec") or {}, obj.get("status") or {}, obj.get("metadata") or {}
    return (
        not spec.get("nodeName")
        and status.get("phase") not in ("Succeeded", "Failed")
        and meta.get("deletionTimestamp") is None
    )


def as_pending(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as if it waited for a scheduler: a bound (or finished) pod's placement and phase are dropped."""
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "nodeName"}
    metadata = {**(obj.get("metadata") or {})}
    metadata["namespace"] = metadata.get("namespace") or "default"
    body = {**obj, "metadata": metadata, "spec": spec}
    if not is_pending(obj):
        body["status"] = {**(obj.get("status") or {}), "phase": "Pending"}
    return body


def pending_pods_of(profile: str, pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pending pods naming ``profile`` in ``spec.schedulerName``, oldest first."""
    mine = [dict(p) for p in pods if (p.get("spec") or {}).get("schedulerName") == profile and is_pending(p)]
    return sorted(mine, key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "", pod_key(p)))


def what_if(
    *,
    profile: str,
    spec: Mapping[str, Any],
    cluster: ClusterObjects,
    pod: Mapping[str, Any] | None = None,
) -> list[Verdict]:
    """Verdicts for ``pod`` (its own copy in the cluster ignored), else for every pending pod of ``profile``."""
    model = OfflineScheduler({profile: spec})
    target = as_pending(pod) if pod is not None else None
    for watched in WATCHED_KINDS:
        for obj in cluster.get(watched.kind) or ():
            if target is not None and watched.kind == "Pod" and pod_key(obj) == pod_key(target):
                continue
            model.feed(watched.kind, obj)
    if target is not None:
        return [model.pre_enqueue(profile, target) or model.decide(profile, target)]
    verdicts = []
    for pending in pending_pods_of(profile, cluster.get("Pod") or ()):
        model.feed("Pod", pending, "DELETED")
        verdicts.append(model.pre_enqueue(profile, pending) or model.decide(profile, pending))
        model.feed("Pod", pending, "ADDED")
    return verdicts


def what_if_pod_group(
    *,
    profile: str,
    spec: Mapping[str, Any],
    cluster: ClusterObjects,
    pod_group: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]] | None = None,
) -> GroupVerdict:
    """The verdict for PodGroup ``pod_group`` (its copy in the cluster ignored) and its pending members, judged as
    pods of ``profile``: ``pods`` (their copies in the cluster ignored, plus the cluster's other members) or, when
    None, the cluster's pending pods naming the group."""
    model = OfflineScheduler({profile: spec})
    meta = pod_group.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", str(meta.get("name") or "")
    group_body = {**pod_group, "metadata": {**meta, "namespace": namespace}}
    given = [as_pending(p) for p in pods or ()]
    replaced = {pod_key(p) for p in given}
    model.feed(POD_GROUP_KIND, group_body)
    for watched in WATCHED_KINDS:
        for obj in cluster.get(watched.kind) or ():
            if watched.kind == POD_GROUP_KIND and pod_key(obj) == f"{namespace}/{name}":
                continue
            if watched.kind == "Pod":
                if pod_key(obj) in replaced:
                    continue
                if is_pending(obj) and _names_group(obj, namespace, name):
                    obj = _for_profile(obj, profile)
            model.feed(watched.kind, obj)
    for pod in given:
        model.feed("Pod", _for_profile(pod, profile))
    return model.decide_group(profile, namespace, name)


def _names_group(pod: Mapping[str, Any], namespace: str, name: str) -> bool:
    group = (pod.get("spec") or {}).get("schedulingGroup") or {}
    return pod_key(pod).startswith(f"{namespace}/") and group.get("podGroupName") == name


def _for_profile(pod: Mapping[str, Any], profile: str) -> dict[str, Any]:
    return {**pod, "spec": {**(pod.get("spec") or {}), "schedulerName": profile}}


def read_cluster(
    list_objects: Callable[[str], list[dict[str, Any]] | None],
    api_resources: Callable[[str], set[str] | None],
) -> dict[str, list[dict[str, Any]]]:
    """Every watched kind's objects, by kind (a kind the API server does not serve is empty).

    An optional kind (``watched.py``) is listed only where discovery finds it served, as the operator does:
    ``api_resources`` (one call per API group version) names the resources served there, None for none.
    """
    unserved: set[str] = set()
    for prefix, rows in optional_by_api().items():
        served = api_resources(prefix) or set()
        unserved.update(watched.kind for watched in rows if watched.plural not in served)
    return {
        watched.kind: [] if watched.kind in unserved else list(list_objects(watched.path) or ())
        for watched in WATCHED_KINDS
    }


# -- output ------------------------------------------------------------------------------------------------
def format_verdict(verdict: Verdict, profile: str) -> str:
    """One pod's answer for a terminal, in ``kopf-scheduler explain``'s tables (its first line is what-if's)."""
    if verdict.node:
        return _format_success(verdict, profile)
    if verdict.waiting:
        return f"Pod {verdict.pod}: not tried (profile {profile}): PreEnqueue {verdict.waiting}"
    if verdict.error:
        return f"Pod {verdict.pod}: error (profile {profile})\n{verdict.error}"
    lines = [f"Pod {verdict.pod}: would not schedule (profile {profile})"]
    lines += format_failure(verdict.account or {}).splitlines()[1:]
    if verdict.victims:
        lines.append(f"Preemption would evict: {', '.join(verdict.victims)}")
    return "\n".join(lines)


def _format_success(verdict: Verdict, profile: str) -> str:
    top = sorted(verdict.top_nodes)
    lines = [f"Pod {verdict.pod}: would schedule on {verdict.node} (profile {profile})"]
    if len(top) > 1:
        lines.append(f"{len(top)} nodes tie for the best total, the operator picks one at random: {', '.join(top)}")
    lines += format_success(dict(verdict.account or {}, tie=None)).splitlines()[1:]
    rest = verdict.ranking()[len((verdict.account or {}).get("candidates") or ()) :]
    if rest:
        lines.append("other feasible nodes (total): " + ", ".join(f"{n} {total}" for n, total in rest))
    if verdict.rejections:
        name_width = max(len("NODE"), *(len(n) for n in verdict.rejections))
        lines += ["", f"{'NODE':<{name_width}}  REJECTED BY"]
        lines += [f"{n:<{name_width}}  {why}" for n, why in sorted(verdict.rejections.items())]
    return "\n".join(lines)


def format_group_verdict(verdict: GroupVerdict, profile: str) -> str:
    """A PodGroup's answer for a terminal: the group's outcome, then each member's node or why not."""
    head = f"PodGroup {verdict.pod_group}"
    if verdict.result == "Waiting":
        return f"{head}: not tried (profile {profile}): PreEnqueue {verdict.message}"
    count, placed = len(verdict.nodes), sum(1 for node in verdict.nodes.values() if node)
    if verdict.result == "Schedulable":
        which = f"all {count}" if placed == count else f"{placed} of its {count}"
        lines = [f"{head}: would schedule {which} pending pod(s) in one cycle (profile {profile})"]
    else:
        outcome = "would not schedule" if verdict.result == "Unschedulable" else "error"
        lines = [f"{head}: {outcome} (profile {profile}): {verdict.message}", "none of its pods would bind"]
    width = max(len("POD"), *(len(pod) for pod in verdict.nodes))
    lines += ["", f"{'POD':<{width}}  NODE / WHY NOT"]
    for pod, node in verdict.nodes.items():
        why = node or verdict.messages.get(pod, "")
        if pod in verdict.nominated:
            why += f" (preemption would nominate {verdict.nominated[pod]})"
        lines.append(f"{pod:<{width}}  {why}")
    if verdict.victims:
        lines += ["", f"Preemption for the group would evict: {', '.join(verdict.victims)}"]
    return "\n".join(lines)


def format_replay(verdicts: list[Verdict], profile: str) -> str:
    """The replay's answer: a summary line per pending pod, then each pod's account."""
    if not verdicts:
        return f"No pending pod names profile {profile} (spec.schedulerName)."
    would = sum(1 for v in verdicts if v.node)
    lines = [f"{len(verdicts)} pending pod(s) of profile {profile}: {would} would schedule now", ""]
    width = max(len("POD"), *(len(v.pod) for v in verdicts))
    lines.append(f"{'POD':<{width}}  VERDICT")
    for v in verdicts:
        outcome = f"would schedule on {v.node}" if v.node else (v.waiting or v.error or v.message or "")
        lines.append(f"{v.pod:<{width}}  {outcome}")
    for v in verdicts:
        lines += ["", format_verdict(v, profile)]
    return "\n".join(lines)
