"""NodeDeclaredFeatures: inference of each feature, Filter verdicts, Skip, events and hints (upstream v1.36.3)."""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.algorithm import FitError, schedule_pod
from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
    ExtensionPoint,
    QueueingHint,
)
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.framework.events import node_scheduling_properties_change
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.plugins.node_declared_features import (
    ERR_REASON,
    RESTART_ALL_CONTAINERS,
    USER_NAMESPACES_HOST_NETWORK,
    NodeDeclaredFeatures,
    infer_required_features,
    required_features,
)
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.state.cache import ClusterCache
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info, slots

RESTART_ALL = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
RESTART_ONE = {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}


def container(*rules: dict[str, Any], name: str = "c", restart_policy: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "app:1"}
    if restart_policy:
        body["restartPolicy"] = restart_policy
    if rules:
        body["restartPolicyRules"] = list(rules)
    return body


def node(name: str, *features: str) -> dict[str, Any]:
    obj = make_node(name)
    if features:
        obj["status"]["declaredFeatures"] = sorted(features)
    return obj


# -- inference (component-helpers nodedeclaredfeatures v0.36.3, InferForPodScheduling) -------------------
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"containers": [container()]}, set(), id="plain-pod"),
        pytest.param({"containers": [container(RESTART_ONE, restart_policy="Never")]}, set(), id="rule-restart-one"),
        pytest.param(
            {"containers": [container(RESTART_ALL, restart_policy="Never")]},
            {RESTART_ALL_CONTAINERS},
            id="container-restart-all",
        ),
        pytest.param(
            {"containers": [container(), container(RESTART_ONE, RESTART_ALL, name="d", restart_policy="Never")]},
            {RESTART_ALL_CONTAINERS},
            id="second-rule-of-second-container",
        ),
        pytest.param(
            {"containers": [container()], "initContainers": [container(RESTART_ALL, name="i", restart_policy="Never")]},
            {RESTART_ALL_CONTAINERS},
            id="init-container-restart-all",
        ),
        pytest.param(
            {"containers": [container()], "ephemeralContainers": [container(RESTART_ALL, name="e")]},
            set(),
            id="ephemeral-container-not-inferred",
        ),
        pytest.param(
            {"containers": [container()], "hostNetwork": True, "hostUsers": False},
            {USER_NAMESPACES_HOST_NETWORK},
            id="userns-host-network",
        ),
        pytest.param({"containers": [container()], "hostNetwork": True}, set(), id="host-network-host-users-unset"),
        pytest.param(
            {"containers": [container()], "hostNetwork": True, "hostUsers": True}, set(), id="host-network-host-users"
        ),
        pytest.param({"containers": [container()], "hostUsers": False}, set(), id="userns-pod-network"),
        pytest.param(
            {"containers": [container(RESTART_ALL, restart_policy="Never")], "hostNetwork": True, "hostUsers": False},
            {RESTART_ALL_CONTAINERS, USER_NAMESPACES_HOST_NETWORK},
            id="both",
        ),
        # Pod-level resources are only inferred for resizes (InferForUpdate), never for scheduling.
        pytest.param(
            {"containers": [container()], "resources": {"requests": {"cpu": "1"}}}, set(), id="pod-level-resources"
        ),
    ],
)
def test_inference(spec: dict[str, Any], expected: set[str]) -> None:
    assert infer_required_features(spec) == expected


# -- PreFilter and Filter ----------------------------------------------------------------------------------
def run(pod_spec: dict[str, Any], nodes: list[dict[str, Any]]) -> tuple[Code, dict[str, Code | None]]:
    """PreFilter's code and, if it did not Skip, the Filter verdict per node (None = passes)."""
    cache = make_cache(nodes)
    snapshot = cache.snapshot()
    plugin = NodeDeclaredFeatures(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec=pod_spec))
    state = CycleState()
    result, status = plugin.pre_filter(state, pod, snapshot)
    assert result is None
    if status.is_skip:
        return status.code, {}
    names = [n["metadata"]["name"] for n in nodes]
    filtered = plugin.filter(state, pod, slots(snapshot, names), snapshot)
    verdicts: dict[str, Code | None] = {}
    for position, name in enumerate(names):
        if filtered is None or not filtered.rejected[position]:
            verdicts[name] = None
            continue
        rejection = filtered.status_at(position)
        assert rejection.reasons == (ERR_REASON,)
        assert rejection.plugin == "NodeDeclaredFeatures"
        verdicts[name] = rejection.code
    return status.code, verdicts


UUR = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
NEEDS_RESTART_ALL = {"containers": [container(RESTART_ALL, restart_policy="Never")]}
NEEDS_BOTH = {**NEEDS_RESTART_ALL, "hostNetwork": True, "hostUsers": False}


@pytest.mark.parametrize(
    ("spec", "nodes", "expected"),
    [
        pytest.param(
            NEEDS_RESTART_ALL,
            [node("a", RESTART_ALL_CONTAINERS), node("b")],
            {"a": None, "b": UUR},
            id="declaring-node-only",
        ),
        pytest.param(
            NEEDS_RESTART_ALL,
            [node("a", "ExtendWebSocketsToKubelet", RESTART_ALL_CONTAINERS), node("b", "ExtendWebSocketsToKubelet")],
            {"a": None, "b": UUR},
            id="other-features-do-not-count",
        ),
        pytest.param(
            NEEDS_RESTART_ALL,
            [node("a", "SomeFutureFeature/sub", RESTART_ALL_CONTAINERS), node("b", "SomeFutureFeature/sub")],
            {"a": None, "b": UUR},
            id="unknown-features-ignored",
        ),
        pytest.param(
            NEEDS_BOTH,
            [
                node("a", RESTART_ALL_CONTAINERS, USER_NAMESPACES_HOST_NETWORK),
                node("b", RESTART_ALL_CONTAINERS),
                node("c", USER_NAMESPACES_HOST_NETWORK),
                node("d"),
            ],
            {"a": None, "b": UUR, "c": UUR, "d": UUR},
            id="all-required-features",
        ),
        pytest.param(NEEDS_RESTART_ALL, [node("a"), node("b")], {"a": UUR, "b": UUR}, id="none-declares"),
    ],
)
def test_filter(spec: dict[str, Any], nodes: list[dict[str, Any]], expected: dict[str, Code | None]) -> None:
    code, verdicts = run(spec, nodes)
    assert code is Code.SUCCESS
    assert verdicts == expected


@pytest.mark.parametrize(
    ("spec", "decoded"),
    [
        pytest.param({"containers": [container()]}, False, id="plain-pod"),
        pytest.param({"containers": [container(RESTART_ALL, restart_policy="Never")]}, True, id="restart-all"),
        pytest.param({"containers": [container()], "hostNetwork": True, "hostUsers": False}, True, id="userns"),
        pytest.param({"containers": [container()], "hostUsers": True}, True, id="host-users"),
    ],
)
def test_a_compact_pod_infers_alike_and_is_decoded_only_when_it_names_a_field(
    spec: dict[str, Any], decoded: bool
) -> None:
    pod = pod_info(make_pod(spec=copy.deepcopy(spec)))
    pod.compact()
    assert required_features(pod) == infer_required_features(spec)
    assert isinstance(pod.raw, dict) is decoded


def test_pre_filter_skips_pods_that_require_nothing() -> None:
    code, verdicts = run({"containers": [container()]}, [node("a"), node("b", RESTART_ALL_CONTAINERS)])
    assert code is Code.SKIP
    assert verdicts == {}


def test_filter_follows_node_updates_and_slot_reuse() -> None:
    cache = make_cache([node("a"), node("b", RESTART_ALL_CONTAINERS)])
    plugin = NodeDeclaredFeatures(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec=NEEDS_RESTART_ALL))

    def rejected() -> list[str]:
        snapshot = cache.snapshot()
        state = CycleState()
        plugin.pre_filter(state, pod, snapshot)
        names = sorted(cache.node_names())
        result = plugin.filter(state, pod, slots(snapshot, names), snapshot)
        return [] if result is None else [n for n, r in zip(names, result.rejected, strict=True) if r]

    assert rejected() == ["a"]
    cache.add_or_update_node(node("a", RESTART_ALL_CONTAINERS))
    cache.add_or_update_node(node("b"))
    assert rejected() == ["b"]
    cache.remove_node("a")
    cache.add_or_update_node(node("c"))  # takes a's slot: must not inherit a's features
    assert rejected() == ["b", "c"]


def test_many_nodes_grow_the_table() -> None:
    nodes = [node(f"n{i:03d}", RESTART_ALL_CONTAINERS) if i % 3 == 0 else node(f"n{i:03d}") for i in range(150)]
    _, verdicts = run(NEEDS_RESTART_ALL, nodes)
    assert [name for name, verdict in verdicts.items() if verdict is None] == [f"n{i:03d}" for i in range(0, 150, 3)]


# -- the default profile, end to end -------------------------------------------------------------------------
def default_framework(cache: ClusterCache) -> Framework:
    registry = default_registry()
    return Framework(resolve_profile("p", SchedulerProfileSpec(), registry), registry, FakeHandle(cache))


def test_default_profile_runs_it_last_and_no_longer_omits_it() -> None:
    framework = default_framework(make_cache([node("a")]))
    assert "NodeDeclaredFeatures" not in framework.profile.omitted_defaults
    for point in (ExtensionPoint.PRE_FILTER, ExtensionPoint.FILTER):
        assert framework.profile.enabled(point)[-1].name == "NodeDeclaredFeatures"


def test_default_profile_fit_error_text() -> None:
    cache = make_cache([node("a"), node("b", "ExtendWebSocketsToKubelet")])
    framework = default_framework(cache)
    pod = pod_info(make_pod(spec=NEEDS_RESTART_ALL))
    with pytest.raises(FitError) as info:
        schedule_pod(framework, CycleState(), pod, framework.handle.snapshot(), rng=random.Random(1))
    assert info.value.message == f"0/2 nodes are available: 2 {ERR_REASON}."


def test_default_profile_binds_to_the_declaring_node() -> None:
    cache = make_cache([node("a"), node("b", RESTART_ALL_CONTAINERS), node("c")])
    framework = default_framework(cache)
    pod = pod_info(make_pod(spec=NEEDS_RESTART_ALL))
    result = schedule_pod(framework, CycleState(), pod, framework.handle.snapshot(), rng=random.Random(1))
    assert result.suggested_host == "b"


# -- events and QueueingHints ------------------------------------------------------------------------------
def test_events_to_register() -> None:
    assert [r.event for r in NodeDeclaredFeatures(handle=FakeHandle()).events_to_register()] == [
        ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE),
        ClusterEvent(EventResource.POD, ActionType.UPDATE),
    ]


def test_node_update_event_for_declared_features() -> None:
    old = node("a", "ExtendWebSocketsToKubelet")
    new = node("a", "ExtendWebSocketsToKubelet", RESTART_ALL_CONTAINERS)
    assert node_scheduling_properties_change(new, old) == [
        ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_DECLARED_FEATURE)
    ]
    assert node_scheduling_properties_change(copy.deepcopy(old), old) == []
    assert ActionType.UPDATE_NODE_DECLARED_FEATURE.label == "UpdateNodeDeclaredFeature"


def node_hint(old: dict[str, Any] | None, new: dict[str, Any]) -> QueueingHint:
    action = ActionType.ADD if old is None else ActionType.UPDATE_NODE_DECLARED_FEATURE
    hint = hint_for(NodeDeclaredFeatures(handle=FakeHandle()), ClusterEvent(EventResource.NODE, action))
    return hint(pod_info(make_pod(spec=NEEDS_RESTART_ALL)), old, new)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # Upstream queues on any add, whether or not the new node declares what the pod needs.
        pytest.param(None, node("a"), QUEUE, id="add-without-features"),
        pytest.param(None, node("a", RESTART_ALL_CONTAINERS), QUEUE, id="add-with-features"),
        pytest.param(node("a"), node("a", RESTART_ALL_CONTAINERS), QUEUE, id="feature-declared"),
        pytest.param(node("a", RESTART_ALL_CONTAINERS), node("a"), QUEUE, id="feature-withdrawn"),
        pytest.param(node("a", "X"), node("a", "X", "Y"), QUEUE, id="unrelated-feature-changed"),
        pytest.param(node("a", "X"), node("a", "X"), QUEUE_SKIP, id="unchanged"),
    ],
)
def test_node_hint(old: dict[str, Any] | None, new: dict[str, Any], expected: QueueingHint) -> None:
    assert node_hint(old, new) is expected


def pod_hint(target: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> QueueingHint:
    hint = hint_for(
        NodeDeclaredFeatures(handle=FakeHandle()), ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE)
    )
    return hint(pod_info(target), old, new)


def test_pod_hint() -> None:
    target = make_pod("p", uid="uid-p", spec=NEEDS_RESTART_ALL)
    relabelled = copy.deepcopy(target)
    relabelled["metadata"]["labels"] = {"x": "y"}
    assert pod_hint(target, target, relabelled) is QUEUE_SKIP
    other = make_pod("q", uid="uid-q")
    assert pod_hint(target, other, make_pod("q", uid="uid-q", spec=NEEDS_RESTART_ALL)) is QUEUE_SKIP
    # Upstream compares the inferred requirements of the old and the new spec.
    plain = make_pod("p", uid="uid-p")
    assert pod_hint(target, target, plain) is QUEUE
    assert pod_hint(target, pod_info(target), pod_info(plain)) is QUEUE


def test_node_hint_without_the_new_node_raises() -> None:
    hint = hint_for(NodeDeclaredFeatures(handle=FakeHandle()), ClusterEvent(EventResource.NODE, ActionType.ADD))
    with pytest.raises(ValueError, match="without the new node"):
        hint(pod_info(make_pod()), None, None)


def test_filter_mask_is_aligned_with_the_given_nodes() -> None:
    cache = make_cache([node("a"), node("b", RESTART_ALL_CONTAINERS)])
    snapshot = cache.snapshot()
    plugin = NodeDeclaredFeatures(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec=NEEDS_RESTART_ALL))
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    result = plugin.filter(state, pod, slots(snapshot, ["b", "a", "b"]), snapshot)
    assert result is not None
    assert np.array_equal(result.rejected, [False, True, False])
