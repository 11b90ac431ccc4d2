"""The warm standby (``standby.py``): a paused replica's cache follows the cluster, and hands over at the resume."""

from __future__ import annotations

import asyncio
from typing import Any

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.settings import RunSettings
from tests.unit.app_harness import FakeClient, new_app, pending, until
from tests.unit.factories import make_node

PODS, NODES = "/api/v1/pods", "/api/v1/nodes"


class Toggle:
    """kopf's ``operator_paused`` as the standby sees it."""

    def __init__(self, on: bool) -> None:
        self._on = on
        self._changed = asyncio.Event()

    def is_on(self) -> bool:
        return self._on

    async def wait_for(self, state: bool, /) -> None:
        while self._on != state:
            await self._changed.wait()

    def turn_to(self, state: bool) -> None:
        self._on = state
        self._changed.set()
        self._changed = asyncio.Event()


def _client() -> FakeClient:
    client = FakeClient()
    client.lists[NODES] = [make_node("n1")]
    client.lists[PODS] = [pending("listed")]
    client.versions.update({NODES: "10", PODS: "11"})
    return client


def _pending_at(name: str, version: str) -> dict[str, Any]:
    pod = pending(name)
    pod["metadata"]["resourceVersion"] = version
    return pod


def _names(app: SchedulerApp) -> set[str]:
    return {pod.name for pod in app.unassigned.values()}


def test_a_paused_replica_lists_then_follows_and_kopf_resumes_where_it_stopped() -> None:
    """Paused: the cache is listed and then follows watch events, with no profile loop running. Resumed: the
    standby stops, and kopf's watch of pods starts at the version our stream reached, with no LIST of its own."""
    client = _client()
    client.watch_events[PODS] = [{"type": "ADDED", "object": _pending_at("created-while-paused", "15")}]
    app = new_app(client)
    toggle = Toggle(on=True)

    async def pause_then_resume() -> str | None:
        app.follow_pauses(toggle)
        await until(lambda: "created-while-paused" in _names(app))
        assert app.standby.following
        assert app.watch.reconciled
        toggle.turn_to(False)
        version = await app.version_for_watch(PODS)  # what kopf's watcher asks at the resume
        assert not app.standby.following
        await app.shutdown()
        return version

    assert asyncio.run(pause_then_resume()) == "15"
    assert _names(app) == {"listed", "created-while-paused"}
    assert (PODS, "11") in client.watches
    assert client.list_counts[PODS] == 1


def test_every_pause_lists_again_and_a_410_lists_again() -> None:
    """A pause invalidates the cache (kopf's watches missed what happened meanwhile): the standby lists again.
    A watch whose version is compacted (an ERROR event, 410 Gone) lists again too, then follows the new LIST."""
    client = _client()
    app = new_app(client)
    app.standby._retry_seconds = 0.01
    toggle = Toggle(on=True)

    async def pauses() -> None:
        app.follow_pauses(toggle)
        app.follow_pauses(toggle)  # every kopf watcher hands the toggles over: one standby
        await until(lambda: (PODS, "11") in client.watches)
        toggle.turn_to(False)
        await app.version_for_watch(PODS)
        client.versions[PODS] = "21"
        client.lists[PODS] = [pending("listed-at-the-second-pause")]
        client.watch_events[PODS] = [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]
        toggle.turn_to(True)
        await until(lambda: client.watches.count((PODS, "21")) == 2)
        await app.shutdown()

    asyncio.run(pauses())
    assert _names(app) == {"listed-at-the-second-pause"}  # the pod gone meanwhile is purged
    # The first pause's LIST and watch; the second pause's LIST and watch, which expired: LIST, watch again.
    assert client.list_counts[PODS] == 3
    assert [version for path, version in client.watches if path == PODS] == ["11", "21", "21"]


def test_the_standby_retries_a_failed_list_and_a_broken_watch() -> None:
    """The API server away: the LIST is retried; a watch that breaks is started again from where it was."""

    class FlakyClient(FakeClient):
        list_failures = 1
        watch_failures = 1

        async def list_all(self, path: str) -> list[dict[str, Any]]:
            if self.list_failures:
                self.list_failures -= 1
                raise RuntimeError("connection refused")
            return await super().list_all(path)

        async def watch(self, path: str, *, resource_version: str) -> Any:
            if path == PODS and self.watch_failures:
                self.watch_failures -= 1
                self.watches.append((path, resource_version))
                raise OSError("connection reset")
            async for event in super().watch(path, resource_version=resource_version):
                yield event

    client = FlakyClient()
    client.lists[PODS] = [pending("listed")]
    client.versions[PODS] = "11"
    app = new_app(client)
    app.standby._retry_seconds = 0.01

    async def run() -> None:
        app.follow_pauses(Toggle(on=True))
        await until(lambda: client.watches.count((PODS, "11")) == 2)
        await app.shutdown()

    asyncio.run(run())
    assert client.watches.count((PODS, "11")) == 2
    assert _names(app) == {"listed"}


def test_a_replica_never_paused_never_follows() -> None:
    """Standalone (kopf never pauses it): nothing is listed or watched by the standby."""
    client = _client()
    app = new_app(client)

    async def run() -> None:
        app.follow_pauses(Toggle(on=False))
        await asyncio.sleep(0.05)
        assert not app.standby.following
        await app.shutdown()

    asyncio.run(run())
    assert client.watches == []
    assert client.list_counts == {}


def test_delay_cache_until_active_lists_only_at_the_resume() -> None:
    """kube-scheduler's delayCacheUntilActive: true: while paused nothing is listed or watched, the pause still
    invalidates the cache, and the resume lists it (kopf then watches from that LIST)."""
    client = _client()
    app = SchedulerApp(settings=RunSettings(delay_cache_until_active=True), client=client)
    toggle = Toggle(on=True)

    async def run() -> str | None:
        await app.ensure_reconciled()  # what the cache held while active
        app.follow_pauses(toggle)
        await until(lambda: not app.watch.reconciled)
        await asyncio.sleep(0.05)
        assert not app.standby.following
        assert client.list_counts[PODS] == 1
        assert client.watches == []
        client.versions[PODS] = "21"
        toggle.turn_to(False)
        version = await app.version_for_watch(PODS)
        await app.shutdown()
        return version

    assert asyncio.run(run()) == "21"
    assert client.list_counts[PODS] == 2
    assert client.watches == []
