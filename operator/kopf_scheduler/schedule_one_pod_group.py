"""One pod group through the scheduling cycle: upstream's pod-group cycle (``pkg/scheduler/schedule_one_podgroup.go``),
beside the per-pod cycle of ``schedule_one.py``, whose helpers it shares.

:meth:`ScheduleOne.schedule_one` hands a popped pod with a scheduling group here when its profile is
workload-aware (upstream's GenericWorkload gate, per profile). Restated with GangScheduling,
TopologyAwareWorkloadScheduling and WorkloadAwarePreemption on:

- :meth:`PodGroupCycle.pod_group_info_for_pod` (upstream ``podGroupInfoForPod``): the popped pod and every other
  unscheduled member of its group the live pod-group state knows, each taken from the queue with
  :meth:`SchedulingQueue.pop_specific_pod`, sorted by priority (highest first) then initial attempt time.
- :meth:`PodGroupCycle.schedule_one_pod_group`: members deleted, bound or assumed meanwhile leave the group
  (upstream ``skipPodGroupPodSchedule``), then the cycle (``podGroupCycle``): the pod groups' snapshot is brought up
  to date, the algorithm runs, and its result is submitted.
- The placement algorithm (upstream ``podGroupSchedulingPlacementAlgorithm``, ``pod_group_placement.py``): the
  placements the profile's PlacementGenerate plugin makes (one of every node without one), the default algorithm
  in each, the best of those the group fits in by the PlacementScore plugins.
- The default algorithm (upstream ``podGroupSchedulingDefaultAlgorithm``): each member in order through the
  per-pod algorithm (``schedulingAlgorithm``: Filter, Score, PostFilter, where DefaultPreemption declines a pod of
  a PodGroup: the group preempts as a whole, below) with ``state.pod_group_cycle`` set, assumed on its node for
  the rest of the cycle only (``ClusterCache.assume_in_snapshot``: the nodes and the cycle's copy of its group),
  Reserve, Permit (nothing parked). The group is feasible once a member's Permit says
  Success (a gang's quorum is met in the snapshot); every trial placement is undone before the result is
  submitted (Unreserve in reverse, the pod out of the snapshot, its nomination back).
- :meth:`PodGroupCycle._submit` (``submitPodGroupAlgorithmResult``): a feasible group's placed members are
  assumed in the cache, Reserved and Permitted again and go to their binding cycles (a gang's Permit holds them
  until the quorum is assumed for real); otherwise each member goes to the failure handler with upstream's
  status. Then the PodGroup's ``PodGroupScheduled`` condition (:meth:`PodGroupCycle._update_pod_group_condition`)
  and the ``scheduler_podgroup_*`` metrics.
- :meth:`PodGroupCycle._run_workload_aware_preemption` (``runWorkloadAwarePreemption``, WorkloadAwarePreemption):
  an Unschedulable group asks the profile's PodGroupPostFilter plugin (DefaultPreemption's
  ``pod_group_post_filter``, :mod:`kopf_scheduler.plugins.default_preemption.pod_group`) to make room, judging
  each trial with the group's algorithm again without PostFilter (upstream ``runWithoutPostFilters``). Victims
  chosen, the group waits on preemption: its members go back to the queue (the placed ones nominated to their
  nodes) and DefaultPreemption's PreEnqueue holds them until the victims are gone. Otherwise the group's message
  gains the preemption's (an Error replaces it).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kopf_scheduler.algorithm import FitError, ScheduleResult, SchedulingError, schedule_pod
from kopf_scheduler.framework import CycleState, PostFilterResult, Status
from kopf_scheduler.framework.placement import PodGroupInfo
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.status import SUCCESS, Code
from kopf_scheduler.go_format import go_quote
from kopf_scheduler.live_profiles import ProfileRuntime
from kopf_scheduler.metrics import ERROR, SCHEDULED, UNSCHEDULABLE, WAITING_ON_PREEMPTION, SchedulerMetrics
from kopf_scheduler.pod_group_placement import PlacementHistory, PlacementsTried, placement_algorithm
from kopf_scheduler.queue import QueuedPodInfo
from kopf_scheduler.reporting import Reporter, Spawn, now_rfc3339
from kopf_scheduler.schedule_one import (
    CLEAR_NOMINATION,
    Found,
    ScheduleOne,
    assume_and_reserve,
    assume_and_run_reserve,
    new_cycle_state,
    permit_or_undo,
    unreserve_and_forget,
)
from kopf_scheduler.state.cache import ClusterCache, Snapshot
from kopf_scheduler.state.pod_group_state import PodGroupStateNotFound
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler")

#: Upstream's ``errPodGroupUnschedulable``: the error of every status that rejects a member for its group's sake.
POD_GROUP_UNSCHEDULABLE = "pod group is unschedulable"
#: The PodGroup condition the cycle sets, and its reasons (upstream ``pkg/apis/scheduling``).
POD_GROUP_SCHEDULED = "PodGroupScheduled"
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"
#: The kind of ``cache.objects`` that holds PodGroups (watched where the cluster serves it).
POD_GROUP_KIND = "PodGroup"
#: ``runWorkloadAwarePreemption``'s answers when it cannot preempt for a group.
NO_POD_GROUP_POST_FILTER = "default preemption plugin is not registered, workload aware preemption is disabled"
NOT_SUPPORTED_WITH_CONSTRAINTS = "workload aware preemption is not supported for pod groups with scheduling constraints"


def pod_group_unschedulable(*reasons: str) -> Status:
    """``fwk.NewStatus(Unschedulable, reasons...).WithError(errPodGroupUnschedulable)``: its message is the error's
    text, then the reasons."""
    return Status(Code.UNSCHEDULABLE, (POD_GROUP_UNSCHEDULABLE, *reasons))


@dataclass(slots=True, eq=False)
class QueuedPodGroupInfo:
    """Upstream ``QueuedPodGroupInfo`` (with its ``PodGroupInfo``): a pod group and its members popped together,
    in the order the cycle tries them."""

    namespace: str
    name: str
    queued_pod_infos: list[QueuedPodInfo]

    @property
    def unscheduled_pods(self) -> list[PodInfo]:
        """The members being scheduled (upstream ``UnscheduledPods``, kept in step with ``queued_pod_infos``)."""
        return [qpod.pod for qpod in self.queued_pod_infos]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True, eq=False)
class AlgorithmResult:
    """One member's attempt in the group's cycle (upstream ``algorithmResult``)."""

    qpod: QueuedPodInfo
    #: The member's own cycle state (upstream's ``podSchedulingContext``); its binding cycle goes on with it.
    state: CycleState
    #: Success, or why the member failed (its status for the failure handler).
    status: Status
    #: Seconds its algorithm took (the failure handler's and the binding cycle's start is now minus this).
    duration: float = 0.0
    #: The FitError or exception behind a failing ``status``: the failure handler reads its plugins and text.
    failure: Exception | None = None
    #: The node it was placed on (its nominated node when it needs preemption); None when it has none.
    result: ScheduleResult | None = None
    #: Upstream's ``scheduleResult.nominatingInfo``: None (Noop), "" (clear) or a node (PostFilter's nomination).
    nominated_node: str | None = CLEAR_NOMINATION
    #: What PostFilter found (``/explain``), when it ran.
    post_filter: PostFilterResult | None = None
    #: It fits only once PostFilter's victims are gone (it was placed on its nominated node).
    requires_preemption: bool = False
    #: Permit's verdict (Success or Wait) for a member that was placed.
    permit_status: Status | None = None
    #: A member whose trial placement was kept (its group fit in the placement that is the answer): the member as
    #: its trial assumed it (in the snapshot, Reserved), and how to undo that trial.
    trial: PodInfo | None = None
    undo_trial: Callable[[], None] | None = None

    @property
    def pod(self) -> PodInfo:
        """Upstream ``algorithmResult.GetPod``."""
        return self.qpod.pod

    @property
    def node_name(self) -> str:
        """Upstream ``algorithmResult.GetNodeName``: where it was placed (its nominated node when it needs
        preemption), "" when it was not."""
        return self.result.suggested_host if self.result is not None else ""


@dataclass(slots=True, eq=False)
class PodGroupAlgorithmResult:
    """The group's outcome (upstream ``podGroupAlgorithmResult``): Success (feasible: bind the placed members),
    Unschedulable (every member back to the queue; ``waiting_on_preemption`` when it is feasible after
    preemption) or Error. Members after an error have no result."""

    status: Status
    pod_results: list[AlgorithmResult] = field(default_factory=list)
    waiting_on_preemption: bool = False

    @property
    def pod_trials(self) -> list[AlgorithmResult]:
        """The members' results, as the placement algorithm reads them."""
        return self.pod_results


class PodGroupCycle:
    """Schedules a popped pod's whole group in one cycle: all placed or none (upstream ``scheduleOnePodGroup``)."""

    def __init__(
        self,
        *,
        cycles: ScheduleOne,
        cache: ClusterCache,
        reporter: Reporter,
        metrics: SchedulerMetrics,
        spawn: Spawn,
        rng: random.Random | None = None,
    ) -> None:
        #: The per-pod cycle, whose failure handling, PostFilter and binding cycle the members go through.
        self._cycles = cycles
        self._cache = cache
        self._reporter = reporter
        self._metrics = metrics
        self._spawn = spawn
        self._rng = rng or random.Random()
        #: (namespace, name) → (uid, the PodGroupScheduled condition we last wrote), until the watch shows it.
        #: Upstream patches synchronously inside the cycle, so its next cycle reads its own write; ours is sent
        #: asynchronously, and a cycle right after (the rest of a group) must not regress a True it just wrote.
        self._written: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        #: The placements each group's last cycle tried (``/explain``).
        self.placements = PlacementHistory()

    def schedule(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> None:
        """Upstream ``ScheduleOne``'s branch for a pod with a scheduling group: its group's cycle, or the failure
        handler (nomination left as it is) when the group's state cannot be had."""
        try:
            group = self.pod_group_info_for_pod(runtime, qpod)
        except PodGroupStateNotFound as e:
            self._cycles.handle_scheduling_failure(
                runtime,
                qpod,
                message=f"error while retrieving pod group state: {e}",
                reason="SchedulerError",
                plugins=set(),
                started=time.perf_counter(),
                nominated_node=None,
            )
            return
        self.schedule_one_pod_group(runtime, group)

    def pod_group_info_for_pod(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> QueuedPodGroupInfo:
        """Upstream ``podGroupInfoForPod``: ``qpod`` and every other unscheduled member of its group that waits in
        the profile's queue, popped from it, highest priority first, then earliest initial attempt.

        Raises :class:`PodGroupStateNotFound` when the cache knows no member of the group."""
        pod = qpod.pod
        namespace, name = pod.scheduling_group_key or (pod.namespace, "")
        state = self._cache.pod_groups.get(namespace, name)
        queued = [qpod]
        for member in state.unscheduled_pods().values():
            if member.name == pod.name:
                continue
            popped = runtime.queue.pop_specific_pod(member.uid)
            if popped is None:
                logger.debug("Pod available in pod group state not available in scheduling queue: %s", member.key)
                continue
            queued.append(popped)
        queued.sort(key=_priority_then_initial_attempt)
        return QueuedPodGroupInfo(namespace, name, queued)

    def schedule_one_pod_group(self, runtime: ProfileRuntime, group: QueuedPodGroupInfo) -> None:
        """Upstream ``scheduleOnePodGroup``: members deleted, bound or assumed meanwhile are done with
        (``skipPodGroupPodSchedule``; the gang's constraints are judged again at Permit); the rest go through
        the group's cycle with the profile's pipeline of now."""
        group.queued_pod_infos = [qpod for qpod in group.queued_pod_infos if self._cycles.latest(runtime, qpod)]
        if not group.queued_pod_infos:
            return
        logger.debug("Attempting to schedule pod group %s", group.key)
        self._pod_group_cycle(runtime, runtime.framework, group)

    def _pod_group_cycle(self, runtime: ProfileRuntime, framework: Framework, group: QueuedPodGroupInfo) -> None:
        """Upstream ``podGroupCycle``: :meth:`decide`, then the result submitted."""
        start = time.perf_counter()
        result = self.decide(framework, group, keep_trial=True)
        self._submit(runtime, framework, group, result, start)

    def decide(
        self, framework: Framework, group: QueuedPodGroupInfo, *, keep_trial: bool = False
    ) -> PodGroupAlgorithmResult:
        """``podGroupCycle`` up to its submit (what-if stops here too): the algorithm on a snapshot brought up to
        date; an Unschedulable group then runs workload-aware preemption (victims chosen: it waits on preemption;
        otherwise its message gains the preemption's, or an Error replaces it). ``keep_trial``: a group that fits
        in the placement that is the answer keeps its trial placement for :meth:`_submit` (see
        :meth:`_default_algorithm`)."""
        start = time.perf_counter()
        self._cache.update_pod_group_snapshot()
        snapshot = self._cache.snapshot()
        result = self._scheduling_algorithm(framework, snapshot, group, keep_trial=keep_trial)
        self._metrics.podgroup_scheduling_algorithm_duration.observe(time.perf_counter() - start)
        if result.status.code is Code.UNSCHEDULABLE:
            status = self._run_workload_aware_preemption(framework, snapshot, group)
            if status.is_success:
                result.waiting_on_preemption = True
            elif status.code is Code.ERROR:
                result.status = status
            else:  # upstream ``AppendReason(status.String())``
                result.status = replace(result.status, reasons=(*result.status.reasons, status.message))
        return result

    def _run_workload_aware_preemption(
        self, framework: Framework, snapshot: Snapshot, group: QueuedPodGroupInfo
    ) -> Status:
        """Upstream ``runWorkloadAwarePreemption``: the profile's PodGroupPostFilter plugin (DefaultPreemption)
        makes room for the group, judging each trial with the group's algorithm without PostFilter; the plugin
        puts the cache back as it was (upstream's ``BackupSnapshot`` and restore)."""
        plugins = framework.pod_group_post_filter_plugins
        if not plugins:
            return Status(Code.UNSCHEDULABLE, (NO_POD_GROUP_POST_FILTER,))
        pod_group = self._cache.objects.get(POD_GROUP_KIND, group.name, group.namespace)
        if pod_group is None:
            not_found = f"podgroup.scheduling.k8s.io {go_quote(group.name)} not found"
            return Status(Code.ERROR, (f"failed to get pod group object: {not_found}",))
        constraints = (pod_group.get("spec") or {}).get("schedulingConstraints")
        if constraints is not None and (constraints.get("topology") or []):
            return Status(Code.UNSCHEDULABLE, (NOT_SUPPORTED_WITH_CONSTRAINTS,))

        def schedule() -> Status:
            return self._scheduling_algorithm(framework, snapshot, group, skip_post_filters=True).status

        try:
            return plugins[0].pod_group_post_filter(pod_group, group.unscheduled_pods, schedule)
        except Exception as e:
            logger.exception("Workload-aware preemption failed for pod group %s", group.key)
            return Status.as_error(e)

    def _scheduling_algorithm(
        self,
        framework: Framework,
        snapshot: Snapshot,
        group: QueuedPodGroupInfo,
        *,
        skip_post_filters: bool = False,
        keep_trial: bool = False,
    ) -> PodGroupAlgorithmResult:
        """Upstream ``podGroupSchedulingAlgorithm`` with TopologyAwareWorkloadScheduling on: the placement algorithm
        (``pod_group_placement.py``: placements generated, each tried with the default algorithm, the best scored).
        ``skip_post_filters``: upstream's ``runWithoutPostFilters`` (workload-aware preemption's trials). What the
        cycle's own run tried (not preemption's trials) is kept for ``/explain``."""
        info = PodGroupInfo(group.namespace, group.name, tuple(group.unscheduled_pods))
        tried = None if skip_post_filters else PlacementsTried(time.time(), "")
        result = placement_algorithm(
            framework,
            snapshot,
            info,
            lambda keep: self._default_algorithm(
                framework, snapshot, group, skip_post_filters=skip_post_filters, keep_feasible=keep_trial and keep
            ),
            PodGroupAlgorithmResult,
            rng=self._rng,
            tried=tried,
            release=_undo_kept_trials,
        )
        if tried is not None:
            self.placements.record(group.namespace, group.name, tried)
        return result

    def _default_algorithm(
        self,
        framework: Framework,
        snapshot: Snapshot,
        group: QueuedPodGroupInfo,
        *,
        skip_post_filters: bool = False,
        keep_feasible: bool = False,
    ) -> PodGroupAlgorithmResult:
        """Upstream ``podGroupSchedulingDefaultAlgorithm``: each member in order, the ones placed so far assumed
        for the next; a rejected member does not stop the others, an error does. Feasible once a member's Permit
        says Success (Unschedulable, waiting on preemption, if any placed member needs it). Every placement is
        undone before it returns, the last first (upstream's deferred reverts).

        With ``keep_feasible`` a feasible group's placements stay, each member's undo kept with its result:
        upstream undoes them and :meth:`_submit` assumes, Reserves and Permits the same members on the same nodes
        again, in the same order, to the same end; keeping them spares placing every member twice (a third of the
        gang path's cycle). :meth:`_submit` makes them the cache's own, or undoes them."""
        result = PodGroupAlgorithmResult(pod_group_unschedulable())
        reverts: list[Callable[[], None]] = []
        placed: list[AlgorithmResult] = []
        requires_preemption = False
        completed = False
        try:
            for qpod in group.queued_pod_infos:
                pod_result, revert = self._pod_algorithm(framework, snapshot, qpod, skip_post_filters)
                result.pod_results.append(pod_result)
                if not pod_result.status.is_success and not pod_result.requires_preemption:
                    if pod_result.status.is_rejected:
                        continue  # the group may still be feasible, as long as a Permit says Success
                    # Upstream wraps ``status.AsError()``, whose text is the status's message (``running … : …``).
                    text = pod_result.status.message
                    result.status = Status(Code.ERROR, (f"failed to schedule other pod from a pod group: {text}",))
                    result.waiting_on_preemption = False
                    break
                if revert is not None:
                    reverts.append(revert)
                    placed.append(pod_result)
                requires_preemption = requires_preemption or pod_result.requires_preemption
                if pod_result.permit_status is not None and pod_result.permit_status.is_success:
                    if requires_preemption:
                        result.status = pod_group_unschedulable("pod group is waiting for preemption to complete")
                        result.waiting_on_preemption = True
                    else:
                        result.status = SUCCESS
            completed = True
        finally:
            if completed and keep_feasible and result.status.is_success:
                for pod_result, revert in zip(placed, reverts, strict=True):
                    pod_result.undo_trial = revert
            else:
                for revert in reversed(reverts):
                    revert()
        return result

    def _pod_algorithm(
        self, framework: Framework, snapshot: Snapshot, qpod: QueuedPodInfo, skip_post_filters: bool = False
    ) -> tuple[AlgorithmResult, Callable[[], None] | None]:
        """Upstream ``podGroupPodSchedulingAlgorithm``: one member through the per-pod algorithm (PostFilter
        included unless ``skip_post_filters``), then, placed (or nominated by PostFilter: it needs preemption),
        assumed for this cycle, Reserved and Permitted. Returns its result and, when it stays placed, how to undo
        that."""
        pod = qpod.pod
        state = new_cycle_state()  # upstream ``initPodSchedulingContext``
        state.pod_group_cycle = True
        state.skip_all_post_filter_plugins = skip_post_filters
        started = time.perf_counter()
        requires_preemption = False
        status = SUCCESS
        failure: Exception | None = None
        nominated_node: str | None = None
        post_filter: PostFilterResult | None = None
        try:
            result = schedule_pod(framework, state, pod, snapshot, rng=self._rng)
        except FitError as fit:
            post_filter, nominated_node = self._cycles.post_filter(framework, state, pod, fit)
            self._cycles.algorithm_done(started)
            slot = snapshot.slot_of(nominated_node) if nominated_node else None
            if nominated_node is None or slot is None:
                return AlgorithmResult(
                    qpod, state, fit.status, time.perf_counter() - started, fit, None, nominated_node, post_filter
                ), None
            # The subsequent members must see this one on its nominated node: it is placed there, as if it fit.
            result = ScheduleResult(nominated_node, 0, 0, slot, fit.diagnosis)
            requires_preemption, status, failure = True, fit.status, fit
        except Exception as e:
            self._cycles.algorithm_done(started)
            return AlgorithmResult(qpod, state, _error_status(e), time.perf_counter() - started, e), None
        else:
            self._cycles.algorithm_done(started)
        host = result.suggested_host
        try:
            assumed = assume_and_run_reserve(framework, state, pod, result, self._cache)
        except Exception as e:
            status = e.status if isinstance(e, FitError) else _error_status(e)
            return AlgorithmResult(qpod, state, status, time.perf_counter() - started, e), None

        def revert() -> None:
            unreserve_and_forget(framework, state, assumed, host, self._cache)

        permit = framework.run_permit_plugins(state, assumed, host)
        # Upstream's RunPermitPlugins parks nothing: a member waits at Permit only once it is assumed for real.
        framework.waiting_pods.pop(assumed.uid, None)
        if not permit.is_success and permit.code is not Code.WAIT:
            revert()
            permit_failure: Exception
            if permit.is_rejected:
                permit_failure = FitError.on_one_node(pod, result.slot, permit, result.diagnosis.names)
                permit = permit_failure.status
            else:
                permit_failure = SchedulingError(permit)
            return AlgorithmResult(qpod, state, permit, time.perf_counter() - started, permit_failure), None
        pod_result = AlgorithmResult(
            qpod,
            state,
            status,
            time.perf_counter() - started,
            failure,
            result,
            nominated_node,
            post_filter,
            requires_preemption,
            permit,
            trial=assumed,
        )
        return pod_result, revert

    def _submit(
        self,
        runtime: ProfileRuntime,
        framework: Framework,
        group: QueuedPodGroupInfo,
        group_result: PodGroupAlgorithmResult,
        start: float,
    ) -> None:
        """Upstream ``submitPodGroupAlgorithmResult``: a feasible group's placed members to their binding cycles,
        every other member to the failure handler; then the PodGroup's condition and the group's metrics."""
        scheduled = unschedulable = 0
        group_status = group_result.status
        _undo_trials_not_kept(group_result)
        for i, qpod in enumerate(group.queued_pod_infos):
            if i < len(group_result.pod_results):
                pod_result = group_result.pod_results[i]
            else:  # after a group-wide failure: the member shares the group's status (its nomination left as is)
                pod_result = AlgorithmResult(qpod, new_cycle_state(), group_status, nominated_node=None)
            # As the per-pod cycle: the member's attempt started its algorithm's duration ago.
            started = time.perf_counter() - pod_result.duration
            if group_status.code is Code.ERROR:
                own = pod_result.status.code is Code.ERROR
                self._failure(runtime, qpod, pod_result if own else None, group_status, CLEAR_NOMINATION, started)
                continue
            if pod_result.status.is_success and pod_result.result is not None:
                if group_status.is_success:
                    if self._to_binding_cycle(runtime, framework, qpod, pod_result, started):
                        scheduled += 1
                    else:
                        unschedulable += 1
                    continue
                if group_status.is_rejected:
                    if group_result.waiting_on_preemption:
                        host = pod_result.result.suggested_host
                        self._failure(runtime, qpod, None, group_status, host, started)
                    else:
                        status = pod_group_unschedulable(_message(pod_result.permit_status))
                        self._failure(runtime, qpod, None, status, CLEAR_NOMINATION, started)
                else:
                    code = group_status.code.label
                    text = f"received unexpected pod group scheduling algorithm status code: {code}"
                    self._failure(runtime, qpod, None, Status(Code.ERROR, (text,)), CLEAR_NOMINATION, started)
                unschedulable += 1
                continue
            if pod_result.requires_preemption and not group_result.waiting_on_preemption:
                # Its preemption is no longer relevant: the group does not fit anyway.
                status = pod_group_unschedulable(_message(pod_result.permit_status))
                self._failure(runtime, qpod, None, status, CLEAR_NOMINATION, started)
            else:
                self._failure(runtime, qpod, pod_result, pod_result.status, pod_result.nominated_node, started)
            unschedulable += 1
        self._report_group(runtime, group, group_result, start, scheduled, unschedulable)

    def _to_binding_cycle(
        self,
        runtime: ProfileRuntime,
        framework: Framework,
        qpod: QueuedPodInfo,
        pod_result: AlgorithmResult,
        started: float,
    ) -> bool:
        """A placed member of a feasible group: assumed in the cache, Reserve and Permit (upstream
        ``prepareForBindingCycle`` with the pod-group mark off), then its binding cycle. Whether it got there."""
        state, result = pod_result.state, pod_result.result
        assert result is not None
        state.pod_group_cycle = False
        try:
            if pod_result.trial is not None and pod_result.undo_trial is not None:
                assumed = _keep_trial(self._cache, pod_result.trial)
                assumed = permit_or_undo(framework, state, qpod.pod, assumed, result, self._cache)
            else:
                assumed = assume_and_reserve(framework, state, qpod.pod, result, self._cache)
        except Exception as e:  # unlikely: just this member is rejected
            status = e.status if isinstance(e, FitError) else _error_status(e)
            failed = AlgorithmResult(qpod, state, status, failure=e)
            self._failure(runtime, qpod, failed, status, CLEAR_NOMINATION, started)
            return False
        scores = self._cycles.capture_success_scores(runtime, result)
        found = Found(result, framework)
        self._spawn(self._cycles.binding_cycle(runtime, qpod, found, state, assumed, result, started, scores))
        return True

    def _failure(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        pod_result: AlgorithmResult | None,
        status: Status,
        nominated_node: str | None,
        started: float,
    ) -> None:
        """The failure handler for one member: its own FitError (with its rejecting plugins and node-by-node
        account) or error when ``pod_result`` carries it, otherwise ``status`` (a group-wide verdict)."""
        failure = pod_result.failure if pod_result is not None else None
        if isinstance(failure, FitError):
            post_filter = pod_result.post_filter if pod_result is not None else None
            self._reporter.explain(runtime.name, failure, post_filter)
            self._cycles.fit_failure(runtime, qpod, failure, started, nominated_node)
            return
        if failure is not None and status.code is Code.ERROR:
            self._cycles.error_failure(runtime, qpod, qpod.pod, failure, started)
            return
        rejected = status.is_rejected
        if not rejected:
            logger.error("Error scheduling pod %s of a pod group; retrying: %s", qpod.pod.key, status.message)
        self._cycles.handle_scheduling_failure(
            runtime,
            qpod,
            message=status.message,
            reason="Unschedulable" if rejected else "SchedulerError",
            plugins=set(),
            started=started,
            nominated_node=nominated_node,
        )

    def _report_group(
        self,
        runtime: ProfileRuntime,
        group: QueuedPodGroupInfo,
        group_result: PodGroupAlgorithmResult,
        start: float,
        scheduled: int,
        unschedulable: int,
    ) -> None:
        """The end of ``submitPodGroupAlgorithmResult``: the group's log line, metrics and condition."""
        status = group_result.status
        seconds = time.perf_counter() - start
        if status.is_success:
            condition = _condition("True", REASON_SCHEDULED, status.message)
            logger.info(
                "Successfully scheduled a pod group %s: scheduledPods=%d unschedulablePods=%d",
                group.key,
                scheduled,
                unschedulable,
            )
            self._metrics.observe_pod_group_attempt(result=SCHEDULED, profile=runtime.name, seconds=seconds)
        elif status.is_rejected:
            condition = _condition("False", REASON_UNSCHEDULABLE, status.message)
            if group_result.waiting_on_preemption:
                logger.info("Pod group %s is waiting for preemption: unschedulablePods=%d", group.key, unschedulable)
                result = WAITING_ON_PREEMPTION
            else:
                logger.info("Unable to schedule a pod group %s: unschedulablePods=%d", group.key, unschedulable)
                result = UNSCHEDULABLE
            self._metrics.observe_pod_group_attempt(result=result, profile=runtime.name, seconds=seconds)
        else:
            condition = _condition("False", REASON_SCHEDULER_ERROR, status.message)
            logger.error(
                "Error scheduling pod group %s: errorPods=%d: %s",
                group.key,
                len(group.queued_pod_infos),
                status.message,
            )
            self._metrics.observe_pod_group_attempt(result=ERROR, profile=runtime.name, seconds=seconds)
        self._update_pod_group_condition(group, condition)

    def _update_pod_group_condition(self, group: QueuedPodGroupInfo, condition: dict[str, Any]) -> None:
        """Upstream ``updatePodGroupCondition``: set ``condition`` on the PodGroup as the API server last showed
        it (upstream's lister), never regressing a True PodGroupScheduled, and patch its status if that
        changed anything."""
        pod_group = self._cache.objects.get(POD_GROUP_KIND, group.name, group.namespace)
        if pod_group is None:
            logger.error("Failed to get PodGroup for status update: podGroup=%s", group.key)
            return
        conditions = (pod_group.get("status") or {}).get("conditions") or []
        existing = self._own_write(group, pod_group, conditions, condition["type"])
        if existing is not None and existing.get("status") == "True" and condition["status"] != "True":
            return
        condition["observedGeneration"] = int((pod_group.get("metadata") or {}).get("generation") or 0)
        changed = set_status_condition(existing, condition, now_rfc3339())
        if changed is None:
            return
        uid = str((pod_group.get("metadata") or {}).get("uid") or "")
        self._written[(group.namespace, group.name)] = (uid, changed)
        self._reporter.pod_group_status(group.namespace, group.name, {"status": {"conditions": [changed]}})

    def _own_write(
        self, group: QueuedPodGroupInfo, pod_group: dict[str, Any], conditions: list[dict[str, Any]], kind: str
    ) -> dict[str, Any] | None:
        """The condition as upstream's next cycle would see it: ours as last written, while the cached PodGroup
        (the same object) does not show it yet; otherwise the cached one."""
        cached = next((c for c in conditions if c.get("type") == kind), None)
        key = (group.namespace, group.name)
        written = self._written.get(key)
        if written is None:
            return cached
        uid, condition = written
        same_object = uid == str((pod_group.get("metadata") or {}).get("uid") or "")
        if not same_object or (cached is not None and _same_condition(cached, condition)):
            del self._written[key]
            return cached
        return condition


def _undo_kept_trials(group_result: PodGroupAlgorithmResult) -> None:
    """A placement's kept trial that the placement algorithm passes over: undone, last first."""
    for pod_result in reversed(group_result.pod_results):
        undo = pod_result.undo_trial
        if undo is not None:
            pod_result.undo_trial = pod_result.trial = None
            undo()


def _undo_trials_not_kept(group_result: PodGroupAlgorithmResult) -> None:
    """The kept trials of members that will not go to a binding cycle (a member placed only if PostFilter's
    victims go, after the group's quorum): undone, last first, before the others are submitted (upstream undid
    every trial by then)."""
    going = group_result.status.is_success
    for pod_result in reversed(group_result.pod_results):
        undo = pod_result.undo_trial
        if undo is not None and not (going and pod_result.status.is_success and pod_result.result is not None):
            pod_result.undo_trial = pod_result.trial = None
            undo()


def _keep_trial(cache: ClusterCache, trial: PodInfo) -> PodInfo:
    """A kept trial's assumption becomes the cache's own, as :meth:`ClusterCache.assume` would have made it: the
    pod is on its node already (assumed in the snapshot, Reserved); its pod group counts it as assumed now."""
    if not cache.is_assumed(trial.uid):
        raise LookupError(f"assumed pod {go_quote(trial.key)} not found in the snapshot")
    if trial.scheduling_group is not None:
        cache.pod_groups.assume_member(trial)
    if trial.coscheduling_group is not None:
        cache.coscheduling_groups.assume_member(trial)
    return trial


def set_status_condition(existing: dict[str, Any] | None, new: dict[str, Any], now: str) -> dict[str, Any] | None:
    """Upstream ``apimeta.SetStatusCondition`` for one condition: the condition as it becomes (a new one, or
    ``existing`` with ``new``'s status, reason, message and observed generation; ``lastTransitionTime`` moves
    only with the status), or None when nothing changes."""
    if existing is None:
        return {**new, "lastTransitionTime": new.get("lastTransitionTime") or now}
    merged = dict(existing)
    changed = False
    if existing.get("status") != new["status"]:
        merged["status"] = new["status"]
        merged["lastTransitionTime"] = new.get("lastTransitionTime") or now
        changed = True
    for name in ("reason", "message", "observedGeneration"):
        if existing.get(name, 0 if name == "observedGeneration" else "") != new[name]:
            merged[name] = new[name]
            changed = True
    return merged if changed else None


def _same_condition(one: dict[str, Any], other: dict[str, Any]) -> bool:
    fields = ("type", "status", "reason", "message", "observedGeneration")
    return all(one.get(name) == other.get(name) for name in fields)


def _condition(status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": POD_GROUP_SCHEDULED, "status": status, "reason": reason, "message": message}


def _message(status: Status | None) -> str:
    """Upstream ``status.Message()``: "" for a nil (Success) status."""
    return "" if status is None else status.message


def _error_status(e: Exception) -> Status:
    """An exception as upstream's ``fwk.AsStatus(err)`` (a SchedulingError carries its status)."""
    return e.status if isinstance(e, SchedulingError) else Status.as_error(e)


def _priority_then_initial_attempt(qpod: QueuedPodInfo) -> tuple[int, float]:
    """Upstream's order of a group's members: higher priority first, then the earlier first attempt (none:
    earliest)."""
    initial = qpod.initial_attempt_timestamp
    return -qpod.pod.priority, float("-inf") if initial is None else initial
