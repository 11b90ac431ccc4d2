"""``kopf-scheduler what-if`` against the real API server, checked against the operator's real decisions.

What is real: kube-apiserver (RBAC), kwok nodes, the operator as a ``kopf-scheduler run`` process, the CLI as
a process. What-if runs as a ServiceAccount whose only rights are ``get`` and ``list`` (a ClusterRole of
nothing else), so it works without any right to write; its answers are then compared with what the operator
does for the same pods: the node it binds (among what-if's top nodes), the FailedScheduling note (word for
word what-if's text), and a changed profile's replay (the pod the current profile cannot place would
schedule).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    create_pods,
    operator_command,
    pod_events,
    pod_manifest,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.e2e.test_explain_remote import kubeconfig_for, service_account_token


@pytest.fixture
def read_only_kubeconfig(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose user is a ServiceAccount that may only get and list, anything, anywhere."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    name = f"what-if-reader-{secrets.token_hex(3)}"
    rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "what-if", "namespace": namespace}],
        }
    )
    token = service_account_token(cluster, namespace, "what-if")
    yield kubeconfig_for(cluster, token, tmp_path / "what-if.kubeconfig")
    with contextlib.suppress(client.ApiException):
        rbac.delete_cluster_role_binding(name)
    with contextlib.suppress(client.ApiException):
        rbac.delete_cluster_role(name)


def what_if(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [*operator_command(), "what-if", "--kubeconfig", str(kubeconfig), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def what_if_json(kubeconfig: Path, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(what_if(kubeconfig, *args, "-o", "json").stdout)["pods"])


def test_the_prediction_is_the_operators_decision_and_what_if_only_reads(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    read_only_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    tag = secrets.token_hex(2)
    labels = {"what-if": tag}
    nodes = [kwok_nodes(f"wi-{tag}-{cpu}cpu", cpu=cpu, memory="16Gi", labels=labels) for cpu in ("2", "4", "8")]
    profile = profiles({}, name=f"what-if-{tag}")
    # Pending first, with no operator running: what-if reads the pod from the cluster.
    create_pods(cluster.core, namespace, [pod_manifest("web", profile, cpu="1500m", node_selector=labels)])
    [predicted] = what_if_json(read_only_kubeconfig, "--profile", profile, "--pod", f"{namespace}/web")
    assert predicted["result"] == "Schedulable"
    assert set(predicted["topNodes"]) <= set(nodes)
    text = what_if(read_only_kubeconfig, "--profile", profile, "--pod", f"{namespace}/web").stdout
    print(f"$ kopf-scheduler what-if --profile {profile} --pod {namespace}/web\n{text}")
    assert text.startswith(f"Pod {namespace}/web: would schedule on ")

    operator_factory()
    wait_profile_status(cluster.api, profile, ready=True)
    bound = wait_pods_bound(cluster.core, namespace, ["web"], timeout=60)
    assert bound["web"] in predicted["topNodes"]
    # Bound now, it is judged as if pending, its own placement taken out: the same answer as before.
    [again] = what_if_json(read_only_kubeconfig, "--profile", profile, "--pod", f"{namespace}/web")
    assert (again["result"], again["topNodes"], again["totals"]) == (
        "Schedulable",
        predicted["topNodes"],
        predicted["totals"],
    )

    # A pod no node can take: what-if's text is the FailedScheduling note the operator then writes.
    huge = pod_manifest("huge", profile, cpu="9", node_selector=labels)
    huge["metadata"]["namespace"] = namespace
    pod_file = tmp_path / "huge.yaml"
    pod_file.write_text(yaml.safe_dump(huge))
    [refusal] = what_if_json(read_only_kubeconfig, "--profile", profile, "--pod", str(pod_file))
    assert refusal["result"] == "Unschedulable"
    assert refusal["message"].startswith(f"0/{len(cluster.core.list_node().items)} nodes are available: ")
    text = what_if(read_only_kubeconfig, "--profile", profile, "--pod", str(pod_file)).stdout
    print(f"$ kopf-scheduler what-if --profile {profile} --pod huge.yaml\n{text}")
    create_pods(cluster.core, namespace, [huge])
    notes = wait_for(
        lambda: {e.note for e in pod_events(cluster.api, namespace, "huge", reason="FailedScheduling")} or None,
        timeout=60,
        message="huge: no FailedScheduling event",
    )
    assert notes == {refusal["message"]}

    # The pending pods of the profile, replayed: the current profile places none, a changed one places huge.
    [now] = what_if_json(read_only_kubeconfig, "--profile", profile)
    assert (now["pod"], now["result"], now["message"]) == (f"{namespace}/huge", "Unschedulable", refusal["message"])
    changed = {
        "apiVersion": "kopf-scheduler.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": profile},
        "spec": {"plugins": {"filter": {"disabled": [{"name": "NodeResourcesFit"}]}}},
    }
    profile_file = tmp_path / "changed.yaml"
    profile_file.write_text(yaml.safe_dump(changed))
    [replayed] = what_if_json(read_only_kubeconfig, "--profile", str(profile_file))
    assert (replayed["pod"], replayed["result"]) == (f"{namespace}/huge", "Schedulable")
    assert set(replayed["topNodes"]) <= set(nodes)
    text = what_if(read_only_kubeconfig, "--profile", str(profile_file)).stdout
    print(f"$ kopf-scheduler what-if --profile changed.yaml\n{text}")
    assert text.startswith(f"1 pending pod(s) of profile {profile}: 1 would schedule now\n")

    # The identity what-if ran as may not write: the cluster refuses it what the operator does.
    reader = client.CoreV1Api(_client_for(read_only_kubeconfig))
    with pytest.raises(client.ApiException) as refused:
        reader.create_namespaced_pod(namespace, pod_manifest("nope", profile))
    assert refused.value.status == 403


def _client_for(kubeconfig: Path) -> client.ApiClient:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))
