"""Read-only access to the API server for ``kopf-scheduler what-if``: paginated LISTs and GETs, nothing else.

What-if must never change the cluster, so this module has no verb but GET: a LIST is a GET of the collection,
page by page (``limit``/``continue``, as :meth:`kopf_scheduler.kube.client.KubeClient.list_pages` pages the
operator's own LISTs). It goes through the same synchronous transport as ``explain``
(:class:`kopf_scheduler.kube.remote_explain.APIServer`: the kubeconfig's credentials, token, certificates or
exec plugin), so unit tests drive it with a fake transport.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from kopf_scheduler.kube.remote_explain import Transport

#: Objects per LIST page, as the operator's LISTs.
PAGE_SIZE = 500


class ReadError(Exception):
    """The API server refused or failed a read; the message names the resource."""


def list_objects(api: Transport, path: str, *, limit: int = PAGE_SIZE) -> list[dict[str, Any]] | None:
    """Every item of the collection at ``path``; None when the API server does not serve it (404)."""
    items: list[dict[str, Any]] = []
    query = {"limit": str(limit)}
    while True:
        status, body = api(f"{path}?{urlencode(query)}", {})
        if status == 404 and not items:
            return None
        page = _decoded(status, body, f"list {path}")
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        query = {**query, "continue": token}


def get_object(api: Transport, path: str) -> dict[str, Any] | None:
    """The object at ``path``; None when it does not exist."""
    status, body = api(path, {})
    if status == 404:
        return None
    return _decoded(status, body, f"get {path}")


def api_resources(api: Transport, api_prefix: str) -> set[str] | None:
    """Discovery: the resource names the API server serves under ``api_prefix`` (``/apis/<group>/<version>``);
    None when it does not serve that group version."""
    document = get_object(api, api_prefix)
    if document is None:
        return None
    return {str(item.get("name")) for item in document.get("resources") or () if isinstance(item, dict)}


def _decoded(status: int, body: bytes, what: str) -> dict[str, Any]:
    try:
        decoded = json.loads(body or b"{}")
    except ValueError:
        decoded = {"message": body.decode(errors="replace").strip()}
    if status != 200:
        message = decoded.get("message") if isinstance(decoded, dict) else None
        raise ReadError(f"{what}: HTTP {status}: {message or 'no message'}")
    if not isinstance(decoded, dict):
        raise ReadError(f"{what}: expected a JSON object")
    return decoded
