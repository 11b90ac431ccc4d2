"""Code shared by two or more plugins, as upstream's ``pkg/scheduler/framework/plugins/helper``.

A plugin imports another plugin's code only through this package (an import-linter contract keeps it so):
resource scoring strategies, pod affinity terms, volume and CSI helpers, the DeviceClass ↔ extended resource
mapping, and the PodGroup lookups of the workload-aware plugins. (The DRA-backed capacity the resource scorers
count is DynamicResources' own state: ``plugins/dynamic_resources/capacity.py``.)
"""
