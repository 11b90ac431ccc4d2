"""The only package that talks HTTP to the API server (Bindings, pod status patches, Events, LISTs) and extenders.

Everything here is async (aiohttp on kopf's event loop), so a slow API call never stalls the watches or
the scheduling loop. The rest of the operator sees :class:`KubeClient`'s small methods, and tests replace
it with a fake of the same shape.
"""

from kopf_scheduler.kube.client import LIST_PAGE_SIZE, KubeClient
from kopf_scheduler.kube.events import event_body
from kopf_scheduler.kube.extender_http import HTTPExtenderTransport

__all__ = ["LIST_PAGE_SIZE", "HTTPExtenderTransport", "KubeClient", "event_body"]
