"""The operator's own HTTPS endpoints on the metrics port: ``/metrics``, ``/explain/<namespace>/<pod>``, the
health paths ``/healthz``, ``/livez``, ``/readyz`` (:mod:`kopf_scheduler.health`), and the aggregated API
``explain.kopf-scheduler.io/v1alpha1`` (:mod:`.aggregated`: discovery and ``podexplanations``), whose callers the
API server's front proxy names in headers (:mod:`.requestheader`; its CA is read by :func:`follow_front_proxy`).

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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kopf_scheduler.framework.interface import APIError
from kopf_scheduler.health import PING, Answer, HealthCheck, HealthChecks, answer_check, answer_root
from kopf_scheduler.kube.client import KubeClient
from kopf_scheduler.kube.kubeconfig import KubeconfigError, load_credentials
from kopf_scheduler.kube.remote_explain import FORWARDED_AUTHORIZATION_HEADER
from kopf_scheduler.web import aggregated
from kopf_scheduler.web.certs import CertificateInChild, certificate_names, reload_pair, server_context, serving_hosts
from kopf_scheduler.web.delegated import (
    TOKEN_REVIEWS,
    DelegatedAuth,
    ResourceAttributes,
    ReviewFailed,
    Unauthenticated,
    UserInfo,
)
from kopf_scheduler.web.requestheader import (
    AUTHENTICATION_CONFIGMAP,
    RequestHeaderConfig,
    authenticate_front_proxy,
    common_name,
    config_from_configmap,
    trust_front_proxy,
)

Explain = Callable[[str], dict[str, Any] | None]
#: Reads the front proxy's requestheader config (None: the cluster publishes none).
ReadFrontProxy = Callable[[], Awaitable[RequestHeaderConfig | None]]
#: Seconds between checks of a provided certificate's files, and between reads of the requestheader config.
CERT_RELOAD_PERIOD = 60.0
#: Seconds between tries while the requestheader config cannot be read yet (before login, API server down).
FRONT_PROXY_RETRY = 2.0

logger = logging.getLogger(__name__)

__all__ = [
    "CertificateInChild",
    "DelegatedAuth",
    "Explain",
    "FrontProxy",
    "build_app",
    "certificate_names",
    "follow_front_proxy",
    "front_proxy_reader",
    "review_poster",
    "serve",
    "server_context",
    "serving_hosts",
]


def _status(code: int, reason: str, message: str) -> web.Response:
    """A ``metav1.Status`` failure body, as the API server's filters write it (byte for byte kube-scheduler's)."""
    return aggregated.status(code, reason, message, {} if code == 403 else None)


def _authorization(request: web.Request) -> str | None:
    """``Authorization``, else the user's token the CLI repeats for requests through the API server's proxy.

    ``pods/proxy`` authenticates the caller, then drops ``Authorization`` and dials the pod without
    credentials (:mod:`kopf_scheduler.kube.remote_explain`), so without the repeated token every proxied
    request would be ``system:anonymous``. It is a bearer token like any other: reviewed, then authorized.
    """
    return request.headers.get("Authorization") or request.headers.get(FORWARDED_AUTHORIZATION_HEADER)


class FrontProxy:
    """The requestheader config the guard trusts (None until read: :func:`follow_front_proxy`)."""

    def __init__(self, config: RequestHeaderConfig | None = None) -> None:
        self.config = config


async def _authenticate(request: web.Request, auth: DelegatedAuth, front_proxy: FrontProxy) -> UserInfo:
    """The front proxy's user (a verified client certificate), else the bearer token's, else anonymous."""
    peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
    verified = common_name(peer) if isinstance(peer, dict) else None  # {} or None: no verified certificate
    user = authenticate_front_proxy(front_proxy.config, verified, request.headers)
    return user if user is not None else await auth.authenticate(_authorization(request))


def _guard(auth: DelegatedAuth, front_proxy: FrontProxy | None = None) -> Any:
    """Authentication, then authorization, before routing (as upstream's filter chain: unknown paths too)."""
    trusted = front_proxy or FrontProxy()

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            user = await _authenticate(request, auth, trusted)
        except Unauthenticated:
            return _status(401, "Unauthorized", "Unauthorized")
        verb, path = request.method.lower(), request.path
        attributes = aggregated.resource_attributes(request.method, path)
        try:
            if attributes is not None:
                decision = await auth.authorize_resource(user, attributes)
            else:
                decision = await auth.authorize(user, verb, path)
        except ReviewFailed as e:
            return web.Response(status=500, text=f"Internal Server Error: {json.dumps(request.path_qs)}: {e}")
        if not decision.allowed:
            return _forbidden(user, verb, path, attributes, decision.reason)
        response: web.StreamResponse = await handler(request)
        return response

    return guard


def _forbidden(
    user: UserInfo, verb: str, path: str, attributes: ResourceAttributes | None, reason: str
) -> web.Response:
    """The API server's 403 for a path, or for a resource (``<resource>.<group> "<name>" is forbidden: ...``)."""
    if attributes is None:
        message = f"forbidden: User {json.dumps(user.name)} cannot {verb} path {json.dumps(path)}"
        return _status(403, "Forbidden", message + (f": {reason}" if reason else ""))
    a = attributes
    why = (
        f"User {json.dumps(user.name)} cannot {a.verb} resource {json.dumps(a.resource)} in API group "
        f"{json.dumps(a.group)} in the namespace {json.dumps(a.namespace)}" + (f": {reason}" if reason else "")
    )
    details = {"name": a.name, "group": a.group, "kind": a.resource}
    message = f"{a.resource}.{a.group} {json.dumps(a.name)} is forbidden: {why}"
    return aggregated.status(403, "Forbidden", message, details)


#: kube-scheduler's checks when it is given none to run (``/livez``): ping only.
PING_ONLY: HealthChecks = {"healthz": [PING], "livez": [PING], "readyz": [PING]}


def build_app(
    *,
    registry: CollectorRegistry,
    explain: Explain,
    auth: DelegatedAuth | None = None,
    health: HealthChecks = PING_ONLY,
    front_proxy: FrontProxy | None = None,
    is_active: Callable[[], bool] = lambda: True,
    replica: str = "",
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
                "without spec.explain.successes or spec.explain.annotations or longer ago than the last "
                "explainBoundPods pods, or deleted"
            )
            return web.json_response({"pod": key, "message": message}, status=404)
        return web.json_response(account)

    middlewares = [_guard(auth, front_proxy)] if auth is not None else []
    app = web.Application(middlewares=middlewares)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/explain/{namespace}/{name}", explanation)
    aggregated.add_routes(app, explain, is_active, replica)
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
    front_proxy: ReadFrontProxy | None = None,
    is_active: Callable[[], bool] = lambda: True,
    replica: str = "",
    own_pod: aggregated.OwnPod | None = None,
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
    trusted = FrontProxy()
    app = build_app(
        registry=registry,
        explain=explain,
        auth=auth,
        health=health,
        front_proxy=trusted,
        is_active=is_active,
        replica=replica,
    )
    if cert_file and key_file:
        app.cleanup_ctx.append(_reloading(ssl_context, cert_file, key_file, reload_period))
    if front_proxy is not None:
        app.cleanup_ctx.append(_background(follow_front_proxy(front_proxy, ssl_context, trusted)))
    if own_pod is not None:
        app.cleanup_ctx.append(_background(aggregated.label_while_active(own_pod, is_active)))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port, ssl_context=ssl_context).start()
    return runner


def _reloading(context: ssl.SSLContext, cert_file: str, key_file: str, period: float) -> Any:
    """A cleanup context running :func:`reload_certificate` while the app serves."""
    return _background(reload_certificate(context, cert_file, key_file, period))


def _background(coroutine: Coroutine[Any, Any, None]) -> Any:
    """A cleanup context running ``coroutine`` while the app serves."""

    async def run(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.ensure_future(coroutine)
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


async def follow_front_proxy(
    read: ReadFrontProxy,
    context: ssl.SSLContext,
    trusted: FrontProxy,
    *,
    period: float = CERT_RELOAD_PERIOD,
    retry: float = FRONT_PROXY_RETRY,
) -> None:
    """Read the requestheader config now and every ``period`` seconds; trust its CA from the first read on.

    As k8s.io/apiserver's dynamic requestheader config (which watches the ConfigMap): until it is read, and in
    a cluster that publishes none, nothing is trusted as a front proxy and the aggregated API is refused.
    """
    loaded: set[str] = set()
    told = ""
    while True:
        try:
            config = await read()
        except Exception as e:  # not logged in yet, the API server away: try again soon
            note = f"cannot read the front proxy's requestheader config yet: {e}"
            if note != told:
                logger.info("%s", note)
                told = note
            await asyncio.sleep(period if trusted.config is not None else retry)
            continue
        if config is None:
            note = (
                "the API server publishes no requestheader-client-ca-file (kube-system/extension-apiserver-"
                "authentication): requests through an APIService cannot be authenticated"
            )
        else:
            if config.client_ca_pem not in loaded:
                await asyncio.to_thread(trust_front_proxy, context, config)
                loaded.add(config.client_ca_pem)
            note = f"trusting the front proxy {list(config.allowed_names) or '(any name)'} for the aggregated API"
        trusted.config = config
        if note != told:
            logger.info("%s", note)
            told = note
        await asyncio.sleep(period)


def front_proxy_reader(client: Callable[[], Any], *, authentication_kubeconfig: str = "") -> ReadFrontProxy:
    """Reads ``kube-system/extension-apiserver-authentication`` through the operator's client, or the API server
    of ``--authentication-kubeconfig`` (as kube-scheduler); a missing ConfigMap is None."""
    api = _kubeconfig_client(authentication_kubeconfig)

    async def read() -> RequestHeaderConfig | None:
        current = api or client()
        if current is None:
            raise RuntimeError("not logged in to the API server yet")
        try:
            configmap = await current.request("GET", AUTHENTICATION_CONFIGMAP)
        except APIError as e:
            if e.status == 404:
                return None
            raise
        return config_from_configmap(configmap.get("data"))

    return read


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


def _kubeconfig_client(kubeconfig: str) -> KubeClient | None:
    """A client of the API server of ``kubeconfig``'s current context; None without one."""
    if not kubeconfig:
        return None
    try:
        credentials = load_credentials(kubeconfig=kubeconfig)
    except KubeconfigError as e:
        raise RuntimeError(f"{kubeconfig}: {e}") from e
    return KubeClient(
        server=credentials.server, headers=credentials.auth_headers(), ssl_context=credentials.ssl_context()
    )


def _kubeconfig_post(kubeconfig: str) -> Callable[[str, Mapping[str, Any]], Any] | None:
    """A ``post`` through the API server of ``kubeconfig``'s current context; None without one."""
    api = _kubeconfig_client(kubeconfig)
    if api is None:
        return None

    async def post(path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        result: Mapping[str, Any] = await api.request("POST", path, body=dict(body))
        return result

    return post
