"""Pods in flight and the events seen meanwhile: upstream's ``inFlightPods`` / ``inFlightEvents`` (held by
``activeQueue`` in ``pkg/scheduler/backend/queue/active_queue.go``) and ``determineSchedulingHintForInFlightPod``
(``scheduling_queue.go``), v1.36.

A popped pod is in flight until its cycle ends. Cluster events that arrive meanwhile are logged, each with a
sequence number from the same counter that stamped the pod's pop, so when the pod comes back rejected the
events after its pop can be replayed through its rejecting plugins' hints: an event that lands during its
cycle is never lost (the QueueingHints design, rather than the older ``moveRequestCycle`` rule). Events older
than every remaining in-flight pod are dropped. Beyond upstream, the newest copy of an in-flight pod and its
deletion are remembered, so the failure path requeues the newest pod, or none.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from kopf_scheduler.framework.events import ClusterEvent
from kopf_scheduler.queue.hints import QueueingHints, Strategy
from kopf_scheduler.queue.queued_pod import QueuedPodInfo
from kopf_scheduler.state.pod_info import PodInfo

#: Compact the event log once this many consumed entries make up more than half of it.
_MIN_CONSUMED_BEFORE_COMPACTING = 1024

LoggedEvent = tuple[int, ClusterEvent, Any, Any]


def _seq_of(item: LoggedEvent) -> int:
    return item[0]


class InFlightPods:
    """The in-flight pods of one profile and the event log their replays read. ``seq`` is shared with the
    sub-queues, so pops and events are ordered on one counter."""

    __slots__ = ("_deleted", "_head", "_latest", "_pods", "_seq", "events")

    def __init__(self, seq: Iterator[int]) -> None:
        self._seq = seq
        #: uid → (pop sequence number, pod) of pods popped and not yet done, in pop order (oldest first).
        self._pods: dict[str, tuple[int, QueuedPodInfo]] = {}
        #: The newest copy of an in-flight pod seen by an update; requeued instead of the stale one.
        self._latest: dict[str, PodInfo] = {}
        self._deleted: set[str] = set()
        #: (sequence number, event, old, new) recorded while pods were in flight, oldest first.
        self.events: list[LoggedEvent] = []
        #: Entries before this index are older than every in-flight pod (dropped lazily).
        self._head = 0

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def __bool__(self) -> bool:
        return bool(self._pods)

    def uids(self) -> list[str]:
        return list(self._pods)

    def get(self, uid: str) -> QueuedPodInfo | None:
        flight = self._pods.get(uid)
        return None if flight is None else flight[1]

    def newest_pod(self, uid: str) -> PodInfo | None:
        """The newest copy of an in-flight pod: its latest update, else the popped one; None if not in flight."""
        flight = self._pods.get(uid)
        if flight is None:
            return None
        return self._latest.get(uid) or flight[1].pod

    def latest_update(self, uid: str) -> PodInfo | None:
        return self._latest.get(uid)

    def was_deleted(self, uid: str) -> bool:
        return uid in self._deleted

    # -- changes -----------------------------------------------------------------------------------------------
    def start(self, qpod: QueuedPodInfo) -> None:
        """The pod was popped: its replay will read the events recorded from now on."""
        self._pods.pop(qpod.uid, None)  # popped again while in flight: it moves to the end, keeping pop order
        self._pods[qpod.uid] = (next(self._seq), qpod)

    def updated(self, new: PodInfo) -> None:
        self._latest[new.uid] = new

    def deleted(self, uid: str) -> None:
        self._deleted.add(uid)

    def record(self, event: ClusterEvent, old: Any, new: Any) -> None:
        self.events.append((next(self._seq), event, old, new))

    def end(self, uid: str) -> None:
        """The pod's cycle is over; events no remaining in-flight pod can need are dropped."""
        self._latest.pop(uid, None)
        self._deleted.discard(uid)
        if self._pods.pop(uid, None) is None:
            return
        if not self._pods:
            self.events.clear()
            self._head = 0
            return
        oldest = next(iter(self._pods.values()))[0]  # pop order: the first is the oldest
        self._head = bisect.bisect_right(self.events, oldest, lo=self._head, key=_seq_of)
        if self._head > _MIN_CONSUMED_BEFORE_COMPACTING and self._head * 2 > len(self.events):
            del self.events[: self._head]
            self._head = 0

    # -- the replay ------------------------------------------------------------------------------------------
    def replay(self, qpod: QueuedPodInfo, hints: QueueingHints) -> Strategy:
        """Upstream ``determineSchedulingHintForInFlightPod``: put the events seen since its pop to its
        rejecting plugins' hints; the strongest answer wins."""
        if qpod.failed_with_error:
            return Strategy.AFTER_BACKOFF
        flight = self._pods.get(qpod.uid)
        if flight is None:
            return Strategy.AFTER_BACKOFF  # not popped through this queue: retry rather than strand it
        start = bisect.bisect_right(self.events, flight[0], lo=self._head, key=_seq_of)
        strategy = Strategy.SKIP
        for _, event, old, new in self.events[start:]:
            verdict = hints.worth_requeuing(qpod, event, old, new)
            if verdict is Strategy.IMMEDIATELY:
                return verdict
            if verdict is Strategy.AFTER_BACKOFF:
                strategy = verdict
                if not qpod.pending_plugins:
                    return strategy
        return strategy
