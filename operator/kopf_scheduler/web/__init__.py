"""The operator's own HTTPS endpoints on the metrics port: ``/metrics``, ``/explain/<namespace>/<pod>``, and the
health paths ``/healthz``, ``/livez``, ``/readyz`` (:mod:`kopf_scheduler.health`).

Served as kube-scheduler serves its secure port (10259): TLS with the given certificate or a self-signed one
(:mod:`.certs`), every request authenticated and authorized by the API server (:mod:`.delegated`): the health
paths are open (``--authorization-always-allow-paths``), ``/metrics`` and ``/explain/...`` need ``get`` on that
non-resource URL (the chart's ``<release>-metrics-reader`` ClusterRole grants it). Refusals are the API
server's ``Status`` bodies: 401 ``Unauthorized`` for a rejected token, 403 ``forbidden: User "..." cannot get
path "..."``. Behind the API server's ``pods/proxy`` (``kopf-scheduler explain`` without ``--url``) the
caller's token arrives in ``X-Kopf-Scheduler-Authorization``, as the proxy drops ``Authorization``.

Everything is served by aiohttp on kopf's event loop, so ``/explain`` reads the explanations the scheduling
cycle wrote without a lock (prometheus_client's own server would answer from another thread). kopf's liveness
endpoint (``/healthz`` on the health port, plain HTTP) is kopf's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kopf_scheduler.health import PING, Answer, HealthCheck, HealthChecks, answer_check, answer_root
from kopf_scheduler.kube.client import KubeClient
from kopf_scheduler.kube.kubeconfig import KubeconfigError, load_credentials
from kopf_scheduler.kube.remote_explain import FORWARDED_AUTHORIZATION_HEADER
from kopf_scheduler.web.certs import CertificateInChild, certificate_names, reload_pair, server_context, serving_hosts
from kopf_scheduler.web.delegated import TOKEN_REVIEWS, DelegatedAuth, ReviewFailed, Unauthenticated

Explain = Callable[[str], dict[str, Any] | None]
#: Seconds between checks of a provided certificate's files.
CERT_RELOAD_PERIOD = 60.0

logger = logging.getLogger(__name__)

__all__ = [
    "CertificateInChild",
    "DelegatedAuth",
    "Explain",
    "build_app",
    "certificate_names",
    "review_poster",
    "serve",
    "server_context",
    "serving_hosts",
]


def _status(code: int, reason: str, message: str) -> web.Response:
    """A ``metav1.Status`` failure body, as the API server's filters write it."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        **({"details": {}} if code == 403 else {}),
        "code": code,
    }
    return web.Response(
        status=code,
        text=json.dumps(body, separators=(",", ":")) + "\n",  # byte for byte what kube-scheduler sends
        content_type="application/json",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def _authorization(request: web.Request) -> str | None:
    """``Authorization``, else the user's token the CLI repeats for requests through the API server's proxy.

    ``pods/proxy`` authenticates the caller, then drops ``Authorization`` and dials the pod without
    credentials (:mod:`kopf_scheduler.kube.remote_explain`), so without the repeated token every proxied
    request would be ``system:anonymous``. It is a bearer token like any other: reviewed, then authorized.
    """
    return request.headers.get("Authorization") or request.headers.get(FORWARDED_AUTHORIZATION_HEADER)


def _guard(auth: DelegatedAuth) -> Any:
    """Authentication, then authorization, before routing (as upstream's filter chain: unknown paths too)."""

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            user = await auth.authenticate(_authorization(request))
        except Unauthenticated:
            return _status(401, "Unauthorized", "Unauthorized")
        verb, path = request.method.lower(), request.path
        try:
            decision = await auth.authorize(user, verb, path)
        except ReviewFailed as e:
            return web.Response(status=500, text=f"Internal Server Error: {json.dumps(request.path_qs)}: {e}")
        if not decision.allowed:
            message = f"forbidden: User {json.dumps(user.name)} cannot {verb} path {json.dumps(path)}"
            if decision.reason:
                message += f": {decision.reason}"
            return _status(403, "Forbidden", message)
        response: web.StreamResponse = await handler(request)
        return response

    return guard


#: kube-scheduler's checks when it is given none to run (``/livez``): ping only.
PING_ONLY: HealthChecks = {"healthz": [PING], "livez": [PING], "readyz": [PING]}


def build_app(
    *,
    registry: CollectorRegistry,
    explain: Explain,
    auth: DelegatedAuth | None = None,
    health: HealthChecks = PING_ONLY,
) -> web.Application:
    """The routes; ``auth`` None serves them to anyone (unit tests only: :func:`serve` always guards)."""

    async def metrics(request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def explanation(request: web.Request) -> web.Response:
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        account = explain(key)
        if account is None:
            message = (
                f"no failed scheduling attempt recorded for pod {key}, nor a success account: it was never "
                "attempted by this replica (only the active replica schedules), or it was bound by a profile "
                "without spec.explain.successes or longer ago than the last explainBoundPods pods, or deleted"
            )
            return web.json_response({"pod": key, "message": message}, status=404)
        return web.json_response(account)

    app = web.Application(middlewares=[_guard(auth)] if auth is not None else [])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/explain/{namespace}/{name}", explanation)
    for path, checks in health.items():
        _add_health_routes(app, path, checks)
    return app


def _add_health_routes(app: web.Application, path: str, checks: Sequence[HealthCheck]) -> None:
    """``/<path>`` running every check, and ``/<path>/<name>`` for each one (k8s.io/apiserver's healthz mux)."""

    async def root(request: web.Request) -> web.Response:
        excluded = request.query.getall("exclude", [])
        return _health_response(answer_root(path, checks, excluded=excluded, verbose="verbose" in request.query))

    app.router.add_get(f"/{path}", root)
    for check in checks:
        app.router.add_get(f"/{path}/{check.name}", _one_check(check))


def _one_check(check: HealthCheck) -> Any:
    async def handler(request: web.Request) -> web.Response:
        return _health_response(answer_check(check))

    return handler


def _health_response(answer: Answer) -> web.Response:
    return web.Response(
        status=answer.status,
        text=answer.body,
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


async def serve(
    *,
    registry: CollectorRegistry,
    explain: Explain,
    port: int,
    address: str,
    auth: DelegatedAuth,
    cert_file: str = "",
    key_file: str = "",
    hosts: Sequence[str] = ("localhost",),
    reload_period: float = CERT_RELOAD_PERIOD,
    self_signed: CertificateInChild | None = None,
    health: HealthChecks = PING_ONLY,
) -> web.AppRunner:
    """Start serving HTTPS; returns the runner to ``cleanup()`` on shutdown.

    Without ``cert_file``/``key_file`` a self-signed certificate for ``hosts`` is made first (up to a second or
    two of RSA key generation, in a child process), or collected from ``self_signed``, started earlier. A
    wildcard address is left out of the certificate's names. Given files are watched and reloaded when they
    change, as kube-scheduler's dynamic serving certificate is.
    """
    if cert_file and key_file:
        pair = None
    else:
        pair = await (self_signed or CertificateInChild.start(certificate_names(hosts))).pair()
    ssl_context = await asyncio.to_thread(server_context, cert_file=cert_file, key_file=key_file, pair=pair)
    app = build_app(registry=registry, explain=explain, auth=auth, health=health)
    if cert_file and key_file:
        app.cleanup_ctx.append(_reloading(ssl_context, cert_file, key_file, reload_period))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port, ssl_context=ssl_context).start()
    return runner


def _reloading(context: ssl.SSLContext, cert_file: str, key_file: str, period: float) -> Any:
    """A cleanup context running :func:`reload_certificate` while the app serves."""

    async def run(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.ensure_future(reload_certificate(context, cert_file, key_file, period))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return run


async def reload_certificate(context: ssl.SSLContext, cert_file: str, key_file: str, period: float) -> None:
    """Every ``period`` seconds, load the pair again if either file changed (a Secret volume swaps both).

    New connections get the new certificate; a pair that does not load (half written, mismatched) is
    logged and tried again next time while the old certificate keeps serving. The pair is checked on a
    scratch context first: a failed ``load_cert_chain`` on the live one would leave it with the new
    certificate and the old key, and every handshake would fail.
    """

    def stamp() -> tuple[int, ...]:
        return tuple(os.stat(path).st_mtime_ns for path in (cert_file, key_file))

    loaded = stamp()
    while True:
        await asyncio.sleep(period)
        try:
            current = stamp()
            if current != loaded:
                await asyncio.to_thread(reload_pair, context, cert_file, key_file)
                loaded = current
                logger.info("reloaded the serving certificate %s", cert_file)
        except (OSError, ssl.SSLError) as e:
            logger.warning("cannot reload the serving certificate %s (still serving the old one): %s", cert_file, e)


def review_poster(
    client: Callable[[], Any], *, authentication_kubeconfig: str = "", authorization_kubeconfig: str = ""
) -> Callable[[str, Mapping[str, Any]], Any]:
    """The reviews' ``post``: through the operator's current API client (kopf's login replaces it), or, as
    kube-scheduler's ``--authentication-kubeconfig``/``--authorization-kubeconfig``, TokenReviews and
    SubjectAccessReviews through the API servers those kubeconfigs name (read now: a bad one fails the start)."""

    async def operator_post(path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        current = client()
        if current is None:
            raise RuntimeError("not logged in to the API server yet")
        result: Mapping[str, Any] = await current.request("POST", path, body=dict(body))
        return result

    authentication = _kubeconfig_post(authentication_kubeconfig) or operator_post
    authorization = _kubeconfig_post(authorization_kubeconfig) or operator_post

    async def post(path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        result: Mapping[str, Any] = await (authentication if path == TOKEN_REVIEWS else authorization)(path, body)
        return result

    return post


def _kubeconfig_post(kubeconfig: str) -> Callable[[str, Mapping[str, Any]], Any] | None:
    """A ``post`` through the API server of ``kubeconfig``'s current context; None without one."""
    if not kubeconfig:
        return None
    try:
        credentials = load_credentials(kubeconfig=kubeconfig)
    except KubeconfigError as e:
        raise RuntimeError(f"{kubeconfig}: {e}") from e
    api = KubeClient(
        server=credentials.server, headers=credentials.auth_headers(), ssl_context=credentials.ssl_context()
    )

    async def post(path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        result: Mapping[str, Any] = await api.request("POST", path, body=dict(body))
        return result

    return post
