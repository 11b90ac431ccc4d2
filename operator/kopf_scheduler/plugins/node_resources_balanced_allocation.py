"""NodeResourcesBalancedAllocation: prefer nodes whose resources stay evenly used (reference §2.9, as in 1.36).

Per node, the fractions requested/allocatable (capped at 1) of the configured resources give a balance
int((1 − std)·100). Kubernetes 1.36 scores the *improvement* the pod brings: the balance with the pod
minus the balance without it, mapped to 50 + (50 + with − without) / 2, so a pod that changes nothing
scores 75 everywhere and a pod that evens a node out scores towards 100. (1.33/1.34 scored the balance with
the pod alone; §2.22's 87 is that balance, which 1.36 turns into 72.)

Both sides use real requests, never the 100m/200Mi defaults. A best-effort pod (requesting none of the
configured resources) is skipped at PreScore, so it gets no score from this plugin at all (issue #129138).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from kopf_scheduler.api.args import NodeResourcesBalancedAllocationArgs
from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.events import ClusterEventWithHint
from kopf_scheduler.framework.interface import Handle, PreScorePlugin, ScorePlugin
from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.plugins.dynamic_resources.capacity import dra_capacity, may_score_dra
from kopf_scheduler.plugins.helper.resource_allocation import (
    RememberedScores,
    balanced_allocation,
    calculate_allocation,
    scored_resources,
)
from kopf_scheduler.state.pod_info import PodInfo

if TYPE_CHECKING:
    from pydantic import BaseModel

    from kopf_scheduler.state.cache import Snapshot

NAME = "NodeResourcesBalancedAllocation"
PRE_SCORE_STATE_KEY = "PreScore" + NAME


@dataclass(frozen=True, slots=True)
class PreScoreState:
    """The pod's real request for each configured resource, in the configured order."""

    pod_requests: tuple[int, ...]

    def clone(self) -> PreScoreState:
        return self


class NodeResourcesBalancedAllocation(PreScorePlugin, ScorePlugin):
    """Score by how much the pod improves the balance of the node's resource usage."""

    name: ClassVar[str] = NAME

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []  # it never rejects a pod, so no event needs to requeue one

    args_model: ClassVar[type[BaseModel] | None] = NodeResourcesBalancedAllocationArgs

    def __init__(self, *, handle: Handle, args: BaseModel | None = None) -> None:
        super().__init__(handle=handle, args=args)
        balanced_args = (
            args if isinstance(args, NodeResourcesBalancedAllocationArgs) else NodeResourcesBalancedAllocationArgs()
        )
        self.resources = scored_resources(balanced_args.resources)
        self.may_score_dra = may_score_dra([resource.name for resource in self.resources])
        self.remembered = RememberedScores(self.resources, balanced_allocation, use_requested=True)

    def pod_requests(self, pod: PodInfo) -> tuple[int, ...]:
        return tuple(pod.requests.get(resource.name, 0) for resource in self.resources)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        pod_requests = self.pod_requests(pod)
        if not any(pod_requests):
            # Best-effort pods would otherwise all pile onto the same "most balanced" node.
            return Status.skip(plugin=self.name)
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(pod_requests))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        pre: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        pod_requests = pre.pod_requests if pre is not None else self.pod_requests(pod)
        if not any(pod_requests):
            # Upstream's Score without PreScore: a best-effort pod scores 0.
            return np.zeros(len(nodes), dtype=np.int64)
        dra = dra_capacity(snapshot) if self.may_score_dra else None  # DRA-backed extended resources
        if dra is None:
            return self.remembered.scores(snapshot.table, nodes, pod_requests)
        allocation = calculate_allocation(
            snapshot.table, nodes, self.resources, pod_requests, use_requested=True, dra=dra
        )
        return balanced_allocation(allocation)
