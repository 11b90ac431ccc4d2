"""kopf handler rules that keep the operator correct and invisible on pods, and the hooks into kopf's internals.

Each hook of ``kopf_hooks.py`` is driven through kopf's real code here: a test fails when a kopf (or aiohttp)
upgrade changes the shape the hook relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import kopf._cogs.clients.api as kopf_api
import kopf._cogs.clients.auth as kopf_auth
import pytest
from aiohttp import web
from kopf._cogs.structs import credentials

import kopf_scheduler.handlers as handlers
from kopf_scheduler import json_codec, kopf_hooks
from kopf_scheduler.watched import WATCHED_KINDS, WatchedKind


def test_every_handler_runs_on_the_event_loop() -> None:
    """kopf runs sync handlers on worker threads; the cache and queues have no locks, so none may be sync."""
    public = {
        name: fn
        for name, fn in vars(handlers).items()
        if inspect.isfunction(fn) and fn.__module__ == handlers.__name__ and not name.startswith("_")
    }
    public |= {fn.__name__: fn for fn in handlers.WATCH_HANDLERS.values()}
    assert len(public) > len(WATCHED_KINDS), "no handlers found"
    assert [name for name, fn in public.items() if not inspect.iscoroutinefunction(fn)] == []


def _resource(watched: WatchedKind) -> Any:
    from kopf._cogs.structs import references

    return references.Resource(
        group=watched.group, version=watched.version, plural=watched.plural, namespaced=watched.namespaced
    )


def test_every_watched_kind_is_watched_with_one_on_event_handler_and_nothing_else() -> None:
    """One ``@kopf.on.event`` handler per row of ``watched.py``, and no change handler, daemon or timer on any
    watched kind: those would write annotations and finalizers onto every pod."""
    registry = kopf.get_default_registry()
    for watched in WATCHED_KINDS:
        only = kopf_hooks.on_event_handlers_only(registry, _resource(watched), module=handlers.__name__)
        assert [(h.id, h.fn) for h in only] == [(watched.handler_name, handlers.WATCH_HANDLERS[watched.kind])]
    watching = registry._watching.get_all_handlers()
    assert sorted(h.id for h in watching) == sorted(watched.handler_name for watched in WATCHED_KINDS)
    source = inspect.getsource(handlers)
    for forbidden in ("on.create(", "on.update(", "daemon(", "timer("):
        assert all(line.count(forbidden) == 0 or "GROUP, VERSION, PLURAL" in line for line in source.splitlines())


def test_the_handler_ids_are_the_kinds_in_snake_case() -> None:
    ids = {watched.kind: watched.handler_name for watched in WATCHED_KINDS}
    assert (ids["Pod"], ids["CSIStorageCapacity"], ids["ReplicationController"]) == (
        "pod_event",
        "csi_storage_capacity_event",
        "replication_controller_event",
    )


def test_the_process_refuses_an_untested_kopf() -> None:
    """The installed kopf is in the tested range, which is the one pyproject.toml requires; others are refused."""
    from importlib.metadata import version
    from pathlib import Path

    kopf_hooks.check_kopf_version()
    root = Path(__file__).parents[2]
    assert f'"kopf{kopf_hooks.TESTED_KOPF}"' in (root / "pyproject.toml").read_text()
    assert f"kopf=={version('kopf')}" in (root / "constraints.txt").read_text().splitlines()
    for untested in ("1.45.1", "1.45.2rc1", "1.46.0", "1.46.0rc1", "2.0"):
        with pytest.raises(
            kopf_hooks.KopfVersionError, match=rf"kopf {untested} is installed, .*kopf>=1\.45\.2,<1\.46"
        ):
            kopf_hooks.check_kopf_version(untested)
    for tested in ("1.45.2", "1.45.9", "1.45.2.post1"):
        kopf_hooks.check_kopf_version(tested)


def test_the_peering_logger_is_kopfs() -> None:
    """The CLI keeps kopf's peering lines ("Pausing operations in favour of ...") at the operator's level."""
    import kopf._core.engines.peering as peering

    assert kopf_hooks.peering_logger() is peering.logger


@contextlib.asynccontextmanager
async def _kopf_talking_to(routes: dict[str, Any]) -> AsyncIterator[None]:
    """A local HTTP server with ``routes`` (path → GET handler), and kopf's API calls logged in to it."""
    application = web.Application()
    for path, handler in routes.items():
        application.router.add_get(path, handler)
    runner = web.AppRunner(application)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    vault = credentials.Vault()
    try:
        await vault.populate({"test": credentials.ConnectionInfo(server=f"http://127.0.0.1:{port}")})
        kopf_auth.vault_var.set(vault)
        yield
    finally:
        await vault.close()
        await runner.cleanup()


def test_kopf_decodes_its_watch_streams_and_lists_through_json_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own LIST pages and watch lines go through ``json_codec.loads`` once the start-up handler ran.

    Real kopf API calls (``api.get``, ``api.stream``, as its LIST and watch use them) against a local HTTP
    server; fails when a kopf or aiohttp upgrade decodes through another name than the two replaced.
    """
    decoded: list[bytes | str] = []
    real_loads = json_codec.loads

    def spy(data: bytes | str) -> Any:
        decoded.append(data)
        return real_loads(data)

    # Restored after the test, like everything the installer replaces.
    monkeypatch.setattr(kopf_api, "json", kopf_api.json)
    monkeypatch.setitem(
        aiohttp.ClientResponse.json.__kwdefaults__, "loads", aiohttp.ClientResponse.json.__kwdefaults__["loads"]
    )
    monkeypatch.setattr(kopf_hooks.json_codec, "loads", spy)
    kopf_hooks.decode_json_with_json_codec()

    async def serve_and_call() -> tuple[Any, list[Any]]:
        async def pods(request: web.Request) -> web.StreamResponse:
            if request.query.get("watch"):
                response = web.StreamResponse(headers={"Content-Type": "application/json"})
                await response.prepare(request)
                await response.write(b'{"type":"ADDED","object":{"kind":"Pod"}}\n')
                await response.write_eof()
                return response
            return web.json_response({"kind": "PodList", "items": []})

        async with _kopf_talking_to({"/api/v1/pods": pods}):
            settings = kopf.OperatorSettings()
            listed = await kopf_api.get("/api/v1/pods", settings=settings, logger=logging.getLogger("test"))
            streamed = [
                line
                async for line in kopf_api.stream(
                    "/api/v1/pods?watch=true", settings=settings, logger=logging.getLogger("test")
                )
            ]
            return listed, streamed

    listed, streamed = asyncio.run(serve_and_call())
    assert listed == {"kind": "PodList", "items": []}
    assert streamed == [{"type": "ADDED", "object": {"kind": "Pod"}}]
    assert len(decoded) == 2, decoded


def test_kopf_watches_reconciled_kinds_from_our_list_and_lists_the_others_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf's real watcher (``continuous_watch``) with the start-up handler's replacement: for pods it makes no
    LIST and watches from our reconciling LIST's resourceVersion; SchedulerProfiles it lists itself. Fails
    when a kopf upgrade lists through another name than the one replaced, or watches from another version."""
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    from tests.unit.app_harness import new_app, pending

    monkeypatch.setattr(watching, "fetching", watching.fetching)  # restored after the test
    app = new_app()
    app.client.lists["/api/v1/pods"] = [pending("listed-by-us")]  # type: ignore[union-attr]
    app.client.versions["/api/v1/pods"] = "41"  # type: ignore[union-attr]
    kopf_hooks.start_watches_from_our_lists(app.version_for_watch)
    requests: list[tuple[str, dict[str, str]]] = []

    async def serve(request: web.Request) -> web.StreamResponse:
        requests.append((request.path, dict(request.query)))
        if not request.query.get("watch"):
            item = {"metadata": {"name": "sp", "uid": "u1", "resourceVersion": "5"}}
            return web.json_response(
                {"kind": "SchedulerProfileList", "items": [item], "metadata": {"resourceVersion": "7"}}
            )
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{"metadata":{"name":"new","uid":"u2"}}}\n')
        await response.write_eof()
        return response

    async def first_events(resource: references.Resource, settings: kopf.OperatorSettings) -> list[Any]:
        pause_waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        events: list[Any] = []
        async for event in watching.continuous_watch(
            settings=settings, resource=resource, namespace=None, operator_pause_waiter=pause_waiter
        ):
            events.append(event)
            if isinstance(event, dict) and event.get("type") == "ADDED":
                break
        return events

    async def watch_both() -> tuple[list[Any], list[Any]]:
        routes = {"/api/v1/pods": serve, "/apis/kopf-scheduler.io/v1alpha1/schedulerprofiles": serve}
        async with _kopf_talking_to(routes):
            settings = kopf.OperatorSettings()
            pods = references.Resource(group="", version="v1", plural="pods", namespaced=True)
            profiles = references.Resource(
                group="kopf-scheduler.io", version="v1alpha1", plural="schedulerprofiles", namespaced=False
            )
            return await first_events(pods, settings), await first_events(profiles, settings)

    pod_events, profile_events = asyncio.run(watch_both())
    assert [(path, query.get("watch"), query.get("resourceVersion")) for path, query in requests] == [
        ("/api/v1/pods", "true", "41"),  # no LIST of pods: watched from our LIST's snapshot
        ("/apis/kopf-scheduler.io/v1alpha1/schedulerprofiles", None, None),
        ("/apis/kopf-scheduler.io/v1alpha1/schedulerprofiles", "true", "7"),
    ]
    assert len(app.unassigned) == 1  # our LIST, which kopf's request started, is in the cache
    assert [e if not isinstance(e, dict) else e["type"] for e in pod_events] == [watching.Bookmark.LISTED, "ADDED"]
    assert [e if not isinstance(e, dict) else e["type"] for e in profile_events] == [
        None,
        watching.Bookmark.LISTED,
        "ADDED",
    ]


def test_a_paused_replica_follows_the_cluster_and_kopf_resumes_from_where_it_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf's real watcher (``infinite_watch``) with the start-up handler's replacements and a real
    ``operator_paused``: while paused, kopf sends nothing and the app's standby lists and follows the cluster;
    at the resume kopf watches pods from the version the standby's stream reached, with no LIST. Fails when a
    kopf upgrade pauses or lists through other names than the ones replaced."""
    from kopf._cogs.aiokits import aiotoggles
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    from tests.unit.app_harness import new_app, pending, until

    monkeypatch.setattr(watching, "fetching", watching.fetching)  # restored after the test
    monkeypatch.setattr(watching, "streaming_block", watching.streaming_block)
    app = new_app()
    fake = app.client
    fake.lists["/api/v1/pods"] = [pending("listed")]  # type: ignore[union-attr]
    fake.versions["/api/v1/pods"] = "41"  # type: ignore[union-attr]
    created = pending("created-while-paused")
    created["metadata"]["resourceVersion"] = "45"
    fake.watch_events["/api/v1/pods"] = [{"type": "ADDED", "object": created}]  # type: ignore[union-attr]
    kopf_hooks.start_watches_from_our_lists(app.version_for_watch)
    kopf_hooks.tell_pauses_to(app.follow_pauses)
    requests: list[dict[str, str]] = []

    async def serve(request: web.Request) -> web.StreamResponse:
        requests.append(dict(request.query))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{"metadata":{"name":"new","uid":"u2"}}}\n')
        await response.write_eof()
        return response

    async def pause_then_resume() -> list[Any]:
        async with _kopf_talking_to({"/api/v1/pods": serve}):
            operator_paused = aiotoggles.ToggleSet(any)
            peering = await operator_paused.make_toggle(True, name="peering")
            pods = references.Resource(group="", version="v1", plural="pods", namespaced=True)
            events: list[Any] = []

            async def kopfs_watcher() -> None:
                stream = watching.infinite_watch(
                    settings=kopf.OperatorSettings(), resource=pods, namespace=None, operator_paused=operator_paused
                )
                async for event in stream:
                    events.append(event)
                    if isinstance(event, dict) and event.get("type") == "ADDED":
                        return

            watcher = asyncio.ensure_future(kopfs_watcher())
            await until(lambda: "created-while-paused" in {pod.name for pod in app.unassigned.values()})
            assert app.standby.following
            assert requests == []  # kopf waits while paused
            await peering.turn_to(False)
            await asyncio.wait_for(watcher, timeout=5)
            assert not app.standby.following
            await app.shutdown()
            return events

    events = asyncio.run(pause_then_resume())
    assert [(query.get("watch"), query.get("resourceVersion")) for query in requests] == [("true", "45")]
    assert [e if not isinstance(e, dict) else e["type"] for e in events] == [watching.Bookmark.LISTED, "ADDED"]
    assert {pod.name for pod in app.unassigned.values()} == {"listed", "created-while-paused"}


def test_on_event_only_kinds_get_their_events_straight_from_kopfs_stream(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """kopf's real orchestration spawns its watchers through the start-up handler's replacement: pod events go from
    kopf's watch stream to ``pod_event`` in stream order, bookmarks skipped, without kopf's processor (per-object
    workers, causes); a failing handler is logged and the next event still arrives; SchedulerProfiles (change
    handlers and a daemon) keep kopf's watcher and processor. Fails when a kopf upgrade spawns watchers through
    another name or changes what its watch stream yields."""
    import types

    from kopf._cogs.aiokits import aiotoggles
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references
    from kopf._core.reactor import orchestration, queueing

    from tests.unit.app_harness import until

    monkeypatch.setattr(queueing, "watcher", queueing.watcher)  # restored after the test
    pods = references.Resource(group="", version="v1", plural="pods", namespaced=True)
    profiles = references.Resource(
        group=handlers.GROUP, version=handlers.VERSION, plural=handlers.PLURAL, namespaced=False
    )

    def event(kind: str, name: str) -> dict[str, Any]:
        return {"type": kind, "object": {"metadata": {"name": name, "uid": name, "resourceVersion": "1"}}}

    streams: dict[Any, list[Any]] = {
        pods: [
            watching.Bookmark.LISTED,
            event("ADDED", "a"),
            event("BOOKMARK", "-"),
            event("MODIFIED", "boom"),
            event("MODIFIED", "a"),
            event("DELETED", "a"),
        ],
        profiles: [watching.Bookmark.LISTED, event("ADDED", "sp")],
    }

    async def infinite_watch(*, resource: Any, **_: Any) -> AsyncIterator[Any]:
        for item in streams[resource]:
            yield item
        await asyncio.Event().wait()

    monkeypatch.setattr(watching, "infinite_watch", infinite_watch)

    class App:
        def __init__(self) -> None:
            self.pod_events: list[tuple[str, str]] = []

        def on_pod_event(self, kind: str, obj: dict[str, Any]) -> None:
            if obj["metadata"]["name"] == "boom":
                raise RuntimeError("boom")
            self.pod_events.append((kind, obj["metadata"]["name"]))

    app = App()
    processed: list[tuple[str, str]] = []

    async def processor(*, resource: Any, raw_event: Any, **_: Any) -> None:
        processed.append((resource.plural, raw_event["type"]))

    kopf_hooks.deliver_on_event_straight(
        kopf.get_default_registry(), types.SimpleNamespace(app=app), module=handlers.__name__, logger=handlers.logger
    )

    async def spawn_and_watch() -> None:
        paused = aiotoggles.ToggleSet(any)
        ensemble = orchestration.Ensemble(
            operator_indexed=aiotoggles.ToggleSet(all),
            operator_paused=paused,
            peering_missing=await paused.make_toggle(False, name="peering"),
        )
        await orchestration.spawn_missing_watchers(
            processor=processor,
            settings=kopf.OperatorSettings(),
            indexed_resources=set(),
            watched_resources=[pods, profiles],
            watched_namespaces=[None],
            ensemble=ensemble,
        )
        await until(lambda: len(app.pod_events) == 3 and bool(processed))
        for task in ensemble.watcher_tasks.values():
            task.cancel()
        await asyncio.gather(*ensemble.watcher_tasks.values(), return_exceptions=True)

    with caplog.at_level(logging.ERROR, logger=handlers.logger.name):
        asyncio.run(spawn_and_watch())
    assert app.pod_events == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert processed == [("schedulerprofiles", "ADDED")]  # and no pod event went through kopf's processor
    assert [r.exc_info[1].args for r in caplog.records if r.exc_info] == [("boom",)]


def test_only_unfiltered_on_event_handlers_of_handlers_py_skip_kopfs_machinery() -> None:
    """A kind with a change handler, a filter, or a handler from elsewhere stays with kopf's processing."""
    from kopf._cogs.structs import references

    registry = kopf.get_default_registry()
    pods = references.Resource(group="", version="v1", plural="pods", namespaced=True)
    nodes = references.Resource(group="", version="v1", plural="nodes", namespaced=False)
    profiles = references.Resource(
        group=handlers.GROUP, version=handlers.VERSION, plural=handlers.PLURAL, namespaced=False
    )
    module = handlers.__name__
    assert [h.fn for h in kopf_hooks.on_event_handlers_only(registry, pods, module=module)] == [
        handlers.WATCH_HANDLERS["Pod"]
    ]
    assert [h.fn for h in kopf_hooks.on_event_handlers_only(registry, nodes, module=module)] == [
        handlers.WATCH_HANDLERS["Node"]
    ]
    assert kopf_hooks.on_event_handlers_only(registry, profiles, module=module) == []

    other = kopf.OperatorRegistry()

    @kopf.on.event("", "v1", "pods", labels={"app": "x"}, registry=other)
    async def filtered(**_: Any) -> None: ...

    @kopf.on.event("", "v1", "nodes", registry=other)
    async def foreign(**_: Any) -> None: ...

    assert kopf_hooks.on_event_handlers_only(other, pods, module=module) == []
    assert kopf_hooks.on_event_handlers_only(other, nodes, module=module) == []
