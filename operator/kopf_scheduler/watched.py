"""The kinds the operator watches, declared once (upstream: the informers ``eventhandlers.go`` registers).

One row per kind: its API group, version and plural, whether it is namespaced, and which part of the cache it
feeds. Everything that names the watched kinds is derived from :data:`WATCHED_KINDS`: the ``@kopf.on.event``
handlers (``handlers.py``, one per row), the reconciling LISTs and the warm standby's watches
(``eventhandlers.py``), the kinds ``cache.objects`` stores (``state/objects.py``), what ``kopf-scheduler
what-if`` reads (``whatif.py``); ``tests/unit/test_watched.py`` checks the chart's ClusterRole against it.
Adding a watched kind is one row here plus its store (for :attr:`Feed.OBJECTS`, nothing more: ``cache.objects``
holds any kind of this table).

An *optional* row is an API a cluster may not serve: upstream 1.36's workload-aware scheduling API
(scheduling.k8s.io/v1alpha2 Workload and PodGroup) is alpha, served only with kube-apiserver's GenericWorkload
feature gate and ``--runtime-config=scheduling.k8s.io/v1alpha2=true``; scheduler-plugins' Coscheduling PodGroup
(scheduling.x-k8s.io/v1alpha1) is served only where its CRD is installed. The operator finds at start-up which
optional rows are served (one discovery GET per API group version, ``EventHandlers.discover``) and lists and
follows only those; kopf skips the resources a cluster does not serve on its own; what-if does the same discovery.

The order is one in which each object finds what it refers to (namespaces and nodes first, pods last): what-if
feeds its model in this order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Feed(StrEnum):
    """The part of the cache a kind's watch events and LIST pages feed (``EventHandlers``' method for it)."""

    #: The node table (``on_node_event``).
    NODE = "node"
    #: Assigned pods in the cache, pending pods in the queues (``on_pod_event``).
    POD = "pod"
    #: Namespace labels, for affinity terms' namespaceSelector (``on_namespace_event``).
    NAMESPACE = "namespace"
    #: Workload selectors, for PodTopologySpread's system default constraints (``on_workload_event``).
    WORKLOAD = "workload"
    #: ``cache.objects`` (``state/objects.py``), the objects plugins read as upstream's listers (``on_object_event``).
    OBJECTS = "objects"


@dataclass(frozen=True, slots=True)
class WatchedKind:
    """A watched kind: where it is served and which part of the cache it feeds."""

    kind: str
    #: API group ("" for the core group).
    group: str
    version: str
    plural: str
    namespaced: bool
    feed: Feed
    #: Its changes are cluster events that move parked pods (upstream's ``EventResource``); :attr:`Feed.OBJECTS`
    #: kinds only (nodes' and pods' events are their own; PDBs and claim templates move no pod upstream).
    cluster_event: bool = False
    #: The chart's ClusterRole grants ``get`` besides ``list`` and ``watch`` (as upstream's system:kube-scheduler).
    get: bool = False
    #: The API server may not serve it (an alpha API): watched only where discovery finds it served.
    optional: bool = False
    #: The objects' ``kind`` where it differs from :attr:`kind`, which names the row (two APIs call a kind PodGroup).
    api_kind: str = ""
    #: Upstream's ``EventResource`` string where it is not ``group/Kind``: an out-of-tree custom resource's events
    #: are named ``plural.version.group``, as scheduler-plugins registers them.
    event_name: str = ""

    @property
    def api_prefix(self) -> str:
        """``/api/v1`` for the core group, ``/apis/<group>/<version>`` otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def path(self) -> str:
        """The collection of every namespace (what the reconciling LIST and what-if list)."""
        return f"{self.api_prefix}/{self.plural}"

    def namespace_path(self, namespace: str) -> str:
        """The collection in one namespace (a namespaced kind under ``--namespace``)."""
        return f"{self.api_prefix}/namespaces/{namespace}/{self.plural}"

    @property
    def event_resource(self) -> str:
        """Upstream's ``EventResource`` string of the kind: ``Kind`` in the core group, ``group/Kind`` otherwise."""
        if self.event_name:
            return self.event_name
        return f"{self.group}/{self.kind}" if self.group else self.kind

    @property
    def handler_name(self) -> str:
        """The id of its kopf handler: ``CSIStorageCapacity`` → ``csi_storage_capacity_event``."""
        return _CAMEL_BOUNDARY.sub("_", self.kind).lower() + "_event"


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

_CORE, _APPS, _STORAGE, _POLICY, _RESOURCE = "", "apps", "storage.k8s.io", "policy", "resource.k8s.io"
_SCHEDULING = "scheduling.k8s.io"
_OBJECTS = Feed.OBJECTS

#: Every kind the operator watches, in an order that lets each object find what it refers to.
WATCHED_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("Namespace", _CORE, "v1", "namespaces", False, Feed.NAMESPACE),
    WatchedKind("Node", _CORE, "v1", "nodes", False, Feed.NODE),
    WatchedKind("Service", _CORE, "v1", "services", True, Feed.WORKLOAD),
    WatchedKind("ReplicationController", _CORE, "v1", "replicationcontrollers", True, Feed.WORKLOAD),
    WatchedKind("ReplicaSet", _APPS, "v1", "replicasets", True, Feed.WORKLOAD),
    WatchedKind("StatefulSet", _APPS, "v1", "statefulsets", True, Feed.WORKLOAD),
    # The volume plugins' objects (VolumeBinding, VolumeZone, VolumeRestrictions, NodeVolumeLimits).
    WatchedKind("StorageClass", _STORAGE, "v1", "storageclasses", False, _OBJECTS, cluster_event=True, get=True),
    WatchedKind("PersistentVolume", _CORE, "v1", "persistentvolumes", False, _OBJECTS, cluster_event=True, get=True),
    WatchedKind(
        "PersistentVolumeClaim", _CORE, "v1", "persistentvolumeclaims", True, _OBJECTS, cluster_event=True, get=True
    ),
    WatchedKind("CSINode", _STORAGE, "v1", "csinodes", False, _OBJECTS, cluster_event=True, get=True),
    WatchedKind("CSIDriver", _STORAGE, "v1", "csidrivers", False, _OBJECTS, cluster_event=True, get=True),
    WatchedKind(
        "CSIStorageCapacity", _STORAGE, "v1", "csistoragecapacities", True, _OBJECTS, cluster_event=True, get=True
    ),
    WatchedKind("VolumeAttachment", _STORAGE, "v1", "volumeattachments", False, _OBJECTS, cluster_event=True, get=True),
    # DefaultPreemption's PDB lister.
    WatchedKind("PodDisruptionBudget", _POLICY, "v1", "poddisruptionbudgets", True, _OBJECTS, get=True),
    # DynamicResources' objects, as upstream's DRA manager watches them.
    WatchedKind("DeviceClass", _RESOURCE, "v1", "deviceclasses", False, _OBJECTS, cluster_event=True, get=True),
    WatchedKind("ResourceSlice", _RESOURCE, "v1", "resourceslices", False, _OBJECTS, cluster_event=True, get=True),
    WatchedKind("ResourceClaim", _RESOURCE, "v1", "resourceclaims", True, _OBJECTS, cluster_event=True, get=True),
    WatchedKind("ResourceClaimTemplate", _RESOURCE, "v1", "resourceclaimtemplates", True, _OBJECTS, get=True),
    # Workload-aware scheduling's API (alpha, optional): pods name their PodGroup in spec.schedulingGroup, a
    # PodGroup may name its Workload's template. Upstream's system:kube-scheduler reads PodGroups (get, list, watch).
    WatchedKind("Workload", _SCHEDULING, "v1alpha2", "workloads", True, _OBJECTS, optional=True),
    # A PodGroup's add moves the pods GangScheduling parked waiting for it (upstream's PodGroup event resource).
    WatchedKind(
        "PodGroup", _SCHEDULING, "v1alpha2", "podgroups", True, _OBJECTS, cluster_event=True, get=True, optional=True
    ),
    # scheduler-plugins' Coscheduling API (a CRD, optional): pods name their PodGroup in the
    # scheduling.x-k8s.io/pod-group label. Its add and update move the pods Coscheduling rejected (as it registers
    # them); read from the cache only, so list and watch, no get.
    WatchedKind(
        "CoschedulingPodGroup",
        "scheduling.x-k8s.io",
        "v1alpha1",
        "podgroups",
        True,
        _OBJECTS,
        cluster_event=True,
        optional=True,
        api_kind="PodGroup",
        event_name="podgroups.v1alpha1.scheduling.x-k8s.io",
    ),
    WatchedKind("Pod", _CORE, "v1", "pods", True, Feed.POD, get=True),
)

#: Kind → its row.
BY_KIND: dict[str, WatchedKind] = {watched.kind: watched for watched in WATCHED_KINDS}


def of_feed(feed: Feed) -> tuple[WatchedKind, ...]:
    """The rows that feed ``feed``, in table order."""
    return tuple(watched for watched in WATCHED_KINDS if watched.feed is feed)


def optional_by_api() -> dict[str, tuple[WatchedKind, ...]]:
    """The optional rows by the API group version that serves them (``api_prefix``: one discovery GET each)."""
    by_api: dict[str, tuple[WatchedKind, ...]] = {}
    for watched in WATCHED_KINDS:
        if watched.optional:
            by_api[watched.api_prefix] = (*by_api.get(watched.api_prefix, ()), watched)
    return by_api


#: The kinds of upstream's workload-aware scheduling API (what ``SchedulerApp.workload_api_served`` asks about).
WORKLOAD_API_KINDS = ("Workload", "PodGroup")

__all__ = ["BY_KIND", "WATCHED_KINDS", "WORKLOAD_API_KINDS", "Feed", "WatchedKind", "of_feed", "optional_by_api"]
