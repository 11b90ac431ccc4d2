"""PrioritySort: the QueueSort plugin of the default profile (upstream ``plugins/queuesort``, reference §2.1).

The active queue pops the pod for which ``less`` holds against every other: higher ``spec.priority`` first
(a missing priority counts as 0), and among equals the one that (re)entered the queue earliest. Every
profile must use the same QueueSort, since one queue serves all profiles.
"""

from __future__ import annotations

from typing import ClassVar

from kopf_scheduler.framework import ClusterEventWithHint, QueuedPod, QueueSortPlugin


class PrioritySort(QueueSortPlugin):
    name: ClassVar[str] = "PrioritySort"

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []  # it never rejects a pod, so no event needs to requeue one

    def less(self, a: QueuedPod, b: QueuedPod) -> bool:
        p1, p2 = a.pod.priority, b.pod.priority
        return p1 > p2 or (p1 == p2 and a.timestamp < b.timestamp)
