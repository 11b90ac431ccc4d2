"""DRA-backed extended resources (DRAExtendedResource; plugins/dynamic_resources/extended.py and the plugin's
use of it, upstream ``extendeddynamicresources.go``): the claim's requests and container mappings, the per-node
variant and its refusals, and the whole cycle through the app harness: the claim created, allocated, reserved
and recorded in the pod's status; deleted again when the pod cannot keep it."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.framework import APIError, Code, CycleState
from kopf_scheduler.plugins.dynamic_resources import DynamicResources
from kopf_scheduler.plugins.dynamic_resources.extended import (
    EXTENDED_CLAIM_ANNOTATION,
    SPECIAL_CLAIM_NAME,
    ExtendedRequests,
    find_extended_claim,
    in_memory_claim,
    node_claim,
    requests_and_mappings,
)
from kopf_scheduler.plugins.dynamic_resources.tracker import tracker_for
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.objects import DEVICE_CLASS, RESOURCE_CLAIM, RESOURCE_SLICE
from tests.unit.app_harness import FakeClient, drive, new_app, pending
from tests.unit.factories import FakeHandle, make_node, make_pod, pod_info
from tests.unit.plugins.test_dynamic_resources import DRIVER, device_class, resource_slice

GPU = "example.com/gpu"
IMPLICIT = "deviceclass.resource.kubernetes.io/gpu"


def gpu_class(name: str = "gpu", extended: str = GPU) -> dict[str, Any]:
    cls = device_class(name)
    cls["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    if extended:
        cls["spec"]["extendedResourceName"] = extended
    return cls


def objects_with(*classes: dict[str, Any]) -> Any:
    cache = ClusterCache()
    for cls in classes:
        cache.objects.apply(DEVICE_CLASS, "ADDED", cls)
    return cache.objects


def container(name: str, requests: dict[str, str], *, sidecar: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "img", "resources": {"requests": requests}}
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


def pod_with(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **kwargs: Any) -> dict[str, Any]:
    pod = make_pod("p", uid="pod-uid", **kwargs)
    pod["spec"]["containers"] = list(containers)
    if init:
        pod["spec"]["initContainers"] = list(init)
    return pod


def exact(name: str, count: int, cls: str = "gpu") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}}


def mapping(container_name: str, request: str, resource: str = GPU) -> dict[str, str]:
    return {"containerName": container_name, "resourceName": resource, "requestName": request}


# -- requests and mappings (upstream createRequestsAndMappings) ----------------------------------------------
REQUEST_CASES = [
    pytest.param(
        pod_with(container("c", {GPU: "2", "cpu": "1"})),
        {GPU: 2},
        [exact("container-0-request-1", 2)],  # "cpu" < "example.com/gpu": the GPU is the second name
        [mapping("c", "container-0-request-1")],
        id="one-container",
    ),
    pytest.param(
        pod_with(container("a", {GPU: "1"}), container("b", {GPU: "3"})),
        {GPU: 4},
        [exact("container-0-request-0", 1), exact("container-1-request-0", 3)],
        [mapping("a", "container-0-request-0"), mapping("b", "container-1-request-0")],
        id="two-containers",
    ),
    pytest.param(
        pod_with(container("main", {GPU: "2"}), init=(container("setup", {GPU: "1"}),)),
        {GPU: 2},
        [exact("container-1-request-0", 2)],
        [mapping("main", "container-1-request-0"), mapping("setup", "container-1-request-0")],
        id="init-reuses-the-main-containers-devices",
    ),
    pytest.param(
        pod_with(container("main", {GPU: "1"}), init=(container("setup", {GPU: "3"}),)),
        {GPU: 3},
        [exact("container-0-request-0", 2), exact("container-1-request-0", 1)],
        [
            mapping("main", "container-1-request-0"),
            mapping("setup", "container-1-request-0"),
            mapping("setup", "container-0-request-0"),
        ],
        id="init-needs-more-than-it-can-reuse",
    ),
    pytest.param(
        pod_with(
            container("main", {"cpu": "1"}),
            init=(container("i0", {GPU: "1"}), container("i1", {GPU: "2"})),
        ),
        {GPU: 2},
        [exact("container-1-request-0", 2)],
        [mapping("i0", "container-1-request-0"), mapping("i1", "container-1-request-0")],
        id="the-largest-init-request-serves-all-init-containers",
    ),
    pytest.param(
        pod_with(container("main", {GPU: "1"}), init=(container("side", {GPU: "1"}, sidecar=True),)),
        {GPU: 2},
        [exact("container-0-request-0", 1), exact("container-1-request-0", 1)],
        [mapping("side", "container-0-request-0"), mapping("main", "container-1-request-0")],
        id="a-sidecar-is-long-lived",
    ),
    pytest.param(
        pod_with(container("c", {GPU: "1", IMPLICIT: "1"})),
        {GPU: 1, IMPLICIT: 1},
        [exact("container-0-request-0", 1, cls="gpu"), exact("container-0-request-1", 1, cls="gpu")],
        [mapping("c", "container-0-request-0", IMPLICIT), mapping("c", "container-0-request-1")],
        id="two-names-of-one-class",
    ),
    pytest.param(pod_with(container("c", {GPU: "1"})), {}, [], [], id="nothing-to-allocate"),
]


@pytest.mark.parametrize(("pod", "resources", "requests", "mappings"), REQUEST_CASES)
def test_requests_and_mappings_are_upstreams(
    pod: dict[str, Any], resources: dict[str, int], requests: list[Any], mappings: list[Any]
) -> None:
    found_requests, found_mappings = requests_and_mappings(pod_info(pod), resources, objects_with(gpu_class()))
    assert found_requests == requests
    assert found_mappings == mappings


# -- the node's variant of the claim (upstream filterExtendedResources) --------------------------------------
def _node_claim(
    claim: dict[str, Any],
    allocatable: dict[str, int],
    *,
    user_claims: bool = False,
    scalar: dict[str, int] | None = None,
) -> tuple[Any, Any, Any]:
    pod = pod_info(pod_with(container("c", {GPU: "1"})))
    extended = ExtendedRequests(scalar if scalar is not None else {GPU: 1}, "uid")
    return node_claim(claim, extended, pod, allocatable, objects_with(gpu_class()), has_user_claims=user_claims)


def test_the_node_variant_requests_what_the_node_does_not_advertise() -> None:
    claim = in_memory_claim(pod_info(pod_with(container("c", {GPU: "1"}))))
    variant, mappings, reason = _node_claim(claim, {"cpu": 4000})
    assert reason is None
    assert variant["spec"] == {"devices": {"requests": [exact("container-0-request-0", 1)]}}
    assert variant["metadata"] == claim["metadata"]
    assert mappings == [mapping("c", "container-0-request-0")]


@pytest.mark.parametrize(
    ("claim", "allocatable", "scalar", "user_claims", "expected"),
    [
        pytest.param(None, {GPU: 2}, None, False, (None, [], None), id="device-plugin-node"),
        pytest.param(None, {GPU: 0}, None, False, "variant", id="zero-allocatable-is-dra"),
        pytest.param(None, {}, {GPU: 1, "other.com/x": 1}, False, (None, [], "cannot fit resource"), id="unbacked"),
        pytest.param(None, {"other.com/x": 1}, {GPU: 1, "other.com/x": 1}, False, "variant", id="unbacked-advertised"),
        pytest.param(
            {"spec": {"devices": {"requests": [exact("container-0-request-0", 1)]}}},
            {},
            None,
            False,
            (None, [], "cannot schedule extended resource claim"),
            id="stale-claim-with-requests",
        ),
        pytest.param(
            {"status": {"allocation": {"devices": {"results": []}}}}, {}, None, False, (None, [], None), id="allocated"
        ),
        pytest.param(None, {GPU: 2}, None, True, ({}, [], None), id="user-claims-device-plugin-node"),
    ],
)
def test_node_variant_cases(
    claim: dict[str, Any] | None,
    allocatable: dict[str, int],
    scalar: dict[str, int] | None,
    user_claims: bool,
    expected: Any,
) -> None:
    base = in_memory_claim(pod_info(pod_with(container("c", {GPU: "1"}))))
    variant, mappings, reason = _node_claim(
        {**base, **(claim or {})}, allocatable, user_claims=user_claims, scalar=scalar
    )
    if expected == "variant":
        assert reason is None
        assert variant["spec"]["devices"]["requests"] == [exact("container-0-request-0", 1)]
    elif expected[0] is not None:
        assert (variant["spec"], mappings, reason) == expected
    else:
        assert (variant, mappings, reason) == expected


def test_find_extended_claim_needs_the_annotation_and_the_pod_as_controller() -> None:
    pod = pod_info(pod_with(container("c", {GPU: "1"})))
    owner = {"name": "p", "uid": "pod-uid", "controller": True}
    annotated = {
        "metadata": {"name": "x", "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"}, "ownerReferences": [owner]}
    }
    not_annotated = {"metadata": {"name": "y", "ownerReferences": [owner]}}
    not_controller = {
        "metadata": {
            "name": "z",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [{**owner, "controller": False}],
        }
    }
    assert find_extended_claim(pod, [not_annotated, not_controller, annotated]) is annotated
    assert find_extended_claim(pod, [not_annotated, not_controller]) is None


def test_the_in_memory_claim_is_upstreams() -> None:
    claim = in_memory_claim(pod_info(pod_with(container("c", {GPU: "1"}), namespace="ns")))
    meta = claim["metadata"]
    assert (meta["name"], meta["namespace"], meta["generateName"]) == (
        SPECIAL_CLAIM_NAME,
        "ns",
        "p-extended-resources-",
    )
    assert meta["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-uid", "controller": True}
    ]
    assert meta["uid"]
    assert claim["spec"] == {}


# -- PreFilter ------------------------------------------------------------------------------------------------
def _pre_filter(pod: dict[str, Any], *objects: tuple[str, dict[str, Any]]) -> tuple[Any, CycleState]:
    cache = ClusterCache()
    for kind, obj in objects:
        cache.objects.apply(kind, "ADDED", obj)
    plugin = DynamicResources(handle=FakeHandle(cache))
    state = CycleState()
    _, status = plugin.pre_filter(state, pod_info(pod), cache.snapshot())
    return status, state


@pytest.mark.parametrize(
    ("requests", "classes", "extended"),
    [
        ({GPU: "1"}, [], False),
        ({GPU: "1"}, [gpu_class()], True),
        ({IMPLICIT: "1"}, [gpu_class(extended="")], True),
        ({"other.com/x": "1"}, [gpu_class()], False),
        ({"cpu": "1"}, [gpu_class()], False),
    ],
    ids=["no-class", "explicit", "implicit", "unmapped", "no-extended-resources"],
)
def test_pre_filter_gives_a_pod_with_backed_resources_a_claim(
    requests: dict[str, str], classes: list[dict[str, Any]], extended: bool
) -> None:
    status, state = _pre_filter(make_pod("p", requests=requests), *((DEVICE_CLASS, cls) for cls in classes))
    data = state.read("DynamicResources")
    assert status.code is (Code.SUCCESS if extended else Code.SKIP)
    assert (data.extended is not None) is extended
    if extended:
        assert [entry.claim["metadata"]["name"] for entry in data.entries] == [SPECIAL_CLAIM_NAME]
        assert data.allocator is not None


# -- the whole cycle ------------------------------------------------------------------------------------------
def _app(*objects: tuple[str, dict[str, Any]], nodes: tuple[Any, ...] = ("n1", "n2")) -> tuple[Any, FakeClient]:
    client = FakeClient()
    app = new_app(client)
    client.on_claim_created = lambda claim: app.on_watch_event(RESOURCE_CLAIM, "ADDED", claim)
    for node in nodes:
        app.on_node_event(None, make_node(node) if isinstance(node, str) else node)
    for kind, obj in objects:
        app.on_watch_event(kind, "ADDED", obj)
        if kind == RESOURCE_CLAIM:
            client.claims[obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj
    app.apply_profile(name="sp", spec={}, generation=1)
    return app, client


def gpu_pod(name: str, count: str = "1", resource: str = GPU) -> dict[str, Any]:
    pod = pending(name, requests={"cpu": "100m", resource: count})
    pod["spec"]["containers"][0]["name"] = "main"
    return pod


def _creates(app: Any) -> dict[str, float]:
    metric = app.metrics.resource_claim_creates
    return {status: metric.labels(status=status)._value.get() for status in ("success", "failure")}


def test_a_pod_gets_devices_for_its_extended_resource_through_a_claim_of_its_own() -> None:
    app, client = _app((DEVICE_CLASS, gpu_class()), (RESOURCE_SLICE, resource_slice("n2", "a100", "a100")))
    app.on_pod_event("ADDED", gpu_pod("gpu-pod", "2"))
    drive(app)
    assert client.bindings == [("default", "gpu-pod", "n2")]
    verbs = [verb for verb, *_ in client.claim_writes]
    assert verbs == ["create", "update-claim", "update"]
    _, namespace, _, created = client.claim_writes[0]
    assert namespace == "default"
    assert created["metadata"]["generateName"] == "gpu-pod-extended-resources-"
    assert "name" not in created["metadata"]
    assert "uid" not in created["metadata"]
    assert created["metadata"]["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    [owner] = created["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Pod", "gpu-pod", True)
    assert created["spec"] == {"devices": {"requests": [exact("container-0-request-1", 2)]}}
    _, _, name, written = client.claim_writes[2]
    assert name.startswith("gpu-pod-extended-resources-")
    results = written["status"]["allocation"]["devices"]["results"]
    assert sorted((r["request"], r["driver"], r["pool"], r["device"]) for r in results) == [
        ("container-0-request-1", DRIVER, "n2", "gpu-0"),
        ("container-0-request-1", DRIVER, "n2", "gpu-1"),
    ]
    assert [ref["name"] for ref in written["status"]["reservedFor"]] == ["gpu-pod"]
    [(pod_name, patch)] = [(n, p) for n, p in client.status_patches if "extendedResourceClaimStatus" in p["status"]]
    assert pod_name == "gpu-pod"
    assert patch["status"]["extendedResourceClaimStatus"] == {
        "requestMappings": [mapping("main", "container-0-request-1")],
        "resourceClaimName": name,
    }
    assert _creates(app) == {"success": 1.0, "failure": 0.0}
    assert tracker_for(app.cache).in_flight_count() == 0


def test_a_second_pod_finds_the_devices_taken_and_stays_pending_with_upstreams_text() -> None:
    app, client = _app((DEVICE_CLASS, gpu_class()), (RESOURCE_SLICE, resource_slice("n1", "a100")), nodes=("n1",))
    app.on_pod_event("ADDED", gpu_pod("first"))
    app.on_pod_event("ADDED", gpu_pod("second"))
    drive(app)
    assert client.bindings == [("default", "first", "n1")]
    [event] = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert event["note"] == (
        "0/1 nodes are available: 1 cannot allocate all claims. still not schedulable, "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_a_node_whose_device_plugin_advertises_the_resource_needs_no_claim() -> None:
    plugin_node = make_node("n1", extra={GPU: 4})
    app, client = _app((DEVICE_CLASS, gpu_class()), nodes=(plugin_node,))
    app.on_pod_event("ADDED", gpu_pod("plugin-pod"))
    drive(app)
    assert client.bindings == [("default", "plugin-pod", "n1")]
    assert client.claim_writes == []
    assert _creates(app) == {"success": 0.0, "failure": 0.0}


def test_a_failed_allocation_write_deletes_the_created_claim() -> None:
    app, client = _app((DEVICE_CLASS, gpu_class()), (RESOURCE_SLICE, resource_slice("n1", "a100")), nodes=("n1",))
    original = client.update_resource_claim_status

    async def forbidden(**_: Any) -> dict[str, Any]:
        raise APIError(403, "forbidden")

    client.update_resource_claim_status = forbidden  # type: ignore[method-assign]
    app.on_pod_event("ADDED", gpu_pod("gpu-pod"))
    drive(app)
    client.update_resource_claim_status = original  # type: ignore[method-assign]
    assert client.bindings == []
    verbs = [verb for verb, *_ in client.claim_writes]
    # create, the finalizer, then Unreserve: the finalizer dropped again and the claim deleted.
    assert verbs == ["create", "update-claim", "update-claim", "delete"]
    created_name = client.claim_writes[1][2]
    assert client.claim_writes[3][2] == created_name
    assert "resource.kubernetes.io/delete-protection" not in (
        client.claim_writes[2][3]["metadata"].get("finalizers") or []
    )
    assert (("default", created_name)) not in client.claims
    assert tracker_for(app.cache).in_flight_count() == 0
    [event] = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert f"add allocation and reservation to claim default/{created_name}: forbidden" in event["note"]


def test_a_failed_create_is_counted_and_leaves_nothing_behind() -> None:
    app, client = _app((DEVICE_CLASS, gpu_class()), (RESOURCE_SLICE, resource_slice("n1", "a100")), nodes=("n1",))
    client.claim_errors = [APIError(403, "forbidden")]
    app.on_pod_event("ADDED", gpu_pod("gpu-pod"))
    drive(app)
    assert client.bindings == []
    assert client.claim_writes == []
    assert _creates(app) == {"success": 0.0, "failure": 1.0}
    assert tracker_for(app.cache).in_flight_count() == 0
    [event] = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert "create claim for extended resources default/: forbidden" in event["note"]  # upstream cleared the name


def test_a_claim_left_from_an_earlier_cycle_is_deleted_by_post_filter() -> None:
    stale = {
        "metadata": {
            "name": "gpu-pod-extended-resources-abcde",
            "namespace": "default",
            "uid": "stale-uid",
            "resourceVersion": "3",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [{"kind": "Pod", "name": "gpu-pod", "uid": "gpu-pod", "controller": True}],
            "finalizers": ["resource.kubernetes.io/delete-protection"],
        },
        "spec": {"devices": {"requests": [exact("container-0-request-1", 1)]}},
    }
    app, client = _app(
        (DEVICE_CLASS, gpu_class()),
        (RESOURCE_SLICE, resource_slice("n1", "a100")),
        (RESOURCE_CLAIM, stale),
        nodes=("n1",),
    )
    pod = gpu_pod("gpu-pod")
    pod["metadata"]["uid"] = "gpu-pod"
    app.on_pod_event("ADDED", pod)
    drive(app)
    assert client.bindings == []
    [event] = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert event["note"].startswith(
        "0/1 nodes are available: 1 cannot schedule extended resource claim. deletion of ResourceClaim completed"
    )
    assert [(verb, name) for verb, _, name, _ in client.claim_writes] == [
        ("update-claim", stale["metadata"]["name"]),
        ("delete", stale["metadata"]["name"]),
    ]
    assert client.claim_writes[0][3]["metadata"]["finalizers"] == []


def test_a_pod_with_a_claim_and_an_extended_resource_gets_distinct_devices_for_both() -> None:
    from tests.unit.plugins.test_dynamic_resources import resource_claim

    app, client = _app(
        (DEVICE_CLASS, gpu_class()),
        (RESOURCE_SLICE, resource_slice("n1", "a100", "a100")),
        (RESOURCE_CLAIM, resource_claim()),
        nodes=("n1",),
    )
    pod = gpu_pod("both")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "my-gpu"}]
    app.on_pod_event("ADDED", pod)
    drive(app)
    assert client.bindings == [("default", "both", "n1")]
    status_writes = [(name, body) for verb, _, name, body in client.claim_writes if verb == "update"]
    [(first, _), (second, _)] = status_writes
    assert first == "my-gpu"  # the pod's own claim first, as upstream
    assert second.startswith("both-extended-resources-")
    devices = sorted(
        result["device"] for _, body in status_writes for result in body["status"]["allocation"]["devices"]["results"]
    )
    assert devices == ["gpu-0", "gpu-1"]
    assert [verb for verb, *_ in client.claim_writes].count("create") == 1


# -- the API client's new calls (kube/client.py) --------------------------------------------------------------
def test_the_client_posts_and_deletes_claims() -> None:
    from aiohttp import web

    from tests.unit.test_kube_client import serve

    collection = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
    seen: list[tuple[str, str, Any]] = []

    async def record(request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        seen.append((request.method, request.path, body))
        return web.json_response({"kind": "ResourceClaim", "metadata": {"name": "p-extended-resources-x"}})

    async def scenario(client: Any) -> Any:
        created = await client.create_resource_claim(namespace="ns", claim={"metadata": {"generateName": "p-"}})
        await client.delete_resource_claim(namespace="ns", name="p-extended-resources-x")
        return created

    created = serve(
        {("POST", collection): record, ("DELETE", f"{collection}/p-extended-resources-x"): record}, scenario
    )
    assert created["metadata"]["name"] == "p-extended-resources-x"
    assert seen == [
        ("POST", collection, {"metadata": {"generateName": "p-"}}),
        ("DELETE", f"{collection}/p-extended-resources-x", None),
    ]


def test_a_created_claim_the_watch_never_delivers_stops_being_in_flight_after_the_timeout() -> None:
    """Upstream waits for its assume cache (1 s polls, 120 s) and only logs when the claim never shows up."""
    app, client = _app((DEVICE_CLASS, gpu_class()), (RESOURCE_SLICE, resource_slice("n1", "a100")), nodes=("n1",))
    client.on_claim_created = None  # no watch event for the created claim
    plugin = app.profiles["sp"].framework.plugins["DynamicResources"]
    plugin.assume_timeout, plugin.assume_poll = 0.05, 0.01
    app.on_pod_event("ADDED", gpu_pod("gpu-pod"))
    drive(app)
    assert client.bindings == [("default", "gpu-pod", "n1")]
    assert tracker_for(app.cache).in_flight_count() == 0
