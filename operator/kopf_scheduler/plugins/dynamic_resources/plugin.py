"""DynamicResources, a stand-in: pods with ResourceClaims are refused, not bound blind (upstream
``plugins/dynamicresources``, reference §2.17; the real plugin is issue 12).

Upstream's DynamicResources allocates devices to a pod's ResourceClaims (PreEnqueue waits for the claims,
Filter finds nodes whose ResourceSlices can satisfy them, Reserve and PreBind write the allocation). Without
it, a scheduler would bind such a pod to any node: the kubelet then never starts it, as its claims are never
allocated. Until the plugin exists, this stand-in takes its place in the default profile and refuses every
pod that has ``spec.resourceClaims`` at PreFilter, UnschedulableAndUnresolvable, so the pod stays Pending
with a FailedScheduling Warning that says why (``0/N nodes are available: pod uses ResourceClaims: ...``);
PreFilter rather than PreEnqueue because a PreEnqueue refusal posts no event. A profile that disables
DynamicResources gets what its author asked for: such pods are bound without any device allocation.

Pods without claims cost one dict lookup (Skip). ``spec.resourceClaims`` is immutable, so no cluster event
can undo a refusal: the plugin registers none, and a refused pod is retried only when its profile changes
(every parked pod is, then) or by the queue's periodic flush. Claims generated for DRA-backed extended
resources are not detected: such a pod fails NodeResourcesFit wherever nodes lack the extended resource.

The builder and the profile's status report the plugin under ``standInPlugins`` (and, since it is not
upstream's plugin, under ``omittedDefaultPlugins`` as before).
"""

from __future__ import annotations

from typing import ClassVar

from kopf_scheduler.framework import (
    ClusterEventWithHint,
    CycleState,
    PreFilterPlugin,
    PreFilterResult,
    Status,
)
from kopf_scheduler.state.cache import Snapshot
from kopf_scheduler.state.pod_info import PodInfo

#: The FailedScheduling text of a refused pod (after upstream's ``0/N nodes are available: ``).
NOT_IMPLEMENTED = (
    "pod uses ResourceClaims: DynamicResources is not implemented by kopf-scheduler yet; "
    "disable it in the profile to bind such pods without device allocation"
)


def uses_resource_claims(pod: PodInfo) -> bool:
    return bool((pod.obj.get("spec") or {}).get("resourceClaims"))


class DynamicResources(PreFilterPlugin):
    name: ClassVar[str] = "DynamicResources"
    stand_in: ClassVar[bool] = True

    _skip = Status.skip(plugin="DynamicResources")
    _refusal = Status.unschedulable(NOT_IMPLEMENTED, plugin="DynamicResources", unresolvable=True)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        return None, self._refusal if uses_resource_claims(pod) else self._skip

    def events_to_register(self) -> list[ClusterEventWithHint]:
        # The refusal depends on spec.resourceClaims only, which no update can change.
        return []
