"""Preemption end to end: DefaultPreemption in the real operator process against the real API server.

What kube-scheduler v1.36.3 does when a pod fits nowhere and lower-priority pods could make room
(``schedule_one.go`` handleSchedulingFailure/updatePod, ``framework/preemption/executor.go``), observed from
outside the operator only:

- the minimal victim set on the cheapest node is evicted: the victim gets ``DisruptionTarget`` (reason
  ``PreemptionByScheduler``) and a ``Preempted`` event, the preemptor ``status.nominatedNodeName`` and then a
  Binding to that node;
- a pod a PodDisruptionBudget protects is spared when another candidate exists;
- ``preemptionPolicy: Never`` waits and evicts nobody, and its FailedScheduling says why (``preemption: ...``);
- an operator SIGKILLed in the middle of a preemption loses no pod, and the next one finishes the job.

Victims carry a test finalizer, so their deletion (``deletionTimestamp``) and their DisruptionTarget condition
stay observable until the test lets them go; meanwhile the preemptor waits for the room, as upstream's does.
Priorities come from PriorityClasses (the Priority admission plugin refuses a bare ``spec.priority``).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    pod_condition,
    pod_events,
    pod_manifest,
    pod_nodes,
    wait_for,
    wait_profile_status,
)

#: Keeps a victim's object (with its deletionTimestamp and conditions) until the test removes it.
HOLD = "e2e.kopf-scheduler.io/hold"
#: The default profile: DefaultPreemption is one of its PostFilter plugins, as in kube-scheduler.
PROFILE: dict[str, Any] = {}
#: Short backoffs, so a preemptor retried after its victims left is bound within seconds.
BACKOFF_ARGS = ("--pod-initial-backoff-seconds", "0.5", "--pod-max-backoff-seconds", "2")

PriorityClasses = Callable[..., str]


@pytest.fixture
def priority_classes(cluster: Cluster) -> Iterator[PriorityClasses]:
    """``make(value, *, never=False) -> name``: PriorityClasses unique to this test, deleted afterwards."""
    api = client.SchedulingV1Api(cluster.api)
    created: list[str] = []
    token = secrets.token_hex(3)

    def make(value: int, *, never: bool = False) -> str:
        name = f"e2e-{token}-{value}{'-never' if never else ''}"
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        if never:
            body["preemptionPolicy"] = "Never"
        api.create_priority_class(body)
        created.append(name)
        return name

    yield make
    for name in created:
        with contextlib.suppress(ApiException):
            api.delete_priority_class(name)


@pytest.fixture
def release_held(cluster: Cluster, namespace: str) -> Iterator[Callable[[], None]]:
    """``release()`` drops the hold finalizer from every pod of the namespace (also done after the test, so
    the namespace and the nodes can go)."""

    def release() -> None:
        for pod in cluster.core.list_namespaced_pod(namespace).items:
            if HOLD in (pod.metadata.finalizers or []):
                finalizers = [f for f in pod.metadata.finalizers if f != HOLD]
                patch = [{"op": "replace", "path": "/metadata/finalizers", "value": finalizers}]  # a JSON patch
                try:
                    cluster.core.patch_namespaced_pod(pod.metadata.name, namespace, patch)
                except ApiException as e:
                    if e.status != 404:
                        raise

    yield release
    release()


def running_pod(
    name: str, scheduler: str, node: str, priority_class: str, cpu: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A low-priority pod placed on ``node`` directly (spec.nodeName), held by the test finalizer."""
    pod = pod_manifest(
        name, scheduler, cpu=cpu, labels=labels, spec={"nodeName": node, "priorityClassName": priority_class}
    )
    pod["metadata"]["finalizers"] = [HOLD]
    return pod


def preemptor(name: str, scheduler: str, priority_class: str, cpu: str, selector: dict[str, str]) -> dict[str, Any]:
    return pod_manifest(name, scheduler, cpu=cpu, node_selector=selector, spec={"priorityClassName": priority_class})


def read_pod(cluster: Cluster, namespace: str, name: str) -> Any | None:
    try:
        return cluster.core.read_namespaced_pod(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def terminating(cluster: Cluster, namespace: str) -> set[str]:
    """The pods of the namespace whose deletion has begun (preemption's victims, held by the finalizer)."""
    return {p.metadata.name for p in cluster.core.list_namespaced_pod(namespace).items if p.metadata.deletion_timestamp}


def nominated_node(cluster: Cluster, namespace: str, name: str) -> str | None:
    pod = read_pod(cluster, namespace, name)
    return (pod.status.nominated_node_name or None) if pod is not None and pod.status else None


def wait_running(cluster: Cluster, namespace: str, names: list[str], timeout: float = 60) -> None:
    """kwok marks the directly placed pods Running (and Ready), as a kubelet would."""

    def check() -> bool:
        pods = {p.metadata.name: p for p in cluster.core.list_namespaced_pod(namespace).items}
        return all(n in pods and pods[n].status.phase == "Running" for n in names)

    wait_for(check, timeout=timeout, message=f"pods {names} not Running")


def bound_within(cluster: Cluster, namespace: str, name: str, operator: OperatorProcess, timeout: float = 60) -> str:
    """The node the pod is bound to within ``timeout``; on failure, its status and events say why not."""

    def describe() -> str:
        pod = read_pod(cluster, namespace, name)
        notes = [f"{e.reason}: {e.note}" for e in pod_events(cluster.api, namespace, name)]
        return f"{name} unbound: {pod.status if pod else 'gone'}\nevents: {notes}\n{operator.log_tail()}"

    def node() -> str | None:
        pod = read_pod(cluster, namespace, name)
        return pod.spec.node_name if pod is not None else None

    return wait_for(node, timeout=timeout, interval=0.25, message=describe)


def start(
    cluster: Cluster, operator_factory: OperatorFactory, profiles: ProfileFactory, name: str = "operator"
) -> tuple[OperatorProcess, str]:
    operator = operator_factory(extra_args=BACKOFF_ARGS, name=name)
    profile = profiles(PROFILE)
    wait_profile_status(cluster.api, profile, ready=True)
    return operator, profile


def test_a_high_priority_pod_evicts_the_minimal_victim_set_and_is_bound_where_it_made_room(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    priority_classes: PriorityClasses,
    release_held: Callable[[], None],
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    expensive, cheap = (kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(2))
    low, mid, high, top = (priority_classes(v) for v in (10, 20, 30, 1000))
    operator, profile = start(cluster, operator_factory, profiles)
    # The expensive node: one pod of priority 50 > anything on the cheap node (upstream's first criterion:
    # the lowest highest-priority victim). The cheap node: removing only the lowest pod makes room.
    important = priority_classes(50)
    create_pods(
        cluster.core,
        namespace,
        [
            running_pod("important", profile, expensive, important, "4"),
            running_pod("a-low", profile, cheap, low, "1"),
            running_pod("b-mid", profile, cheap, mid, "1"),
            running_pod("c-high", profile, cheap, high, "2"),
        ],
    )
    wait_running(cluster, namespace, ["important", "a-low", "b-mid", "c-high"])
    create_pods(cluster.core, namespace, [preemptor("vip", profile, top, "1", labels)])

    victims = wait_for(lambda: terminating(cluster, namespace), timeout=60, message=lambda: operator.log_tail())
    assert victims == {"a-low"}, operator.log_tail()
    victim = read_pod(cluster, namespace, "a-low")
    condition = pod_condition(victim, "DisruptionTarget")
    assert condition is not None, victim.status.conditions
    assert (condition.status, condition.reason) == ("True", "PreemptionByScheduler")
    assert wait_for(lambda: nominated_node(cluster, namespace, "vip"), timeout=30) == cheap
    vip_uid = cluster.core.read_namespaced_pod("vip", namespace).metadata.uid
    [event] = wait_for(lambda: pod_events(cluster.api, namespace, "a-low", reason="Preempted"), timeout=30)
    assert (event.type, event.action, event.reporting_controller) == ("Normal", "Preempting", profile)
    assert event.note == f"Preempted by pod {vip_uid} on node {cheap}"
    # The room is there only once the victim is gone: until then the preemptor waits, unbound, evicting nobody else.
    time.sleep(2)
    assert nominated_node(cluster, namespace, "vip") == cheap
    assert cluster.core.read_namespaced_pod("vip", namespace).spec.node_name is None
    assert terminating(cluster, namespace) == {"a-low"}

    release_held()
    assert bound_within(cluster, namespace, "vip", operator) == cheap
    wait_for(lambda: read_pod(cluster, namespace, "a-low") is None, timeout=30)
    assert pod_nodes(cluster.core, namespace) == {"important": expensive, "b-mid": cheap, "c-high": cheap, "vip": cheap}
    assert operator.metric("scheduler_preemption_attempts_total") >= 1
    assert operator.metric("scheduler_preemption_victims_count") == 1


def test_a_pod_protected_by_a_pdb_is_spared_when_another_candidate_exists(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    priority_classes: PriorityClasses,
    release_held: Callable[[], None],
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    guarded_node, open_node = (kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(2))
    low, top = priority_classes(10), priority_classes(1000)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    client.PolicyV1Api(cluster.api).create_namespaced_pod_disruption_budget(namespace, pdb)
    operator, profile = start(cluster, operator_factory, profiles)
    create_pods(
        cluster.core,
        namespace,
        [
            running_pod("guarded", profile, guarded_node, low, "4", labels={"app": "guarded"}),
            running_pod("open", profile, open_node, low, "4", labels={"app": "open"}),
        ],
    )
    wait_running(cluster, namespace, ["guarded", "open"])
    create_pods(cluster.core, namespace, [preemptor("vip", profile, top, "2", labels)])

    victims = wait_for(lambda: terminating(cluster, namespace), timeout=60, message=lambda: operator.log_tail())
    assert victims == {"open"}, operator.log_tail()
    assert wait_for(lambda: nominated_node(cluster, namespace, "vip"), timeout=30) == open_node
    release_held()
    assert bound_within(cluster, namespace, "vip", operator) == open_node
    assert read_pod(cluster, namespace, "guarded") is not None


def test_preemption_policy_never_waits_and_evicts_nobody(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    priority_classes: PriorityClasses,
    release_held: Callable[[], None],
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    low, polite = priority_classes(10), priority_classes(1000, never=True)
    operator, profile = start(cluster, operator_factory, profiles)
    create_pods(cluster.core, namespace, [running_pod("incumbent", profile, node, low, "4")])
    wait_running(cluster, namespace, ["incumbent"])
    create_pods(cluster.core, namespace, [preemptor("polite", profile, polite, "1", labels)])

    failed = wait_for(
        lambda: pod_events(cluster.api, namespace, "polite", reason="FailedScheduling"),
        timeout=60,
        message=lambda: operator.log_tail(),
    )
    note = failed[-1].note
    assert note.startswith("0/"), note
    assert "1 Insufficient cpu" in note, note
    assert note.endswith(". preemption: not eligible due to preemptionPolicy=Never."), note
    pod = cluster.core.read_namespaced_pod("polite", namespace)
    assert pod.spec.preemption_policy == "Never"
    assert pod.spec.node_name is None
    assert not pod.status.nominated_node_name
    condition = pod_condition(pod)
    assert condition is not None
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", note)
    time.sleep(2)
    assert terminating(cluster, namespace) == set()
    assert not pod_events(cluster.api, namespace, "incumbent", reason="Preempted")


def test_failed_scheduling_says_why_preemption_cannot_help(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    priority_classes: PriorityClasses,
    release_held: Callable[[], None],
) -> None:
    """Every pod in the way has a higher priority: no victims anywhere, and the message carries that part."""
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="4", memory="16Gi", labels=labels)
    high, low = priority_classes(1000), priority_classes(10)
    operator, profile = start(cluster, operator_factory, profiles)
    create_pods(cluster.core, namespace, [running_pod("boss", profile, node, high, "4")])
    wait_running(cluster, namespace, ["boss"])
    create_pods(cluster.core, namespace, [preemptor("junior", profile, low, "1", labels)])
    failed = wait_for(
        lambda: pod_events(cluster.api, namespace, "junior", reason="FailedScheduling"),
        timeout=60,
        message=lambda: operator.log_tail(),
    )
    note = failed[-1].note
    main, _, preemption = note.partition(" preemption: ")
    assert "1 Insufficient cpu" in main, note
    assert preemption.startswith("0/"), note
    assert "1 No preemption victims found for incoming pod" in preemption, note
    assert terminating(cluster, namespace) == set()
    assert not nominated_node(cluster, namespace, "junior")


def test_an_operator_killed_mid_preemption_loses_no_pod_and_the_next_completes(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    priority_classes: PriorityClasses,
    release_held: Callable[[], None],
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    node, other = (kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(2))
    low, mid, top = priority_classes(10), priority_classes(20), priority_classes(1000)
    first, profile = start(cluster, operator_factory, profiles, name="first")
    create_pods(
        cluster.core,
        namespace,
        [
            running_pod("victim", profile, node, low, "3"),
            running_pod("neighbour", profile, node, mid, "1"),
            running_pod("elsewhere", profile, other, mid, "4"),
        ],
    )
    wait_running(cluster, namespace, ["victim", "neighbour", "elsewhere"])
    create_pods(cluster.core, namespace, [preemptor("vip", profile, top, "3", labels)])
    # SIGKILL as soon as the eviction has begun: the victim is being deleted, the preemptor not bound (and
    # perhaps not even nominated yet).
    wait_for(lambda: terminating(cluster, namespace), timeout=60, message=lambda: first.log_tail())
    first.kill()
    assert terminating(cluster, namespace) == {"victim"}
    assert cluster.core.read_namespaced_pod("vip", namespace).spec.node_name is None

    second = operator_factory(extra_args=BACKOFF_ARGS, name="second")
    second.wait_log("cache reconciled", timeout=60)
    # The victim is still terminating (held): the next operator must neither bind the preemptor beside it nor
    # evict anyone else to make room elsewhere.
    time.sleep(3)
    assert terminating(cluster, namespace) == {"victim"}, second.log_tail()
    assert cluster.core.read_namespaced_pod("vip", namespace).spec.node_name is None
    release_held()
    assert bound_within(cluster, namespace, "vip", second) == node
    wait_for(lambda: read_pod(cluster, namespace, "victim") is None, timeout=30)
    assert pod_nodes(cluster.core, namespace) == {"neighbour": node, "elsewhere": other, "vip": node}
