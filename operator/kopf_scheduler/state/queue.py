"""The scheduling queue: upstream's PriorityQueue (reference §5), one per SchedulerProfile.

Three places a pending pod can be, as in ``pkg/scheduler/backend/queue`` of Kubernetes v1.36:

- **activeQ**, a heap ordered by the profile's QueueSort ``less``: pods to try now. :meth:`SchedulingQueue.pop`
  takes its head (it waits while there is nothing to take).
- **backoffQ**, heaps ordered by backoff expiry: pods worth retrying but still paying their backoff. Pods
  that failed with an *error* (no rejecting plugin) wait in a separate error heap.
- **unschedulablePods**, a map: pods that were rejected and wait for a cluster event that could help, and
  pods *gated* by a PreEnqueue plugin (scheduling gates), which are never popped.

A popped pod is *in flight* until the cycle ends (:meth:`~SchedulingQueue.done`, or
:meth:`~SchedulingQueue.add_unschedulable_if_not_present` on failure). Events that arrive meanwhile are
recorded (upstream's in-flight event list, the QueueingHints design that is GA since 1.34, rather than the
older ``moveRequestCycle`` rule) and replayed through the rejecting plugins' hints when the pod comes back,
so an event that lands during its cycle is never lost.

1.36 behaviours followed, all upstream defaults:

- Backoff is ``initial · 2^(n−1)`` capped at ``max`` (1, 2, 4, 8, 10, 10 s) where n is the pod's
  ``unschedulable_count`` (rejections), or its ``consecutive_errors_count`` while it is failing with errors
  (1.35+; ≤1.34 used the number of attempts). A pod never rejected has no backoff.
- SchedulerPopFromBackoffQ (beta, on): when activeQ is empty, :meth:`~SchedulingQueue.pop` takes the head of
  the (non-error) backoffQ early instead of idling; backoff expiries are aligned down to whole seconds
  (the 1 s *ordering window*: a pod is backing off while ``floor(timestamp + backoff) >= floor(now)``) and
  pods of one window leave in QueueSort order; PreEnqueue runs on entering backoffQ. Pass
  ``pop_from_backoff_q=False`` for the plain behaviour (expiry = timestamp + backoff, backing off while
  ``expiry >= now``, pop waits for activeQ).
- Unscheduled-pod updates are judged per update sub-event by the rejecting plugins' hints; assigned-pod
  events go through the same hints (no cross-topology pre-filter: that is the QueueingHints-off path).
- A plugin registering ``Node/Add`` without ``Node/UpdateNodeTaint`` also gets ``Node/UpdateNodeTaint`` with an
  always-Queue hint (upstream's mitigation for issue 109437, still applied in 1.36).

Beyond upstream, to keep the operator simple: :meth:`~SchedulingQueue.add` of a pod the queue already holds is
an update (never a duplicate); a pod deleted while in flight is not requeued by its failure; the failure path
requeues the newest copy of the pod the queue was given while it was in flight (upstream re-reads its informer);
:meth:`~SchedulingQueue.reconfigure` swaps a profile's PreEnqueue and registrations without losing pods.

Every public method is synchronous, O(log n) or amortised O(1) per pod moved, and thread-safe (a lock), so
kopf handlers running in threads may call them; only :meth:`~SchedulingQueue.pop` awaits.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Generic, Protocol, TypeVar

from kopf_scheduler.framework.events import (
    ALL_EVENTS,
    BACKOFF_COMPLETE,
    EVENT_ASSIGNED_POD_ADD,
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_FORCE_ACTIVATE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULABLE_TIMEOUT,
    EVENT_UNSCHEDULED_POD_ADD,
    EVENT_UNSCHEDULED_POD_UPDATE,
    FORCE_ACTIVATE,
    SCHEDULE_ATTEMPT_FAILURE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
    node_scheduling_properties_change,
    object_uid,
    pod_scheduling_properties_change,
)
from kopf_scheduler.framework.status import Status
from kopf_scheduler.state.pod_info import PodInfo

log = logging.getLogger(__name__)

#: The sub-queue names, as the ``queue`` label of ``scheduler_pending_pods``.
ACTIVE_Q = "active"
BACKOFF_Q = "backoff"
UNSCHEDULABLE_Q = "unschedulable"
GATED = "gated"

#: Rejector name recorded when the PreEnqueue callable's Status names no plugin.
UNKNOWN_PRE_ENQUEUE_PLUGIN = "PreEnqueue"
#: Upstream ``backoffQOrderingWindowDuration``.
BACKOFF_ORDERING_WINDOW = 1.0

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class QueueClosedError(Exception):
    """Raised by :meth:`SchedulingQueue.pop` once the queue is closed (the profile is gone)."""


class _Strategy(IntEnum):
    """Upstream ``queueingStrategy``: what an event (or the in-flight replay) means for one pod."""

    SKIP = 0
    AFTER_BACKOFF = 1
    IMMEDIATELY = 2


@dataclass(slots=True, eq=False)
class QueuedPodInfo:
    """A pod and its queueing history. Satisfies :class:`kopf_scheduler.framework.interface.QueuedPod`.

    Before handing a failed pod back with :meth:`SchedulingQueue.add_unschedulable_if_not_present` the cycle
    replaces ``unschedulable_plugins`` / ``pending_plugins`` with the plugins that rejected it this time
    (:meth:`clear_rejector_plugins`, then fill); both empty means the cycle failed with an error.
    """

    pod: PodInfo
    #: When it (re)entered the queue (clock time); refreshed on every failure. QueueSort uses it.
    timestamp: float
    #: When it first entered activeQ (for the scheduling SLI metric); never reset.
    initial_attempt_timestamp: float | None = None
    #: Scheduling cycles started for it (incremented by pop).
    attempts: int = 0
    #: Plugins whose Unschedulable/UnschedulableAndUnresolvable verdict (or PreEnqueue gate) rejected it.
    unschedulable_plugins: set[str] = field(default_factory=set)
    #: Plugins that answered Pending (waiting for something external: requeued without backoff).
    pending_plugins: set[str] = field(default_factory=set)
    #: Rejected by PreEnqueue: parked in unschedulablePods, never popped, no FailedScheduling event.
    gated: bool = False
    #: The PreEnqueue Status message (``waiting for scheduling gates: [g1 g2]``).
    gating_message: str = ""
    #: Kept for the operator (it dedupes FailedScheduling events on it); the queue never reads it.
    last_failure_message: str = ""
    # -- beyond the contract --------------------------------------------------------------------------------
    #: Failures with a rejecting plugin; drives the backoff (1.35+).
    unschedulable_count: int = 0
    #: Failures in a row with an error (no rejecting plugin); drives the backoff while non-zero.
    consecutive_errors_count: int = 0
    #: The PreEnqueue plugin that gates it ("" when not gated).
    gating_plugin: str = ""
    #: Cached backoff expiry (cleared whenever timestamp or the counters change).
    backoff_expiration: float | None = None
    #: Moved out of unschedulablePods by the leftover flush since its last attempt (for logs/metrics).
    was_flushed_from_unschedulable: bool = False

    @property
    def uid(self) -> str:
        return self.pod.uid

    def clear_rejector_plugins(self) -> None:
        """Upstream ``ClearRejectorPlugins``: forget why it was rejected last time (and any gate)."""
        self.unschedulable_plugins.clear()
        self.pending_plugins.clear()
        self.gating_plugin = ""
        self.gated = False
        self.gating_message = ""


# -- heaps with lazy deletion ----------------------------------------------------------------------------------
LessFn = Callable[[QueuedPodInfo, QueuedPodInfo], bool]


class _Entry(Protocol):
    qpod: QueuedPodInfo
    alive: bool

    def __lt__(self, other: Any) -> bool: ...


class _ActiveEntry:
    """An activeQ slot: QueueSort order, then FIFO among pods QueueSort cannot tell apart."""

    __slots__ = ("alive", "less", "qpod", "seq")

    def __init__(self, qpod: QueuedPodInfo, seq: int, less: LessFn) -> None:
        self.qpod, self.seq, self.less, self.alive = qpod, seq, less, True

    def __lt__(self, other: _ActiveEntry) -> bool:
        if self.less(self.qpod, other.qpod):
            return True
        if self.less(other.qpod, self.qpod):
            return False
        return self.seq < other.seq


class _BackoffEntry:
    """A backoffQ slot: expiry first; within one expiry QueueSort order if ``less`` is set, then FIFO."""

    __slots__ = ("alive", "expiry", "less", "qpod", "seq")

    def __init__(self, qpod: QueuedPodInfo, seq: int, expiry: float, less: LessFn | None) -> None:
        self.qpod, self.seq, self.expiry, self.less, self.alive = qpod, seq, expiry, less, True

    def __lt__(self, other: _BackoffEntry) -> bool:
        if self.expiry != other.expiry:
            return self.expiry < other.expiry
        if self.less is not None:
            if self.less(self.qpod, other.qpod):
                return True
            if self.less(other.qpod, self.qpod):
                return False
        return self.seq < other.seq


E = TypeVar("E", bound=_Entry)


class _LazyHeap(Generic[E]):
    """A heapq heap indexed by pod UID. Removal marks the entry dead; dead entries are dropped when they
    surface and the heap is rebuilt once they outnumber the live ones, so every operation is O(log n)."""

    __slots__ = ("dead", "heap", "index")

    def __init__(self) -> None:
        self.heap: list[E] = []
        self.index: dict[str, E] = {}
        self.dead = 0

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, uid: object) -> bool:
        return uid in self.index

    def get(self, uid: str) -> E | None:
        return self.index.get(uid)

    def push(self, uid: str, entry: E) -> None:
        self.remove(uid)
        self.index[uid] = entry
        heapq.heappush(self.heap, entry)

    def remove(self, uid: str) -> E | None:
        entry = self.index.pop(uid, None)
        if entry is not None:
            entry.alive = False
            self.dead += 1
            if self.dead > 64 and self.dead > len(self.index):
                self.heap = [e for e in self.heap if e.alive]
                heapq.heapify(self.heap)
                self.dead = 0
        return entry

    def peek(self) -> E | None:
        heap = self.heap
        while heap and not heap[0].alive:
            heapq.heappop(heap)
            self.dead -= 1
        return heap[0] if heap else None

    def pop(self) -> E | None:
        entry = self.peek()
        if entry is not None:
            heapq.heappop(self.heap)
            del self.index[entry.qpod.uid]
        return entry

    def values(self) -> Iterable[E]:
        return self.index.values()


# -- the queue ------------------------------------------------------------------------------------------------
class SchedulingQueue:
    """Upstream's PriorityQueue for one profile. See the module docstring for the behaviour.

    ``less`` is the profile's QueueSort (``PrioritySort.less``); ``pre_enqueue`` runs the profile's PreEnqueue
    plugins and returns the first rejection (with ``Status.plugin`` set) or success; ``plugin_events`` maps each
    plugin that can reject to the events it registers (``queueing_hints.events_for_profile(profile)``). A plugin
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
    ) -> None:
        self._less = less
        self._pre_enqueue = pre_enqueue
        self._initial_backoff = float(initial_backoff)
        self._max_backoff = float(max_backoff)
        self._max_in_unschedulable = float(max_in_unschedulable)
        self._clock = clock
        self._pop_from_backoff_q = pop_from_backoff_q
        self._lock = threading.RLock()

        self._registrations: dict[str, list[ClusterEventWithHint]] = {}
        #: Rejector names without registrations: they fall back to ALL_EVENTS.
        self._unknown_plugins: set[str] = set()
        self._fallback_active = False
        self._interest_cache: dict[ClusterEvent, frozenset[str]] = {}
        self._set_registrations(plugin_events)

        self._active: _LazyHeap[_ActiveEntry] = _LazyHeap()
        self._backoff: _LazyHeap[_BackoffEntry] = _LazyHeap()
        self._error_backoff: _LazyHeap[_BackoffEntry] = _LazyHeap()
        self._unschedulable: dict[str, QueuedPodInfo] = {}
        #: Index of unschedulablePods by rejecting plugin, so an event visits only pods it could concern.
        self._unsched_by_plugin: dict[str, set[str]] = {}
        self._unsched_plugins: dict[str, frozenset[str]] = {}
        self._unsched_no_rejector: set[str] = set()
        self._unsched_gated: set[str] = set()
        self._unsched_order: dict[str, int] = {}

        #: uid → (marker sequence number, pod) of pods popped and not yet done.
        self._in_flight: dict[str, tuple[int, QueuedPodInfo]] = {}
        #: The newest copy of an in-flight pod seen by update(); requeued instead of the stale one.
        self._in_flight_latest: dict[str, PodInfo] = {}
        self._deleted_in_flight: set[str] = set()
        #: (sequence number, event, old, new) recorded while pods were in flight, oldest first.
        self._event_log: list[tuple[int, ClusterEvent, Any, Any]] = []
        self._event_log_head = 0

        self._seq = 0
        self._scheduling_cycle = 0
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []

    # -- introspection ------------------------------------------------------------------------------------------
    def __contains__(self, uid: object) -> bool:
        """Whether the pod waits in activeQ, backoffQ or unschedulablePods (in-flight pods are not queued)."""
        with self._lock:
            return isinstance(uid, str) and self._where(uid) is not None

    def __len__(self) -> int:
        """Pending pods: activeQ + backoffQ + unschedulablePods (gated included; in-flight excluded)."""
        with self._lock:
            return len(self._active) + len(self._backoff) + len(self._error_backoff) + len(self._unschedulable)

    def pending_pods(self) -> dict[str, int]:
        """Counts per ``scheduler_pending_pods{queue}`` label: active, backoff, unschedulable, gated."""
        with self._lock:
            gated = len(self._unsched_gated)
            return {
                ACTIVE_Q: len(self._active),
                BACKOFF_Q: len(self._backoff) + len(self._error_backoff),
                UNSCHEDULABLE_Q: len(self._unschedulable) - gated,
                GATED: gated,
            }

    def get(self, uid: str) -> QueuedPodInfo | None:
        """The queued (or in-flight) entry of a pod."""
        with self._lock:
            where = self._where(uid)
            if where is not None:
                return self._lookup(uid, where)
            flight = self._in_flight.get(uid)
            return flight[1] if flight is not None else None

    def location(self, uid: str) -> str | None:
        """``active`` / ``backoff`` / ``unschedulable`` / ``gated`` / ``in-flight``, or None if unknown."""
        with self._lock:
            where = self._where(uid)
            if where == UNSCHEDULABLE_Q and uid in self._unsched_gated:
                return GATED
            if where is None and uid in self._in_flight:
                return "in-flight"
            return where

    def in_flight(self, uid: str) -> bool:
        with self._lock:
            return uid in self._in_flight

    @property
    def scheduling_cycle(self) -> int:
        """Upstream ``SchedulingCycle()``: incremented by every pop."""
        return self._scheduling_cycle

    @property
    def closed(self) -> bool:
        return self._closed

    # -- pods entering and changing ------------------------------------------------------------------------
    def add(self, pod: PodInfo) -> None:
        """A new unscheduled pod: PreEnqueue, then activeQ, or unschedulablePods if gated.

        A pod the queue already holds (or has in flight) is treated as an update, so re-listing never makes
        duplicates. Bound or finished pods are ignored.
        """
        with self._lock:
            if pod.node_name or pod.phase in _TERMINAL_PHASES:
                return
            known = self._known_pod(pod.uid)
            if known is not None:
                self._update(known, pod)
                return
            qpod = QueuedPodInfo(pod, self._clock())
            if self._move_to_active(qpod, EVENT_UNSCHEDULED_POD_ADD.label, from_backoff=False):
                self._wake()

    def update(self, old: PodInfo | None, new: PodInfo) -> None:
        """An unscheduled pod changed (upstream ``Update``).

        In activeQ/backoffQ it is replaced in place; in unschedulablePods each update sub-event (labels,
        tolerations, scheduling gates removed, scale-down …) is put to the rejecting plugins' hints, so a pod
        whose gates were removed re-runs PreEnqueue and goes to activeQ; in flight, the sub-events are
        recorded for its return; unknown, it is added. An update that binds or finishes the pod removes it.
        The caller skips pods assumed by the cache (upstream does not requeue assumed pods).
        """
        with self._lock:
            if new.node_name or new.phase in _TERMINAL_PHASES:
                self._delete(new.uid)
                return
            self._update(old, new)

    def delete(self, uid: str) -> None:
        """The pod is gone (or bound): remove it from wherever it is. An in-flight pod is not requeued later."""
        with self._lock:
            self._delete(uid)

    def activate(self, uids: Iterable[str]) -> None:
        """Upstream ``Activate``: move these pods from backoffQ/unschedulablePods to activeQ now (PreEnqueue
        still applies). An in-flight pod gets a ForceActivate event recorded so it requeues on failure."""
        with self._lock:
            woke = False
            for uid in uids:
                qpod = self._unschedulable.get(uid)
                from_backoff = False
                if qpod is None:
                    entry = self._backoff.remove(uid) or self._error_backoff.remove(uid)
                    if entry is not None:
                        qpod, from_backoff = entry.qpod, True
                if qpod is not None:
                    woke |= self._move_to_active(qpod, FORCE_ACTIVATE, from_backoff=from_backoff)
                elif uid in self._in_flight:
                    self._record(EVENT_FORCE_ACTIVATE, None, self._in_flight[uid][1].pod)
            if woke:
                self._wake()

    # -- the scheduling loop side --------------------------------------------------------------------------
    async def pop(self) -> QueuedPodInfo:
        """The next pod to schedule, waiting while there is none; marks it in flight and counts the attempt.

        Raises :class:`QueueClosedError` once the queue is closed (waiting callers are woken).
        """
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._closed:
                    raise QueueClosedError("the scheduling queue is closed")
                qpod = self._pop()
                if qpod is not None:
                    return qpod
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with self._lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    def pop_nowait(self) -> QueuedPodInfo | None:
        """Like :meth:`pop` but returns None instead of waiting (and after close)."""
        with self._lock:
            return None if self._closed else self._pop()

    def done(self, uid: str) -> None:
        """The pod's cycle finished (bound, or handed back): stop tracking it as in flight."""
        with self._lock:
            self._done(uid)

    def add_unschedulable_if_not_present(self, qpod: QueuedPodInfo, *, scheduling_cycle: int | None = None) -> None:
        """Hand a pod back after a failed cycle (upstream ``AddUnschedulableIfNotPresent``); also ends its flight.

        Counts the failure (rejection or error), refreshes its timestamp, then replays the events recorded
        while it was in flight through its rejecting plugins' hints: none says Queue → unschedulablePods;
        a Pending plugin's Queue → activeQ at once; otherwise backoffQ, or activeQ if its backoff has already
        passed. A pod with no rejecting plugin (an error) always goes to the error backoffQ.
        ``scheduling_cycle`` is accepted for upstream parity; the in-flight event replay supersedes it.
        """
        with self._lock:
            uid = qpod.uid
            try:
                if uid in self._deleted_in_flight:
                    return
                if self._where(uid) is not None:
                    log.warning("pod %s is handed back but already queued; ignoring", qpod.pod.key)
                    return
                latest = self._in_flight_latest.get(uid)
                if latest is not None:
                    if latest.node_name or latest.phase in _TERMINAL_PHASES:
                        return
                    qpod.pod = latest
                if not qpod.unschedulable_plugins and not qpod.pending_plugins:
                    qpod.consecutive_errors_count += 1
                else:
                    qpod.unschedulable_count += 1
                    qpod.consecutive_errors_count = 0
                qpod.timestamp = self._clock()
                qpod.backoff_expiration = None
                qpod.was_flushed_from_unschedulable = False
                self._note_plugins(qpod.unschedulable_plugins | qpod.pending_plugins)
                strategy = self._strategy_for_in_flight(qpod)
                where = self._requeue(qpod, strategy, SCHEDULE_ATTEMPT_FAILURE)
                log.debug(
                    "pod %s requeued to %s after a failed cycle (rejectors %s)",
                    qpod.pod.key,
                    where,
                    sorted(qpod.unschedulable_plugins | qpod.pending_plugins),
                )
                if where != UNSCHEDULABLE_Q:
                    self._wake()
            finally:
                self._done(uid)

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
        with self._lock:
            if not self._is_event_of_interest(event):
                return
            self._move_pods(self._candidates(event, pre_check), event, old, new)

    def node_added(self, node: Any) -> None:
        self.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node)

    def node_updated(self, old: Any, new: Any) -> None:
        """A node changed: one move per update sub-event (labels, taints, allocatable …)."""
        for event in node_scheduling_properties_change(new, old):
            self.move_all_to_active_or_backoff(event, old, new)

    def node_deleted(self, node: Any) -> None:
        self.move_all_to_active_or_backoff(EVENT_NODE_DELETE, node, None)

    def assigned_pod_added(self, pod: PodInfo) -> None:
        """A bound pod appeared (upstream, QueueingHints on: ``MoveAll(AssignedPodAdd)``)."""
        self.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, pod)

    def assigned_pod_updated(self, old: PodInfo, new: PodInfo) -> None:
        """A bound pod changed: one move per update sub-event (labels, scale-down …)."""
        for event in pod_scheduling_properties_change(new, old):
            self.move_all_to_active_or_backoff(event, old, new)

    def assigned_pod_deleted(self, pod: PodInfo) -> None:
        """A bound pod went away (or an assumed pod was forgotten)."""
        self.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)

    # -- periodic work -------------------------------------------------------------------------------------
    def flush_backoff_completed(self) -> None:
        """Move pods whose backoff is over from backoffQ to activeQ (upstream runs this every second)."""
        with self._lock:
            woke = False
            for heap in (self._backoff, self._error_backoff):
                while (entry := heap.peek()) is not None and not self._is_backing_off(entry.qpod):
                    heap.pop()
                    woke |= self._move_to_active(entry.qpod, BACKOFF_COMPLETE, from_backoff=True)
            if woke:
                self._wake()

    def flush_unschedulable_leftover(self) -> None:
        """Move pods that sat in unschedulablePods longer than ``max_in_unschedulable`` (every ~30 s).

        Gated pods stay: the timeout is a wildcard event and gates lift only through the pod's own update.
        """
        with self._lock:
            now = self._clock()
            stale = [q for q in self._unschedulable.values() if now - q.timestamp > self._max_in_unschedulable]
            for qpod in stale:
                qpod.was_flushed_from_unschedulable = True
            if stale:
                self._move_pods(stale, EVENT_UNSCHEDULABLE_TIMEOUT, None, None)

    def reconfigure(
        self,
        *,
        pre_enqueue: Callable[[PodInfo], Status],
        plugin_events: Mapping[str, Sequence[ClusterEventWithHint]] | None,
    ) -> None:
        """The profile changed (hot reload): swap its PreEnqueue and registrations, keeping every pending pod.

        Gated pods are judged again by the new PreEnqueue (a removed gate plugin releases them); rejected pods
        keep waiting, now for the events the new registrations (or, for plugins no longer registered, any
        event) allow. Upstream has no equivalent: it restarts on configuration changes.
        """
        with self._lock:
            self._pre_enqueue = pre_enqueue
            self._set_registrations(plugin_events)
            for qpod in self._unschedulable.values():
                self._note_plugins(qpod.unschedulable_plugins | qpod.pending_plugins)
            woke = False
            for qpod in [q for q in self._unschedulable.values() if q.gated]:
                woke |= self._requeue(qpod, _Strategy.AFTER_BACKOFF, FORCE_ACTIVATE) != UNSCHEDULABLE_Q
            if woke:
                self._wake()

    def close(self) -> None:
        """Stop: pending and future :meth:`pop` calls raise :class:`QueueClosedError`; in-flight tracking ends."""
        with self._lock:
            self._closed = True
            for uid in list(self._in_flight):
                self._done(uid)
            self._wake()

    # == internals (called with the lock held) ===================================================================
    def _where(self, uid: str) -> str | None:
        if uid in self._active:
            return ACTIVE_Q
        if uid in self._backoff or uid in self._error_backoff:
            return BACKOFF_Q
        if uid in self._unschedulable:
            return UNSCHEDULABLE_Q
        return None

    def _lookup(self, uid: str, where: str) -> QueuedPodInfo:
        if where == ACTIVE_Q:
            entry: _Entry | None = self._active.get(uid)
        elif where == BACKOFF_Q:
            entry = self._backoff.get(uid) or self._error_backoff.get(uid)
        else:
            return self._unschedulable[uid]
        assert entry is not None
        return entry.qpod

    def _known_pod(self, uid: str) -> PodInfo | None:
        where = self._where(uid)
        if where is not None:
            return self._lookup(uid, where).pod
        if uid in self._in_flight:
            return self._in_flight_latest.get(uid) or self._in_flight[uid][1].pod
        return None

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- placing pods: each placement removes the pod from the other structures first ---------------------
    def _push_active(self, qpod: QueuedPodInfo) -> None:
        uid = qpod.uid
        self._remove_unschedulable(uid)
        self._backoff.remove(uid)
        self._error_backoff.remove(uid)
        previous = self._active.get(uid)
        seq = previous.seq if previous is not None else self._next_seq()
        self._active.push(uid, _ActiveEntry(qpod, seq, self._less))

    def _push_backoff(self, qpod: QueuedPodInfo) -> None:
        uid = qpod.uid
        self._remove_unschedulable(uid)
        self._active.remove(uid)
        expiry = self._backoff_time(qpod)
        key = -math.inf if expiry is None else expiry
        if qpod.unschedulable_plugins or qpod.pending_plugins:
            heap, other = self._backoff, self._error_backoff
            less: LessFn | None = self._less if self._pop_from_backoff_q else None
        else:
            heap, other, less = self._error_backoff, self._backoff, None
        other.remove(uid)
        previous = heap.get(uid)
        seq = previous.seq if previous is not None else self._next_seq()
        heap.push(uid, _BackoffEntry(qpod, seq, key, less))

    def _put_unschedulable(self, qpod: QueuedPodInfo) -> None:
        uid = qpod.uid
        self._active.remove(uid)
        self._backoff.remove(uid)
        self._error_backoff.remove(uid)
        self._unindex(uid)
        if uid not in self._unschedulable:
            self._unsched_order[uid] = self._next_seq()
        self._unschedulable[uid] = qpod
        plugins = frozenset(qpod.unschedulable_plugins | qpod.pending_plugins)
        self._note_plugins(plugins)
        self._unsched_plugins[uid] = plugins
        if plugins:
            for plugin in plugins:
                self._unsched_by_plugin.setdefault(plugin, set()).add(uid)
        else:
            self._unsched_no_rejector.add(uid)
        if qpod.gated:
            self._unsched_gated.add(uid)

    def _unindex(self, uid: str) -> None:
        for plugin in self._unsched_plugins.pop(uid, ()):
            uids = self._unsched_by_plugin.get(plugin)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._unsched_by_plugin[plugin]
        self._unsched_no_rejector.discard(uid)
        self._unsched_gated.discard(uid)

    def _remove_unschedulable(self, uid: str) -> QueuedPodInfo | None:
        qpod = self._unschedulable.pop(uid, None)
        if qpod is not None:
            self._unindex(uid)
            del self._unsched_order[uid]
        return qpod

    def _delete(self, uid: str) -> None:
        self._active.remove(uid)
        self._backoff.remove(uid)
        self._error_backoff.remove(uid)
        self._remove_unschedulable(uid)
        if uid in self._in_flight:
            self._deleted_in_flight.add(uid)

    # -- PreEnqueue and the three moves (upstream moveToActiveQ / moveToBackoffQ / requeue…Strategy) --------
    def _run_pre_enqueue(self, qpod: QueuedPodInfo) -> None:
        try:
            status = self._pre_enqueue(qpod.pod)
        except Exception as exc:  # a broken plugin gates the pod (upstream treats Error like a rejection)
            log.exception("PreEnqueue failed for pod %s", qpod.pod.key)
            status = Status.as_error(exc)
        if status.is_success:
            qpod.gating_plugin, qpod.gated, qpod.gating_message = "", False, ""
            return
        plugin = status.plugin or UNKNOWN_PRE_ENQUEUE_PLUGIN
        qpod.unschedulable_plugins.add(plugin)
        qpod.gating_plugin, qpod.gated, qpod.gating_message = plugin, True, status.message

    def _move_to_active(self, qpod: QueuedPodInfo, event: str, *, from_backoff: bool) -> bool:
        # With PopFromBackoffQ, PreEnqueue already ran when the pod entered backoffQ.
        if not (self._pop_from_backoff_q and from_backoff):
            self._run_pre_enqueue(qpod)
        uid = qpod.uid
        if qpod.gated:
            if uid in self._active or uid in self._backoff or uid in self._error_backoff:
                return False
            self._put_unschedulable(qpod)
            log.debug("pod %s gated by %s (%s)", qpod.pod.key, qpod.gating_plugin, event)
            return False
        if qpod.initial_attempt_timestamp is None:
            qpod.initial_attempt_timestamp = self._clock()
        self._push_active(qpod)
        return True

    def _move_to_backoff(self, qpod: QueuedPodInfo, event: str) -> bool:
        if self._pop_from_backoff_q:
            self._run_pre_enqueue(qpod)
            if qpod.gated:
                self._put_unschedulable(qpod)
                return False
        self._push_backoff(qpod)
        return True

    def _requeue(self, qpod: QueuedPodInfo, strategy: _Strategy, event: str) -> str:
        """Place a pod by strategy; returns where it went."""
        if strategy is _Strategy.SKIP:
            self._put_unschedulable(qpod)
            return UNSCHEDULABLE_Q
        if strategy is _Strategy.AFTER_BACKOFF and self._is_backing_off(qpod):
            return BACKOFF_Q if self._move_to_backoff(qpod, event) else UNSCHEDULABLE_Q
        return ACTIVE_Q if self._move_to_active(qpod, event, from_backoff=False) else UNSCHEDULABLE_Q

    # -- backoff ----------------------------------------------------------------------------------------
    def _align(self, t: float) -> float:
        if not self._pop_from_backoff_q:
            return t
        return math.floor(t / BACKOFF_ORDERING_WINDOW) * BACKOFF_ORDERING_WINDOW

    def backoff_duration(self, count: int) -> float:
        """``initial · 2^(count−1)``, capped at ``max``; 0 for a pod never rejected."""
        if count <= 0:
            return 0.0
        duration = self._initial_backoff
        for _ in range(1, count):
            if duration > self._max_backoff - duration:
                return self._max_backoff
            duration += duration
        return min(duration, self._max_backoff)

    def _backoff_time(self, qpod: QueuedPodInfo) -> float | None:
        """Upstream ``getBackoffTime``: the (window-aligned) expiry, cached; None when there is no backoff."""
        if self._max_backoff == 0:
            return None
        count = qpod.consecutive_errors_count or qpod.unschedulable_count
        if count == 0:
            return None
        if qpod.backoff_expiration is None:
            qpod.backoff_expiration = self._align(qpod.timestamp + self.backoff_duration(count))
        return qpod.backoff_expiration

    def _is_backing_off(self, qpod: QueuedPodInfo) -> bool:
        expiry = self._backoff_time(qpod)
        # Still backing off while the expiry is not before now (its window, with PopFromBackoffQ).
        return expiry is not None and expiry >= self._align(self._clock())

    # -- pop / done / in-flight events ------------------------------------------------------------------
    def _pop(self) -> QueuedPodInfo | None:
        while True:
            entry = self._active.pop()
            if entry is None and self._pop_from_backoff_q:
                # Idle: retry the soonest-expiring rejected pod early rather than waste the cycle.
                entry = self._backoff.pop()
            if entry is None:
                return None
            qpod = entry.qpod
            if qpod.uid in self._in_flight:  # cannot happen through this API; upstream discards such pods
                log.error("pod %s popped while already in flight; discarding", qpod.pod.key)
                continue
            qpod.attempts += 1
            self._scheduling_cycle += 1
            if qpod.initial_attempt_timestamp is None:
                qpod.initial_attempt_timestamp = self._clock()
            self._in_flight[qpod.uid] = (self._next_seq(), qpod)
            return qpod

    def _done(self, uid: str) -> None:
        self._in_flight_latest.pop(uid, None)
        self._deleted_in_flight.discard(uid)
        if self._in_flight.pop(uid, None) is None:
            return
        # Events older than every remaining in-flight pod can no longer matter.
        if not self._in_flight:
            self._event_log.clear()
            self._event_log_head = 0
            return
        oldest = min(seq for seq, _ in self._in_flight.values())
        self._event_log_head = bisect.bisect_right(
            self._event_log, oldest, lo=self._event_log_head, key=lambda item: item[0]
        )
        if self._event_log_head > 1024 and self._event_log_head * 2 > len(self._event_log):
            del self._event_log[: self._event_log_head]
            self._event_log_head = 0

    def _record(self, event: ClusterEvent, old: Any, new: Any) -> None:
        self._event_log.append((self._next_seq(), event, old, new))

    def _strategy_for_in_flight(self, qpod: QueuedPodInfo) -> _Strategy:
        """Upstream ``determineSchedulingHintForInFlightPod``: replay the events seen while it was in flight."""
        if not qpod.unschedulable_plugins and not qpod.pending_plugins:
            return _Strategy.AFTER_BACKOFF
        flight = self._in_flight.get(qpod.uid)
        if flight is None:
            return _Strategy.AFTER_BACKOFF  # not popped through this queue: retry rather than strand it
        start = bisect.bisect_right(self._event_log, flight[0], lo=self._event_log_head, key=lambda item: item[0])
        strategy = _Strategy.SKIP
        for _, event, old, new in self._event_log[start:]:
            verdict = self._worth_requeuing(qpod, event, old, new)
            if verdict is _Strategy.IMMEDIATELY:
                return verdict
            if verdict is _Strategy.AFTER_BACKOFF:
                strategy = verdict
                if not qpod.pending_plugins:
                    return strategy
        return strategy

    def _update(self, old: PodInfo | None, new: PodInfo) -> None:
        uid = new.uid
        events = [EVENT_UNSCHEDULED_POD_UPDATE] if old is None else pod_scheduling_properties_change(new, old)
        if uid in self._in_flight:
            self._in_flight_latest[uid] = new
            for event in events:
                self._record(event, old, new)
            return
        entry = self._active.get(uid)
        if entry is not None:
            entry.qpod.pod = new
            self._push_active(entry.qpod)  # re-sort: what QueueSort reads may have changed
            return
        backoff_entry = self._backoff.get(uid) or self._error_backoff.get(uid)
        if backoff_entry is not None:
            backoff_entry.qpod.pod = new
            self._push_backoff(backoff_entry.qpod)
            return
        qpod = self._unschedulable.get(uid)
        if qpod is not None:
            qpod.pod = new
            for event in events:
                where = self._requeue(qpod, self._worth_requeuing(qpod, event, old, new), event.label)
                if where != UNSCHEDULABLE_Q:
                    self._wake()
                    break
            return
        qpod = QueuedPodInfo(new, self._clock())
        if self._move_to_active(qpod, EVENT_UNSCHEDULED_POD_UPDATE.label, from_backoff=False):
            self._wake()

    # -- hints --------------------------------------------------------------------------------------------
    def _set_registrations(self, plugin_events: Mapping[str, Sequence[ClusterEventWithHint]] | None) -> None:
        self._registrations = {
            plugin: _with_node_taint_mitigation(events) for plugin, events in (plugin_events or {}).items()
        }
        self._unknown_plugins = set()
        self._fallback_active = plugin_events is None
        self._interest_cache.clear()

    def _note_plugins(self, plugins: Iterable[str]) -> None:
        for plugin in plugins:
            if plugin not in self._registrations and plugin not in self._unknown_plugins:
                self._unknown_plugins.add(plugin)
                self._fallback_active = True
                self._interest_cache.clear()

    def _registrations_of(self, plugin: str) -> Sequence[ClusterEventWithHint]:
        found = self._registrations.get(plugin)
        return ALL_EVENTS if found is None else found

    def _interested_plugins(self, event: ClusterEvent) -> frozenset[str]:
        """Plugins (registered, or seen and unregistered) with a registration matching ``event``."""
        found = self._interest_cache.get(event)
        if found is None:
            names = {p for p, regs in self._registrations.items() if any(r.event.matches(event) for r in regs)}
            if any(r.event.matches(event) for r in ALL_EVENTS):
                names |= self._unknown_plugins
            found = self._interest_cache[event] = frozenset(names)
        return found

    def _is_event_of_interest(self, event: ClusterEvent) -> bool:
        """Upstream ``isEventOfInterest``: uninteresting events are dropped (not even recorded in flight)."""
        if event.is_wildcard or self._interested_plugins(event):
            return True
        return self._fallback_active and any(r.event.matches(event) for r in ALL_EVENTS)

    def _worth_requeuing(self, qpod: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any) -> _Strategy:
        """Upstream ``isPodWorthRequeuing``: ask only the plugins that rejected this pod."""
        pending = qpod.pending_plugins
        if not qpod.unschedulable_plugins and not pending:
            return _Strategy.AFTER_BACKOFF
        if event.is_wildcard:
            if new is not None and object_uid(new) != qpod.uid:
                return _Strategy.SKIP  # a wildcard aimed at another pod
            return _Strategy.AFTER_BACKOFF
        strategy = _Strategy.SKIP
        # Pending plugins first: their Queue skips the backoff, the strongest answer.
        for plugin in (*sorted(pending), *sorted(qpod.unschedulable_plugins - pending)):
            for registration in self._registrations_of(plugin):
                if not registration.event.matches(event):
                    continue
                if self._hint(plugin, registration, qpod, event, old, new) is QueueingHint.QUEUE_SKIP:
                    continue
                if plugin in pending:
                    return _Strategy.IMMEDIATELY
                if not pending:
                    return _Strategy.AFTER_BACKOFF
                strategy = _Strategy.AFTER_BACKOFF
        return strategy

    @staticmethod
    def _hint(
        plugin: str, registration: ClusterEventWithHint, qpod: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any
    ) -> QueueingHint:
        if registration.hint is None:
            return QueueingHint.QUEUE
        try:
            return QueueingHint(registration.hint(qpod.pod, old, new))
        except Exception:
            # A failing hint must not strand the pod: count it as Queue (upstream does the same).
            log.warning("QueueingHint of %s failed for pod %s on %s", plugin, qpod.pod.key, event.label, exc_info=True)
            return QueueingHint.QUEUE

    def _candidates(self, event: ClusterEvent, pre_check: Callable[[PodInfo], bool] | None) -> list[QueuedPodInfo]:
        if event.is_wildcard:
            pods = list(self._unschedulable.values())
        else:
            uids = set(self._unsched_no_rejector)
            for plugin in self._interested_plugins(event):
                uids |= self._unsched_by_plugin.get(plugin, set())
            if len(uids) * 8 < len(self._unschedulable):
                pods = [self._unschedulable[uid] for uid in sorted(uids, key=self._unsched_order.__getitem__)]
            else:
                pods = [qpod for uid, qpod in self._unschedulable.items() if uid in uids]
        if pre_check is not None:
            pods = [qpod for qpod in pods if pre_check(qpod.pod)]
        return pods

    def _move_pods(self, pods: Iterable[QueuedPodInfo], event: ClusterEvent, old: Any, new: Any) -> None:
        """Upstream ``movePodsToActiveOrBackoffQueue``."""
        if not self._is_event_of_interest(event):
            return
        woke = False
        for qpod in pods:
            if qpod.gated and not any(r.event.matches(event) for r in self._registrations_of(qpod.gating_plugin)):
                continue  # only events of interest to the gating plugin can lift a gate
            strategy = self._worth_requeuing(qpod, event, old, new)
            if strategy is _Strategy.SKIP:
                continue
            self._remove_unschedulable(qpod.uid)
            if self._requeue(qpod, strategy, event.label) != UNSCHEDULABLE_Q:
                woke = True
        if self._in_flight:
            self._record(event, old, new)
        if woke:
            self._wake()

    # -- waking pop() ------------------------------------------------------------------------------------
    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        if not waiters:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for waiter in waiters:
            loop = waiter.get_loop()
            if loop is running:
                _resolve(waiter)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, waiter)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _with_node_taint_mitigation(events: Sequence[ClusterEventWithHint]) -> list[ClusterEventWithHint]:
    """Upstream ``buildQueueingHintMap``: a plugin that registers Node/Add but not Node/UpdateNodeTaint also
    gets Node/UpdateNodeTaint with an always-Queue hint (issue 109437; still done in 1.36)."""
    result = list(events)
    node_add = any(r.event.resource is EventResource.NODE and r.event.action_type & ActionType.ADD for r in result)
    node_taint = any(
        r.event.resource is EventResource.NODE and r.event.action_type & ActionType.UPDATE_NODE_TAINT for r in result
    )
    if node_add and not node_taint:
        result.append(ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)))
    return result


__all__ = [
    "ACTIVE_Q",
    "BACKOFF_Q",
    "GATED",
    "UNSCHEDULABLE_Q",
    "QueueClosedError",
    "QueuedPodInfo",
    "SchedulingQueue",
]
