"""The in-tree plugins, written down, and the process-wide registry (upstream ``pkg/scheduler/framework/plugins/
registry.go``: ``NewInTreeRegistry``).

:data:`IN_TREE_PLUGINS` lists every plugin class kopf-scheduler ships, each imported from its top-level plugin
module or package; a unit test keeps the list equal to the plugin classes defined under ``plugins/``, so a new
plugin module cannot be left out. :func:`default_registry` adds the third-party plugins of the entry-point group
``kopf_scheduler.plugins`` (:func:`kopf_scheduler.framework.registry.entry_point_registry`), as upstream's
``scheduler.New`` merges the out-of-tree registry into the in-tree one. The framework knows no plugin: the
composition root (``app.py``) hands it this registry.
"""

from __future__ import annotations

import functools

from kopf_scheduler.framework.interface import Plugin
from kopf_scheduler.framework.registry import Registry, entry_point_registry
from kopf_scheduler.plugins.coscheduling import Coscheduling
from kopf_scheduler.plugins.default_binder import DefaultBinder
from kopf_scheduler.plugins.default_preemption import DefaultPreemption
from kopf_scheduler.plugins.dynamic_resources import DynamicResources
from kopf_scheduler.plugins.gang_scheduling import GangScheduling
from kopf_scheduler.plugins.image_locality import ImageLocality
from kopf_scheduler.plugins.inter_pod_affinity import InterPodAffinity
from kopf_scheduler.plugins.node_affinity import NodeAffinity
from kopf_scheduler.plugins.node_declared_features import NodeDeclaredFeatures
from kopf_scheduler.plugins.node_name import NodeName
from kopf_scheduler.plugins.node_ports import NodePorts
from kopf_scheduler.plugins.node_resources_balanced_allocation import NodeResourcesBalancedAllocation
from kopf_scheduler.plugins.node_resources_fit import NodeResourcesFit
from kopf_scheduler.plugins.node_unschedulable import NodeUnschedulable
from kopf_scheduler.plugins.node_volume_limits import NodeVolumeLimits
from kopf_scheduler.plugins.pod_group_pods_count import PodGroupPodsCount
from kopf_scheduler.plugins.pod_topology_spread import PodTopologySpread
from kopf_scheduler.plugins.queue_sort import PrioritySort
from kopf_scheduler.plugins.scheduling_gates import SchedulingGates
from kopf_scheduler.plugins.taint_toleration import TaintToleration
from kopf_scheduler.plugins.topology_placement_generator import TopologyPlacementGenerator
from kopf_scheduler.plugins.volume_binding import VolumeBinding
from kopf_scheduler.plugins.volume_restrictions import VolumeRestrictions
from kopf_scheduler.plugins.volume_zone import VolumeZone

#: Every in-tree plugin class, by upstream name.
IN_TREE_PLUGINS: tuple[type[Plugin], ...] = (
    Coscheduling,
    DefaultBinder,
    DefaultPreemption,
    DynamicResources,
    GangScheduling,
    ImageLocality,
    InterPodAffinity,
    NodeAffinity,
    NodeDeclaredFeatures,
    NodeName,
    NodePorts,
    NodeResourcesBalancedAllocation,
    NodeResourcesFit,
    NodeUnschedulable,
    NodeVolumeLimits,
    PodGroupPodsCount,
    PodTopologySpread,
    PrioritySort,
    SchedulingGates,
    TaintToleration,
    TopologyPlacementGenerator,
    VolumeBinding,
    VolumeRestrictions,
    VolumeZone,
)


def in_tree_registry() -> Registry:
    """The in-tree plugins (upstream ``NewInTreeRegistry``), each sourced to its top-level plugin module."""
    registry = Registry()
    for cls in IN_TREE_PLUGINS:
        registry.register(cls, source=f"in-tree module {_plugin_module(cls)}")
    return registry


def _plugin_module(cls: type[Plugin]) -> str:
    """``kopf_scheduler.plugins.<module or package>`` of a plugin class defined anywhere inside it."""
    return ".".join(cls.__module__.split(".")[:3])


def discover(*, entry_points: bool = True) -> Registry:
    """In-tree plugins plus, unless disabled, the installed third-party ones."""
    registry = in_tree_registry()
    if entry_points:
        registry = registry.merged(entry_point_registry())
    return registry


@functools.cache
def default_registry() -> Registry:
    """The process-wide registry (loaded once; call ``default_registry.cache_clear()`` to load it again)."""
    return discover()


__all__ = ["IN_TREE_PLUGINS", "default_registry", "discover", "in_tree_registry"]
