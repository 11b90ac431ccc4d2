"""``explain`` as an aggregated API: ``explain.kopf-scheduler.io/v1alpha1``, resource ``podexplanations``.

An APIService (the chart's, or the demo's) tells kube-apiserver to proxy ``/apis/explain.kopf-scheduler.io/
v1alpha1/...`` to the operator, as metrics-server serves ``metrics.k8s.io``. The API server authenticates the
user however it is configured to (client certificates, tokens, OIDC), authorizes ``get`` on the resource with
RBAC, and forwards who the user is (:mod:`.requestheader`); the operator authorizes the same attributes again
with a SubjectAccessReview (:meth:`~.delegated.DelegatedAuth.authorize_resource`), as k8s.io/apiserver's
delegated authorization does. So::

    kubectl get --raw /apis/explain.kopf-scheduler.io/v1alpha1/namespaces/NS/podexplanations/POD
    kubectl get podexplanation POD -n NS -o yaml

answer with a ``PodExplanation`` whose ``account`` is what ``/explain/NS/POD`` serves, and RBAC grants it with
``get`` on ``podexplanations`` in group ``explain.kopf-scheduler.io`` (per namespace, or per pod name).

Discovery is what the aggregator asks for: ``/apis`` (an ``APIGroupList``: the aggregator's first request
accepts only the aggregated ``APIGroupDiscoveryList``, so a plain list makes it fall back to the next), then
``/apis/<group>/<version>`` (an ``APIResourceList``: kube-aggregator's discovery manager and its availability
check, which needs a 2xx), and ``/apis/<group>`` (an ``APIGroup``). Discovery is the same on every replica;
the explanation comes from the active replica's memory, so a standby answers it with 503. The chart's Service
selects the active replica only: each replica keeps the label :data:`ACTIVE_LABEL` of its own pod "true" while it
is active and "false" while it stands by (:func:`label_while_active`), so a standby sees such requests only in
the moment of a takeover. A replica that dies while active keeps the label, but its pod is no longer Ready and
leaves the Service's endpoints; one that restarts in place sets "false" first thing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web

from kopf_scheduler.kube.explain_api import GROUP, GROUP_VERSION, KIND, RESOURCE, VERSION
from kopf_scheduler.web.delegated import ResourceAttributes

PREFIX = f"/apis/{GROUP_VERSION}"
#: The label the chart's explain Service selects: "true" on the active replica's pod only.
ACTIVE_LABEL = "kopf-scheduler.io/active"

logger = logging.getLogger(__name__)

Explain = Callable[[str], dict[str, Any] | None]


def api_group() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [version], "preferredVersion": version}


def api_group_list() -> dict[str, Any]:
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def api_resource_list() -> dict[str, Any]:
    resource = {
        "name": RESOURCE,
        "singularName": "podexplanation",
        "namespaced": True,
        "kind": KIND,
        "verbs": ["get"],
    }
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION, "resources": [resource]}


def resource_attributes(method: str, path: str) -> ResourceAttributes | None:
    """The attributes a request for one of our objects is authorized with; None for any other path (discovery
    and the rest are non-resource URLs, as the API server's RequestInfo has them)."""
    if not path.startswith(PREFIX + "/"):
        return None
    parts = [unquote(p) for p in path[len(PREFIX) + 1 :].split("/")]
    if len(parts) not in (3, 4) or parts[0] != "namespaces" or not parts[1]:
        return None
    verb = "get" if method in ("GET", "HEAD") else method.lower()
    if len(parts) == 3:  # namespaces/NS/podexplanations: a list
        return ResourceAttributes(
            verb="list" if verb == "get" else verb, group=GROUP, version=VERSION, resource=parts[2], namespace=parts[1]
        )
    return ResourceAttributes(
        verb=verb, group=GROUP, version=VERSION, resource=parts[2], namespace=parts[1], name=parts[3]
    )


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return web.Response(
        status=code,
        text=json.dumps(body, separators=(",", ":")) + "\n",
        content_type="application/json",
        headers={"X-Content-Type-Options": "nosniff"},
    )


#: ``kubectl get podexplanation``'s columns (the server-side printing kubectl asks for with ``as=Table``).
COLUMNS = (
    ("Name", "name", "The pod's name."),
    ("Result", "", "The last attempt's result: Scheduled, Unschedulable, or another failure's reason."),
    ("Node", "", "Where a scheduled pod went."),
    ("Profile", "", "The SchedulerProfile that tried the pod."),
    ("Time", "", "When."),
)


def _wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part and "v=v1" in part for part in accept.split(","))


def table(metadata: dict[str, str], account: dict[str, Any]) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of one explanation (``kubectl get`` prints it; ``-o yaml`` asks for the object)."""
    cells = [metadata["name"], *(str(account.get(k) or "<none>") for k in ("result", "node", "profile", "time"))]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": [
            {"name": column, "type": "string", "format": format_, "description": text, "priority": 0}
            for column, format_, text in COLUMNS
        ],
        "rows": [
            {
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata},
            }
        ],
    }


def add_routes(app: web.Application, explain: Explain, is_active: Callable[[], bool], replica: str) -> None:
    """Discovery and ``GET .../namespaces/{namespace}/podexplanations/{name}``."""

    def fixed(document: dict[str, Any]) -> Any:
        async def handler(request: web.Request) -> web.Response:
            return web.json_response(document)

        return handler

    async def explanation(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        details = {"name": name, "group": GROUP, "kind": RESOURCE}
        if not is_active():
            return status(
                503,
                "ServiceUnavailable",
                f"replica {replica} is a standby: only the active replica schedules and keeps explanations; "
                "the Service routes to the active one once it has taken over: try again",
                details,
            )
        account = explain(f"{namespace}/{name}")
        if account is None:
            message = (
                f'{RESOURCE}.{GROUP} "{name}" not found: no failed scheduling attempt recorded for pod '
                f"{namespace}/{name}, nor a success account: it was never attempted by this replica, or it was "
                "bound by a profile without spec.explain.successes or spec.explain.annotations or longer ago than "
                "the last explainBoundPods pods, or deleted"
            )
            return status(404, "NotFound", message, details)
        metadata = {"name": name, "namespace": namespace}
        if _wants_table(request.headers.get("Accept", "")):
            return web.json_response(table(metadata, account))
        return web.json_response({"apiVersion": GROUP_VERSION, "kind": KIND, "metadata": metadata, "account": account})

    app.router.add_get("/apis", fixed(api_group_list()))
    app.router.add_get(f"/apis/{GROUP}", fixed(api_group()))
    app.router.add_get(PREFIX, fixed(api_resource_list()))
    app.router.add_get(PREFIX + "/namespaces/{namespace}/" + RESOURCE + "/{name}", explanation)

    async def not_listed(request: web.Request) -> web.Response:
        """Only ``get`` is served (discovery says so): a list is the API server's 405 for an unsupported verb."""
        message = "the server does not allow this method on the requested resource"
        return status(405, "MethodNotAllowed", message, {"group": GROUP, "kind": RESOURCE})

    app.router.add_get(PREFIX + "/namespaces/{namespace}/" + RESOURCE, not_listed)
    app.router.add_get(PREFIX + "/" + RESOURCE, not_listed)


@dataclass(frozen=True)
class OwnPod:
    """The replica's own pod (the chart's ``POD_ID`` and ``POD_NAMESPACE``) and how to reach the API server."""

    namespace: str
    name: str
    client: Callable[[], Any]


async def label_while_active(pod: OwnPod, is_active: Callable[[], bool], *, period: float = 1.0) -> None:
    """Keep :data:`ACTIVE_LABEL` on ``pod`` equal to ``is_active()``, looked at every ``period`` seconds.

    A merge patch of one label, only when it changes (and once at start); a failed patch is tried again at the
    next look.
    """
    path = f"/api/v1/namespaces/{quote(pod.namespace, safe='')}/pods/{quote(pod.name, safe='')}"
    labelled: bool | None = None
    failure = ""
    while True:
        active, current = is_active(), pod.client()
        if active != labelled and current is not None:
            body = {"metadata": {"labels": {ACTIVE_LABEL: "true" if active else "false"}}}
            try:
                await current.request("PATCH", path, body=body, content_type="application/merge-patch+json")
            except Exception as e:  # the API server away, the Role missing: say so once, try again
                if str(e) != failure:
                    logger.warning("cannot label pod %s/%s %s=%s: %s", pod.namespace, pod.name, ACTIVE_LABEL, active, e)
                    failure = str(e)
            else:
                labelled, failure = active, ""
                logger.info("labelled pod %s/%s %s=%s", pod.namespace, pod.name, ACTIVE_LABEL, str(active).lower())
        await asyncio.sleep(period)
