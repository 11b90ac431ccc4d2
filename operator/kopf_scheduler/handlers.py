"""The only module that registers kopf handlers. Thin by design: kopf callbacks → SchedulerApp calls.

kopf rules this module follows (reference kopf-and-peers.md, A1–A7):
- Pods, nodes and every other watched kind are watched with ``@kopf.on.event`` only, and every handler
  returns None: change handlers, daemons or timers would write annotations and finalizers onto every object.
- One ``@kopf.daemon`` per SchedulerProfile runs that profile's scheduling loop; peering stops daemons on
  the standby replica and respawns them after a takeover, so only the active replica schedules.
- API calls go through the app's async client; nothing here blocks the event loop.
- A kind served by on.event handlers alone gets its events from kopf's watch stream without kopf's per-object
  workers and causes (``_deliver_watch_events_straight_to_on_event_handlers``): such handlers must not await
  for long, since the kind's next event waits for them.
- Every handler is ``async def``: kopf runs sync handlers on worker threads, and the cache and queues are
  only ever touched from the event loop, between scheduling cycles (they have no locks, by design).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import logging
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import kopf
import kopf._cogs.clients.api as kopf_api
import kopf._cogs.clients.fetching as kopf_fetching
import kopf._cogs.clients.watching as kopf_watching
import kopf._core.reactor.queueing as kopf_queueing

from kopf_scheduler import json_codec, web
from kopf_scheduler.app import ProfileOutcome, SchedulerApp, tune_garbage_collector
from kopf_scheduler.kube import LIST_PAGE_SIZE, HTTPExtenderTransport, KubeClient, event_body

GROUP, VERSION, PLURAL = "kopf-scheduler.io", "v1alpha1", "schedulerprofiles"
FINALIZER = "kopf-scheduler.io/profile-cleanup"

logger = logging.getLogger("kopf_scheduler.handlers")


def _app(memo: Any) -> SchedulerApp:
    return memo.app  # type: ignore[no-any-return]


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    tune_garbage_collector()
    _decode_kopf_json_with_json_codec()
    _start_kopf_watches_from_our_lists(_app(memo))
    _follow_the_cluster_while_paused(_app(memo))
    _deliver_watch_events_straight_to_on_event_handlers(kopf.get_default_registry(), memo)
    run = _app(memo).settings
    settings.peering.name = run.peering_name
    settings.peering.mandatory = True
    settings.peering.clusterwide = True
    settings.peering.priority = run.peering_priority
    settings.peering.lifetime = run.peering_lifetime
    settings.peering.stealth = True
    settings.persistence.finalizer = FINALIZER
    # We post kube-scheduler-style events ourselves; kopf's per-handler events would be noise.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    # kopf's initial LIST in pages (it applies one page before fetching the next): unpaged, 10000 pods are
    # ~120 MiB of Python dicts at once, which was most of the operator's peak RSS (docs/benchmarks.md). kopf
    # lists only what our reconciling LIST cannot stand in for (``_start_kopf_watches_from_our_lists``).
    settings.watching.chunk_size = LIST_PAGE_SIZE
    # Retry API errors (connection refused, 5xx, 429) for as long as they last, as client-go does: with a
    # finite list, an API server outage longer than the list's sum (an apiserver restart takes 10-20 s)
    # made the peering keep-alive escalate and kopf shut the whole operator down.
    settings.networking.error_backoffs = _RetryForever()


def _decode_kopf_json_with_json_codec() -> None:
    """kopf's watch-stream lines and LIST pages are decoded by :mod:`json_codec` (orjson) from now on.

    kopf decodes each watch line with the module-level ``json.loads`` of ``kopf._cogs.clients.api`` and each
    LIST page with aiohttp's ``ClientResponse.json()``, whose decoder defaults to the standard library's: at
    5000 nodes that was ≈ 4% of the operator's CPU per scheduled pod and most of kopf's LIST at start-up
    (py-spy, docs/benchmarks.md). kopf has no setting for it, so both names are pointed at
    ``json_codec.loads`` (the same values; what orjson refuses still goes through the standard library).
    Runs in the start-up handler, before kopf starts any watch. Tied to the pinned kopf and aiohttp:
    tests/unit/test_handlers.py fails when either stops decoding through these names.
    """
    kopf_api.json = types.SimpleNamespace(loads=json_codec.loads)  # type: ignore[assignment]
    aiohttp.ClientResponse.json.__kwdefaults__["loads"] = json_codec.loads


def _start_kopf_watches_from_our_lists(app: SchedulerApp) -> None:
    """kopf's watch of a kind we reconcile starts from our reconciling LIST, not from a LIST of its own.

    kopf lists a kind before watching it (at start and after each pause) and hands every listed object to the
    handlers one by one, with its per-object machinery: at 50000 pending pods that took 20 s, three times our
    LIST of the same pods, which the cache needs anyway (``EventHandlers.version_for_watch`` says when ours
    can stand in; docs/benchmarks.md). kopf has no setting for it, so its watcher's LIST is replaced: where
    ours stands in, kopf gets an empty LIST at our resourceVersion and watches from there; elsewhere (other
    kinds, label or field selectors, a 410 re-list) kopf's own LIST runs. Runs in the start-up handler,
    before kopf starts any watch. Tied to the pinned kopf: tests/unit/test_handlers.py drives kopf's real
    watch through it and fails when kopf stops listing through this name.
    """
    kopf_lists = kopf_fetching.fetch_objs

    async def fetch_objs(
        *, settings: kopf.OperatorSettings, resource: Any, namespace: str | None, logger: Any
    ) -> AsyncIterator[tuple[list[Any], str]]:
        watching = settings.watching
        selectors = (watching.label_selectors, watching.field_selectors, watching.shard_selectors)
        narrowed = any(selector.collect(resource) for selector in selectors)  # our LIST is of every object
        version = None if narrowed else await app.version_for_watch(resource.get_url(namespace=namespace))
        if version is not None:
            yield [], version
            return
        async for chunk in kopf_lists(settings=settings, resource=resource, namespace=namespace, logger=logger):
            yield chunk

    kopf_watching.fetching = types.SimpleNamespace(fetch_objs=fetch_objs)  # type: ignore[assignment]


def _follow_the_cluster_while_paused(app: SchedulerApp) -> None:
    """The app learns when kopf pauses the replica, so that its cache follows the cluster meanwhile (``standby.py``).

    kopf tells no handler about its pauses; every watcher of a served kind passes the operator's
    ``operator_paused`` toggles to ``streaming_block`` before it lists or watches (and waits there while the
    replica is paused), so the first watcher hands them to the app. Runs in the start-up handler, before kopf
    starts any watch. Tied to the pinned kopf: tests/unit/test_handlers.py drives kopf's real watcher through
    it and fails when kopf stops pausing through this name.
    """
    kopf_block = kopf_watching.streaming_block

    @contextlib.asynccontextmanager
    async def streaming_block(
        *, resource: Any, namespace: str | None, operator_paused: Any = None
    ) -> AsyncIterator[Any]:
        if operator_paused is not None:
            app.follow_pauses(operator_paused)
        async with kopf_block(resource=resource, namespace=namespace, operator_paused=operator_paused) as waiter:
            yield waiter

    kopf_watching.streaming_block = streaming_block  # type: ignore[assignment]


def _deliver_watch_events_straight_to_on_event_handlers(registry: kopf.OperatorRegistry, memo: Any) -> None:
    """A kind served by this module's ``@kopf.on.event`` handlers alone gets its events straight from kopf's stream.

    For every object kopf starts a worker task with its own queue, and for every event it recalls the object's
    memory, wraps the body, builds three loggers, detects causes, matches handlers, builds 20-odd kwargs and
    applies an empty patch: ≈ 20 times the CPU of our handler itself, ≈ 0.35–0.5 ms per pod event
    (``python -m bench.event_delivery``; a third of a scheduled pod's CPU at 5000 nodes, docs/benchmarks.md).
    None of it serves an on.event-only kind: nothing is kept per object, no patch is written, a handler's error
    is logged and ignored, and our handlers never await (they hand the event to the cache and the queues), so
    per-object concurrency had nothing to overlap. For such a kind the watcher kopf spawns is replaced by a
    loop over kopf's own watch stream (``infinite_watch``: its LISTs, pauses, bookmarks and 410 re-lists as
    they were) that awaits the kind's handlers on each event in stream order, with the keywords they read
    (``event``, ``type``, ``memo``, ``resource``, ``logger``). Every other kind (SchedulerProfiles, kopf's
    peerings, any handler with a filter) keeps kopf's watcher. Runs in the start-up handler, before kopf spawns
    any watcher. Tied to the pinned kopf: tests/unit/test_handlers.py drives kopf's real orchestration through
    it and fails when kopf stops spawning watchers through this name.
    """
    kopf_watcher = kopf_queueing.watcher

    async def watcher(
        *,
        namespace: Any,
        settings: kopf.OperatorSettings,
        resource: Any,
        processor: Any,
        operator_paused: Any = None,
        operator_indexed: Any = None,
        resource_indexed: Any = None,
    ) -> None:
        direct = _on_event_handlers_only(registry, resource) if resource_indexed is None else []
        if not direct:
            await kopf_watcher(
                namespace=namespace,
                settings=settings,
                resource=resource,
                processor=processor,
                operator_paused=operator_paused,
                operator_indexed=operator_indexed,
                resource_indexed=resource_indexed,
            )
            return
        stream = kopf_watching.infinite_watch(
            settings=settings, resource=resource, namespace=namespace, operator_paused=operator_paused
        )
        await _deliver(stream, direct, memo=memo, resource=resource)

    kopf_queueing.watcher = watcher  # type: ignore[assignment]


async def _deliver(stream: AsyncIterator[Any], handlers: list[Any], *, memo: Any, resource: Any) -> None:
    """Each watch event to each handler, in stream order; a failing handler is logged and ignored, as kopf does
    for on.event handlers."""
    async for event in stream:
        if isinstance(event, kopf_watching.Bookmark) or event.get("type") == "BOOKMARK":
            continue
        kind = event.get("type")
        for handler in handlers:
            try:
                await handler.fn(event=event, type=kind, memo=memo, resource=resource, logger=logger)
            except Exception:
                logger.exception("handler %s failed on a %s event of %s; ignored", handler.id, kind, resource)


def _on_event_handlers_only(registry: kopf.OperatorRegistry, resource: Any) -> list[Any]:
    """The kind's watching handlers when they are all this module's, unfiltered, and the kind has no other
    handlers (change, daemon, index, webhook); otherwise none (kopf's machinery serves the kind)."""
    others = (registry._changing, registry._spawning, registry._indexing, registry._webhooks)
    if any(kind.has_handlers(resource=resource) for kind in others):
        return []
    matching = [
        handler
        for handler in registry._watching.get_all_handlers()
        if handler.selector is not None and handler.selector.check(resource)
    ]
    if any(_filtered(handler) or getattr(handler.fn, "__module__", None) != __name__ for handler in matching):
        return []
    return matching


def _filtered(handler: Any) -> bool:
    return any(getattr(handler, name, None) for name in ("labels", "annotations", "when", "field", "value"))


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
        if isinstance(old, KubeClient):
            await old.close()
        else:
            # First login, before kopf's watches start: pods they deliver before our reconciling LIST has made
            # the cache whole wait for it (eventhandlers.py); and make sure the peering object exists, or every
            # replica stays paused.
            app.events.hold_pods_until_reconciled()
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
    """/metrics and /explain on the metrics port (HTTPS, delegated auth), on every replica (standby too)."""
    app = _app(memo)
    port, address = app.settings.metrics_port, app.settings.bind_address
    if not port:
        return
    run = app.settings
    try:
        memo.web = await web.serve(
            registry=app.metrics.registry,
            explain=app.explanations.get,
            port=port,
            address=address,
            auth=web.DelegatedAuth(
                web.review_poster(lambda: app.client), always_allow_paths=run.authorization_always_allow_paths
            ),
            cert_file=run.tls_cert_file,
            key_file=run.tls_private_key_file,
            hosts=web.serving_hosts(app.hostname, address),
            self_signed=getattr(memo, "self_signed_certificate", None),
        )
    except (OSError, RuntimeError) as e:  # RuntimeError: the self-signed certificate's child process failed
        # Fail fast, as a bad flag does: kopf would otherwise retry a startup handler for ever.
        raise kopf.PermanentError(f"cannot serve /metrics on {address}:{port}: {e}") from e


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
@kopf.on.event("", "v1", "nodes")
async def node_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_node_event(event.get("type"), event["object"])


@kopf.on.event("", "v1", "pods")
async def pod_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_pod_event(event.get("type"), event["object"])


@kopf.on.event("", "v1", "namespaces")
async def namespace_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_namespace_event(event.get("type"), event["object"])


@kopf.on.event("", "v1", "services")
async def service_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_workload_event("Service", event.get("type"), event["object"])


@kopf.on.event("", "v1", "replicationcontrollers")
async def replication_controller_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_workload_event("ReplicationController", event.get("type"), event["object"])


@kopf.on.event("apps", "v1", "replicasets")
async def replica_set_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_workload_event("ReplicaSet", event.get("type"), event["object"])


@kopf.on.event("apps", "v1", "statefulsets")
async def stateful_set_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_workload_event("StatefulSet", event.get("type"), event["object"])


# The storage objects the volume plugins read (state/objects.py). With --namespace, kopf watches the two
# namespaced kinds (PVCs, CSIStorageCapacities) in those namespaces only, as it does pods and workloads.
@kopf.on.event("", "v1", "persistentvolumes")
async def persistent_volume_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("PersistentVolume", event.get("type"), event["object"])


@kopf.on.event("", "v1", "persistentvolumeclaims")
async def persistent_volume_claim_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("PersistentVolumeClaim", event.get("type"), event["object"])


@kopf.on.event("storage.k8s.io", "v1", "storageclasses")
async def storage_class_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("StorageClass", event.get("type"), event["object"])


@kopf.on.event("storage.k8s.io", "v1", "csinodes")
async def csi_node_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("CSINode", event.get("type"), event["object"])


@kopf.on.event("storage.k8s.io", "v1", "csidrivers")
async def csi_driver_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("CSIDriver", event.get("type"), event["object"])


@kopf.on.event("storage.k8s.io", "v1", "csistoragecapacities")
async def csi_storage_capacity_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("CSIStorageCapacity", event.get("type"), event["object"])


@kopf.on.event("storage.k8s.io", "v1", "volumeattachments")
async def volume_attachment_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("VolumeAttachment", event.get("type"), event["object"])


@kopf.on.event("policy", "v1", "poddisruptionbudgets")
async def pod_disruption_budget_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("PodDisruptionBudget", event.get("type"), event["object"])


# DynamicResources' objects (resource.k8s.io/v1, state/objects.py), as upstream's DRA manager watches them.
@kopf.on.event("resource.k8s.io", "v1", "resourceclaims")
async def resource_claim_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("ResourceClaim", event.get("type"), event["object"])


@kopf.on.event("resource.k8s.io", "v1", "resourceclaimtemplates")
async def resource_claim_template_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("ResourceClaimTemplate", event.get("type"), event["object"])


@kopf.on.event("resource.k8s.io", "v1", "resourceslices")
async def resource_slice_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("ResourceSlice", event.get("type"), event["object"])


@kopf.on.event("resource.k8s.io", "v1", "deviceclasses")
async def device_class_event(event: dict[str, Any], memo: Any, **_: Any) -> None:
    _app(memo).on_object_event("DeviceClass", event.get("type"), event["object"])


# -- SchedulerProfiles ----------------------------------------------------------------------------------
@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def profile_changed(name: str, spec: Any, meta: Any, body: Any, patch: kopf.Patch, memo: Any, **_: Any) -> None:
    app = _app(memo)
    generation = int(meta.get("generation") or 0)
    outcome = app.apply_profile(name=name, spec=dict(spec), generation=generation)
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
    obj = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulerProfile", "metadata": dict(body.get("metadata", {}))}
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
        logger.warning("could not post %s event for profile %s: %s", reason, obj["metadata"].get("name"), e)
