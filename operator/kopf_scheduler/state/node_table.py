"""The columnar node table: one row (slot) per node, one numpy column per fact the plugins compare.

Filter and Score plugins judge all candidate nodes in one numpy expression over these columns instead of
looping over NodeInfo objects: that is what makes the hot path fast at thousands of nodes. The cache
updates rows in place on every node or pod event (O(1) per event), so nothing is rebuilt per cycle.

Slots are stable for a node's lifetime; a deleted node's slot is marked dead and reused later. Plugins get
arrays of slots (``nodes``) and return arrays aligned with them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

import numpy as np

from kopf_scheduler.state.tolerations import Taint

#: Fixed resource columns; extended/scalar resources get further columns as they are first seen.
CPU, MEMORY, EPHEMERAL_STORAGE, PODS = 0, 1, 2, 3
BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class LabelColumn:
    """One node label key: interned value id per slot (−1 = absent)."""

    ids: np.ndarray
    values: list[str] = field(default_factory=list)
    value_ids: dict[str, int] = field(default_factory=dict)

    def intern(self, value: str) -> int:
        found = self.value_ids.get(value)
        if found is None:
            found = self.value_ids[value] = len(self.values)
            self.values.append(value)
        return found


class NodeTable:
    """Columns indexed by slot. Grows by doubling; all columns share the capacity."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.resources: list[str] = list(BASE_RESOURCES)
        self.resource_index: dict[str, int] = {name: i for i, name in enumerate(self.resources)}
        self.names: list[str | None] = [None] * capacity
        self.alive = np.zeros(capacity, dtype=bool)
        self.allocatable = np.zeros((capacity, len(self.resources)), dtype=np.int64)
        self.requested = np.zeros((capacity, len(self.resources)), dtype=np.int64)
        #: cpu, memory with the non-zero defaults (LeastAllocated/MostAllocated/RTCR node side).
        self.non_zero_requested = np.zeros((capacity, 2), dtype=np.int64)
        self.pod_count = np.zeros(capacity, dtype=np.int64)
        #: A number that changes whenever the slot's set of pods or its allocatable changes, or the slot changes
        #: hands (never reused within the table): what a plugin derived from a node's pods and resources alone
        #: (volume counts, resource scores) is current while it is the same.
        self.version = np.zeros(capacity, dtype=np.int64)
        self._last_version = 0
        self.unschedulable = np.zeros(capacity, dtype=bool)
        self.taint_set = np.zeros(capacity, dtype=np.int32)
        #: Distinct taint lists seen; id 0 is "no taints". Pods' tolerations are checked once per set.
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_set_ids: dict[tuple[Taint, ...], int] = {(): 0}
        #: Interned ``status.declaredFeatures`` sets; id 0 is "declares none" (read by NodeDeclaredFeatures).
        self.declared_feature_set = np.zeros(capacity, dtype=np.int32)
        self.declared_feature_sets: list[frozenset[str]] = [frozenset()]
        self._declared_feature_set_ids: dict[frozenset[str], int] = {frozenset(): 0}
        self.labels: dict[str, LabelColumn] = {}
        self._free: list[int] = []
        self._next = 0

    # -- slots ---------------------------------------------------------------------------------------
    def allocate(self, name: str) -> int:
        if self._free:
            slot = self._free.pop()
        else:
            if self._next == self.capacity:
                self._grow(self.capacity * 2)
            slot = self._next
            self._next += 1
        self.names[slot] = name
        self.alive[slot] = True
        self.touch(slot)
        return slot

    def release(self, slot: int) -> None:
        self.names[slot] = None
        self.alive[slot] = False
        self.allocatable[slot] = 0
        self.requested[slot] = 0
        self.non_zero_requested[slot] = 0
        self.pod_count[slot] = 0
        self.touch(slot)
        self.unschedulable[slot] = False
        self.taint_set[slot] = 0
        self.declared_feature_set[slot] = 0
        for column in self.labels.values():
            column.ids[slot] = -1
        self._free.append(slot)

    def touch(self, slot: int) -> None:
        """The slot's pods or allocatable changed (or its node): give it a new :attr:`version`."""
        self._last_version += 1
        self.version[slot] = self._last_version

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.capacity

        def pad(array: np.ndarray, fill: object = 0) -> np.ndarray:
            shape = (extra, *array.shape[1:])
            return np.concatenate([array, np.full(shape, fill, dtype=array.dtype)])

        self.alive = pad(self.alive, False)
        self.allocatable = pad(self.allocatable)
        self.requested = pad(self.requested)
        self.non_zero_requested = pad(self.non_zero_requested)
        self.pod_count = pad(self.pod_count)
        self.version = pad(self.version)
        self.unschedulable = pad(self.unschedulable, False)
        self.taint_set = pad(self.taint_set)
        self.declared_feature_set = pad(self.declared_feature_set)
        for column in self.labels.values():
            column.ids = pad(column.ids, -1)
        self.names.extend([None] * extra)
        self.capacity = capacity

    # -- resources -----------------------------------------------------------------------------------
    def resource_column(self, name: str, *, create: bool = False) -> int | None:
        """The column of ``name`` in allocatable/requested; scalar resources are added on demand."""
        index = self.resource_index.get(name)
        if index is None and create:
            index = len(self.resources)
            self.resources.append(name)
            self.resource_index[name] = index
            zeros = np.zeros((self.capacity, 1), dtype=np.int64)
            self.allocatable = np.hstack([self.allocatable, zeros])
            self.requested = np.hstack([self.requested, zeros.copy()])
        return index

    def _add_requests(self, slot: int, requests: Mapping[str, int], sign: int) -> None:
        index = self.resource_index
        for name, value in requests.items():
            if value:
                column = index.get(name)
                if column is None:
                    column = self.resource_column(name, create=True)
                    assert column is not None
                self.requested[slot, column] += sign * value

    def add_pod(self, slot: int, requests: Mapping[str, int], non_zero: tuple[int, int], sign: int) -> None:
        """One pod's accounting on ``slot`` (``sign`` +1 or -1): its requests, the non-zero columns,
        :attr:`pod_count` and :meth:`touch`."""
        self._add_requests(slot, requests, sign)
        self.non_zero_requested[slot, 0] += sign * non_zero[0]
        self.non_zero_requested[slot, 1] += sign * non_zero[1]
        self.pod_count[slot] += sign
        self.touch(slot)

    def add_pods(
        self,
        slots: Sequence[int],
        requests: Sequence[Mapping[str, int]],
        non_zero: Sequence[tuple[int, int]],
        sign: int,
    ) -> None:
        """:meth:`add_pod` for pod *i* on ``slots[i]`` (slots may repeat), one numpy update per column instead of
        a handful per pod (DefaultPreemption's dry run takes thousands of victims off and puts them back)."""
        if not slots:
            return
        rows: list[int] = []
        columns: list[int] = []
        values: list[int] = []
        index = self.resource_index
        for row, pod_requests in enumerate(requests):
            for name, value in pod_requests.items():
                if value:
                    column = index.get(name)
                    if column is None:  # a new column (before ``requested`` is indexed below: it is re-made)
                        column = self.resource_column(name, create=True)
                        assert column is not None  # create=True always answers a column
                    rows.append(row)
                    columns.append(column)
                    values.append(value)
        at = np.asarray(slots, dtype=np.int64)
        if rows:
            cells = (at[rows], np.asarray(columns, dtype=np.intp))
            np.add.at(self.requested, cells, sign * np.asarray(values, dtype=np.int64))
        np.add.at(self.non_zero_requested, at, sign * np.asarray(non_zero, dtype=np.int64).reshape(-1, 2))
        np.add.at(self.pod_count, at, sign)
        versions = np.arange(self._last_version + 1, self._last_version + len(at) + 1, dtype=np.int64)
        self.version[at] = versions  # a repeated slot gets one of its new versions: each is unused
        self._last_version += len(at)

    def set_allocatable(self, slot: int, allocatable: dict[str, int]) -> None:
        """The node's allocatable; a new :attr:`version` only when it changed (most node updates are status)."""
        # create=True answers a column for every name
        columns = cast(list[int], [self.resource_column(name, create=True) for name in allocatable])
        row = np.zeros(len(self.resources), dtype=np.int64)
        row[columns] = list(allocatable.values())
        if not np.array_equal(row, self.allocatable[slot]):
            self.allocatable[slot] = row
            self.touch(slot)

    # -- labels and taints ---------------------------------------------------------------------------
    def label_column(self, key: str) -> LabelColumn | None:
        return self.labels.get(key)

    def set_labels(self, slot: int, labels: dict[str, str]) -> None:
        for key, column in self.labels.items():
            if key not in labels:
                column.ids[slot] = -1
        for key, value in labels.items():
            found = self.labels.get(key)
            if found is None:
                found = self.labels[key] = LabelColumn(ids=np.full(self.capacity, -1, dtype=np.int32))
            found.ids[slot] = found.intern(value)

    def set_taints(self, slot: int, taints: tuple[Taint, ...]) -> None:
        self.taint_set[slot] = _intern(taints, self.taint_sets, self._taint_set_ids)

    def set_declared_features(self, slot: int, features: frozenset[str]) -> None:
        """``status.declaredFeatures``: the API server keeps the list sorted and unique, so a set loses nothing."""
        self.declared_feature_set[slot] = _intern(features, self.declared_feature_sets, self._declared_feature_set_ids)


def _intern(value: K, values: list[K], ids: dict[K, int]) -> int:
    """The id of ``value`` among ``values`` (appended on first sight); distinct values are few, nodes many."""
    found = ids.get(value)
    if found is None:
        found = ids[value] = len(values)
        values.append(value)
    return found
