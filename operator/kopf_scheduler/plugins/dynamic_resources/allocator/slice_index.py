"""The ResourceSlices of one moment split by node, each node's pools and candidate devices, and its finished
searches, kept between scheduling cycles.

Upstream runs ``GatherPools`` (``pools_incubating.go``) and builds the candidates on every ``Allocate`` call; the
outcome depends only on the slices and the node, so the plugin keeps one index until a ResourceSlice changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kopf_scheduler.plugins.dynamic_resources.allocator.allocated import AllocatedState
from kopf_scheduler.plugins.dynamic_resources.allocator.common import DeviceID, Features, spec_of
from kopf_scheduler.plugins.dynamic_resources.allocator.pools import (
    Pool,
    gather_pools,
    node_labels_of,
    node_name_of,
    slice_devices,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.requests import Candidate


class KeptSearch(Protocol):
    """A finished search (an :class:`~.allocation.Allocation`) that answers again for equal claims."""

    def results_for(self, claims: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]: ...


NodeDevices = tuple[list[Pool], list[list[list[Candidate]]]]


class SliceIndex:
    """The ResourceSlices of one moment, split by node, with each node's pools and device candidates kept
    between scheduling cycles.

    Upstream runs ``GatherPools`` and builds the candidates on every Allocate call (once per pod and node); the
    inputs are only the slices, the node's name and its labels (slice node selectors), so one index serves
    every pod until a ResourceSlice changes (the plugin then builds a new one), and a node's entry is rebuilt
    when its labels change. Allocation state is not part of it: devices in use are checked per Allocate.
    """

    def __init__(self, slices: Iterable[Mapping[str, Any]], features: Features) -> None:
        self.features = features
        self.all_slices = list(slices)
        self.slices_on_node: dict[str, list[Mapping[str, Any]]] = {}
        self.slices_shared: list[Mapping[str, Any]] = []
        for slice_ in self.all_slices:
            spec = spec_of(slice_)
            if not spec.get("nodeName") or spec.get("sharedCounters"):
                self.slices_shared.append(slice_)
            else:
                self.slices_on_node.setdefault(spec["nodeName"], []).append(slice_)
        #: node name → (the node's labels when built, its pools, their candidates by pool and slice).
        self._nodes: dict[str, tuple[dict[str, str], NodeDevices]] = {}
        #: node name → the node's kept searches (see :meth:`~.incubating.Allocator.allocate`), dropped with its entry.
        self._searches: dict[str, NodeSearches] = {}

    def node_devices(self, node: Mapping[str, Any]) -> NodeDevices:
        """The node's pools (``gather_pools``) and their devices in search order; raises AllocationError as
        ``gather_pools`` does (not kept: the next call raises again)."""
        name = node_name_of(node)
        labels = node_labels_of(node)
        cached = self._nodes.get(name)
        if cached is not None and cached[0] == labels:
            return cached[1]
        slices_for_node = self.slices_on_node.get(name, []) + self.slices_shared
        pools = gather_pools(slices_for_node, node, self.features, self.all_slices)
        candidates = [[[_candidate(p, s, d) for d in slice_devices(s)] for s in p.slices] for p in pools]
        devices = (pools, candidates)
        self._nodes[name] = (dict(labels), devices)
        self._searches.pop(name, None)
        return devices

    def searches(self, node: Mapping[str, Any]) -> NodeSearches | None:
        """The node's kept searches, for a node :meth:`node_devices` just answered; None when its pools are
        not all plain (shared counters, slices of the pool elsewhere, incomplete or invalid: the outcome then
        depends on more than the node's own devices)."""
        name = node_name_of(node)
        searches = self._searches.get(name)
        if searches is None:
            pools, candidates = self._nodes[name][1]
            plain = all(not (p.counter_sets or p.other_slices or p.incomplete or p.invalid) for p in pools)
            ids = tuple(c.id for pool in candidates for slice_ in pool for c in slice_)
            searches = self._searches[name] = NodeSearches(ids if plain else None)
        return searches if searches.device_ids is not None else None


#: The most distinct searches kept per node (pods with different claims); the oldest go first.
KEPT_SEARCHES_PER_NODE = 8


@dataclass
class NodeSearches:
    """Finished searches on one node by (claims signature, which of its devices were in use): the search is
    deterministic in these (with the pools and classes), so a later pod with equal claims gets the same devices
    without searching again; its results are rebuilt for its own claims."""

    device_ids: tuple[DeviceID, ...] | None
    found: dict[tuple[str, tuple[int, ...]], KeptSearch | None] = field(default_factory=dict)
    device_set: frozenset[DeviceID] = frozenset()

    def __post_init__(self) -> None:
        self.device_set = frozenset(self.device_ids or ())

    def in_use(self, allocated: AllocatedState) -> tuple[int, ...]:
        assert self.device_ids is not None
        taken = allocated.devices
        if self.device_set.isdisjoint(taken):
            return ()
        return tuple(index for index, device_id in enumerate(self.device_ids) if device_id in taken)

    def keep(self, key: tuple[str, tuple[int, ...]], search: KeptSearch | None) -> None:
        if len(self.found) >= KEPT_SEARCHES_PER_NODE:
            del self.found[next(iter(self.found))]
        self.found[key] = search


def _candidate(pool: Pool, slice_: Mapping[str, Any], device: Mapping[str, Any]) -> Candidate:
    return Candidate((pool.driver, pool.name, device.get("name", "")), device, slice_, pool)
