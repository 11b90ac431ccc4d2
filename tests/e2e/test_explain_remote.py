"""``kopf-scheduler explain NS/POD`` without ``--url``: through the real API server's ``pods/proxy`` to the
active replica, as a user with only the chart's reader rights, refused without them, and after a failover.

What is real here: kube-apiserver (RBAC, its ``pods/proxy`` handler dialling the pod IP over HTTPS), the
operator replicas (``kopf-scheduler run`` processes, kopf peering), the chart's metrics-reader ClusterRole,
Role and bindings (rendered by helm), ServiceAccount tokens, the CLI and the kubectl plugin run by the pinned
kubectl. What stands in for a kubelet: the two replicas' Pod objects are created by the test, bound to a Node
no kubelet serves, with ``status.podIP`` set to an address of this machine where that replica listens. The
API server refuses loopback pod IPs, so each replica binds a non-loopback address of its own (two interfaces,
same port, as two pods of the chart's StatefulSet share one container port).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.conftest import Cluster
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    operator_command,
    pod_manifest,
    wait_for,
    wait_profile_status,
)
from tests.unit.test_chart import docs_of
from tools.localcluster import default_bin_dir, free_port

RELEASE = "ks"
FULLNAME = f"{RELEASE}-kopf-scheduler"
READER = f"{FULLNAME}-metrics-reader"
LIFETIME = 5


def host_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses (pod IPs the API server agrees to dial)."""
    done = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False)
    found = []
    for line in done.stdout.splitlines():
        address = ipaddress.ip_interface(line.split()[3]).ip
        if not (address.is_loopback or address.is_link_local or address.is_multicast):
            found.append(str(address))
    return found


def service_account_token(cluster: Cluster, namespace: str, account: str) -> str:
    cluster.core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata={"name": account}))
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    return str(cluster.core.create_namespaced_service_account_token(account, namespace, request).status.token)


def kubeconfig_for(cluster: Cluster, token: str, path: Path) -> Path:
    """The cluster's kubeconfig with its user swapped for a bearer token."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return path


def explain(
    kubeconfig: Path, pod: str, *extra: str, command: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    args = [*(command or operator_command()), "explain", pod, "--kubeconfig", str(kubeconfig), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


class ReaderRights:
    """The chart's metrics-reader objects for this test's release, peering name and port, in the cluster."""

    def __init__(self, cluster: Cluster, namespace: str, peering: str, port: int, subjects: list[dict[str, str]]):
        self.rbac = client.RbacAuthorizationV1Api(cluster.api)
        self.suffix = secrets.token_hex(3)
        values = {"peering": {"name": peering}, "metrics": {"port": port, "reader": {"subjects": subjects}}}
        docs = [d for d in docs_of(values, release=RELEASE, namespace=namespace) if d["metadata"]["name"] == READER]
        self.by_kind = {d["kind"]: d for d in docs}
        assert set(self.by_kind) == {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
        self.cluster_role = f"{READER}-{self.suffix}"  # cluster-scoped: unique to this test
        self.by_kind["ClusterRole"]["metadata"]["name"] = self.cluster_role
        self.by_kind["ClusterRoleBinding"]["metadata"]["name"] = self.cluster_role
        self.by_kind["ClusterRoleBinding"]["roleRef"]["name"] = self.cluster_role
        self.namespace = namespace
        self.extra_bindings: list[str] = []

    def create(self) -> None:
        self.rbac.create_cluster_role(self.by_kind["ClusterRole"])
        self.rbac.create_cluster_role_binding(self.by_kind["ClusterRoleBinding"])
        self.rbac.create_namespaced_role(self.namespace, self.by_kind["Role"])
        self.rbac.create_namespaced_role_binding(self.namespace, self.by_kind["RoleBinding"])

    def bind_cluster_role_only(self, account: str) -> None:
        name = f"{self.cluster_role}-{account}"
        self.rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": self.cluster_role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": self.namespace}],
            }
        )
        self.extra_bindings.append(name)

    def bind_all_but_explain(self, account: str, peering: str) -> None:
        """The Role and get on the peering object, but not the non-resource /explain/*."""
        name = f"{self.cluster_role}-{account}"
        rule = {"apiGroups": ["kopf.dev"], "resources": ["clusterkopfpeerings"], "resourceNames": [peering]}
        self.rbac.create_cluster_role({"metadata": {"name": name}, "rules": [{**rule, "verbs": ["get"]}]})
        subject = {"kind": "ServiceAccount", "name": account, "namespace": self.namespace}
        self.rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [subject],
            }
        )
        self.rbac.create_namespaced_role_binding(
            self.namespace,
            {
                "metadata": {"name": f"{READER}-{account}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": READER},
                "subjects": [subject],
            },
        )
        self.extra_bindings.append(name)
        self.extra_roles = [name]

    def delete(self) -> None:
        for name in [self.cluster_role, *self.extra_bindings]:
            with contextlib.suppress(client.ApiException):
                self.rbac.delete_cluster_role_binding(name)
        for name in [self.cluster_role, *getattr(self, "extra_roles", [])]:
            with contextlib.suppress(client.ApiException):
                self.rbac.delete_cluster_role(name)


@pytest.fixture
def unserved_node(cluster: Cluster) -> Iterator[str]:
    """A Node no kubelet (and no kwok) serves: the replicas' stand-in pods are bound to it."""
    name = f"explain-host-{secrets.token_hex(3)}"
    cluster.core.create_node({"metadata": {"name": name}})
    yield name
    cluster.core.delete_node(name)


def replica_pod(cluster: Cluster, namespace: str, ordinal: int, node: str, address: str, port: int) -> str:
    """Replica ``ordinal``'s Pod as the chart's StatefulSet makes it (name, metrics port), at ``address``."""
    name = f"{FULLNAME}-{ordinal}"
    container = {
        "name": "kopf-scheduler",
        "image": "kopf-scheduler",
        "ports": [{"name": "metrics", "containerPort": port}],
    }
    body = {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [container]}}
    cluster.core.create_namespaced_pod(namespace, body)
    status = {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}
    cluster.core.patch_namespaced_pod_status(name, namespace, {"status": status})
    return name


def start_replica(operator_factory: OperatorFactory, ordinal: int, address: str, port: int) -> OperatorProcess:
    """``kopf-scheduler run`` as replica ``ordinal``: POD_ID is the pod name, priority 100 - ordinal."""
    process = operator_factory(
        100 - ordinal,
        ["--bind-address", address, "--metrics-port", str(port), "--peering-lifetime", str(LIFETIME)],
        start=False,
        identity=f"{FULLNAME}-{ordinal}",
        name=f"replica-{ordinal}",
    )
    process.start(wait=False)  # wait_ready probes /healthz on 127.0.0.1; this one listens on `address`
    wait_for(
        process.in_peering, timeout=60, message=lambda: f"replica {ordinal} not in the peering\n{process.log_tail()}"
    )
    return process


def kubectl_plugin(directory: Path) -> Path:
    """``kubectl-kopf_scheduler`` as pip writes a console script of ``kopf_scheduler.cli:main``."""
    plugin = directory / "kubectl-kopf_scheduler"
    plugin.write_text(
        f"#!{sys.executable}\nimport sys\nfrom kopf_scheduler.cli import main\nif __name__ == '__main__':\n"
        "    sys.exit(main())\n"
    )
    plugin.chmod(0o755)
    return directory


def test_explain_through_the_api_server_with_the_readers_rights_and_after_a_failover(
    cluster: Cluster,
    namespace: str,
    peering_name: str,
    operator_factory: OperatorFactory,
    profiles: ProfileFactory,
    unserved_node: str,
    tmp_path: Path,
) -> None:
    addresses = host_addresses()
    if len(addresses) < 2:
        pytest.skip(f"needs two non-loopback IPv4 addresses on this machine for two replicas, found {addresses}")
    port = free_port()
    reader = {"kind": "ServiceAccount", "name": "reader", "namespace": namespace}
    rights = ReaderRights(cluster, namespace, peering_name, port, [reader])
    tokens = {
        name: service_account_token(cluster, namespace, name) for name in ("reader", "stranger", "half", "noexplain")
    }
    config = {name: kubeconfig_for(cluster, token, tmp_path / f"{name}.kubeconfig") for name, token in tokens.items()}
    try:
        rights.create()
        rights.bind_cluster_role_only("half")
        rights.bind_all_but_explain("noexplain", peering_name)
        for ordinal in (0, 1):
            replica_pod(cluster, namespace, ordinal, unserved_node, addresses[ordinal], port)
        replicas = [start_replica(operator_factory, ordinal, addresses[ordinal], port) for ordinal in (0, 1)]
        # The chart annotates the peering object with the release namespace; the operator creates it bare.
        client.CustomObjectsApi(cluster.api).patch_cluster_custom_object(
            "kopf.dev",
            "v1",
            "clusterkopfpeerings",
            peering_name,
            {"metadata": {"annotations": {"kopf-scheduler.io/namespace": namespace}}},
        )

        profile = profiles({})
        wait_profile_status(cluster.api, profile, ready=True)
        selector = {"explain-test": secrets.token_hex(4)}  # no node has it: Pending, explained
        create_pods(cluster.core, namespace, [pod_manifest("waiting", profile, cpu="100m", node_selector=selector)])
        pod = f"{namespace}/waiting"
        peering = ["--peering-name", peering_name]

        def explained_as(who: str) -> dict[str, Any] | None:
            done = explain(config[who], pod, "--json", *peering)
            return json.loads(done.stdout) if done.returncode == 0 else None

        account = wait_for(
            lambda: explained_as("reader"), timeout=60, message=lambda: explain(config["reader"], pod, *peering).stderr
        )
        assert account["pod"] == pod
        assert account["profile"] == profile
        assert "node(s) didn't match Pod's node affinity/selector" in account["message"]

        # The printed account, as the admin (system:masters, its token forwarded) and through kubectl.
        admin = explain(cluster.kubeconfig, pod, *peering)
        assert admin.returncode == 0, admin.stderr
        assert admin.stdout.startswith(f"Pod {pod}: ")
        env = {**os.environ, "PATH": f"{kubectl_plugin(tmp_path)}{os.pathsep}{os.environ['PATH']}"}
        env["KUBECONFIG"] = str(config["reader"])
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        kubectl = str(default_bin_dir() / "kubectl")
        plugin = subprocess.run(
            [kubectl, "kopf-scheduler", "explain", pod, *peering], capture_output=True, text=True, timeout=60, env=env
        )
        assert plugin.returncode == 0, plugin.stderr
        assert plugin.stdout.startswith(f"Pod {pod}: ")
        usage = subprocess.run([kubectl, "kopf-scheduler", "--help"], capture_output=True, text=True, env=env)
        assert usage.stdout.startswith("usage: kubectl kopf-scheduler")

        # Without the rights: refused, saying which permission is missing.
        stranger = explain(config["stranger"], pod, *peering)
        assert stranger.returncode == 1
        user = f"system:serviceaccount:{namespace}:stranger"
        assert f'User "{user}" cannot get resource "clusterkopfpeerings" in API group "kopf.dev"' in stranger.stderr
        assert "metrics-reader" in stranger.stderr
        half = explain(config["half"], pod, *peering)  # the ClusterRole without the namespace's Role
        assert half.returncode == 1
        assert 'cannot get resource "pods" in API group "" in the namespace' in half.stderr
        noexplain = explain(config["noexplain"], pod, *peering)  # through the proxy, but the replica says no
        assert noexplain.returncode == 1
        refusal = f'replica {FULLNAME}-0 refused: forbidden: User "system:serviceaccount:{namespace}:noexplain"'
        assert refusal in noexplain.stderr
        assert f'cannot get path "/explain/{pod}"' in noexplain.stderr
        # pods/proxy is granted to the metrics port only: another port of the same pod is refused.
        other_port = explain(config["reader"], pod, "--port", str(port + 1), *peering)
        assert other_port.returncode == 1
        assert 'cannot get resource "pods/proxy"' in other_port.stderr

        # Failover: the active replica dies hard; the standby takes over and explain follows it.
        replicas[0].kill()
        # Until its record expires (lifetime 5 s) the dead replica is still the active peer: the proxy cannot
        # reach it, and the CLI says so; then the standby is asked, which answers 404 until it has retried.
        first = explain(config["reader"], pod, *peering)
        transitional = ("does not answer", "no failed scheduling attempt recorded")
        assert first.returncode == 0 or any(t in first.stderr for t in transitional), first.stderr
        after = wait_for(
            lambda: explained_as("reader"),
            timeout=LIFETIME * 2 + 60,
            message=lambda: f"{explain(config['reader'], pod, *peering).stderr}\n{replicas[1].log_tail()}",
        )
        assert after["pod"] == pod
        assert replicas[1].alive()
        assert not replicas[0].alive()  # only replica 1 can have answered
    finally:
        rights.delete()
