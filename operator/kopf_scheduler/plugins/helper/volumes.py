"""What the volume plugins share: a pod's volumes and claims, a claim's class, and upstream's lookup errors.

VolumeZone, VolumeRestrictions and NodeVolumeLimits (and VolumeBinding) all walk ``pod.spec.volumes``, look
claims up in the PVC lister, read a claim's class as component-helpers' ``GetPersistentVolumeClaimClass``
does, and turn a missing object into the lister's NotFound text (``persistentvolumeclaim "x" not found``).
Objects are the raw API dicts of :class:`~kopf_scheduler.state.objects.ClusterObjects`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kopf_scheduler.framework import PodInfo
from kopf_scheduler.go_format import go_quote

#: The qualified resource names client-go's listers put in their NotFound errors.
PVC_RESOURCE = "persistentvolumeclaim"
PV_RESOURCE = "persistentvolume"
STORAGE_CLASS_RESOURCE = "storageclass.storage.k8s.io"

#: ``v1.BetaStorageClassAnnotation``: wins over ``spec.storageClassName`` when present (even empty).
BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"

Obj = Mapping[str, Any]


def not_found_message(resource: str, name: str) -> str:
    """apimachinery's NotFound text: ``<resource> "<name>" not found``."""
    return f"{resource} {go_quote(name)} not found"


def pod_volumes(pod: PodInfo | Obj) -> Sequence[Obj]:
    """``spec.volumes`` of a pod given as PodInfo or API dict (empty when it has none).

    A compact pod without volumes is not decoded for the answer (:meth:`PodInfo.may_have_field`): every volume
    plugin asks every cycle, and decoding a pod without volumes was most of VolumeRestrictions' PreFilter.
    """
    if isinstance(pod, PodInfo):
        if not pod.may_have_field("volumes"):
            return ()
        pod = pod.obj
    return (pod.get("spec") or {}).get("volumes") or ()


def pod_namespace(pod: PodInfo | Obj) -> str:
    if isinstance(pod, PodInfo):
        return pod.namespace
    return (pod.get("metadata") or {}).get("namespace") or "default"


def claim_name(volume: Obj) -> str | None:
    """The claim a ``persistentVolumeClaim`` volume names; None for other volume kinds."""
    source = volume.get("persistentVolumeClaim")
    if source is None:
        return None
    return source.get("claimName") or ""


def claim_names(pod: PodInfo | Obj) -> list[str]:
    """The claim names of the pod's ``persistentVolumeClaim`` volumes, in order (ephemeral ones excluded)."""
    return [name for volume in pod_volumes(pod) if (name := claim_name(volume)) is not None]


def ephemeral_claim_name(pod_name: str, volume: Obj) -> str:
    """component-helpers ``ephemeral.VolumeClaimName``: ``<pod name>-<volume name>``."""
    return f"{pod_name}-{volume.get('name') or ''}"


def claim_class(pvc: Obj) -> str:
    """component-helpers ``GetPersistentVolumeClaimClass``: the beta annotation, else ``spec.storageClassName``."""
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    if BETA_STORAGE_CLASS_ANNOTATION in annotations:
        named: str = annotations[BETA_STORAGE_CLASS_ANNOTATION]
        return named
    return (pvc.get("spec") or {}).get("storageClassName") or ""


def bound_volume_name(pvc: Obj) -> str:
    """``spec.volumeName`` of a claim ("" while unbound)."""
    return (pvc.get("spec") or {}).get("volumeName") or ""


def has_access_mode(pvc: Obj, mode: str) -> bool:
    return mode in ((pvc.get("spec") or {}).get("accessModes") or ())
