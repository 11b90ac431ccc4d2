"""Filter, PostFilter and Score verdicts: which node each plugin rejected, what preemption proposes, and the
weighted scores of the feasible ones.

Upstream keeps a ``NodeToStatus`` map (``framework/types.go``: one ``*Status`` per rejected node, plus the
status of nodes absent from the map) and ``NodePluginScores`` (``framework/interface.go``: per node, each
plugin's weighted score and the total). Our Filter plugins judge arrays of node-table slots at once, so the
rejections are kept as the arrays the plugins returned (:class:`FilterStatuses`) and only turned into per-node
``Status`` objects when someone asks (PostFilter, explanations); the FailedScheduling histogram is counted
straight from the arrays. Scores are one int64 array per plugin (:class:`ScoreOutcome`). A PostFilter plugin
answers a :class:`PostFilterResult` (upstream's ``PostFilterResult`` with its ``NominatingInfo``).

The runtime (:mod:`kopf_scheduler.framework.runtime`) produces these; the scheduler and explanations read them.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kopf_scheduler.framework.status import Code, Status


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """What a PostFilter plugin (preemption) proposes: a node to nominate, or nothing.

    Upstream's ``NominatingInfo`` with mode ``Override``: the scheduler records the nomination in the
    nominator and writes it to the pod's ``status.nominatedNodeName`` when it handles the failure. A result
    with ``nominated_node_name`` None (or no result) leaves an existing nomination as it is; upstream clears
    it only when preemption is not helpful anywhere (``clear_nomination``).
    """

    nominated_node_name: str | None = None
    #: Upstream ``ModeOverride`` with an empty name: remove the pod's nomination (preemption cannot help).
    clear_nomination: bool = False
    #: For ``kopf-scheduler explain``: per node, why preemption did or did not help there (not upstream's).
    node_messages: Mapping[str, str] | None = None


@dataclass(slots=True)
class _Rejections:
    """The nodes one Filter plugin rejected in one call, as the arrays it returned."""

    plugin: str
    slots: np.ndarray
    #: Processing positions of those nodes (−1 for a node evaluated outside the ordered search).
    positions: np.ndarray
    #: Palette of statuses, already stamped with the plugin name; ``index`` picks one per node (None: the only one).
    statuses: tuple[Status, ...]
    index: np.ndarray | None

    def status_at(self, i: int) -> Status:
        return self.statuses[0] if self.index is None else self.statuses[int(self.index[i])]


class FilterStatuses:
    """Node-table slot → the Status that rejected it: upstream's explicit ``NodeToStatus`` entries.

    Stored as per-plugin arrays; a ``dict`` is built only on demand. Entries at processing positions at
    or past :attr:`limit` do not count (nodes judged beyond the sampling cut-off, see :meth:`truncate`).
    When the same node was judged twice (the nominated node first, then again in the full search), the
    later verdict wins, as with upstream's map.
    """

    __slots__ = ("_chunks", "_dict", "_may_overlap", "limit")

    def __init__(self) -> None:
        self._chunks: list[_Rejections] = []
        self._dict: dict[int, Status] | None = None
        self._may_overlap = False
        self.limit: int | None = None

    # building
    def add(
        self,
        plugin: str,
        slots: np.ndarray,
        positions: np.ndarray,
        statuses: tuple[Status, ...],
        index: np.ndarray | None,
    ) -> None:
        if len(slots):
            self._chunks.append(_Rejections(plugin, slots, positions, statuses, index))
            self._dict = None

    def set(self, slot: int, status: Status, *, position: int = -1) -> None:
        """Record one node's verdict (Reserve/Permit rejections, the nominated node)."""
        self.add(
            status.plugin,
            np.asarray([slot], dtype=np.int64),
            np.asarray([position], dtype=np.int64),
            (status,),
            None,
        )
        self._may_overlap = True

    def extend(self, other: FilterStatuses) -> None:
        """Append every entry of ``other`` as recorded there (its truncation limit is not carried over)."""
        for chunk in other._chunks:
            self.add(chunk.plugin, chunk.slots, chunk.positions, chunk.statuses, chunk.index)

    def mark_overlapping(self) -> None:
        """Entries added from now on may repeat slots already present (later wins)."""
        self._may_overlap = True

    def truncate(self, limit: int) -> None:
        """Forget nodes at processing positions ≥ ``limit`` (judged after the search had found enough)."""
        self.limit = limit if self.limit is None else min(self.limit, limit)
        self._dict = None

    # reading
    def _kept(self, chunk: _Rejections) -> np.ndarray | None:
        """Mask of the chunk's entries that count, or None when all do."""
        if self.limit is None or int(chunk.positions.max()) < self.limit:
            return None
        return chunk.positions < self.limit

    def _iter_entries(self) -> Iterator[tuple[int, Status]]:
        for chunk in self._chunks:
            kept = self._kept(chunk)
            for i in range(len(chunk.slots)):
                if kept is None or kept[i]:
                    yield int(chunk.slots[i]), chunk.status_at(i)

    def as_dict(self) -> dict[int, Status]:
        if self._dict is None:
            self._dict = dict(self._iter_entries())
        return self._dict

    def __len__(self) -> int:
        if self._may_overlap:
            return len(self.as_dict())
        total = 0
        for chunk in self._chunks:
            kept = self._kept(chunk)
            total += len(chunk.slots) if kept is None else int(np.count_nonzero(kept))
        return total

    def __bool__(self) -> bool:
        return len(self) > 0

    def __contains__(self, slot: object) -> bool:
        return slot in self.as_dict()

    def get(self, slot: int) -> Status | None:
        return self.as_dict().get(slot)

    def items(self) -> Iterator[tuple[int, Status]]:
        return iter(self.as_dict().items())

    def slots(self) -> np.ndarray:
        return np.fromiter(self.as_dict(), dtype=np.int64)

    def plugins(self) -> builtins.set[str]:
        """Plugins that rejected at least one counted node (upstream ``Diagnosis.UnschedulablePlugins``)."""
        if self._may_overlap:
            return {status.plugin for status in self.as_dict().values() if status.plugin}
        found: set[str] = set()
        for chunk in self._chunks:
            kept = self._kept(chunk)
            if chunk.plugin and (kept is None or kept.any()):
                found.add(chunk.plugin)
        return found

    def counts_by_plugin(self) -> dict[str, int]:
        """Plugin → how many counted nodes it rejected (which plugin is keeping the pod off the cluster)."""
        counts: dict[str, int] = {}
        if self._may_overlap:
            for status in self.as_dict().values():
                counts[status.plugin] = counts.get(status.plugin, 0) + 1
            return counts
        for chunk in self._chunks:
            kept = self._kept(chunk)
            count = len(chunk.slots) if kept is None else int(np.count_nonzero(kept))
            if count:
                counts[chunk.plugin] = counts.get(chunk.plugin, 0) + count
        return counts

    def reason_counts(self) -> dict[str, int]:
        """How many counted nodes carry each reason: the FailedScheduling histogram, from the arrays."""
        counts: dict[str, int] = {}
        if self._may_overlap:
            for status in self.as_dict().values():
                for reason in status.reasons:
                    counts[reason] = counts.get(reason, 0) + 1
            return counts
        for chunk in self._chunks:
            kept = self._kept(chunk)
            if chunk.index is None:
                per_status = [len(chunk.slots) if kept is None else int(np.count_nonzero(kept))]
            else:
                index = chunk.index if kept is None else chunk.index[kept]
                per_status = np.bincount(index, minlength=len(chunk.statuses)).tolist()
            for status, count in zip(chunk.statuses, per_status, strict=False):
                if count:
                    for reason in status.reasons:
                        counts[reason] = counts.get(reason, 0) + count
        return counts


class NodeToStatusMap(Mapping[str, Status]):
    """Node name → rejecting Status, plus the status of nodes not in the map (upstream ``NodeToStatus``).

    This is what PostFilter plugins receive. ``absent_nodes_status`` applies to every node of the snapshot
    that has no explicit entry: nodes a PreFilterResult excluded, or all nodes when PreFilter rejected.
    Names are read from the node table when first needed, so read the map within the cycle.
    """

    def __init__(
        self, statuses: FilterStatuses, names: Sequence[str | None], absent_nodes_status: Status | None = None
    ) -> None:
        self.statuses = statuses
        self._names = names
        self.absent_nodes_status = absent_nodes_status or Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        self._by_name: dict[str, Status] | None = None

    def _map(self) -> dict[str, Status]:
        if self._by_name is None:
            names = self._names
            self._by_name = {str(names[slot]): status for slot, status in self.statuses.items()}
        return self._by_name

    def __getitem__(self, name: str) -> Status:
        return self._map()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map())

    def __len__(self) -> int:
        return len(self.statuses)

    def status_of(self, name: str) -> Status:
        """The node's explicit status, or the absent-nodes status (upstream ``NodeToStatus.Get``)."""
        return self._map().get(name, self.absent_nodes_status)

    def nodes_with_code(self, code: Code, all_names: Iterable[str]) -> list[str]:
        """Names among ``all_names`` whose status has ``code`` (upstream ``NodesForStatusCode``), in their order.
        One dict lookup a name: DefaultPreemption asks it of every node in every preemption cycle."""
        by_name, absent = self._map(), self.absent_nodes_status
        return [name for name in all_names if by_name.get(name, absent).code is code]


@dataclass(slots=True)
class FilterOutcome:
    """What :meth:`Framework.run_filter_plugins` found for the nodes it was given."""

    #: Slots of the nodes that passed every filter, in the order they were given.
    feasible: np.ndarray
    #: Processing positions of those nodes, aligned with ``feasible`` (ascending).
    feasible_positions: np.ndarray
    #: Verdicts of the nodes that failed (shared with the caller when it passed its own).
    statuses: FilterStatuses
    #: A plugin error (not a rejection): the cycle must stop with a scheduling error.
    error: Status | None = None


@dataclass(slots=True)
class ScoreOutcome:
    """Weighted scores per plugin for the feasible nodes, and their totals (upstream ``NodePluginScores``)."""

    nodes: np.ndarray
    plugins: tuple[str, ...]
    weights: tuple[int, ...]
    #: One int64 array per plugin, aligned with ``nodes``: normalised score × weight.
    scores: tuple[np.ndarray, ...]
    totals: np.ndarray
    #: One int64 array per plugin, aligned with ``nodes``: the score before NormalizeScore (upstream's
    #: ``Score`` result); empty when not known. The normalised score is ``scores[i] // weights[i]``.
    raw: tuple[np.ndarray, ...] = ()

    def breakdown(self, position: int) -> dict[str, int]:
        """Plugin → weighted score of the node at ``position`` (why it won, or lost)."""
        return {name: int(scores[position]) for name, scores in zip(self.plugins, self.scores, strict=True)}

    def top(self, k: int = 3) -> list[tuple[int, int]]:
        """The ``k`` best (position, total score) pairs, best first."""
        k = min(k, len(self.totals))
        if k <= 0:
            return []
        best = np.argpartition(-self.totals, k - 1)[:k]
        best = best[np.argsort(-self.totals[best], kind="stable")]
        return [(int(i), int(self.totals[i])) for i in best]


__all__ = ["FilterOutcome", "FilterStatuses", "NodeToStatusMap", "PostFilterResult", "ScoreOutcome"]
