"""DynamicResources: Dynamic Resource Allocation for pods with ResourceClaims (upstream
``pkg/scheduler/framework/plugins/dynamicresources`` and ``k8s.io/dynamic-resource-allocation``).

A package, as the plugin carries everything about itself: ``plugin`` (the extension points, events and
hints), ``tracker`` (in-flight and assumed claims, shared by all profiles), ``binding`` (PreBind's writes and
binding conditions), ``cel`` (device selectors, upstream ``dynamic-resource-allocation/cel``) and ``allocator``
(the structured-parameters allocator, upstream ``dynamic-resource-allocation/structured``).
"""

from kopf_scheduler.plugins.dynamic_resources.plugin import DynamicResources, uses_resource_claims

__all__ = ["DynamicResources", "uses_resource_claims"]
