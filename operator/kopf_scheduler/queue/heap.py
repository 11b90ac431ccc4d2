"""A heap keyed by pod UID: upstream's ``pkg/scheduler/backend/heap`` (``heap.go``), restated on ``heapq``.

Upstream keeps an index from key to heap position and fixes the heap in place on update or delete. ``heapq``
has no such operation, so removal here marks the entry dead instead; dead entries are dropped when they
surface at the top and the whole heap is rebuilt once they outnumber the live ones. Every operation stays
O(log n) amortised. activeQ and both backoff heaps are built on it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, Generic, Protocol, TypeVar

from kopf_scheduler.queue.queued_pod import QueuedPodInfo

#: Rebuild the heap once more than this many dead entries outnumber the live ones.
_MIN_DEAD_BEFORE_REBUILD = 64


class HeapEntry(Protocol):
    """A slot in a :class:`LazyHeap`: orderable, holding one pod, marked dead when removed."""

    qpod: QueuedPodInfo
    alive: bool

    def __lt__(self, other: Any) -> bool: ...


E = TypeVar("E", bound=HeapEntry)


class LazyHeap(Generic[E]):
    """A heapq heap indexed by pod UID, with lazy deletion (see the module docstring)."""

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
        """Add ``entry`` under ``uid``, replacing the pod's previous entry if any."""
        self.remove(uid)
        self.index[uid] = entry
        heapq.heappush(self.heap, entry)

    def remove(self, uid: str) -> E | None:
        """Drop the pod's entry (returned), or None if the heap does not hold it."""
        entry = self.index.pop(uid, None)
        if entry is not None:
            entry.alive = False
            self.dead += 1
            if self.dead > _MIN_DEAD_BEFORE_REBUILD and self.dead > len(self.index):
                self._rebuild()
        return entry

    def peek(self) -> E | None:
        """The smallest live entry, left in place."""
        heap = self.heap
        while heap and not heap[0].alive:
            heapq.heappop(heap)
            self.dead -= 1
        return heap[0] if heap else None

    def pop(self) -> E | None:
        """Take the smallest live entry out."""
        entry = self.peek()
        if entry is not None:
            heapq.heappop(self.heap)
            del self.index[entry.qpod.uid]
        return entry

    def values(self) -> Iterable[E]:
        return self.index.values()

    def _rebuild(self) -> None:
        self.heap = [e for e in self.heap if e.alive]
        heapq.heapify(self.heap)
        self.dead = 0
