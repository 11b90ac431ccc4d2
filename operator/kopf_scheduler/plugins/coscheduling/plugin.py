"""Coscheduling: scheduler-plugins' gang plugin for its ``scheduling.x-k8s.io/v1alpha1`` PodGroup (v0.34.7
``pkg/coscheduling/coscheduling.go``, KEP 42), on the gang machinery of the workload-aware path.

A pod joins a group with the ``scheduling.x-k8s.io/pod-group: <name>`` label; the PodGroup of that name in its
namespace says how many pods must be placed together (``minMember``), what the cluster must have free for them
(``minResources``) and how long placed pods wait for the rest (``scheduleTimeoutSeconds``). The plugin works pod
by pod, as scheduler-plugins' does (no pod-group cycle):

- QueueSort: higher priority first, then the older group (its PodGroup's creation, or its last failure so that
  a failing group does not block the head of the queue; a pod of no group by its first attempt), then
  ``namespace/name``: a group's pods come out back to back.
- PreFilter: refuses (UnschedulableAndUnresolvable, no preemption) a pod of a group backed off, a group with
  fewer pods than minMember, with gated pods eating its surplus, or whose minResources the cluster cannot hold.
- PostFilter: when a member cannot be placed and too little of the group is placed, every member waiting at
  Permit is rejected and the group backs off (``podGroupBackoffSeconds``).
- Permit: a placed member waits (``scheduleTimeoutSeconds``, else ``permitWaitingTimeSeconds``) until minMember
  are assumed or bound; the one that completes the quorum allows every waiting member.
- Unreserve: a member that fails or times out after Reserve rejects every waiting member, so the group frees
  everything it held (the cache's forget and the other plugins' Unreserve release each).

The group's pods and how many are placed come from the cache's Coscheduling group state (``cache.
coscheduling_groups``); the plugin's own bookkeeping is ``core.PodGroupManager``. A profile enables either this
plugin or workload-aware GangScheduling, never both (``gang_api``: the builder refuses the profile).
"""

from __future__ import annotations

import logging
import time
from typing import ClassVar

from pydantic import BaseModel

from kopf_scheduler.api.args import CoschedulingArgs
from kopf_scheduler.framework import (
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Handle,
    NodeToStatus,
    PermitPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    PreFilterResult,
    QueuedPod,
    QueueSortPlugin,
    ReservePlugin,
    Status,
)
from kopf_scheduler.plugins.coscheduling.core import PodGroupManager, min_member, wait_seconds
from kopf_scheduler.state.cache import ClusterCache, Snapshot
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler")

NAME = "Coscheduling"
#: Permit's and Unreserve's texts, and PostFilter's (scheduler-plugins' strings).
POD_GROUP_NOT_FOUND = "PodGroup not found"
CANNOT_FIND_POD_GROUP = "can not find pod group"
OPTIMISTIC_REJECTION = "optimistic rejection in PostFilter"
REJECTION_IN_UNRESERVE = "rejection in Unreserve"


def rejected_after_post_filter(group: str, pod: PodInfo) -> str:
    return f"PodGroup {group} gets rejected due to Pod {pod.name} is unschedulable even after PostFilter"


class Coscheduling(QueueSortPlugin, PreFilterPlugin, PostFilterPlugin, PermitPlugin, ReservePlugin):
    """scheduler-plugins' Coscheduling over the ``scheduling.x-k8s.io/pod-group`` label and its PodGroup."""

    name: ClassVar[str] = NAME
    args_model: ClassVar[type[BaseModel] | None] = CoschedulingArgs
    gang_api: ClassVar[str] = "scheduling.x-k8s.io/v1alpha1 PodGroup"

    def __init__(self, *, handle: Handle, args: BaseModel | None = None) -> None:
        super().__init__(handle=handle, args=args)
        self.args: CoschedulingArgs = args if isinstance(args, CoschedulingArgs) else CoschedulingArgs()
        self.permit_waiting_seconds = float(self.args.permit_waiting_time_seconds)
        self.backoff_seconds = float(self.args.pod_group_backoff_seconds)
        self.reject_threshold = self.args.pod_group_reject_percentage / 100.0
        self._cluster: ClusterCache | None = None
        self.manager = PodGroupManager(self._cache, self.permit_waiting_seconds)
        #: The queue's clock is monotonic; PodGroups' creation times are wall-clock: the offset between them.
        self._wall_offset = time.time() - time.monotonic()

    def _cache(self) -> ClusterCache:
        """The scheduler's cache (the same one for the handle's life), read once: a snapshot per look-up was a
        sixth of a gang member's cycle (QueueSort looks its PodGroup up on every comparison)."""
        cache = self._cluster
        if cache is None:
            cache = self._cluster = self.handle.snapshot().cache
        return cache

    # -- EnqueueExtensions ---------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Upstream's: any pod added (it may complete a group), a PodGroup added or updated; no hints."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.ADD)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.COSCHEDULING_POD_GROUP, ActionType.ADD | ActionType.UPDATE)
            ),
        ]

    # -- QueueSort -----------------------------------------------------------------------------------------
    def less(self, a: QueuedPod, b: QueuedPod) -> bool:
        """Upstream ``Less``: priority, then the group's (or the pod's) time, then ``namespace/name``."""
        p1, p2 = a.pod.priority, b.pod.priority
        if p1 != p2:
            return p1 > p2
        t1, t2 = self._sort_time(a), self._sort_time(b)
        if t1 == t2:
            return a.pod.key < b.pod.key
        return t1 < t2

    def _sort_time(self, queued: QueuedPod) -> float:
        """The group's time (``PodGroupManager.group_time``), else the pod's first attempt (wall clock; before
        its first pop, when it entered the queue)."""
        pod = queued.pod
        group = pod.coscheduling_group
        found = None if group is None else self.manager.group_time(pod.namespace, group)
        if found is not None:
            return found
        initial = queued.initial_attempt_timestamp
        return (queued.timestamp if initial is None else initial) + self._wall_offset

    # -- PreFilter -----------------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        """UnschedulableAndUnresolvable (no preemption attempt) with the manager's error; nothing for a pod of
        no group or whose PodGroup is missing (Permit then refuses it)."""
        error = self.manager.pre_filter(pod, snapshot.node_infos())
        if error is None:
            return None, SUCCESS
        logger.debug("Coscheduling PreFilter failed: pod=%s error=%s", pod.key, error)
        return None, Status.unschedulable(error, plugin=self.name, unresolvable=True)

    # -- PostFilter ----------------------------------------------------------------------------------------
    def post_filter(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status]:
        """Upstream ``PostFilter``: reject the whole group, unless enough of it is placed already."""
        name, pod_group = self.manager.pod_group(pod)
        if pod_group is None:
            return PostFilterResult(), Status.unschedulable(CANNOT_FIND_POD_GROUP, plugin=self.name)
        wanted = min_member(pod_group)
        assigned = self.manager.assigned_count(pod)
        if assigned >= wanted:  # enough are placed: the group stands
            return PostFilterResult(), Status(Code.UNSCHEDULABLE, (), self.name)
        if wanted and (wanted - assigned) / wanted <= self.reject_threshold:  # a small gap: let the rest try
            return PostFilterResult(), Status(Code.UNSCHEDULABLE, (), self.name)
        self._reject_waiting(pod, OPTIMISTIC_REJECTION)
        if self.backoff_seconds and len(self.manager.group_pods(pod)) >= wanted:
            self.manager.backoff(name, self.backoff_seconds)
        self.manager.delete_permitted(name)
        self.manager.mark_failure(name)
        return PostFilterResult(), Status.unschedulable(rejected_after_post_filter(name, pod), plugin=self.name)

    # -- Permit --------------------------------------------------------------------------------------------
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """Upstream ``Permit``: wait until minMember of the group are assumed or bound (this pod is assumed
        already); the pod that completes the quorum allows every member waiting here."""
        name, pod_group = self.manager.pod_group(pod)
        if not name:
            return SUCCESS, 0.0
        if pod_group is None:
            return Status.unschedulable(POD_GROUP_NOT_FOUND, plugin=self.name), 0.0
        assigned = self.manager.assigned_count(pod)
        if assigned >= min_member(pod_group):
            self.manager.clear_failure(name)
            state_ = self.manager.group_state(pod)
            for uid in () if state_ is None else state_.assumed_pod_uids():
                if uid != pod.uid:
                    self.handle.allow_waiting_pod(uid, self.name)
            return SUCCESS, 0.0
        if assigned == 1:  # the first placed member: the siblings may have been waiting for it
            self.handle.activate(p for p in self.manager.group_pods(pod) if p.uid != pod.uid)
        logger.debug("Pod is waiting to be scheduled to node: pod=%s nodeName=%s", pod.key, node_name)
        return Status(Code.WAIT, (), self.name), wait_seconds(pod_group, self.permit_waiting_seconds)

    # -- Reserve / Unreserve -------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Upstream ``Unreserve``: one member failed after Reserve (a timeout at Permit, a failed bind): every
        member waiting at Permit is rejected, so the whole group lets go of what it held."""
        name, pod_group = self.manager.pod_group(pod)
        if pod_group is None:
            return
        self._reject_waiting(pod, REJECTION_IN_UNRESERVE)
        self.manager.delete_permitted(name)
        self.manager.mark_failure(name)

    def _reject_waiting(self, pod: PodInfo, message: str) -> None:
        """Reject every member of ``pod``'s group waiting at Permit (they are among its assumed members)."""
        state = self.manager.group_state(pod)
        for uid in () if state is None else state.assumed_pod_uids():
            self.handle.reject_waiting_pod(uid, self.name, message)


__all__ = ["NAME", "Coscheduling", "rejected_after_post_filter"]
