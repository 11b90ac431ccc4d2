"""The SchedulerProfile API as pydantic models: spec (a KubeSchedulerProfile), status, plugin args.

Pure data: no kopf, no HTTP. The CRD in ``crds/`` is generated from these models. Plugins may import
their args types from :mod:`kopf_scheduler.api.args`.
"""
