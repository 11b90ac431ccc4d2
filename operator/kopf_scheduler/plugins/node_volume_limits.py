"""NodeVolumeLimits: a node takes no more CSI volumes per driver than its CSINode allows (§2.16).

Upstream ``plugins/nodevolumelimits/csi.go`` (CSILimits), v1.36 with its default gates (VolumeLimitScaling
off). PreFilter returns Skip unless the pod has a ``persistentVolumeClaim``, an ``ephemeral`` or an inline
in-tree volume CSI migration covers (GCE PD, AWS EBS, Cinder, Azure Disk, Azure File, vSphere, Portworx).

Filter, per node: the pod's attachable volumes are keyed ``<driver>/<volume handle>``: a claim bound to a
CSI PV gives its driver and handle; a claim bound to an in-tree PV, or an inline in-tree volume, gives the
CSI translation's driver and handle when migration is on for that plugin (upstream's ``isCSIMigrationOn``:
the node has a CSINode and the plugin is AWS EBS, GCE PD, Azure Disk, Cinder or Portworx); an unbound claim
(or one whose PV is missing) gives its class's provisioner (translated likewise) and a handle unique to the
claim. Nothing attachable, or no ``spec.drivers[].allocatable.count`` on the node's CSINode: the node passes.
Otherwise the volumes of the pods already on the node are collected the same way (their missing claims are
skipped), volumes the node already has do not count again, and for each driver with a limit
``attached + new > limit`` fails the node with Unschedulable ``node(s) exceed max volume count``. A missing
claim of the pod itself fails it with UUR (``looking up PVC ns/name: persistentvolumeclaim "name" not found``);
a malformed volume is an Error.

As upstream, VolumeAttachments on the node whose volume no pod there uses count too (a volume still
attached after its pod left); they are read through the store's index by ``spec.nodeName``
(``ClusterObjects.by_node``), as upstream reads its informer indexer. The CSI translation of in-tree volumes
is :mod:`.helper.csi_translation`, shared with VolumeBinding.

QueueingHints: a CSINode added, or updated with a higher count for some driver; a bound or nominated pod
with claim, ephemeral or migratable volumes deleted; a claim the pod names created; a VolumeAttachment
deleted (for pods with claims, or with an inline volume of the attacher's driver).
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterable, Mapping
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
    as_pod,
    is_assigned_or_nominated,
)
from kopf_scheduler.plugins.helper.csi_translation import (
    BY_IN_TREE_NAME,
    MIGRATION_ON,
    TranslationError,
    is_csi_migration_on,
    migratable_plugin,
    translated_handle,
)
from kopf_scheduler.plugins.helper.volumes import (
    PVC_RESOURCE,
    bound_volume_name,
    claim_class,
    ephemeral_claim_name,
    not_found_message,
    pod_volumes,
)
from kopf_scheduler.state.node_table import NodeTable
from kopf_scheduler.state.objects import (
    CSI_NODE,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
    VOLUME_ATTACHMENT,
    ClusterObjects,
)

NAME = "NodeVolumeLimits"
ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"

Obj = Mapping[str, Any]
#: ``<driver>/<handle>`` → driver.
Volumes = dict[str, str]


# -- collecting a pod's attachable volumes --------------------------------------------------------------------
class VolumeCollector:
    """Upstream ``filterAttachableVolumes`` and its helpers, reading the storage store."""

    def __init__(self, storage: ClusterObjects, random_prefix: str) -> None:
        self.storage = storage
        self.random_prefix = random_prefix

    def collect(self, pod: PodInfo, csi_node: Obj | None, *, new_pod: bool, into: Volumes) -> None:
        """Add ``pod``'s attachable volumes to ``into``; raise for what fails the node (see module doc)."""
        for volume in pod_volumes(pod):
            if volume.get("persistentVolumeClaim") is not None:
                pvc_name = volume["persistentVolumeClaim"].get("claimName") or ""
                ephemeral = False
            elif volume.get("ephemeral") is not None:
                pvc_name = ephemeral_claim_name(pod.name, volume)
                ephemeral = True
            else:
                self._inline(volume, csi_node, into)
                continue
            if not pvc_name:
                raise ValueError("PersistentVolumeClaim had no name")
            pvc = self.storage.pvc(pod.namespace, pvc_name)
            if pvc is None:
                if new_pod:
                    raise ClaimLookupError(pod.namespace, pvc_name)
                continue
            if ephemeral and not _controlled_by(pvc, pod):
                owner = f"{pod.namespace}/{pod.name}"
                raise ValueError(f"PVC {pod.namespace}/{pvc_name} was not created for pod {owner} (pod is not owner)")
            driver, handle = self._claim_driver_and_handle(csi_node, pvc)
            if driver and handle:
                into[f"{driver}/{handle}"] = driver

    def _inline(self, volume: Obj, csi_node: Obj | None, into: Volumes) -> None:
        plugin = migratable_plugin(volume)
        if plugin is None or not is_csi_migration_on(csi_node, plugin.in_tree_name):
            return
        try:
            handle = translated_handle(plugin, volume[plugin.source], None)
        except TranslationError as exc:
            raise ValueError(f"converting volume({volume.get('name') or ''}) from inline to csi: {exc}") from exc
        into[f"{plugin.csi_driver}/{handle}"] = plugin.csi_driver

    def _claim_driver_and_handle(self, csi_node: Obj | None, pvc: Obj) -> tuple[str, str]:
        pv_name = bound_volume_name(pvc)
        pv = self.storage.pv(pv_name) if pv_name else None
        if pv is None:
            return self._from_storage_class(csi_node, pvc)
        spec = pv.get("spec") or {}
        csi = spec.get("csi")
        if csi is not None:
            return csi.get("driver") or "", csi.get("volumeHandle") or ""
        plugin = migratable_plugin(spec)
        if plugin is None or not is_csi_migration_on(csi_node, plugin.in_tree_name):
            return "", ""
        try:
            return plugin.csi_driver, translated_handle(plugin, spec[plugin.source], pv)
        except TranslationError:
            return "", ""

    def _from_storage_class(self, csi_node: Obj | None, pvc: Obj) -> tuple[str, str]:
        """An unbound claim counts as a volume of its class's provisioner, unique to the claim."""
        class_name = claim_class(pvc)
        storage_class = self.storage.storage_class(class_name) if class_name else None
        if storage_class is None:
            return "", ""
        meta = pvc.get("metadata") or {}
        handle = f"{self.random_prefix}-{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        provisioner = storage_class.get("provisioner") or ""
        plugin = BY_IN_TREE_NAME.get(provisioner)
        if plugin is None:
            return provisioner, handle
        if not is_csi_migration_on(csi_node, provisioner):
            return "", ""
        return plugin.csi_driver, handle


class ClaimLookupError(LookupError):
    """The pod's own claim is missing: UUR with upstream's wrapped text."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"looking up PVC {namespace}/{name}: {not_found_message(PVC_RESOURCE, name)}")


def _controlled_by(pvc: Obj, pod: PodInfo) -> bool:
    """metav1 ``IsControlledBy`` plus the namespace check of ``ephemeral.VolumeIsForPod``."""
    meta = pvc.get("metadata") or {}
    if (meta.get("namespace") or "") != pod.namespace:
        return False
    return any(ref.get("controller") and ref.get("uid") == pod.uid for ref in meta.get("ownerReferences") or ())


def volume_limits(csi_node: Obj | None) -> dict[str, int]:
    """Upstream ``getVolumeLimits``: driver → ``allocatable.count`` of the drivers that set one."""
    limits: dict[str, int] = {}
    for driver in ((csi_node or {}).get("spec") or {}).get("drivers") or ():
        count = (driver.get("allocatable") or {}).get("count")
        if count is not None:
            limits[driver.get("name") or ""] = int(count)
    return limits


def attachment_volumes(storage: ClusterObjects, attachments: Iterable[Obj], node_name: str) -> Volumes:
    """Upstream ``getNodeVolumeAttachmentInfo``: CSI volumes attached to ``node_name`` by VolumeAttachments."""
    found: Volumes = {}
    for attachment in attachments:
        spec = attachment.get("spec") or {}
        attacher = spec.get("attacher") or ""
        pv_name = (spec.get("source") or {}).get("persistentVolumeName")
        if spec.get("nodeName") != node_name or not attacher or pv_name is None:
            continue
        pv = storage.pv(pv_name)
        csi = ((pv or {}).get("spec") or {}).get("csi")
        if csi is not None:
            found[f"{attacher}/{csi.get('volumeHandle') or ''}"] = attacher
    return found


#: The kinds whose objects a node's count is read from (a CSINode's limits too).
_COUNTED_FROM = (PERSISTENT_VOLUME_CLAIM, PERSISTENT_VOLUME, STORAGE_CLASS, CSI_NODE, VOLUME_ATTACHMENT)


@dataclass(slots=True, frozen=True)
class _Cycle:
    """What one Filter call reads for every node."""

    collector: VolumeCollector
    snapshot: Snapshot
    #: :meth:`ClusterObjects.changes` of :data:`_COUNTED_FROM` (a node's count is current while it is the same).
    changes: int


class _SlotCounts:
    """Every node's limits and counted volumes as last counted, by node slot, as columns Filter compares at once.

    Per slot: whether the node has a CSINode, whether it sets any limit, the Error collecting its pods' volumes
    (if any), and per driver the limit (−1: none) and the count of attached volumes (its pods' and its
    VolumeAttachments'). The volumes themselves are kept per slot with an index of which slots hold each, so a
    pod whose volume a node already has is judged on that node alone. A slot is recounted when its
    ``version`` (node table) or the storage objects it was read from changed; between cycles most nodes
    change nothing, and the per-node walk of every pod's claims, which upstream does each time, was most of
    the cost.
    """

    def __init__(self, table: NodeTable) -> None:
        #: The node table of the cache counted from (slots and their ``version`` are that table's).
        self.table = table
        self.changes = -1
        self.version = np.zeros(0, dtype=np.int64)
        self.has_csi_node = np.zeros(0, dtype=bool)
        self.has_limits = np.zeros(0, dtype=bool)
        self.has_error = np.zeros(0, dtype=bool)
        self.errors: dict[int, Status] = {}
        self.limit: dict[str, np.ndarray] = {}
        self.count: dict[str, np.ndarray] = {}
        self.attached: dict[int, Volumes] = {}
        self.slots_by_volume: dict[str, set[int]] = {}

    def refresh(self, cycle: _Cycle, nodes: np.ndarray) -> None:
        """Recount the slots among ``nodes`` whose count is not current."""
        table = self.table
        self._fit(table.capacity)
        if cycle.changes != self.changes:
            self.version[:] = -1
            self.changes = cycle.changes
        stale = nodes[self.version[nodes] != table.version[nodes]]
        for slot in stale.tolist():
            self._recount(cycle, slot)
            self.version[slot] = table.version[slot]

    def _fit(self, capacity: int) -> None:
        extra = capacity - len(self.version)
        if extra <= 0:
            return
        self.version = np.concatenate([self.version, np.full(extra, -1, dtype=np.int64)])
        self.has_csi_node = np.concatenate([self.has_csi_node, np.zeros(extra, dtype=bool)])
        self.has_limits = np.concatenate([self.has_limits, np.zeros(extra, dtype=bool)])
        self.has_error = np.concatenate([self.has_error, np.zeros(extra, dtype=bool)])
        for columns, fill in ((self.limit, -1), (self.count, 0)):
            for driver, column in columns.items():
                columns[driver] = np.concatenate([column, np.full(extra, fill, dtype=np.int64)])

    def _column(self, columns: dict[str, np.ndarray], driver: str, fill: int) -> np.ndarray:
        column = columns.get(driver)
        if column is None:
            column = columns[driver] = np.full(len(self.version), fill, dtype=np.int64)
        return column

    def _recount(self, cycle: _Cycle, slot: int) -> None:
        self._forget(slot)
        storage = cycle.snapshot.cache.objects
        node = cycle.snapshot.node_info(slot)
        csi_node = storage.csi_node(node.name)
        self.has_csi_node[slot] = csi_node is not None
        limits = volume_limits(csi_node)
        if not limits:  # without limits the node passes: nothing to count
            return
        self.has_limits[slot] = True
        for driver, limit in limits.items():
            self._column(self.limit, driver, -1)[slot] = limit
        counted = _count(cycle, node.pods.values(), csi_node, node.name)
        if isinstance(counted, Status):
            self.has_error[slot] = True
            self.errors[slot] = counted
            return
        attached, counts = counted
        self.attached[slot] = attached
        for key in attached:
            self.slots_by_volume.setdefault(key, set()).add(slot)
        for driver, count in counts.items():
            self._column(self.count, driver, 0)[slot] = count

    def _forget(self, slot: int) -> None:
        self.has_limits[slot] = self.has_error[slot] = False
        self.errors.pop(slot, None)
        for column in self.limit.values():
            column[slot] = -1
        for column in self.count.values():
            column[slot] = 0
        for key in self.attached.pop(slot, ()):
            holders = self.slots_by_volume[key]
            holders.discard(slot)
            if not holders:
                del self.slots_by_volume[key]

    def exceeds(self, slot: int, wanted: Volumes) -> bool:
        """Whether ``wanted`` (some of which the node may hold already) goes over one of the node's limits."""
        attached = self.attached.get(slot, {})
        new = Counter(driver for key, driver in wanted.items() if key not in attached)
        return bool(self.exceeding(np.array([slot], dtype=np.int64), new)[0])

    def exceeding(self, slots: np.ndarray, new: Mapping[str, int]) -> np.ndarray:
        """Mask over ``slots``: ``new`` volumes per driver, none held by the node yet, go over a limit."""
        over = np.zeros(len(slots), dtype=bool)
        for driver, count in new.items():
            limit = self.limit.get(driver)
            if limit is None:
                continue
            limits = limit[slots]
            counts = self.count[driver][slots] if driver in self.count else 0
            over |= (limits >= 0) & (counts + count > limits)
        return over


def _count(
    cycle: _Cycle, pods: Iterable[PodInfo], csi_node: Obj | None, node_name: str
) -> tuple[Volumes, Counter[str]] | Status:
    """The volumes the node's pods use and the per-driver count with its VolumeAttachments (upstream walks
    them in Filter for every node)."""
    attached: Volumes = {}
    try:
        for existing in pods:
            cycle.collector.collect(existing, csi_node, new_pod=False, into=attached)
    except ValueError as exc:
        return Status.as_error(exc, plugin=NAME)
    storage = cycle.snapshot.cache.objects
    counts = Counter(attached.values())
    by_attachment = attachment_volumes(storage, storage.by_node(VOLUME_ATTACHMENT, node_name), node_name)
    counts.update(driver for key, driver in by_attachment.items() if key not in attached)
    return attached, counts


def _pod_needs_check(pod: PodInfo | Obj) -> bool:
    return any(
        volume.get("persistentVolumeClaim") is not None
        or volume.get("ephemeral") is not None
        or migratable_plugin(volume) is not None
        for volume in pod_volumes(pod)
    )


class _Verdicts:
    """The FilterResult being built: a rejection mask over the nodes and a palette of statuses."""

    def __init__(self, size: int) -> None:
        self.rejected = np.zeros(size, dtype=bool)
        self.index = np.zeros(size, dtype=np.int64)
        self.palette: dict[Status, int] = {}

    def reject(self, where: np.ndarray | int, status: Status) -> None:
        if isinstance(where, np.ndarray) and not where.any():
            return
        self.rejected[where] = True
        self.index[where] = self.palette.setdefault(status, len(self.palette))

    def result(self) -> FilterResult | None:
        if not self.rejected.any():
            return None
        return FilterResult(self.rejected, tuple(self.palette), self.index)


class NodeVolumeLimits(PreFilterPlugin, FilterPlugin):
    name: ClassVar[str] = NAME

    _rejection = Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, plugin=NAME)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Upstream's ``randomVolumeIDPrefix``: makes the handles of unbound claims unique to this scheduler.
        self.random_prefix = secrets.token_hex(16)
        self._counts: _SlotCounts | None = None

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if _pod_needs_check(pod):
            return None, Status()
        return None, Status.skip(plugin=NAME)

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        if not pod_volumes(pod):
            return None
        storage = snapshot.cache.objects
        cycle = _Cycle(VolumeCollector(storage, self.random_prefix), snapshot, storage.changes(_COUNTED_FROM))
        counts = self._counts_for(snapshot.cache.table)
        counts.refresh(cycle, nodes)
        verdicts = _Verdicts(len(nodes))
        has_csi_node = counts.has_csi_node[nodes]
        # The pod's own volumes depend on the node only through whether it has a CSINode.
        for flag in (True, False):
            here = has_csi_node == flag
            if here.any():
                csi_node = storage.csi_node(snapshot.node_info(int(nodes[np.argmax(here)])).name)
                self._judge(counts, verdicts, nodes, here, self._own_volumes(cycle.collector, pod, csi_node))
        return verdicts.result()

    def _counts_for(self, table: NodeTable) -> _SlotCounts:
        """The kept counts, afresh for another cache's table (never in the operator: one cache per plugin)."""
        if self._counts is None or self._counts.table is not table:
            self._counts = _SlotCounts(table)
        return self._counts

    def _judge(
        self, counts: _SlotCounts, verdicts: _Verdicts, nodes: np.ndarray, here: np.ndarray, wanted: Volumes | Status
    ) -> None:
        """Judge the nodes ``here`` (a mask over ``nodes``) for the pod's own ``wanted`` volumes."""
        if isinstance(wanted, Status):
            verdicts.reject(here, wanted)
            return
        if not wanted:
            return
        judged = here & counts.has_limits[nodes]
        failed = judged & counts.has_error[nodes]
        for position in np.flatnonzero(failed).tolist():
            verdicts.reject(position, counts.errors[int(nodes[position])])
        judged &= ~failed
        holders = set().union(*(counts.slots_by_volume.get(key, ()) for key in wanted))
        if holders:  # nodes that have one of the volumes already: it does not count again there
            holding = judged & np.isin(nodes, np.fromiter(holders, dtype=np.int64, count=len(holders)))
            for position in np.flatnonzero(holding).tolist():
                if counts.exceeds(int(nodes[position]), wanted):
                    verdicts.reject(position, self._rejection)
            judged &= ~holding
        if judged.any():
            verdicts.reject(judged & counts.exceeding(nodes, Counter(wanted.values())), self._rejection)

    @staticmethod
    def _own_volumes(collector: VolumeCollector, pod: PodInfo, csi_node: Obj | None) -> Volumes | Status:
        wanted: Volumes = {}
        try:
            collector.collect(pod, csi_node, new_pod=True, into=wanted)
        except ClaimLookupError as exc:
            return Status.unschedulable(str(exc), plugin=NAME, unresolvable=True)
        except ValueError as exc:
            return Status.as_error(exc, plugin=NAME)
        return wanted

    # -- EnqueueExtensions ----------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_NODE, ActionType.ADD)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, ActionType.UPDATE), is_schedulable_after_csi_node_updated
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE), is_schedulable_after_pod_deleted),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD), is_schedulable_after_pvc_added
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.VOLUME_ATTACHMENT, ActionType.DELETE),
                is_schedulable_after_volume_attachment_deleted,
            ),
        ]


def _required(obj: Any, what: str) -> Obj:
    found = as_object(obj)
    if found is None:
        raise ValueError(f"{what} hint called without the object")
    return found


def is_schedulable_after_pod_deleted(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A bound or nominated pod with claim, ephemeral or migratable inline volumes went away."""
    deleted = as_pod(old)
    if deleted is None:
        raise ValueError("pod delete hint called without the deleted pod")
    if not pod_volumes(deleted) or not is_assigned_or_nominated(deleted):
        return QUEUE_SKIP
    return QUEUE if _pod_needs_check(deleted) else QUEUE_SKIP


def is_schedulable_after_pvc_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A claim the pod names (directly or as an ephemeral volume's claim) was created in its namespace."""
    meta = _required(new, "PVC").get("metadata") or {}
    if (meta.get("namespace") or "") != pod.namespace:
        return QUEUE_SKIP
    name = meta.get("name") or ""
    for volume in pod_volumes(pod):
        if volume.get("persistentVolumeClaim") is not None:
            wanted = volume["persistentVolumeClaim"].get("claimName") or ""
        elif volume.get("ephemeral") is not None:
            wanted = ephemeral_claim_name(pod.name, volume)
        else:
            continue
        if wanted == name:
            return QUEUE
    return QUEUE_SKIP


def is_schedulable_after_volume_attachment_deleted(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A detached volume frees a slot: for a pod with claims, or with an inline volume of the attacher's driver."""
    attacher = (_required(old, "VolumeAttachment").get("spec") or {}).get("attacher") or ""
    for volume in pod_volumes(pod):
        if volume.get("persistentVolumeClaim") is not None:
            return QUEUE
        plugin = migratable_plugin(volume)
        if plugin is None:
            continue
        if plugin.in_tree_name in MIGRATION_ON:
            # As upstream, the volume is translated first: one that cannot be raises, and a raising hint queues.
            translated_handle(plugin, volume[plugin.source], None)
        if plugin.csi_driver == attacher:
            return QUEUE
    return QUEUE_SKIP


def is_schedulable_after_csi_node_updated(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Some driver's ``allocatable.count`` went up (a driver without one counts as 0)."""
    old_limits = _counts(_required(old, "CSINode"))
    for driver, count in _counts(_required(new, "CSINode")).items():
        if count > old_limits.get(driver, 0):
            return QUEUE
    return QUEUE_SKIP


def _counts(csi_node: Obj) -> dict[str, int]:
    return {
        driver.get("name") or "": int((driver.get("allocatable") or {}).get("count") or 0)
        for driver in (csi_node.get("spec") or {}).get("drivers") or ()
    }
