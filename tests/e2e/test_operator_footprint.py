"""The operator writes nothing to pods except Bindings and the PodScheduled condition.

Acceptance of the operator issue, last bullet. kopf's change handlers, daemons and timers would put
``kopf.zalando.org/*`` annotations and finalizers on every pod they touch (a finalizer on a pod blocks its
deletion while the operator is down), so pods and nodes are only ever watched with ``on.event``. After a
run with every kind of outcome (bound, unschedulable, gated, deleted, another scheduler's, a Deployment's,
a profile edit) this test reads every pod and node back and checks:

- no annotation of kopf's, no finalizer;
- in ``managedFields``, no write by kopf itself, and the operator's own writes (field manager
  ``kopf-scheduler``, from its User-Agent) only on the ``status`` subresource and only to the
  ``PodScheduled`` condition. The Binding leaves no managedFields entry (the binding subresource sets
  ``spec.nodeName`` in storage directly), so a bound pod that never failed shows no entry of ours.
"""

from __future__ import annotations

import secrets
import socket
from typing import Any

from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    namespace_events,
    pod_events,
    pod_manifest,
    replace_profile_spec,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)

OUR_MANAGER = "kopf-scheduler"
#: Field managers that must never appear on pods or nodes: kopf's own client, and aiohttp's default
#: User-Agent (what the operator's writes were attributed to before it named itself).
FORBIDDEN_MANAGERS = {"kopf", "Python"}
POD_SCHEDULED_ONLY = {"f:status": {"f:conditions": {".": {}, 'k:{"type":"PodScheduled"}': {}}}}


def _kopf_marks(meta: dict[str, Any]) -> list[str]:
    annotations = meta.get("annotations") or {}
    marks = [f"annotation {k}" for k in annotations if "kopf" in k]
    marks += [f"finalizer {f}" for f in meta.get("finalizers") or ()]
    return marks


def _condition_paths(fields: dict[str, Any]) -> dict[str, Any]:
    """The fieldsV1 tree with each condition's leaf fields stripped: which conditions were written, and
    every other field as it is (anything besides status.conditions then fails the comparison)."""
    status = fields.get("f:status")
    if set(fields) != {"f:status"} or not isinstance(status, dict):
        return fields
    stripped = {key: value for key, value in status.items() if key != "f:conditions"}
    if "f:conditions" in status:
        stripped["f:conditions"] = {key: {} for key in status["f:conditions"]}
    return {"f:status": stripped}


def test_operator_writes_only_bindings_and_the_pod_scheduled_condition(
    cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    nodes = [kwok_nodes(cpu="1", memory="8Gi", labels=labels) for _ in range(2)]
    profile = profiles({})
    wait_profile_status(cluster.api, profile, ready=True)

    pods = [pod_manifest(f"bound-{i}", profile, cpu="100m", node_selector=labels) for i in range(4)]
    pods += [
        pod_manifest("huge", profile, cpu="2", node_selector=labels),
        pod_manifest(
            "gated", profile, cpu="100m", node_selector=labels, spec={"schedulingGates": [{"name": "e2e/hold"}]}
        ),
        pod_manifest("foreign", "someone-else", cpu="100m", node_selector=labels),
        pod_manifest("deleted", profile, cpu="100m", node_selector=labels),
    ]
    create_pods(cluster.core, namespace, pods)
    cluster.core.delete_namespaced_pod("deleted", namespace, grace_period_seconds=0)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": pod_manifest("x", profile, cpu="100m", node_selector=labels)["spec"],
            },
        },
    }
    client.AppsV1Api(cluster.api).create_namespaced_deployment(namespace, deployment)

    # A profile edit in the middle of the run (the pipeline is rebuilt; pods must not notice).
    replace_profile_spec(
        cluster.api, profile, {"plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}}}
    )
    wait_profile_status(cluster.api, profile, ready=True, generation=2)

    def deployment_bound() -> bool:
        web = [p for p in cluster.core.list_namespaced_pod(namespace, label_selector="app=web").items]
        return len(web) == 3 and all(p.spec.node_name for p in web)

    wait_pods_bound(cluster.core, namespace, [f"bound-{i}" for i in range(4)], timeout=30)
    wait_for(deployment_bound, timeout=60, message="the Deployment's pods are not all bound")
    wait_for(
        lambda: pod_events(cluster.api, namespace, "huge", reason="FailedScheduling"),
        timeout=30,
        message="huge has no FailedScheduling event",
    )
    wait_for(
        lambda: any(
            c.type == "PodScheduled" and c.reason == "Unschedulable"
            for c in cluster.core.read_namespaced_pod("huge", namespace).status.conditions or ()
        ),
        timeout=30,
        message="huge has no PodScheduled=False condition",
    )

    events = namespace_events(cluster.api, namespace)
    assert pod_events(cluster.api, namespace, "gated", events=events) == []
    assert pod_events(cluster.api, namespace, "foreign", events=events) == []
    serialized = cluster.api.sanitize_for_serialization
    problems: list[str] = []
    ours_seen: dict[str, dict[str, Any]] = {}
    for pod in cluster.core.list_namespaced_pod(namespace).items:
        meta = serialized(pod)["metadata"]
        name = meta["name"]
        problems += [f"pod {name}: {mark}" for mark in _kopf_marks(meta)]
        for entry in meta.get("managedFields") or ():
            manager = entry["manager"]
            if manager in FORBIDDEN_MANAGERS:
                problems.append(f"pod {name}: written by {manager}: {entry}")
            if manager == OUR_MANAGER:
                ours_seen[name] = entry
                if entry.get("subresource") != "status" or entry.get("operation") != "Update":
                    problems.append(f"pod {name}: {OUR_MANAGER} wrote outside pods/status: {entry}")
                if _condition_paths(entry.get("fieldsV1") or {}) != POD_SCHEDULED_ONLY:
                    problems.append(f"pod {name}: {OUR_MANAGER} wrote more than PodScheduled: {entry['fieldsV1']}")
    for node in cluster.core.list_node().items:
        meta = serialized(node)["metadata"]
        problems += [f"node {meta['name']}: {mark}" for mark in _kopf_marks(meta)]
        managers = {entry["manager"] for entry in meta.get("managedFields") or ()}
        problems += [f"node {meta['name']}: written by {m}" for m in managers & (FORBIDDEN_MANAGERS | {OUR_MANAGER})]
    ns_meta = serialized(cluster.core.read_namespace(namespace))["metadata"]
    problems += [f"namespace: {mark}" for mark in _kopf_marks(ns_meta)]
    assert problems == []

    # Only the unschedulable pod got a write of ours (the condition); bound pods carry none.
    assert set(ours_seen) == {"huge"}
    assert set(nodes) >= {
        p.spec.node_name for p in cluster.core.list_namespaced_pod(namespace).items if p.spec.node_name
    }


def test_a_busy_metrics_port_stops_the_operator_with_a_clear_error(operator_factory: OperatorFactory) -> None:
    """Fail fast, like a bad flag: not a replica that runs without its /metrics and /explain."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        operator = operator_factory(extra_args=["--metrics-port", str(port)], start=False)
        operator.start(wait=False)
        wait_for(lambda: not operator.alive(), timeout=60, message=operator.log_tail)
    assert operator.returncode != 0
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in operator.log_text()
