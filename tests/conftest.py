"""Fixtures shared by every test layer that needs a real API server (e2e, conformance).

The control plane is started once per session and only when a test asks for it, so ``pytest tests/unit``
never starts anything. ``KOPF_SCHEDULER_KUBECONFIG`` (or ``--kubeconfig``) points the same tests at an
existing cluster (kind, a cloud cluster) instead of starting the local one from ``tools/localcluster.py``.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tools.localcluster import LocalCluster, create_kwok_nodes, kwok_node, wait_nodes_ready

KUBECONFIG_ENV = "KOPF_SCHEDULER_KUBECONFIG"
#: On an external cluster, set this to 1 if kwok runs there too (nodes annotated kwok.x-k8s.io/node=fake).
EXTERNAL_KWOK_ENV = "KOPF_SCHEDULER_EXTERNAL_KWOK"

_CLUSTER_KEY = pytest.StashKey["Cluster"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kubeconfig",
        default=os.environ.get(KUBECONFIG_ENV) or None,
        help=f"run tests against this existing cluster instead of a local one (env {KUBECONFIG_ENV})",
    )
    parser.addoption(
        "--keep-cluster-dir",
        action="store_true",
        help="keep the local cluster's work dir (certs, kubeconfig, component logs) after the session",
    )


@dataclass
class Cluster:
    """What tests get from the ``cluster`` fixture: a kubeconfig and ready-made clients."""

    kubeconfig: Path
    api: client.ApiClient
    core: client.CoreV1Api
    apps: client.AppsV1Api
    #: The local control plane, or None when running against an external cluster.
    local: LocalCluster | None = None
    #: Whether nodes annotated for kwok become Ready here (always locally; opt-in on external clusters).
    has_kwok: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def has_controller_manager(self) -> bool:
        return self.local is None or self.local.mode == "full"

    def log_tails(self, lines: int = 40) -> str:
        return self.local.log_tails(lines) if self.local else ""


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The session's control plane (full mode: etcd, apiserver, controller-manager, kwok)."""
    external = request.config.getoption("--kubeconfig")
    if external:
        path = Path(external).expanduser().resolve()
        api = config.new_client_from_config(config_file=str(path))
        handle = Cluster(
            kubeconfig=path,
            api=api,
            core=client.CoreV1Api(api),
            apps=client.AppsV1Api(api),
            has_kwok=os.environ.get(EXTERNAL_KWOK_ENV) == "1",
        )
        request.config.stash[_CLUSTER_KEY] = handle
        yield handle
        api.close()
        return

    work_dir = None
    if request.config.getoption("--keep-cluster-dir"):
        work_dir = Path(request.config.rootpath) / ".cluster" / "pytest"
    with LocalCluster("full", work_dir=work_dir) as local:
        api = local.api_client()
        handle = Cluster(
            kubeconfig=local.kubeconfig,
            api=api,
            core=client.CoreV1Api(api),
            apps=client.AppsV1Api(api),
            local=local,
        )
        request.config.stash[_CLUSTER_KEY] = handle
        try:
            yield handle
        finally:
            api.close()


def _dns_label(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted (in the background) afterwards.

    With a controller-manager, waits for the ``default`` ServiceAccount first: until it exists the
    ServiceAccount admission plugin rejects every pod in the namespace.
    """
    name = f"t-{_dns_label(request.node.name, 45)}-{secrets.token_hex(3)}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    if cluster.has_controller_manager:
        deadline = time.monotonic() + 60
        while True:
            try:
                cluster.core.read_namespaced_service_account("default", name)
                break
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    yield name
    try:
        cluster.core.delete_namespace(name, propagation_policy="Background")
    except ApiException as exc:
        if exc.status != 404:
            raise


NodeFactory = Callable[..., str]


@pytest.fixture
def kwok_nodes(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[NodeFactory]:
    """A factory ``make(**kwok_node_kwargs) -> name`` creating kwok-managed Nodes, removed after the test.

    Nodes are cluster-scoped and the cluster is shared by the session, so every node gets a unique name
    and is deleted afterwards, together with (force-deleted) pods bound to it.
    """
    if not cluster.has_kwok:
        pytest.skip(f"no kwok on this cluster (set {EXTERNAL_KWOK_ENV}=1 if it runs kwok)")
    created: list[str] = []
    prefix = f"n-{_dns_label(request.node.name, 30)}-{secrets.token_hex(2)}"

    def make(name: str | None = None, *, wait_ready: bool = True, **kwargs: Any) -> str:
        node_name = name or f"{prefix}-{len(created)}"
        create_kwok_nodes(cluster.core, [kwok_node(node_name, **kwargs)])
        created.append(node_name)
        if wait_ready:
            wait_nodes_ready(cluster.core, [node_name], timeout=60)
        return node_name

    yield make
    for node_name in created:
        pods = cluster.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_name}")
        for pod in pods.items:
            try:
                cluster.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        try:
            cluster.core.delete_node(node_name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the control plane's log tails to the report of a failing test that used the cluster."""
    report = yield
    if report.failed and "cluster" in getattr(item, "fixturenames", ()):
        handle = item.config.stash.get(_CLUSTER_KEY, None)
        if handle is not None and handle.local is not None:
            report.sections.append(("control plane log tails", handle.log_tails()))
    return report


def pytest_report_header(config: pytest.Config) -> str:
    external = config.getoption("--kubeconfig")
    return f"control plane: {'external ' + external if external else 'local (started on first use)'}"
