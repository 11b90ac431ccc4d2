"""Resource accounting of pods (reference §3; component-helpers ``PodRequests``, scheduler ``CalculateResource``)."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.state import pod_info
from kopf_scheduler.state.node_table import CPU, MEMORY
from kopf_scheduler.state.pod_info import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    PodInfo,
    is_extended_resource_name,
    is_scalar_resource_name,
    pod_requests,
    pod_resources,
)
from tests.unit.factories import make_cache, make_node, make_pod

MI = 1024 * 1024


def container(name: str, requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "img", **extra}
    if requests is not None:
        body["resources"] = {"requests": requests}
    return body


def sidecar(name: str, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    return container(name, requests, restartPolicy="Always")


def pod(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec, "status": status or {}}


# -- requests (no defaults): what Filter and BalancedAllocation compare -----------------------------------------
@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param({"containers": [container("a")]}, {}, id="no-requests"),
        pytest.param(
            {"containers": [container("a", {"cpu": "1", "memory": "1Gi"}), container("b", {"cpu": "500m"})]},
            {"cpu": 1500, "memory": 1024 * MI},
            id="containers-summed",
        ),
        pytest.param(
            # Upstream's computePodResourceRequest example: init containers 2/1G and 2/3G, containers 2/1G + 1/1G.
            {
                "initContainers": [
                    container("i1", {"cpu": "2", "memory": "1G"}),
                    container("i2", {"cpu": "2", "memory": "3G"}),
                ],
                "containers": [
                    container("c1", {"cpu": "2", "memory": "1G"}),
                    container("c2", {"cpu": "1", "memory": "1G"}),
                ],
            },
            {"cpu": 3000, "memory": 3 * 10**9},
            id="init-containers-max-not-sum",
        ),
        pytest.param(
            # S = 1 + 1 + 3 = 5 cpu; init candidates: sidecar 1 → 1, regular 2 + 1 = 3, sidecar 3 → 4; max(5, 4) = 5.
            {
                "initContainers": [
                    sidecar("s1", {"cpu": "1"}),
                    container("i", {"cpu": "2"}),
                    sidecar("s2", {"cpu": "3"}),
                ],
                "containers": [container("c", {"cpu": "1"})],
            },
            {"cpu": 5000},
            id="sidecars-add-to-containers",
        ),
        pytest.param(
            # A regular init container runs beside the sidecars started before it: 10 + 1 = 11 > 1 + 1.
            {
                "initContainers": [sidecar("s", {"cpu": "1"}), container("i", {"cpu": "10"})],
                "containers": [container("c", {"cpu": "1"})],
            },
            {"cpu": 11000},
            id="init-runs-beside-earlier-sidecars",
        ),
        pytest.param(
            # A sidecar started after a regular init container does not run beside it.
            {
                "initContainers": [container("i", {"cpu": "10"}), sidecar("s", {"cpu": "1"})],
                "containers": [container("c", {"cpu": "1"})],
            },
            {"cpu": 10000},
            id="later-sidecar-not-beside-init",
        ),
        pytest.param(
            {
                "containers": [container("a", {"cpu": "1", "memory": "1Gi"})],
                "overhead": {"cpu": "250m", "memory": "120Mi"},
            },
            {"cpu": 1250, "memory": 1144 * MI},
            id="overhead-added",
        ),
        pytest.param(
            {"containers": [container("a")], "overhead": {"cpu": "10m"}},
            {"cpu": 10},
            id="overhead-only",
        ),
        pytest.param(
            {
                "containers": [container("a", {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"})],
                "resources": {"requests": {"cpu": "3", "ephemeral-storage": "5Gi"}},
            },
            {"cpu": 3000, "memory": 1024 * MI, "ephemeral-storage": 1024 * MI},
            id="pod-level-replaces-cpu-only-supported-names",
        ),
        pytest.param(
            {
                "containers": [container("a", {"hugepages-2Mi": "2Mi"})],
                "resources": {"requests": {"hugepages-2Mi": "10Mi"}},
            },
            {"hugepages-2Mi": 10 * MI},
            id="pod-level-hugepages",
        ),
        pytest.param(
            {
                "containers": [container("a", {"cpu": "1"})],
                "resources": {"requests": {"cpu": "2"}},
                "overhead": {"cpu": "1"},
            },
            {"cpu": 3000},
            id="pod-level-plus-overhead",
        ),
        pytest.param(
            # Quantities add exactly before rounding up: 0.5m + 0.5m = 1m (not 2m), a lone 1.5m is 2m.
            {
                "containers": [
                    container("a", {"cpu": "0.5m"}),
                    container("b", {"cpu": "0.5m"}),
                    container("c", {"memory": "1.5"}),
                ]
            },
            {"cpu": 1, "memory": 2},
            id="exact-sum-then-round-up",
        ),
        pytest.param(
            {
                "containers": [
                    container(
                        "a",
                        {
                            "example.com/gpu": "2",
                            "kubernetes.io/batch": "1",
                            "attachable-volumes-aws-ebs": "1",
                            "hugepages-1Gi": "1Gi",
                            "pods": "1",
                            "foo": "3",
                        },
                    )
                ]
            },
            {
                "example.com/gpu": 2,
                "kubernetes.io/batch": 1,
                "attachable-volumes-aws-ebs": 1,
                "hugepages-1Gi": 1024 * MI,
            },
            id="only-the-scheduler-resource-model-is-kept",
        ),
        pytest.param(
            {"containers": [container("a", {"example.com/gpu": "0", "cpu": "0"})]},
            {"example.com/gpu": 0, "cpu": 0},
            id="explicit-zero-kept",
        ),
    ],
)
def test_requests(spec: dict[str, Any], want: dict[str, int]) -> None:
    assert PodInfo.from_obj(pod(spec)).requests == want


# -- non-zero requests: the node side of Least/Most/RequestedToCapacityRatio ----------------------------------
@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param({"containers": [container("a")]}, (100, 200 * MI), id="defaults"),
        pytest.param(
            {"containers": [container("a"), container("b", {"cpu": "1"})]},
            (1100, 400 * MI),
            id="defaults-per-container",
        ),
        pytest.param(
            {"containers": [container("a", {"cpu": "0", "memory": "0"})]},
            (0, 0),
            id="explicit-zero-is-not-missing",
        ),
        pytest.param(
            {"initContainers": [container("i", {"cpu": "2"})], "containers": [container("a")]},
            (2000, 200 * MI),
            id="init-container-max-with-defaults",
        ),
        pytest.param(
            {"initContainers": [sidecar("s")], "containers": [container("a")]},
            (200, 400 * MI),
            id="sidecar-gets-defaults-too",
        ),
        pytest.param(
            {"containers": [container("a")], "overhead": {"cpu": "50m", "memory": "10Mi"}},
            (150, 210 * MI),
            id="overhead-on-top-of-defaults",
        ),
        pytest.param(
            {"containers": [container("a"), container("b")], "resources": {"requests": {"cpu": "1"}}},
            (1000, 400 * MI),
            id="pod-level-cpu-memory-defaulted-per-container",
        ),
        pytest.param(
            # Pod-level requests set: defaults apply only to what the whole request list lacks. The overhead
            # names memory, so memory gets no default on the node side.
            {"containers": [container("a")], "resources": {"requests": {"cpu": "1"}}, "overhead": {"memory": "10Mi"}},
            (1000, 10 * MI),
            id="pod-level-overhead-suppresses-default",
        ),
    ],
)
def test_non_zero_requests(spec: dict[str, Any], want: tuple[int, int]) -> None:
    info = PodInfo.from_obj(pod(spec))
    assert (info.non_zero_cpu, info.non_zero_memory) == want


def test_defaults_are_upstreams() -> None:
    assert (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST) == (100, 209_715_200)


def test_pod_requests_compat_wrapper() -> None:
    requests, non_zero = pod_requests({"containers": [container("a", {"cpu": "1", "example.com/x": "2"})]})
    assert requests == {"cpu": 1000, "example.com/x": 2}
    assert non_zero == {"cpu": 1000, "memory": 200 * MI, "example.com/x": 2}


# -- in-place resize: a bound pod counts with max(desired, actuated, allocated) ----------------------------------
RESIZE_SPEC = {"containers": [container("a", {"cpu": "1", "memory": "1Gi"})]}


@pytest.mark.parametrize(
    ("spec", "status", "want"),
    [
        pytest.param(RESIZE_SPEC, {}, {"cpu": 1000, "memory": 1024 * MI}, id="no-status"),
        pytest.param(
            RESIZE_SPEC,
            {"containerStatuses": [{"name": "a"}]},
            {"cpu": 1000, "memory": 1024 * MI},
            id="status-without-resources",
        ),
        pytest.param(
            RESIZE_SPEC,
            {"containerStatuses": [{"name": "a", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}]},
            {"cpu": 2000, "memory": 1024 * MI},
            id="actuated-larger-cpu",
        ),
        pytest.param(
            RESIZE_SPEC,
            {
                "containerStatuses": [
                    {"name": "a", "resources": {}, "allocatedResources": {"cpu": "3", "memory": "2Gi"}},
                ]
            },
            {"cpu": 3000, "memory": 2048 * MI},
            id="allocated-larger",
        ),
        pytest.param(
            RESIZE_SPEC,
            {
                "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
                "containerStatuses": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m"}}, "allocatedResources": {"cpu": "500m"}}
                ],
            },
            {"cpu": 500},
            id="infeasible-resize-ignores-desired",
        ),
        pytest.param(
            RESIZE_SPEC,
            {
                "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}],
                "containerStatuses": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}],
            },
            {"cpu": 1000, "memory": 1024 * MI},
            id="deferred-resize-keeps-desired",
        ),
        pytest.param(
            {"initContainers": [container("i", {"cpu": "100m"})], "containers": [container("a", {"cpu": "1"})]},
            {"initContainerStatuses": [{"name": "i", "resources": {"requests": {"cpu": "5"}}}]},
            {"cpu": 1000},
            id="regular-init-status-ignored",
        ),
        pytest.param(
            {"initContainers": [sidecar("s", {"cpu": "100m"})], "containers": [container("a", {"cpu": "1"})]},
            {"initContainerStatuses": [{"name": "s", "resources": {"requests": {"cpu": "2"}}}]},
            {"cpu": 3000},
            id="sidecar-status-used",
        ),
        pytest.param(
            {"containers": [container("a", {"cpu": "1"})], "resources": {"requests": {"cpu": "2"}}},
            {"resources": {"requests": {"cpu": "4"}}, "allocatedResources": {"cpu": "3"}},
            {"cpu": 4000},
            id="pod-level-resize",
        ),
    ],
)
def test_in_place_resize(spec: dict[str, Any], status: dict[str, Any], want: dict[str, int]) -> None:
    requests, _, _ = pod_resources(pod(spec, status))
    assert requests == want


def test_resize_feeds_non_zero_requests() -> None:
    status = {"containerStatuses": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}]}
    _, non_zero_cpu, non_zero_memory = pod_resources(pod({"containers": [container("a")]}, status))
    # The actuated cpu is present, so the cpu default is not applied; memory still defaults.
    assert (non_zero_cpu, non_zero_memory) == (2000, 200 * MI)


# -- resource names ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "extended", "scalar"),
    [
        pytest.param("example.com/gpu", True, True, id="extended"),
        pytest.param("nvidia.com/gpu", True, True, id="extended-nvidia"),
        pytest.param("example.com/Big_Thing.v2", True, True, id="extended-name-chars"),
        pytest.param("kubernetes.io/batch", False, True, id="prefixed-native"),
        pytest.param("sub.kubernetes.io/batch", False, True, id="prefixed-native-subdomain"),
        pytest.param("hugepages-2Mi", False, True, id="hugepages"),
        pytest.param("attachable-volumes-csi-x", False, True, id="attachable-volumes"),
        pytest.param("cpu", False, False, id="cpu"),
        pytest.param("pods", False, False, id="pods"),
        pytest.param("foo", False, False, id="unprefixed"),
        pytest.param("requests.example.com/x", False, False, id="quota-prefix"),
        pytest.param("Example.com/gpu", False, False, id="uppercase-domain"),
        pytest.param("example.com/", False, False, id="empty-name"),
        pytest.param("a/b/c", False, False, id="two-slashes"),
        pytest.param("example.com/-x", False, False, id="name-starts-with-dash"),
    ],
)
def test_resource_names(name: str, extended: bool, scalar: bool) -> None:
    assert is_extended_resource_name(name) is extended
    assert is_scalar_resource_name(name) is scalar


# -- the cache's columns follow the pods ------------------------------------------------------------------------
def test_cache_accounts_requests_and_non_zero() -> None:
    cache = make_cache(
        [make_node("n", extra={"example.com/gpu": 4})],
        [
            make_pod("a", node_name="n", requests={"cpu": "1", "memory": "1Gi", "example.com/gpu": 1}),
            make_pod("b", node_name="n"),
        ],
    )
    table = cache.table
    slot = cache.node("n").slot
    gpu = table.resource_column("example.com/gpu")
    assert (table.requested[slot, CPU], table.requested[slot, MEMORY], table.requested[slot, gpu]) == (
        1000,
        1024 * MI,
        1,
    )
    assert tuple(table.non_zero_requested[slot]) == (1100, 1224 * MI)
    assert table.pod_count[slot] == 2


def test_cache_follows_in_place_resize_and_delete() -> None:
    obj = make_pod("a", node_name="n", requests={"cpu": "1"}, uid="uid-a")
    cache = make_cache([make_node("n")], [obj])
    slot = cache.node("n").slot
    resized = {
        **obj,
        "status": {"phase": "Running", "containerStatuses": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]},
    }
    cache.add_or_update_pod(resized)
    assert cache.table.requested[slot, CPU] == 3000
    assert cache.table.non_zero_requested[slot, 0] == 3000
    cache.remove_pod("uid-a")
    assert cache.table.requested[slot, CPU] == 0
    assert tuple(cache.table.non_zero_requested[slot]) == (0, 0)
    assert cache.table.pod_count[slot] == 0


# -- pods of one shape share one accounting ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "containers",
    [
        [container("a", {"cpu": "100m", "memory": "500Mi"})],
        [container("a", {"cpu": "0.5m"}), container("b", {"cpu": "0.5m", "example.com/gpu": "1"})],
        [container("a"), container("b", {"memory": "1Gi"})],
        [],
    ],
)
def test_pods_of_a_known_shape_get_the_first_ones_accounting(containers: list[dict[str, Any]]) -> None:
    first = pod_resources(pod({"containers": containers}))
    again = pod_resources(pod({"containers": containers}))
    assert again == first == pod_info._pod_resources(pod({"containers": containers}))
    again[0]["cpu"] = -1  # each caller gets its own requests dict
    assert pod_resources(pod({"containers": containers})) == first


@pytest.mark.parametrize(
    ("spec", "status"),
    [
        ({"initContainers": [container("i", {"cpu": "2"})]}, None),
        ({"overhead": {"cpu": "1"}}, None),
        ({"resources": {"requests": {"cpu": "3"}}}, None),
        ({}, {"containerStatuses": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}]}),
    ],
)
def test_what_else_goes_into_the_accounting_is_not_shared_by_shape(
    spec: dict[str, Any], status: dict[str, Any] | None
) -> None:
    plain = {"containers": [container("a", {"cpu": "1"})]}
    assert pod_resources(pod(plain))[0]["cpu"] == 1000
    assert pod_resources(pod({**plain, **spec}, status))[0]["cpu"] != 1000


# -- a newer version of a pod that parses the same --------------------------------------------------------------
def _versioned(change: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    old = pod({"containers": [container("a", {"cpu": "1"})], "nodeName": "n"}, {"phase": "Pending"})
    new = {**old, "metadata": {**old["metadata"], "resourceVersion": "2"}, "status": {**old["status"]}}
    new["spec"] = {**old["spec"]}
    change(new)
    return old, new


def _relabel(p: dict[str, Any]) -> None:
    p["metadata"].update(labels={"app": "web"})


@pytest.mark.parametrize(
    ("change", "same"),
    [
        (lambda p: p["status"].update(conditions=[{"type": "PodScheduled", "status": "True"}]), True),
        (lambda p: p["metadata"].update(annotations={"a": "b"}), True),
        (lambda p: p["status"].update(phase="Running"), False),
        (_relabel, False),
        (lambda p: p["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"), False),
        (lambda p: p["spec"].update(tolerations=[{"operator": "Exists"}]), False),
        (
            lambda p: p["status"].update(containerStatuses=[{"name": "a", "resources": {"requests": {"cpu": "2"}}}]),
            False,
        ),
    ],
)
def test_same_scheduling_inputs(change: Any, same: bool) -> None:
    old, new = _versioned(change)
    assert pod_info.same_scheduling_inputs(old, new) is same
    assert pod_info.same_scheduling_inputs(old, old) is False  # changed in place, perhaps: parse it again
    assert pod_info.same_scheduling_inputs(old, new, but_labels=True) is (same or change is _relabel)


def test_a_bound_pod_relabelled_by_its_binding_keeps_its_parse_and_is_found_by_its_new_labels() -> None:
    """The API server's PodTopologyLabels admission copies the node's zone and region onto the pod with the
    Binding: the confirming watch event changes the labels only, and the cache keeps the parse (requests,
    tolerations) while label lookups and selector counts follow the new labels."""
    from kopf_scheduler.state.selectors import LabelSelector

    obj = make_pod(
        "a", node_name="n", requests={"cpu": "1"}, uid="uid-a", spec={"tolerations": [{"operator": "Exists"}]}
    )
    cache = make_cache([make_node("n")], [obj])
    zone = LabelSelector.parse({"matchLabels": {"topology.kubernetes.io/zone": "z1"}})
    before = cache.pod("uid-a")
    assert before is not None
    assert cache.matching_pods("default", zone) == []
    counts_before = cache.matching_pod_counts("default", zone).copy()
    relabelled = {**obj, "metadata": {**obj["metadata"], "labels": {"topology.kubernetes.io/zone": "z1"}}}
    cache.add_or_update_pod(relabelled)
    after = cache.pod("uid-a")
    assert after is not None
    assert after is not before
    assert after.labels == {"topology.kubernetes.io/zone": "z1"}
    assert (after.requests is before.requests, after.tolerations is before.tolerations) == (True, True)
    assert [p.uid for p in cache.matching_pods("default", zone)] == ["uid-a"]
    slot = cache.node("n").slot
    assert (counts_before[slot], cache.matching_pod_counts("default", zone)[slot]) == (0, 1)
    assert cache.table.pod_count[slot] == 1


def test_pods_with_the_same_tolerations_share_one_parse_and_an_odd_one_still_parses() -> None:
    from kopf_scheduler.state.tolerations import Toleration, parse_tolerations

    defaults = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    first = PodInfo.from_obj(make_pod("a", spec={"tolerations": [dict(t) for t in defaults]}))
    second = PodInfo.from_obj(make_pod("b", spec={"tolerations": [dict(t) for t in defaults]}))
    assert first.tolerations is second.tolerations
    assert first.tolerations[0] == Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute")
    odd = parse_tolerations([{"key": "k", "operator": "Equal", "value": "v", "effect": "", "extra": ["unhashable"]}])
    assert odd == (Toleration("k", "Equal", "v", ""),)
    assert parse_tolerations(None) == ()
    assert PodInfo.from_obj(make_pod("c", spec={"tolerations": [defaults[0]]})).tolerations != first.tolerations
