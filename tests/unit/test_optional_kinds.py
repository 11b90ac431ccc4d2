"""The optional watched kinds (``watched.py``: Workload and PodGroup, scheduling.k8s.io/v1alpha2) and discovery.

The operator asks the API server once, before its first reconciling LIST, which optional kinds it serves
(``EventHandlers.discover``); the reconciling LIST, kopf's watches started from it and the warm standby's watches
leave out the kinds it does not serve, and the app keeps whether the workload API is served.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from kopf_scheduler.framework import APIError
from kopf_scheduler.watched import BY_KIND, WATCHED_KINDS, optional_by_api
from tests.unit.app_harness import FakeClient, new_app, pending, until
from tests.unit.factories import make_node
from tests.unit.test_standby import Toggle

WORKLOAD_API = "/apis/scheduling.k8s.io/v1alpha2"
#: scheduler-plugins' Coscheduling PodGroup CRD (served where installed; these tests never serve it).
COSCHEDULING_API = "/apis/scheduling.x-k8s.io/v1alpha1"
WORKLOADS, PODGROUPS = f"{WORKLOAD_API}/workloads", f"{WORKLOAD_API}/podgroups"
PODS, NODES = "/api/v1/pods", "/api/v1/nodes"


def _podgroup(name: str, version: str = "5") -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": version},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }


def _client(*, served: set[str] | None) -> FakeClient:
    client = FakeClient()
    client.lists[NODES] = [make_node("n1")]
    client.lists[PODS] = [pending("p", uid="uid-p")]
    client.lists[PODGROUPS] = [_podgroup("g")]
    client.lists[WORKLOADS] = [{"metadata": {"name": "w", "namespace": "default", "uid": "uid-w"}}]
    client.versions.update({NODES: "10", PODS: "11", PODGROUPS: "12", WORKLOADS: "13"})
    if served is not None:
        client.discovery[WORKLOAD_API] = served
    return client


def test_the_table_marks_the_workload_api_and_coscheduling_optional_and_nothing_else() -> None:
    optional = {watched.kind for watched in WATCHED_KINDS if watched.optional}
    assert optional == {"Workload", "PodGroup", "CoschedulingPodGroup"}
    assert optional_by_api() == {
        WORKLOAD_API: (BY_KIND["Workload"], BY_KIND["PodGroup"]),
        COSCHEDULING_API: (BY_KIND["CoschedulingPodGroup"],),
    }
    coscheduling = BY_KIND["CoschedulingPodGroup"]
    assert (coscheduling.path, coscheduling.api_kind) == (f"{COSCHEDULING_API}/podgroups", "PodGroup")
    assert coscheduling.event_resource == "podgroups.v1alpha1.scheduling.x-k8s.io"
    assert (BY_KIND["PodGroup"].path, BY_KIND["PodGroup"].namespaced) == (PODGROUPS, True)
    kinds = [watched.kind for watched in WATCHED_KINDS]
    assert kinds.index("Workload") < kinds.index("PodGroup") < kinds.index("Pod")  # what-if's feeding order


def test_served_the_workload_api_is_listed_into_cache_objects_and_flagged() -> None:
    client = _client(served={"workloads", "podgroups", "podgroups/status"})
    app = new_app(client)
    assert not app.workload_api_served  # nothing asked yet
    asyncio.run(app.ensure_reconciled())
    assert app.workload_api_served
    assert client.discovered == [WORKLOAD_API, COSCHEDULING_API]
    assert (client.list_counts[PODGROUPS], client.list_counts[WORKLOADS]) == (1, 1)
    assert app.cache.objects.get("PodGroup", "g", "default") == _podgroup("g")
    assert app.cache.objects.count("Workload") == 1
    assert app.unassigned.get("uid-p") is not None  # and the rest as ever


def test_not_served_the_workload_api_is_skipped_with_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    """404 on the discovery GET: no LIST of its kinds, the other kinds as ever, one INFO line naming the API."""
    client = _client(served=None)
    app = new_app(client)
    with caplog.at_level(logging.INFO, logger="kopf_scheduler"):
        asyncio.run(app.ensure_reconciled())
    assert not app.workload_api_served
    assert PODGROUPS not in client.list_counts
    assert WORKLOADS not in client.list_counts
    assert client.list_counts[PODS] == client.list_counts[NODES] == 1
    assert app.watch.reconciled
    assert app.unassigned.get("uid-p") is not None
    lines = [r for r in caplog.records if "scheduling.k8s.io/v1alpha2" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.INFO, "the API server does not serve scheduling.k8s.io/v1alpha2 workloads, podgroups: not watched")
    ]


def test_a_group_that_serves_only_one_of_them_lists_only_that_one() -> None:
    client = _client(served={"podgroups"})
    app = new_app(client)
    asyncio.run(app.ensure_reconciled())
    assert app.watch.served_optional == frozenset({"PodGroup"})
    assert not app.workload_api_served
    assert PODGROUPS in client.list_counts
    assert WORKLOADS not in client.list_counts


def test_a_failed_discovery_counts_as_not_served_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    class Refusing(FakeClient):
        async def api_resources(self, api_prefix: str) -> set[str] | None:
            self.discovered.append(api_prefix)
            raise APIError(503, "the server is currently unable to handle the request")

    client = Refusing()
    client.lists = _client(served=None).lists
    app = new_app(client)
    with caplog.at_level(logging.INFO, logger="kopf_scheduler"):
        asyncio.run(app.ensure_reconciled())
        asyncio.run(app.watch.discover())  # asked once for the process's life, failed or not
    assert client.discovered == [WORKLOAD_API, COSCHEDULING_API]
    assert app.watch.served_optional == frozenset()
    assert not app.workload_api_served
    assert PODGROUPS not in client.list_counts
    assert app.watch.reconciled
    [warning, coscheduling] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith("discovery of scheduling.k8s.io/v1alpha2 failed (")
    assert warning.getMessage().endswith("workloads, podgroups not watched")
    assert coscheduling.getMessage().startswith("discovery of scheduling.x-k8s.io/v1alpha1 failed (")


def test_discovery_is_asked_once_even_by_concurrent_callers_and_not_without_a_client() -> None:
    client = _client(served={"workloads", "podgroups"})
    app = new_app(client)
    app.client = None

    async def go() -> None:
        assert await app.watch.discover() == frozenset()  # before kopf's login: nothing asked, nothing kept
        app.client = client
        answers = await asyncio.gather(app.watch.discover(), app.ensure_reconciled(), app.watch.discover())
        assert answers[0] == answers[2] == {"Workload", "PodGroup"}

    asyncio.run(go())
    assert client.discovered == [WORKLOAD_API, COSCHEDULING_API]


def test_kopf_watches_a_served_kind_from_our_list_and_lists_an_unserved_one_itself() -> None:
    """``version_for_watch``: a served optional kind's watch starts at our LIST's version; for one discovery
    found unserved (kopf would not watch it, but if it did) kopf lists it itself."""
    served = new_app(_client(served={"workloads", "podgroups"}))
    assert asyncio.run(served.version_for_watch(PODGROUPS)) == "12"
    unserved = new_app(_client(served=None))
    assert asyncio.run(unserved.version_for_watch(PODGROUPS)) is None
    assert asyncio.run(unserved.version_for_watch(PODS)) == "11"


def test_a_watch_event_of_an_optional_kind_lands_in_cache_objects_whatever_discovery_said() -> None:
    app = new_app(_client(served=None))
    asyncio.run(app.ensure_reconciled())
    app.on_watch_event("PodGroup", "ADDED", _podgroup("late", "20"))
    assert app.cache.objects.get("PodGroup", "late", "default") is not None
    app.on_watch_event("PodGroup", "DELETED", _podgroup("late", "21"))
    assert app.cache.objects.count("PodGroup") == 0


@pytest.mark.parametrize(("served", "followed"), [({"workloads", "podgroups"}, True), (None, False)])
def test_the_warm_standby_follows_only_what_is_served(served: set[str] | None, followed: bool) -> None:
    client = _client(served=served)
    client.watch_events[PODGROUPS] = [{"type": "ADDED", "object": _podgroup("while-paused", "14")}]
    app = new_app(client)
    toggle = Toggle(on=True)

    async def pause() -> None:
        app.follow_pauses(toggle)
        await until(lambda: app.standby.following and len(client.watches) >= 2)
        await asyncio.sleep(0.05)
        await app.shutdown()

    asyncio.run(pause())
    assert ((PODGROUPS, "12") in client.watches) is followed
    assert (app.cache.objects.get("PodGroup", "while-paused", "default") is not None) is followed
    assert (PODS, "11") in client.watches
