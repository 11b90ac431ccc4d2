"""How much of a DRA-backed extended resource a node has, for the resource-allocation scorers (NodeResourcesFit,
NodeResourcesBalancedAllocation) when ``scoringStrategy.resources`` / ``resources`` name such a resource
(DRAExtendedResource, beta and on in 1.36; upstream ``noderesources/resource_allocation.go``:
``getDRAPreScoredParams``, ``calculateDRAResourceTotals``, ``deviceMatchesClass``).

On a node whose allocatable has none of the resource, upstream counts the devices of the backing DeviceClass
that the node can reach (allocatable) and those of them already allocated or in flight (allocated), and scores
the resource with those numbers. As upstream:

* every ResourceSlice counts, whatever its pool generation; a slice reaches the node by ``nodeName``,
  ``allNodes`` or its node selector, and with ``perDeviceNodeSelection`` each device by its own fields;
* a device matches the class when every CEL selector of the class is true for it (a class without selectors
  takes every device of every driver); an error (CEL, node selector) leaves the resource out on that node
  (upstream logs it and counts 0);
* a device is allocated when a claim (or an in-flight allocation) holds it whole, a share of it, or some of
  its capacity (``IsDeviceAllocated``).

Not restated: upstream's scorer caches match results by (expression, driver, pool, device) for its lifetime,
so a device whose attributes change keeps its first verdict there; here every score reads the slices as they
are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from kopf_scheduler.plugins.dynamic_resources.allocator import AllocatedState, node_matches
from kopf_scheduler.plugins.dynamic_resources.cel import CelError, SelectorCache
from kopf_scheduler.plugins.dynamic_resources.tracker import tracker_for
from kopf_scheduler.plugins.helper.device_class_mapping import device_class_for, is_dra_extended_resource_name
from kopf_scheduler.state.cache import Snapshot
from kopf_scheduler.state.objects import RESOURCE_SLICE

#: (allocatable, allocated) of a DRA-backed resource on the given node slots; None: no DeviceClass backs it.
DraCapacity = Callable[[str, np.ndarray], tuple[np.ndarray, np.ndarray] | None]

#: Upstream's scorer compiles CEL through a cache of its own (``cel.NewCache(10, …)``).
_SELECTORS = SelectorCache(max_size=10)


def may_score_dra(resource_names: list[str]) -> bool:
    """Whether a scored resource could be DRA-backed at all (the scorers skip all of this otherwise)."""
    return any(is_dra_extended_resource_name(name) for name in resource_names)


def dra_capacity(snapshot: Snapshot) -> DraCapacity:
    """The scorers' view of DRA-backed resources for one Score call (upstream ``getDRAPreScoredParams``: the
    allocated devices and the slices, gathered once)."""
    objects = snapshot.cache.objects
    gathered: list[Any] = []

    def capacity(resource: str, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        device_class = device_class_for(objects, resource)
        if device_class is None:
            return None
        if not gathered:
            gathered.append(tracker_for(snapshot.cache).allocated_state())
            gathered.append(list(objects.all(RESOURCE_SLICE)))
        state, slices = gathered
        allocatable = np.zeros(len(nodes), dtype=np.int64)
        allocated = np.zeros(len(nodes), dtype=np.int64)
        for position, slot in enumerate(nodes.tolist()):
            node = snapshot.node_info(int(slot)).obj
            try:
                allocatable[position], allocated[position] = device_totals(node, device_class, slices, state)
            except (CelError, ValueError):
                continue  # upstream logs the error and scores the node without the resource
        return allocatable, allocated

    return capacity


def device_totals(
    node: Mapping[str, Any], device_class: Mapping[str, Any], slices: list[Mapping[str, Any]], state: AllocatedState
) -> tuple[int, int]:
    """Upstream ``calculateDRAResourceTotals``: the class's devices the node reaches, and how many are taken."""
    node_name = (node.get("metadata") or {}).get("name") or ""
    selectors = [
        s["cel"]["expression"] for s in (device_class.get("spec") or {}).get("selectors") or () if s.get("cel")
    ]
    total = taken = 0
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        driver, pool = spec.get("driver") or "", (spec.get("pool") or {}).get("name") or ""
        for device in _reachable_devices(node, node_name, spec):
            if all(_SELECTORS.compile(expression).matches(driver, device) for expression in selectors):
                total += 1
                taken += state.is_allocated((driver, pool, device.get("name") or ""))
    return total, taken


def _reachable_devices(node: Mapping[str, Any], node_name: str, spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The slice's devices the node can use, by upstream's slice- or device-level node selection."""
    devices = spec.get("devices") or []
    if spec.get("perDeviceNodeSelection"):
        return [device for device in devices if _device_reaches(node, node_name, device)]
    slice_node, all_nodes = spec.get("nodeName") or "", bool(spec.get("allNodes"))
    if not all_nodes and slice_node != node_name and spec.get("nodeSelector") is not None:
        if not node_matches(node, slice_node, all_nodes, spec["nodeSelector"]):
            return []
    elif not all_nodes and slice_node and slice_node != node_name:
        return []
    return list(devices)


def _device_reaches(node: Mapping[str, Any], node_name: str, device: Mapping[str, Any]) -> bool:
    """Per-device node selection: ``allNodes``, the node's name, or a node selector that matches it."""
    device_node, all_nodes = device.get("nodeName") or "", bool(device.get("allNodes"))
    if all_nodes or (device_node and device_node == node_name):
        return True
    selector = device.get("nodeSelector")
    return selector is not None and node_matches(node, device_node, all_nodes, selector)
