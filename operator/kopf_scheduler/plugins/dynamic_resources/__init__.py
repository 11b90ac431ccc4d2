"""DynamicResources: Dynamic Resource Allocation for pods with ResourceClaims (upstream
``pkg/scheduler/framework/plugins/dynamicresources`` and ``k8s.io/dynamic-resource-allocation``).

A package, as the plugin carries everything about itself: ``plugin`` (the extension points, events and hints),
``cel`` (device selectors, upstream ``dynamic-resource-allocation/cel``) and ``allocator`` (the structured-parameters
allocator, upstream ``dynamic-resource-allocation/structured``).
"""

from kopf_scheduler.plugins.dynamic_resources.plugin import NOT_IMPLEMENTED, DynamicResources, uses_resource_claims

__all__ = ["NOT_IMPLEMENTED", "DynamicResources", "uses_resource_claims"]
