"""The only module that registers kopf handlers. Thin by design: kopf callbacks → SchedulerApp calls.

It uses kopf's public API only; what the operator hooks into kopf's internals is in ``kopf_hooks.py``, installed
by the start-up handler here. kopf rules this module follows (reference kopf-and-peers.md, A1–A7):
- Pods, nodes and every other watched kind (``watched.py``, one ``@kopf.on.event`` handler per row) are watched
  with ``@kopf.on.event`` only, and every handler returns None: change handlers, daemons or timers would write
  annotations and finalizers onto every object.
- One ``@kopf.daemon`` per SchedulerProfile runs that profile's scheduling loop; peering stops daemons on
  the standby replica and respawns them after a takeover, so only the active replica schedules.
- API calls go through the app's async client; nothing here blocks the event loop.
- A kind served by this module's on.event handlers alone gets its events from kopf's watch stream without
  kopf's per-object workers and causes (``kopf_hooks.deliver_on_event_straight``): such handlers must not await
  for long, since the kind's next event waits for them.
- Every handler is ``async def``: kopf runs sync handlers on worker threads, and the cache and queues are
  only ever touched from the event loop, between scheduling cycles (they have no locks, by design).
"""

from __future__ import annotations

import datetime
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import kopf

from kopf_scheduler import kopf_hooks, web
from kopf_scheduler.app import ProfileOutcome, SchedulerApp, tune_garbage_collector
from kopf_scheduler.kube import LIST_PAGE_SIZE, HTTPExtenderTransport, KubeClient, event_body
from kopf_scheduler.watched import WATCHED_KINDS, Feed, WatchedKind

GROUP, VERSION, PLURAL = "kopf-scheduler.io", "v1alpha1", "schedulerprofiles"
FINALIZER = "kopf-scheduler.io/profile-cleanup"

logger = logging.getLogger("kopf_scheduler.handlers")


def _app(memo: Any) -> SchedulerApp:
    return memo.app  # type: ignore[no-any-return]  # kopf's Memo is untyped; cli.run puts the app there


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    tune_garbage_collector()
    app = _app(memo)
    kopf_hooks.decode_json_with_json_codec()
    kopf_hooks.start_watches_from_our_lists(app.version_for_watch)
    kopf_hooks.tell_pauses_to(app.follow_pauses)
    kopf_hooks.deliver_on_event_straight(kopf.get_default_registry(), memo, module=__name__, logger=logger)
    run = app.settings
    settings.peering.name = run.peering_name
    settings.peering.mandatory = True
    settings.peering.clusterwide = True
    settings.peering.priority = run.peering_priority
    settings.peering.lifetime = run.peering_lifetime
    settings.peering.stealth = True
    app.start_standing()  # the renew-deadline gate beside kopf's peering (standing.py)
    settings.persistence.finalizer = FINALIZER
    # We post kube-scheduler-style events ourselves; kopf's per-handler events would be noise.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    # kopf's initial LIST in pages (it applies one page before fetching the next): unpaged, 10000 pods are
    # ~120 MiB of Python dicts at once, most of the operator's peak RSS (docs/benchmarks.md). kopf lists
    # only what our reconciling LIST cannot stand in for (``kopf_hooks.start_watches_from_our_lists``).
    settings.watching.chunk_size = LIST_PAGE_SIZE
    # Retry API errors (connection refused, 5xx, 429) for as long as they last, as client-go does: with a
    # finite list, an API server outage longer than the list's sum (an apiserver restart takes 10-20 s)
    # makes the peering keep-alive escalate and kopf shut the whole operator down.
    settings.networking.error_backoffs = _RetryForever()


class _RetryForever:
    """kopf error backoffs: 0.5, 1, 2, 3 s, then every 5 s without end (re-iterable: one run per request)."""

    def __iter__(self) -> Iterator[float]:
        yield from (0.5, 1, 2, 3)
        yield from itertools.repeat(5.0)


@kopf.on.login()
async def login(memo: Any, **kwargs: Any) -> kopf.ConnectionInfo | None:
    info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    if info is not None:
        app = _app(memo)
        old = app.client
        app.client = client = KubeClient.from_connection_info(info)
        if app.standing.enabled:
            client.bind_guard = app.standing.may_bind  # asked again right before each Binding is written
        if isinstance(old, KubeClient):
            await old.close()
        else:
            # First login, before kopf's watches start: pods they deliver before our reconciling LIST has made
            # the cache whole wait for it (eventhandlers.py); and make sure the peering object exists, or every
            # replica stays paused.
            app.watch.hold_pods_until_reconciled()
            app.spawn(_ensure_peering(client, app.settings.peering_name))
    return info


async def _ensure_peering(client: KubeClient, name: str) -> None:
    try:
        if await client.ensure_cluster_peering(name):
            logger.info("created ClusterKopfPeering %s", name)
    except Exception as e:  # best effort: the chart creates it too
        logger.warning("could not ensure ClusterKopfPeering %s: %s", name, e)


@kopf.on.startup()
async def serve_endpoints(memo: Any, **_: Any) -> None:
    """/metrics, /explain and the health paths on the metrics port (HTTPS, delegated auth), on every replica
    (standby too)."""
    app = _app(memo)
    port, address = app.settings.metrics_port, app.settings.bind_address
    if not port:
        return
    run = app.settings
    try:
        memo.web = await web.serve(
            registry=app.metrics.registry,
            explain=app.explain,
            port=port,
            address=address,
            auth=web.DelegatedAuth(
                web.review_poster(
                    lambda: app.client,
                    authentication_kubeconfig=run.authentication_kubeconfig,
                    authorization_kubeconfig=run.authorization_kubeconfig,
                ),
                always_allow_paths=run.authorization_always_allow_paths,
            ),
            cert_file=run.tls_cert_file,
            key_file=run.tls_private_key_file,
            hosts=web.serving_hosts(app.hostname, address),
            self_signed=getattr(memo, "self_signed_certificate", None),
            health=app.health_checks(),
            front_proxy=web.front_proxy_reader(
                lambda: app.client, authentication_kubeconfig=run.authentication_kubeconfig
            ),
            is_active=lambda: not app.standby.paused,
            replica=os.environ.get("POD_ID") or app.hostname,  # the chart's pod name
            own_pod=_own_pod(app),
        )
    except (OSError, RuntimeError) as e:  # RuntimeError: the self-signed certificate's child process failed
        # Fail fast, as a bad flag does: kopf would otherwise retry a startup handler for ever.
        raise kopf.PermanentError(f"cannot serve /metrics on {address}:{port}: {e}") from e


def _own_pod(app: SchedulerApp) -> web.aggregated.OwnPod | None:
    """The replica's pod in the chart (POD_ID, POD_NAMESPACE): labelled while active, for the explain Service."""
    name, namespace = os.environ.get("POD_ID"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return None
    return web.aggregated.OwnPod(namespace=namespace, name=name, client=lambda: app.client)


@kopf.on.cleanup()
async def close(memo: Any, **_: Any) -> None:
    app = _app(memo)
    await app.shutdown()
    runner = getattr(memo, "web", None)
    if runner is not None:
        await runner.cleanup()
    if isinstance(app.client, KubeClient):
        await app.client.close()
    if isinstance(app.extender_transport, HTTPExtenderTransport):
        await app.extender_transport.close()


@kopf.on.probe(id="profiles")
async def profiles_probe(memo: Any, **_: Any) -> dict[str, int]:
    app = _app(memo)
    return {name: len(runtime.queue) for name, runtime in app.profiles.items()}


# -- watched kinds feed the cache and the queues ------------------------------------------------------
#: kopf calls a watch handler with keywords (``event``, ``memo`` and the rest, which it ignores).
WatchHandler = Callable[..., Awaitable[None]]


def _watch_handler(watched: WatchedKind) -> WatchHandler:
    """The kind's ``@kopf.on.event`` handler: pods and nodes straight to their app methods (the hottest path),
    every other kind through ``SchedulerApp.on_watch_event``. With ``--namespace``, kopf watches the namespaced
    kinds in those namespaces only."""
    if watched.feed is Feed.POD:

        async def handler(event: dict[str, Any], memo: Any, **_: Any) -> None:
            _app(memo).on_pod_event(event.get("type"), event["object"])

    elif watched.feed is Feed.NODE:

        async def handler(event: dict[str, Any], memo: Any, **_: Any) -> None:
            _app(memo).on_node_event(event.get("type"), event["object"])

    else:
        kind = watched.kind

        async def handler(event: dict[str, Any], memo: Any, **_: Any) -> None:
            _app(memo).on_watch_event(kind, event.get("type"), event["object"])

    handler.__name__ = handler.__qualname__ = watched.handler_name
    registered: WatchHandler = handler
    kopf.on.event(watched.group, watched.version, watched.plural, id=watched.handler_name)(registered)
    return registered


#: Kind → its registered watch handler, one per row of ``watched.WATCHED_KINDS``.
WATCH_HANDLERS: dict[str, WatchHandler] = {watched.kind: _watch_handler(watched) for watched in WATCHED_KINDS}


# -- SchedulerProfiles ----------------------------------------------------------------------------------
@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def profile_changed(name: str, spec: Any, meta: Any, body: Any, patch: kopf.Patch, memo: Any, **_: Any) -> None:
    app = _app(memo)
    generation = int(meta.get("generation") or 0)
    outcome = await app.profile_changed(name=name, spec=dict(spec), generation=generation)
    _write_status(patch, outcome, generation)
    if not outcome.ready:
        await _profile_event(app, body, "Warning", outcome.reason, outcome.message)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def profile_deleted(name: str, memo: Any, **_: Any) -> None:
    _app(memo).remove_profile(name)


# The loop notices ``stopped`` within its 0.5 s poll; a longer backoff lets it end on its own, uncancelled.
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_backoff=1.0, cancellation_timeout=10)
async def scheduling_loop(name: str, stopped: kopf.DaemonStopped, memo: Any, **_: Any) -> None:
    await _app(memo).run_profile(name, stopped=lambda: bool(stopped))


def _write_status(patch: kopf.Patch, outcome: ProfileOutcome, generation: int) -> None:
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = [
        {
            "type": "Ready",
            "status": "True" if outcome.ready else "False",
            "reason": outcome.reason,
            "message": outcome.message,
            "observedGeneration": generation,
            "lastTransitionTime": _now(),
        }
    ]
    if outcome.ready:
        patch.status.update(outcome.pipeline_status)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _profile_event(app: SchedulerApp, body: Any, event_type: str, reason: str, message: str) -> None:
    if app.client is None:
        return
    metadata: dict[str, Any] = dict(body.get("metadata", {}))
    obj = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulerProfile", "metadata": metadata}
    event = event_body(
        regarding=obj,
        event_type=event_type,
        reason=reason,
        action="BuildPipeline",
        note=message,
        reporting_controller="kopf-scheduler",
        reporting_instance=f"kopf-scheduler-{app.hostname}"[:128],
    )
    try:
        await app.client.create_event(namespace="default", body=event)
    except Exception as e:  # events are best effort
        logger.warning("could not post %s event for profile %s: %s", reason, metadata.get("name"), e)
