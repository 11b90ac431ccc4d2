"""The scheduling queue: upstream's ``PriorityQueue`` (``pkg/scheduler/backend/queue/scheduling_queue.go``,
v1.36; reference §5), one per SchedulerProfile. This module is the facade; the parts are its siblings.

Three places a pending pod can be:

- **activeQ** (:mod:`~kopf_scheduler.queue.active_queue`), ordered by the profile's QueueSort: pods to try
  now. :meth:`SchedulingQueue.pop` takes its head (it waits while there is nothing to take).
- **backoffQ** (:mod:`~kopf_scheduler.queue.backoff_queue`): pods worth retrying but still paying their
  backoff; pods that failed with an *error* (no rejecting plugin) wait in a separate error heap.
- **unschedulablePods** (:mod:`~kopf_scheduler.queue.unschedulable_pods`): pods that were rejected and wait
  for a cluster event that could help (:mod:`~kopf_scheduler.queue.hints` decides which), and pods *gated*
  by a PreEnqueue plugin (scheduling gates), which are never popped.

A popped pod is *in flight* (:mod:`~kopf_scheduler.queue.in_flight`) until the cycle ends (:meth:`done`, or
:meth:`add_unschedulable_if_not_present` on failure); events that arrive meanwhile are replayed through its
rejecting plugins' hints when it comes back, so an event that lands during its cycle is never lost.

This module owns the moves between the three: PreEnqueue on the way in (upstream ``moveToActiveQ``,
``moveToBackoffQ``, ``requeuePodWithQueueingStrategy``, ``movePodsToActiveOrBackoffQueue``), and pop.
1.36 behaviours followed, all upstream defaults:

- SchedulerPopFromBackoffQ (beta, on): when activeQ is empty, :meth:`~SchedulingQueue.pop` takes the head of
  the (non-error) backoffQ early instead of idling, and PreEnqueue runs on entering backoffQ rather than on
  leaving it. Pass ``pop_from_backoff_q=False`` for the plain behaviour (pop waits for activeQ).
- Unscheduled-pod updates are judged per update sub-event by the rejecting plugins' hints; assigned-pod
  events go through the same hints (no cross-topology pre-filter: that is the QueueingHints-off path).

Beyond upstream, to keep the operator simple: :meth:`~SchedulingQueue.add` of a pod the queue already holds is
an update (never a duplicate); a pod deleted while in flight is not requeued by its failure; the failure path
requeues the newest copy of the pod the queue was given while it was in flight (upstream re-reads its informer);
:meth:`~SchedulingQueue.reconfigure` swaps a profile's PreEnqueue and registrations without losing pods.

Every public method is synchronous and O(log n) or amortised O(1) per pod moved; only :meth:`pop` awaits.
There is no lock, because nothing calls the queue off kopf's event loop: handlers.py registers only
``async def`` handlers (kopf would run sync ones on worker threads), and they reach the queue through
SchedulerApp (watch events, profile changes, the ``profiles`` probe); the per-profile daemon
(``SchedulerApp.run_profile``, a coroutine) pops, flushes and reads the pending counts for the metrics;
binding cycles are asyncio tasks; /metrics and /explain (web.py) are served by aiohttp on the same loop and
never read the queue; nothing hands the queue to ``asyncio.to_thread`` or an executor. So calls never
interleave and each runs to completion.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kopf_scheduler.framework.events import (
    BACKOFF_COMPLETE,
    EVENT_FORCE_ACTIVATE,
    EVENT_UNSCHEDULABLE_TIMEOUT,
    EVENT_UNSCHEDULED_POD_ADD,
    EVENT_UNSCHEDULED_POD_UPDATE,
    FORCE_ACTIVATE,
    POP_FROM_BACKOFF_Q,
    SCHEDULE_ATTEMPT_FAILURE,
    ClusterEvent,
    ClusterEventWithHint,
    pod_scheduling_properties_change,
)
from kopf_scheduler.framework.status import Status
from kopf_scheduler.queue.active_queue import ActiveQueue
from kopf_scheduler.queue.backoff_queue import BackoffQueue
from kopf_scheduler.queue.hints import QueueingHints, Strategy
from kopf_scheduler.queue.in_flight import InFlightPods
from kopf_scheduler.queue.queued_pod import (
    ACTIVE_Q,
    BACKOFF_Q,
    GATED,
    IN_FLIGHT,
    UNSCHEDULABLE_Q,
    LessFn,
    QueueClosedError,
    QueuedPodInfo,
    is_settled,
)
from kopf_scheduler.queue.unschedulable_pods import UnschedulablePods
from kopf_scheduler.queue.waiters import Waiters
from kopf_scheduler.state.pod_info import PodInfo

log = logging.getLogger(__name__)

#: Rejector name recorded when the PreEnqueue callable's Status names no plugin.
UNKNOWN_PRE_ENQUEUE_PLUGIN = "PreEnqueue"

#: The labels of the events every new or updated pending pod enters activeQ with (metrics), made once.
_POD_ADD_LABEL = EVENT_UNSCHEDULED_POD_ADD.label
_POD_UPDATE_LABEL = EVENT_UNSCHEDULED_POD_UPDATE.label


class SchedulingQueue:
    """Upstream's PriorityQueue for one profile. See the module docstring for the behaviour.

    ``less`` is the profile's QueueSort (``PrioritySort.less``); ``pre_enqueue`` runs the profile's PreEnqueue
    plugins and returns the first rejection (with ``Status.plugin`` set) or success; ``plugin_events`` maps each
    plugin that can reject to the events it registers (``enqueue.events_for_framework(framework)``). A plugin
    absent from ``plugin_events`` (or every plugin, when it is None) is treated as registering every event with
    an always-Queue hint. ``pop_from_backoff_q`` is upstream's SchedulerPopFromBackoffQ gate (on in 1.36).
    """

    def __init__(
        self,
        *,
        less: LessFn,
        pre_enqueue: Callable[[PodInfo], Status],
        plugin_events: Mapping[str, Sequence[ClusterEventWithHint]] | None = None,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_in_unschedulable: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        pop_from_backoff_q: bool = True,
        on_incoming: Callable[[str, str], None] | None = None,
        pod_groups: bool = False,
    ) -> None:
        self._pre_enqueue = pre_enqueue
        #: The profile schedules PodGroups (upstream's GenericWorkload gate, per profile): a failed member of a group
        #: is retried after backoff, never by event hints (upstream has no pod-group level requeueing yet).
        self._pod_groups = pod_groups
        #: ``scheduler_queue_incoming_pods_total``: called with (queue, event) for every pod entering a sub-queue.
        self._on_incoming = on_incoming
        self._max_in_unschedulable = float(max_in_unschedulable)
        self._clock = clock
        self._pop_from_backoff_q = pop_from_backoff_q
        self._hints = QueueingHints(plugin_events)
        # One counter orders every arrival and every in-flight event, as one sequence of changes.
        seq = itertools.count(1)
        self._active = ActiveQueue(less, seq)
        self._backoff = BackoffQueue(
            less=less,
            seq=seq,
            clock=clock,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            pop_from_backoff_q=pop_from_backoff_q,
        )
        self._unschedulable = UnschedulablePods(seq)
        self._in_flight = InFlightPods(seq)
        self._closed = False
        self._wakers = Waiters()

    # -- introspection ------------------------------------------------------------------------------------------
    def __contains__(self, uid: object) -> bool:
        """Whether the pod waits in activeQ, backoffQ or unschedulablePods (in-flight pods are not queued)."""
        return isinstance(uid, str) and self._where(uid) is not None

    def __len__(self) -> int:
        """Pending pods: activeQ + backoffQ + unschedulablePods (gated included; in-flight excluded)."""
        return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def pending_pods(self) -> dict[str, int]:
        """Counts per ``scheduler_pending_pods{queue}`` label: active, backoff, unschedulable, gated."""
        gated = self._unschedulable.gated_count
        return {
            ACTIVE_Q: len(self._active),
            BACKOFF_Q: len(self._backoff),
            UNSCHEDULABLE_Q: len(self._unschedulable) - gated,
            GATED: gated,
        }

    def unschedulable_plugins(self) -> dict[str, int]:
        """``scheduler_unschedulable_pods{plugin}`` of this profile: queued pods per plugin that rejected (or
        gates) them. Upstream counts a pod from its failed attempt until it is popped again or deleted, in
        whichever sub-queue it waits meanwhile; so do we (a pod in flight is not counted)."""
        counts = self._unschedulable.counts_by_plugin()
        for qpod in itertools.chain(self._active.values(), self._backoff.values()):
            if qpod.unschedulable_plugins or qpod.pending_plugins:  # most queued pods were never rejected
                for plugin in qpod.rejectors:
                    counts[plugin] = counts.get(plugin, 0) + 1
        return counts

    def oldest_failed_attempt(self) -> float | None:
        """When the longest-waiting pod that failed and waits again (backoffQ, unschedulablePods; gated pods were
        never attempted) was first attempted; None when there is none."""
        waiting = itertools.chain(self._backoff.values(), self._unschedulable.values())
        return min(
            (q.initial_attempt_timestamp for q in waiting if q.initial_attempt_timestamp is not None), default=None
        )

    def get(self, uid: str) -> QueuedPodInfo | None:
        """The queued (or in-flight) entry of a pod."""
        where = self._where(uid)
        if where is not None:
            return self._lookup(uid, where)
        return self._in_flight.get(uid)

    def location(self, uid: str) -> str | None:
        """``active`` / ``backoff`` / ``unschedulable`` / ``gated`` / ``in-flight``, or None if unknown."""
        where = self._where(uid)
        if where == UNSCHEDULABLE_Q and self._unschedulable.is_gated(uid):
            return GATED
        if where is None and uid in self._in_flight:
            return IN_FLIGHT
        return where

    @property
    def closed(self) -> bool:
        return self._closed

    def backoff_duration(self, count: int) -> float:
        """``initial · 2^(count−1)``, capped at ``max``; 0 for a pod never rejected."""
        return self._backoff.duration(count)

    # -- pods entering and changing ------------------------------------------------------------------------
    def add(self, pod: PodInfo) -> None:
        """A new unscheduled pod: PreEnqueue, then activeQ, or unschedulablePods if gated.

        A pod the queue already holds (or has in flight) is treated as an update, so re-listing never makes
        duplicates. Bound or finished pods are ignored.
        """
        if is_settled(pod):
            return
        known = self._known_pod(pod.uid)
        if known is not None:
            self._update(known, pod)
            return
        qpod = QueuedPodInfo(pod, self._clock())
        if self._move_to_active(qpod, _POD_ADD_LABEL, from_backoff=False):
            self._wakers.wake_all()

    def update(self, old: PodInfo | None, new: PodInfo) -> None:
        """An unscheduled pod changed (upstream ``Update``).

        In activeQ/backoffQ it is replaced in place; in unschedulablePods each update sub-event (labels,
        tolerations, scheduling gates removed, scale-down …) is put to the rejecting plugins' hints, so a pod
        whose gates were removed re-runs PreEnqueue and goes to activeQ; in flight, the sub-events are
        recorded for its return; unknown, it is added. An update that binds or finishes the pod removes it.
        The caller skips pods assumed by the cache (upstream does not requeue assumed pods).
        """
        if is_settled(new):
            self._delete(new.uid)
            return
        self._update(old, new)

    def delete(self, uid: str) -> None:
        """The pod is gone (or bound): remove it from wherever it is. An in-flight pod is not requeued later."""
        self._delete(uid)

    def activate(self, uids: Iterable[str]) -> None:
        """Upstream ``Activate``: move these pods from backoffQ/unschedulablePods to activeQ now (PreEnqueue
        still applies). An in-flight pod gets a ForceActivate event recorded so it requeues on failure."""
        woke = False
        for uid in uids:
            activated = self._activate(uid)
            if activated is not None:
                woke |= activated
            elif (flying := self._in_flight.get(uid)) is not None:
                self._in_flight.record(EVENT_FORCE_ACTIVATE, None, flying.pod)
        if woke:
            self._wakers.wake_all()

    def _activate(self, uid: str) -> bool | None:
        """Upstream's private ``activate``: a pod of unschedulablePods or backoffQ goes to activeQ (PreEnqueue
        still applies); whether it got there, or None when neither held it."""
        qpod = self._unschedulable.get(uid)
        from_backoff = False
        if qpod is None:
            qpod = self._backoff.remove(uid)
            from_backoff = qpod is not None
        if qpod is None:
            return None
        return self._move_to_active(qpod, FORCE_ACTIVATE, from_backoff=from_backoff)

    def pop_specific_pod(self, uid: str) -> QueuedPodInfo | None:
        """Upstream ``PopSpecificPod``: take this pod out of the queue as :meth:`pop` takes the head (in flight,
        one more attempt), for the pod-group cycle that pops a group's members together.

        The pod is activated first (from unschedulablePods or backoffQ, PreEnqueue deciding), so it behaves as
        if an event had moved it to activeQ and it was popped from there; None when it is not in activeQ then
        (gated, in flight, or unknown to this queue).
        """
        self._activate(uid)
        qpod = self._active.remove(uid)
        if qpod is None:
            return None
        if uid in self._in_flight:  # cannot happen through this API; upstream discards such pods
            log.error("pod %s popped while already in flight; discarding", qpod.pod.key)
            return None
        qpod.attempts += 1
        self._in_flight.start(qpod)
        return qpod

    # -- the scheduling loop side --------------------------------------------------------------------------
    async def pop(self) -> QueuedPodInfo:
        """The next pod to schedule, waiting while there is none; marks it in flight and counts the attempt.

        Raises :class:`QueueClosedError` once the queue is closed (waiting callers are woken).
        """
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise QueueClosedError("the scheduling queue is closed")
            qpod = self._pop()
            if qpod is not None:
                return qpod
            waiter = self._wakers.park(loop)
            try:
                await waiter
            finally:
                self._wakers.forget(waiter)

    def pop_nowait(self) -> QueuedPodInfo | None:
        """Like :meth:`pop` but returns None instead of waiting (and after close)."""
        return None if self._closed else self._pop()

    def done(self, uid: str) -> None:
        """The pod's cycle finished (bound, or handed back): stop tracking it as in flight."""
        self._in_flight.end(uid)

    def add_unschedulable_if_not_present(self, qpod: QueuedPodInfo) -> None:
        """Hand a pod back after a failed cycle (upstream ``AddUnschedulableIfNotPresent``); also ends its flight.

        Counts the failure (rejection or error), refreshes its timestamp, then replays the events recorded
        while it was in flight through its rejecting plugins' hints: none says Queue → unschedulablePods;
        a Pending plugin's Queue → activeQ at once; otherwise backoffQ, or activeQ if its backoff has already
        passed. A pod with no rejecting plugin (an error) always goes to the error backoffQ.
        """
        uid = qpod.uid
        try:
            if self._in_flight.was_deleted(uid):
                return
            if self._where(uid) is not None:
                log.warning("pod %s is handed back but already queued; ignoring", qpod.pod.key)
                return
            latest = self._in_flight.latest_update(uid)
            if latest is not None:
                if is_settled(latest):
                    return
                qpod.pod = latest
            self._count_failure(qpod)
            self._hints.note_plugins(qpod.rejectors)
            if self._pod_groups and qpod.pod.scheduling_group is not None and not qpod.failed_with_error:
                strategy = Strategy.AFTER_BACKOFF  # upstream determineSchedulingHintForInFlightPod
            else:
                strategy = self._in_flight.replay(qpod, self._hints)
            where = self._requeue(qpod, strategy, SCHEDULE_ATTEMPT_FAILURE)
            log.debug(
                "pod %s requeued to %s after a failed cycle (rejectors %s)", qpod.pod.key, where, sorted(qpod.rejectors)
            )
            if where != UNSCHEDULABLE_Q:
                self._wakers.wake_all()
        finally:
            self._in_flight.end(uid)

    def _count_failure(self, qpod: QueuedPodInfo) -> None:
        """A rejection or an error: bump its counter and restart its clock (so its backoff is recomputed)."""
        if qpod.failed_with_error:
            qpod.consecutive_errors_count += 1
        else:
            qpod.unschedulable_count += 1
            qpod.consecutive_errors_count = 0
        qpod.timestamp = self._clock()
        qpod.backoff_expiration = None

    # -- cluster events ------------------------------------------------------------------------------------
    def move_all_to_active_or_backoff(
        self,
        event: ClusterEvent,
        old: Any = None,
        new: Any = None,
        *,
        pre_check: Callable[[PodInfo], bool] | None = None,
    ) -> None:
        """A cluster event happened: move the unschedulable pods it may help (upstream
        ``MoveAllToActiveOrBackoffQueue``), and record it for pods in flight.

        Only pods rejected by a plugin that registered a matching event, and whose hint for this
        ``old``/``new`` pair says Queue (a raising hint counts as Queue), move: to backoffQ while backing off,
        else activeQ (a Pending plugin's Queue skips the backoff). Gated pods move only for events their
        gating plugin registered. A wildcard event moves every pod it reaches (``new`` set to a pod narrows it
        to that pod). ``pre_check``, if given, limits the candidates (upstream's priority pre-check).
        """
        if not self._hints.is_event_of_interest(event):
            return
        self._move_pods(self._candidates(event, pre_check), event, old, new)

    # -- periodic work -------------------------------------------------------------------------------------
    def flush_backoff_completed(self) -> None:
        """Move pods whose backoff is over from backoffQ to activeQ (upstream runs this every second)."""
        woke = False
        for qpod in self._backoff.pop_completed():
            woke |= self._move_to_active(qpod, BACKOFF_COMPLETE, from_backoff=True)
        if woke:
            self._wakers.wake_all()

    def flush_unschedulable_leftover(self) -> None:
        """Move pods that sat in unschedulablePods longer than ``max_in_unschedulable`` (every ~30 s).

        Gated pods stay: the timeout is a wildcard event and gates lift only through the pod's own update.
        """
        now = self._clock()
        stale = [q for q in self._unschedulable.values() if now - q.timestamp > self._max_in_unschedulable]
        if stale:
            self._move_pods(stale, EVENT_UNSCHEDULABLE_TIMEOUT, None, None)

    def reconfigure(
        self,
        *,
        pre_enqueue: Callable[[PodInfo], Status],
        plugin_events: Mapping[str, Sequence[ClusterEventWithHint]] | None,
        pod_groups: bool = False,
    ) -> None:
        """The profile changed (hot reload): swap its PreEnqueue and registrations, keeping every pending pod.

        Gated pods are judged again by the new PreEnqueue (a removed gate plugin releases them), and so are the pods
        of activeQ and backoffQ (a new gate plugin parks them as gated); rejected pods
        keep waiting, now for the events the new registrations (or, for plugins no longer registered, any
        event) allow. Upstream has no equivalent: it restarts on configuration changes.
        """
        self._pre_enqueue = pre_enqueue
        self._pod_groups = pod_groups
        self._hints.replace(plugin_events)
        for qpod in self._unschedulable.values():
            self._hints.note_plugins(qpod.rejectors)
        # Pods waiting in activeQ and backoffQ passed the old PreEnqueue only: a new gate holds them too (upstream
        # restarts on a configuration change, and every pod enters its queue through PreEnqueue again).
        for qpod in [*self._active.values(), *self._backoff.values()]:
            self._run_pre_enqueue(qpod)
            if qpod.gated:
                self._put_unschedulable(qpod)
        woke = False
        for qpod in [q for q in self._unschedulable.values() if q.gated]:
            woke |= self._requeue(qpod, Strategy.AFTER_BACKOFF, FORCE_ACTIVATE) != UNSCHEDULABLE_Q
        if woke:
            self._wakers.wake_all()

    def close(self) -> None:
        """Stop: pending and future :meth:`pop` calls raise :class:`QueueClosedError`; in-flight tracking ends."""
        self._closed = True
        for uid in self._in_flight.uids():
            self._in_flight.end(uid)
        self._wakers.wake_all()

    # == internals ===============================================================================================
    def _where(self, uid: str) -> str | None:
        if uid in self._active:
            return ACTIVE_Q
        if uid in self._backoff:
            return BACKOFF_Q
        if uid in self._unschedulable:
            return UNSCHEDULABLE_Q
        return None

    def _lookup(self, uid: str, where: str) -> QueuedPodInfo:
        if where == ACTIVE_Q:
            qpod = self._active.get(uid)
        elif where == BACKOFF_Q:
            qpod = self._backoff.get(uid)
        else:
            qpod = self._unschedulable.get(uid)
        assert qpod is not None
        return qpod

    def _known_pod(self, uid: str) -> PodInfo | None:
        where = self._where(uid)
        if where is not None:
            return self._lookup(uid, where).pod
        return self._in_flight.newest_pod(uid)

    # -- placing pods: each placement removes the pod from the other structures first ---------------------
    def _push_active(self, qpod: QueuedPodInfo) -> None:
        self._unschedulable.remove(qpod.uid)
        self._backoff.remove(qpod.uid)
        self._active.push(qpod)

    def _push_backoff(self, qpod: QueuedPodInfo) -> None:
        self._unschedulable.remove(qpod.uid)
        self._active.remove(qpod.uid)
        self._backoff.push(qpod)

    def _put_unschedulable(self, qpod: QueuedPodInfo, event: str | None = None) -> None:
        if event is not None and qpod.uid not in self._unschedulable:
            self._incoming(UNSCHEDULABLE_Q, event)
        self._active.remove(qpod.uid)
        self._backoff.remove(qpod.uid)
        self._hints.note_plugins(qpod.rejectors)
        self._unschedulable.put(qpod)

    def _delete(self, uid: str) -> None:
        self._active.remove(uid)
        self._backoff.remove(uid)
        self._unschedulable.remove(uid)
        if uid in self._in_flight:
            self._in_flight.deleted(uid)

    # -- PreEnqueue and the three moves (upstream moveToActiveQ / moveToBackoffQ / requeue…Strategy) --------
    def _run_pre_enqueue(self, qpod: QueuedPodInfo) -> None:
        try:
            status = self._pre_enqueue(qpod.pod)
        except Exception as exc:  # a broken plugin gates the pod (upstream treats Error like a rejection)
            log.exception("PreEnqueue failed for pod %s", qpod.pod.key)
            status = Status.as_error(exc)
        if status.is_success:
            qpod.gating_plugin, qpod.gated = "", False
            return
        plugin = status.plugin or UNKNOWN_PRE_ENQUEUE_PLUGIN
        qpod.unschedulable_plugins.add(plugin)
        qpod.gating_plugin, qpod.gated = plugin, True

    def _move_to_active(self, qpod: QueuedPodInfo, event: str, *, from_backoff: bool) -> bool:
        # With PopFromBackoffQ, PreEnqueue already ran when the pod entered backoffQ.
        if not (self._pop_from_backoff_q and from_backoff):
            self._run_pre_enqueue(qpod)
        if qpod.gated:
            if qpod.uid in self._active or qpod.uid in self._backoff:
                return False
            self._put_unschedulable(qpod, event)
            log.debug("pod %s gated by %s (%s)", qpod.pod.key, qpod.gating_plugin, event)
            return False
        if qpod.initial_attempt_timestamp is None:
            qpod.initial_attempt_timestamp = self._clock()
        self._push_active(qpod)
        self._incoming(ACTIVE_Q, event)
        return True

    def _move_to_backoff(self, qpod: QueuedPodInfo, event: str) -> bool:
        if self._pop_from_backoff_q:
            self._run_pre_enqueue(qpod)
            if qpod.gated:
                self._put_unschedulable(qpod, event)
                return False
        self._push_backoff(qpod)
        self._incoming(BACKOFF_Q, event)
        return True

    def _incoming(self, queue: str, event: str) -> None:
        if self._on_incoming is not None:
            self._on_incoming(queue, event)

    def _requeue(self, qpod: QueuedPodInfo, strategy: Strategy, event: str) -> str:
        """Place a pod by strategy; returns where it went."""
        if strategy is Strategy.SKIP:
            self._put_unschedulable(qpod, event)
            return UNSCHEDULABLE_Q
        if strategy is Strategy.AFTER_BACKOFF and self._backoff.is_backing_off(qpod):
            return BACKOFF_Q if self._move_to_backoff(qpod, event) else UNSCHEDULABLE_Q
        return ACTIVE_Q if self._move_to_active(qpod, event, from_backoff=False) else UNSCHEDULABLE_Q

    # -- pop and updates -----------------------------------------------------------------------------------
    def _pop(self) -> QueuedPodInfo | None:
        while True:
            qpod = self._active.pop()
            if qpod is None and self._pop_from_backoff_q:
                # Idle: retry the soonest-expiring rejected pod early rather than waste the cycle.
                qpod = self._backoff.pop_rejected()
                if qpod is not None:
                    self._incoming(ACTIVE_Q, POP_FROM_BACKOFF_Q)
            if qpod is None:
                return None
            if qpod.uid in self._in_flight:  # cannot happen through this API; upstream discards such pods
                log.error("pod %s popped while already in flight; discarding", qpod.pod.key)
                continue
            qpod.attempts += 1
            if qpod.initial_attempt_timestamp is None:
                qpod.initial_attempt_timestamp = self._clock()
            self._in_flight.start(qpod)
            return qpod

    def _update(self, old: PodInfo | None, new: PodInfo) -> None:
        uid = new.uid
        events = [EVENT_UNSCHEDULED_POD_UPDATE] if old is None else pod_scheduling_properties_change(new, old)
        if uid in self._in_flight:
            self._in_flight.updated(new)
            for event in events:
                self._in_flight.record(event, old, new)
            return
        if (qpod := self._active.get(uid)) is not None:
            qpod.pod = new
            self._push_active(qpod)  # re-sort: what QueueSort reads may have changed
            return
        if (qpod := self._backoff.get(uid)) is not None:
            qpod.pod = new
            self._push_backoff(qpod)
            return
        if (qpod := self._unschedulable.get(uid)) is not None:
            qpod.pod = new
            self._requeue_on_own_update(qpod, events, old, new)
            return
        qpod = QueuedPodInfo(new, self._clock())
        if self._move_to_active(qpod, _POD_UPDATE_LABEL, from_backoff=False):
            self._wakers.wake_all()

    def _requeue_on_own_update(
        self, qpod: QueuedPodInfo, events: Sequence[ClusterEvent], old: PodInfo | None, new: PodInfo
    ) -> None:
        """A parked pod changed: the first update sub-event its rejectors' hints accept moves it."""
        for event in events:
            where = self._requeue(qpod, self._hints.worth_requeuing(qpod, event, old, new), event.label)
            if where != UNSCHEDULABLE_Q:
                self._wakers.wake_all()
                return

    # -- moving parked pods on a cluster event ------------------------------------------------------------
    def _candidates(self, event: ClusterEvent, pre_check: Callable[[PodInfo], bool] | None) -> list[QueuedPodInfo]:
        if event.is_wildcard:
            pods = list(self._unschedulable.values())
        else:
            pods = self._unschedulable.rejected_by(self._hints.interested_plugins(event))
        if pre_check is not None:
            pods = [qpod for qpod in pods if pre_check(qpod.pod)]
        return pods

    def _move_pods(self, pods: Iterable[QueuedPodInfo], event: ClusterEvent, old: Any, new: Any) -> None:
        """Upstream ``movePodsToActiveOrBackoffQueue``."""
        if not self._hints.is_event_of_interest(event):
            return
        woke = False
        for qpod in pods:
            if qpod.gated and not self._hints.may_lift_gate(qpod, event):
                continue  # only events of interest to the gating plugin can lift a gate
            strategy = self._hints.worth_requeuing(qpod, event, old, new)
            if strategy is Strategy.SKIP:
                continue
            self._unschedulable.remove(qpod.uid)
            if self._requeue(qpod, strategy, event.label) != UNSCHEDULABLE_Q:
                woke = True
        if self._in_flight:
            self._in_flight.record(event, old, new)
        if woke:
            self._wakers.wake_all()
