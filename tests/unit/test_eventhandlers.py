"""Watch events and the reconciling LIST into the cache and the queues (eventhandlers.py), through SchedulerApp.

These pin which pods reach which queue, that cluster events move parked pods, that the reconciling LIST
purges what was deleted while paused without undoing what watches changed meanwhile, and that the cache
keeps slim objects and skips versions it already holds; for pods and nodes and for the storage objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.eventhandlers import EventHandlers
from kopf_scheduler.framework import (
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    PreFilterPlugin,
    PreFilterResult,
    Status,
)
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.settings import RunSettings
from kopf_scheduler.state.cache import ClusterCache, Snapshot
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import LabelSelector
from kopf_scheduler.unassigned_pods import UnassignedPods
from tests.unit.app_harness import FakeClient, FakeClock, drive, new_app, pending, until
from tests.unit.factories import make_node, make_pod


def test_pods_of_other_schedulers_are_left_alone() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("theirs", scheduler="default-scheduler"))
    drive(app)
    assert client.bindings == []
    assert client.events == []


def test_freeing_capacity_schedules_the_parked_pod() -> None:
    client = FakeClient()
    clock = FakeClock()
    app = new_app(client, clock)
    app.on_node_event(None, make_node("n1", cpu="2"))
    app.apply_profile(name="sp", spec={}, generation=1)
    blocker = make_pod("blocker", requests={"cpu": "2"}, node_name="n1")
    app.on_pod_event(None, blocker)
    app.on_pod_event("ADDED", pending("waiting", requests={"cpu": "1"}))
    drive(app)
    assert client.bindings == []
    app.on_pod_event("DELETED", blocker)
    queue = app.profiles["sp"].queue
    assert queue.pending_pods()["unschedulable"] == 0  # moved by the AssignedPod delete event
    clock.now += 60  # past any backoff
    queue.flush_backoff_completed()
    drive(app)
    assert client.bindings == [("default", "waiting", "n1")]


def test_bound_pod_event_confirms_assumption_and_leaves_queue() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("p", requests={"cpu": "1"})
    app.on_pod_event("ADDED", pod)
    drive(app)
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    app.on_pod_event("MODIFIED", bound)
    uid = pod["metadata"]["uid"]
    assert not app.cache.is_assumed(uid)
    assert app.cache.pod(uid) is not None
    assert uid not in app.unassigned
    assert app.cache.table.requested[:, 0].sum() == 1000


def test_bound_pod_event_keeps_the_parse_and_a_changed_pod_is_parsed_again(monkeypatch: Any) -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("p", requests={"cpu": "1"}, labels={"app": "web"})
    app.on_pod_event("ADDED", pod)
    drive(app)
    uid = pod["metadata"]["uid"]
    assumed = app.cache.pod(uid)
    assert assumed is not None
    assert app.cache.is_assumed(uid)
    parsed: list[str] = []
    real_from_obj = PodInfo.from_obj

    def counting_from_obj(obj: dict[str, Any]) -> PodInfo:
        parsed.append(obj["metadata"]["name"])
        return real_from_obj(obj)

    monkeypatch.setattr(PodInfo, "from_obj", staticmethod(counting_from_obj))
    slot = app.cache.node("n1").slot  # type: ignore[union-attr]
    version = int(app.cache.table.version[slot])
    # The Binding confirmed: a new version with nodeName and the PodScheduled condition, nothing else changed.
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = "n1"
    bound["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    bound["metadata"]["resourceVersion"] = "7"
    app.on_pod_event("MODIFIED", bound)
    confirmed = app.cache.pod(uid)
    assert parsed == []
    assert confirmed is not None
    assert confirmed is not assumed
    assert isinstance(confirmed.raw, bytes)  # kept compact (PodInfo.compact)
    assert confirmed.obj == bound
    assert (confirmed.node_name, confirmed.requests, confirmed.labels) == ("n1", assumed.requests, {"app": "web"})
    assert not app.cache.is_assumed(uid)
    assert app.cache.table.requested[:, 0].sum() == 1000
    # The pod never left its node: the node's row and version (what plugins remembered of it) are as assumed.
    assert app.cache.node("n1").pods[uid] is confirmed  # type: ignore[union-attr]
    assert app.cache.table.version[slot] == version
    # A label change (the API server's PodTopologyLabels admission adds the node's zone with the Binding) keeps
    # the parse and takes the new labels.
    relabelled = copy.deepcopy(bound)
    relabelled["metadata"]["labels"] = {"app": "db"}
    relabelled["metadata"]["resourceVersion"] = "8"
    app.on_pod_event("MODIFIED", relabelled)
    assert parsed == []
    assert app.cache.pod(uid).labels == {"app": "db"}  # type: ignore[union-attr]
    assert [
        pod.uid for pod in app.cache.matching_pods("default", LabelSelector.parse({"matchLabels": {"app": "db"}}))
    ] == [uid]
    assert app.cache.matching_pods("default", LabelSelector.parse({"matchLabels": {"app": "web"}})) == []
    assert app.cache.table.version[slot] == version
    # An in-place resize is parsed again (and accounted by its new requests).
    resized = copy.deepcopy(relabelled)
    resized["status"]["containerStatuses"] = [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]
    resized["metadata"]["resourceVersion"] = "9"
    app.on_pod_event("MODIFIED", resized)
    assert parsed == ["p"]
    assert app.cache.table.requested[:, 0].sum() == 2000


def test_reconcile_purges_objects_deleted_while_paused() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("kept"))
    app.on_node_event(None, make_node("gone"))
    ghost = make_pod("ghost", requests={"cpu": "1"}, node_name="kept")
    app.on_pod_event(None, ghost)
    client.lists["/api/v1/nodes"] = [make_node("kept")]
    asyncio.run(app.ensure_reconciled())
    assert sorted(app.cache.node_names()) == ["kept"]
    assert app.cache.pod(ghost["metadata"]["uid"]) is None
    assert app.cache.table.requested.sum() == 0


def test_reconcile_lists_pods_and_nodes_without_managed_fields_and_other_kinds_whole() -> None:
    client = FakeClient()
    asyncio.run(new_app(client).ensure_reconciled())
    slim = {path for path, slim_items in client.slim_lists.items() if slim_items}
    assert slim == {"/api/v1/nodes", "/api/v1/pods"}
    assert "/apis/storage.k8s.io/v1/storageclasses" in client.slim_lists  # listed, whole: it has other fields


def test_reconcile_keeps_what_watches_changed_while_the_list_was_in_flight() -> None:
    """A LIST is older than watch events that arrive while it is in flight: it must not undo them."""
    app = new_app()
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    created = pending("created-during-list")
    deleted = pending("deleted-during-list")
    app.on_pod_event("ADDED", deleted)

    class RacingClient(FakeClient):
        async def list_all(self, path: str) -> list[dict[str, Any]]:
            if path == "/api/v1/pods":
                # The LIST snapshot was taken before these two watch events were delivered.
                app.on_pod_event("ADDED", created)
                app.on_pod_event("DELETED", deleted)
                return [deleted]
            if path == "/api/v1/nodes":
                return [make_node("n1")]
            return []

    app.client = RacingClient()
    asyncio.run(app.ensure_reconciled())
    assert created["metadata"]["uid"] in app.unassigned
    assert created["metadata"]["uid"] in app.profiles["sp"].queue
    assert deleted["metadata"]["uid"] not in app.unassigned
    assert deleted["metadata"]["uid"] not in app.profiles["sp"].queue


def test_reconcile_applies_pages_as_they_arrive_and_purges_only_after_the_last() -> None:
    """Page 1 is in the cache before page 2 is fetched; a known pod listed on page 2 is not purged early;
    one deleted by a watch between the pages stays deleted."""
    app = new_app()
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    first, second, third = pending("first"), pending("second"), pending("third")
    app.on_pod_event("ADDED", second)
    seen_between: list[bool] = []

    class PagedClient(FakeClient):
        async def list_pages(self, path: str, **_: Any) -> AsyncIterator[list[dict[str, Any]]]:
            if path == "/api/v1/nodes":
                yield [make_node("n1")]
            elif path == "/api/v1/pods":
                yield [first]
                seen_between.append(first["metadata"]["uid"] in app.unassigned)
                seen_between.append(second["metadata"]["uid"] in app.unassigned)
                app.on_pod_event("DELETED", third)  # a watch deletion racing the second page
                yield [second, third]

    app.client = PagedClient()
    asyncio.run(app.ensure_reconciled())
    assert seen_between == [True, True]
    assert set(app.unassigned) == {first["metadata"]["uid"], second["metadata"]["uid"]}
    assert len(app.profiles["sp"].queue) == 2


def _racing_claims_client(pods: list[dict[str, Any]], during_claims_list: Any) -> FakeClient:
    """Lists one node, ``pods`` and the claim ``my-gpu``; ``during_claims_list()`` runs as the claims are listed."""
    from tests.unit.plugins.test_dynamic_resources import device_class, resource_claim, resource_slice

    class ClaimsClient(FakeClient):
        async def list_all(self, path: str) -> list[dict[str, Any]]:
            if path == "/api/v1/nodes":
                return [make_node("n1")]
            if path == "/api/v1/pods":
                return pods
            if path.endswith("/resourceclaims"):
                during_claims_list()
                return [resource_claim()]
            if path.endswith("/resourceslices"):
                return [resource_slice("n1", "a100")]
            if path.endswith("/deviceclasses"):
                return [device_class()]
            return []

    return ClaimsClient()


def test_pods_seen_before_the_reconcile_ends_wait_outside_the_queue_and_enter_it_ungated() -> None:
    """A pod delivered before its ResourceClaim is listed is not gated by DynamicResources' PreEnqueue (each
    claim listed later would put every gated pod to the hints): it waits, and is queued once the cache is whole."""
    from tests.unit.plugins.test_dynamic_resources import claiming

    app = new_app()
    app.apply_profile(name="sp", spec={}, generation=1)
    app.watch.hold_pods_until_reconciled()
    pod = claiming("with-claim")
    uid = pod["metadata"]["uid"]
    app.on_pod_event(None, pod)  # kopf's LIST, before ours
    where_during_list: list[str | None] = []
    app.client = _racing_claims_client([pod], lambda: where_during_list.append(app.profiles["sp"].queue.location(uid)))
    asyncio.run(app.ensure_reconciled())
    assert where_during_list == [None]
    assert app.profiles["sp"].queue.location(uid) == "active"
    drive(app)
    assert [name for _, name, _ in app.client.bindings] == ["with-claim"]  # type: ignore[union-attr]


def test_without_the_hold_a_pod_before_its_claim_is_gated_until_the_claim_comes() -> None:
    """What the hold avoids (and what tests that feed events without a reconcile still get): PreEnqueue gates."""
    from tests.unit.plugins.test_dynamic_resources import claiming

    app = new_app()
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = claiming("with-claim")
    app.on_pod_event(None, pod)
    assert app.profiles["sp"].queue.location(pod["metadata"]["uid"]) == "gated"


def test_held_pods_enter_in_their_latest_version_and_deleted_or_bound_ones_not_at_all() -> None:
    app = new_app()
    app.apply_profile(name="sp", spec={}, generation=1)
    app.watch.hold_pods_until_reconciled()
    updated, deleted, bound = pending("updated"), pending("deleted"), pending("bound")
    for pod in (updated, deleted, bound):
        app.on_pod_event(None, pod)
    newer = copy.deepcopy(updated)
    newer["metadata"]["resourceVersion"] = "2"
    newer["metadata"]["labels"] = {"app": "new"}
    app.on_pod_event("MODIFIED", newer)
    app.on_pod_event("DELETED", deleted)
    app.on_pod_event("MODIFIED", {**bound, "spec": {**bound["spec"], "nodeName": "n1"}})
    queue = app.profiles["sp"].queue
    assert len(queue) == 0
    app.client = FakeClient()
    app.client.lists["/api/v1/nodes"] = [make_node("n1")]
    app.client.lists["/api/v1/pods"] = [newer, {**bound, "spec": {**bound["spec"], "nodeName": "n1"}}]
    asyncio.run(app.ensure_reconciled())
    assert len(queue) == 1
    qpod = queue.pop_nowait()
    assert qpod is not None
    assert qpod.pod.labels == {"app": "new"}


def test_a_pause_holds_new_pods_until_the_next_reconcile() -> None:
    client = FakeClient()
    app = new_app(client)
    app.apply_profile(name="sp", spec={}, generation=1)
    asyncio.run(app.ensure_reconciled())
    early = pending("before-the-pause")
    app.on_pod_event("ADDED", early)
    assert early["metadata"]["uid"] in app.profiles["sp"].queue
    app.watch.invalidate()  # every loop paused
    late = pending("after-the-resume")
    app.on_pod_event("ADDED", late)
    assert late["metadata"]["uid"] not in app.profiles["sp"].queue
    client.lists["/api/v1/pods"] = [early, late]
    asyncio.run(app.ensure_reconciled())
    assert late["metadata"]["uid"] in app.profiles["sp"].queue


def test_reconcile_lists_every_kind_at_once_and_a_failed_list_fails_it() -> None:
    """Every kind's LIST is in flight at once; one failing LIST fails the reconcile (the loop retries it) and
    leaves the cache not reconciled."""
    in_flight: list[int] = []
    order: list[str] = []

    class SlowClient(FakeClient):
        fail = False
        running = 0

        async def list_all(self, path: str) -> list[dict[str, Any]]:
            order.append(path)
            SlowClient.running += 1
            in_flight.append(SlowClient.running)
            await asyncio.sleep(0.01)
            SlowClient.running -= 1
            if self.fail and path.endswith("/resourceslices"):
                raise RuntimeError("LIST failed")
            return []

    app = new_app(SlowClient())
    asyncio.run(app.ensure_reconciled())
    assert max(in_flight) == len(order)
    assert {"/api/v1/nodes", "/api/v1/pods", "/apis/resource.k8s.io/v1/resourceclaims"} <= set(order)
    failing = SlowClient()
    failing.fail = True
    app = new_app(failing)
    with pytest.raises(RuntimeError, match="LIST failed"):  # itself, not an exception group
        asyncio.run(app.ensure_reconciled())
    assert not app.watch._reconciled


def _versioned_client() -> FakeClient:
    client = FakeClient()
    client.lists["/api/v1/nodes"] = [make_node("n1")]
    client.versions.update({"/api/v1/nodes": "10", "/api/v1/pods": "11", "/api/v1/namespaces": "12"})
    return client


def test_kopf_watches_a_kind_from_our_list_at_start_and_from_our_re_list_after_a_410() -> None:
    """kopf's first watch of a reconciled path starts from our LIST (which its request triggers); a later
    request (kopf re-lists after 410 Gone) re-lists the kind here and kopf watches from that. Paths we do not
    list, paths listed with no version, a reconcile that cannot run and a failing LIST get None (kopf lists)."""
    client = _versioned_client()
    client.lists["/api/v1/pods"] = [pending("listed")]
    app = new_app(client)

    async def requests() -> list[str | None]:
        first = await app.watch.version_for_watch("/api/v1/pods")
        assert app.watch._reconciled
        assert len(app.unassigned) == 1  # our LIST is in the cache
        return [
            first,
            await app.watch.version_for_watch("/api/v1/nodes"),
            await app.watch.version_for_watch("/api/v1/pods"),  # a re-list: kopf's stream ran since ours
            await app.watch.version_for_watch("/apis/kopf-scheduler.io/v1alpha1/schedulerprofiles"),
            await app.watch.version_for_watch("/apis/apps/v1/replicasets"),  # listed, no resourceVersion
        ]

    assert asyncio.run(requests()) == ["11", "10", "11", None, None]
    logged_out = new_app()
    logged_out.client = None  # before kopf's login
    assert asyncio.run(logged_out.watch.version_for_watch("/api/v1/pods")) is None

    class FailingClient(FakeClient):
        async def list_all(self, path: str) -> list[dict[str, Any]]:
            raise RuntimeError("LIST failed")

    failing = new_app(FailingClient())
    assert asyncio.run(failing.watch.version_for_watch("/api/v1/pods")) is None
    assert not failing.watch._reconciled


def test_a_re_list_after_a_410_deletes_what_the_gone_watch_missed() -> None:
    """kopf re-lists after 410 Gone: a bound pod and a pending pod deleted while the watch was gone leave the
    cache (the node's room is free again), a pod created meanwhile is in it, and kopf watches from that LIST.
    kopf's own re-list would hand over the listed pods only (tests/e2e/test_operator_faults.py, the storm)."""
    client = _versioned_client()
    bound_gone = make_pod("bound-gone", node_name="n1", requests={"cpu": "1"})
    stays = make_pod("stays", node_name="n1", requests={"cpu": "1"})
    client.lists["/api/v1/pods"] = [bound_gone, stays, pending("pending-gone")]
    app = new_app(client)
    app.apply_profile(name="sp", spec={}, generation=1)
    pods = "/api/v1/pods"

    async def storm() -> list[str | None]:
        answers = [await app.watch.version_for_watch(pods)]
        assert {p.name for p in app.cache.pods()} == {"bound-gone", "stays"}
        client.lists[pods] = [stays, pending("arrived")]  # what the API server has after the gap
        client.versions[pods] = "52"
        answers.append(await app.watch.version_for_watch(pods))  # 410 Gone: kopf re-lists
        return answers

    assert asyncio.run(storm()) == ["11", "52"]
    assert {p.name for p in app.cache.pods()} == {"stays"}
    assert {p.name for p in app.unassigned.values()} == {"arrived"}


def test_a_re_list_for_kopf_that_keeps_failing_leaves_kopf_to_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our re-list is retried; when every attempt fails, kopf lists itself (None)."""
    monkeypatch.setattr("kopf_scheduler.eventhandlers.RELIST_BACKOFFS", (0.0, 0.0))
    client = _versioned_client()
    app = new_app(client)

    class Failing(FakeClient):
        attempts = 0

        async def list_all(self, path: str) -> list[dict[str, Any]]:
            Failing.attempts += 1
            raise RuntimeError("LIST failed")

    async def run() -> list[str | None]:
        first = await app.watch.version_for_watch("/api/v1/pods")
        failing = Failing()
        failing.versions.update(client.versions)
        app.client = failing
        return [first, await app.watch.version_for_watch("/api/v1/pods")]

    assert asyncio.run(run()) == ["11", None]
    assert Failing.attempts == 3


def test_after_a_pause_kopf_watches_from_our_latest_list_whichever_came_first() -> None:
    """kopf's streams stop at a pause (``invalidate``): its next request gets the version of our latest LIST,
    whether that LIST ran before the request (the warm standby's, or a loop's) or was started by it. A second
    request before the next pause (a re-list: kopf streamed since) gets the version of a fresh LIST of ours,
    and so does a path kopf listed itself because our LIST had failed, once a later LIST succeeds."""
    client = _versioned_client()
    app = new_app(client)
    app.apply_profile(name="sp", spec={}, generation=1)
    pods = "/api/v1/pods"

    async def pauses() -> list[str | None]:
        answers = [await app.watch.version_for_watch(pods)]  # start: the request triggers our LIST
        app.watch.invalidate()  # paused
        client.versions[pods] = "21"
        answers.append(await app.watch.version_for_watch(pods))  # the request first, our LIST follows
        app.watch.invalidate()
        client.versions[pods] = "31"
        await app.ensure_reconciled()  # our LIST first (the standby's, or a loop's)
        answers.append(await app.watch.version_for_watch(pods))
        client.versions[pods] = "41"
        answers.append(await app.watch.version_for_watch(pods))  # kopf re-lists after a 410: ours, afresh
        return answers

    assert asyncio.run(pauses()) == ["11", "21", "31", "41"]

    class FailingOnceClient(FakeClient):
        failures = 1

        async def list_all(self, path: str) -> list[dict[str, Any]]:
            if self.failures:
                self.failures -= 1
                raise RuntimeError("LIST failed")
            return []

    flaky = new_app(FailingOnceClient())
    flaky.client.versions[pods] = "11"  # type: ignore[union-attr]

    async def failed_then_listed() -> list[str | None]:
        answers = [await flaky.watch.version_for_watch(pods)]  # kopf lists and streams pods itself
        await flaky.ensure_reconciled()  # a loop's retry succeeds while kopf streams
        answers.append(await flaky.watch.version_for_watch(pods))
        return answers

    assert asyncio.run(failed_then_listed()) == [None, "11"]


def test_following_applies_watch_events_and_kopf_watches_from_where_they_stopped() -> None:
    """The warm standby's watches (``EventHandlers.follow``) start at each path's LIST version, apply events
    like kopf's, move the version with events and bookmarks, and kopf's watch at the resume starts there."""
    client = _versioned_client()
    node = make_node("n1")
    node["metadata"]["resourceVersion"] = "13"
    node["metadata"]["labels"] = {"zone": "b"}
    client.watch_events["/api/v1/nodes"] = [{"type": "MODIFIED", "object": node}]
    arrived = pending("arrived-while-paused")
    arrived["metadata"]["resourceVersion"] = "14"
    client.watch_events["/api/v1/pods"] = [
        {"type": "ADDED", "object": arrived},
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "19"}}},
    ]
    app = new_app(client)

    async def follow_then_resume() -> str | None:
        await app.ensure_reconciled()
        following = asyncio.ensure_future(app.watch.follow())
        await until(lambda: "arrived-while-paused" in {p.name for p in app.unassigned.values()})
        await until(lambda: app.watch._versions["/api/v1/pods"] == "19")
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        assert sorted(client.closed_watches) == sorted(path for path, _ in client.watches)  # connections released
        return await app.watch.version_for_watch("/api/v1/pods")

    assert asyncio.run(follow_then_resume()) == "19"
    assert ("/api/v1/nodes", "10") in client.watches
    assert ("/api/v1/pods", "11") in client.watches
    assert app.cache.node("n1").obj["metadata"]["labels"] == {"zone": "b"}  # type: ignore[union-attr]
    assert "/api/v1/replicasets" not in {path for path, _ in client.watches}  # listed with no version


def test_managed_fields_are_not_kept() -> None:
    app = new_app()
    node = make_node("n1")
    node["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    pod = make_pod("bound", node_name="n1")
    pod["metadata"]["managedFields"] = [{"manager": "kube-scheduler"}]
    app.on_node_event(None, node)
    app.on_pod_event(None, pod)
    assert "managedFields" not in app.cache.node("n1").obj["metadata"]
    assert "managedFields" not in app.cache.pod(pod["metadata"]["uid"]).obj["metadata"]
    assert "managedFields" in pod["metadata"]  # the watch's own object is left as it was


def test_cached_objects_drop_managed_fields_without_touching_the_event() -> None:
    pod = pending("p", node_name="n1")
    pod["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    app = new_app()
    app.on_node_event(None, make_node("n1"))
    app.on_pod_event(None, pod)
    cached = app.cache.pod(pod["metadata"]["uid"])
    assert cached is not None
    assert "managedFields" not in cached.obj["metadata"]
    assert pod["metadata"]["managedFields"] == [{"manager": "kubectl"}]


def test_a_version_the_cache_holds_is_not_applied_again() -> None:
    """kopf's initial LIST repeats what the reconciling LIST applied: skipped before any parsing (the queue
    would keep an unchanged pod parked anyway); a new version of it is an update as usual."""
    app = new_app()
    app.on_node_event(None, make_node("n1", cpu="1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    big = pending("big", requests={"cpu": "3"})
    big["metadata"]["resourceVersion"] = "10"
    app.on_pod_event(None, big)
    drive(app)
    queue = app.profiles["sp"].queue
    assert queue.pending_pods()["unschedulable"] == 1
    parsed = app.unassigned[big["metadata"]["uid"]]
    app.on_pod_event(None, copy.deepcopy(big))
    assert app.unassigned[big["metadata"]["uid"]] is parsed  # not even parsed again
    assert queue.pending_pods()["unschedulable"] == 1
    smaller = copy.deepcopy(big)
    smaller["metadata"]["resourceVersion"] = "11"
    smaller["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    app.on_pod_event("MODIFIED", smaller)
    assert queue.pending_pods()["unschedulable"] == 0


def test_handlers_on_their_own_tell_reporting_when_a_pod_is_bound_or_gone() -> None:
    """EventHandlers needs only the cache, the profiles, the pending pods and a forget hook (no app, no client)."""
    cache, unassigned = ClusterCache(), UnassignedPods()
    forgotten: list[tuple[str, str]] = []
    handlers = EventHandlers(
        cache=cache, profiles={}, unassigned=unassigned, client=lambda: None, forget_pod=lambda *a: forgotten.append(a)
    )
    handlers.on_node_event(None, make_node("n1"))
    pod = pending("p", scheduler="no-such-profile")
    del pod["metadata"]["namespace"]  # keyed by PodInfo.key's rule: "default"
    uid = pod["metadata"]["uid"]
    handlers.on_pod_event("ADDED", pod)
    assert uid in unassigned  # remembered for a profile that may come later
    assert forgotten == []
    handlers.on_pod_event("MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": "n1"}})
    assert uid not in unassigned
    assert cache.pod(uid) is not None
    handlers.on_pod_event("DELETED", {**pod, "spec": {**pod["spec"], "nodeName": "n1"}})
    assert cache.pod(uid) is None
    assert forgotten == [(uid, "default/p"), (uid, "default/p")]


# -- storage objects (cache.objects, what the volume plugins read) -------------------------------------------
def _storage_obj(kind: str, name: str, namespace: str = "", rv: str = "1", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{kind}-{namespace}-{name}", "resourceVersion": rv}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, "spec": dict(spec)}


class NeedsPV(PreFilterPlugin):
    """Refuses every pod until some PersistentVolume exists; registered for PV Add only."""

    name: ClassVar[str] = "NeedsPV"

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if snapshot.cache.objects.count("PersistentVolume"):
            return None, SUCCESS
        return None, Status.unschedulable("no PV yet", plugin=self.name, unresolvable=True)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD))]


def test_storage_events_keep_slim_objects_by_kind_and_key() -> None:
    app = new_app()
    pv = _storage_obj("PersistentVolume", "pv1", capacity={"storage": "1Gi"})
    pv["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    claim = _storage_obj("PersistentVolumeClaim", "data", "ns1")
    capacity = _storage_obj("CSIStorageCapacity", "cap", "kube-system")
    app.on_watch_event("PersistentVolume", "ADDED", pv)
    app.on_watch_event("PersistentVolumeClaim", "ADDED", claim)
    app.on_watch_event("CSIStorageCapacity", None, capacity)
    storage = app.cache.objects
    assert storage.pv("pv1") is not None
    assert "managedFields" not in storage.pv("pv1")["metadata"]
    assert "managedFields" in pv["metadata"]  # the watch's own object is left as it was
    assert storage.pvc("ns1", "data") == claim
    assert storage.pvc("other", "data") is None
    assert storage.keys("CSIStorageCapacity") == {("kube-system", "cap")}
    app.on_watch_event("PersistentVolumeClaim", "DELETED", claim)
    assert storage.pvc("ns1", "data") is None


def test_an_older_storage_version_does_not_replace_a_newer_one() -> None:
    app = new_app()
    app.on_watch_event("StorageClass", "MODIFIED", _storage_obj("StorageClass", "fast", rv="7", mode="new"))
    app.on_watch_event("StorageClass", None, _storage_obj("StorageClass", "fast", rv="5", mode="old"))
    assert app.cache.objects.storage_class("fast")["spec"] == {"mode": "new"}


def test_a_storage_event_moves_pods_whose_rejecting_plugin_registered_for_it() -> None:
    client = FakeClient()
    clock = FakeClock()
    app = SchedulerApp(
        settings=RunSettings(),
        client=client,
        registry=default_registry().merged(Registry([NeedsPV])),
        rng=random.Random(1),
        hostname="test",
        clock=clock,
    )
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={"plugins": {"multiPoint": {"enabled": [{"name": "NeedsPV"}]}}}, generation=1)
    app.on_pod_event("ADDED", pending("waiting"))
    drive(app)
    queue = app.profiles["sp"].queue
    assert queue.pending_pods()["unschedulable"] == 1
    app.on_watch_event("StorageClass", "ADDED", _storage_obj("StorageClass", "fast"))
    assert queue.pending_pods()["unschedulable"] == 1  # NeedsPV did not register StorageClass events
    app.on_watch_event("PersistentVolume", "ADDED", _storage_obj("PersistentVolume", "pv1"))
    assert queue.pending_pods()["unschedulable"] == 0
    clock.now += 60
    queue.flush_backoff_completed()
    drive(app)
    assert client.bindings == [("default", "waiting", "n1")]


def test_reconcile_lists_the_storage_kinds_and_purges_what_is_gone() -> None:
    client = FakeClient()
    app = new_app(client)
    for name in ("kept", "gone"):
        app.on_watch_event("PersistentVolume", "ADDED", _storage_obj("PersistentVolume", name))
    app.on_watch_event("CSINode", "ADDED", _storage_obj("CSINode", "n1"))
    client.lists["/api/v1/persistentvolumes"] = [_storage_obj("PersistentVolume", "kept")]
    client.lists["/api/v1/persistentvolumeclaims"] = [
        _storage_obj("PersistentVolumeClaim", "a", "ns1"),
        _storage_obj("PersistentVolumeClaim", "b", "ns2"),
    ]
    client.lists["/apis/storage.k8s.io/v1/storageclasses"] = [_storage_obj("StorageClass", "fast")]
    client.lists["/apis/storage.k8s.io/v1/csidrivers"] = [_storage_obj("CSIDriver", "csi.example.com")]
    capacity = _storage_obj("CSIStorageCapacity", "c", "kube-system")
    client.lists["/apis/storage.k8s.io/v1/csistoragecapacities"] = [capacity]
    asyncio.run(app.ensure_reconciled())
    storage = app.cache.objects
    assert storage.keys("PersistentVolume") == {("", "kept")}
    assert storage.keys("PersistentVolumeClaim") == {("ns1", "a"), ("ns2", "b")}
    assert storage.keys("StorageClass") == {("", "fast")}
    assert storage.keys("CSINode") == set()  # deleted while paused
    assert storage.keys("CSIDriver") == {("", "csi.example.com")}
    assert storage.keys("CSIStorageCapacity") == {("kube-system", "c")}


def test_reconcile_lists_namespaced_storage_only_where_kopf_watches() -> None:
    """With --namespace, kopf watches PVCs and CSIStorageCapacities in those namespaces only: so does the LIST."""
    listed: list[str] = []

    class RecordingClient(FakeClient):
        async def list_all(self, path: str) -> list[dict[str, Any]]:
            listed.append(path)
            return []

    app = SchedulerApp(settings=RunSettings(namespaces=["a", "b"]), client=RecordingClient(), hostname="test")
    asyncio.run(app.ensure_reconciled())
    assert "/api/v1/persistentvolumes" in listed
    assert "/apis/storage.k8s.io/v1/storageclasses" in listed
    assert [p for p in listed if p.endswith(("persistentvolumeclaims", "csistoragecapacities"))] == [
        "/api/v1/namespaces/a/persistentvolumeclaims",
        "/api/v1/namespaces/b/persistentvolumeclaims",
        "/apis/storage.k8s.io/v1/namespaces/a/csistoragecapacities",
        "/apis/storage.k8s.io/v1/namespaces/b/csistoragecapacities",
    ]


def test_reconcile_keeps_storage_objects_watched_while_the_list_was_in_flight() -> None:
    app = new_app()
    fresh = _storage_obj("PersistentVolume", "fresh")

    class RacingClient(FakeClient):
        async def list_all(self, path: str) -> list[dict[str, Any]]:
            if path == "/api/v1/persistentvolumes":
                app.on_watch_event("PersistentVolume", "ADDED", fresh)  # newer than the LIST's snapshot
            return []

    app.client = RacingClient()
    asyncio.run(app.ensure_reconciled())
    assert app.cache.objects.pv("fresh") is not None


# -- the nominator follows the watched pods (upstream's queue Add/Update/Delete) ------------------------------
def _with_nomination(obj: dict[str, Any], node: str | None, rv: str) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = rv
    if node is None:
        new["status"].pop("nominatedNodeName", None)
    else:
        new["status"]["nominatedNodeName"] = node
    return new


def test_watched_nominations_feed_the_nominator_until_the_pod_is_bound_or_deleted() -> None:
    app = new_app()
    app.apply_profile(name="sp", spec={}, generation=1)
    a = _with_nomination(pending("a"), "n1", "1")
    b = _with_nomination(pending("b"), "n1", "1")
    app.on_pod_event("ADDED", a)
    app.on_pod_event("ADDED", b)
    app.on_pod_event("ADDED", _with_nomination(pending("theirs", scheduler="default-scheduler"), "n1", "1"))
    nominator = app.nominator
    assert [p.name for p in nominator.nominated_pods_for_node("n1")] == ["a", "b"]  # not the other scheduler's
    app.on_pod_event("MODIFIED", _with_nomination(a, "n2", "2"))
    assert nominator.nominated_node(a["metadata"]["uid"]) == "n2"
    app.on_pod_event("MODIFIED", _with_nomination(a, None, "3"))  # our clearing patch, watched
    assert nominator.nominated_node(a["metadata"]["uid"]) is None
    bound = _with_nomination(b, "n1", "2")
    bound["spec"]["nodeName"] = "n1"
    app.on_pod_event("MODIFIED", bound)
    assert nominator.count == 0
    c = _with_nomination(pending("c"), "n3", "1")
    app.on_pod_event("ADDED", c)
    app.on_pod_event("DELETED", c)
    assert nominator.count == 0


def test_a_gated_pod_is_not_nominated_and_a_profile_created_later_nominates_its_pods() -> None:
    app = new_app()
    gated = _with_nomination(pending("gated"), "n1", "1")
    gated["spec"]["schedulingGates"] = [{"name": "wait"}]
    early = _with_nomination(pending("early"), "n1", "1")
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", gated)
    assert app.nominator.count == 0
    app.on_pod_event("ADDED", _with_nomination(pending("later", scheduler="sp2"), "n2", "1"))
    app.on_pod_event("ADDED", early)
    app.apply_profile(name="sp2", spec={}, generation=1)
    assert {p.name for n in ("n1", "n2") for p in app.nominator.nominated_pods_for_node(n)} == {"early", "later"}


def test_a_deleted_profiles_pods_hold_no_nominated_place_until_it_comes_back() -> None:
    app = new_app()
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", _with_nomination(pending("a"), "n1", "1"))
    app.remove_profile("sp")
    assert app.nominator.count == 0
    app.apply_profile(name="sp", spec={}, generation=2)
    assert app.nominator.nominated_node(next(iter(app.unassigned))) == "n1"


def test_pods_listed_before_their_node_are_placed_once_it_is_listed() -> None:
    """The pods' LIST may answer before the nodes': their requests count on the node as soon as it comes."""

    class PodsFirstClient(FakeClient):
        async def list_all(self, path: str) -> list[dict[str, Any]]:
            if path == "/api/v1/nodes":
                await asyncio.sleep(0.01)
                return [make_node("n1", cpu="4")]
            if path == "/api/v1/pods":
                return [make_pod("running", requests={"cpu": "3"}, node_name="n1")]
            return []

    app = new_app(PodsFirstClient())
    asyncio.run(app.ensure_reconciled())
    info = app.cache.node("n1")
    assert info is not None
    assert [pod.name for pod in info.pods.values()] == ["running"]
    assert app.cache.table.requested.sum() > 0


def test_kept_pods_are_compact_until_read_and_read_back_equal() -> None:
    """Pending and bound pods are kept as compact JSON once the handlers are done with an event; reading
    ``obj`` gives an equal object (and keeps it); what a later event compares against is the kept version."""
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    waiting = pending("waiting", requests={"cpu": "100"}, labels={"app": "ünïcode"})
    app.on_pod_event("ADDED", waiting)
    kept = app.unassigned[waiting["metadata"]["uid"]]
    assert isinstance(kept.raw, bytes)
    assert len(kept.raw) < 1000
    assert kept.obj == waiting
    assert isinstance(kept.raw, dict)  # decoded once, then kept as read
    running = make_pod("running", requests={"cpu": "1"}, node_name="n1")
    app.on_pod_event(None, running)
    on_node = app.cache.pod(running["metadata"]["uid"])
    assert on_node is not None
    assert isinstance(on_node.raw, bytes)
    assert on_node.obj == running
    app.on_pod_event("DELETED", running)
    assert app.cache.pod(running["metadata"]["uid"]) is None


def test_an_object_json_cannot_hold_stays_a_dict() -> None:
    odd = make_pod("odd")
    odd["metadata"]["annotations"] = {"not-json": {1, 2}}
    pod = PodInfo.from_obj(odd)
    pod.compact()
    assert pod.obj is odd


def test_a_repeated_version_and_the_release_of_held_pods_leave_them_compact() -> None:
    """kopf's LIST repeats what ours applied, and held pods enter the queue and the nominator after the
    reconcile: neither may decode the kept objects (50000 pods decoded again were 300 MiB)."""
    client = FakeClient()
    app = new_app(client)
    app.apply_profile(name="sp", spec={}, generation=1)
    app.watch.hold_pods_until_reconciled()
    nominated = pending("nominated")
    nominated["status"]["nominatedNodeName"] = "n1"
    plain = pending("plain")
    for pod in (nominated, plain):
        pod["metadata"]["resourceVersion"] = "5"
    client.lists["/api/v1/nodes"] = [make_node("n1")]
    client.lists["/api/v1/pods"] = [nominated, plain]
    asyncio.run(app.ensure_reconciled())
    for pod in (nominated, plain):
        app.on_pod_event(None, copy.deepcopy(pod))  # kopf's LIST of the same versions
    kept = [app.unassigned[pod["metadata"]["uid"]] for pod in (nominated, plain)]
    assert [type(pod.raw) for pod in kept] == [bytes, bytes]
    assert [app.profiles["sp"].queue.location(pod.uid) for pod in kept] == ["active", "active"]
    assert [pod.uid for pod in app.nominator.nominated_pods_for_node("n1")] == [kept[0].uid]


def test_a_version_from_before_a_pause_is_never_handed_to_kopf() -> None:
    """A LIST after the pause that reports no resourceVersion for a path: kopf lists that path itself rather
    than watch from the version of the LIST before the pause (events it would replay or miss)."""
    client = _versioned_client()
    app = new_app(client)

    async def pause() -> list[str | None]:
        await app.ensure_reconciled()
        app.watch.invalidate()
        del client.versions["/api/v1/pods"]
        await app.ensure_reconciled()
        return [
            await app.watch.version_for_watch("/api/v1/pods"),
            await app.watch.version_for_watch("/api/v1/nodes"),
        ]

    assert asyncio.run(pause()) == [None, "10"]
