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
Priorities come from PriorityClasses (the Priority admission plugin refuses a bare ``spec.priority``). The
pods in the way are placed by ``spec.nodeName``, so the test, not a scheduler, decides what each node holds.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
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


@dataclass
class Scene:
    """One test's nodes, PriorityClasses, operator and profile, and what it reads back from the API server."""

    cluster: Cluster
    namespace: str
    kwok_nodes: NodeFactory
    operator_factory: OperatorFactory
    profiles: ProfileFactory
    labels: dict[str, str] = field(default_factory=lambda: {"e2e-group": secrets.token_hex(4)})
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    priority_classes: list[str] = field(default_factory=list)
    profile: str = ""
    operator: OperatorProcess | None = None

    # -- setting up -----------------------------------------------------------------------------------
    def nodes(self, count: int) -> list[str]:
        return [self.kwok_nodes(cpu="4", memory="16Gi", labels=self.labels) for _ in range(count)]

    def priority(self, value: int, *, never: bool = False) -> str:
        """A PriorityClass of ``value`` (``preemptionPolicy: Never`` if ``never``), deleted after the test."""
        name = f"e2e-{self.token}-{value}{'-never' if never else ''}"
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        if never:
            body["preemptionPolicy"] = "Never"
        client.SchedulingV1Api(self.cluster.api).create_priority_class(body)
        self.priority_classes.append(name)
        return name

    def start(self, name: str = "operator") -> OperatorProcess:
        """An operator replica (short backoffs); the first call also creates the default profile."""
        self.operator = self.operator_factory(extra_args=BACKOFF_ARGS, name=name)
        if not self.profile:
            self.profile = self.profiles(PROFILE)
            wait_profile_status(self.cluster.api, self.profile, ready=True)
        return self.operator

    def place(self, *pods: tuple[str, str, str, str], labels: dict[str, str] | None = None) -> None:
        """Pods ``(name, node, priority class, cpu)`` put on their nodes directly, held by the test
        finalizer, and Running (kwok plays the kubelet) before this returns."""
        manifests = []
        for name, node, priority_class, cpu in pods:
            spec = {"nodeName": node, "priorityClassName": priority_class}
            manifest = pod_manifest(name, self.profile, cpu=cpu, labels=labels, spec=spec)
            manifest["metadata"]["finalizers"] = [HOLD]
            manifests.append(manifest)
        create_pods(self.cluster.core, self.namespace, manifests)
        names = [name for name, *_ in pods]

        def running() -> bool:
            phases = {p.metadata.name: p.status.phase for p in self.pods()}
            return all(phases.get(name) == "Running" for name in names)

        wait_for(running, timeout=60, message=f"pods {names} not Running")

    def submit(self, name: str, priority_class: str, cpu: str) -> None:
        """A pending pod for the profile, restricted to this test's nodes."""
        spec = {"priorityClassName": priority_class}
        pod = pod_manifest(name, self.profile, cpu=cpu, node_selector=self.labels, spec=spec)
        create_pods(self.cluster.core, self.namespace, [pod])

    def release(self) -> None:
        """Drop the hold finalizer from every pod of the namespace: the victims go."""
        for pod in self.pods():
            if HOLD not in (pod.metadata.finalizers or []):
                continue
            finalizers = [f for f in pod.metadata.finalizers if f != HOLD]
            patch = [{"op": "replace", "path": "/metadata/finalizers", "value": finalizers}]  # a JSON patch
            try:
                self.cluster.core.patch_namespaced_pod(pod.metadata.name, self.namespace, patch)
            except ApiException as e:
                if e.status != 404:
                    raise

    # -- reading back ---------------------------------------------------------------------------------
    def pods(self) -> list[Any]:
        return list(self.cluster.core.list_namespaced_pod(self.namespace).items)

    def read(self, name: str) -> Any | None:
        try:
            return self.cluster.core.read_namespaced_pod(name, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def terminating(self) -> set[str]:
        """The pods whose deletion has begun (preemption's victims, held by the finalizer)."""
        return {p.metadata.name for p in self.pods() if p.metadata.deletion_timestamp}

    def nominated(self, name: str) -> str | None:
        pod = self.read(name)
        return (pod.status.nominated_node_name or None) if pod is not None and pod.status else None

    def node_of(self, name: str) -> str | None:
        pod = self.read(name)
        return pod.spec.node_name if pod is not None else None

    def events(self, name: str, reason: str) -> list[Any]:
        return pod_events(self.cluster.api, self.namespace, name, reason=reason)

    def log_tail(self) -> str:
        return self.operator.log_tail() if self.operator is not None else ""

    def wait_victims(self) -> set[str]:
        return wait_for(self.terminating, timeout=60, message=self.log_tail)

    def wait_failed_scheduling(self, name: str) -> str:
        """The note of the pod's latest FailedScheduling event, once there is one."""
        failed = wait_for(lambda: self.events(name, "FailedScheduling"), timeout=60, message=self.log_tail)
        return str(failed[-1].note)

    def bound_within(self, name: str, timeout: float = 60) -> str:
        """The node the pod is bound to within ``timeout``; on failure, its status and events say why not."""

        def describe() -> str:
            pod = self.read(name)
            notes = [f"{e.reason}: {e.note}" for e in pod_events(self.cluster.api, self.namespace, name)]
            return f"{name} unbound: {pod.status if pod else 'gone'}\nevents: {notes}\n{self.log_tail()}"

        return wait_for(lambda: self.node_of(name), timeout=timeout, interval=0.25, message=describe)


@pytest.fixture
def scene(
    cluster: Cluster,
    namespace: str,
    kwok_nodes: NodeFactory,
    operator_factory: OperatorFactory,
    profiles: ProfileFactory,
) -> Iterator[Scene]:
    """The test's Scene; afterwards held pods are released (so the namespace and nodes can go) and the
    PriorityClasses deleted."""
    made = Scene(cluster, namespace, kwok_nodes, operator_factory, profiles)
    yield made
    made.release()
    for name in made.priority_classes:
        with contextlib.suppress(ApiException):
            client.SchedulingV1Api(cluster.api).delete_priority_class(name)


def test_a_high_priority_pod_evicts_the_minimal_victim_set_and_is_bound_where_it_made_room(scene: Scene) -> None:
    expensive, cheap = scene.nodes(2)
    low, mid, high, important, top = (scene.priority(v) for v in (10, 20, 30, 50, 1000))
    operator = scene.start()
    # The expensive node: one pod of priority 50 > anything on the cheap node (upstream's first criterion:
    # the lowest highest-priority victim). The cheap node: removing only the lowest pod makes room.
    scene.place(
        ("important", expensive, important, "4"),
        ("a-low", cheap, low, "1"),
        ("b-mid", cheap, mid, "1"),
        ("c-high", cheap, high, "2"),
    )
    scene.submit("vip", top, "1")

    assert scene.wait_victims() == {"a-low"}, scene.log_tail()
    condition = pod_condition(scene.read("a-low"), "DisruptionTarget")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "PreemptionByScheduler")
    assert wait_for(lambda: scene.nominated("vip"), timeout=30) == cheap
    vip_uid = scene.read("vip").metadata.uid
    [event] = wait_for(lambda: scene.events("a-low", "Preempted"), timeout=30)
    assert (event.type, event.action, event.reporting_controller) == ("Normal", "Preempting", scene.profile)
    assert event.note == f"Preempted by pod {vip_uid} on node {cheap}"
    # The room is there only once the victim is gone: until then the preemptor waits, evicting nobody else.
    time.sleep(2)
    assert scene.nominated("vip") == cheap
    assert scene.node_of("vip") is None
    assert scene.terminating() == {"a-low"}

    scene.release()
    assert scene.bound_within("vip") == cheap
    wait_for(lambda: scene.read("a-low") is None, timeout=30)
    nodes = pod_nodes(scene.cluster.core, scene.namespace)
    assert nodes == {"important": expensive, "b-mid": cheap, "c-high": cheap, "vip": cheap}
    assert operator.metric("scheduler_preemption_attempts_total") >= 1
    assert operator.metric("scheduler_preemption_victims_count") == 1


def test_a_pod_protected_by_a_pdb_is_spared_when_another_candidate_exists(scene: Scene) -> None:
    guarded_node, open_node = scene.nodes(2)
    low, top = scene.priority(10), scene.priority(1000)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    client.PolicyV1Api(scene.cluster.api).create_namespaced_pod_disruption_budget(scene.namespace, pdb)
    scene.start()
    scene.place(("guarded", guarded_node, low, "4"), labels={"app": "guarded"})
    scene.place(("open", open_node, low, "4"), labels={"app": "open"})
    scene.submit("vip", top, "2")

    assert scene.wait_victims() == {"open"}, scene.log_tail()
    assert wait_for(lambda: scene.nominated("vip"), timeout=30) == open_node
    scene.release()
    assert scene.bound_within("vip") == open_node
    assert scene.node_of("guarded") == guarded_node


def test_preemption_policy_never_waits_and_evicts_nobody(scene: Scene) -> None:
    [node] = scene.nodes(1)
    low, polite = scene.priority(10), scene.priority(1000, never=True)
    scene.start()
    scene.place(("incumbent", node, low, "4"))
    scene.submit("polite", polite, "1")

    note = scene.wait_failed_scheduling("polite")
    assert note.startswith("0/"), note
    assert "1 Insufficient cpu" in note, note
    # DynamicResources' PostFilter speaks first (the pod has no claims), as upstream 1.36's default profile.
    assert note.endswith(". no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never."), note
    pod = scene.read("polite")
    assert pod.spec.preemption_policy == "Never"
    assert pod.spec.node_name is None
    assert not pod.status.nominated_node_name
    condition = pod_condition(pod)
    assert condition is not None
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", note)
    time.sleep(2)
    assert scene.terminating() == set()
    assert not scene.events("incumbent", "Preempted")


def test_failed_scheduling_says_why_preemption_cannot_help(scene: Scene) -> None:
    """Every pod in the way has a higher priority: no victims anywhere, and the message carries that part."""
    [node] = scene.nodes(1)
    high, low = scene.priority(1000), scene.priority(10)
    scene.start()
    scene.place(("boss", node, high, "4"))
    scene.submit("junior", low, "1")

    note = scene.wait_failed_scheduling("junior")
    main, _, preemption = note.partition(" no new claims to deallocate, preemption: ")
    assert "1 Insufficient cpu" in main, note
    assert preemption.startswith("0/"), note
    assert "1 No preemption victims found for incoming pod" in preemption, note
    assert scene.terminating() == set()
    assert not scene.nominated("junior")


def test_an_operator_killed_mid_preemption_loses_no_pod_and_the_next_completes(scene: Scene) -> None:
    node, other = scene.nodes(2)
    low, mid, top = scene.priority(10), scene.priority(20), scene.priority(1000)
    first = scene.start(name="first")
    scene.place(("victim", node, low, "3"), ("neighbour", node, mid, "1"), ("elsewhere", other, mid, "4"))
    scene.submit("vip", top, "3")
    # SIGKILL as soon as the eviction has begun: the victim is being deleted, the preemptor not bound (and
    # perhaps not even nominated yet).
    scene.wait_victims()
    first.kill()
    assert scene.terminating() == {"victim"}
    assert scene.node_of("vip") is None

    second = scene.start(name="second")
    second.wait_log("cache reconciled", timeout=60)
    # The victim is still terminating (held): the next operator must neither bind the preemptor beside it nor
    # evict anyone else to make room elsewhere.
    time.sleep(3)
    assert scene.terminating() == {"victim"}, second.log_tail()
    assert scene.node_of("vip") is None
    scene.release()
    assert scene.bound_within("vip") == node
    wait_for(lambda: scene.read("victim") is None, timeout=30)
    assert pod_nodes(scene.cluster.core, scene.namespace) == {"neighbour": node, "elsewhere": other, "vip": node}
