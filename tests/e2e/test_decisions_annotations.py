"""``spec.explain.annotations``: the last attempt on the pod, and explain after a failover answering from it.

What is real: kube-apiserver (the Binding that carries the annotations onto the pod, the merge patch of a
failure's), two operator replicas as ``kopf-scheduler run`` processes under kopf peering, the aggregated API
``explain.kopf-scheduler.io`` registered to the standby's port (tools/aggregation.py), the CLI. The active
replica is SIGKILLed: the standby never saw the bound pod's attempt, so its answer comes from the pod.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from typing import Any

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    create_pods,
    operator_command,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.e2e.test_explain_aggregated import registered  # noqa: F401 (the fixture: the APIService to a port)

PREFIX = "kopf-scheduler.io/"
LIFETIME = 5


def ours(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    annotations = cluster.core.read_namespaced_pod(name, namespace).metadata.annotations or {}
    return {key: value for key, value in annotations.items() if key.startswith(PREFIX)}


def test_annotations_bounded_on_opted_in_pods_only_and_explain_after_a_failover_reads_them(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    registered: Any,  # noqa: F811
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    nodes = [kwok_nodes(cpu="4", memory="8Gi", labels=labels) for _ in range(3)]
    extra = ["--peering-lifetime", str(LIFETIME)]
    active = operator_factory(100, extra, name="active")
    standby = operator_factory(50, extra, name="standby")
    annotated = profiles({"explain": {"annotations": True}})
    plain = profiles({})
    for profile in (annotated, plain):
        wait_profile_status(cluster.api, profile, ready=True)

    missing = {"e2e-nowhere": secrets.token_hex(4)}
    create_pods(
        cluster.core,
        namespace,
        [
            pod_manifest("placed", annotated, cpu="100m", node_selector=labels),
            pod_manifest("waiting", annotated, cpu="100m", node_selector=missing),
            pod_manifest("plain", plain, cpu="100m", node_selector=labels),
            pod_manifest("plain-waiting", plain, cpu="100m", node_selector=missing),
        ],
    )
    bound = wait_pods_bound(cluster.core, namespace, ["placed", "plain"], timeout=60)

    # The bound pod: the Binding carried them (the simulator's shapes).
    placed = ours(cluster, namespace, "placed")
    assert placed[PREFIX + "selected-node"] == bound["placed"]
    result = json.loads(placed[PREFIX + "result"])
    assert (result["result"], result["profile"], result["feasibleNodes"]) == ("Scheduled", annotated, 3)
    final = json.loads(placed[PREFIX + "finalscore-result"])
    assert bound["placed"] in final
    assert set(final) <= set(nodes)
    assert result["listedNodes"] == len(final)
    assert result["omittedNodes"] == 3 - len(final)
    assert set(json.loads(placed[PREFIX + "score-result"])) == set(final)
    assert sum(len(value.encode()) for value in placed.values()) <= 8192

    # The pending pod: one merge patch with the rejected nodes.
    waiting = wait_for(lambda: ours(cluster, namespace, "waiting") or None, timeout=30)
    assert json.loads(waiting[PREFIX + "result"])["result"] == "Unschedulable"
    assert sum(len(value.encode()) for value in waiting.values()) <= 8192

    # A profile without the opt-in writes nothing on its pods, bound or pending.
    wait_for(
        lambda: any(
            c.type == "PodScheduled"
            for c in cluster.core.read_namespaced_pod("plain-waiting", namespace).status.conditions or ()
        ),
        timeout=30,
    )
    assert ours(cluster, namespace, "plain") == {}
    assert ours(cluster, namespace, "plain-waiting") == {}

    # Failover: the standby takes over and answers explain (through the aggregated API) from the pod.
    registered(standby.metrics_port)
    active.kill()
    create_pods(cluster.core, namespace, [pod_manifest("after", annotated, cpu="100m", node_selector=labels)])
    wait_pods_bound(cluster.core, namespace, ["after"], timeout=LIFETIME + 60)
    assert standby.scheduled_count(annotated) == 1

    def explained(pod: str) -> dict[str, Any] | None:
        args = [*operator_command(), "explain", f"{namespace}/{pod}", "--kubeconfig", str(cluster.kubeconfig), "--json"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
        return json.loads(done.stdout) if done.returncode == 0 else None

    account = wait_for(lambda: explained("placed"), timeout=60)
    assert (account["result"], account["node"], account["source"]) == ("Scheduled", bound["placed"], "annotations")
    assert account["candidates"][0]["node"] == bound["placed"]
    assert account["candidates"][0]["chosen"] is True
    pending = wait_for(lambda: explained("waiting"), timeout=60)
    assert pending["result"] == "Unschedulable"
    assert explained("plain") is None  # bound by a profile without the opt-in, on a replica that never saw it
