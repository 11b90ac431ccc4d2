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
- A FitError runs PostFilter (:meth:`ScheduleOne._post_filter`: preemption, DRA deallocation) before the
  failure is explained and handled; any other failure goes straight to :meth:`handle_scheduling_failure`.
- :meth:`ScheduleOne._binding_cycle` runs PreBindPreFlight, WaitOnPermit, PreBind, Bind and PostBind
  (``Scheduler.bind_pod``, which on failure runs Unreserve in reverse order and forgets the pod in the cache),
  then settles the pod: success is reported as Scheduled; failures go to :meth:`_handle_binding_cycle_error`.
  When PreBind has work (or Permit makes the pod wait), the pod's ``status.nominatedNodeName`` is set to the
  chosen node first (upstream's NominatedNodeNameForExpectation), through :meth:`Reporter.nominate`.
- A failed binding cycle freed what the assumed pod held, so, as upstream's ``handleBindingCycleError``, it
  moves parked pods with an AssignedPodDelete event (``move_all``, the event handlers' broadcast), and clears
  the nomination with the failure's status patch.
- :meth:`handle_scheduling_failure` requeues the pod (unschedulable pool or backoff) and reports it.

I/O is two collaborators away: the API calls are the framework's (Bind through the DefaultBinder plugin) and
the :class:`Reporter`'s; this module only decides what happens to the pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.framework import ClusterEvent, CycleState, Status
from kopf_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from kopf_scheduler.metrics import ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics, sample_plugin_metrics
from kopf_scheduler.profiles import ProfileRuntime
from kopf_scheduler.queue import QueuedPodInfo
from kopf_scheduler.reporting import Reporter, Spawn
from kopf_scheduler.scheduler import FitError, Scheduler, ScheduleResult, SchedulingError, recheck_after_extenders
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler")


@dataclass(frozen=True, slots=True)
class Found:
    """What the algorithm of a profile with extenders came to, after its awaits."""

    outcome: ScheduleResult | Exception
    #: ``ClusterCache.generation`` when the cycle began: a change since means the chosen node is re-judged.
    generation: int
    #: The pipeline the cycle ran with (the profile's may have been swapped during the awaits).
    scheduler: Scheduler


#: Moves the parked pods of every profile that ``event`` may help (``EventHandlers.move_all_to_active_or_backoff``):
#: ``(event, old, new, pre_check)``, where ``pre_check`` (if not None) limits the candidates.
MoveAll = Callable[[ClusterEvent, Any, Any, Callable[[PodInfo], bool] | None], None]


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
    ) -> None:
        self._cache = cache
        #: Every pending pod by uid, as the event handlers keep it (its latest version is what is scheduled).
        self._unassigned = unassigned
        self._reporter = reporter
        self._metrics = metrics
        self._clock = clock
        self._spawn = spawn
        self._move_all = move_all

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
        self._cycle(runtime, qpod, pod, time.perf_counter(), _new_cycle_state(), None)
        return None

    async def _schedule_one_with_extenders(self, runtime: ProfileRuntime, qpod: QueuedPodInfo, pod: PodInfo) -> None:
        """The algorithm with the extender calls awaited; then the same synchronous rest as any cycle."""
        started = time.perf_counter()
        state = _new_cycle_state()
        generation = self._cache.generation
        # The pipeline may be swapped while we await (a profile edit): the rest of the cycle uses this one.
        scheduler = runtime.scheduler
        found: ScheduleResult | Exception
        try:
            found = await scheduler.schedule_pod_with_extenders(state, pod, self._cache)
        except Exception as e:  # handled below, as the synchronous cycle handles it
            found = e
        if self._latest(runtime, qpod) is None:
            return  # deleted, bound or assumed elsewhere while the extenders were called
        self._cycle(runtime, qpod, pod, started, state, Found(found, generation, scheduler))

    def _cycle(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        pod: PodInfo,
        started: float,
        state: CycleState,
        found: Found | None,
    ) -> None:
        try:
            result, assumed = self._scheduling_cycle(runtime, state, pod, started, found)
        except FitError as fit:
            self._post_filter(runtime, state, pod, fit)
            self._reporter.explain(runtime.name, fit)
            plugins = fit.diagnosis.all_unschedulable_plugins()
            self.handle_scheduling_failure(
                runtime, qpod, message=fit.message, reason="Unschedulable", plugins=plugins, started=started
            )
            return
        except SchedulingError as e:
            self.handle_scheduling_failure(
                runtime, qpod, message=e.status.message, reason="SchedulerError", plugins=set(), started=started
            )
            return
        except Exception as e:  # a plugin bug must not stop the loop
            logger.exception("scheduling %s failed", pod.key)
            self.handle_scheduling_failure(
                runtime, qpod, message=str(e), reason="SchedulerError", plugins=set(), started=started
            )
            return
        self._spawn(self._binding_cycle(runtime, qpod, state, assumed, result, started))

    def _latest(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> PodInfo | None:
        """The pod's latest version, or None (and done with it) if it was deleted, bound or is being bound."""
        uid = qpod.pod.uid
        latest = self._unassigned.get(uid)
        if latest is None or latest.terminating or self._cache.is_assumed(uid) or self._cache.pod(uid) is not None:
            runtime.queue.done(uid)  # deleted, bound or being bound meanwhile
            return None
        qpod.pod = latest
        return latest

    def _scheduling_cycle(
        self,
        runtime: ProfileRuntime,
        state: CycleState,
        pod: PodInfo,
        started: float,
        found: Found | None = None,
    ) -> tuple[ScheduleResult, PodInfo]:
        """The algorithm, then assume, Reserve and Permit; returns the result and the assumed pod.

        ``found``: what the algorithm with extenders came to (the chosen node is judged again if the cache
        changed meanwhile). Raises FitError (no node fits, or Reserve/Permit rejected the chosen one) or
        SchedulingError.
        """
        if found is None:
            scheduler = runtime.scheduler
            result = scheduler.schedule_pod(state, pod, self._cache.snapshot())
        else:
            scheduler = found.scheduler
            if isinstance(found.outcome, Exception):
                raise found.outcome
            result = found.outcome
            recheck_after_extenders(scheduler.framework, state, pod, result, self._cache, found.generation)
        self._metrics.scheduling_algorithm_duration.observe(time.perf_counter() - started)
        assumed = scheduler.assume_and_reserve(state, pod, result, self._cache)
        return result, assumed

    def _post_filter(self, runtime: ProfileRuntime, state: CycleState, pod: PodInfo, fit: FitError) -> None:
        """PostFilter after a FitError, before the failure is reported (its message joins the FitError's).

        The nomination it may return is not used yet (upstream passes it to handleSchedulingFailure).
        """
        runtime.scheduler.run_post_filter(state, pod, fit)

    async def _binding_cycle(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        state: CycleState,
        pod: PodInfo,
        result: ScheduleResult,
        started: float,
    ) -> None:
        """WaitOnPermit, PreBind, Bind, PostBind for the assumed ``pod``; then settle it either way."""
        try:
            status = await runtime.scheduler.bind_pod(state, pod, result, self._cache, nominate=self._reporter.nominate)
        except Exception as e:  # the bind task must always settle the pod (bind_pod itself does not raise)
            runtime.scheduler.framework.run_reserve_plugins_unreserve(state, pod, result.suggested_host)
            self._cache.forget(pod.uid)
            status = Status.as_error(e)
        if status.is_success:
            await self._bound(runtime, qpod, pod, result.suggested_host, started)
        else:
            self._handle_binding_cycle_error(runtime, qpod, pod, status, started)

    async def _bound(
        self, runtime: ProfileRuntime, qpod: QueuedPodInfo, pod: PodInfo, node: str, started: float
    ) -> None:
        runtime.queue.done(pod.uid)
        self._metrics.observe_attempt(result=SCHEDULED, profile=runtime.name, seconds=time.perf_counter() - started)
        first = qpod.initial_attempt_timestamp or qpod.timestamp
        self._metrics.observe_scheduled(attempts=qpod.attempts, seconds_since_first_enqueue=self._clock() - first)
        await self._reporter.scheduled(pod, runtime.name, node)

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
                clear_nomination=True,
            )
            return
        self.handle_scheduling_failure(
            runtime,
            qpod,
            message=f"binding rejected: {status.message}",
            reason="SchedulerError",
            plugins=set(),
            started=started,
            clear_nomination=True,
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
        clear_nomination: bool = False,
    ) -> None:
        """Upstream's handleSchedulingFailure: requeue, then report (event deduplicated, condition patched).

        ``clear_nomination``: the failure also removes the pod's nominatedNodeName (a failed binding cycle).
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
        self._reporter.failed(pod, runtime.name, reason=reason, message=message, clear_nomination=clear_nomination)


def _new_cycle_state() -> CycleState:
    """A fresh cycle state; one cycle in ten records per-plugin durations (upstream's sampling)."""
    state = CycleState()
    state.record_plugin_metrics = sample_plugin_metrics()
    return state
