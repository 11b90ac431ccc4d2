"""What the workload-aware plugins share about PodGroups (scheduling.k8s.io/v1alpha2): where the cache keeps them
and the text of upstream's PodGroup lister when one is not there."""

from __future__ import annotations

from kopf_scheduler.go_format import go_quote

#: The ``cache.objects`` kind of upstream's PodGroup lister.
POD_GROUP = "PodGroup"


def pod_group_not_found(name: str) -> str:
    """The NotFound error text of upstream's PodGroup lister (``errors.NewNotFound`` of ``podgroup``)."""
    return f"podgroup.scheduling.k8s.io {go_quote(name)} not found"


__all__ = ["POD_GROUP", "pod_group_not_found"]
