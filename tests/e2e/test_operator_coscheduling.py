"""Coscheduling (scheduler-plugins' PodGroup API) through the real operator on the local control plane.

The PodGroup CRD is the chart's optional one (charts/kopf-scheduler/files/coscheduling/), applied before the
operator starts, so that discovery finds scheduling.x-k8s.io/v1alpha1 served. A profile enables Coscheduling
as scheduler-plugins documents it (multiPoint, and the queueSort of its own). Pods join a group with the
``scheduling.x-k8s.io/pod-group`` label; the operator keeps the PodGroup's status as scheduler-plugins'
controller would.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    apply_crds,
    create_pods,
    namespace_events,
    pod_manifest,
    pod_nodes,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
    wait_scheduled_events,
)
from tests.unit.test_chart import CHART

GROUP, VERSION, PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
LABEL = "scheduling.x-k8s.io/pod-group"


def coscheduling(**args: Any) -> dict[str, Any]:
    """The profile scheduler-plugins documents (manifests/coscheduling/scheduler-config.yaml), with ``args``."""
    return {
        "plugins": {
            "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
            "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
        },
        "pluginConfig": [{"name": "Coscheduling", "args": args}],
    }


@pytest.fixture(scope="module")
def podgroup_crd(cluster: Cluster) -> list[str]:
    """The chart's optional PodGroup CRD, applied and Established (left in place: CRDs are cluster-wide)."""
    return apply_crds(cluster.api, CHART / "files" / "coscheduling")


def _pod_group(name: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, **spec},
    }


def _create_group(cluster: Cluster, namespace: str, name: str, min_member: int, **spec: Any) -> None:
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _pod_group(name, min_member, **spec)
    )


def _group_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return dict(obj.get("status") or {})


def _member(name: str, profile: str, group: str, labels: dict[str, str], cpu: str, **spec: Any) -> dict[str, Any]:
    pod = pod_manifest(name, profile, cpu=cpu, node_selector=labels, labels={LABEL: group}, spec=spec)
    return pod


def _failed_scheduling(cluster: Cluster, namespace: str, pod: str) -> list[str]:
    return [
        e.note or ""
        for e in namespace_events(cluster.api, namespace)
        if e.reason == "FailedScheduling" and e.regarding.name == pod
    ]


def test_a_group_of_four_binds_nothing_with_three_pods_and_all_once_the_fourth_arrives(
    cluster: Cluster,
    podgroup_crd: list[str],
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="8", memory="16Gi", labels=labels)
    profile = profiles(coscheduling(permitWaitingTimeSeconds=30))
    operator = operator_factory()
    wait_profile_status(cluster.api, profile, ready=True)
    operator.wait_log("cache reconciled")
    _create_group(cluster, namespace, "gang", 4)

    first = ["w0", "w1", "w2"]
    create_pods(cluster.core, namespace, [_member(name, profile, "gang", labels, "100m") for name in first])
    wait_for(lambda: all(_failed_scheduling(cluster, namespace, name) for name in first), timeout=30)
    assert pod_nodes(cluster.core, namespace) == dict.fromkeys(first)
    for name in first:  # PreFilter's text, as scheduler-plugins words it
        notes = _failed_scheduling(cluster, namespace, name)
        assert any(f"pre-filter pod {name} cannot find enough sibling pods" in note for note in notes), notes
    # The controller's first step: a new group is Pending (and stays so with fewer pods than minMember).
    wait_for(lambda: _group_status(cluster, namespace, "gang").get("phase") == "Pending", timeout=30)

    create_pods(cluster.core, namespace, [_member("w3", profile, "gang", labels, "100m")])
    everyone = [*first, "w3"]
    assert wait_pods_bound(cluster.core, namespace, everyone, timeout=90) == dict.fromkeys(everyone, node)
    wait_scheduled_events(cluster.api, namespace, everyone)
    # kwok runs the pods: the controller's phases go Pending → Scheduling → Running.
    status = wait_for(
        lambda: (s := _group_status(cluster, namespace, "gang")).get("phase") == "Running" and s,
        timeout=60,
        message=lambda: str(_group_status(cluster, namespace, "gang")),
    )
    assert status["running"] == 4
    # v0.34.7 writes no scheduleStartTime (its controller only reads it; the plugin stopped setting it in v0.26).
    assert "scheduleStartTime" not in status
    assert operator.alive()
    assert operator.log_lines("Traceback") == []


def test_a_group_that_cannot_fit_frees_what_it_held_after_its_timeout(
    cluster: Cluster,
    podgroup_crd: list[str],
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    priority_classes: dict[str, str],
) -> None:
    """Room for two of three: two wait at Permit and are released together after scheduleTimeoutSeconds
    (podGroupRejectPercentage 100 keeps PostFilter from rejecting them first); what they held is free again, so a
    2-CPU pod that came meanwhile binds, and the group stays Scheduling with nothing running."""
    labels = {"e2e-group": secrets.token_hex(4)}
    kwok_nodes(cpu="2", memory="16Gi", labels=labels)
    profile = profiles(coscheduling(podGroupRejectPercentage=100))
    operator = operator_factory()
    wait_profile_status(cluster.api, profile, ready=True)
    operator.wait_log("cache reconciled")
    _create_group(cluster, namespace, "big", 3, scheduleTimeoutSeconds=3)
    members = ["b0", "b1", "b2"]
    create_pods(cluster.core, namespace, [_member(name, profile, "big", labels, "1") for name in members])

    def timed_out() -> bool:
        return any(
            "rejected due to timeout after waiting 3s at plugin Coscheduling" in note
            for name in members
            for note in _failed_scheduling(cluster, namespace, name)
        )

    wait_for(timed_out, timeout=60)
    assert pod_nodes(cluster.core, namespace) == dict.fromkeys(members)
    filler = pod_manifest(
        "filler", profile, cpu="2", node_selector=labels, spec={"priorityClassName": priority_classes["high"]}
    )
    create_pods(cluster.core, namespace, [filler])
    wait_pods_bound(cluster.core, namespace, ["filler"], timeout=60)
    time.sleep(2)
    assert {
        name: node for name, node in pod_nodes(cluster.core, namespace).items() if name in members
    } == dict.fromkeys(members)
    status = wait_for(
        lambda: (s := _group_status(cluster, namespace, "big")).get("phase") == "Scheduling" and s, timeout=30
    )
    assert "running" not in status  # nothing ran: the controller writes no zero counts
    assert operator.log_lines("Traceback") == []


@pytest.mark.parametrize(
    ("older", "newer", "winner"),
    [
        pytest.param(("low", "low"), ("high", "high"), "high", id="the higher priority wins over the older"),
        pytest.param(("older", None), ("newer", None), "older", id="at equal priority the older wins"),
    ],
)
def test_of_two_competing_groups_one_is_placed_whole_and_the_other_waits_whole(
    cluster: Cluster,
    podgroup_crd: list[str],
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    priority_classes: dict[str, str],
    older: tuple[str, str | None],
    newer: tuple[str, str | None],
    winner: str,
) -> None:
    """Room for one group of two (2 CPUs each, 4 on the node): the higher-priority group, or at equal priority the
    older one, is placed whole and the other waits whole, never one pod of each. The losing group's pods are
    created first (and sort first by name where it is the newer), so neither order nor names pick the winner."""
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    profile = profiles(coscheduling(permitWaitingTimeSeconds=5))
    _create_group(cluster, namespace, older[0], 2)
    time.sleep(1.1)  # creation timestamps have one-second resolution
    _create_group(cluster, namespace, newer[0], 2)

    def members(group: str, priority: str | None) -> list[dict[str, Any]]:
        spec = {"priorityClassName": priority_classes[priority]} if priority else {}
        return [_member(f"{group}-{i}", profile, group, labels, "2", **spec) for i in range(2)]

    loser = newer if winner == older[0] else older
    first, second = (older, newer) if loser is older else (newer, older)
    create_pods(cluster.core, namespace, [*members(*first), *members(*second)])  # pending before the operator
    operator = operator_factory()
    wait_profile_status(cluster.api, profile, ready=True)
    winners = [f"{winner}-0", f"{winner}-1"]
    assert wait_pods_bound(cluster.core, namespace, winners, timeout=90) == dict.fromkeys(winners, node)
    time.sleep(8)  # longer than the Permit timeout: nothing of the other group may have bound meanwhile
    nodes = pod_nodes(cluster.core, namespace)
    assert (nodes[f"{loser[0]}-0"], nodes[f"{loser[0]}-1"]) == (None, None)
    assert operator.log_lines("Traceback") == []
