"""The extension points of the scheduling framework, named as in KubeSchedulerConfiguration ``plugins``."""

from __future__ import annotations

from enum import StrEnum


class ExtensionPoint(StrEnum):
    """One extension point; the value is its key under a profile's ``plugins`` (camelCase, as upstream)."""

    PRE_ENQUEUE = "preEnqueue"
    QUEUE_SORT = "queueSort"
    PRE_FILTER = "preFilter"
    FILTER = "filter"
    POST_FILTER = "postFilter"
    PRE_SCORE = "preScore"
    SCORE = "score"
    RESERVE = "reserve"
    PERMIT = "permit"
    PRE_BIND = "preBind"
    BIND = "bind"
    POST_BIND = "postBind"
    #: v1.36's pod-group cycle (upstream TopologyAwareWorkloadScheduling): the placements a PodGroup is tried in,
    #: and how the feasible ones are ranked. Only a workload-aware profile runs them.
    PLACEMENT_GENERATE = "placementGenerate"
    PLACEMENT_SCORE = "placementScore"

    @property
    def interface_name(self) -> str:
        """The upstream Go interface name (``PreFilter``, ``Score`` …) used in error messages."""
        return self.value[0].upper() + self.value[1:]


#: The order in which extension points appear in upstream's configuration types.
ALL_EXTENSION_POINTS: tuple[ExtensionPoint, ...] = tuple(ExtensionPoint)

#: The order in which upstream's ``NewFramework`` builds (and so checks) the extension points: the builder
#: and the runtime report the first error in this order, as upstream does.
FRAMEWORK_BUILD_ORDER: tuple[ExtensionPoint, ...] = (
    ExtensionPoint.PRE_FILTER,
    ExtensionPoint.FILTER,
    ExtensionPoint.POST_FILTER,
    ExtensionPoint.RESERVE,
    ExtensionPoint.PRE_SCORE,
    ExtensionPoint.SCORE,
    ExtensionPoint.PRE_BIND,
    ExtensionPoint.BIND,
    ExtensionPoint.POST_BIND,
    ExtensionPoint.PERMIT,
    ExtensionPoint.PRE_ENQUEUE,
    ExtensionPoint.QUEUE_SORT,
    ExtensionPoint.PLACEMENT_GENERATE,
    ExtensionPoint.PLACEMENT_SCORE,
)
