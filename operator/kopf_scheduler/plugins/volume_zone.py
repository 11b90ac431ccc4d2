"""VolumeZone: a pod whose claims are bound to zonal PersistentVolumes only fits nodes in those zones (§2.15).

Upstream ``plugins/volumezone``, v1.36. PreFilter walks the pod's ``persistentVolumeClaim`` volumes: a claim
without a name, a missing claim, PV or StorageClass, a class without a binding mode, or an unbound claim of
an Immediate class fail the pod with UnschedulableAndUnresolvable (the lister's NotFound text or upstream's
fixed messages); unbound WaitForFirstConsumer claims are left to VolumeBinding. Each bound PV contributes its
zone/region labels (``topology.kubernetes.io/{zone,region}`` and the deprecated
``failure-domain.beta.kubernetes.io/*``; a value is a ``__``-separated set, unparsable values ignored). No
such label at all: Skip, so pods without zonal volumes cost one look at their volumes.

Filter: a node carrying none of the four labels passes (single-zone clusters); otherwise, for every PV
label, the node's same label (or, for a beta key, its GA twin) must hold one of the PV's values, else UUR
``node(s) had no available volume zone``.

QueueingHints: a WaitForFirstConsumer StorageClass added; a node added or relabelled; a PVC the pod names
added or updated (e.g. bound); a PV added, or updated with different topology labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    FilterPlugin,
    FilterResult,
    PodInfo,
    PreFilterPlugin,
    PreFilterResult,
    QueueingHint,
    Snapshot,
    Status,
    as_object,
    object_labels,
)
from kopf_scheduler.go_format import go_quote
from kopf_scheduler.plugins.helper.volumes import (
    PV_RESOURCE,
    PVC_RESOURCE,
    STORAGE_CLASS_RESOURCE,
    WAIT_FOR_FIRST_CONSUMER,
    bound_volume_name,
    claim_class,
    claim_names,
    not_found_message,
    pod_volumes,
)
from kopf_scheduler.state.objects import ClusterObjects

NAME = "VolumeZone"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON_CONFLICT = "node(s) had no available volume zone"
ERR_CLAIM_WITHOUT_NAME = "PersistentVolumeClaim had no name"
ERR_CLAIM_WITHOUT_PV_OR_CLASS = "PersistentVolumeClaim had no pv name and storageClass name"
ERR_PV_WITHOUT_NAME = "PersistentVolume had no name"

LABEL_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
LABEL_BETA_REGION = "failure-domain.beta.kubernetes.io/region"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
#: Upstream's order: the PV's labels are read in it, and so are the rejections.
TOPOLOGY_LABELS = (LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION)
_GA_LABEL = {LABEL_BETA_ZONE: LABEL_ZONE, LABEL_BETA_REGION: LABEL_REGION}
#: cloud-provider's ``LabelMultiZoneDelimiter``.
MULTI_ZONE_DELIMITER = "__"


@dataclass(frozen=True, slots=True)
class PVTopology:
    """One topology label of a bound PV: the key and the set of values it allows."""

    pv_name: str
    key: str
    values: frozenset[str]


def label_zones_to_set(value: str) -> frozenset[str] | None:
    """cloud-provider ``LabelZonesToSet``: the ``__``-separated, trimmed values; None if one is empty."""
    zones = [zone.strip() for zone in value.split(MULTI_ZONE_DELIMITER)]
    if any(not zone for zone in zones):
        return None
    return frozenset(zones)


def pv_topologies(pv: dict[str, Any]) -> list[PVTopology]:
    """The parsable topology labels of ``pv`` in upstream's label order (``getPVTopologies``)."""
    labels = object_labels(pv)
    name = (pv.get("metadata") or {}).get("name") or ""
    found: list[PVTopology] = []
    for key in TOPOLOGY_LABELS:
        if key in labels and (values := label_zones_to_set(labels[key])) is not None:
            found.append(PVTopology(name, key, values))
    return found


def pod_pv_topologies(pod: PodInfo, storage: ClusterObjects) -> tuple[list[PVTopology], Status | None]:
    """``getPVbyPod``: the topologies of the PVs bound to the pod's claims, or the status rejecting the pod."""
    found: list[PVTopology] = []
    for name in claim_names(pod):
        if not name:
            return [], _unresolvable(ERR_CLAIM_WITHOUT_NAME)
        pvc = storage.pvc(pod.namespace, name)
        if pvc is None:
            return [], _unresolvable(not_found_message(PVC_RESOURCE, name))
        pv_name = bound_volume_name(pvc)
        if not pv_name:
            status = _unbound_claim_status(pvc, storage)
            if status is None:
                continue
            return [], status
        pv = storage.pv(pv_name)
        if pv is None:
            return [], _unresolvable(not_found_message(PV_RESOURCE, pv_name))
        found.extend(pv_topologies(pv))
    return found, None


def _unbound_claim_status(pvc: dict[str, Any], storage: ClusterObjects) -> Status | None:
    """None for a WaitForFirstConsumer claim (skipped); the rejection for any other unbound claim."""
    class_name = claim_class(pvc)
    if not class_name:
        return _unresolvable(ERR_CLAIM_WITHOUT_PV_OR_CLASS)
    storage_class = storage.storage_class(class_name)
    if storage_class is None:
        return _unresolvable(not_found_message(STORAGE_CLASS_RESOURCE, class_name))
    mode = storage_class.get("volumeBindingMode")
    if mode is None:
        return _unresolvable(f"VolumeBindingMode not set for StorageClass {go_quote(class_name)}")
    if mode == WAIT_FOR_FIRST_CONSUMER:
        return None
    return _unresolvable(ERR_PV_WITHOUT_NAME)


def _unresolvable(reason: str) -> Status:
    return Status.unschedulable(reason, plugin=NAME, unresolvable=True)


class VolumeZone(PreFilterPlugin, FilterPlugin):
    name: ClassVar[str] = NAME

    _rejection = _unresolvable(ERR_REASON_CONFLICT)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if not pod_volumes(pod):
            return None, Status.skip(plugin=NAME)
        topologies, status = pod_pv_topologies(pod, snapshot.cache.objects)
        if status is not None:
            return None, status
        if not topologies:
            return None, Status.skip(plugin=NAME)
        state.write(PRE_FILTER_STATE_KEY, topologies)
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        if not pod_volumes(pod):
            return None
        topologies: list[PVTopology] | None = state.get(PRE_FILTER_STATE_KEY)
        if topologies is None:
            # As upstream: without PreFilter's state, compute it here.
            topologies, status = pod_pv_topologies(pod, snapshot.cache.objects)
            if status is not None:
                return FilterResult.uniform(np.ones(len(nodes), dtype=bool), status)
        rejected = np.fromiter(
            (not self._fits(topologies, snapshot.node_info(int(slot)).labels) for slot in nodes),
            dtype=bool,
            count=len(nodes),
        )
        return FilterResult.uniform(rejected, self._rejection) if rejected.any() else None

    @staticmethod
    def _fits(topologies: list[PVTopology], labels: dict[str, str]) -> bool:
        """A node without any topology label fits; else each PV label must allow the node's value."""
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return True
        for topology in topologies:
            value = labels.get(topology.key)
            if value is None:
                # A PV's beta key may be matched by the node's GA label.
                value = labels.get(_GA_LABEL.get(topology.key, topology.key))
            if value is None or value not in topology.values:
                return False
        return True

    # -- EnqueueExtensions --------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD), is_schedulable_after_storage_class_added
            ),
            # With QueueingHints on (1.36 default) upstream drops UpdateNodeTaint here.
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE),
                is_schedulable_after_pvc_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE),
                is_schedulable_after_pv_change,
            ),
        ]


def _required(obj: Any, what: str) -> dict[str, Any]:
    found = as_object(obj)
    if found is None:
        raise ValueError(f"{what} hint called without the object")
    return dict(found)


def is_schedulable_after_pvc_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A claim the pod names (same namespace) was created or changed (for instance, bound)."""
    pvc = _required(new, "PVC")
    meta = pvc.get("metadata") or {}
    if (meta.get("namespace") or "") != pod.namespace:
        return QUEUE_SKIP
    return QUEUE if (meta.get("name") or "") in claim_names(pod) else QUEUE_SKIP


def is_schedulable_after_storage_class_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Only a new WaitForFirstConsumer class can help: its unbound claims are then skipped."""
    storage_class = _required(new, "StorageClass")
    return QUEUE if storage_class.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER else QUEUE_SKIP


def is_schedulable_after_pv_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A new PV, or a PV whose topology labels changed."""
    modified = _required(new, "PV")
    if old is None:
        return QUEUE
    return QUEUE if pv_topologies(_required(old, "PV")) != pv_topologies(modified) else QUEUE_SKIP
