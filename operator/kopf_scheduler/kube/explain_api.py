"""``kopf-scheduler explain`` through the aggregated API: one GET of a ``PodExplanation`` with the user's own
credentials, whatever they are (client certificate, token, exec plugin).

The operator serves ``explain.kopf-scheduler.io/v1alpha1`` (``web/aggregated.py``) where an APIService registers
it (the chart's, the demo's); the API server authenticates the user, authorizes ``get`` on ``podexplanations``
and forwards who the user is, so nothing here finds replicas or forwards tokens. Where the APIService is not
registered (a 404 that is not the operator's) or not available (a 503 that is not the operator's), the caller
falls back to :mod:`.remote_explain` (``pods/proxy`` to the active replica) and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kopf_scheduler.kube.remote_explain import RemoteExplainError, Transport

GROUP = "explain.kopf-scheduler.io"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
RESOURCE = "podexplanations"
KIND = "PodExplanation"
#: The APIService's name, ``<version>.<group>``.
API_SERVICE = f"{VERSION}.{GROUP}"

RBAC_HINT = (
    f"explain through the API server needs get on {RESOURCE}.{GROUP} in the pod's namespace (the chart adds it "
    "to the view, edit and admin ClusterRoles, and its <release>-metrics-reader ClusterRole grants it everywhere)"
)


def explanation_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP_VERSION}/namespaces/{quote(namespace, safe='')}/{RESOURCE}/{quote(name, safe='')}"


@dataclass(frozen=True)
class Unserved:
    """The API server does not serve the aggregated API now: why, for the fallback's note."""

    reason: str


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body or b"{}")
    except ValueError:
        return None


def _is_operators(decoded: Any) -> bool:
    """A Status the operator wrote about one of its objects (the API server's own have other details)."""
    details = (decoded.get("details") or {}) if isinstance(decoded, dict) else {}
    return details.get("group") == GROUP and details.get("kind") == RESOURCE


def _message(decoded: Any, body: bytes) -> str:
    if isinstance(decoded, dict) and decoded.get("message"):
        return str(decoded["message"])
    return body.decode(errors="replace").strip()


def fetch_from_api_service(api: Transport, namespace: str, name: str) -> tuple[int, dict[str, Any]] | Unserved:
    """(200, the account) or (404, {"message"}) as the operator answered; :class:`Unserved` when the aggregated
    API is not there; :class:`RemoteExplainError` for a refusal (with the RBAC it takes) or any other failure."""
    status, body = api(explanation_path(namespace, name), {})
    decoded = _decode(body)
    if status == 200 and isinstance(decoded, dict) and decoded.get("kind") == KIND:
        return 200, dict(decoded.get("account") or {})
    ours = _is_operators(decoded)
    message = _message(decoded, body)
    if status == 404 and ours:
        return 404, {"pod": f"{namespace}/{name}", "message": message}
    if status == 403:
        # The API server authorizes before it routes: a path of a group it does not serve is refused as well
        # to a user without the right, in the same words as a served one (the operator's own refusals too).
        # Discovery (open to every authenticated user) tells which it is.
        discovery, discovered = api(f"/apis/{GROUP_VERSION}", {})
        if discovery in (404, 503):
            status, message = discovery, _message(_decode(discovered), discovered)
    if status == 404:
        return Unserved(f"the API server does not serve {GROUP_VERSION} (no APIService {API_SERVICE})")
    if status == 503 and not ours:
        return Unserved(f"the APIService {API_SERVICE} is not available ({message})")
    if status == 403:
        raise RemoteExplainError(f"{message}; {RBAC_HINT}")
    if status == 401:
        raise RemoteExplainError(f"the API server did not accept these credentials: {message}")
    raise RemoteExplainError(f"{explanation_path(namespace, name)}: HTTP {status}: {message}")
