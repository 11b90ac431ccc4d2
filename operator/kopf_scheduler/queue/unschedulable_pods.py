"""unschedulablePods: pods waiting for a cluster event that could help them, upstream's ``unschedulablePods``
map (``pkg/scheduler/backend/queue/scheduling_queue.go``, v1.36).

Rejected pods park here until an event their rejecting plugins registered (and whose hint says Queue) moves
them, or until the leftover flush; pods gated by a PreEnqueue plugin (scheduling gates) park here too and
are never popped. Upstream walks the whole map on every event; here the map is also indexed by rejecting
plugin, so an event visits only the pods whose rejectors registered for it (plus the pods no plugin
rejected), in their arrival order. Which plugins an event interests is the hints' business
(:mod:`kopf_scheduler.queue.hints`); this module only keeps the map and its indexes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, ValuesView

from kopf_scheduler.queue.queued_pod import QueuedPodInfo

#: Below one candidate in this many parked pods, sort the candidates by arrival instead of walking the map.
_SPARSE_RATIO = 8


class UnschedulablePods:
    """The parked pods of one profile, indexed by rejecting plugin. ``seq`` numbers arrivals."""

    __slots__ = ("_by_plugin", "_gated", "_no_rejector", "_order", "_plugins_of", "_pods", "_seq")

    def __init__(self, seq: Iterator[int]) -> None:
        self._seq = seq
        self._pods: dict[str, QueuedPodInfo] = {}
        #: plugin → uids of the pods it rejected.
        self._by_plugin: dict[str, set[str]] = {}
        #: uid → the rejectors it was indexed under.
        self._plugins_of: dict[str, frozenset[str]] = {}
        #: Pods no plugin rejected (errors): every event concerns them.
        self._no_rejector: set[str] = set()
        self._gated: set[str] = set()
        #: uid → arrival rank (kept while the pod stays parked).
        self._order: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def get(self, uid: str) -> QueuedPodInfo | None:
        return self._pods.get(uid)

    def values(self) -> ValuesView[QueuedPodInfo]:
        """The parked pods, in arrival order."""
        return self._pods.values()

    def is_gated(self, uid: str) -> bool:
        return uid in self._gated

    @property
    def gated_count(self) -> int:
        return len(self._gated)

    def put(self, qpod: QueuedPodInfo) -> None:
        """Park the pod (or re-index it, keeping its arrival rank) under its current rejectors and gate."""
        uid = qpod.uid
        self._unindex(uid)
        if uid not in self._pods:
            self._order[uid] = next(self._seq)
        self._pods[uid] = qpod
        plugins = frozenset(qpod.rejectors)
        self._plugins_of[uid] = plugins
        if plugins:
            for plugin in plugins:
                self._by_plugin.setdefault(plugin, set()).add(uid)
        else:
            self._no_rejector.add(uid)
        if qpod.gated:
            self._gated.add(uid)

    def remove(self, uid: str) -> QueuedPodInfo | None:
        qpod = self._pods.pop(uid, None)
        if qpod is not None:
            self._unindex(uid)
            del self._order[uid]
        return qpod

    def counts_by_plugin(self) -> dict[str, int]:
        """Parked pods per rejecting (or gating) plugin, from the index: O(plugins)."""
        return {plugin: len(uids) for plugin, uids in self._by_plugin.items()}

    def rejected_by(self, plugins: Iterable[str]) -> list[QueuedPodInfo]:
        """The pods some of ``plugins`` rejected, and those no plugin rejected, in arrival order."""
        uids = set(self._no_rejector)
        for plugin in plugins:
            uids |= self._by_plugin.get(plugin, set())
        if len(uids) * _SPARSE_RATIO < len(self._pods):
            return [self._pods[uid] for uid in sorted(uids, key=self._order.__getitem__)]
        return [qpod for uid, qpod in self._pods.items() if uid in uids]

    def _unindex(self, uid: str) -> None:
        for plugin in self._plugins_of.pop(uid, ()):
            uids = self._by_plugin.get(plugin)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._by_plugin[plugin]
        self._no_rejector.discard(uid)
        self._gated.discard(uid)
