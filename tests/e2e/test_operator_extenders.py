"""HTTP extenders end to end: the operator as a real process calls an extender served by this test.

The extender (a small threaded HTTP server on 127.0.0.1) speaks upstream's wire protocol: it filters (one node
is refused for every pod), prioritizes (one node wins), and binds by creating the Binding itself, so a pod
bound there proves the whole round trip. A second profile points at an extender that is down: ignorable, its
pods are bound anyway and the operator counts the errors; not ignorable, the pod stays Pending with
upstream's SchedulerError text. A prioritizer without weight is refused with upstream's message. A third
extender takes part in preemption: its preempt verb keeps one of two candidate nodes, and the preemptor ends
there, its victim evicted, while the victim on the node the extender dropped stays.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conformance.extender_harness import ExtenderServer
from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    pod_events,
    pod_manifest,
    ready_condition,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
    wait_scheduled_events,
)
from tools.localcluster import free_port


class Extender:
    """What the test's extender does and saw: calls per verb, with their bodies."""

    def __init__(self, core: client.CoreV1Api, refused: str, preferred: str) -> None:
        self.core = core
        self.refused = refused
        self.preferred = preferred
        #: The only candidate node the preempt verb keeps (with the victims it was sent for it).
        self.kept = preferred
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def answer(self, verb: str, body: dict[str, Any]) -> Any:
        with self.lock:
            self.calls.append((verb, body))
        if verb == "filter":
            names = body["NodeNames"]
            return {
                "NodeNames": [n for n in names if n != self.refused],
                "FailedNodes": {self.refused: "the extender refuses this node"} if self.refused in names else {},
            }
        if verb == "prioritize":
            return [{"Host": n, "Score": 10 if n == self.preferred else 0} for n in body["NodeNames"]]
        if verb == "bind":
            binding = client.V1Binding(
                metadata=client.V1ObjectMeta(name=body["PodName"], uid=body["PodUID"]),
                target=client.V1ObjectReference(kind="Node", name=body["Node"]),
            )
            self.core.create_namespaced_binding(body["PodNamespace"], binding, _preload_content=False)
            return {"Error": ""}
        if verb == "preempt":
            return {"NodeNameToMetaVictims": {self.kept: self.meta_victims(body, self.kept)}}
        raise ValueError(verb)

    @staticmethod
    def meta_victims(body: dict[str, Any], node: str) -> dict[str, Any]:
        """The victims the scheduler proposed on ``node``, by UID (the answer's form, whatever was sent)."""
        if body.get("NodeNameToMetaVictims"):
            return body["NodeNameToMetaVictims"][node]
        victims = body["NodeNameToVictims"][node]
        pods = [{"UID": pod["metadata"]["uid"]} for pod in victims["Pods"]]
        return {"Pods": pods, "NumPDBViolations": victims["NumPDBViolations"]}

    def verbs(self) -> list[str]:
        with self.lock:
            return [verb for verb, _ in self.calls]


@pytest.fixture
def extender_server(cluster: Cluster) -> Iterator[tuple[str, list[Extender]]]:
    """``(url, box)``: a running extender; the test puts its :class:`Extender` into ``box``."""
    box: list[Extender] = []
    server = ExtenderServer(lambda verb, body: box[0].answer(verb, body)).start()
    try:
        yield server.url, box
    finally:
        server.stop()


def test_extender_filters_scores_and_binds(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator: OperatorProcess,
    extender_server: tuple[str, list[Extender]],
) -> None:
    url, box = extender_server
    labels = {"e2e-group": secrets.token_hex(4)}
    refused, plain, preferred = (kwok_nodes(cpu="8", memory="32Gi", labels=labels) for _ in range(3))
    box.append(Extender(cluster.core, refused, preferred))
    profile = profiles(
        {
            "extenders": [
                {
                    "urlPrefix": url,
                    "filterVerb": "filter",
                    "prioritizeVerb": "prioritize",
                    "weight": 10,
                    "bindVerb": "bind",
                    "nodeCacheCapable": True,
                    "httpTimeout": "5s",
                }
            ]
        }
    )
    wait_profile_status(cluster.api, profile, ready=True)
    names = create_pods(
        cluster.core,
        namespace,
        [pod_manifest(f"ext-{i}", profile, cpu="100m", node_selector=labels) for i in range(3)],
    )
    bound = wait_pods_bound(cluster.core, namespace, names, timeout=60)
    assert set(bound.values()) == {preferred}
    wait_scheduled_events(cluster.api, namespace, names)
    extender = box[0]
    assert extender.verbs().count("bind") == 3  # the extender bound every pod, not DefaultBinder
    filtered = [body for verb, body in extender.calls if verb == "filter"]
    assert sorted(filtered[0]["NodeNames"]) == sorted([refused, plain, preferred])
    assert filtered[0]["Nodes"] is None
    assert filtered[0]["Pod"]["metadata"]["name"].startswith("ext-")
    assert plain not in bound.values()


def test_ignorable_extender_that_is_down_is_skipped_and_counted(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator: OperatorProcess,
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="8", memory="32Gi", labels=labels)
    down = f"http://127.0.0.1:{free_port()}/nobody"
    lenient = profiles({"extenders": [{"urlPrefix": down, "filterVerb": "filter", "ignorable": True}]}, suffix="ok")
    strict = profiles({"extenders": [{"urlPrefix": down, "filterVerb": "filter"}]}, suffix="strict")
    wait_profile_status(cluster.api, lenient, ready=True)
    wait_profile_status(cluster.api, strict, ready=True)

    create_pods(cluster.core, namespace, [pod_manifest("lenient", lenient, cpu="100m", node_selector=labels)])
    assert wait_pods_bound(cluster.core, namespace, ["lenient"], timeout=60) == {"lenient": node}

    create_pods(cluster.core, namespace, [pod_manifest("strict", strict, cpu="100m", node_selector=labels)])

    def failed() -> list[Any]:
        return pod_events(cluster.api, namespace, "strict", reason="FailedScheduling")

    events = wait_for(failed, timeout=30, message="no FailedScheduling for the strict extender's pod")
    assert f'Post "{down}/filter"' in events[0].note
    assert cluster.core.read_namespaced_pod("strict", namespace).spec.node_name is None
    assert operator.metric("kopf_scheduler_extender_errors_total", extender=down, verb="filter") >= 2


def test_prioritizer_without_weight_is_refused_with_upstreams_message(
    cluster: Cluster, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    profile = profiles({"extenders": [{"urlPrefix": "http://127.0.0.1:1/x", "prioritizeVerb": "prioritize"}]})
    status = wait_profile_status(cluster.api, profile, ready=False)
    condition = ready_condition(status)
    assert condition is not None
    assert "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it" in condition["message"]


def test_extender_preempt_verb_chooses_the_node_and_its_victims(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator: OperatorProcess,
    extender_server: tuple[str, list[Extender]],
    priority_classes: dict[str, str],
) -> None:
    url, box = extender_server
    labels = {"e2e-group": secrets.token_hex(4)}
    dropped, kept = (kwok_nodes(cpu="4", memory="16Gi", labels=labels) for _ in range(2))
    extender = Extender(cluster.core, refused="", preferred=kept)
    box.append(extender)
    # No filter/prioritize/bind verb: only preemption consults this extender; full victim pods are sent.
    profile = profiles({"extenders": [{"urlPrefix": url, "preemptVerb": "preempt"}]})
    wait_profile_status(cluster.api, profile, ready=True)

    # Both nodes full with one low-priority pod each: equally good candidates, so the extender decides.
    victims = {dropped: "victim-dropped", kept: "victim-kept"}
    create_pods(
        cluster.core,
        namespace,
        [
            pod_manifest(name, profile, cpu="3", spec={"nodeName": node, "priorityClassName": priority_classes["low"]})
            for node, name in victims.items()
        ],
    )

    def running() -> bool:
        phases = {p.metadata.name: p.status.phase for p in cluster.core.list_namespaced_pod(namespace).items}
        return all(phases.get(name) == "Running" for name in victims.values())

    wait_for(running, timeout=60, message="the victims are not Running")
    high = {"priorityClassName": priority_classes["high"]}
    create_pods(cluster.core, namespace, [pod_manifest("vip", profile, cpu="2", node_selector=labels, spec=high)])

    assert wait_pods_bound(cluster.core, namespace, ["vip"], timeout=90) == {"vip": kept}
    preempts = [body for verb, body in extender.calls if verb == "preempt"]
    assert preempts, extender.verbs()
    sent = preempts[0]
    assert sent["Pod"]["metadata"]["name"] == "vip"
    assert sent["NodeNameToMetaVictims"] is None  # not nodeCacheCapable: the full victim pods
    assert {node: [p["metadata"]["name"] for p in v["Pods"]] for node, v in sent["NodeNameToVictims"].items()} == {
        dropped: ["victim-dropped"],
        kept: ["victim-kept"],
    }

    def evicted(name: str) -> bool:
        try:
            pod = cluster.core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return pod.metadata.deletion_timestamp is not None

    wait_for(lambda: evicted("victim-kept"), timeout=30, message="the victim on the kept node was not evicted")
    spared = cluster.core.read_namespaced_pod("victim-dropped", namespace)
    assert spared.metadata.deletion_timestamp is None
    assert spared.spec.node_name == dropped
    preempted = wait_for(
        lambda: pod_events(cluster.api, namespace, "victim-kept", reason="Preempted"),
        timeout=30,
        message="no Preempted event on the evicted victim",
    )
    assert f"on node {kept}" in preempted[0].note
