"""GangScheduling: all-or-nothing scheduling of a PodGroup's pods (upstream 1.36's
``plugins/gangscheduling/gangscheduling.go``, alpha behind the GangScheduling gate there; enabled per profile here).

A pod names its group in ``spec.schedulingGroup.podGroupName``; the group is a scheduling.k8s.io/v1alpha2 PodGroup
in the pod's namespace (``cache.objects``, upstream's PodGroup lister), and only a group whose
``spec.schedulingPolicy.gang`` is set is a gang. PreEnqueue keeps a gang's pods out of the active queue until
the PodGroup exists and at least ``minCount`` of its pods are known to the scheduler; Permit holds each assumed
pod until ``minCount`` of the group are assumed or bound (five minutes at most), activating the group's
unscheduled pods meanwhile, and the pod that completes the quorum lets every assumed member go on to bind.

The group's counts come from the cache's pod-group state (``state/pod_group_state.py``): the live one in an
ordinary per-pod cycle, the cycle's copy in a pod-group cycle (:attr:`CycleState.pod_group_cycle`, upstream's
``IsPodGroupSchedulingCycle``), where the group's trial placements are assumed.

Its events are upstream's: a pod added to the same group (the event handlers send one for every new pending
pod of a group to the workload-aware profiles, upstream's ``EventUnscheduledPodAdd`` nudge) and a PodGroup
added (PodGroups and a pod's scheduling group are immutable, so no update can help).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    PermitPlugin,
    PodInfo,
    PreEnqueuePlugin,
    QueueingHint,
    Status,
    as_object,
    as_pod,
)
from kopf_scheduler.go_format import go_quote
from kopf_scheduler.plugins.helper.pod_groups import POD_GROUP, pod_group_not_found
from kopf_scheduler.state.pod_group_state import PodGroupStateData, PodGroupStateNotFound

logger = logging.getLogger("kopf_scheduler.plugins.gang_scheduling")

NAME = "GangScheduling"
#: Upstream ``permitTimeoutDuration``: how long a gang's pods wait at Permit for the quorum.
PERMIT_TIMEOUT_SECONDS = 5 * 60.0

WAITING_FOR_MIN_COUNT_TO_APPEAR = "waiting for minCount pods from a gang to appear in scheduling queue"
WAITING_FOR_MIN_COUNT_SCHEDULED = "waiting for minCount pods from a gang to be scheduled"


def waiting_for_pod_group_message(pod_group_name: str) -> str:
    """Upstream's PreEnqueue text for a pod whose PodGroup is not there (its typo "pods's" included)."""
    return f"waiting for pods's pod group {go_quote(pod_group_name)} to appear in scheduling queue"


def gang_min_count(pod_group: dict[str, Any]) -> int | None:
    """``spec.schedulingPolicy.gang.minCount`` of a PodGroup; None if its policy is not a gang."""
    policy = (pod_group.get("spec") or {}).get("schedulingPolicy") or {}
    gang = policy.get("gang")
    if gang is None:
        return None
    return int(gang.get("minCount") or 0)


class GangScheduling(PreEnqueuePlugin, PermitPlugin):
    """Upstream's GangScheduling: PreEnqueue waits for minCount members, Permit for minCount scheduled."""

    name: ClassVar[str] = NAME
    workload_aware: ClassVar[bool] = True
    gang_api: ClassVar[str] = "scheduling.k8s.io/v1alpha2 PodGroup"

    # -- EnqueueExtensions ---------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            # A new pod may be the one that completes a gang's minCount (its scheduling group is immutable).
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.ADD), is_schedulable_after_pod_added),
            # A new PodGroup may make a waiting gang schedulable (PodGroups are immutable).
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD_GROUP, ActionType.ADD), is_schedulable_after_pod_group_added
            ),
        ]

    # -- PreEnqueue ----------------------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Upstream ``PreEnqueue``: a gang's pod enters the queue once its PodGroup exists and the scheduler
        knows at least minCount of its pods."""
        group = pod.scheduling_group
        if group is None:
            return SUCCESS
        cache = self.handle.snapshot().cache
        pod_group = cache.objects.get(POD_GROUP, group, pod.namespace)
        if pod_group is None:  # unschedulable until its PodGroup is created
            return Status.unschedulable(waiting_for_pod_group_message(group), plugin=self.name, unresolvable=True)
        min_count = gang_min_count(pod_group)
        if min_count is None:  # only a gang policy concerns this plugin
            return SUCCESS
        try:
            state = cache.pod_groups.get(pod.namespace, group)
        except PodGroupStateNotFound as error:
            return Status.as_error(error, plugin=self.name)
        if state.all_pods_count() < min_count:
            return Status.unschedulable(WAITING_FOR_MIN_COUNT_TO_APPEAR, plugin=self.name, unresolvable=True)
        return SUCCESS  # the quorum is there: the pod may enter the queue

    # -- Permit --------------------------------------------------------------------------------------
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """Upstream ``Permit``: wait until minCount of the gang are assumed or bound; the pod that completes the
        quorum allows every assumed member waiting here."""
        group = pod.scheduling_group
        if group is None:
            return SUCCESS, 0.0
        snapshot = self.handle.snapshot()
        pod_group = snapshot.cache.objects.get(POD_GROUP, group, pod.namespace)
        if pod_group is None:  # removed meanwhile: an Error, retried once the PodGroup is added again
            message = f"failed to get podGroup {pod.namespace}/{group}: {pod_group_not_found(group)}"
            return Status(Code.ERROR, (message,), self.name), 0.0
        min_count = gang_min_count(pod_group)
        if min_count is None:
            return SUCCESS, 0.0
        # A pod-group cycle reads the group from its snapshot (where it assumes the group's trial placements);
        # an ordinary cycle reads the cache's live state.
        group_state: PodGroupStateData
        try:
            if state.pod_group_cycle:
                group_state = snapshot.pod_group_states.get(pod.namespace, group)
            else:
                group_state = snapshot.cache.pod_groups.get(pod.namespace, group)
        except PodGroupStateNotFound as error:
            return Status.as_error(error, plugin=self.name), 0.0
        if group_state.scheduled_pods_count() < min_count:
            # The unscheduled members may have been waiting for this one to be scheduled.
            unscheduled = group_state.unscheduled_pods()
            self.handle.activate(unscheduled.values())
            logger.debug(
                "Quorum is not met for a gang. Waiting for another pod to allow: pod=%s schedulingGroup=%s "
                "activatedPods=%d",
                pod.key,
                group,
                len(unscheduled),
            )
            return Status(Code.WAIT, (WAITING_FOR_MIN_COUNT_SCHEDULED,), self.name), PERMIT_TIMEOUT_SECONDS
        assumed = group_state.assumed_pod_uids()
        logger.debug(
            "Quorum is met for a gang. Allowing other pods from a gang waiting on permit: pod=%s "
            "schedulingGroup=%s allowedPods=%d",
            pod.key,
            group,
            len(assumed),
        )
        for uid in assumed:  # the quorum is met: this pod goes on, and every member waiting here too
            self.handle.allow_waiting_pod(uid, self.name)
        return SUCCESS, 0.0


# -- QueueingHints -------------------------------------------------------------------------------------
def is_schedulable_after_pod_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Upstream ``isSchedulableAfterPodAdded``: only a pod of the same scheduling group may complete the gang."""
    added = as_pod(new)
    if added is None or not matching_scheduling_group(pod, added):
        return QUEUE_SKIP
    return QUEUE


def is_schedulable_after_pod_group_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Upstream ``isSchedulableAfterPodGroupAdded``: only the pod's own PodGroup helps it."""
    added = as_object(new)
    meta = (added or {}).get("metadata") or {}
    if (
        pod.scheduling_group is None
        or pod.namespace != meta.get("namespace", "")
        or pod.scheduling_group != meta.get("name")
    ):
        return QUEUE_SKIP
    return QUEUE


def matching_scheduling_group(pod1: PodInfo, pod2: PodInfo) -> bool:
    """Upstream ``helper.MatchingSchedulingGroup``: both pods name the same pod group in the same namespace."""
    return (
        pod1.namespace == pod2.namespace
        and pod1.scheduling_group is not None
        and pod2.scheduling_group is not None
        and pod1.scheduling_group == pod2.scheduling_group
    )


__all__ = [
    "NAME",
    "PERMIT_TIMEOUT_SECONDS",
    "POD_GROUP",
    "WAITING_FOR_MIN_COUNT_SCHEDULED",
    "WAITING_FOR_MIN_COUNT_TO_APPEAR",
    "GangScheduling",
    "gang_min_count",
    "is_schedulable_after_pod_added",
    "is_schedulable_after_pod_group_added",
    "matching_scheduling_group",
    "waiting_for_pod_group_message",
]
