"""The only package that talks HTTP to the API server (Bindings, pod status patches, Events, LISTs) and extenders.

Everything here is async (aiohttp on kopf's event loop), so a slow API call never stalls the watches or
the scheduling loop. The rest of the operator sees :class:`KubeClient`'s small methods, and tests replace
it with a fake of the same shape. The command line's own calls are the exception: ``kubeconfig`` and
``remote_explain`` (``kopf-scheduler explain`` through the API server) are synchronous ``urllib``, a CLI
call being a handful of requests.
"""

from kopf_scheduler.kube.client import LIST_PAGE_SIZE, KubeClient
from kopf_scheduler.kube.events import event_body
from kopf_scheduler.kube.extender_http import HTTPExtenderTransport

__all__ = ["LIST_PAGE_SIZE", "HTTPExtenderTransport", "KubeClient", "event_body"]
