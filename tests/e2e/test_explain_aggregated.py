"""``kopf-scheduler explain`` through the aggregated API ``explain.kopf-scheduler.io/v1alpha1``, as users of every
kind: a client certificate (kind's, kubeadm's and minikube's admin kubeconfigs log in so), a ServiceAccount token,
and users without the right, refused by the API server with the missing permission named.

What is real: kube-apiserver with its aggregation layer (the front-proxy client certificate and requestheader
flags of tools/localcluster.py, the APIService, its availability check and discovery), RBAC, client certificates
signed by the cluster's client CA, ServiceAccount tokens, the operator as a ``kopf-scheduler run`` process that
reads the front proxy's CA from ``kube-system/extension-apiserver-authentication``, the CLI and kubectl. What
stands in for the chart's Service: an ExternalName Service naming ``localhost`` (tools/aggregation.py says why).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import create_pods, operator_command, pod_manifest, wait_for, wait_profile_status
from tests.e2e.test_explain_remote import kubeconfig_for, service_account_token
from tools.aggregation import API_SERVICE, client_certificate_kubeconfig, register_operator, wait_available
from tools.localcluster import default_bin_dir

GROUP = "explain.kopf-scheduler.io"


def explain(kubeconfig: Path, pod: str, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [*operator_command(), "explain", pod, "--kubeconfig", str(kubeconfig), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run([str(default_bin_dir() / "kubectl"), *args], capture_output=True, text=True, env=env)


@pytest.fixture
def registered(cluster: Cluster) -> Iterator[Any]:
    """``register(port)`` registers an operator's metrics port as the APIService; both objects go afterwards."""
    if cluster.local is None:
        pytest.skip("registers an operator process outside the cluster: needs the local control plane")

    def register(port: int) -> None:
        register_operator(cluster.api, port=port)
        wait_available(cluster.api, timeout=60)

    yield register
    with contextlib.suppress(client.ApiException):
        client.CustomObjectsApi(cluster.api).delete_cluster_custom_object(
            "apiregistration.k8s.io", "v1", "apiservices", API_SERVICE
        )
    with contextlib.suppress(client.ApiException):
        cluster.core.delete_namespaced_service("kopf-scheduler-explain", "kube-system")


def grant_explain(cluster: Cluster, namespace: str, subjects: list[dict[str, str]]) -> None:
    """A Role with ``get`` on ``podexplanations`` in ``namespace``, bound to ``subjects``."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rule = {"apiGroups": [GROUP], "resources": ["podexplanations"], "verbs": ["get"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "explainer"}, "rules": [rule]})
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "explainer"}
    rbac.create_namespaced_role_binding(
        namespace, {"metadata": {"name": "explainer"}, "roleRef": role, "subjects": subjects}
    )


def test_explain_as_a_certificate_user_and_a_token_user_and_refused_without_rights(
    cluster: Cluster,
    namespace: str,
    operator_factory: OperatorFactory,
    profiles: ProfileFactory,
    registered: Any,
    kwok_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    assert cluster.local is not None
    kwok_nodes()
    local = cluster.local
    operator = operator_factory()
    registered(operator.metrics_port)

    def certificate_user(user: str, groups: tuple[str, ...] = ()) -> Path:
        path = tmp_path / f"{user}.kubeconfig"
        return client_certificate_kubeconfig(
            local.pki, server=local.server, server_ca=local.ca_file, user=user, groups=groups, path=path
        )

    carol = certificate_user("carol", ("devs",))
    mallory = certificate_user("mallory")
    tokens = {name: service_account_token(cluster, namespace, name) for name in ("reader", "stranger")}
    reader, stranger = (kubeconfig_for(cluster, tokens[n], tmp_path / f"{n}.kubeconfig") for n in tokens)
    grant_explain(
        cluster,
        namespace,
        [
            {"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"},  # carol, by her certificate's O
            {"kind": "ServiceAccount", "name": "reader", "namespace": namespace},
        ],
    )

    profile = profiles({})
    wait_profile_status(cluster.api, profile, ready=True)
    selector = {"explain-test": secrets.token_hex(4)}  # no node has it: Pending, explained
    create_pods(cluster.core, namespace, [pod_manifest("waiting", profile, cpu="100m", node_selector=selector)])
    pod = f"{namespace}/waiting"

    def explained(kubeconfig: Path) -> dict[str, Any] | None:
        done = explain(kubeconfig, pod, "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None

    account = wait_for(lambda: explained(carol), timeout=60, message=lambda: explain(carol, pod).stderr)
    assert account["pod"] == pod
    assert account["profile"] == profile
    assert "node(s) didn't match Pod's node affinity/selector" in account["message"]

    # The printed account; no note about a fallback: it came through the APIService.
    printed = explain(carol, pod)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith(f"Pod {pod}: Unschedulable (profile {profile}")
    assert printed.stderr == ""
    # A ServiceAccount token user with the same right.
    assert explained(reader) == account
    # kubectl alone: the raw path, and the resource by name.
    raw = kubectl(reader, "get", "--raw", f"/apis/{GROUP}/v1alpha1/namespaces/{namespace}/podexplanations/waiting")
    assert raw.returncode == 0, raw.stderr
    document = json.loads(raw.stdout)
    assert (document["kind"], document["metadata"], document["account"]) == (
        "PodExplanation",
        {"name": "waiting", "namespace": namespace},
        account,
    )
    printed_table = kubectl(carol, "get", "podexplanation", "waiting", "-n", namespace)
    assert printed_table.returncode == 0, printed_table.stderr
    header, row = printed_table.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "RESULT", "NODE", "PROFILE", "TIME"]
    assert row.split()[:4] == ["waiting", "Unschedulable", "<none>", profile]
    got = kubectl(carol, "get", "podexplanation", "waiting", "-n", namespace, "-o", "json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["account"] == account
    # A pod with nothing recorded: the operator's 404, through the API server.
    nothing = explain(carol, f"{namespace}/never-created")
    assert nothing.returncode == 1
    assert 'podexplanations.explain.kopf-scheduler.io "never-created" not found: no failed' in nothing.stderr

    # Without the right: the API server refuses (403) and the CLI names what is missing.
    for kubeconfig, user in ((mallory, "mallory"), (stranger, f"system:serviceaccount:{namespace}:stranger")):
        refused = explain(kubeconfig, pod)
        assert refused.returncode == 1
        assert (
            f'podexplanations.explain.kopf-scheduler.io "waiting" is forbidden: User "{user}" cannot get resource '
            f'"podexplanations" in API group "{GROUP}" in the namespace "{namespace}"'
        ) in refused.stderr
        assert "needs get on podexplanations.explain.kopf-scheduler.io in the pod's namespace" in refused.stderr
    # The right in another namespace does not reach this one.
    other = kubectl(carol, "get", "--raw", f"/apis/{GROUP}/v1alpha1/namespaces/default/podexplanations/waiting")
    assert other.returncode == 1
    assert "Forbidden" in other.stderr


def test_a_standby_behind_the_api_service_says_so(
    cluster: Cluster, namespace: str, operator_factory: OperatorFactory, registered: Any
) -> None:
    """Only the active replica keeps explanations: a standby reached through the APIService answers 503."""
    operator_factory(100)
    standby = operator_factory(50)
    registered(standby.metrics_port)

    def refused() -> subprocess.CompletedProcess[str] | None:
        done = explain(cluster.kubeconfig, f"{namespace}/any")
        return done if done.returncode == 1 and "standby" in done.stderr else None

    answer = wait_for(refused, timeout=30, message=lambda: explain(cluster.kubeconfig, f"{namespace}/any").stderr)
    assert (
        f"replica {standby.identity} is a standby: only the active replica schedules and keeps explanations"
        in answer.stderr
    )


def test_the_active_replica_labels_its_pod_and_the_label_follows_a_takeover(
    cluster: Cluster, namespace: str, operator_factory: OperatorFactory
) -> None:
    """The chart's explain Service selects kopf-scheduler.io/active=true: each replica (POD_ID, POD_NAMESPACE)
    keeps that label on its own pod, and after the active one dies the new active replica's pod carries it."""
    names = ("ks-0", "ks-1")
    for name in names:  # the replicas' Pod objects, as the StatefulSet would make them (nothing runs them here)
        container = {"name": "kopf-scheduler", "image": "kopf-scheduler"}
        body = {"metadata": {"name": name}, "spec": {"nodeName": "no-such-node", "containers": [container]}}
        cluster.core.create_namespaced_pod(namespace, body)

    def labels() -> tuple[str | None, ...]:
        found = (cluster.core.read_namespaced_pod(n, namespace).metadata.labels or {} for n in names)
        return tuple(pod.get("kopf-scheduler.io/active") for pod in found)

    lifetime = ["--peering-lifetime", "5"]
    env = {"POD_NAMESPACE": namespace}
    active = operator_factory(100, lifetime, identity=names[0], env=env)
    operator_factory(99, lifetime, identity=names[1], env=env)
    wait_for(lambda: labels() == ("true", "false"), timeout=60, message=lambda: f"labels {labels()}")
    active.kill()
    wait_for(lambda: labels() == ("true", "true"), timeout=60, message=lambda: f"labels {labels()}")
    # The dead replica's label stays (its pod would leave the Service's endpoints once not Ready).
