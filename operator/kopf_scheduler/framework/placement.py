"""What the placement extension points exchange (upstream ``k8s.io/kube-scheduler/framework``'s ``Placement``,
``PodGroupInfo``, ``PodGroupAssignments``, ``PlacementScore`` and ``PlacementPluginScores``).

v1.36's pod-group cycle with TopologyAwareWorkloadScheduling asks a PlacementGenerate plugin for *placements*:
named subsets of the nodes a PodGroup may be placed in as a whole (one per rack, say). The group is tried in each
placement with the default pod-group algorithm, and the PlacementScore plugins rank the placements it fits in by
the assignments proposed there. A placement's nodes are node-table slots (as every vectorised plugin gets them),
in the order of the placement they were taken from (node-tree order for the first one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kopf_scheduler.state.pod_info import PodInfo


@dataclass(frozen=True, slots=True, eq=False)
class Placement:
    """A set of nodes a pod group is tried in (upstream ``fwk.Placement``); compared by identity, as upstream's
    pointers are."""

    #: The placement's name (a topology domain's value); "" for the one placement of every node.
    name: str
    #: Node-table slots, in the order of the placement they were taken from.
    nodes: np.ndarray


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    """The pod group a pod-group cycle schedules (upstream ``fwk.PodGroupInfo``)."""

    namespace: str
    name: str
    #: The members being scheduled in this cycle, in the order they are tried.
    unscheduled_pods: tuple[PodInfo, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ProposedAssignment:
    """A member placed on a node by a placement's trial (upstream ``fwk.ProposedAssignment``)."""

    pod: PodInfo
    node_name: str


@dataclass(frozen=True, slots=True, eq=False)
class PodGroupAssignments:
    """A placement the group fits in, with the members its trial placed (upstream ``fwk.PodGroupAssignments``)."""

    placement: Placement
    proposed_assignments: tuple[ProposedAssignment, ...]


@dataclass(slots=True, eq=False)
class PlacementScore:
    """One PlacementScore plugin's score of one placement; NormalizePlacementScore rewrites ``score`` in place
    (upstream ``fwk.PlacementScore``)."""

    placement: Placement
    score: int


@dataclass(frozen=True, slots=True, eq=False)
class PlacementPluginScores:
    """A placement's weighted score per plugin and their sum (upstream ``fwk.PlacementPluginScores``)."""

    placement: Placement
    #: (plugin, weighted score), in the profile's order of PlacementScore plugins.
    scores: tuple[tuple[str, int], ...]
    total_score: int


__all__ = [
    "Placement",
    "PlacementPluginScores",
    "PlacementScore",
    "PodGroupAssignments",
    "PodGroupInfo",
    "ProposedAssignment",
]
