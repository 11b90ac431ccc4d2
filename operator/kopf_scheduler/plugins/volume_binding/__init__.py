"""VolumeBinding: a pod's PersistentVolumeClaims bound or provisioned where the pod goes (upstream
``pkg/scheduler/framework/plugins/volumebinding``).

A package, split along upstream's files: ``plugin`` (``volume_binding.go``: the extension points, cycle state,
events and hints), ``binder`` (``binder.go``: FindPodVolumes, AssumePodVolumes, BindPodVolumes),
``assume_cache`` (the assumed PVs and claims over ``cache.objects``, upstream ``passive_assume_cache.go``) and
``pv_helpers`` (upstream's ``component-helpers/storage/volume`` and ``ephemeral`` on the raw API dicts).
"""

from kopf_scheduler.plugins.volume_binding.binder import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_NOT_ENOUGH_SPACE,
    ERR_REASON_PV_NOT_EXIST,
)
from kopf_scheduler.plugins.volume_binding.plugin import ERR_UNBOUND_IMMEDIATE, STATE_KEY, VolumeBinding

__all__ = [
    "ERR_REASON_BIND_CONFLICT",
    "ERR_REASON_NODE_CONFLICT",
    "ERR_REASON_NOT_ENOUGH_SPACE",
    "ERR_REASON_PV_NOT_EXIST",
    "ERR_UNBOUND_IMMEDIATE",
    "STATE_KEY",
    "VolumeBinding",
]
