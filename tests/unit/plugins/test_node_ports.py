"""NodePorts: wanted ports (incl. sidecars), conflict rule, Unschedulable reason, PreFilter Skip (§2.7)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
    QueueingHint,
)
from kopf_scheduler.plugins.node_ports import ERR_REASON, NodePorts
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info, slots


def port(host_port: int, protocol: str = "", host_ip: str = "", container_port: int = 8080) -> dict[str, Any]:
    body: dict[str, Any] = {"containerPort": container_port, "hostPort": host_port}
    if protocol:
        body["protocol"] = protocol
    if host_ip:
        body["hostIP"] = host_ip
    return body


def container(*ports: dict[str, Any], restart_policy: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"name": "c", "image": "app:1", "ports": list(ports)}
    if restart_policy:
        body["restartPolicy"] = restart_policy
    return body


def pod_using(*ports: dict[str, Any], name: str = "pod", node_name: str = "") -> dict[str, Any]:
    return make_pod(name, node_name=node_name, spec={"containers": [container(*ports)]})


def verdict(used: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> bool:
    """True if a pod wanting ``wanted`` is rejected by a node whose one pod uses ``used``."""
    cache = make_cache([make_node("n")], [pod_using(*used, name="existing", node_name="n")] if used else [])
    snapshot = cache.snapshot()
    plugin = NodePorts(handle=FakeHandle(cache))
    pod = pod_info(pod_using(*wanted))
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status.is_success
    result = plugin.filter(state, pod, slots(snapshot), snapshot)
    if result is None:
        return False
    status = result.status_at(0)
    assert status.code is Code.UNSCHEDULABLE
    assert status.reasons == (ERR_REASON,)
    return bool(result.rejected[0])


@pytest.mark.parametrize(
    ("used", "wanted", "rejected"),
    [
        pytest.param([], [port(80)], False, id="node-uses-nothing"),
        pytest.param([port(80)], [port(80)], True, id="same-port-default-ip"),
        pytest.param([port(80)], [port(81)], False, id="other-port"),
        pytest.param([port(80, "UDP")], [port(80)], False, id="udp-vs-tcp"),
        pytest.param([port(80, "UDP")], [port(80, "UDP")], True, id="udp-vs-udp"),
        pytest.param([port(80, "TCP")], [port(80)], True, id="empty-protocol-is-tcp"),
        pytest.param([port(80, "SCTP")], [port(80, "SCTP")], True, id="sctp"),
        pytest.param([port(80, host_ip="10.0.0.1")], [port(80, host_ip="10.0.0.2")], False, id="different-ips"),
        pytest.param([port(80, host_ip="10.0.0.1")], [port(80, host_ip="10.0.0.1")], True, id="same-ip"),
        pytest.param([port(80, host_ip="10.0.0.1")], [port(80)], True, id="wanted-any-ip-vs-specific"),
        pytest.param([port(80)], [port(80, host_ip="10.0.0.1")], True, id="used-any-ip-vs-specific"),
        pytest.param([port(80, host_ip="0.0.0.0")], [port(80, host_ip="10.0.0.2")], True, id="explicit-any-ip"),
        pytest.param([port(80, "UDP", "10.0.0.1")], [port(80, "TCP", "10.0.0.1")], False, id="same-ip-other-proto"),
        pytest.param([port(80), port(443)], [port(8080), port(443)], True, id="one-of-several"),
        pytest.param([port(0)], [port(80)], False, id="zero-host-port-not-used"),
    ],
)
def test_filter_conflicts(used: list[dict[str, Any]], wanted: list[dict[str, Any]], rejected: bool) -> None:
    assert verdict(used, wanted) is rejected


def test_pre_filter_skips_pod_without_host_ports() -> None:
    cache = make_cache([make_node("n")])
    plugin = NodePorts(handle=FakeHandle(cache))
    pod = pod_info(pod_using(port(0), {"containerPort": 80}))
    result, status = plugin.pre_filter(CycleState(), pod, cache.snapshot())
    assert result is None
    assert status.is_skip


@pytest.mark.parametrize(
    ("init_restart_policy", "counted"),
    [pytest.param("Always", True, id="sidecar-counts"), pytest.param("", False, id="plain-init-ignored")],
)
def test_init_container_ports(init_restart_policy: str, counted: bool) -> None:
    existing = pod_using(port(9000), name="existing", node_name="n")
    cache = make_cache([make_node("n")], [existing])
    snapshot = cache.snapshot()
    plugin = NodePorts(handle=FakeHandle(cache))
    pod = pod_info(
        make_pod(
            spec={
                "initContainers": [container(port(9000), restart_policy=init_restart_policy)],
                "containers": [container()],
            }
        )
    )
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status.is_skip is not counted
    if counted:
        result = plugin.filter(state, pod, slots(snapshot), snapshot)
        assert result is not None
        assert result.rejected.tolist() == [True]


def test_existing_sidecar_ports_are_used() -> None:
    existing = make_pod(
        "existing",
        node_name="n",
        spec={"initContainers": [container(port(7000), restart_policy="Always")], "containers": [container()]},
    )
    cache = make_cache([make_node("n")], [existing])
    snapshot = cache.snapshot()
    plugin = NodePorts(handle=FakeHandle(cache))
    pod = pod_info(pod_using(port(7000)))
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    result = plugin.filter(state, pod, slots(snapshot), snapshot)
    assert result is not None
    assert result.rejected.tolist() == [True]


def test_filter_vectorised_over_many_nodes_and_candidate_subset() -> None:
    nodes = [make_node(f"n{i}") for i in range(6)]
    pods = [
        pod_using(port(80), name="p1", node_name="n1"),
        pod_using(port(80, host_ip="10.0.0.9"), name="p3", node_name="n3"),
        pod_using(port(81), name="p4", node_name="n4"),
        pod_using(port(80), name="p5", node_name="n5"),
    ]
    cache = make_cache(nodes, pods)
    snapshot = cache.snapshot()
    plugin = NodePorts(handle=FakeHandle(cache))
    pod = pod_info(pod_using(port(80, host_ip="10.0.0.1")))
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    candidates = slots(snapshot, ["n0", "n1", "n3", "n4"])  # n5 already filtered out by an earlier plugin
    result = plugin.filter(state, pod, candidates, snapshot)
    assert result is not None
    assert result.rejected.tolist() == [False, True, False, False]


def test_ports_freed_when_pod_leaves_and_after_assume_forget() -> None:
    holder = pod_using(port(80), name="holder", node_name="n")
    cache = make_cache([make_node("n")], [holder])
    plugin = NodePorts(handle=FakeHandle(cache))
    pod = pod_info(pod_using(port(80)))

    def rejected() -> bool:
        snapshot = cache.snapshot()
        state = CycleState()
        plugin.pre_filter(state, pod, snapshot)
        result = plugin.filter(state, pod, slots(snapshot), snapshot)
        return result is not None and bool(result.rejected.any())

    assert rejected()
    cache.remove_pod(holder["metadata"]["uid"])
    assert not rejected()
    assumed = cache.assume(pod_info(pod_using(port(80), name="other")), "n")
    assert rejected()
    cache.forget(assumed.uid)
    assert not rejected()


def test_node_removed_and_slot_reused_does_not_inherit_ports() -> None:
    holder = pod_using(port(80), name="holder", node_name="old")
    cache = make_cache([make_node("old")], [holder])
    cache.remove_node("old")
    cache.add_or_update_node(make_node("new"))  # takes the freed slot
    snapshot = cache.snapshot()
    plugin = NodePorts(handle=FakeHandle(cache))
    pod = pod_info(pod_using(port(80)))
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    assert plugin.filter(state, pod, slots(snapshot), snapshot) is None


def test_two_pods_sharing_a_port_keep_it_used_until_both_leave() -> None:
    first = pod_using(port(80), name="a", node_name="n")
    second = pod_using(port(80), name="b", node_name="n")
    cache = make_cache([make_node("n")], [first, second])
    cache.remove_pod(first["metadata"]["uid"])
    assert cache.host_port_users == {("TCP", 80): {cache.node("n").slot: {"0.0.0.0": 1}}}  # type: ignore[union-attr]
    cache.remove_pod(second["metadata"]["uid"])
    assert cache.host_port_users == {}


def test_filter_without_pre_filter_is_an_error() -> None:
    cache = make_cache([make_node("n")])
    snapshot = cache.snapshot()
    with pytest.raises(KeyError):
        NodePorts(handle=FakeHandle(cache)).filter(
            CycleState(), pod_info(pod_using(port(80))), np.asarray([0], dtype=np.int64), snapshot
        )


def test_reason_string() -> None:
    assert ERR_REASON == "node(s) didn't have free ports for the requested pod ports"


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------
POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent) -> QueueingHint:
    """Run the hint NodePorts registered for ``event`` (exactly one registration matches)."""
    return hint_for(NodePorts(handle=FakeHandle()), event)(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in NodePorts(handle=FakeHandle()).events_to_register()] == [
        ClusterEvent(EventResource.POD, ActionType.DELETE),
        ClusterEvent(EventResource.NODE, ActionType.ADD),
    ]


PORT_POD = pod_info(
    make_pod("web", spec={"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]})
)


def _port_pod(host_port: int, *, node_name: str = "n1", protocol: str = "TCP", host_ip: str = "") -> dict[str, Any]:
    port: dict[str, Any] = {"containerPort": 80, "hostPort": host_port, "protocol": protocol}
    if host_ip:
        port["hostIP"] = host_ip
    return make_pod("old", node_name=node_name, spec={"containers": [{"name": "c", "ports": [port]}]})


@pytest.mark.parametrize(
    ("deleted", "expected"),
    [
        (_port_pod(8080), QUEUE),
        (_port_pod(9090), QUEUE_SKIP),
        (_port_pod(8080, protocol="UDP"), QUEUE_SKIP),
        (_port_pod(8080, host_ip="10.0.0.1"), QUEUE),  # the wanted 0.0.0.0 conflicts with any IP
        (_port_pod(8080, node_name=""), QUEUE_SKIP),
        (make_pod("plain", node_name="n1"), QUEUE_SKIP),
    ],
    ids=["same-port", "other-port", "other-protocol", "specific-ip", "unbound", "no-ports"],
)
def test_node_ports_pod_delete_hint(deleted: dict[str, Any], expected: QueueingHint) -> None:
    assert hint(PORT_POD, deleted, None, event=POD_DELETE) is expected
