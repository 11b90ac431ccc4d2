"""DynamicResources: Dynamic Resource Allocation for pods with ResourceClaims (upstream
``pkg/scheduler/framework/plugins/dynamicresources`` and ``k8s.io/dynamic-resource-allocation``).

A package, as the plugin carries everything about itself, a module per upstream file:

* ``plugin``: the extension points, events and hints (``dynamicresources.go``); ``claims``: the pod's claims
  (``resourceclaim`` helpers, ``foreachPodResourceClaim``); ``state``: the cycle state and Score's
  prioritized-list score;
* ``tracker``: in-flight and assumed claims and the devices they hold, shared by all profiles
  (``dra_manager.go``); ``binding``: PreBind's writes and binding conditions; ``extended``: DRA-backed
  extended resources (``extendeddynamicresources.go``); ``capacity``: what a node's devices offer to the
  resource scorers;
* ``cel``: device selectors (``dynamic-resource-allocation/cel``) over ``cel_library``, the Kubernetes CEL
  libraries (``apiserver/pkg/cel/library``);
* ``allocator``: the structured-parameters allocator (``dynamic-resource-allocation/structured``), a package.
"""

from kopf_scheduler.plugins.dynamic_resources.claims import uses_resource_claims
from kopf_scheduler.plugins.dynamic_resources.plugin import DynamicResources

__all__ = ["DynamicResources", "uses_resource_claims"]
