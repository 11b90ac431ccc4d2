"""activeQ: the pods to try now, upstream's ``activeQueue`` (``pkg/scheduler/backend/queue/active_queue.go``).

A heap in the profile's QueueSort order (``PrioritySort.less``: priority, then timestamp); pods QueueSort
cannot tell apart leave first-in first-out. Upstream's activeQueue also owns the in-flight pods and events;
here they live in :mod:`kopf_scheduler.queue.in_flight`, and the queue facade ties the two together in pop.
"""

from __future__ import annotations

from collections.abc import Iterator

from kopf_scheduler.queue.heap import LazyHeap
from kopf_scheduler.queue.queued_pod import LessFn, QueuedPodInfo


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


class ActiveQueue:
    """activeQ of one profile. ``seq`` numbers arrivals (shared with the other sub-queues of the profile)."""

    __slots__ = ("_heap", "_less", "_seq")

    def __init__(self, less: LessFn, seq: Iterator[int]) -> None:
        self._less = less
        self._seq = seq
        self._heap: LazyHeap[_ActiveEntry] = LazyHeap()

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, uid: object) -> bool:
        return uid in self._heap

    def get(self, uid: str) -> QueuedPodInfo | None:
        entry = self._heap.get(uid)
        return None if entry is None else entry.qpod

    def push(self, qpod: QueuedPodInfo) -> None:
        """Add the pod, or re-sort it in place (it keeps its FIFO rank) when QueueSort's inputs changed."""
        previous = self._heap.get(qpod.uid)
        seq = previous.seq if previous is not None else next(self._seq)
        self._heap.push(qpod.uid, _ActiveEntry(qpod, seq, self._less))

    def remove(self, uid: str) -> QueuedPodInfo | None:
        entry = self._heap.remove(uid)
        return None if entry is None else entry.qpod

    def values(self) -> Iterator[QueuedPodInfo]:
        """The queued pods, in no particular order."""
        return (entry.qpod for entry in self._heap.values())

    def pop(self) -> QueuedPodInfo | None:
        """The head (QueueSort's first pod), taken out; None when empty."""
        entry = self._heap.pop()
        return None if entry is None else entry.qpod
