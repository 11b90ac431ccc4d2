"""One pod through the scheduling cycle and the binding cycle: upstream's ``scheduleOne``, ``schedulingCycle``,
``bindingCycle`` and their failure handling (``pkg/scheduler/schedule_one.go``); the algorithm they call,
``schedulePod`` and the functions under it, is ``algorithm.py``.

- :meth:`ScheduleOne.schedule_one` takes a popped pod, skips it if it was deleted, bound or assumed meanwhile,
  and runs the *scheduling cycle* synchronously (no await: the cache cannot change under it): the algorithm
  (``algorithm.schedule_pod``), then assume, Reserve and Permit (:func:`assume_and_reserve`). It ends on an
  assumed pod, and the binding cycle goes on as an asyncio task per pod, so the loop pops the next pod while
  Bindings are in flight.
- A profile with HTTP extenders (``framework/extender.py``) awaits them in the middle of its algorithm
  (``algorithm.schedule_pod_with_extenders``): its :meth:`ScheduleOne.schedule_one` returns that cycle as a
  coroutine the profile's loop awaits; meanwhile the cache may change, so the pod is looked up again and the
  chosen node re-judged before it is assumed. Profiles without extenders never await here.
- A FitError of the algorithm runs PostFilter (:meth:`ScheduleOne.post_filter`: preemption, DRA
  deallocation) before the failure is explained and handled. What PostFilter proposes is upstream's
  NominatingInfo: a node (the pod is added to the shared nominator and the failure's status patch sets
  ``status.nominatedNodeName``), "clear" (both go), or nothing (the status stands). Every other
  failure of the scheduling cycle clears the nomination, as upstream's ``clearNominatedNode``: no node at
  all, no PostFilter plugin, an error, and a Reserve or Permit rejection (which runs no PostFilter).
  In the extender cycle PostFilter is awaited (:meth:`ScheduleOne._post_filter_with_extenders`):
  DefaultPreemption may call the extenders' preempt verb.
- A profile with ``spec.explain.successes`` has the winner's and runners-up's scores captured right after
  Permit (:meth:`ScheduleOne.capture_success_scores`, ``explain.capture_scores``); they are kept once the pod is bound.
- :meth:`ScheduleOne.binding_cycle` runs :func:`bind_pod` (PreBindPreFlight, WaitOnPermit, PreBind, Bind,
  PostBind; on failure Unreserve in reverse order and the pod forgotten in the cache), then settles the pod:
  success is reported as Scheduled; failures go to :meth:`ScheduleOne._handle_binding_cycle_error`. When
  PreBind has work (or Permit makes the pod wait), the pod's ``status.nominatedNodeName`` is set to the chosen
  node first (upstream's NominatedNodeNameForExpectation), through :meth:`Reporter.nominate`.
- Binds pass the renew-deadline gate (``standing.py``): the binding cycle carries the standing's epoch of its
  scheduling cycle, and PreBind and Bind go on only while the replica's standing in the peering is confirmed and
  that epoch is current; a refusal undoes the assumption like any failure and requeues the pod with no event
  (nothing was decided about the pod; the replica that holds the standing schedules it).
- A failed binding cycle freed what the assumed pod held, so, as upstream's ``handleBindingCycleError``, it
  moves parked pods with an AssignedPodDelete event (``move_all``, the event handlers' broadcast), and clears
  the nomination with the failure's status patch.
- :meth:`ScheduleOne.handle_scheduling_failure` requeues the pod (unschedulable pool or backoff), records its
  nomination in the nominator (upstream's ``AddNominatedPod`` there) and reports it.

I/O is two collaborators away: the API calls are the framework's (Bind through the DefaultBinder plugin) and
the :class:`Reporter`'s; this module only decides what happens to the pod.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.algorithm import (
    FitError,
    NoNodesAvailableError,
    ScheduleResult,
    SchedulingError,
    recheck_after_extenders,
    run_post_filter,
    run_post_filter_with_extenders,
    schedule_pod,
    schedule_pod_with_extenders,
)
from kopf_scheduler.explain import ScoreCapture, capture_scores
from kopf_scheduler.framework import ClusterEvent, CycleState, PostFilterResult, Status, nominated_node_name
from kopf_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from kopf_scheduler.framework.extender import Extender, extenders_binding
from kopf_scheduler.framework.interface import Nominator, NoNominator
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.status import SUCCESS, Code
from kopf_scheduler.live_profiles import ProfileRuntime
from kopf_scheduler.metrics import ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics, sample_plugin_metrics
from kopf_scheduler.queue import QueuedPodInfo
from kopf_scheduler.reporting import Reporter, Spawn
from kopf_scheduler.standing import Standing, StandingLostError, Timings
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.unassigned_pods import UnassignedPods

logger = logging.getLogger("kopf_scheduler")


@dataclass(frozen=True, slots=True)
class Found:
    """What the algorithm came to: a result, or the FitError or other exception it raised."""

    outcome: ScheduleResult | Exception
    #: The pipeline the cycle ran with: its binding cycle runs with it too, as upstream's ``bindingCycle`` gets
    #: the cycle's framework, whatever the profile became meanwhile (a pod waiting at this framework's Permit
    #: is waited for here, and this framework's Reserve plugins are the ones that unreserve).
    framework: Framework
    #: The HTTP extenders of that pipeline (a binder extender binds instead of the Bind plugins).
    extenders: tuple[Extender, ...] = ()
    #: With extenders, ``ClusterCache.generation`` when the cycle began: a change since means the chosen node
    #: is re-judged before it is assumed. None for a cycle that never awaited.
    generation: int | None = None
    #: With extenders, PostFilter's outcome after a FitError, awaited already (:meth:`ScheduleOne.post_filter`'s
    #: pair); None: PostFilter runs in :meth:`ScheduleOne._cycle`.
    post_filter: tuple[PostFilterResult | None, str | None] | None = None


#: Moves the parked pods of every profile that ``event`` may help (``EventHandlers.move_all_to_active_or_backoff``):
#: ``(event, old, new, pre_check)``, where ``pre_check`` (if not None) limits the candidates.
MoveAll = Callable[[ClusterEvent, Any, Any, Callable[[PodInfo], bool] | None], None]

#: Publishes that ``pod`` is about to be bound to ``node`` (its ``status.nominatedNodeName``); best effort.
Nominate = Callable[[PodInfo, str], Awaitable[None]]

#: The renew-deadline gate's question (``Standing.may_bind`` for the pod's ticket).
MayBind = Callable[[], bool]

#: Upstream's ``clearNominatedNode`` (a NominatingInfo of mode Override to ""), as ``nominated_node``.
CLEAR_NOMINATION = ""


class ScheduleOne:
    """Schedules popped pods one at a time: the synchronous scheduling cycle, then an async binding cycle."""

    def __init__(
        self,
        *,
        cache: ClusterCache,
        unassigned: UnassignedPods,
        reporter: Reporter,
        metrics: SchedulerMetrics,
        clock: Callable[[], float],
        spawn: Spawn,
        move_all: MoveAll,
        nominator: Nominator | None = None,
        rng: random.Random | None = None,
        standing: Standing | None = None,
    ) -> None:
        self._cache = cache
        #: The renew-deadline gate every Bind asks (``standing.py``); a disabled one without peering.
        self._standing = standing if standing is not None else Standing(Timings(), enabled=False)
        #: Every pending pod by uid, as the event handlers keep it (its latest version is what is scheduled).
        self._unassigned = unassigned
        self._reporter = reporter
        self._metrics = metrics
        self._clock = clock
        self._spawn = spawn
        self._move_all = move_all
        #: Every profile's nominated pods (the app's one PodNominator).
        self._nominator: Nominator = NoNominator() if nominator is None else nominator
        #: Breaks score ties uniformly at random (seedable), for every profile.
        self._rng = rng or random.Random()
        #: Upstream's pod-group cycle (``schedule_one_pod_group.PodGroupCycle.schedule``, set by the app): where a
        #: popped pod with a scheduling group goes when its profile is workload-aware.
        self.pod_group_cycle: Callable[[ProfileRuntime, QueuedPodInfo], None] | None = None

    def schedule_one(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> Awaitable[None] | None:
        """One scheduling cycle (synchronous): filter, score, assume, reserve, permit; binding goes async.

        A profile with HTTP extenders cannot decide without awaiting them: its cycle comes back as a coroutine
        the caller awaits before it pops the next pod. Every other profile's cycle runs here and returns None.

        As upstream's ``ScheduleOne``, a pod with a scheduling group goes to the pod-group cycle instead, where
        its profile is workload-aware (``Framework.workload_aware``: upstream's GenericWorkload gate, per
        profile) and has no extenders (their awaited calls are the per-pod cycle's alone).
        """
        if runtime.framework.workload_aware and self._to_pod_group_cycle(runtime, qpod):
            return None
        pod = self.latest(runtime, qpod)
        if pod is None:
            return None
        if runtime.extenders:
            return self._schedule_one_with_extenders(runtime, qpod, pod)
        started = time.perf_counter()
        state = new_cycle_state()
        framework = runtime.framework
        outcome: ScheduleResult | Exception
        try:
            outcome = schedule_pod(framework, state, pod, self._cache.snapshot(), rng=self._rng)
        except Exception as e:  # handled in _cycle
            outcome = e
        self._cycle(runtime, qpod, pod, started, state, Found(outcome, framework))
        return None

    def _to_pod_group_cycle(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> bool:
        """Hand ``qpod`` to the pod-group cycle if it belongs there; whether it did."""
        if qpod.pod.scheduling_group is None or runtime.extenders or self.pod_group_cycle is None:
            return False
        self.pod_group_cycle(runtime, qpod)
        return True

    async def _schedule_one_with_extenders(self, runtime: ProfileRuntime, qpod: QueuedPodInfo, pod: PodInfo) -> None:
        """The algorithm with the extender calls awaited; then the same synchronous rest as any cycle."""
        started = time.perf_counter()
        state = new_cycle_state()
        generation = self._cache.generation
        # The pipeline may be swapped while we await (a profile edit): the rest of the cycle uses this one.
        framework, extenders = runtime.framework, runtime.extenders
        outcome: ScheduleResult | Exception
        try:
            outcome = await schedule_pod_with_extenders(framework, state, pod, self._cache, extenders, rng=self._rng)
        except Exception as e:  # handled in _cycle
            outcome = e
        if self.latest(runtime, qpod) is None:
            return  # deleted, bound or assumed elsewhere while the extenders were called
        post_filter = None
        if isinstance(outcome, FitError):  # PostFilter may await extenders too (their preempt verb)
            post_filter = await self._post_filter_with_extenders(framework, state, pod, outcome)
            if self.latest(runtime, qpod) is None:
                return
        self._cycle(runtime, qpod, pod, started, state, Found(outcome, framework, extenders, generation, post_filter))

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
        framework = found.framework
        outcome = found.outcome
        if isinstance(outcome, FitError):
            post_filter, nominated_node = found.post_filter or self.post_filter(framework, state, pod, outcome)
            self.algorithm_done(started)
            self._reporter.explain(runtime.name, outcome, post_filter)
            self.fit_failure(runtime, qpod, outcome, started, nominated_node)
            return
        self.algorithm_done(started)
        if isinstance(outcome, Exception):
            self.error_failure(runtime, qpod, pod, outcome, started)
            return
        try:
            if found.generation is not None:
                recheck_after_extenders(framework, state, pod, outcome, self._cache, found.generation)
            assumed = assume_and_reserve(framework, state, pod, outcome, self._cache)
        except FitError as fit:  # Reserve or Permit (or the re-check) rejected the chosen node: no PostFilter
            self._reporter.explain(runtime.name, fit)
            self.fit_failure(runtime, qpod, fit, started, CLEAR_NOMINATION)
            return
        except Exception as e:
            self.error_failure(runtime, qpod, pod, e, started)
            return
        scores = self.capture_success_scores(runtime, outcome)
        self._spawn(self.binding_cycle(runtime, qpod, found, state, assumed, outcome, started, scores))

    def capture_success_scores(self, runtime: ProfileRuntime, result: ScheduleResult) -> ScoreCapture | None:
        """The winner's and runners-up's scores, if the profile keeps success accounts (``spec.explain``); taken
        now, while the node table's slots still name the nodes that were scored."""
        if not (runtime.explain_successes or runtime.explain_annotations):
            return None
        try:
            scores = capture_scores(result, self._cache.table.names, at=time.time())
        except Exception:  # an explanation must never cost a scheduling decision
            logger.exception("could not capture the scores of %s", result.suggested_host)
            return None
        # With extenders the slots were read before the awaits: a node table that changed meanwhile is not trusted.
        return scores if not scores.nodes or scores.nodes[0] == result.suggested_host else None

    def fit_failure(
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

    def error_failure(
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

    def latest(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> PodInfo | None:
        """The pod's latest version, or None (and done with it) if it was deleted, bound or is being bound."""
        uid = qpod.pod.uid
        latest = self._unassigned.get(uid)
        if latest is None or latest.terminating or self._cache.is_assumed(uid) or self._cache.pod(uid) is not None:
            runtime.queue.done(uid)  # deleted, bound or being bound meanwhile
            return None
        qpod.pod = latest
        return latest

    def algorithm_done(self, started: float) -> None:
        """``scheduler_scheduling_algorithm_duration_seconds``: Filter, Score and PostFilter, as upstream's
        ``schedulingAlgorithm`` observes it whatever the outcome."""
        self._metrics.scheduling_algorithm_duration.observe(time.perf_counter() - started)

    def post_filter(
        self, framework: Framework, state: CycleState, pod: PodInfo, fit: FitError
    ) -> tuple[PostFilterResult | None, str | None]:
        """PostFilter after the algorithm's FitError (its message joins the FitError's); returns its result
        and the nomination the failure applies (``nominated_node`` of :meth:`handle_scheduling_failure`).

        As upstream's ``schedulingAlgorithm``: no node at all, or no PostFilter plugin, clears the nomination;
        otherwise the result decides (a node, clear, or no result: leave it).
        """
        if isinstance(fit, NoNodesAvailableError) or not framework.has_post_filter_plugins:
            return None, CLEAR_NOMINATION
        return _nomination(run_post_filter(framework, state, pod, fit))

    async def _post_filter_with_extenders(
        self, framework: Framework, state: CycleState, pod: PodInfo, fit: FitError
    ) -> tuple[PostFilterResult | None, str | None]:
        """:meth:`post_filter` in the extender cycle, awaiting what PostFilter left pending (preempt verbs)."""
        if isinstance(fit, NoNodesAvailableError) or not framework.has_post_filter_plugins:
            return None, CLEAR_NOMINATION
        return _nomination(await run_post_filter_with_extenders(framework, state, pod, fit))

    def binding_cycle(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        found: Found,
        state: CycleState,
        pod: PodInfo,
        result: ScheduleResult,
        started: float,
        scores: ScoreCapture | None = None,
    ) -> Coroutine[Any, Any, None]:
        """The binding cycle of the pod the scheduling cycle just assumed, to spawn: it binds only under the standing
        it was assumed under (``standing.py``: a lapse since refuses its Bind)."""
        ticket = self._standing.ticket()
        return self._binding_cycle(runtime, qpod, found, state, pod, result, started, scores, ticket)

    async def _binding_cycle(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        found: Found,
        state: CycleState,
        pod: PodInfo,
        result: ScheduleResult,
        started: float,
        scores: ScoreCapture | None,
        ticket: int,
    ) -> None:
        """WaitOnPermit, PreBind, Bind, PostBind for the assumed ``pod`` (:func:`bind_pod`, which never raises and
        undoes the assumption on failure); then settle it either way."""
        await self._reporter.status_settled(pod.uid)  # an earlier failure's patch must not land after the bind
        if scores is not None and runtime.explain_annotations:
            self._reporter.annotate_binding(state, pod, runtime.name, scores)
        status = await bind_pod(
            found.framework,
            state,
            pod,
            result,
            self._cache,
            nominate=self._reporter.nominate,
            extenders=found.extenders,
            may_bind=lambda: self._standing.may_bind(ticket),
        )
        if status.is_success and state.found_bound:
            # Bound where we placed it, by our lost Binding or another replica's: the assumption stays (no other pod
            # gets its room) until the watch confirms it; no Scheduled event or bind of ours is claimed.
            logger.info("pod %s found bound to %s after its Binding's answer was lost", pod.key, result.suggested_host)
            runtime.queue.done(pod.uid)
        elif status.is_success:
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
        if isinstance(status.error, StandingLostError):
            # Refused by the renew-deadline gate before any write: back to the queue (backoff), no event, no
            # condition; the replica that holds the standing (this one later, or another) schedules it.
            logger.info("pod %s not bound: %s; queued again", pod.key, status.error)
            qpod.clear_rejector_plugins()
            if pod.uid in self._unassigned:
                runtime.queue.add_unschedulable_if_not_present(qpod)
            runtime.queue.done(pod.uid)
            return
        http_status = getattr(status.error, "status", None)
        if http_status == 409:
            # Bound elsewhere (another replica during a peering overlap; DefaultBinder found it not bound here): its
            # watch event brings the truth and takes it off the queue. Until then it waits in the backoff queue,
            # unreported: a 409 the watch never follows (the pod still unbound) would otherwise lose the pod.
            logger.info("pod %s was already bound elsewhere (409); dropping our assumption", pod.key)
            if pod.uid in self._unassigned:
                qpod.clear_rejector_plugins()
                runtime.queue.add_unschedulable_if_not_present(qpod)
            runtime.queue.done(pod.uid)
            return
        if http_status == 404:
            logger.info("pod %s disappeared before binding (404)", pod.key)
            self._unassigned.remove(pod.uid)
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
        if uid in self._unassigned:
            runtime.queue.add_unschedulable_if_not_present(qpod)
        runtime.queue.done(uid)
        result = UNSCHEDULABLE if reason == "Unschedulable" else ERROR
        self._metrics.observe_attempt(result=result, profile=runtime.name, seconds=time.perf_counter() - started)
        pod = self._unassigned.get(uid, qpod.pod)
        self._nominate(pod, nominated_node)
        self._reporter.failed(
            pod,
            runtime.name,
            reason=reason,
            message=message,
            nominated_node=nominated_node,
            annotate=runtime.explain_annotations,
        )

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


def new_cycle_state() -> CycleState:
    """A fresh cycle state; one cycle in ten records per-plugin durations (upstream's sampling)."""
    state = CycleState()
    state.record_plugin_metrics = sample_plugin_metrics()
    return state


# -- the end of the scheduling cycle: assume, Reserve, Permit ---------------------------------------------
def assume_and_reserve(
    framework: Framework,
    state: CycleState,
    pod: PodInfo,
    result: ScheduleResult,
    cache: ClusterCache,
) -> PodInfo:
    """Assume the pod on the chosen node, then run Reserve and Permit; returns the assumed PodInfo (upstream
    ``prepareForBindingCycle``).

    On a Reserve or Permit rejection the assumption is undone and a FitError over that one node is raised
    (upstream reports such failures as ``0/1 nodes are available``); on errors a SchedulingError. A Permit
    Wait is not a failure: the binding cycle waits for it.
    """
    assumed = assume_and_run_reserve(framework, state, pod, result, cache)
    return permit_or_undo(framework, state, pod, assumed, result, cache)


def permit_or_undo(
    framework: Framework,
    state: CycleState,
    pod: PodInfo,
    assumed: PodInfo,
    result: ScheduleResult,
    cache: ClusterCache,
) -> PodInfo:
    """Permit for a pod assumed and Reserved (:func:`assume_and_reserve`'s end): ``assumed`` on Success or Wait;
    a rejection or an error undoes the assumption and raises as :func:`assume_and_reserve` does."""
    host = result.suggested_host
    status = framework.run_permit_plugins(state, assumed, host)
    if status.is_success or status.code is Code.WAIT:
        return assumed
    unreserve_and_forget(framework, state, assumed, host, cache)
    if status.is_rejected:
        raise FitError.on_one_node(pod, result.slot, status, result.diagnosis.names)
    raise SchedulingError(status)


def assume_and_run_reserve(
    framework: Framework,
    state: CycleState,
    pod: PodInfo,
    result: ScheduleResult,
    cache: ClusterCache,
) -> PodInfo:
    """Assume the pod on the chosen node and run Reserve (upstream ``assumeAndReserve``); the assumed PodInfo.

    In a pod-group cycle (``state.pod_group_cycle``) the pod is assumed for that cycle only
    (:meth:`ClusterCache.assume_in_snapshot`, upstream's snapshot), otherwise in the cache. A Reserve rejection
    undoes it and raises a FitError over that one node; an error, a SchedulingError.
    """
    host = result.suggested_host
    try:
        assumed = cache.assume_in_snapshot(pod, host) if state.pod_group_cycle else cache.assume(pod, host)
    except Exception as exc:
        raise SchedulingError(Status.as_error(exc)) from exc
    framework.nominator.delete_nominated_pod_if_exists(pod)

    status = framework.run_reserve_plugins_reserve(state, assumed, host)
    if status.is_success:
        return assumed
    unreserve_and_forget(framework, state, assumed, host, cache)
    if status.is_rejected:
        raise FitError.on_one_node(pod, result.slot, status, result.diagnosis.names)
    raise SchedulingError(status)


# -- the binding cycle ------------------------------------------------------------------------------------
async def bind_pod(
    framework: Framework,
    state: CycleState,
    assumed: PodInfo,
    result: ScheduleResult,
    cache: ClusterCache,
    *,
    nominate: Nominate | None = None,
    extenders: Sequence[Extender] = (),
    may_bind: MayBind | None = None,
) -> Status:
    """The binding cycle: PreBindPreFlight → WaitOnPermit → PreBind → Bind → PostBind; on failure Unreserve, forget.

    ``may_bind`` (the renew-deadline gate, ``standing.py``) is asked before PreBind's writes and again right before
    Bind: a no is an Error status of :class:`StandingLostError`, undone like any failure, with nothing written.

    When PreBind has work (a PreBindPreFlight said Success) or the pod waits on Permit, ``nominate`` is awaited
    first with the chosen node, so that others see where the pod is about to go while it is not bound yet
    (upstream's NominatedNodeNameForExpectation, on by default); otherwise the Binding follows at once.

    Returns SUCCESS, or the failing status (a Permit rejection comes back as Unschedulable with the
    FitError text in its message, as upstream's failure handler would print it). It never raises (bar
    cancellation): an exception on the way is an Error status, and the assumption and every Reserve plugin's
    claim (VolumeBinding's assumed PVs and claims) are undone as for any other failure.
    """
    host = result.suggested_host
    try:
        status = await _wait_pre_bind_and_bind(framework, state, assumed, result, nominate, extenders, may_bind)
    except Exception as exc:
        status = Status.as_error(exc)
    if status.is_success:
        framework.run_post_bind_plugins(state, assumed, host)
        return SUCCESS
    unreserve_and_forget(framework, state, assumed, host, cache)
    return status


async def _wait_pre_bind_and_bind(
    framework: Framework,
    state: CycleState,
    assumed: PodInfo,
    result: ScheduleResult,
    nominate: Nominate | None,
    extenders: Sequence[Extender],
    may_bind: MayBind | None = None,
) -> Status:
    host = result.suggested_host
    status = await _pre_flight(framework, state, assumed, host, nominate)
    if not status.is_success:
        return status
    status = await framework.wait_on_permit(assumed)
    if status.is_rejected:
        fit_error = FitError.on_one_node(assumed, result.slot, status, result.diagnosis.names)
        status = Status(status.code, (fit_error.message,), status.plugin)
    if status.is_success:
        status = _standing_status(may_bind) or await framework.run_pre_bind_plugins(state, assumed, host)
    if status.is_success:
        status = _standing_status(may_bind) or await _bind(framework, state, assumed, host, extenders)
    return status


def _standing_status(may_bind: MayBind | None) -> Status | None:
    """None while the gate allows binds; else the Error status that refuses the bind."""
    if may_bind is None or may_bind():
        return None
    return Status.as_error(StandingLostError("this replica's standing in the peering is not confirmed"))


async def _bind(
    framework: Framework, state: CycleState, assumed: PodInfo, host: str, extenders: Sequence[Extender]
) -> Status:
    """Upstream ``bind``: an interested binder extender binds instead of the Bind plugins."""
    if extenders:
        status = await extenders_binding(extenders, assumed, host)
        if status is not None:
            return status
    return await framework.run_bind_plugins(state, assumed, host)


async def _pre_flight(
    framework: Framework, state: CycleState, assumed: PodInfo, host: str, nominate: Nominate | None
) -> Status:
    """PreBindPreFlight; nominate ``host`` when PreBind or Permit will make the Binding wait. SUCCESS to go on."""
    status = framework.run_pre_bind_pre_flights(state, assumed, host)
    if not (status.is_success or status.is_skip):
        # An Error (the framework turns any other answer into one). A parked pod is not waited for any more.
        framework.waiting_pods.pop(assumed.uid, None)
        return status
    if nominate is not None and (status.is_success or framework.will_wait_on_permit(assumed)):
        await nominate(assumed, host)
    return SUCCESS


def unreserve_and_forget(
    framework: Framework, state: CycleState, assumed: PodInfo, host: str, cache: ClusterCache
) -> None:
    """Undo the scheduling cycle's claims after any failure past assume (upstream ``unreserveAndForget``):
    every Reserve plugin's Unreserve in reverse order (VolumeBinding's assumed PVs and claims, DynamicResources'
    in-flight allocations), then the assumed pod leaves the cache.

    In a pod-group cycle the pod leaves the cycle's snapshot instead, and the nomination its assume dropped
    from the nominator comes back (the pod's ``status.nominatedNodeName``), as upstream's.
    """
    framework.run_reserve_plugins_unreserve(state, assumed, host)
    if not state.pod_group_cycle:
        cache.forget(assumed.uid)
        return
    try:
        cache.forget_in_snapshot(assumed)
    except LookupError:
        logger.exception("ForgetPod failed")
        return
    nominated = nominated_node_name(assumed)
    if nominated:
        framework.nominator.add_nominated_pod(assumed, nominated)
