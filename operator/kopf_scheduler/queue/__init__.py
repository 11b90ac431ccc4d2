"""The scheduling queue, upstream's ``pkg/scheduler/backend/queue`` (v1.36): one :class:`SchedulingQueue` per
SchedulerProfile, holding the profile's pending pods until a scheduling cycle pops them.

The facade is :mod:`~kopf_scheduler.queue.scheduling_queue` (upstream ``scheduling_queue.go``); it composes
activeQ (:mod:`~kopf_scheduler.queue.active_queue`), backoffQ (:mod:`~kopf_scheduler.queue.backoff_queue`),
unschedulablePods (:mod:`~kopf_scheduler.queue.unschedulable_pods`), the in-flight pods and their events
(:mod:`~kopf_scheduler.queue.in_flight`) and the queueing hints (:mod:`~kopf_scheduler.queue.hints`), over a
UID-keyed heap (:mod:`~kopf_scheduler.queue.heap`, upstream ``backend/heap``). The nominator
(:mod:`~kopf_scheduler.queue.nominator`) is one for all profiles, as upstream's one queue holds one. It sits
above ``framework`` (cluster events, Status) and ``state`` (PodInfo); ``state`` knows nothing of it.
"""

from kopf_scheduler.queue.nominator import PodNominator
from kopf_scheduler.queue.queued_pod import (
    ACTIVE_Q,
    BACKOFF_Q,
    GATED,
    IN_FLIGHT,
    UNSCHEDULABLE_Q,
    QueueClosedError,
    QueuedPodInfo,
)
from kopf_scheduler.queue.scheduling_queue import SchedulingQueue

__all__ = [
    "ACTIVE_Q",
    "BACKOFF_Q",
    "GATED",
    "IN_FLIGHT",
    "UNSCHEDULABLE_Q",
    "PodNominator",
    "QueueClosedError",
    "QueuedPodInfo",
    "SchedulingQueue",
]
