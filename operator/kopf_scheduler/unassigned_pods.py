"""Every unassigned pod the watches know, by uid, at its latest version, whatever its schedulerName.

Upstream reads these through the informer's pod lister; here one :class:`UnassignedPods` holds them, shared by
the parts of the app: the event handlers (``eventhandlers.py``) add and remove pods as the watch reports them,
the scheduling cycle (``schedule_one.py``) reads a popped pod's latest version and drops a pod whose Binding
found it gone (404), a profile finds its pods here when it is created, and the Handle and the nominator look
pods up by uid. Writes go through :meth:`UnassignedPods.add` and :meth:`UnassignedPods.remove`; readers see a
read-only mapping.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, ValuesView

from kopf_scheduler.state.pod_info import PodInfo


class UnassignedPods(Mapping[str, PodInfo]):
    """The pending pods by uid (a read-only mapping; :meth:`add` and :meth:`remove` change it)."""

    def __init__(self) -> None:
        self._pods: dict[str, PodInfo] = {}
        # The dict's own lookup, without a Python frame: the scheduling cycle and every pod event read it.
        self.get = self._pods.get  # type: ignore[method-assign]  # dict.get is Mapping.get, in C

    def __getitem__(self, uid: str) -> PodInfo:
        return self._pods[uid]

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    def __len__(self) -> int:
        return len(self._pods)

    def values(self) -> ValuesView[PodInfo]:
        return self._pods.values()

    def add(self, pod: PodInfo) -> None:
        """``pod`` is pending at this version (it replaces the one of the same uid)."""
        self._pods[pod.uid] = pod

    def remove(self, uid: str) -> PodInfo | None:
        """The pod is no longer pending (bound, gone); returns what was held, if anything."""
        return self._pods.pop(uid, None)
