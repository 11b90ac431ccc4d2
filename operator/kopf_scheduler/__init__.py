"""kopf-scheduler: kube-scheduler profiles hosted as SchedulerProfile custom resources, on kopf.

The public facade is small on purpose: the CLI (``kopf-scheduler``) is the product's entry point, and
third-party plugins import the extension-point interfaces from :mod:`kopf_scheduler.framework`.
"""

from kopf_scheduler._version import __version__

__all__ = ["__version__"]
