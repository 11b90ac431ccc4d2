"""The pods nominated onto nodes, shared by every profile (upstream ``backend/queue/nominator.go``).

Upstream's one PriorityQueue owns one nominator; our queues are per profile, so the app builds one
:class:`PodNominator` and hands it to every profile's Framework, which is how a profile's Filter sees the
pods another profile's preemption nominated (upstream: the nominated pods of every profile count).

A pod enters it two ways, as upstream's: from its ``status.nominatedNodeName`` when the pod is added to or
updated in a queue (:meth:`PodNominator.add_pod`, :meth:`PodNominator.update_nominated_pod`, upstream's
``addNominatedPod`` with a nil NominatingInfo, "Noop"), and from a PostFilter result when its scheduling
fails (:meth:`PodNominator.add_nominated_pod`, "Override"), before the status patch that publishes it has
come back through the watch. It leaves when the pod is assumed, bound or deleted, or when a failure clears
the nomination (:meth:`PodNominator.delete_nominated_pod_if_exists`).

Upstream re-reads the pod from its lister before nominating and skips a pod that is gone or already bound;
``pending`` (the app's map of pending pods by uid) answers the same question here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from kopf_scheduler.framework.events import nominated_node_name
from kopf_scheduler.state.pod_info import PodInfo

#: The pod of this uid as watched while it is pending (unbound, not deleted), else None.
PendingLookup = Callable[[str], PodInfo | None]


class PodNominator:
    """Node name → the pods nominated there, in nomination order; implements ``framework.interface.Nominator``."""

    def __init__(self, pending: PendingLookup | None = None) -> None:
        self._pending = pending
        self._pods_by_node: dict[str, dict[str, PodInfo]] = {}
        self._node_of: dict[str, str] = {}

    # -- the framework's reads ----------------------------------------------------------------------------
    def nodes_with_nominated_pods(self) -> Collection[str]:
        return self._pods_by_node.keys()

    def nominated_pods_for_node(self, node_name: str) -> Sequence[PodInfo]:
        return tuple((self._pods_by_node.get(node_name) or {}).values())

    def nominated_node(self, uid: str) -> str | None:
        """Where the pod of ``uid`` is nominated, if anywhere."""
        return self._node_of.get(uid)

    @property
    def count(self) -> int:
        """How many pods are nominated (no ``__len__``: an empty nominator must stay truthy where callers
        write ``nominator or NoNominator()``)."""
        return len(self._node_of)

    # -- changes ------------------------------------------------------------------------------------------
    def add_nominated_pod(self, pod: PodInfo, node_name: str) -> None:
        """A PostFilter's Override: ``pod`` is nominated onto ``node_name`` (an empty name removes it)."""
        self._add(pod, node_name)

    def add_pod(self, pod: PodInfo) -> None:
        """A pod entering the queue: nominated where its ``status.nominatedNodeName`` says, if anywhere."""
        self._add(pod, None)

    def update_nominated_pod(self, old: PodInfo | None, new: PodInfo) -> None:
        """A queued pod changed (upstream ``UpdateNominatedPod``).

        The new version's ``status.nominatedNodeName`` wins, except when neither version carries one while the
        nominator holds one: that nomination came from a PostFilter whose status patch has not been watched yet
        (or this update raced it), so it is kept rather than lost to an unrelated update.
        """
        override: str | None = None
        if not nominated_node_name(new) and (old is None or not nominated_node_name(old)):
            override = self._node_of.get(new.uid)
        if old is not None:
            self._delete(old.uid)
        self._add(new, override)

    def delete_nominated_pod_if_exists(self, pod: PodInfo) -> None:
        self._delete(pod.uid)

    def _add(self, pod: PodInfo, override: str | None) -> None:
        """Upstream ``addNominatedPodUnlocked``: ``override`` None means "from the pod's status" (Noop)."""
        self._delete(pod.uid)
        node = nominated_node_name(pod) if override is None else override
        if not node:
            return
        if self._pending is not None and self._pending(pod.uid) is None:
            return  # gone or already bound meanwhile: nothing to hold a place for
        self._node_of[pod.uid] = node
        self._pods_by_node.setdefault(node, {})[pod.uid] = pod

    def _delete(self, uid: str) -> None:
        node = self._node_of.pop(uid, None)
        if node is None:
            return
        pods = self._pods_by_node.get(node)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self._pods_by_node[node]


__all__ = ["PendingLookup", "PodNominator"]
