"""The resource pools a node sees: which slices offer devices to it, the newest generation of each pool, incomplete
and invalid pools, and their search order.

Upstream counterpart: ``structured/internal/incubating/pools_incubating.go`` (``GatherPools``, ``addSlice``,
``checkSlicesInPool``, ``buildPool``) and ``NodeMatches``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.plugins.dynamic_resources.allocator.common import AllocationError, Features, spec_of
from kopf_scheduler.state.node_affinity import NodeSelector, NodeSelectorParseError


def node_name_of(node: Mapping[str, Any]) -> str:
    name: str = (node.get("metadata") or {}).get("name", "")
    return name


def node_labels_of(node: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    return labels


def node_matches(
    node: Mapping[str, Any], node_name: str, all_nodes: bool, node_selector: Mapping[str, Any] | None
) -> bool:
    """Upstream ``NodeMatches``; raises ValueError when the node selector does not parse."""
    if node_name:
        return node_name_of(node) == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        selector = NodeSelector.parse(node_selector, strict=True)
        return selector.matches(node_labels_of(node), node_name_of(node))
    return False


@dataclass
class Pool:
    """A resource pool as seen from one node (upstream ``Pool``)."""

    driver: str
    name: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[Mapping[str, Any]] = field(default_factory=list)  # device slices targeting the node
    other_slices: list[Mapping[str, Any]] = field(default_factory=list)  # device slices not targeting it
    counter_sets: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.name}"


def pool_key(slice_: Mapping[str, Any]) -> tuple[str, str]:
    spec = spec_of(slice_)
    return spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")


def _generation(slice_: Mapping[str, Any]) -> int:
    return int((spec_of(slice_).get("pool") or {}).get("generation") or 0)


def _slice_count(slice_: Mapping[str, Any]) -> int:
    return int((spec_of(slice_).get("pool") or {}).get("resourceSliceCount") or 0)


def _slice_name(slice_: Mapping[str, Any]) -> str:
    name: str = (slice_.get("metadata") or {}).get("name", "")
    return name


def slice_devices(slice_: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return spec_of(slice_).get("devices") or ()


def _slice_relevant(slice_: Mapping[str, Any], node: Mapping[str, Any]) -> bool | None:
    """Whether the slice offers devices to the node; None for a slice of an unknown kind (skipped)."""
    spec = spec_of(slice_)
    if spec.get("sharedCounters"):
        return True
    node_name, all_nodes, selector = spec.get("nodeName") or "", bool(spec.get("allNodes")), spec.get("nodeSelector")
    if node_name or all_nodes or selector is not None:
        try:
            return node_matches(node, node_name, all_nodes, selector)
        except (NodeSelectorParseError, ValueError) as err:
            raise AllocationError(
                f"gather pool information: failed to perform node selection for slice {_slice_name(slice_)}: "
                f"failed to parse node selector: {err}"
            ) from err
    if spec.get("perDeviceNodeSelection"):
        for device in slice_devices(slice_):
            try:
                if device_node_matches(node, device):
                    return True
            except (NodeSelectorParseError, ValueError) as err:
                raise AllocationError(
                    f"gather pool information: failed to perform node selection for device {device.get('name', '')} "
                    f"in slice {_slice_name(slice_)}: failed to parse node selector: {err}"
                ) from err
        return False
    return None


def device_node_matches(node: Mapping[str, Any], device: Mapping[str, Any]) -> bool:
    return node_matches(node, device.get("nodeName") or "", bool(device.get("allNodes")), device.get("nodeSelector"))


def _add_slice(pools: dict[tuple[str, str], list[Mapping[str, Any]]], slice_: Mapping[str, Any]) -> None:
    """Upstream ``addSlice``: only the newest generation of a pool is kept."""
    key = pool_key(slice_)
    current = pools.get(key)
    if current is None or _generation(slice_) > _generation(current[0]):
        pools[key] = [slice_]
    elif _generation(slice_) == _generation(current[0]):
        current.append(slice_)


def gather_pools(
    slices_for_node: Sequence[Mapping[str, Any]],
    node: Mapping[str, Any],
    features: Features,
    all_slices: Sequence[Mapping[str, Any]],
) -> list[Pool]:
    """Upstream ``GatherPools``: the pools with devices for the node, sorted by (driver, pool), those with
    binding conditions last. Out-dated pools are dropped; incomplete ones are kept, marked."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for slice_ in slices_for_node:
        spec = spec_of(slice_)
        if not features.partitionable_devices and (
            spec.get("perDeviceNodeSelection") is not None or spec.get("sharedCounters")
        ):
            continue
        if _slice_relevant(slice_, node):
            _add_slice(grouped, slice_)
    plain: list[Pool] = []
    with_binding: list[Pool] = []
    for (driver, name), pool_slices in grouped.items():
        pool = _pool_for(driver, name, pool_slices, features, all_slices)
        if pool is None:
            continue
        (with_binding if _has_binding_conditions(pool) else plain).append(pool)
    plain.sort(key=lambda p: (p.driver, p.name))
    with_binding.sort(key=lambda p: (p.driver, p.name))
    return plain + with_binding


def _pool_for(
    driver: str,
    name: str,
    pool_slices: list[Mapping[str, Any]],
    features: Features,
    all_slices: Sequence[Mapping[str, Any]],
) -> Pool | None:
    expected = _slice_count(pool_slices[0])
    if len(pool_slices) == expected:
        return _build_pool(driver, name, pool_slices, features, None)
    obsolete, all_for_pool = _slices_in_pool(all_slices, driver, name, _generation(pool_slices[0]))
    if obsolete:
        return None
    if len(all_for_pool) != expected:
        return Pool(driver, name, incomplete=True)
    return _build_pool(driver, name, pool_slices, features, all_for_pool)


def _slices_in_pool(
    all_slices: Sequence[Mapping[str, Any]], driver: str, name: str, generation: int
) -> tuple[bool, list[Mapping[str, Any]]]:
    """Upstream ``checkSlicesInPool``: (a newer generation exists, all slices of this generation)."""
    found = []
    for slice_ in all_slices:
        if pool_key(slice_) != (driver, name):
            continue
        if _generation(slice_) == generation:
            found.append(slice_)
        elif _generation(slice_) > generation:
            return True, []
    return False, found


def _build_pool(
    driver: str,
    name: str,
    pool_slices: list[Mapping[str, Any]],
    features: Features,
    all_for_pool: list[Mapping[str, Any]] | None,
) -> Pool:
    """Upstream ``buildPool``: slices by name, counter-set slices apart, names and counters validated."""
    ordered = sorted(pool_slices, key=_slice_name)
    if features.partitionable_devices:
        device_slices = [s for s in ordered if not spec_of(s).get("sharedCounters")]
        counter_slices = [s for s in ordered if spec_of(s).get("sharedCounters")]
    else:
        device_slices, counter_slices = ordered, []
    problem = _duplicate_device_name(device_slices)
    if problem:
        return Pool(driver, name, invalid=True, invalid_reason=problem)
    if not features.partitionable_devices:
        return Pool(driver, name, slices=device_slices)
    counter_sets: dict[str, Mapping[str, Any]] = {}
    for slice_ in counter_slices:
        for counter_set in spec_of(slice_).get("sharedCounters") or ():
            if counter_set.get("name", "") in counter_sets:
                reason = f"duplicate counter set name {counter_set.get('name', '')}"
                return Pool(driver, name, invalid=True, invalid_reason=reason)
            counter_sets[counter_set.get("name", "")] = counter_set
    problem = _counter_consumption_problem(counter_sets, ordered)
    if problem:
        return Pool(driver, name, invalid=True, invalid_reason=problem)
    if all_for_pool is None or len(ordered) == len(all_for_pool):
        return Pool(driver, name, slices=device_slices, counter_sets=counter_sets)
    seen = {_slice_name(s) for s in ordered}
    others = [s for s in all_for_pool if _slice_name(s) not in seen]
    problem = _counter_consumption_problem(counter_sets, others)
    if problem:
        return Pool(driver, name, invalid=True, invalid_reason=problem)
    return Pool(driver, name, slices=device_slices, other_slices=others, counter_sets=counter_sets)


def _duplicate_device_name(slices: Sequence[Mapping[str, Any]]) -> str:
    names: set[str] = set()
    for slice_ in slices:
        for device in slice_devices(slice_):
            if device.get("name", "") in names:
                return f"duplicate device name {device.get('name', '')}"
            names.add(device.get("name", ""))
    return ""


def _counter_consumption_problem(
    counter_sets: Mapping[str, Mapping[str, Any]], slices: Sequence[Mapping[str, Any]]
) -> str:
    for slice_ in slices:
        for device in slice_devices(slice_):
            for consumption in device.get("consumesCounters") or ():
                set_name = consumption.get("counterSet", "")
                counter_set = counter_sets.get(set_name)
                if counter_set is None:
                    return f"counter set {set_name} not found"
                for counter in consumption.get("counters") or {}:
                    if counter not in (counter_set.get("counters") or {}):
                        return f"counter {counter} not found in counter set {set_name}"
    return ""


def _has_binding_conditions(pool: Pool) -> bool:
    return any(d.get("bindingConditions") is not None for s in pool.slices for d in slice_devices(s))
