"""DefaultPreemption's executor: the victims of the chosen node evicted off the scheduling cycle.

Upstream ``framework/preemption/executor.go`` in async mode (SchedulerAsyncPreemption, on in 1.36):
``prepareCandidateAsync`` (clear lower-priority nominations on the node, preempt all victims but the last
concurrently, then the last), ``PreemptPod`` (a victim waiting at Permit is rejected in memory, any other gets
the DisruptionTarget condition and is deleted, a ``Preempted`` event each) and ``IsPodRunningPreemption`` /
``IsPodGroupRunningPreemption``, which DefaultPreemption's PreEnqueue asks while the preemptor is held.

The preemptor is a pod (``actuatePodPreemption``: its node is the candidate's) or, with WorkloadAwarePreemption,
a whole PodGroup (``actuatePodGroupPreemption``: the candidate is the whole cluster, named ``cluster``, and the
events and conditions say ``podgroup``): :class:`ExecutorPreemptor`, upstream's ``ExecutorPreemptor``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kopf_scheduler.framework import Handle, nominated_node_name
from kopf_scheduler.framework.interface import APIError
from kopf_scheduler.plugins.default_preemption.victims import Candidate
from kopf_scheduler.state.pod_info import PodInfo

log = logging.getLogger(__name__)

#: The candidate name of a pod group's preemption (upstream ``actuatePodGroupPreemption``'s ``name: "cluster"``).
CLUSTER_CANDIDATE = "cluster"
#: The API identity of a PodGroup (an event's ``related`` object).
POD_GROUP_API_VERSION = "scheduling.k8s.io/v1alpha2"


@dataclass(frozen=True, slots=True)
class ExecutorPreemptor:
    """Upstream ``ExecutorPreemptor``: who triggers a preemption (a pod, or a pod group and its members)."""

    uid: str
    #: ``namespace/name``, for logs.
    key: str
    scheduler_name: str
    priority: int
    #: Upstream ``Type()``: ``pod`` or ``podgroup``, in the victims' events and DisruptionTarget conditions.
    type: str
    #: The object the victims' events relate to (the pod, or the PodGroup).
    related: PodInfo | Mapping[str, Any]
    #: The pods re-activated when the API work fails (the pod, or the group's members).
    pods: tuple[PodInfo, ...]

    @classmethod
    def of_pod(cls, pod: PodInfo) -> ExecutorPreemptor:
        """Upstream ``podExecutorPreemptor``."""
        scheduler = (pod.obj.get("spec") or {}).get("schedulerName") or pod.scheduler_name
        return cls(pod.uid, pod.key, scheduler, pod.priority, "pod", pod, (pod,))

    @classmethod
    def of_pod_group(cls, pod_group: Mapping[str, Any], pods: Sequence[PodInfo], priority: int) -> ExecutorPreemptor:
        """Upstream ``podGroupExecutorPreemptor``: the scheduler name is its first member's (all must share it)."""
        meta = pod_group.get("metadata") or {}
        related = {"apiVersion": POD_GROUP_API_VERSION, "kind": "PodGroup", **pod_group}
        scheduler = (pods[0].obj.get("spec") or {}).get("schedulerName") or pods[0].scheduler_name
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        return cls(str(meta.get("uid") or ""), key, scheduler, priority, "podgroup", related, tuple(pods))


class PreemptionExecutor:
    """Upstream ``preemption.Executor`` in async mode: evicts a candidate's victims off the scheduling cycle.

    ``start`` marks the preemptor as preempting (PreEnqueue holds it) and spawns the API work: first the
    lower-priority nominations on the node are cleared, then all victims but the last are preempted
    concurrently, then the last one. On any failure the preemptor is re-activated; on success it waits for the
    victims' deletion events like any pod rejected by Filter.

    Where ours differs: upstream stops holding the preemptor once its *last* victim is gone from the informer
    (or terminating), because one informer delivers the victims' deletions in order. kopf hands each object's
    events to its own worker, so the last victim's deletion can be watched before an earlier one's; released
    then, the preemptor found a victim still on the node, failed, and preempted again elsewhere (seen in the
    PreemptionAsync benchmark: one preemptor evicted pods on eight nodes). So the hold lasts until *every*
    victim is watched gone from its node (deleted, terminating, or no longer bound there), also after the API
    work finished. A pod group's victims may be on many nodes: each is watched on its own.

    And the API work starts once the preemptor's nomination is written (:meth:`nomination_written`). Upstream's
    ``handleSchedulingFailure`` patches it (``updatePod``, synchronous) while this goroutine is still on its first
    call, and a victim's DELETE is its second (after the DisruptionTarget patch), over the same HTTP/2 connection:
    the preemptor's next attempt, which a victim's deletion triggers, finds ``status.nominatedNodeName`` set and
    tries that node alone first (``evaluateNominatedNode``). Ours writes over a pool of HTTP/1.1 connections, where
    the DELETE, reusing the connection the victim's patch just freed, overtook a nomination patch that was still
    opening its own connection; the preemptor then came back without its nomination and the full search bound it
    elsewhere (issue 37: conformance seed 690415, p25 bound to n44, nominated for n04).
    """

    def __init__(self, handle: Handle, plugin_name: str) -> None:
        self.handle = handle
        self.plugin_name = plugin_name
        self._preempting: set[str] = set()
        #: preemptor uid → uid of the last victim being preempted.
        self._last_victim: dict[str, str] = {}
        #: preemptor uid → victim uid → its node, until every victim is watched gone from its node.
        self._victims: dict[str, dict[str, str]] = {}

    def is_victim_of(self, preemptor_uid: str, victim_uid: str) -> bool:
        """Whether ``victim_uid`` is one of the victims the preemptor's hold still waits for."""
        pending = self._victims.get(preemptor_uid)
        return pending is not None and victim_uid in pending

    def is_pod_running_preemption(self, uid: str) -> bool:
        """Upstream ``IsPodRunningPreemption``, holding until every victim is watched gone (see the class)."""
        return self._is_running_preemption(uid)

    def is_pod_group_running_preemption(self, uid: str) -> bool:
        """Upstream ``IsPodGroupRunningPreemption`` (the PodGroup's uid), held as :meth:`is_pod_running_preemption`."""
        return self._is_running_preemption(uid)

    def _is_running_preemption(self, uid: str) -> bool:
        if uid in self._preempting and uid not in self._last_victim:
            return True  # the API work has not reached the last victim yet
        pending = self._victims.get(uid)
        if pending is None:
            return False
        if any(self._still_on_node(victim, node) for victim, node in pending.items()):
            return True
        del self._victims[uid]
        return False

    def _still_on_node(self, uid: str, node: str) -> bool:
        victim = self.handle.get_pod(uid)
        return victim is not None and not victim.terminating and victim.node_name == node

    def start(self, candidate: Candidate, preemptor: PodInfo | ExecutorPreemptor) -> None:
        """Upstream ``prepareCandidateAsync`` (from ``actuatePodPreemption`` for a pod, or
        ``actuatePodGroupPreemption`` for a pod group)."""
        if isinstance(preemptor, PodInfo):
            preemptor = ExecutorPreemptor.of_pod(preemptor)
        to_delete = [v for v in candidate.victims.pods if not v.terminating]
        if not to_delete:
            return
        self.handle.metrics.preemption_victims(len(candidate.victims.pods))
        self._preempting.add(preemptor.uid)
        self._victims[preemptor.uid] = {v.uid: v.node_name for v in to_delete}
        name = f"preemption for {preemptor.type} {preemptor.key}"
        self.handle.spawn(self.run(candidate, preemptor, to_delete), name=name)

    async def run(self, candidate: Candidate, preemptor: ExecutorPreemptor, victims: Sequence[PodInfo]) -> None:
        failed = False
        try:
            await self.nomination_written(preemptor)
            try:
                await self.clear_lower_nominations(candidate.name, preemptor)
            except Exception:
                log.exception("Cannot clear 'NominatedNodeName' of lower-priority pods on node %s", candidate.name)
                failed = True
            preempt_last = True
            if len(victims) > 1:
                results = await asyncio.gather(
                    *(self.preempt_pod(candidate, preemptor, v) for v in victims[:-1]), return_exceptions=True
                )
                errors = [r for r in results if isinstance(r, BaseException)]
                if errors:
                    log.error(
                        "Error occurred during async preemption for %s %s: %s", preemptor.type, preemptor.key, errors[0]
                    )
                    failed, preempt_last = True, False
            if preempt_last:
                last = victims[-1]
                self._last_victim[preemptor.uid] = last.uid
                try:
                    await self.preempt_pod(candidate, preemptor, last)
                except Exception:
                    log.exception("Error occurred during async preemption of the last victim %s", last.key)
                    failed = True
        except BaseException:
            failed = True
            raise
        finally:
            self._preempting.discard(preemptor.uid)
            self._last_victim.pop(preemptor.uid, None)
            if failed:
                self._victims.pop(preemptor.uid, None)
                self.handle.activate(preemptor.pods)

    async def nomination_written(self, preemptor: ExecutorPreemptor) -> None:
        """Wait until the status writes pending for the preemptor's pods (the failed attempt's condition and the
        nomination that goes with it) are answered, so that the nomination is watched before any victim goes."""
        for pod in preemptor.pods:
            await self.handle.pod_status_settled(pod.uid)

    async def preempt_pod(self, candidate: Candidate, preemptor: ExecutorPreemptor, victim: PodInfo) -> None:
        """Upstream ``Executor.PreemptPod``: preempt it at Permit (no API call), or mark it DisruptionTarget and
        delete it. Where ours differs: upstream also cancels a victim still in PreBind instead of deleting it."""
        note = f"Preempted by {preemptor.type} {preemptor.uid} on node {candidate.name}"
        if self.handle.preempt_waiting_pod(victim.uid, self.plugin_name):
            note += " (in kube-scheduler memory)."
        else:
            client = self.handle.client
            if client is None:
                raise RuntimeError("no API client to preempt pods with")
            condition = disruption_condition(victim, preemptor)
            try:
                if condition is not None:
                    patch = {"status": {"conditions": [condition]}}
                    await client.patch_pod_status(namespace=victim.namespace, name=victim.name, patch=patch)
                await client.delete_pod(namespace=victim.namespace, name=victim.name, uid=victim.uid)
            except APIError as exc:
                if exc.status == 404:
                    return  # already deleted: no event, as upstream
                raise
        self.handle.record_event(
            victim, event_type="Normal", reason="Preempted", action="Preempting", note=note, related=preemptor.related
        )

    async def clear_lower_nominations(self, node_name: str, preemptor: ExecutorPreemptor) -> None:
        """Upstream ``getLowerPriorityNominatedPods`` + ``clearNominatedNodeName``: every one tried, errors after."""
        nominator = self.handle.nominator
        lower = [p for p in nominator.nominated_pods_for_node(node_name) if p.priority < preemptor.priority]
        errors: list[Exception] = []
        for pod in lower:
            nominator.delete_nominated_pod_if_exists(pod)
            if not nominated_node_name(pod):
                continue
            client = self.handle.client
            if client is None:
                continue
            try:
                patch = {"status": {"nominatedNodeName": None}}
                await client.patch_pod_status(namespace=pod.namespace, name=pod.name, patch=patch)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


def disruption_condition(victim: PodInfo, preemptor: PodInfo | ExecutorPreemptor) -> dict[str, Any] | None:
    """The DisruptionTarget condition to patch in, or None when the victim already has exactly it
    (upstream ``UpdatePodCondition`` returning false)."""
    if isinstance(preemptor, PodInfo):
        preemptor = ExecutorPreemptor.of_pod(preemptor)
    message = f"{preemptor.scheduler_name}: preempting to accommodate a higher priority {preemptor.type}"
    condition: dict[str, Any] = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": message,
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    generation = (victim.obj.get("metadata") or {}).get("generation")
    if generation:
        condition["observedGeneration"] = generation
    for old in (victim.obj.get("status") or {}).get("conditions") or ():
        if old.get("type") != "DisruptionTarget":
            continue
        if old.get("status") == "True":
            if old.get("lastTransitionTime"):
                condition["lastTransitionTime"] = old["lastTransitionTime"]
            if (
                old.get("reason") == condition["reason"]
                and old.get("message") == message
                and not old.get("lastProbeTime")
            ):
                return None
        break
    return condition
