"""Our scheduler's verdict computed in-process on the same objects: the diagnosis half of a disagreement.

The runner compares the real operator process with upstream; that is the acceptance test. When they
disagree, the next question is *where*: in a plugin's math, or in the operator around it (its cache fed
by kopf's watches, timing, the queue). So the runner also feeds every object it loads (as the API server
returned it, after admission) into an in-process :class:`SchedulerApp` with no client, and asks its
scheduler for the pod on exactly upstream's state. That model gives per-plugin, per-node scores and
per-node rejections to set beside upstream's V(10) log lines:

- model == upstream != operator → the operator saw another state (event ordering, a stale cache);
- model == operator != upstream → the plugin math or a reason text differs; the per-plugin score
  vectors name the plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.framework import CycleState
from kopf_scheduler.scheduler import FitError, SchedulingError
from kopf_scheduler.settings import RunSettings
from kopf_scheduler.state.pod_info import PodInfo
from tests.conformance.devices import DEVICE_KINDS
from tests.conformance.volumes import STORAGE_KINDS  # fed to ``cache.storage`` as the operator's watches do

_WORKLOAD_KINDS = {"Service": "Service", "ReplicaSet": "ReplicaSet"}


@dataclass
class ModelVerdict:
    """What our framework decides for one pod on the model's state."""

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

    @property
    def top_nodes(self) -> set[str]:
        if self.final_scores:
            best = max(self.final_scores.values())
            return {n for n, s in self.final_scores.items() if s == best}
        return {self.node} if self.node else set()


class Model:
    """An in-process SchedulerApp fed the scenario's objects, one profile per scheduler name."""

    def __init__(self, profiles: Mapping[str, Mapping[str, Any]]) -> None:
        self.app = SchedulerApp(settings=RunSettings(), client=None)
        for name, spec in profiles.items():
            outcome = self.app.apply_profile(name=name, spec=dict(spec))
            if not outcome.ready:
                raise ValueError(f"profile {name} does not build: {outcome.message}")

    def load(self, obj: Mapping[str, Any]) -> None:
        """Add or update one object (Node, Pod, Namespace, workload, storage) as the API server returned it."""
        kind = obj.get("kind")
        body = dict(obj)
        if kind == "Node":
            self.app.on_node_event("ADDED", body)
        elif kind == "Pod":
            self.app.on_pod_event("ADDED", body)
        elif kind == "Namespace":
            self.app.on_namespace_event("ADDED", body)
        elif kind in _WORKLOAD_KINDS:
            self.app.on_workload_event(_WORKLOAD_KINDS[kind], "ADDED", body)
        elif kind in STORAGE_KINDS or kind in DEVICE_KINDS or kind == "PodDisruptionBudget":
            self.app.on_storage_event(str(kind), "ADDED", body)
        else:
            raise ValueError(f"the model does not take {kind} objects")

    def delete(self, obj: Mapping[str, Any]) -> None:
        kind = obj.get("kind")
        body = dict(obj)
        if kind == "Node":
            self.app.on_node_event("DELETED", body)
        elif kind == "Pod":
            self.app.on_pod_event("DELETED", body)
        elif kind in _WORKLOAD_KINDS:
            self.app.on_workload_event(_WORKLOAD_KINDS[kind], "DELETED", body)
        elif kind == "Namespace":
            self.app.on_namespace_event("DELETED", body)
        elif kind in STORAGE_KINDS or kind in DEVICE_KINDS:
            self.app.on_storage_event(str(kind), "DELETED", body)

    def decide(self, profile: str, pod_obj: Mapping[str, Any]) -> ModelVerdict:
        """Schedule ``pod_obj`` with ``profile`` on the current state, without assuming or binding it."""
        runtime = self.app.profiles[profile]
        body = {**pod_obj, "spec": {**pod_obj["spec"], "schedulerName": profile}}
        pod = PodInfo.from_obj(body)
        snapshot = self.app.cache.snapshot()
        names = snapshot.table.names
        verdict = ModelVerdict()
        state = CycleState()
        try:
            result = runtime.scheduler.schedule_pod(state, pod, snapshot)
        except FitError as fit:
            verdict.rejections = _rejections(fit.diagnosis, names)
            self._post_filter(runtime, state, pod, body, fit, verdict)
            verdict.message = fit.message
            return verdict
        except SchedulingError as e:
            verdict.error = e.status.message
            return verdict
        verdict.node = result.suggested_host
        verdict.rejections = _rejections(result.diagnosis, names)
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
        self, runtime: Any, state: CycleState, pod: PodInfo, body: dict[str, Any], fit: FitError, verdict: ModelVerdict
    ) -> None:
        """PostFilter as the operator runs it, but its preemption only recorded, never executed.

        DefaultPreemption re-reads the preemptor (``Handle.get_pod``), so the pod is in the model meanwhile.
        """
        plugins = [plugin for _, plugin in runtime.framework.post_filter_plugins]
        executors = [p.executor for p in plugins if hasattr(p, "executor")]
        chosen: list[Any] = []
        originals = [executor.start for executor in executors]
        for executor in executors:
            executor.start = lambda candidate, _preemptor: chosen.append(candidate)
        self.app.on_pod_event("ADDED", body)
        try:
            outcome = runtime.scheduler.run_post_filter(state, pod, fit)
        finally:
            self.app.on_pod_event("DELETED", body)
            for executor, start in zip(executors, originals, strict=True):
                executor.start = start
        verdict.nominated = outcome.nominated_node_name if outcome is not None else None
        if chosen:
            verdict.victims = sorted(victim.key for victim in chosen[-1].victims.pods)


def _rejections(diagnosis: Any, names: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for slot, status in diagnosis.statuses.items():
        out[str(names[int(slot)])] = f"{status.plugin}: {'; '.join(status.reasons)}"
    return out
