"""Which extended resources DeviceClasses back (DRAExtendedResource, beta and on in 1.36), shared by
NodeResourcesFit (which leaves them to DRA on nodes that do not advertise them) and DynamicResources (which
allocates devices for them through a claim of the scheduler's own).

Upstream: ``k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache`` (the DRA manager's
``DeviceClassResolver``), ``schedutil.IsDRAExtendedResourceName`` and NodeResourcesFit's
``shouldDelegateResourceToDRA``.

A DeviceClass backs two names: the implicit ``deviceclass.resource.kubernetes.io/<class name>`` and, if set,
``spec.extendedResourceName``. Two classes naming the same extended resource: the older one (creation
timestamp, then the smaller name) wins, as upstream's cache decides on every add and update.

Where this differs: upstream's cache is fed event by event, and two event orders leave it in states a
recomputation from the watched classes does not reach (a class added after an older class with the same
explicit name gets no implicit mapping either; deleting the losing class drops the winner's explicit
mapping). Here the mapping is read from the DeviceClasses the watch holds (``cache.objects``), so it is what
upstream's cache holds after the winning class was added last. DeviceClasses are few; the lookup walks them
only for pods that request an extended resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_scheduler.state.objects import DEVICE_CLASS, ClusterObjects
from kopf_scheduler.state.pod_info import is_extended_resource_name

#: Upstream ``resourceapi.ResourceDeviceClassPrefix``: the implicit extended resource name of a DeviceClass.
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"

DeviceClass = Mapping[str, Any]


def is_dra_extended_resource_name(name: str) -> bool:
    """Upstream ``IsDRAExtendedResourceName``: an extended resource name, or a DeviceClass's implicit one."""
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


def _name(device_class: DeviceClass) -> str:
    return (device_class.get("metadata") or {}).get("name") or ""


def _explicit_name(device_class: DeviceClass) -> str:
    return (device_class.get("spec") or {}).get("extendedResourceName") or ""


def _age_key(device_class: DeviceClass) -> tuple[str, str]:
    """Older first, then by name (RFC 3339 timestamps in one format order as text)."""
    return ((device_class.get("metadata") or {}).get("creationTimestamp") or "", _name(device_class))


def device_class_for(storage: ClusterObjects, resource: str) -> DeviceClass | None:
    """Upstream ``DeviceClassResolver.GetDeviceClass``: the DeviceClass backing ``resource``, or None."""
    if resource.startswith(DEVICE_CLASS_PREFIX):
        return storage.get(DEVICE_CLASS, resource[len(DEVICE_CLASS_PREFIX) :])
    if not storage.count(DEVICE_CLASS):
        return None
    backing = [c for c in storage.all(DEVICE_CLASS) if _explicit_name(c) == resource]
    return min(backing, key=_age_key) if backing else None


def delegated_to_dra(resource: str, node_allocatable: Mapping[str, int] | None, storage: ClusterObjects) -> bool:
    """Upstream ``shouldDelegateResourceToDRA``: the node (None: no node) advertises none of ``resource`` and a
    DeviceClass backs it, so NodeResourcesFit leaves it to DynamicResources."""
    if node_allocatable is not None and node_allocatable.get(resource, 0) > 0:
        return False
    return device_class_for(storage, resource) is not None


def backed_resources(requests: Mapping[str, int], storage: ClusterObjects) -> frozenset[str]:
    """The requested (> 0) resources a DeviceClass backs (upstream ``hasDeviceClassMappedExtendedResource``
    asks whether there is any)."""
    if not storage.count(DEVICE_CLASS):
        return frozenset()
    return frozenset(
        name
        for name, value in requests.items()
        if value and is_dra_extended_resource_name(name) and device_class_for(storage, name) is not None
    )
