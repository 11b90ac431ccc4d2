"""VolumeBinding: a pod's PersistentVolumeClaims bound or provisioned where the pod goes (§2.14).

Upstream ``plugins/volumebinding/volume_binding.go``, v1.36 with its default gates; the claim/PV logic is the
binder's (:mod:`.binder`, upstream ``binder.go``):

- PreFilter skips pods without claim-backed volumes (``persistentVolumeClaim`` volumes and generic ephemeral
  volumes, whose claim is ``<pod>-<volume>``). A missing claim, a claim whose PV is lost, a claim being
  deleted, an ephemeral claim the pod does not own: UnschedulableAndUnresolvable with the error's text. An
  unbound claim whose class binds immediately (or a claim pre-bound to a PV by name but not bound yet):
  UUR ``pod has unbound immediate PersistentVolumeClaims``. No PreFilterResult (1.36 does not narrow the
  nodes by local PVs' hostnames).
- Filter, per node: a bound claim's PV must exist and its node affinity match; each unbound claim of a
  WaitForFirstConsumer class gets the smallest matching Available PV (class, size, access and volume modes,
  selector, node affinity, not chosen for another claim of the pod), else dynamic provisioning when its
  class has a provisioner whose allowed topologies include the node and, for CSI drivers that publish
  storage capacity, some CSIStorageCapacity reachable from the node is big enough. Reasons, UUR, several at
  once in upstream's order: node affinity conflict, no volume to bind, not enough storage, PV missing.
  Each PV's node-independent fit is judged once per cycle and its node affinity once per Filter call,
  for all candidate nodes at once over the node table (:class:`_NodeFit`).
- PreScore skips: scoring needs the StorageCapacityScoring gate, alpha and off in 1.36.
- Reserve assumes the chosen bindings in the assume cache (:mod:`.assume_cache`): each PV pre-bound to its
  claim, each claim to provision annotated with the node; Unreserve rolls them back.
- PreBind writes them through the API (PUT of each PV with its ``claimRef``, PUT of each claim with
  ``volume.kubernetes.io/selected-node``) and polls every second until the PV controller has bound every
  claim (``pv.kubernetes.io/bind-completed``), failing after ``bindTimeoutSeconds`` or as soon as a binding
  is undone (claimRef reset, selected-node removed, PV node affinity no longer matching).
  ``pre_bind_pre_flight`` is upstream's PreBindPreFlight (Skip when nothing is to be bound): the binding cycle
  asks it first, and sets the pod's nominatedNodeName when PreBind has work (NominatedNodeNameForExpectation).

CSI migration (``tryTranslatePVToCSI``, :mod:`kopf_scheduler.plugins.helper.csi_translation`): a bound in-tree
PV (Filter) and each PV PreBind waits on are judged in their CSI form on a node whose CSINode lists their plugin
as migrated (the zone key becomes the CSI driver's); one that cannot be translated is an Error. A claim whose
``spec.selector`` is malformed is an Error of Filter (``error creating internal label selector for claim:
...``). PreBind's wait fails with ``pod does not exist any more: pod "<name>" not found`` once the pod's
deletion was watched (upstream re-reads its pod lister each poll; here ``Handle.pod_exists``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kopf_scheduler.api.args import VolumeBindingArgs
from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    FilterResult,
    Handle,
    NodeFilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueingHint,
    ReservePlugin,
    ScorePlugin,
    Status,
    as_object,
)
from kopf_scheduler.go_format import go_quote
from kopf_scheduler.plugins.helper.csi_translation import ANN_MIGRATED_PLUGINS
from kopf_scheduler.plugins.helper.volumes import pod_volumes
from kopf_scheduler.plugins.volume_binding.binder import (
    FitsNode,
    Obj,
    PodVolumeClaims,
    PodVolumes,
    VolumeBinder,
    capacity_limit,
)
from kopf_scheduler.plugins.volume_binding.pv_helpers import (
    PodClaim,
    VolumeError,
    annotations_of,
    name_of,
    namespace_of,
    pod_claims,
    spec,
    volume_node_selector,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from kopf_scheduler.state.cache import ClusterCache, NodeInfo, Snapshot
    from kopf_scheduler.state.pod_info import PodInfo

NAME = "VolumeBinding"
STATE_KEY = NAME

ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
#: Upstream's ``errNoPodVolumeForNode``: Reserve found no volumes for the node.
ERR_NO_POD_VOLUMES = "no pod volume found for node"


@dataclass(slots=True)
class _StateData:
    """Upstream ``stateData``; shared, not copied, by clones (upstream's Clone returns the same pointer)."""

    claims: PodVolumeClaims | None = None
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    all_bound: bool = False
    #: Filter found that every node fits and needs nothing (see :meth:`VolumeBinder.fits_every_node`).
    every_node_fits: bool = False

    def clone(self) -> _StateData:
        return self

    def volumes_for(self, node_name: str) -> PodVolumes | None:
        """What Filter found the pod needs on ``node_name``; None if Filter did not pass the node."""
        if self.every_node_fits:
            return self.by_node.setdefault(node_name, PodVolumes())
        return self.by_node.get(node_name)


class _NodeFit:
    """PV node-affinity verdicts for the nodes of one Filter call: a vector per PV, computed on first use
    over the node table's label columns (upstream matches a node by its labels alone)."""

    __slots__ = ("_masks", "_nodes", "_snapshot", "position")

    def __init__(self, snapshot: Snapshot, nodes: np.ndarray) -> None:
        self._snapshot = snapshot
        self._nodes = nodes
        #: id(pv) → (pv, mask); the PV is held so that its id stays its own.
        self._masks: dict[int, tuple[Obj, np.ndarray]] = {}
        #: The position in ``nodes`` of the node being judged.
        self.position = 0

    def fits(self, pv: Obj) -> bool:
        held = self._masks.get(id(pv))
        if held is None:
            held = self._masks[id(pv)] = (pv, self._mask(pv))
        return bool(held[1][self.position])

    def _mask(self, pv: Obj) -> np.ndarray:
        selector = volume_node_selector(pv)
        if selector is None:
            return np.ones(len(self._nodes), dtype=bool)
        if any(term.fields for term in selector.terms):
            # matchFields see a node without a name here: judge those PVs node by node.
            infos = self._snapshot.node_infos(self._nodes.tolist())
            return np.fromiter((selector.matches(i.labels, "") for i in infos), dtype=bool, count=len(self._nodes))
        return selector.mask(self._snapshot.table, self._nodes)


# -- the plugin ---------------------------------------------------------------------------------------------
class VolumeBinding(PreFilterPlugin, NodeFilterPlugin, PreScorePlugin, ScorePlugin, ReservePlugin, PreBindPlugin):
    name: ClassVar[str] = NAME
    args_model: ClassVar[type[BaseModel] | None] = VolumeBindingArgs

    _unbound_immediate = Status.unschedulable(ERR_UNBOUND_IMMEDIATE, plugin=NAME, unresolvable=True)

    def __init__(self, *, handle: Handle, args: BaseModel | None = None) -> None:
        super().__init__(handle=handle, args=args)
        timeout = (
            args.bind_timeout_seconds
            if isinstance(args, VolumeBindingArgs)
            else VolumeBindingArgs().bind_timeout_seconds
        )
        #: The cluster cache the snapshots read; remembered from the first PreFilter (it is one object).
        self._cache: ClusterCache | None = None
        self.binder = VolumeBinder(
            self._cluster,
            lambda: self.handle.client,
            bind_timeout=float(timeout),
            pod_exists=lambda pod: self.handle.pod_exists(pod),
        )

    def _cluster(self) -> ClusterCache:
        if self._cache is None:
            self._cache = self.handle.snapshot().cache
        return self._cache

    # -- PreFilter / Filter ---------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        claims = _pod_claims(pod)
        if not claims:
            state.write(STATE_KEY, _StateData())
            return None, Status.skip(plugin=NAME)
        self._cache = snapshot.cache
        error = self.binder.claims_error(pod, claims)
        if error is not None:
            return None, Status.unschedulable(error, plugin=NAME, unresolvable=True)
        try:
            volume_claims = self.binder.pod_volume_claims(pod, claims)
        except VolumeError as exc:
            return None, Status.as_error(exc, plugin=NAME)
        if volume_claims.unbound_immediate:
            return None, self._unbound_immediate
        state.write(STATE_KEY, _StateData(claims=volume_claims))
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        """One node at a time as upstream, but each PV's node affinity judged for all ``nodes`` at once."""
        data: _StateData = state.read(STATE_KEY)
        if data.claims is None:
            return None
        if self.binder.fits_every_node(data.claims):
            data.every_node_fits = True
            return None
        fit = _NodeFit(snapshot, nodes)
        rejected = np.zeros(len(nodes), dtype=bool)
        palette: dict[Status, int] = {}
        index = np.zeros(len(nodes), dtype=np.int64)
        for position, slot in enumerate(nodes.tolist()):
            fit.position = position
            status = self._filter_one(data, snapshot.node_info(slot), fit.fits)
            if not status.is_success:
                rejected[position] = True
                index[position] = palette.setdefault(status, len(palette))
        return FilterResult(rejected, tuple(palette), index) if palette else None

    def filter_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        data: _StateData = state.read(STATE_KEY)
        if data.claims is None or data.every_node_fits:
            return SUCCESS
        return self._filter_one(data, node, None)

    def _filter_one(self, data: _StateData, node: NodeInfo, fits_node: FitsNode | None) -> Status:
        assert data.claims is not None
        try:
            volumes, reasons = self.binder.find_pod_volumes(data.claims, node, fits_node)
        except VolumeError as exc:
            return Status.as_error(exc, plugin=NAME)
        if reasons:
            return Status.unschedulable(*reasons, plugin=NAME, unresolvable=True)
        data.by_node[node.name] = volumes
        return SUCCESS

    # -- PreScore / Score: only with the StorageCapacityScoring gate (alpha, off in 1.36) ---------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        return Status.skip(plugin=NAME)

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        return np.zeros(len(nodes), dtype=np.int64)

    # -- Reserve / Unreserve --------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        data: _StateData = state.read(STATE_KEY)
        volumes = data.volumes_for(node_name)
        if volumes is None:
            data.all_bound = True  # the pod has no claims
            return SUCCESS
        try:
            data.all_bound = self.binder.assume_pod_volumes(pod, _pod_claims(pod), node_name, volumes)
        except Exception as exc:
            return Status.as_error(exc, plugin=NAME)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        data: _StateData | None = state.get(STATE_KEY)
        volumes = None if data is None else data.volumes_for(node_name)
        if volumes is not None:
            self.binder.revert_assumed_pod_volumes(volumes)

    # -- PreBind --------------------------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Upstream ``PreBindPreFlight``: Skip when every claim is bound, an Error without volumes for the node."""
        data: _StateData = state.read(STATE_KEY)
        if data.all_bound:
            return Status.skip(plugin=NAME)
        if data.volumes_for(node_name) is None:
            return _no_pod_volumes(node_name)
        return SUCCESS

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        data: _StateData = state.read(STATE_KEY)
        if data.all_bound:
            return SUCCESS
        volumes = data.volumes_for(node_name)
        if volumes is None:
            return _no_pod_volumes(node_name)
        try:
            await self.binder.bind_pod_volumes(pod, node_name, volumes)
        except Exception as exc:
            return Status.as_error(exc, plugin=NAME)
        return SUCCESS

    # -- events ---------------------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        add_or_update = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.STORAGE_CLASS, add_or_update), storage_class_hint),
            ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, add_or_update), claim_hint),
            ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME, add_or_update)),
            # With QueueingHints on (1.36) upstream registers no UpdateNodeTaint here.
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_NODE, add_or_update), csi_node_hint),
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_DRIVER, ActionType.UPDATE), csi_driver_hint),
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_STORAGE_CAPACITY, add_or_update), capacity_hint),
        ]


def _no_pod_volumes(node_name: str) -> Status:
    """Upstream's ``errNoPodVolumeForNode`` for ``node_name``: Reserve found no volumes for the node."""
    return Status.as_error(VolumeError(f"{ERR_NO_POD_VOLUMES} {go_quote(node_name)}"), plugin=NAME)


def _pod_claims(pod: PodInfo) -> list[PodClaim]:
    """The pod's claim-backed volumes; cheap for the common pod without volumes."""
    if not pod_volumes(pod):
        return []
    return list(pod_claims(pod.name, pod.obj.get("spec") or {}))


# -- QueueingHints ------------------------------------------------------------------------------------------
def storage_class_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A new class may serve the pod; an updated one only if its allowedTopologies changed."""
    original, modified = as_object(old), as_object(new)
    if original is None or modified is None:
        return QUEUE
    return QUEUE if original.get("allowedTopologies") != modified.get("allowedTopologies") else QUEUE_SKIP


def claim_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Any add or update of one of the pod's own claims (same namespace, a name its volumes use)."""
    modified = as_object(new)
    if modified is None or namespace_of(modified) != pod.namespace:
        return QUEUE_SKIP
    wanted = name_of(modified)
    return QUEUE if any(claim.name == wanted for claim in _pod_claims(pod)) else QUEUE_SKIP


def csi_node_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A new CSINode, or a change of the migrated-plugins annotation (it decides in-tree translation)."""
    original, modified = as_object(old), as_object(new)
    if original is None or modified is None:
        return QUEUE
    changed = annotations_of(original).get(ANN_MIGRATED_PLUGINS) != annotations_of(modified).get(ANN_MIGRATED_PLUGINS)
    return QUEUE if changed else QUEUE_SKIP


def csi_driver_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A driver of one of the pod's inline CSI volumes stopped publishing storage capacity."""
    original, modified = as_object(old), as_object(new)
    if original is None or modified is None:
        return QUEUE
    driver = name_of(modified)
    for volume in (pod.obj.get("spec") or {}).get("volumes") or ():
        if (volume.get("csi") or {}).get("driver") != driver:
            continue
        if spec(original).get("storageCapacity") is True and spec(modified).get("storageCapacity") is not True:
            return QUEUE
    return QUEUE_SKIP


def capacity_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A new CSIStorageCapacity, or one whose volume limit appeared or grew."""
    original, modified = as_object(old), as_object(new)
    if original is None or modified is None:
        return QUEUE
    old_limit, new_limit = capacity_limit(original), capacity_limit(modified)
    if new_limit is not None and (old_limit is None or new_limit > old_limit):
        return QUEUE
    return QUEUE_SKIP
