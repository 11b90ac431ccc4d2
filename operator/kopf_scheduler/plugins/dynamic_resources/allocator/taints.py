"""Device taints: a NoSchedule or NoExecute taint keeps a device from being allocated unless the request tolerates
it.

Upstream counterpart: ``k8s.io/dynamic-resource-allocation/resourceclaim`` ``ToleratesTaint`` and the allocator's
``allocateDevice`` taint check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Upstream ``resourceclaim.ToleratesTaint``."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def taint_prevents_allocation(device: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """A NoSchedule or NoExecute taint of the device that no toleration tolerates (other effects ignored)."""
    for taint in device.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in tolerations):
            return True
    return False
