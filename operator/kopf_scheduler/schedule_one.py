"""One pod through the scheduling cycle and the binding cycle (upstream ``schedule_one.go``).

The shape is upstream's ``scheduleOne``:

- :meth:`ScheduleOne.schedule_one` takes a popped pod, skips it if it was deleted, bound or assumed meanwhile,
  and runs the *scheduling cycle* synchronously (no await: the cache cannot change under it): the algorithm
  (``scheduler.schedule_pod``), then assume, Reserve and Permit (``Scheduler.assume_and_reserve``). It ends on
  an assumed pod, and the binding cycle goes on as an asyncio task per pod, so the loop pops the next pod
  while Bindings are in flight.
- A profile with HTTP extenders (``framework/extender.py``) awaits them in the middle of its algorithm
  (``scheduler.schedule_pod_with_extenders``): its :meth:`ScheduleOne.schedule_one` returns that cycle as a
  coroutine the profile's loop awaits; meanwhile the cache may change, so the pod is looked up again and the
  chosen node re-judged before it is assumed. Profiles without extenders never await here.
- A FitError of the algorithm runs PostFilter (:meth:`ScheduleOne._post_filter`: preemption, DRA
  deallocation) before the failure is explained and handled. What PostFilter proposes is upstream's
  NominatingInfo: a node (the pod is added to the shared nominator and the failure's status patch sets
  ``status.nominatedNodeName``), "clear" (both go), or nothing (the status stands). Every other
  failure of the scheduling cycle clears the nomination, as upstream's ``clearNominatedNode``: no node at
  all, no PostFilter plugin, an error, and a Reserve or Permit rejection (which runs no PostFilter).
  In the extender cycle PostFilter is awaited (:meth:`ScheduleOne._post_filter_with_extenders`):
  DefaultPreemption may call the extenders' preempt verb.
- A profile with ``spec.explain.successes`` has the winner's and runners-up's scores captured right after
  Permit (:meth:`ScheduleOne._capture_scores`, ``explain.capture_scores``); they are kept once the pod is bound.
- :meth:`ScheduleOne._binding_cycle` runs PreBindPreFlight, WaitOnPermit, PreBind, Bind and PostBind
  (``Scheduler.bind_pod``, which on failure runs Unreserve in reverse order and forgets the pod in the cache),
  then settles the pod: success is reported as Scheduled; failures go to :meth:`_handle_binding_cycle_error`.
  When PreBind has work (or Permit makes the pod wait), the pod's ``status.nominatedNodeName`` is set to the
  chosen node first (upstream's NominatedNodeNameForExpectation), through :meth:`Reporter.nominate`.
- A failed binding cycle freed what the assumed pod held, so, as upstream's ``handleBindingCycleError``, it
  moves parked pods with an AssignedPodDelete event (``move_all``, the event handlers' broadcast), and clears
  the nomination with the failure's status patch.
- :meth:`handle_scheduling_failure` requeues the pod (unschedulable pool or backoff), records its nomination
  in the nominator (upstream's ``AddNominatedPod`` there) and reports it.

I/O is two collaborators away: the API calls are the framework's (Bind through the DefaultBinder plugin) and
the :class:`Reporter`'s; this module only decides what happens to the pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.explain import ScoreCapture, capture_scores
from kopf_scheduler.framework import ClusterEvent, CycleState, PostFilterResult, Status, nominated_node_name
from kopf_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from kopf_scheduler.framework.interface import Nominator, NoNominator
from kopf_scheduler.metrics import ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics, sample_plugin_metrics
from kopf_scheduler.profiles import ProfileRuntime
from kopf_scheduler.queue import QueuedPodInfo
from kopf_scheduler.reporting import Reporter, Spawn
from kopf_scheduler.scheduler import (
    FitError,
    NoNodesAvailableError,
    Scheduler,
    ScheduleResult,
    SchedulingError,
    recheck_after_extenders,
)
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler")


@dataclass(frozen=True, slots=True)
class Found:
    """What the algorithm came to: a result, or the FitError or other exception it raised."""

    outcome: ScheduleResult | Exception
    #: The pipeline the cycle ran with (a profile with extenders may have been swapped during the awaits).
    scheduler: Scheduler
    #: With extenders, ``ClusterCache.generation`` when the cycle began: a change since means the chosen node
    #: is re-judged before it is assumed. None for a cycle that never awaited.
    generation: int | None = None
    #: With extenders, PostFilter's outcome after a FitError, awaited already (:meth:`ScheduleOne._post_filter`'s
    #: pair); None: PostFilter runs in :meth:`ScheduleOne._cycle`.
    post_filter: tuple[PostFilterResult | None, str | None] | None = None


#: Moves the parked pods of every profile that ``event`` may help (``EventHandlers.move_all_to_active_or_backoff``):
#: ``(event, old, new, pre_check)``, where ``pre_check`` (if not None) limits the candidates.
MoveAll = Callable[[ClusterEvent, Any, Any, Callable[[PodInfo], bool] | None], None]

#: Upstream's ``clearNominatedNode`` (a NominatingInfo of mode Override to ""), as ``nominated_node``.
CLEAR_NOMINATION = ""


class ScheduleOne:
    """Schedules popped pods one at a time: the synchronous scheduling cycle, then an async binding cycle."""

    def __init__(
        self,
        *,
        cache: ClusterCache,
        unassigned: dict[str, PodInfo],
        reporter: Reporter,
        metrics: SchedulerMetrics,
        clock: Callable[[], float],
        spawn: Spawn,
        move_all: MoveAll,
        nominator: Nominator | None = None,
    ) -> None:
        self._cache = cache
        #: Every pending pod by uid, as the event handlers keep it (its latest version is what is scheduled).
        self._unassigned = unassigned
        self._reporter = reporter
        self._metrics = metrics
        self._clock = clock
        self._spawn = spawn
        self._move_all = move_all
        #: Every profile's nominated pods (the app's one PodNominator).
        self._nominator: Nominator = NoNominator() if nominator is None else nominator

    def schedule_one(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> Awaitable[None] | None:
        """One scheduling cycle (synchronous): filter, score, assume, reserve, permit; binding goes async.

        A profile with HTTP extenders cannot decide without awaiting them: its cycle comes back as a coroutine
        the caller awaits before it pops the next pod. Every other profile's cycle runs here and returns None.
        """
        pod = self._latest(runtime, qpod)
        if pod is None:
            return None
        if runtime.scheduler.extenders:
            return self._schedule_one_with_extenders(runtime, qpod, pod)
        started = time.perf_counter()
        state = _new_cycle_state()
        scheduler = runtime.scheduler
        outcome: ScheduleResult | Exception
        try:
            outcome = scheduler.schedule_pod(state, pod, self._cache.snapshot())
        except Exception as e:  # handled in _cycle
            outcome = e
        self._cycle(runtime, qpod, pod, started, state, Found(outcome, scheduler))
        return None

    async def _schedule_one_with_extenders(self, runtime: ProfileRuntime, qpod: QueuedPodInfo, pod: PodInfo) -> None:
        """The algorithm with the extender calls awaited; then the same synchronous rest as any cycle."""
        started = time.perf_counter()
        state = _new_cycle_state()
        generation = self._cache.generation
        # The pipeline may be swapped while we await (a profile edit): the rest of the cycle uses this one.
        scheduler = runtime.scheduler
        outcome: ScheduleResult | Exception
        try:
            outcome = await scheduler.schedule_pod_with_extenders(state, pod, self._cache)
        except Exception as e:  # handled in _cycle
            outcome = e
        if self._latest(runtime, qpod) is None:
            return  # deleted, bound or assumed elsewhere while the extenders were called
        post_filter = None
        if isinstance(outcome, FitError):  # PostFilter may await extenders too (their preempt verb)
            post_filter = await self._post_filter_with_extenders(scheduler, state, pod, outcome)
            if self._latest(runtime, qpod) is None:
                return
        self._cycle(runtime, qpod, pod, started, state, Found(outcome, scheduler, generation, post_filter))

    def _cycle(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        pod: PodInfo,
        started: float,
        state: CycleState,
        found: Found,
    ) -> None:
        """The rest of the scheduling cycle once the algorithm came to ``found``: PostFilter and failure handling,
        or assume, Reserve and Permit and the binding cycle's task."""
        scheduler = found.scheduler
        outcome = found.outcome
        if isinstance(outcome, FitError):
            post_filter, nominated_node = found.post_filter or self._post_filter(scheduler, state, pod, outcome)
            self._algorithm_done(started)
            self._reporter.explain(runtime.name, outcome, post_filter)
            self._fit_failure(runtime, qpod, outcome, started, nominated_node)
            return
        self._algorithm_done(started)
        if isinstance(outcome, Exception):
            self._error_failure(runtime, qpod, pod, outcome, started)
            return
        try:
            if found.generation is not None:
                recheck_after_extenders(scheduler.framework, state, pod, outcome, self._cache, found.generation)
            assumed = scheduler.assume_and_reserve(state, pod, outcome, self._cache)
        except FitError as fit:  # Reserve or Permit (or the re-check) rejected the chosen node: no PostFilter
            self._reporter.explain(runtime.name, fit)
            self._fit_failure(runtime, qpod, fit, started, CLEAR_NOMINATION)
            return
        except Exception as e:
            self._error_failure(runtime, qpod, pod, e, started)
            return
        scores = self._capture_scores(runtime, outcome)
        self._spawn(self._binding_cycle(runtime, qpod, state, assumed, outcome, started, scores))

    def _capture_scores(self, runtime: ProfileRuntime, result: ScheduleResult) -> ScoreCapture | None:
        """The winner's and runners-up's scores, if the profile keeps success accounts (``spec.explain``); taken
        now, while the node table's slots still name the nodes that were scored."""
        if not runtime.explain_successes:
            return None
        try:
            scores = capture_scores(result, self._cache.table.names, at=time.time())
        except Exception:  # an explanation must never cost a scheduling decision
            logger.exception("could not capture the scores of %s", result.suggested_host)
            return None
        # With extenders the slots were read before the awaits: a node table that changed meanwhile is not trusted.
        return scores if not scores.nodes or scores.nodes[0] == result.suggested_host else None

    def _fit_failure(
        self, runtime: ProfileRuntime, qpod: QueuedPodInfo, fit: FitError, started: float, nominated_node: str | None
    ) -> None:
        plugins = fit.diagnosis.all_unschedulable_plugins()
        self.handle_scheduling_failure(
            runtime,
            qpod,
            message=fit.message,
            reason="Unschedulable",
            plugins=plugins,
            started=started,
            nominated_node=nominated_node,
        )

    def _error_failure(
        self, runtime: ProfileRuntime, qpod: QueuedPodInfo, pod: PodInfo, e: Exception, started: float
    ) -> None:
        """A SchedulingError, or a plugin bug (which must not stop the loop): SchedulerError, nomination cleared."""
        if isinstance(e, SchedulingError):
            message = e.status.message
        else:
            logger.exception("scheduling %s failed", pod.key)
            message = str(e)
        self.handle_scheduling_failure(
            runtime,
            qpod,
            message=message,
            reason="SchedulerError",
            plugins=set(),
            started=started,
            nominated_node=CLEAR_NOMINATION,
        )

    def _latest(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> PodInfo | None:
        """The pod's latest version, or None (and done with it) if it was deleted, bound or is being bound."""
        uid = qpod.pod.uid
        latest = self._unassigned.get(uid)
        if latest is None or latest.terminating or self._cache.is_assumed(uid) or self._cache.pod(uid) is not None:
            runtime.queue.done(uid)  # deleted, bound or being bound meanwhile
            return None
        qpod.pod = latest
        return latest

    def _algorithm_done(self, started: float) -> None:
        """``scheduler_scheduling_algorithm_duration_seconds``: Filter, Score and PostFilter, as upstream's
        ``schedulingAlgorithm`` observes it whatever the outcome."""
        self._metrics.scheduling_algorithm_duration.observe(time.perf_counter() - started)

    def _post_filter(
        self, scheduler: Scheduler, state: CycleState, pod: PodInfo, fit: FitError
    ) -> tuple[PostFilterResult | None, str | None]:
        """PostFilter after the algorithm's FitError (its message joins the FitError's); returns its result
        and the nomination the failure applies (``nominated_node`` of :meth:`handle_scheduling_failure`).

        As upstream's ``schedulingAlgorithm``: no node at all, or no PostFilter plugin, clears the nomination;
        otherwise the result decides (a node, clear, or no result: leave it).
        """
        if isinstance(fit, NoNodesAvailableError) or not scheduler.framework.has_post_filter_plugins:
            return None, CLEAR_NOMINATION
        return _nomination(scheduler.run_post_filter(state, pod, fit))

    async def _post_filter_with_extenders(
        self, scheduler: Scheduler, state: CycleState, pod: PodInfo, fit: FitError
    ) -> tuple[PostFilterResult | None, str | None]:
        """:meth:`_post_filter` in the extender cycle, awaiting what PostFilter left pending (preempt verbs)."""
        if isinstance(fit, NoNodesAvailableError) or not scheduler.framework.has_post_filter_plugins:
            return None, CLEAR_NOMINATION
        return _nomination(await scheduler.run_post_filter_with_extenders(state, pod, fit))

    async def _binding_cycle(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        state: CycleState,
        pod: PodInfo,
        result: ScheduleResult,
        started: float,
        scores: ScoreCapture | None = None,
    ) -> None:
        """WaitOnPermit, PreBind, Bind, PostBind for the assumed ``pod``; then settle it either way."""
        try:
            await self._reporter.status_settled(pod.uid)  # an earlier failure's patch must not land after the bind
            status = await runtime.scheduler.bind_pod(state, pod, result, self._cache, nominate=self._reporter.nominate)
        except Exception as e:  # the bind task must always settle the pod (bind_pod itself does not raise)
            runtime.scheduler.framework.run_reserve_plugins_unreserve(state, pod, result.suggested_host)
            self._cache.forget(pod.uid)
            status = Status.as_error(e)
        if status.is_success:
            await self._bound(runtime, qpod, pod, result.suggested_host, started, scores)
        else:
            self._handle_binding_cycle_error(runtime, qpod, pod, status, started)

    async def _bound(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        pod: PodInfo,
        node: str,
        started: float,
        scores: ScoreCapture | None = None,
    ) -> None:
        runtime.queue.done(pod.uid)
        self._metrics.observe_attempt(result=SCHEDULED, profile=runtime.name, seconds=time.perf_counter() - started)
        first = qpod.initial_attempt_timestamp or qpod.timestamp
        self._metrics.observe_scheduled(attempts=qpod.attempts, seconds_since_first_enqueue=self._clock() - first)
        await self._reporter.scheduled(pod, runtime.name, node, scores)

    def _handle_binding_cycle_error(
        self, runtime: ProfileRuntime, qpod: QueuedPodInfo, pod: PodInfo, status: Status, started: float
    ) -> None:
        """The assumption is already undone (Unreserve, forget): what the pod held is free, so parked pods hear
        an AssignedPodDelete; then the pod is settled.

        As upstream, a rejected pod is settled first and left out of the move (it is Unschedulable, and the event
        must not count as in flight for it); otherwise the move comes first.
        """
        if status.is_rejected:
            self._settle_binding_failure(runtime, qpod, pod, status, started)
            self._move_all(EVENT_ASSIGNED_POD_DELETE, pod.obj, None, lambda other: other.uid != pod.uid)
            return
        self._move_all(EVENT_ASSIGNED_POD_DELETE, pod.obj, None, None)
        self._settle_binding_failure(runtime, qpod, pod, status, started)

    def _settle_binding_failure(
        self, runtime: ProfileRuntime, qpod: QueuedPodInfo, pod: PodInfo, status: Status, started: float
    ) -> None:
        """Decide whether the pod goes back to a queue, and report it (clearing its nomination)."""
        http_status = getattr(status.error, "status", None)
        if http_status == 409:
            # Already bound (another replica during a peering overlap): its watch event brings the truth.
            logger.info("pod %s was already bound elsewhere (409); dropping our assumption", pod.key)
            runtime.queue.done(pod.uid)
            return
        if http_status == 404:
            logger.info("pod %s disappeared before binding (404)", pod.key)
            self._unassigned.pop(pod.uid, None)
            runtime.queue.done(pod.uid)
            return
        if status.is_rejected:  # Permit rejected while waiting: the message is already the FitError text
            self.handle_scheduling_failure(
                runtime,
                qpod,
                message=status.message,
                reason="Unschedulable",
                plugins={status.plugin},
                started=started,
                nominated_node=CLEAR_NOMINATION,
            )
            return
        self.handle_scheduling_failure(
            runtime,
            qpod,
            message=status.message,  # "running Bind plugin ...: ..." as upstream's, unprefixed
            reason="SchedulerError",
            plugins=set(),
            started=started,
            nominated_node=CLEAR_NOMINATION,
        )

    def handle_scheduling_failure(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        *,
        message: str,
        reason: str,
        plugins: set[str],
        started: float,
        nominated_node: str | None = None,
    ) -> None:
        """Upstream's handleSchedulingFailure: requeue, record the nomination, then report (event deduplicated,
        condition patched).

        ``nominated_node`` is upstream's NominatingInfo: None (Noop) leaves the pod's ``status.nominatedNodeName``
        alone and the nominator follows it (a nomination the status does not carry yet is dropped, as
        upstream's); a node name nominates the pod there (a preemption made room); "" (:data:`CLEAR_NOMINATION`)
        removes it. The
        nominator hears it at once, so the next cycles already count the pod on that node; the pod's
        ``status.nominatedNodeName`` follows in the same patch as the PodScheduled condition.
        """
        uid = qpod.pod.uid
        qpod.clear_rejector_plugins()
        if reason == "Unschedulable":
            qpod.unschedulable_plugins.update(plugins)
        qpod.last_failure_message = message
        if uid in self._unassigned:
            runtime.queue.add_unschedulable_if_not_present(qpod)
        runtime.queue.done(uid)
        result = UNSCHEDULABLE if reason == "Unschedulable" else ERROR
        self._metrics.observe_attempt(result=result, profile=runtime.name, seconds=time.perf_counter() - started)
        pod = self._unassigned.get(uid, qpod.pod)
        self._nominate(pod, nominated_node)
        self._reporter.failed(pod, runtime.name, reason=reason, message=message, nominated_node=nominated_node)

    def _nominate(self, pod: PodInfo, nominated_node: str | None) -> None:
        """Upstream's ``AddNominatedPod`` in handleSchedulingFailure: Override to a node or to nothing, or
        Noop (the pod's own ``status.nominatedNodeName`` stands)."""
        if nominated_node is None:
            self._nominator.add_nominated_pod(pod, nominated_node_name(pod))
        elif nominated_node:
            self._nominator.add_nominated_pod(pod, nominated_node)
        else:
            self._nominator.delete_nominated_pod_if_exists(pod)


def _nomination(result: PostFilterResult | None) -> tuple[PostFilterResult | None, str | None]:
    """PostFilter's result and the nomination it means: a node, clear (""), or None (leave it)."""
    if result is None:
        return None, None
    if result.nominated_node_name:
        return result, result.nominated_node_name
    return result, CLEAR_NOMINATION if result.clear_nomination else None


def _new_cycle_state() -> CycleState:
    """A fresh cycle state; one cycle in ten records per-plugin durations (upstream's sampling)."""
    state = CycleState()
    state.record_plugin_metrics = sample_plugin_metrics()
    return state
