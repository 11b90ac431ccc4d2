"""The parts of an AllocationResult beyond the device results: its node selector and its configs.

Upstream counterpart: ``structured/internal/incubating/allocator_incubating.go`` (``createNodeSelector``,
``addNewNodeSelectorRequirements``) and the configs ``Allocate`` copies from classes and claims.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopf_scheduler.plugins.dynamic_resources.allocator.common import spec_of
from kopf_scheduler.plugins.dynamic_resources.allocator.requests import DeviceResult


def without_empty_requests(item: dict[str, Any]) -> dict[str, Any]:
    if not item.get("requests"):
        item.pop("requests", None)
    return item


def device_configuration(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The inline ``DeviceConfiguration`` members (today only ``opaque``) of a class or claim config."""
    return {key: value for key, value in entry.items() if key not in ("requests", "source")}


def node_selector_for(results: Sequence[DeviceResult], node_name: str) -> dict[str, Any] | None:
    """Upstream ``createNodeSelector``: a node-local device pins the claim to the node; otherwise the single
    terms of the slices' node selectors are merged; None when the devices are available everywhere."""
    fields: list[Mapping[str, Any]] = []
    expressions: list[Mapping[str, Any]] = []
    for result in results:
        spec = spec_of(result.candidate.slice)
        source = result.candidate.device if spec.get("perDeviceNodeSelection") else spec
        if source.get("nodeName") is not None or result.candidate.device.get("bindsToNode"):
            pinned = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            return {"nodeSelectorTerms": [pinned]}
        selector = source.get("nodeSelector")
        if selector is None:
            continue
        terms = selector.get("nodeSelectorTerms") or ()
        if len(terms) > 1:
            raise ValueError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
        if terms:
            _merge_requirements(terms[0].get("matchFields") or (), fields)
            _merge_requirements(terms[0].get("matchExpressions") or (), expressions)
    if not fields and not expressions:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = [_copied_requirement(e) for e in expressions]
    if fields:
        term["matchFields"] = [_copied_requirement(f) for f in fields]
    return {"nodeSelectorTerms": [term]}


def _copied_requirement(requirement: Mapping[str, Any]) -> dict[str, Any]:
    """A requirement that shares nothing with the slice it came from (its ``values`` list included)."""
    copied = dict(requirement)
    if "values" in copied:
        copied["values"] = list(copied["values"] or ())
    return copied


def _merge_requirements(new: Iterable[Mapping[str, Any]], into: list[Mapping[str, Any]]) -> None:
    for requirement in new:
        values = set(requirement.get("values") or ())
        if not any(
            r.get("key") == requirement.get("key")
            and r.get("operator") == requirement.get("operator")
            and set(r.get("values") or ()) == values
            for r in into
        ):
            into.append(requirement)
