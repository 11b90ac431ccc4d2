"""backoffQ: pods worth retrying that still pay their backoff, upstream's ``backoffQueue``
(``pkg/scheduler/backend/queue/backoff_queue.go``, v1.36).

Two heaps ordered by backoff expiry, as upstream: rejected pods (a plugin said Unschedulable or Pending) and
pods whose cycle failed with an error (upstream's ``podErrorBackoffQ``). The backoff is ``initial · 2^(n−1)``
capped at ``max`` (1, 2, 4, 8, 10, 10 s), n being ``consecutive_errors_count`` while the pod fails with
errors, else ``unschedulable_count`` (1.35+; ≤1.34 counted attempts). A pod never rejected has no backoff.

With SchedulerPopFromBackoffQ (beta, on in 1.36) expiries are aligned down to whole seconds (upstream's
``backoffQOrderingWindowDuration``): a pod is backing off while ``floor(expiry) >= floor(now)``, and the
rejected pods of one window leave in QueueSort order, so the queue may pop the head early when activeQ is
empty. Without the gate the expiry is exact and pods of equal expiry leave first-in first-out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from kopf_scheduler.queue.heap import LazyHeap
from kopf_scheduler.queue.queued_pod import LessFn, QueuedPodInfo

#: Upstream ``backoffQOrderingWindowDuration``.
BACKOFF_ORDERING_WINDOW = 1.0


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


def backoff_duration(count: int, initial: float, maximum: float) -> float:
    """Upstream ``calculateBackoffDuration``: ``initial · 2^(count−1)``, capped at ``maximum``; 0 if count ≤ 0."""
    if count <= 0:
        return 0.0
    duration = initial
    for _ in range(1, count):
        if duration > maximum - duration:
            return maximum
        duration += duration
    return min(duration, maximum)


class BackoffQueue:
    """The two backoff heaps of one profile, and the backoff policy that orders them."""

    __slots__ = ("_clock", "_errors", "_initial", "_less", "_max", "_ordering_window", "_rejected", "_seq")

    def __init__(
        self,
        *,
        less: LessFn,
        seq: Iterator[int],
        clock: Callable[[], float],
        initial_backoff: float,
        max_backoff: float,
        pop_from_backoff_q: bool,
    ) -> None:
        self._less = less
        self._seq = seq
        self._clock = clock
        self._initial = float(initial_backoff)
        self._max = float(max_backoff)
        #: SchedulerPopFromBackoffQ: whole-second windows, QueueSort order within one.
        self._ordering_window = pop_from_backoff_q
        self._rejected: LazyHeap[_BackoffEntry] = LazyHeap()
        self._errors: LazyHeap[_BackoffEntry] = LazyHeap()

    def __len__(self) -> int:
        return len(self._rejected) + len(self._errors)

    def __contains__(self, uid: object) -> bool:
        return uid in self._rejected or uid in self._errors

    # -- the policy ------------------------------------------------------------------------------------------
    def duration(self, count: int) -> float:
        """The backoff after ``count`` failures (0 for a pod never rejected)."""
        return backoff_duration(count, self._initial, self._max)

    def expiry(self, qpod: QueuedPodInfo) -> float | None:
        """Upstream ``getBackoffTime``: the (window-aligned) expiry, cached; None when there is no backoff."""
        if self._max == 0:
            return None
        count = qpod.consecutive_errors_count or qpod.unschedulable_count
        if count == 0:
            return None
        if qpod.backoff_expiration is None:
            qpod.backoff_expiration = self._align(qpod.timestamp + self.duration(count))
        return qpod.backoff_expiration

    def is_backing_off(self, qpod: QueuedPodInfo) -> bool:
        """Upstream ``isPodBackingoff``: the expiry is not before now (its window, with PopFromBackoffQ)."""
        expiry = self.expiry(qpod)
        return expiry is not None and expiry >= self._align(self._clock())

    def _align(self, t: float) -> float:
        if not self._ordering_window:
            return t
        return math.floor(t / BACKOFF_ORDERING_WINDOW) * BACKOFF_ORDERING_WINDOW

    # -- the heaps -------------------------------------------------------------------------------------------
    def get(self, uid: str) -> QueuedPodInfo | None:
        entry = self._rejected.get(uid) or self._errors.get(uid)
        return None if entry is None else entry.qpod

    def push(self, qpod: QueuedPodInfo) -> None:
        """Add the pod (or re-sort it, keeping its FIFO rank) on the heap its last failure calls for."""
        uid = qpod.uid
        expiry = self.expiry(qpod)
        key = -math.inf if expiry is None else expiry
        if qpod.failed_with_error:
            heap, other, less = self._errors, self._rejected, None
        else:
            heap, other = self._rejected, self._errors
            less = self._less if self._ordering_window else None
        other.remove(uid)
        previous = heap.get(uid)
        seq = previous.seq if previous is not None else next(self._seq)
        heap.push(uid, _BackoffEntry(qpod, seq, key, less))

    def remove(self, uid: str) -> QueuedPodInfo | None:
        entry = self._rejected.remove(uid) or self._errors.remove(uid)
        return None if entry is None else entry.qpod

    def values(self) -> Iterator[QueuedPodInfo]:
        """The pods backing off (rejected, then errors), in no particular order."""
        return (entry.qpod for heap in (self._rejected, self._errors) for entry in heap.values())

    def pop_rejected(self) -> QueuedPodInfo | None:
        """The soonest-expiring rejected pod, taken out whatever its expiry (PopFromBackoffQ's early pop)."""
        entry = self._rejected.pop()
        return None if entry is None else entry.qpod

    def pop_completed(self) -> Iterator[QueuedPodInfo]:
        """Upstream ``popAllBackoffCompleted``: take out, one by one, every pod whose backoff is over
        (rejected pods first, then errors)."""
        for heap in (self._rejected, self._errors):
            while (entry := heap.peek()) is not None and not self.is_backing_off(entry.qpod):
                heap.pop()
                yield entry.qpod
