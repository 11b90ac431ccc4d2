"""Per-node counts of the pods matching a label selector, kept current by the cache's pod events.

PodTopologySpread counts, per node, the non-terminating pods of the incoming pod's namespace that match a
constraint's selector, every cycle. The pods of one workload all ask for the same (namespace, selector), so
walking every matching pod each cycle repeats the same work; at 10 000 matching pods it costs milliseconds.
Instead the first request builds the count array once from the cache's label index, and from then on every
pod attached to or detached from a node adjusts the arrays of the tracked selectors of its namespace by ±1.
Only the most recently used selectors are tracked (an LRU), so a pod event costs at most that many matches.
InterPodAffinity asks for the same counts *including* terminating pods (upstream still counts those there);
that is a separate tracked entry.

The counts read the cache through :class:`PodSource`, the three calls they make, rather than importing
``ClusterCache``: the cache owns an instance and feeds it its pod events, so the dependency runs one way,
cache → selector_counts.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kopf_scheduler.state.selectors import LabelSelector

if TYPE_CHECKING:
    from kopf_scheduler.state.node_table import NodeTable
    from kopf_scheduler.state.pod_info import PodInfo

#: How many (namespace, selector) pairs are kept current; the least recently used is dropped beyond it.
DEFAULT_TRACKED = 64


class _Slotted(Protocol):
    @property
    def slot(self) -> int: ...


class PodSource(Protocol):
    """What the counts read from the cache (``ClusterCache`` satisfies it): the node table's capacity, the
    assigned pods of a namespace matching a selector, and the slot of a node by name."""

    @property
    def table(self) -> NodeTable: ...

    def matching_pods(self, namespace: str, selector: LabelSelector) -> list[PodInfo]: ...

    def node(self, name: str) -> _Slotted | None: ...


class SelectorPodCounts:
    """(namespace, selector, include_terminating) → int64 array indexed by node slot: matching assigned pods."""

    __slots__ = ("_by_namespace", "_limit", "_tracked")

    def __init__(self, limit: int = DEFAULT_TRACKED) -> None:
        self._limit = limit
        self._tracked: OrderedDict[tuple[str, LabelSelector, bool], np.ndarray] = OrderedDict()
        self._by_namespace: dict[str, set[tuple[LabelSelector, bool]]] = {}

    def get(
        self, cache: PodSource, namespace: str, selector: LabelSelector, *, include_terminating: bool = False
    ) -> np.ndarray:
        """The counts, as a read-only array of length ``cache.table.capacity``; it is only valid until the
        next cache change (copy what must outlive the scheduling cycle)."""
        key = (namespace, selector, include_terminating)
        counts = self._tracked.get(key)
        capacity = cache.table.capacity
        if counts is None:
            counts = self._build(cache, namespace, selector, include_terminating)
            self._tracked[key] = counts
            self._by_namespace.setdefault(namespace, set()).add((selector, include_terminating))
            if len(self._tracked) > self._limit:
                (old_namespace, old_selector, old_terminating), _ = self._tracked.popitem(last=False)
                selectors = self._by_namespace[old_namespace]
                selectors.discard((old_selector, old_terminating))
                if not selectors:
                    del self._by_namespace[old_namespace]
        else:
            self._tracked.move_to_end(key)
            if len(counts) < capacity:
                counts = self._tracked[key] = _padded(counts, capacity)
        view = counts.view()
        view.flags.writeable = False
        return view

    @staticmethod
    def _build(cache: PodSource, namespace: str, selector: LabelSelector, include_terminating: bool) -> np.ndarray:
        slots: list[int] = []
        for pod in cache.matching_pods(namespace, selector):
            if pod.terminating and not include_terminating:
                continue
            info = cache.node(pod.node_name)
            if info is not None:
                slots.append(info.slot)
        return np.bincount(np.asarray(slots, dtype=np.int64), minlength=cache.table.capacity).astype(np.int64)

    def update(self, pod: PodInfo, slot: int, delta: int) -> None:
        """``pod`` was attached to (+1) or detached from (−1) the node in ``slot``."""
        selectors = self._by_namespace.get(pod.namespace)
        if not selectors:
            return
        for selector, include_terminating in selectors:
            if (include_terminating or not pod.terminating) and selector.matches(pod.labels):
                key = (pod.namespace, selector, include_terminating)
                counts = self._tracked[key]
                if slot >= len(counts):
                    counts = self._tracked[key] = _padded(counts, slot + 1)
                counts[slot] += delta


def _padded(counts: np.ndarray, length: int) -> np.ndarray:
    return np.concatenate([counts, np.zeros(length - len(counts), dtype=np.int64)])
