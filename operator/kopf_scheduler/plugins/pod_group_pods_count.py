"""PodGroupPodsCount: prefer the placement that holds more of the PodGroup (upstream 1.36's
``plugins/podgrouppodscount/podgroup_pods_count.go``, alpha behind TopologyAwareWorkloadScheduling there; enabled
per profile here).

A placement's raw score is the group's members already scheduled (assumed or bound, as the cycle's snapshot of
the group says) plus the members the placement's trial placed. NormalizePlacementScore scales the scores by the
largest one to [0, 100] (integer division); the group's minCount plays no part, so that close counts get close
scores. All zero (no placement holds any member) is upstream's error.
"""

from __future__ import annotations

from typing import ClassVar

from kopf_scheduler.framework import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    SUCCESS,
    CycleState,
    Placement,
    PlacementScore,
    PlacementScorePlugin,
    PodGroupAssignments,
    PodGroupInfo,
    Status,
)
from kopf_scheduler.state.pod_group_state import PodGroupStateNotFound

NAME = "PodGroupPodsCount"
#: Upstream's NormalizePlacementScore error when every score is 0.
NO_PODS_ASSIGNED = "no pods from pod group are assigned to any of the candidate placements"


class PodGroupPodsCount(PlacementScorePlugin):
    """Upstream's PodGroupPodsCount: scheduled members plus the placement's proposed ones, scaled by the best."""

    name: ClassVar[str] = NAME
    workload_aware: ClassVar[bool] = True
    has_placement_normalize: ClassVar[bool] = True

    def score_placement(
        self, state: CycleState, pod_group: PodGroupInfo, assignments: PodGroupAssignments
    ) -> tuple[int, Status]:
        try:
            group = self.handle.snapshot().pod_group_states.get(pod_group.namespace, pod_group.name)
        except PodGroupStateNotFound as error:
            return 0, Status.as_error(error)
        return group.scheduled_pods_count() + len(assignments.proposed_assignments), SUCCESS

    def placement_score_bound(self, state: CycleState, pod_group: PodGroupInfo, placement: Placement) -> int | None:
        """A placement holding every member has the largest raw score of all, so it is scaled to the highest."""
        return MAX_NODE_SCORE

    def normalize_placement_score(
        self, state: CycleState, pod_group: PodGroupInfo, scores: list[PlacementScore]
    ) -> Status:
        highest = max((score.score for score in scores), default=0)
        if highest <= 0:
            return Status.as_error(RuntimeError(NO_PODS_ASSIGNED))
        for score in scores:
            score.score = MIN_NODE_SCORE + score.score * (MAX_NODE_SCORE - MIN_NODE_SCORE) // highest
        return SUCCESS


__all__ = ["NAME", "NO_PODS_ASSIGNED", "PodGroupPodsCount"]
