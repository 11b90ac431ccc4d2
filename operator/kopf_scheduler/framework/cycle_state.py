"""CycleState: per-scheduling-cycle scratch space that plugins share between their extension points.

A plugin computes something in PreFilter (pod-side data, per-domain counts) and reads it back in Filter;
the state lives exactly one cycle. ``clone`` exists for preemption dry runs, which mutate a copy.
"""

from __future__ import annotations

import copy
from typing import Any

#: A plugin whose Filter is costly per node for this pod (DynamicResources' allocator) writes True under this key
#: in PreFilter; the node search then judges no nodes past the ones it needs only because it works in windows.
COSTLY_FILTER = "kopf-scheduler/CostlyFilter"
#: The annotations the Binding carries onto the pod (a ``dict[str, str]``; absent: none): the runtime writes them
#: before Bind for a profile with ``spec.explain.annotations``, DefaultBinder sends them in its Binding.
BINDING_ANNOTATIONS = "kopf-scheduler/BindingAnnotations"


class CycleState:
    """A dict keyed by plugin-chosen strings; values should implement ``clone()`` if they are mutable."""

    __slots__ = (
        "_data",
        "found_bound",
        "pod_group_cycle",
        "record_plugin_metrics",
        "skip_all_post_filter_plugins",
        "skip_filter_plugins",
        "skip_pre_bind_plugins",
        "skip_score_plugins",
    )

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        #: Plugins whose PreFilter returned Skip: their Filter is not called this cycle.
        self.skip_filter_plugins: set[str] = set()
        #: Plugins whose PreScore returned Skip: their Score is not called this cycle.
        self.skip_score_plugins: set[str] = set()
        #: Plugins whose PreBindPreFlight returned Skip: their PreBind is not called this cycle.
        self.skip_pre_bind_plugins: set[str] = set()
        #: Upstream ``SetRecordPluginMetrics``: this cycle is one of the sampled 10% (plugin durations).
        self.record_plugin_metrics = False
        #: Upstream ``IsPodGroupSchedulingCycle``: this cycle places a pod of a PodGroup inside the group's cycle,
        #: so plugins read the group's state from the cycle's snapshot rather than the live cache.
        self.pod_group_cycle = False
        #: Upstream ``SetSkipAllPostFilterPlugins``: PostFilter does not run in this cycle (workload-aware
        #: preemption's trial runs of a pod group's algorithm, upstream ``runWithoutPostFilters``).
        self.skip_all_post_filter_plugins = False
        #: Ours: the Bind plugin lost its Binding's answer and found the pod bound to the chosen node (DefaultBinder):
        #: bound, maybe by another replica that chose the same node, so the cycle counts and reports no bind of its own.
        self.found_bound = False

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """The value stored under ``key``; ``KeyError`` names the key when a PreX step did not run."""
        try:
            return self._data[key]
        except KeyError:
            raise KeyError(f"no cycle state for {key!r}: its PreFilter/PreScore did not run") from None

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def clone(self) -> CycleState:
        other = CycleState()
        for key, value in self._data.items():
            clone = getattr(value, "clone", None)
            other._data[key] = clone() if callable(clone) else copy.copy(value)
        other.skip_filter_plugins = set(self.skip_filter_plugins)
        other.skip_score_plugins = set(self.skip_score_plugins)
        other.skip_pre_bind_plugins = set(self.skip_pre_bind_plugins)
        other.record_plugin_metrics = self.record_plugin_metrics
        other.pod_group_cycle = self.pod_group_cycle
        other.skip_all_post_filter_plugins = self.skip_all_post_filter_plugins
        return other
