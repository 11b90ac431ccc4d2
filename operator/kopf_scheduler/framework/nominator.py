"""Pods nominated onto nodes by preemption, as the Filter step sees them (upstream ``PodNominator``).

Upstream's framework reads nominated pods through the ``PodNominator`` interface (``framework/interface.go``)
that its scheduling queue implements; Filter then treats a nominated pod of equal or higher priority as if it
ran on its node. Only the protocol lives here: the queue implements it elsewhere, and :class:`NoNominator`
stands in where nothing is nominated, so the Filter step takes its single vectorised pass.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kopf_scheduler.state.pod_info import PodInfo


class Nominator(Protocol):
    """Pods nominated onto nodes by preemption (upstream ``PodNominator``), seen by Filter as if running.

    The scheduling queue implements it once preemption exists; until then :class:`NoNominator` answers
    that nothing is nominated and the Filter step takes its single vectorised pass.
    """

    def nodes_with_nominated_pods(self) -> Collection[str]:
        """Names of nodes with at least one nominated pod (cheap: checked every cycle)."""
        ...

    def nominated_pods_for_node(self, node_name: str) -> Sequence[PodInfo]: ...

    def add_nominated_pod(self, pod: PodInfo, node_name: str) -> None:
        """Record (or move) ``pod``'s nomination onto ``node_name`` (upstream ``AddNominatedPod`` with a
        PostFilter's ``Override``); the pod's ``status.nominatedNodeName`` is written separately."""
        ...

    def delete_nominated_pod_if_exists(self, pod: PodInfo) -> None: ...


class NoNominator:
    """The empty nominator: no pod is nominated anywhere."""

    def nodes_with_nominated_pods(self) -> Collection[str]:
        return ()

    def nominated_pods_for_node(self, node_name: str) -> Sequence[PodInfo]:
        return ()

    def add_nominated_pod(self, pod: PodInfo, node_name: str) -> None:
        return None

    def delete_nominated_pod_if_exists(self, pod: PodInfo) -> None:
        return None


__all__ = ["NoNominator", "Nominator"]
