"""The metrics port served as kube-scheduler serves 10259: HTTPS, delegated authentication and authorization.

The operator runs as a real process against the real kube-apiserver, which answers its TokenReviews and
SubjectAccessReviews; the callers are real ServiceAccount tokens (TokenRequest), and the permission to read
is the chart's own ``metrics-reader`` ClusterRole, rendered by helm and bound to one of them. Expected, as
upstream (``k8s.io/apiserver`` delegated authn/authz with kube-scheduler's defaults):

- no token: the anonymous user, which RBAC does not let read ``/metrics``: 403 naming ``system:anonymous``;
- a token the API server rejects: 401 ``Unauthorized``;
- a valid token without the role: 403 naming the ServiceAccount;
- a valid token with the role: ``/metrics`` and ``/explain/...`` served (``kopf-scheduler explain`` too);
- ``/healthz``, ``/livez`` and ``/readyz`` open to anyone, in k8s.io/apiserver's healthz format; ``/readyz``
  fails until the cache is synced (kube-scheduler's ``sched-handler-sync``) and names the replica's standing.

Those refusals are compared byte for byte with upstream kube-scheduler's, started with delegated authn/authz
against the same API server and asked the same requests.

And the monitoring metrics a kube-scheduler user looks for, read from the running operator: the active-peer
gauge, the queue entries by event, the unschedulable pods by plugin, build info and the process collectors.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import OperatorFactory, ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    ensure_peering,
    operator_command,
    pod_manifest,
    unverified_tls,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
)
from tests.unit.test_chart import docs_of

#: kube-scheduler's always-allowed paths: the harness' extra /metrics is taken away again.
UPSTREAM_ALWAYS_ALLOW = "--authorization-always-allow-paths=/healthz,/readyz,/livez"


def _get(operator: OperatorProcess, path: str, token: str | None) -> tuple[int, str]:
    request = urllib.request.Request(f"https://127.0.0.1:{operator.metrics_port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=15, context=unverified_tls()) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _token(cluster: Cluster, namespace: str, account: str) -> str:
    cluster.core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata={"name": account}))
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    return str(cluster.core.create_namespaced_service_account_token(account, namespace, request).status.token)


@pytest.fixture
def reader_role(cluster: Cluster) -> Iterator[str]:
    """The chart's metrics-reader ClusterRole, as rendered, under a name unique to this test."""
    role = next(
        d for d in docs_of() if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-metrics-reader")
    )
    role["metadata"]["name"] = f"{role['metadata']['name']}-{secrets.token_hex(3)}"
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_cluster_role(role)
    yield role["metadata"]["name"]
    rbac.delete_cluster_role(role["metadata"]["name"])


def test_unauthenticated_unauthorised_and_authorised_requests(
    cluster: Cluster, namespace: str, operator_factory: OperatorFactory, reader_role: str
) -> None:
    operator = operator_factory(extra_args=[UPSTREAM_ALWAYS_ALLOW])
    reader, stranger = _token(cluster, namespace, "reader"), _token(cluster, namespace, "stranger")
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    binding = f"{reader_role}-{namespace}"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader_role},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        }
    )
    try:
        status, body = _get(operator, "/metrics", None)
        assert status == 403, body
        assert json.loads(body)["message"] == 'forbidden: User "system:anonymous" cannot get path "/metrics"'

        status, body = _get(operator, "/metrics", "not-a-token")
        assert status == 401, body
        assert json.loads(body)["reason"] == "Unauthorized"

        status, body = _get(operator, "/metrics", stranger)
        assert status == 403, body
        user = f"system:serviceaccount:{namespace}:stranger"
        assert json.loads(body)["message"] == f'forbidden: User "{user}" cannot get path "/metrics"'
        status, _ = _get(operator, f"/explain/{namespace}/nothing", stranger)
        assert status == 403

        status, body = _get(operator, "/metrics", reader)
        assert status == 200, body
        assert "scheduler_pending_pods" in body
        status, body = _get(operator, f"/explain/{namespace}/nothing", reader)  # authorised, nothing recorded
        assert status == 404, body
        assert f"no failed scheduling attempt recorded for pod {namespace}/nothing" in body

        assert _get(operator, "/healthz", None) == (200, "ok")

        # The CLI sends the token it is given; it is served past authorization (404: nothing to explain).
        url = f"https://127.0.0.1:{operator.metrics_port}"
        base = [*operator_command(), "explain", f"{namespace}/nothing", "--url", url, "--insecure-skip-tls-verify"]
        allowed = subprocess.run([*base, "--token", reader], capture_output=True, text=True, timeout=30)
        assert allowed.returncode == 1
        assert "no failed scheduling attempt recorded" in allowed.stderr
        refused = subprocess.run([*base, "--token", stranger], capture_output=True, text=True, timeout=30)
        assert refused.returncode == 1
        assert f'forbidden: User "{user}" cannot get path' in refused.stderr
        # Without --insecure-skip-tls-verify the self-signed certificate is refused.
        unverified = subprocess.run([*base[:-1], "--token", reader], capture_output=True, text=True, timeout=30)
        assert unverified.returncode == 1
        assert "CERTIFICATE_VERIFY_FAILED" in unverified.stderr
    finally:
        rbac.delete_cluster_role_binding(binding)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_a_provided_certificate_is_served(operator_factory: OperatorFactory, tmp_path: Path) -> None:
    """--tls-cert-file/--tls-private-key-file: a client that trusts that certificate verifies the server."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    request = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
    subprocess.run(
        [*request, "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    operator = operator_factory(extra_args=[f"--tls-cert-file={cert}", f"--tls-private-key-file={key}"])
    context = ssl.create_default_context(cafile=str(cert))
    with urllib.request.urlopen(f"https://localhost:{operator.metrics_port}/healthz", context=context) as response:
        assert response.read() == b"ok"


def test_the_active_replica_reports_the_monitoring_metrics(
    cluster: Cluster,
    kwok_nodes: NodeFactory,
    namespace: str,
    profiles: ProfileFactory,
    operator_factory: OperatorFactory,
    peering_name: str,
) -> None:
    operator = operator_factory()
    labels = {"e2e-group": secrets.token_hex(4)}
    kwok_nodes(cpu="2", memory="8Gi", labels=labels)
    profile = profiles({})
    wait_profile_status(cluster.api, profile, ready=True)
    pods = [pod_manifest("fits", profile, cpu="1", node_selector=labels)]
    pods.append(pod_manifest("huge", profile, cpu="3", node_selector=labels))
    create_pods(cluster.core, namespace, pods)
    wait_pods_bound(cluster.core, namespace, ["fits"], timeout=30)

    text = operator.metrics_text()
    # Its label is `name` (client-go's), which metric()'s own first parameter shadows.
    assert f'leader_election_master_status{{name="{peering_name}"}} 1.0' in text
    # Both pods entered activeQ on their watch event; "huge" went on to unschedulablePods after its attempt,
    # and NodeResourcesFit keeps counting it while it waits.
    assert operator.metric("scheduler_queue_incoming_pods_total", queue="active", event="UnschedulablePodAdd") >= 2
    wait_for(
        lambda: operator.metric("scheduler_unschedulable_pods", plugin="NodeResourcesFit", profile=profile) == 1,
        timeout=15,
        message=lambda: f"unschedulable_pods: {operator.metric('scheduler_unschedulable_pods', profile=profile)}",
    )
    assert operator.metric("scheduler_queue_incoming_pods_total", event="ScheduleAttemptFailure") >= 1
    text = operator.metrics_text()
    assert 'kopf_scheduler_build_info{kube_version="1.36.3"' in text
    assert operator.metric("process_resident_memory_bytes") > 0
    assert "python_gc_collections_total" in text


def _get_url(url: str, token: str | None) -> tuple[int, str, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=15, context=unverified_tls()) as response:
            return response.status, response.headers.get_content_type(), response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get_content_type(), e.read().decode()


def test_refusals_are_kube_schedulers_byte_for_byte(cluster: Cluster, operator_factory: OperatorFactory) -> None:
    if cluster.local is None:
        pytest.skip("needs the local control plane to start kube-scheduler")
    kubeconfig = str(cluster.kubeconfig)
    name = f"kube-scheduler-authn-{secrets.token_hex(3)}"
    upstream = cluster.local.start_kube_scheduler(
        name=name,
        extra_args=[f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"],
    )
    try:
        operator = operator_factory(extra_args=[UPSTREAM_ALWAYS_ALLOW])
        theirs = f"https://127.0.0.1:{upstream.ports['secure']}"
        ours = f"https://127.0.0.1:{operator.metrics_port}"
        # Paths neither always allows (the harness lets kube-scheduler's /metrics through), and /healthz.
        for path, token in [("/nothing", None), ("/nothing", "not-a-token"), ("/healthz", "not-a-token")]:
            expected = _get_url(theirs + path, token)
            assert expected[0] in (401, 403), expected
            assert _get_url(ours + path, token) == expected, (path, token)
        assert _get_url(ours + "/healthz", None) == _get_url(theirs + "/healthz", None) == (200, "text/plain", "ok")
        for path in ("/livez", "/livez?verbose", "/livez/ping", "/readyz"):  # /readyz's checks are ours, see below
            assert _get_url(ours + path, None) == _get_url(theirs + path, None), path
        assert _get_url(ours + "/livez?verbose", None)[2] == "[+]ping ok\nlivez check passed\n"
    finally:
        cluster.local.stop_component(name)


def _status(url: str) -> int:
    """The HTTP status of an anonymous GET; 0 while nothing listens."""
    try:
        return _get_url(url, None)[0]
    except urllib.error.URLError:
        return 0


class _HeldRelay:
    """A TCP relay to the API server that holds every connection until :meth:`release`: an API server that does
    not answer yet, for the operator alone (the test's own client goes straight to it)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._released = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._server.accept()
                threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        self._released.wait()
        upstream = socket.create_connection(self._target)
        for source, sink in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def test_kube_scheduler_flags_and_readyz_false_until_the_cache_syncs(
    cluster: Cluster, crds: list[str], peering_name: str, tmp_path: Path
) -> None:
    """kubeadm's kube-scheduler flags carry over; /livez passes at once, /readyz only once the first LIST is in."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    server = urllib.parse.urlsplit(config["clusters"][0]["cluster"]["server"])
    relay = _HeldRelay((server.hostname or "127.0.0.1", server.port or 443))
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"
    held = tmp_path / "held.kubeconfig"
    held.write_text(yaml.safe_dump(config))
    ensure_peering(cluster.api, peering_name)
    kubeconfig = str(cluster.kubeconfig)
    operator = OperatorProcess(
        held,
        peering_name=peering_name,
        log_dir=tmp_path,
        create_peering=False,
        extra_args=[
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=true",
            "--leader-elect-lease-duration=15s",
            "--leader-elect-resource-namespace=kube-system",
            "--logging-format=json",
            "-v=2",
        ],
    )
    try:
        operator.start(wait=False)
        ours = f"https://127.0.0.1:{operator.metrics_port}"
        wait_for(lambda: _status(ours + "/livez") == 200, timeout=60, message=operator.log_tail)
        time.sleep(2)  # the operator is up and asking; the API server it reaches answers nothing yet
        status, _, body = _get_url(ours + "/readyz?verbose", None)
        assert status == 500
        assert "[-]sched-handler-sync failed: reason withheld\n" in body
        assert body.endswith("readyz check failed\n")
        relay.release()
        wait_for(lambda: _status(ours + "/readyz") == 200, timeout=60, message=operator.log_tail)
        _, _, body = _get_url(ours + "/readyz?verbose", None)
        assert "[+]sched-handler-sync ok\n" in body
        assert re.search(r"\[\+\]peering ok: (active|standby)\n", body), body
        assert '"msg": "--leader-elect-resource-namespace changes nothing' in operator.log_text()  # JSON logs
    finally:
        operator.stop()
        relay.close()
