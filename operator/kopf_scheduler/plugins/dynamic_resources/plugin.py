"""DynamicResources: pods with ResourceClaims wait for their claims, then are refused until the allocator lands
(upstream ``plugins/dynamicresources/dynamicresources.go``, reference §2.17; issue 12).

Upstream's DynamicResources allocates devices to a pod's ResourceClaims: PreEnqueue waits until every claim
exists, PreFilter and Filter find nodes whose ResourceSlices can satisfy them, Reserve and PreBind write the
allocation. This module has upstream's PreEnqueue and its queueing hints, restated over the claims the
watches keep in ``cache.storage`` (state/storage.py, upstream's DRA manager listers):

* a claim from ``resourceClaimName`` is used as named; one from ``resourceClaimTemplateName`` is found through
  ``pod.status.resourceClaimStatuses`` (the resourceclaim controller writes it once it created the claim), and
  must be controlled by the pod (upstream ``resourceclaim.Name`` and ``IsForPod``);
* a missing claim, a claim being deleted or one not owned by the pod parks the pod with upstream's message;
  a ResourceClaim add/update or the pod's own ``UpdatePodGeneratedResourceClaim`` brings it back.

The structured allocator (``allocator.py``) is not here yet, so a pod whose claims all exist is still
refused at PreFilter, UnschedulableAndUnresolvable, with :data:`NOT_IMPLEMENTED`: it stays Pending with a
FailedScheduling Warning, never bound blind (the kubelet would never start it). A profile that disables
DynamicResources gets what its author asked for: such pods are bound without any device allocation.
Pods without claims cost one dict lookup at PreEnqueue and PreFilter (Skip). Claims generated for DRA-backed
extended resources are not detected: such a pod fails NodeResourcesFit wherever nodes lack the resource.

The builder and the profile's status report the plugin under ``standInPlugins`` (and under
``omittedDefaultPlugins``) until the allocator makes it upstream's plugin.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    QueueingHint,
    Status,
)
from kopf_scheduler.framework.events import as_pod
from kopf_scheduler.state.cache import Snapshot
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.storage import RESOURCE_CLAIM, StorageObjects

#: The FailedScheduling text of a pod whose claims all exist (after upstream's ``0/N nodes are available: ``).
NOT_IMPLEMENTED = (
    "pod uses ResourceClaims: DynamicResources cannot allocate devices in kopf-scheduler yet; "
    "disable it in the profile to bind such pods without device allocation"
)

Claim = dict[str, Any]


class ClaimNotUsable(Exception):
    """A claim of the pod is missing, being deleted or not the pod's (upstream's PreEnqueue errors)."""


def uses_resource_claims(pod: PodInfo) -> bool:
    return bool((pod.obj.get("spec") or {}).get("resourceClaims"))


def claim_name(pod: PodInfo, pod_claim: Mapping[str, Any]) -> tuple[str | None, bool]:
    """Upstream ``resourceclaim.Name``: the claim's name (None: none was generated, valid) and whether the
    claim must be controlled by the pod (template claims). Raises :class:`ClaimNotUsable`."""
    if pod_claim.get("resourceClaimName"):
        return pod_claim["resourceClaimName"], False
    if pod_claim.get("resourceClaimTemplateName"):
        for status in (pod.obj.get("status") or {}).get("resourceClaimStatuses") or ():
            if status.get("name") == pod_claim.get("name"):
                return status.get("resourceClaimName"), True
        raise ClaimNotUsable(f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet')
    raise ClaimNotUsable(
        f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim "{pod_claim.get("name", "")}": '
        "none of the supported fields are set"
    )


def pod_claims(pod: PodInfo, storage: StorageObjects) -> Iterator[tuple[str, Claim]]:
    """Upstream ``foreachPodResourceClaim``: ``(pod claim name, claim)`` for every claim that exists; raises
    :class:`ClaimNotUsable` with upstream's message at the first one that does not, or is not usable."""
    for pod_claim in (pod.obj.get("spec") or {}).get("resourceClaims") or ():
        name, must_check_owner = claim_name(pod, pod_claim)
        if name is None:
            continue
        claim = storage.get(RESOURCE_CLAIM, name, pod.namespace)
        if claim is None:
            raise ClaimNotUsable(f'resourceclaim.resource.k8s.io "{name}" not found')
        meta = claim.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            raise ClaimNotUsable(f'resourceclaim "{name}" is being deleted')
        if must_check_owner:
            _check_owner(pod, claim)
        yield pod_claim.get("name", ""), claim


def _check_owner(pod: PodInfo, claim: Claim) -> None:
    """Upstream ``resourceclaim.IsForPod`` (without PodGroup owners)."""
    meta = claim.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    if namespace != pod.namespace:
        raise ClaimNotUsable(
            f"ResourceClaim {namespace}/{name} is not in the same namespace as Pod {pod.namespace}/{pod.name}"
        )
    controller = next((ref for ref in meta.get("ownerReferences") or () if ref.get("controller")), None)
    if controller is None or controller.get("uid") != pod.uid:
        raise ClaimNotUsable(
            f"ResourceClaim {namespace}/{name} was not created for Pod {pod.namespace}/{pod.name} (Pod is not owner)"
        )


def _object_uid(obj: Any) -> str:
    return ((obj or {}).get("metadata") or {}).get("uid") or ""


class DynamicResources(PreEnqueuePlugin, PreFilterPlugin):
    name: ClassVar[str] = "DynamicResources"
    stand_in: ClassVar[bool] = True

    _skip = Status.skip(plugin="DynamicResources")
    _refusal = Status.unschedulable(NOT_IMPLEMENTED, plugin="DynamicResources", unresolvable=True)

    def _storage(self) -> StorageObjects:
        return self.handle.snapshot().cache.storage

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not uses_resource_claims(pod):
            return SUCCESS
        try:
            for _ in pod_claims(pod, self._storage()):
                pass
        except ClaimNotUsable as error:
            return Status.unschedulable(str(error), plugin=self.name, unresolvable=True)
        return SUCCESS

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        return None, self._refusal if uses_resource_claims(pod) else self._skip

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE),
                self.is_schedulable_after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
                self.is_schedulable_after_pod_change,
            ),
        ]

    def is_schedulable_after_claim_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Upstream ``isSchedulableAfterClaimChange``, the part that matters while the pod waits for its claims:
        the changed claim is one of the pod's and all of them are now usable."""
        uid = _object_uid(new)
        try:
            uses = any(_object_uid(claim) == uid for _, claim in pod_claims(pod, self._storage()))
        except ClaimNotUsable:
            return QUEUE_SKIP
        return QUEUE if uses else QUEUE_SKIP

    def is_schedulable_after_pod_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Upstream ``isSchedulableAfterPodChange``: the pod's own update, after which all its claims exist."""
        modified = as_pod(new)
        if modified is None or modified.uid != pod.uid:
            return QUEUE_SKIP
        try:
            for _ in pod_claims(modified, self._storage()):
                pass
        except ClaimNotUsable:
            return QUEUE_SKIP
        return QUEUE
