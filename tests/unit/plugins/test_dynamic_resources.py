"""DynamicResources (plugins/dynamic_resources/plugin.py): PreEnqueue, PreFilter's checks, Filter with the
structured allocator, Score for prioritized lists, Reserve/Unreserve (in-flight allocations), PreBind through
the fake client, PostFilter's deallocation, and the whole cycle through the app harness: a pod with a claim is
bound to the node whose ResourceSlice has a matching device, its claim allocated and reserved for it."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework import (
    COSTLY_FILTER,
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
)
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.live_profiles import pipeline_status
from kopf_scheduler.plugins.dynamic_resources import DynamicResources, uses_resource_claims
from kopf_scheduler.plugins.dynamic_resources.tracker import ClaimTracker, tracker_for
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.objects import DEVICE_CLASS, RESOURCE_CLAIM, RESOURCE_SLICE
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.app_harness import FakeClient, drive, new_app, pending
from tests.unit.factories import FakeHandle, make_node, make_pod, pod_info

DRIVER = "gpu.example.com"
CLAIMS = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "my-gpu"}]}
CLAIM = {"metadata": {"name": "my-gpu", "namespace": "default", "uid": "claim-uid"}, "spec": {}}
DISABLED = {"plugins": {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}}
NO_CLAIMS = "no new claims to deallocate"
BIG = {"name": "big", "deviceClassName": "big"}
#: 256 other consumers: upstream's ResourceClaimReservedForMaxSize.
CROWD = [{"resource": "pods", "name": f"o{i}", "uid": f"o{i}"} for i in range(256)]


def device_class(name: str = "gpu") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def resource_slice(node: str, *models: str, driver: str = DRIVER) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"model": {"string": m}}} for i, m in enumerate(models)]
    return {
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def resource_claim(name: str = "my-gpu", *, model: str = "", count: int = 1, **status: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": count}
    if model:
        exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{model}"'}}]
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        "status": dict(status),
    }


def claiming(name: str, claim: str = "my-gpu", **kwargs: Any) -> dict[str, Any]:
    return pending(name, spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]}, **kwargs)


def _with_claims(*claims: dict[str, Any]) -> DynamicResources:
    cache = ClusterCache()
    for claim in claims:
        cache.objects.apply(RESOURCE_CLAIM, "ADDED", claim)
    return DynamicResources(handle=FakeHandle(cache))


def _template_pod(status: list[dict[str, Any]] | None = None, uid: str = "pod-uid") -> PodInfo:
    pod = make_pod("p", spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]}, uid=uid)
    if status is not None:
        pod["status"] = {**pod.get("status", {}), "resourceClaimStatuses": status}
    return pod_info(pod)


def _owned(uid: str = "pod-uid") -> dict[str, Any]:
    meta = {"name": "p-gpu-x", "namespace": "default", "uid": "c2"}
    return {"metadata": {**meta, "ownerReferences": [{"uid": uid, "controller": True, "kind": "Pod", "name": "p"}]}}


def test_a_compact_pod_is_decoded_for_its_claims_only_when_it_names_them() -> None:
    plain, claiming = pod_info(make_pod("plain")), pod_info(make_pod("p", spec=CLAIMS))
    plain.compact()
    claiming.compact()
    assert (uses_resource_claims(plain), uses_resource_claims(claiming)) == (False, True)
    assert isinstance(plain.raw, bytes)
    assert _with_claims(CLAIM).pre_enqueue(claiming).is_success


def test_pre_enqueue_waits_for_a_named_claim() -> None:
    pod = pod_info(make_pod("p", spec=CLAIMS))
    status = _with_claims().pre_enqueue(pod)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == ('resourceclaim.resource.k8s.io "my-gpu" not found',)
    assert _with_claims(CLAIM).pre_enqueue(pod).is_success


def test_pre_enqueue_refuses_a_claim_being_deleted() -> None:
    deleting = {**CLAIM, "metadata": {**CLAIM["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    status = _with_claims(deleting).pre_enqueue(pod_info(make_pod("p", spec=CLAIMS)))
    assert status.reasons == ('resourceclaim "my-gpu" is being deleted',)


def test_pre_enqueue_resolves_template_claims_through_the_pod_status() -> None:
    plugin = _with_claims(_owned())
    assert plugin.pre_enqueue(_template_pod()).reasons == ('pod "default/p": ResourceClaim not created yet',)
    assert plugin.pre_enqueue(_template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x"}])).is_success
    assert plugin.pre_enqueue(_template_pod([{"name": "gpu"}])).is_success  # no claim generated: valid
    stranger = _template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x"}], uid="other")
    assert plugin.pre_enqueue(stranger).reasons == (
        "ResourceClaim default/p-gpu-x was not created for Pod default/p (Pod is not owner)",
    )


def test_pre_enqueue_ignores_pods_without_claims() -> None:
    assert _with_claims().pre_enqueue(pod_info(make_pod("p"))).is_success


def test_a_new_claim_of_the_pod_requeues_it_another_does_not() -> None:
    pod = pod_info(make_pod("p", spec=CLAIMS))
    plugin = _with_claims(CLAIM)
    assert plugin.is_schedulable_after_claim_change(pod, None, CLAIM) is QUEUE
    other = {"metadata": {"name": "x", "namespace": "default", "uid": "x"}}
    assert plugin.is_schedulable_after_claim_change(pod, None, other) is QUEUE_SKIP
    assert _with_claims().is_schedulable_after_claim_change(pod, None, CLAIM) is QUEUE_SKIP  # still missing


def test_the_pods_generated_claim_requeues_it() -> None:
    plugin = _with_claims(_owned())
    waiting = _template_pod()
    updated = _template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x"}])
    assert plugin.is_schedulable_after_pod_change(waiting, waiting, updated) is QUEUE
    assert plugin.is_schedulable_after_pod_change(waiting, waiting, waiting) is QUEUE_SKIP
    assert plugin.is_schedulable_after_pod_change(pod_info(make_pod("q", uid="q")), None, updated) is QUEUE_SKIP


NODE_ACTIONS = ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE


def test_events_are_upstreams() -> None:
    events = [hint.event for hint in DynamicResources(handle=FakeHandle()).events_to_register()]
    assert events == [
        ClusterEvent(
            EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE
        ),
        ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE),
        ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
        ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
        ClusterEvent(EventResource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE),
    ]


def test_a_deallocated_claim_requeues_any_waiting_pod_a_status_change_of_its_own_claim_too() -> None:
    pod = pod_info(make_pod("p", spec=CLAIMS))
    plugin = _with_claims(CLAIM)
    allocated = {**CLAIM, "status": {"allocation": {"devices": {"results": []}}}}
    foreign = {"metadata": {"name": "x", "namespace": "default", "uid": "x"}, "status": {"allocation": {}}}
    foreign_allocated = {**foreign, "status": {"allocation": {"devices": {}}}}
    assert plugin.is_schedulable_after_claim_change(pod, foreign_allocated, {**foreign, "status": {}}) is QUEUE
    assert plugin.is_schedulable_after_claim_change(pod, CLAIM, allocated) is QUEUE
    assert plugin.is_schedulable_after_claim_change(pod, CLAIM, dict(CLAIM)) is QUEUE_SKIP


# -- the profile ---------------------------------------------------------------------------------------------
def test_the_default_profile_runs_upstreams_plugin_and_omits_nothing() -> None:
    resolved = resolve_profile("sp", SchedulerProfileSpec(), default_registry())
    assert resolved.omitted_defaults == ()
    for point in (ExtensionPoint.PRE_FILTER, ExtensionPoint.FILTER, ExtensionPoint.POST_FILTER, ExtensionPoint.RESERVE):
        assert "DynamicResources" in [p.name for p in resolved.enabled(point)], point
    assert [p.name for p in resolved.enabled(ExtensionPoint.POST_FILTER)] == ["DynamicResources", "DefaultPreemption"]
    assert ("DynamicResources", 2) in [(p.name, p.weight) for p in resolved.enabled(ExtensionPoint.SCORE)]
    status = pipeline_status(resolved)
    assert status["omittedDefaultPlugins"] == []


# -- PreFilter's checks --------------------------------------------------------------------------------------
def _cache(*objects: tuple[str, dict[str, Any]]) -> ClusterCache:
    cache = ClusterCache()
    for kind, obj in objects:
        cache.objects.apply(kind, "ADDED", obj)
    return cache


def _pre_filter(cache: ClusterCache, pod: dict[str, Any]) -> tuple[Any, CycleState]:
    plugin = DynamicResources(handle=FakeHandle(cache))
    state = CycleState()
    _, status = plugin.pre_filter(state, pod_info(pod), cache.snapshot())
    return status, state


@pytest.mark.parametrize("spec", [pytest.param({}, id="no-field"), pytest.param({"resourceClaims": []}, id="empty")])
def test_a_pod_without_claims_is_skipped_and_post_filter_has_nothing_to_deallocate(spec: dict[str, Any]) -> None:
    cache = ClusterCache()
    plugin = DynamicResources(handle=FakeHandle(cache))
    state = CycleState()
    pod = pod_info(make_pod(spec=spec))
    _, status = plugin.pre_filter(state, pod, cache.snapshot())
    assert status.code is Code.SKIP
    _, post = plugin.post_filter(state, pod, {})
    assert (post.code, post.reasons) == (Code.UNSCHEDULABLE, (NO_CLAIMS,))


def test_post_filter_without_pre_filter_state_is_upstreams_not_found_error() -> None:
    _, status = DynamicResources(handle=FakeHandle()).post_filter(CycleState(), pod_info(make_pod()), {})
    assert (status.code, status.reasons) == (Code.ERROR, ("not found",))


@pytest.mark.parametrize(
    ("claim", "objects", "code", "reason"),
    [
        pytest.param(
            resource_claim(),
            [],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "request gpu: device class gpu does not exist",
            id="no-class",
        ),
        pytest.param(
            {**resource_claim(), "spec": {"devices": {"requests": [{"name": "gpu"}]}}},
            [(DEVICE_CLASS, device_class())],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "resource claim default/my-gpu, request gpu: unknown request type",
            id="unknown-request",
        ),
        pytest.param(
            {**resource_claim(), "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {}}]}}},
            [(DEVICE_CLASS, device_class())],
            Code.ERROR,
            "request gpu: unsupported request type",
            id="no-class-name",
        ),
        pytest.param(
            {
                **resource_claim(),
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "firstAvailable": [{"name": "big", "deviceClassName": "big"}]}]
                    }
                },
            },
            [(DEVICE_CLASS, device_class())],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "request gpu/big: device class big does not exist",
            id="subrequest-class",
        ),
        pytest.param(
            resource_claim(
                allocation={"devices": {"results": []}},
                reservedFor=[{"resource": "pods", "name": f"o{i}", "uid": f"o{i}"} for i in range(256)],
            ),
            [],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "resourceclaim in use",
            id="in-use",
        ),
    ],
)
def test_pre_filter_refuses_with_upstreams_texts(
    claim: dict[str, Any], objects: list[tuple[str, dict[str, Any]]], code: Code, reason: str
) -> None:
    cache = _cache((RESOURCE_CLAIM, claim), *objects)
    status, _ = _pre_filter(cache, make_pod("p", spec=CLAIMS))
    assert (status.code, status.reasons) == (code, (reason,))


def test_a_claim_another_pod_is_allocating_waits() -> None:
    cache = _cache((RESOURCE_CLAIM, resource_claim()), (DEVICE_CLASS, device_class()))
    tracker_for(cache).signal_pending_allocation("uid-my-gpu", resource_claim(allocation={"devices": {"results": []}}))
    status, _ = _pre_filter(cache, make_pod("p", spec=CLAIMS))
    assert status.reasons == ("resource claim default/my-gpu is in the process of being allocated",)


# -- the whole cycle (app harness: framework, queue, binding cycle, fake API client) -------------------------
def _app(*objects: tuple[str, dict[str, Any]], nodes: tuple[str, ...] = ("n1", "n2")) -> tuple[Any, FakeClient]:
    client = FakeClient()
    app = new_app(client)
    for node in nodes:
        app.on_node_event(None, make_node(node))
    for kind, obj in objects:
        app.on_watch_event(kind, "ADDED", obj)
        if kind == RESOURCE_CLAIM:
            client.claims[obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj
    app.apply_profile(name="sp", spec={}, generation=1)
    return app, client


def _status_writes(client: FakeClient) -> list[dict[str, Any]]:
    return [body for verb, _, _, body in client.claim_writes if verb == "update"]


def test_a_pod_is_bound_where_its_claim_finds_a_device_and_the_claim_is_allocated_and_reserved() -> None:
    app, client = _app(
        (DEVICE_CLASS, device_class()),
        (RESOURCE_SLICE, resource_slice("n1", "t4")),
        (RESOURCE_SLICE, resource_slice("n2", "a100")),
        (RESOURCE_CLAIM, resource_claim(model="a100")),
    )
    app.on_pod_event("ADDED", claiming("gpu-pod"))
    drive(app)
    assert client.bindings == [("default", "gpu-pod", "n2")]
    [written] = _status_writes(client)
    [result] = written["status"]["allocation"]["devices"]["results"]
    assert (result["request"], result["driver"], result["pool"], result["device"]) == ("gpu", DRIVER, "n2", "gpu-0")
    assert [ref["name"] for ref in written["status"]["reservedFor"]] == ["gpu-pod"]
    verbs = [verb for verb, *_ in client.claim_writes]
    assert verbs == ["update-claim", "update"]  # the finalizer first, then allocation and reservation together
    assert tracker_for(app.cache).in_flight_count() == 0


def test_a_second_pod_cannot_get_the_taken_device_and_says_so() -> None:
    app, client = _app(
        (DEVICE_CLASS, device_class()),
        (RESOURCE_SLICE, resource_slice("n1", "a100")),
        (RESOURCE_CLAIM, resource_claim("first", model="a100")),
        (RESOURCE_CLAIM, resource_claim("second", model="a100")),
        nodes=("n1",),
    )
    app.on_pod_event("ADDED", claiming("p1", "first"))
    app.on_pod_event("ADDED", claiming("p2", "second"))
    drive(app)
    assert client.bindings == [("default", "p1", "n1")]
    [event] = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert event["note"] == (
        "0/1 nodes are available: 1 cannot allocate all claims. still not schedulable, "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_the_in_flight_allocation_is_counted_before_the_watch_delivers_it() -> None:
    """Between Reserve and the watch event, a second pod's PreFilter counts the first claim's device."""
    app, client = _app(
        (DEVICE_CLASS, device_class()),
        (RESOURCE_SLICE, resource_slice("n1", "a100", "a100")),
        (RESOURCE_CLAIM, resource_claim("first", model="a100")),
        (RESOURCE_CLAIM, resource_claim("second", model="a100")),
        nodes=("n1",),
    )
    app.on_pod_event("ADDED", claiming("p1", "first"))
    app.on_pod_event("ADDED", claiming("p2", "second"))
    drive(app)
    devices = sorted(w["status"]["allocation"]["devices"]["results"][0]["device"] for w in _status_writes(client))
    assert devices == ["gpu-0", "gpu-1"]
    assert sorted(name for _, name, _ in client.bindings) == ["p1", "p2"]


def test_a_failed_pre_bind_unreserves_and_leaves_no_claim_in_flight() -> None:
    from kopf_scheduler.framework import APIError

    app, client = _app(
        (DEVICE_CLASS, device_class()),
        (RESOURCE_SLICE, resource_slice("n1", "a100")),
        (RESOURCE_CLAIM, resource_claim(model="a100")),
        nodes=("n1",),
    )
    client.claim_errors = [APIError(403, "forbidden")]
    app.on_pod_event("ADDED", claiming("gpu-pod"))
    drive(app)
    assert client.bindings == []
    assert tracker_for(app.cache).in_flight_count() == 0
    [event] = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert "add finalizer to claim default/my-gpu: forbidden" in event["note"]


def test_an_allocated_claim_binds_the_pod_to_the_allocations_node() -> None:
    node_selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]
    }
    allocation = {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]},
        "nodeSelector": node_selector,
    }
    app, client = _app((DEVICE_CLASS, device_class()), (RESOURCE_CLAIM, resource_claim(allocation=allocation)))
    app.on_pod_event("ADDED", claiming("gpu-pod"))
    drive(app)
    assert client.bindings == [("default", "gpu-pod", "n2")]
    [written] = _status_writes(client)
    assert written["status"]["allocation"]["devices"] == allocation["devices"]
    assert [verb for verb, *_ in client.claim_writes] == ["update"]  # only the reservation


def test_a_profile_that_disables_it_binds_a_pod_with_claims_without_devices() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec=DISABLED, generation=1)
    app.on_pod_event("ADDED", claiming("claims"))
    drive(app)
    assert client.bindings == [("default", "claims", "n1")]
    assert client.claim_writes == []


def test_a_pod_waits_for_its_claim_then_is_retried_when_the_claim_appears() -> None:
    app, client = _app((DEVICE_CLASS, device_class()), (RESOURCE_SLICE, resource_slice("n1", "a100")), nodes=("n1",))
    app.on_pod_event("ADDED", claiming("gpu-pod"))
    drive(app)
    assert client.events == []  # parked at PreEnqueue: no attempt, no event
    claim = resource_claim(model="a100")
    client.claims["default", "my-gpu"] = claim
    app.on_watch_event(RESOURCE_CLAIM, "ADDED", claim)
    drive(app)
    assert client.bindings == [("default", "gpu-pod", "n1")]


def test_only_a_pod_with_claims_to_allocate_marks_its_filter_costly() -> None:
    """The node search then judges no node past need (algorithm.py); allocated claims and claim-less pods
    keep the ordinary window."""
    slices = (DEVICE_CLASS, device_class()), (RESOURCE_SLICE, resource_slice("n1", "a100"))
    status, state = _pre_filter(_cache(*slices, (RESOURCE_CLAIM, resource_claim())), make_pod("p", spec=CLAIMS))
    assert status.is_success
    assert state.get(COSTLY_FILTER) is True
    allocated = resource_claim(allocation={"devices": {"results": []}})
    status, state = _pre_filter(_cache(*slices, (RESOURCE_CLAIM, allocated)), make_pod("p", spec=CLAIMS))
    assert status.is_success
    assert state.get(COSTLY_FILTER) is None
    status, state = _pre_filter(_cache(*slices), make_pod("p"))
    assert status.code is Code.SKIP
    assert state.get(COSTLY_FILTER) is None


def test_the_kept_allocated_state_follows_claims_in_flight_and_assumed() -> None:
    """PreFilter gathers the devices in use once while no claim changes (upstream GatherAllocatedState)."""
    taken = resource_claim(
        "taken", allocation={"devices": {"results": [{"driver": DRIVER, "pool": "n1", "device": "a"}]}}
    )
    cache = _cache((RESOURCE_CLAIM, taken))
    plugin = DynamicResources(handle=FakeHandle(cache))
    tracker = tracker_for(cache)
    first = plugin._allocated_state(tracker, cache.objects)
    assert first.devices == {(DRIVER, "n1", "a")}
    assert plugin._allocated_state(tracker, cache.objects) is first
    flying = resource_claim(
        "flying", allocation={"devices": {"results": [{"driver": DRIVER, "pool": "n1", "device": "b"}]}}
    )
    tracker.signal_pending_allocation("uid-flying", flying)
    assert plugin._allocated_state(tracker, cache.objects).devices == {(DRIVER, "n1", "a"), (DRIVER, "n1", "b")}
    assert tracker.remove_pending_allocation("uid-flying")
    assert plugin._allocated_state(tracker, cache.objects).devices == {(DRIVER, "n1", "a")}
    freed = resource_claim("taken")
    freed["metadata"]["resourceVersion"] = "2"
    assert tracker.assume_after_api_call(freed)
    assert plugin._allocated_state(tracker, cache.objects).devices == set()
    tracker.restore("default", "taken")
    assert plugin._allocated_state(tracker, cache.objects).devices == {(DRIVER, "n1", "a")}
    cache.objects.apply(RESOURCE_CLAIM, "MODIFIED", freed)
    assert plugin._allocated_state(tracker, cache.objects).devices == set()


def test_the_kept_slice_index_follows_resource_slice_changes() -> None:
    """Pools and candidates are kept between pods; a replaced or added slice is seen by the next pod."""
    app, client = _app(
        (DEVICE_CLASS, device_class()),
        (RESOURCE_SLICE, resource_slice("n1", "a100")),
        (RESOURCE_CLAIM, resource_claim("first", model="a100")),
        (RESOURCE_CLAIM, resource_claim("second", model="a100")),
        (RESOURCE_CLAIM, resource_claim("third", model="a100")),
    )
    app.on_pod_event("ADDED", claiming("p1", "first"))
    drive(app)
    app.on_pod_event("ADDED", claiming("p2", "second"))
    drive(app)
    assert client.bindings == [("default", "p1", "n1")]  # n1's only a100 is taken, n2 has no slice
    app.on_watch_event(RESOURCE_SLICE, "ADDED", resource_slice("n2", "t4", "a100"))
    drive(app)
    assert client.bindings[1:] == [("default", "p2", "n2")]
    replaced = resource_slice("n2", "a100", "t4")
    replaced["spec"]["pool"]["generation"] = 2
    app.on_watch_event(RESOURCE_SLICE, "MODIFIED", replaced)
    app.on_pod_event("ADDED", claiming("p3", "third"))
    drive(app)
    # gpu-1 of n2 is allocated to p2, but the new generation's gpu-0 is the a100 now (and free by name).
    assert client.bindings[2:] == [("default", "p3", "n2")]
    devices = [w["status"]["allocation"]["devices"]["results"][0]["device"] for w in _status_writes(client)]
    assert devices == ["gpu-0", "gpu-1", "gpu-0"]


def test_pods_without_claims_are_not_slowed_by_the_allocator() -> None:
    """A claim-less pod never builds an allocator, evaluates no selector and never touches the tracker."""
    cache = _cache((DEVICE_CLASS, device_class()), (RESOURCE_SLICE, resource_slice("n1", "a100")))
    plugin = DynamicResources(handle=FakeHandle(cache))
    state = CycleState()
    _, status = plugin.pre_filter(state, pod_info(make_pod()), cache.snapshot())
    assert status.code is Code.SKIP
    assert state.read("DynamicResources").allocator is None
    assert not cache.has_shared(ClaimTracker)
    assert asyncio.run(plugin.pre_bind(state, pod_info(make_pod()), "n1")).is_success


def test_prioritized_list_scores_are_normalised_as_upstreams_score_extensions_say() -> None:
    # Upstream's ScoreExtensions returns the plugin, so the framework runs its NormalizeScore: raw scores 8 (first
    # subrequest allocated) and 7 (second) become 100 and 87 before the weight. Found by the conformance run on
    # seed 908604 (the in-process model's DynamicResources scores were 16 and 14 where upstream's were 200, 174).
    assert DynamicResources.has_normalize
    plugin = _with_claims()
    scores = plugin.normalize_score(CycleState(), pod_info(make_pod("p")), np.array([0, 1]), np.array([8, 7]))
    assert scores.tolist() == [100, 87]
