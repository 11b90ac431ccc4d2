"""Code shared by two or more plugins, as upstream's ``pkg/scheduler/framework/plugins/helper``.

A plugin imports another plugin's code only through this package (an import-linter contract keeps it so):
resource scoring strategies, pod affinity terms, volume and CSI helpers, and the DeviceClass ↔ extended
resource mapping. (The DRA-backed capacity the resource scorers count is DynamicResources' own state:
``plugins/dynamic_resources/capacity.py``.)
"""
