"""The pod's ResourceClaims: their names (a template claim's generated one), their existence and ownership.

Upstream counterpart: ``k8s.io/dynamic-resource-allocation/resourceclaim`` (``Name``, ``IsForPod``) and the
plugin's ``foreachPodResourceClaim`` (``plugins/dynamicresources/dynamicresources.go``), whose errors become
PreEnqueue's and PreFilter's messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kopf_scheduler.state.pod_info import PodInfo

Claim = dict[str, Any]
#: Reads a claim's latest version by (namespace, name); None when it does not exist.
ClaimLookup = Callable[[str, str], Claim | None]


class ClaimNotUsable(Exception):
    """A claim of the pod is missing, being deleted or not the pod's (upstream's PreEnqueue errors)."""


def uses_resource_claims(pod: PodInfo) -> bool:
    return pod.may_have_field("resourceClaims") and bool((pod.obj.get("spec") or {}).get("resourceClaims"))


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


def pod_claims(pod: PodInfo, lookup: ClaimLookup) -> Iterator[tuple[str, Claim]]:
    """Upstream ``foreachPodResourceClaim``: ``(pod claim name, claim)`` for every claim that exists; raises
    :class:`ClaimNotUsable` with upstream's message at the first one that does not, or is not usable."""
    for pod_claim in (pod.obj.get("spec") or {}).get("resourceClaims") or ():
        name, must_check_owner = claim_name(pod, pod_claim)
        if name is None:
            continue
        claim = lookup(pod.namespace, name)
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
