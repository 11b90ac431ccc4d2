"""What the queue holds for each pod: upstream's ``QueuedPodInfo`` (``pkg/scheduler/framework/types.go``).

Also the sub-queue names (the ``queue`` label of ``scheduler_pending_pods``, upstream's ``metrics.ActiveQ``,
``BackoffQ``, ``UnschedulableQ`` and ``GatedPods``) and the error :meth:`SchedulingQueue.pop` raises once its
profile is gone. Every other module of the package reads these, so they sit at its bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kopf_scheduler.state.cache import TERMINAL_PHASES
from kopf_scheduler.state.pod_info import PodInfo

#: The sub-queue names, as the ``queue`` label of ``scheduler_pending_pods``.
ACTIVE_Q = "active"
BACKOFF_Q = "backoff"
UNSCHEDULABLE_Q = "unschedulable"
GATED = "gated"
#: What :meth:`SchedulingQueue.location` says of a popped pod whose cycle has not ended.
IN_FLIGHT = "in-flight"


def is_settled(pod: PodInfo) -> bool:
    """Bound or finished: nothing left to schedule."""
    return bool(pod.node_name) or pod.phase in TERMINAL_PHASES


#: The profile's QueueSort: True if the first pod should be popped before the second.
LessFn = Callable[["QueuedPodInfo", "QueuedPodInfo"], bool]


class QueueClosedError(Exception):
    """Raised by :meth:`SchedulingQueue.pop` once the queue is closed (the profile is gone)."""


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
    # -- beyond the contract --------------------------------------------------------------------------------
    #: Failures with a rejecting plugin; drives the backoff (1.35+).
    unschedulable_count: int = 0
    #: Failures in a row with an error (no rejecting plugin); drives the backoff while non-zero.
    consecutive_errors_count: int = 0
    #: The PreEnqueue plugin that gates it ("" when not gated).
    gating_plugin: str = ""
    #: Cached backoff expiry (cleared whenever timestamp or the counters change).
    backoff_expiration: float | None = None

    @property
    def uid(self) -> str:
        return self.pod.uid

    @property
    def rejectors(self) -> set[str]:
        """Every plugin that rejected it last time (unschedulable or pending); empty after an error."""
        return self.unschedulable_plugins | self.pending_plugins

    @property
    def failed_with_error(self) -> bool:
        """No plugin rejected it: the last cycle ended in an error (or it was never rejected)."""
        return not self.unschedulable_plugins and not self.pending_plugins

    def clear_rejector_plugins(self) -> None:
        """Upstream ``ClearRejectorPlugins``: forget why it was rejected last time (and any gate)."""
        self.unschedulable_plugins.clear()
        self.pending_plugins.clear()
        self.gating_plugin = ""
        self.gated = False
