"""Workload-aware preemption: room for a whole PodGroup, victims chosen per group (upstream v1.36.3's
``framework/preemption/podgrouppreemption.go`` and the parts of ``types.go`` and ``preemption.go`` it uses).

Upstream runs it behind the WorkloadAwarePreemption gate; here in every workload-aware profile (one that enables a
workload-aware plugin such as GangScheduling). The pod-group cycle (``schedule_one_pod_group.py``, upstream
``runWorkloadAwarePreemption``) calls DefaultPreemption's ``pod_group_post_filter`` for a group that did not fit,
with a function that re-runs the group's algorithm without PostFilter; :class:`PodGroupEvaluator` then:

1. The preemptor (:class:`PodGroupPreemptor`): the PodGroup's ``spec.priority`` (0 when unset: the API server
   resolves ``priorityClassName`` into it) and ``preemptionPolicy: Never`` if any member says so; such a group
   preempts nobody (``not eligible due to preemptionPolicy=Never.``).
2. The domain is the whole cluster; its possible victims (:func:`domain_victims`, upstream
   ``newDomainForWorkloadPreemption``): each pod on a node is a victim of its own, except the pods of a PodGroup
   whose ``disruptionMode`` is ``PodGroup``, which together are one victim with the group's priority. A victim
   may be preempted when its priority is below the preemptor's.
3. Every such victim is taken off (a dry run on the cache, :class:`ClusterDryRun`); if the group still does not
   fit, that status is the answer. Otherwise the victims are put back most important first
   (:func:`more_important_victim`: priority, then a group over a single pod, then the older single pod, the
   larger group, the older group), those whose unit would violate a PodDisruptionBudget first
   (:func:`filter_victims_with_pdb_violation`); a victim the group no longer fits with goes again, for good.
4. The chosen victims (most important first, a group's pods together) are evicted by the executor as one
   candidate named ``cluster`` (``Preempted by podgroup <uid> on node cluster``; the DisruptionTarget condition
   says ``preempting to accommodate a higher priority podgroup``), while the members wait at PreEnqueue.

Where ours differs: upstream collects the victims from a Go map and sorts them with an unstable sort, so equally
important victims come in an arbitrary order; here in node order, pod order, and a stable sort (one of upstream's
possible orders). A pod with no start time counts as started at one instant per preemption (upstream: each read).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.framework import SUCCESS, Handle, PodGroupPreemption, Status
from kopf_scheduler.plugins.default_preemption.dry_run import ClusterDryRun
from kopf_scheduler.plugins.default_preemption.evaluator import NOT_ELIGIBLE_NEVER, Budget, counting_budgets
from kopf_scheduler.plugins.default_preemption.executor import CLUSTER_CANDIDATE, ExecutorPreemptor, PreemptionExecutor
from kopf_scheduler.plugins.default_preemption.victims import Candidate, Victims, pod_start_time
from kopf_scheduler.state.cache import NodeInfo
from kopf_scheduler.state.objects import POD_DISRUPTION_BUDGET
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler.plugins.default_preemption")

#: The ``cache.objects`` kind of upstream's PodGroup lister.
POD_GROUP = "PodGroup"
#: ``spec.disruptionMode`` that makes a group's pods one victim.
DISRUPTION_MODE_POD_GROUP = "PodGroup"
#: Upstream's text when nothing in the cluster has a lower priority than the group.
NO_VICTIMS_FOR_PREEMPTOR = "No preemption victims found for incoming preemptor"
#: How many pod groups' last preemptions are remembered for explain (the oldest forgotten first).
MAX_REMEMBERED = 1024

#: Finds the PodGroup of a pod whose group is preempted as a whole (None: the pod is a victim of its own).
PodGroupOf = Callable[[PodInfo], Mapping[str, Any] | None]
#: Re-runs the group's algorithm on the cache as it is now: Success if the group fits.
ScheduleGroup = Callable[[], Status]


def pod_group_priority(pod_group: Mapping[str, Any]) -> int:
    """Upstream ``util.PodGroupPriority``: ``spec.priority``, or 0 (the static default) when unset."""
    priority = (pod_group.get("spec") or {}).get("priority")
    return 0 if priority is None else int(priority)


def disrupted_as_group(pod: PodInfo, objects: Any) -> Mapping[str, Any] | None:
    """Upstream ``isPodGroupPreemptiblePod``: the pod's PodGroup if its ``disruptionMode`` is ``PodGroup``; None
    for a pod of no group, of a group not found, or of a group whose pods may be disrupted one by one."""
    if pod.scheduling_group is None:
        return None
    pod_group: Mapping[str, Any] | None = objects.get(POD_GROUP, pod.scheduling_group, pod.namespace)
    if pod_group is None or (pod_group.get("spec") or {}).get("disruptionMode") != DISRUPTION_MODE_POD_GROUP:
        return None
    return pod_group


@dataclass(frozen=True, slots=True)
class PodGroupPreemptor:
    """Upstream ``podGroupPreemptor``: the PodGroup, its members being scheduled, its priority and policy."""

    pod_group: Mapping[str, Any]
    pods: tuple[PodInfo, ...]
    priority: int
    preemption_policy: str

    @classmethod
    def of(cls, pod_group: Mapping[str, Any], pods: Sequence[PodInfo]) -> PodGroupPreemptor:
        """Upstream ``newPodGroupPreemptor``: ``Never`` if any member's ``preemptionPolicy`` is ``Never``."""
        never = any((pod.obj.get("spec") or {}).get("preemptionPolicy") == "Never" for pod in pods)
        policy = "Never" if never else "PreemptLowerPriority"
        return cls(pod_group, tuple(pods), pod_group_priority(pod_group), policy)


@dataclass(slots=True, eq=False)
class Victim:
    """Upstream ``victim``: what is preempted as one unit (a pod, or every pod of a PodGroup)."""

    pods: list[PodInfo]
    priority: int
    #: The earliest start time of its pods (epoch seconds; a pod not started counts as now).
    earliest_start_time: float
    #: The nodes its pods run on (upstream ``AffectedNodes``).
    affected_nodes: dict[str, NodeInfo] = field(default_factory=dict)

    @property
    def is_pod_group(self) -> bool:
        """Upstream ``IsPodGroup``: its first pod names a scheduling group (a pod of a group disrupted pod by pod
        counts too, as upstream's)."""
        return self.pods[0].scheduling_group is not None


def new_victim(pods: Sequence[PodInfo], priority: int, nodes: Iterable[NodeInfo], now: float) -> Victim:
    """Upstream ``newVictim``: the earliest start time of its pods and the nodes they run on."""
    return Victim(
        list(pods), priority, min(pod_start_time(pod, now) for pod in pods), {node.name: node for node in nodes}
    )


def domain_victims(nodes: Iterable[NodeInfo], pod_group_of: PodGroupOf, now: float) -> list[Victim]:
    """Upstream ``newDomainForWorkloadPreemption``'s victims: a pod of a group disrupted as a whole joins its
    group's victim (with the group's priority), every other pod is a victim of its own (with its own). A group's
    earliest start time is its first pod's (in node order): upstream does not update it as more pods join."""
    victims: dict[str, Victim] = {}
    for node in nodes:
        for pod in node.pods.values():
            pod_group = pod_group_of(pod)
            if pod_group is None:
                victims[pod.uid] = new_victim([pod], pod.priority, [node], now)
                continue
            meta = pod_group.get("metadata") or {}
            key = str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")
            found = victims.get(key)
            if found is not None:
                found.pods.append(pod)
                found.affected_nodes[node.name] = node  # its start time stays its first pod's, as upstream's
                continue
            victims[key] = new_victim([pod], pod_group_priority(pod_group), [node], now)
    return list(victims.values())


def victim_importance_key(victim: Victim) -> tuple[int, int, int, float]:
    """Sort key for :func:`more_important_victim` (most important first)."""
    if victim.is_pod_group:
        return (-victim.priority, 0, -len(victim.pods), victim.earliest_start_time)
    return (-victim.priority, 1, 0, victim.earliest_start_time)


def more_important_victim(first: Victim, second: Victim) -> bool:
    """Upstream ``moreImportantVictim``: the higher priority; at equal priority a group over a single pod; two
    single pods: the one started earlier; two groups: the larger, then the one started earlier."""
    return victim_importance_key(first) < victim_importance_key(second)


def sort_victims(victims: Iterable[Victim]) -> list[Victim]:
    return sorted(victims, key=victim_importance_key)


def filter_victims_with_pdb_violation(
    victims: Sequence[Victim], budgets: Sequence[Budget]
) -> tuple[list[Victim], list[Victim]]:
    """Upstream ``filterVictimsWithPDBViolation``: (violating, non-violating), each in the input order. A unit
    violates when any of its pods drives a matching budget below zero; its pods are counted until the first
    that does (and, for that pod, its budgets until the first it drives below zero)."""
    allowed = [budget.disruptions_allowed for budget in budgets]

    def violates(pod: PodInfo) -> bool:
        for i in counting_budgets(pod, budgets):
            allowed[i] -= 1
            if allowed[i] < 0:
                return True
        return False

    violating: list[Victim] = []
    non_violating: list[Victim] = []
    for victim in victims:
        (violating if any(violates(pod) for pod in victim.pods) else non_violating).append(victim)
    return violating, non_violating


class PodGroupEvaluator:
    """Upstream ``PodGroupEvaluator``: preemption for a whole pod group over the whole cluster."""

    def __init__(self, handle: Handle, executor: PreemptionExecutor, clock: Callable[[], float]) -> None:
        self.handle = handle
        self.executor = executor
        self.clock = clock
        #: The victims chosen by the last successful preemption of each PodGroup, by (namespace, name), for
        #: ``kopf-scheduler explain``: replaced on the group's next preemption, at most :data:`MAX_REMEMBERED`.
        self.chosen: OrderedDict[tuple[str, str], PodGroupPreemption] = OrderedDict()

    def preempt(self, pod_group: Mapping[str, Any], pods: Sequence[PodInfo], schedule: ScheduleGroup) -> Status:
        """Upstream ``PodGroupEvaluator.Preempt``: choose the victims, then evict them asynchronously. The cache is
        as before when it returns."""
        cache = self.handle.snapshot().cache
        now = self.clock()
        victims = domain_victims(
            self.handle.snapshot().node_infos(), lambda pod: disrupted_as_group(pod, cache.objects), now
        )
        preemptor = PodGroupPreemptor.of(pod_group, pods)
        budgets = [Budget.from_obj(obj) for obj in cache.objects.all(POD_DISRUPTION_BUDGET)]
        with ClusterDryRun(cache) as dry_run:
            chosen, status = self.select_victims_on_domain(preemptor, victims, budgets, schedule, dry_run)
        if not status.is_success:
            return status
        meta = pod_group.get("metadata") or {}
        self._remember((str(meta.get("namespace", "")), str(meta.get("name", ""))), chosen)
        executor_preemptor = ExecutorPreemptor.of_pod_group(pod_group, pods, preemptor.priority)
        self.executor.start(Candidate(CLUSTER_CANDIDATE, Victims(tuple(chosen))), executor_preemptor)
        return SUCCESS

    def _remember(self, key: tuple[str, str], victims: Sequence[PodInfo]) -> None:
        self.chosen.pop(key, None)
        self.chosen[key] = PodGroupPreemption(time.time(), tuple((pod.key, pod.uid) for pod in victims))
        while len(self.chosen) > MAX_REMEMBERED:
            self.chosen.popitem(last=False)

    def select_victims_on_domain(
        self,
        preemptor: PodGroupPreemptor,
        victims: Sequence[Victim],
        budgets: Sequence[Budget],
        schedule: ScheduleGroup,
        dry_run: ClusterDryRun,
    ) -> tuple[list[PodInfo], Status]:
        """Upstream ``selectVictimsOnDomain``: the fewest, least important victims without which the group fits
        (their pods, most important victim first). The victims' pods are taken off and put back through
        ``dry_run``; those chosen are still off when it returns."""
        if preemptor.preemption_policy == "Never":
            logger.debug("Preemptor is not eligible for preemption: %s", NOT_ELIGIBLE_NEVER)
            return [], Status.unschedulable(NOT_ELIGIBLE_NEVER)
        potential = [victim for victim in victims if victim.priority < preemptor.priority]
        if not potential:
            return [], Status.unschedulable(NO_VICTIMS_FOR_PREEMPTOR, unresolvable=True)
        for victim in potential:
            dry_run.remove(victim.pods)
        status = schedule()
        if not status.is_success:  # it does not fit even without every victim
            return [], status
        violating, non_violating = filter_victims_with_pdb_violation(sort_victims(potential), budgets)
        to_preempt: list[Victim] = []
        for victim in (*violating, *non_violating):  # reprieve the most important first, violating ones first
            dry_run.restore(victim.pods)
            if not schedule().is_success:  # an Error counts as not fitting, as upstream
                dry_run.remove(victim.pods)
                to_preempt.append(victim)
                logger.debug("Pods are potential preemption victims: %s", ",".join(p.name for p in victim.pods))
        return [pod for victim in sort_victims(to_preempt) for pod in victim.pods], SUCCESS


__all__ = [
    "DISRUPTION_MODE_POD_GROUP",
    "NO_VICTIMS_FOR_PREEMPTOR",
    "PodGroupEvaluator",
    "PodGroupPreemptor",
    "Victim",
    "disrupted_as_group",
    "domain_victims",
    "filter_victims_with_pdb_violation",
    "more_important_victim",
    "new_victim",
    "pod_group_priority",
    "sort_victims",
]
