"""The operator schedules: pods of each profile are bound and reported as kube-scheduler reports them.

Acceptance of the operator issue, first bullet: pods naming each profile are bound, each with a
``Scheduled`` event; a pod asking for more than any node has stays Pending with upstream's
``FailedScheduling`` text and a ``PodScheduled=False`` condition; freeing capacity (deleting a pod) or
adding a node gets it scheduled within the backoff bounds, i.e. driven by the cluster event, not by the
5-minute flush. Everything is observed from outside the operator process: the API server only.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections import Counter
from typing import Any

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    operator_command,
    pod_condition,
    pod_events,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
    wait_scheduled_events,
)

#: Backoff settings for the requeue tests: small, so the bound asserted below is tight.
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 2.0
#: The scheduling loop flushes completed backoffs once a second (app.run_profile), on top of the backoff.
FLUSH_PERIOD = 1.0
#: Watch delivery, the cycle, the Binding and our polling on a loaded 2-core machine.
SLACK = 5.0


def _unique_label() -> dict[str, str]:
    return {"e2e-group": secrets.token_hex(4)}


#: DefaultPreemption's verdicts on a node, as the ``preemption: ...`` part of the FailedScheduling text says them.
NOT_HELPFUL = "Preemption is not helpful for scheduling"
#: DynamicResources' PostFilter for a pod without claims; it runs before DefaultPreemption (upstream 1.36).
NO_CLAIMS = "no new claims to deallocate, "
NO_VICTIMS = "No preemption victims found for incoming pod"


def _expected_insufficient(cluster: Cluster, mine: list[str], resource: str, *, preemption: str = NOT_HELPFUL) -> str:
    """Upstream's FitError text when each of ``mine`` lacks ``resource`` and the others miss the selector.

    On the local cluster the test's nodes are the only ones; elsewhere the other nodes fail NodeAffinity
    (the pods select the test's nodes by label), which comes first in the default filter order. The default
    profile runs DefaultPreemption, whose part follows: ``preemption`` on the test's nodes (nothing a pod that
    could never fit there may evict, or no lower-priority pod to evict), "not helpful" on the others.
    """
    total = len(cluster.core.list_node().items)
    reasons = [f"{len(mine)} Insufficient {resource}"]
    if total > len(mine):
        reasons.append(f"{total - len(mine)} node(s) didn't match Pod's node affinity/selector")
    verdicts = Counter({preemption: len(mine)})
    verdicts[NOT_HELPFUL] += total - len(mine)
    after = ", ".join(sorted(f"{count} {verdict}" for verdict, count in verdicts.items() if count))
    fit_error = f"0/{total} nodes are available: {', '.join(sorted(reasons))}."
    return f"{fit_error} {NO_CLAIMS}preemption: 0/{total} nodes are available: {after}."


def test_pods_of_each_profile_are_bound_with_a_scheduled_event(
    cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    labels = _unique_label()
    nodes = [kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(3)]
    names = [
        profiles({}, suffix="default"),
        profiles(
            {
                "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit"}]}},
                "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}],
            },
            suffix="binpack",
        ),
        profiles(
            {
                "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
                "explain": {"successes": True},  # bound pods keep their scores for /explain
            },
            suffix="nobal",
        ),
    ]
    for name in names:
        wait_profile_status(cluster.api, name, ready=True)
    # A pod of a scheduler nobody hosts: the operator must leave it alone.
    foreign = pod_manifest("foreign", "not-a-kopf-scheduler-profile", cpu="100m", node_selector=labels)
    pods = [foreign] + [
        pod_manifest(f"{name.rsplit('-', 1)[-1]}-{i}", name, cpu="100m", node_selector=labels)
        for name in names
        for i in range(3)
    ]
    create_pods(cluster.core, namespace, pods)
    ours = {p["metadata"]["name"]: p["spec"]["schedulerName"] for p in pods[1:]}
    bound = wait_pods_bound(cluster.core, namespace, ours, timeout=60)
    assert set(bound.values()) <= set(nodes)

    all_events = wait_scheduled_events(cluster.api, namespace, ours)
    for pod_name, profile in ours.items():
        scheduled = pod_events(cluster.api, namespace, pod_name, reason="Scheduled", events=all_events)
        assert len(scheduled) == 1, f"{pod_name}: {[(e.reason, e.note) for e in scheduled]}"
        event = scheduled[0]
        assert event.type == "Normal"
        assert event.action == "Binding"
        assert event.reporting_controller == profile
        assert event.reporting_instance.startswith(f"{profile}-")
        assert event.note == f"Successfully assigned {namespace}/{pod_name} to {bound[pod_name]}"
        assert event.regarding.namespace == namespace
        failed = pod_events(cluster.api, namespace, pod_name, reason="FailedScheduling", events=all_events)
        assert failed == []
        pod = cluster.core.read_namespaced_pod(pod_name, namespace)
        condition = pod_condition(pod)
        assert condition is not None
        assert condition.status == "True"

    # By now the operator has handled every pod created with the foreign one, in one burst.
    foreign_pod = cluster.core.read_namespaced_pod("foreign", namespace)
    assert foreign_pod.spec.node_name is None
    assert pod_events(cluster.api, namespace, "foreign", events=all_events) == []
    assert pod_condition(foreign_pod) is None
    assert operator.scheduled_count() == len(ours)
    for profile in names:
        assert operator.scheduled_count(profile) == 3
    _assert_success_accounts(operator, namespace, bound, ours, explained_profile=names[2])


def _assert_success_accounts(
    operator: OperatorProcess, namespace: str, bound: dict[str, str], ours: dict[str, str], *, explained_profile: str
) -> None:
    """A pod of the profile with ``spec.explain.successes`` is explained by the node it was bound to, first among
    its runners-up, each with per-plugin weighted scores that add up to the total selectHost compared; a pod of
    another profile has no account (its failures are forgotten once bound, and it keeps no success)."""
    for pod_name, profile in ours.items():
        explained = _explain(operator, namespace, pod_name, "--json")
        if profile != explained_profile:
            assert explained.returncode == 1, explained.stdout
            continue
        assert explained.returncode == 0, explained.stderr
        account = json.loads(explained.stdout)
        assert (account["result"], account["node"], account["profile"]) == ("Scheduled", bound[pod_name], profile)
        candidates = account["candidates"]
        assert candidates[0] == {**candidates[0], "node": bound[pod_name], "chosen": True}
        assert len(candidates) == min(4, account["feasibleNodes"])
        plugins = {p["name"]: p["weight"] for p in account["scorePlugins"]}
        assert "NodeResourcesBalancedAllocation" not in plugins
        assert "NodeResourcesFit" in plugins
        for candidate in candidates:
            assert set(candidate["plugins"]) == set(plugins)
            for name, score in candidate["plugins"].items():
                assert score["weight"] == plugins[name]
                assert score["weighted"] == score["normalized"] * score["weight"]
                assert 0 <= score["normalized"] <= 100
            assert sum(s["weighted"] for s in candidate["plugins"].values()) == candidate["total"]
        assert all(c["total"] <= candidates[0]["total"] for c in candidates)
    pod_name = next(p for p, profile in ours.items() if profile == explained_profile)
    text = _explain(operator, namespace, pod_name)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"Pod {namespace}/{pod_name}: Scheduled on {bound[pod_name]} (profile ")
    assert f"{bound[pod_name]} (chosen)  " in text.stdout


def _failed_scheduling(cluster: Cluster, namespace: str, pod: str) -> list[Any]:
    return pod_events(cluster.api, namespace, pod, reason="FailedScheduling")


def _wait_unschedulable(cluster: Cluster, namespace: str, pod_name: str, message: str, timeout: float = 30.0) -> None:
    """Wait for a FailedScheduling event with ``message`` and the matching PodScheduled=False condition."""

    def reported() -> bool:
        pod = cluster.core.read_namespaced_pod(pod_name, namespace)
        condition = pod_condition(pod)
        return bool(_failed_scheduling(cluster, namespace, pod_name)) and condition is not None

    wait_for(reported, timeout=timeout, message=f"{pod_name}: no FailedScheduling event and condition")
    pod = cluster.core.read_namespaced_pod(pod_name, namespace)
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"
    condition = pod_condition(pod)
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", message)
    events = _failed_scheduling(cluster, namespace, pod_name)
    assert {e.note for e in events} == {message}
    for event in events:
        assert event.type == "Warning"
        assert event.action == "Scheduling"
        assert event.regarding.name == pod_name
        assert event.regarding.uid == pod.metadata.uid


def test_unschedulable_pod_reports_upstream_text_and_is_scheduled_after_a_pod_is_deleted(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    """Too big for every node: Pending, explained; deleting a blocker frees room within the backoff bound."""
    operator = operator_factory(
        extra_args=[
            "--pod-initial-backoff-seconds",
            str(INITIAL_BACKOFF),
            "--pod-max-backoff-seconds",
            str(MAX_BACKOFF),
        ]
    )
    labels = _unique_label()
    nodes = [kwok_nodes(cpu="2", memory="8Gi", labels=labels) for _ in range(3)]
    profile = profiles({})
    wait_profile_status(cluster.api, profile, ready=True)

    # Far more than any node has: upstream's exact text, condition and event.
    create_pods(cluster.core, namespace, [pod_manifest("huge", profile, cpu="3", node_selector=labels)])
    message = _expected_insufficient(cluster, nodes, "cpu")
    _wait_unschedulable(cluster, namespace, "huge", message)
    # What kube-scheduler cannot say: which node failed for which plugin (`kopf-scheduler explain`).
    explained = _explain(operator, namespace, "huge")
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[1] == message
    table = [line.split(None, 2) for line in lines]
    rows = {fields[0]: fields[1:] for fields in table if fields and fields[0] in nodes}
    assert rows == {node: ["NodeResourcesFit", "Insufficient cpu"] for node in nodes}

    # Fill every node with a 1.5-cpu blocker; a 1-cpu pod then fits nowhere.
    blockers = [pod_manifest(f"blocker-{i}", profile, cpu="1500m", node_selector=labels) for i in range(3)]
    create_pods(cluster.core, namespace, blockers)
    wait_pods_bound(cluster.core, namespace, [b["metadata"]["name"] for b in blockers], timeout=30)
    create_pods(cluster.core, namespace, [pod_manifest("waiting", profile, cpu="1", node_selector=labels)])
    # It would fit where a blocker runs, but the blockers' priority is no lower than its own: no victims.
    _wait_unschedulable(
        cluster, namespace, "waiting", _expected_insufficient(cluster, nodes, "cpu", preemption=NO_VICTIMS)
    )
    # Both pods are parked in the unschedulable queue: only a cluster event (or the 5-minute flush) moves them.
    wait_for(
        lambda: operator.metric("scheduler_pending_pods", queue="unschedulable") == 2,
        timeout=15,
        message=lambda: f"pending pods: {operator.metrics_text().count('scheduler_pending_pods')}",
    )
    victim = cluster.core.read_namespaced_pod("blocker-1", namespace)
    freed = time.monotonic()
    cluster.core.delete_namespaced_pod("blocker-1", namespace, grace_period_seconds=0)
    bound = wait_pods_bound(cluster.core, namespace, ["waiting"], timeout=60)
    elapsed = time.monotonic() - freed
    assert bound["waiting"] == victim.spec.node_name
    assert elapsed <= MAX_BACKOFF + FLUSH_PERIOD + SLACK, f"scheduled {elapsed:.1f}s after the room appeared"
    events = wait_scheduled_events(cluster.api, namespace, ["waiting"])
    scheduled = pod_events(cluster.api, namespace, "waiting", reason="Scheduled", events=events)
    assert [e.note for e in scheduled] == [f"Successfully assigned {namespace}/waiting to {bound['waiting']}"]
    # Bound: its last failure explains nothing any more.
    wait_for(lambda: _explain(operator, namespace, "waiting").returncode == 1, timeout=10, message="still explained")
    # "huge" still fits nowhere: still Pending and explained.
    assert cluster.core.read_namespaced_pod("huge", namespace).spec.node_name is None


def _explain(operator: OperatorProcess, namespace: str, pod: str, *extra: str) -> subprocess.CompletedProcess[str]:
    # The kubeconfig's token (the admin, in system:masters) over HTTPS; the certificate is self-signed.
    url = f"https://127.0.0.1:{operator.metrics_port}"
    command = [*operator_command(), "explain", f"{namespace}/{pod}", "--url", url, "--insecure-skip-tls-verify"]
    command += ["--kubeconfig", str(operator.kubeconfig), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_unschedulable_pod_is_scheduled_after_a_node_is_added(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    """A new node that fits (once its not-ready taint is lifted) takes the pod within the backoff bound."""
    operator_factory(
        extra_args=[
            "--pod-initial-backoff-seconds",
            str(INITIAL_BACKOFF),
            "--pod-max-backoff-seconds",
            str(MAX_BACKOFF),
        ]
    )
    labels = _unique_label()
    small = [kwok_nodes(cpu="1", memory="8Gi", labels=labels) for _ in range(2)]
    profile = profiles({})
    wait_profile_status(cluster.api, profile, ready=True)
    create_pods(cluster.core, namespace, [pod_manifest("big", profile, cpu="3", node_selector=labels)])
    _wait_unschedulable(cluster, namespace, "big", _expected_insufficient(cluster, small, "cpu"))

    big_node = kwok_nodes(cpu="4", memory="8Gi", labels=labels)  # returns once Ready and untainted
    ready_at = time.monotonic()
    bound = wait_pods_bound(cluster.core, namespace, ["big"], timeout=60)
    elapsed = time.monotonic() - ready_at
    assert bound["big"] == big_node
    assert elapsed <= MAX_BACKOFF + FLUSH_PERIOD + SLACK, f"scheduled {elapsed:.1f}s after the node became usable"
    pod = cluster.core.read_namespaced_pod("big", namespace)
    assert pod_condition(pod).status == "True"


#: A feature kubelets of 1.36 declare (gate RestartAllContainersOnContainerExits, beta and on) and that pods
#: require through a ``RestartAllContainers`` restart rule (NodeDeclaredFeatures, upstream's default profile).
RESTART_ALL_FEATURE = "RestartAllContainersOnContainerExits"
RESTART_ALL_CONTAINER = {
    "name": "c",
    "image": "registry.k8s.io/pause:3.10",
    "restartPolicy": "Never",
    "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}],
}


def _declare_features(cluster: Cluster, node: str, features: list[str]) -> None:
    """What a 1.36 kubelet publishes in ``status.declaredFeatures`` (kwok leaves the field alone)."""
    cluster.core.patch_node_status(node, {"status": {"declaredFeatures": sorted(features)}})


def _declared_features(cluster: Cluster, node: str) -> list[str]:
    # The raw object: the Python client's models may predate the field.
    raw = json.loads(cluster.core.read_node(node, _preload_content=False).data)
    return list(raw["status"].get("declaredFeatures") or [])


def test_pod_requiring_a_node_feature_goes_to_a_declaring_node_or_waits_for_one(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
) -> None:
    """NodeDeclaredFeatures: only nodes whose status declares the inferred feature fit; a node that starts
    declaring it (UpdateNodeDeclaredFeature) takes a pod that waited for it."""
    operator_factory(
        extra_args=[
            "--pod-initial-backoff-seconds",
            str(INITIAL_BACKOFF),
            "--pod-max-backoff-seconds",
            str(MAX_BACKOFF),
        ]
    )
    labels = _unique_label()
    declaring = kwok_nodes(cpu="4", memory="8Gi", labels={**labels, "e2e-ndf": "declaring"})
    plain = kwok_nodes(cpu="4", memory="8Gi", labels={**labels, "e2e-ndf": "plain"})
    _declare_features(cluster, declaring, ["ExtendWebSocketsToKubelet", RESTART_ALL_FEATURE])
    profile = profiles({})
    status = wait_profile_status(cluster.api, profile, ready=True)["status"]
    assert "NodeDeclaredFeatures" not in status.get("omittedDefaultPlugins", [])
    assert [p["name"] for p in status["effectivePlugins"]["filter"]][-1] == "NodeDeclaredFeatures"

    needs_feature = {"containers": [RESTART_ALL_CONTAINER]}
    pods = [
        pod_manifest(f"restart-all-{i}", profile, cpu="100m", node_selector=labels, spec=needs_feature)
        for i in range(3)
    ]
    create_pods(cluster.core, namespace, pods)
    bound = wait_pods_bound(cluster.core, namespace, [p["metadata"]["name"] for p in pods], timeout=60)
    assert set(bound.values()) == {declaring}
    # kwok's heartbeats kept the field (it is no model field of kwok's own).
    assert _declared_features(cluster, declaring) == ["ExtendWebSocketsToKubelet", RESTART_ALL_FEATURE]

    # Only the non-declaring node is selected: Pending with upstream's text, the other nodes failing NodeAffinity.
    create_pods(
        cluster.core,
        namespace,
        [pod_manifest("stuck", profile, cpu="100m", node_selector={**labels, "e2e-ndf": "plain"}, spec=needs_feature)],
    )
    total = len(cluster.core.list_node().items)
    reasons = ["1 node(s) didn't match Pod's required features"]
    reasons.append(f"{total - 1} node(s) didn't match Pod's node affinity/selector")
    # Both reasons are UnschedulableAndUnresolvable, so DefaultPreemption finds no node worth trying.
    preemption = f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
    expected = f"0/{total} nodes are available: {', '.join(sorted(reasons))}. {NO_CLAIMS}{preemption}"
    _wait_unschedulable(cluster, namespace, "stuck", expected)

    # The node starts declaring the feature: the update event requeues the pod, which is bound there.
    declared_at = time.monotonic()
    _declare_features(cluster, plain, [RESTART_ALL_FEATURE])
    bound = wait_pods_bound(cluster.core, namespace, ["stuck"], timeout=60)
    elapsed = time.monotonic() - declared_at
    assert bound["stuck"] == plain
    assert elapsed <= MAX_BACKOFF + FLUSH_PERIOD + SLACK, f"scheduled {elapsed:.1f}s after the node declared it"
