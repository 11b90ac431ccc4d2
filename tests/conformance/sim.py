"""Our scheduler's verdict computed in-process on the same objects: the diagnosis half of a disagreement.

The runner compares the real operator process with upstream; that is the acceptance test. When they
disagree, the next question is *where*: in a plugin's math, or in the operator around it (its cache fed
by kopf's watches, timing, the queue). So the runner also feeds every object it loads (as the API server
returned it, after admission) into an in-process :class:`SchedulerApp` with no client, and asks its
scheduler for the pod on exactly upstream's state. That model gives per-plugin, per-node scores and
per-node rejections to set beside upstream's V(10) log lines:

- model == upstream != operator → the operator saw another state (event ordering, a stale cache);
- model == operator != upstream → the plugin math or a reason text differs; the per-plugin score
  vectors name the plugin.

The model is ``kopf-scheduler what-if``'s :class:`kopf_scheduler.whatif.OfflineScheduler`: the same cycle on
the same handlers; this module only routes the scenario's objects by their ``kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_scheduler.whatif import OfflineScheduler, Verdict, WhatIfError
from tests.conformance.devices import DEVICE_KINDS
from tests.conformance.volumes import STORAGE_KINDS  # fed to ``cache.objects`` as the operator's watches do

ModelVerdict = Verdict

_MODEL_KINDS = {
    "Node",
    "Pod",
    "Namespace",
    "Service",
    "ReplicaSet",
    "PodDisruptionBudget",
    *STORAGE_KINDS,
    *DEVICE_KINDS,
}


class Model(OfflineScheduler):
    """An in-process SchedulerApp fed the scenario's objects, one profile per scheduler name."""

    def __init__(self, profiles: Mapping[str, Mapping[str, Any]]) -> None:
        try:
            super().__init__(profiles)
        except WhatIfError as e:
            raise ValueError(str(e)) from e

    def load(self, obj: Mapping[str, Any]) -> None:
        """Add or update one object (Node, Pod, Namespace, workload, storage) as the API server returned it."""
        kind = str(obj.get("kind"))
        if kind not in _MODEL_KINDS:
            raise ValueError(f"the model does not take {kind} objects")
        self.feed(kind, obj, "ADDED")

    def delete(self, obj: Mapping[str, Any]) -> None:
        kind = str(obj.get("kind"))
        if kind in _MODEL_KINDS:
            self.feed(kind, obj, "DELETED")
