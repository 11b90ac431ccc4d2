"""``kopf-scheduler explain`` through the API server, offline: which peer is active, which pod and URL that
means, what each refusal says, and the kubeconfig credentials (token, tokenFile, client certificates, exec
plugins, in-cluster) presented to a real TLS server. tests/e2e/test_explain_remote.py runs it for real."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler import cli
from kopf_scheduler.kube.kubeconfig import (
    ClientCertificate,
    Credentials,
    KubeconfigError,
    load_credentials,
    merge_kubeconfigs,
)
from kopf_scheduler.kube.remote_explain import (
    FORWARDED_AUTHORIZATION_HEADER,
    APIServer,
    Peer,
    RemoteExplainError,
    active_peer,
    explain_proxy_path,
    fetch_explanation,
    find_target,
    metrics_port_of,
    parse_peers,
    pod_of_peer,
)
from kopf_scheduler.web.certs import self_signed_certificate

NOW = datetime.datetime(2026, 11, 25, 12, 0, 0, tzinfo=datetime.UTC)


def record(priority: int | None = None, *, ago: float = 1.0, lifetime: int | None = 15) -> dict[str, Any]:
    """A kopf peer record last seen ``ago`` seconds before NOW (fields left out when None: kopf's defaults)."""
    entry: dict[str, Any] = {"lastseen": (NOW - datetime.timedelta(seconds=ago)).isoformat()}
    if priority is not None:
        entry["priority"] = priority
    if lifetime is not None:
        entry["lifetime"] = lifetime
    return entry


# ---- which peer is active --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "active"),
    [
        pytest.param({"ks-0": record(100), "ks-1": record(99)}, "ks-0", id="highest-priority-wins"),
        pytest.param({"ks-0": record(100, ago=16), "ks-1": record(99)}, "ks-1", id="expired-leader-skipped"),
        pytest.param({"ks-0": record(100, ago=15), "ks-1": record(99)}, "ks-1", id="deadline-equal-now-is-dead"),
        pytest.param({"ks-0": record(100, ago=14.9), "ks-1": record(99)}, "ks-0", id="just-alive"),
        pytest.param({"ks-0": record(-5), "ks-1": record(None)}, "ks-1", id="missing-priority-is-0"),
        pytest.param({"ks-0": record(1, ago=59, lifetime=None)}, "ks-0", id="missing-lifetime-is-60"),
        pytest.param({"ks-0": {"priority": 3}}, "ks-0", id="missing-lastseen-is-now"),
        pytest.param({"ks-0": record(100), "ks-1": record(99), "ks-2": None}, "ks-0", id="removed-record-ignored"),
        pytest.param({"ks-0": record(5), "ks-1": record(5, ago=20), "ks-2": record(4)}, "ks-0", id="tie-with-dead"),
    ],
)
def test_the_active_peer_is_the_live_one_with_the_highest_priority(status: dict[str, Any], active: str) -> None:
    assert active_peer(parse_peers(status, NOW), NOW).identity == active


@pytest.mark.parametrize(
    ("status", "message"),
    [
        pytest.param({}, "no replica has registered in ClusterKopfPeering 'p'", id="empty"),
        pytest.param(None, "no replica has registered", id="no-status"),
        pytest.param(
            {"ks-0": record(100, ago=30), "ks-1": record(99, ago=20)},
            "no live replica in ClusterKopfPeering 'p': every peer record has expired (the latest, 'ks-1'",
            id="all-expired",
        ),
        pytest.param(
            {"ks-0": record(7), "ks-1": record(7), "ks-2": record(3)},
            "no active replica: live peers ks-0, ks-1 share priority 7",
            id="tie-at-the-top",
        ),
    ],
)
def test_no_active_peer_is_explained(status: dict[str, Any] | None, message: str) -> None:
    with pytest.raises(RemoteExplainError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        active_peer(parse_peers(status, NOW), NOW, peering="p")


def test_peer_times_with_z_and_without_zone_are_utc() -> None:
    (peer,) = parse_peers({"a": {"lastseen": "2026-11-25T11:59:59Z", "lifetime": 2}}, NOW)
    assert peer == Peer("a", 0, 2, NOW - datetime.timedelta(seconds=1))
    (naive,) = parse_peers({"a": {"lastseen": "2026-11-25T11:59:59"}}, NOW)
    assert naive.lastseen == peer.lastseen


@pytest.mark.parametrize("identity", ["ks-kopf-scheduler-0", "operator-100-ab12cd34", "a.b-c"])
def test_a_pod_identity_is_the_pod_name(identity: str) -> None:
    assert pod_of_peer(identity) == identity


@pytest.mark.parametrize("identity", ["root@laptop/20261125120000/abc", "root@laptop", "Upper-Case", "-x"])
def test_kopfs_own_identities_are_not_pods(identity: str) -> None:
    with pytest.raises(RemoteExplainError, match=r"is not a pod .* reach it with --url"):
        pod_of_peer(identity)


# ---- URLs and ports --------------------------------------------------------------------------------------


def test_the_proxy_path_targets_the_https_metrics_port_and_quotes_names() -> None:
    path = explain_proxy_path(
        operator_namespace="kube-system", operator_pod="ks-kopf-scheduler-1", port=10259, namespace="team a", name="p"
    )
    assert path == "/api/v1/namespaces/kube-system/pods/https:ks-kopf-scheduler-1:10259/proxy/explain/team%20a/p"


def test_the_metrics_port_is_the_container_port_named_metrics() -> None:
    pod = {
        "spec": {
            "containers": [
                {"ports": [{"name": "health", "containerPort": 10260}]},
                {"ports": [{"name": "metrics", "containerPort": 8443}]},
            ]
        }
    }
    assert metrics_port_of(pod) == 8443
    assert metrics_port_of({"spec": {"containers": [{"name": "x"}]}}) == 10259


# ---- the whole conversation, against a fake API server --------------------------------------------------


class FakeAPI:
    def __init__(self, responses: Mapping[str, tuple[int, Any]]) -> None:
        self.responses = dict(responses)
        self.calls: list[tuple[str, dict[str, str]]] = []

    def __call__(self, path: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        self.calls.append((path, dict(headers)))
        status, body = self.responses.get(path, (404, {"kind": "Status", "message": "not found"}))
        return status, json.dumps(body).encode()


PEERING = "/apis/kopf.dev/v1/clusterkopfpeerings/kopf-scheduler"
PROXY = "/api/v1/namespaces/sched/pods/https:ks-1:8443/proxy/explain/default/web"
FORBIDDEN_PROXY = {
    "kind": "Status",
    "status": "Failure",
    "reason": "Forbidden",
    "code": 403,
    "details": {"name": "https:ks-1:8443", "kind": "pods"},
    "message": 'pods "https:ks-1:8443" is forbidden: User "u" cannot get resource "pods/proxy" in API group "" '
    'in the namespace "sched"',
}


def peering_body(annotations: dict[str, str] | None = None, now: datetime.datetime = NOW) -> dict[str, Any]:
    lastseen = now - datetime.timedelta(seconds=1)
    return {
        "metadata": {"name": "kopf-scheduler", "annotations": annotations or {}},
        "status": {
            "ks-0": {
                "priority": 100,
                "lifetime": 15,
                "lastseen": (lastseen - datetime.timedelta(seconds=40)).isoformat(),
            },
            "ks-1": {"priority": 99, "lifetime": 15, "lastseen": lastseen.isoformat()},
        },
    }


def pod_body() -> dict[str, Any]:
    return {"spec": {"containers": [{"ports": [{"name": "metrics", "containerPort": 8443}]}]}}


def healthy_api(**overrides: tuple[int, Any]) -> FakeAPI:
    responses = {
        PEERING: (200, peering_body({"kopf-scheduler.io/namespace": "sched"})),
        "/api/v1/namespaces/sched/pods/ks-1": (200, pod_body()),
        PROXY: (200, {"pod": "default/web", "nodes": {}}),
    }
    return FakeAPI({**responses, **overrides})


def target_of(api: FakeAPI, **kwargs: Any) -> Any:
    return find_target(api, peering_name="kopf-scheduler", namespace="default", name="web", now=lambda: NOW, **kwargs)


def test_the_active_replica_is_found_and_asked_with_the_forwarded_token() -> None:
    api = healthy_api()
    target = target_of(api)
    assert (target.pod, target.namespace, target.port, target.path) == ("ks-1", "sched", 8443, PROXY)
    assert fetch_explanation(api, target, token="t0k", peering_name="kopf-scheduler") == (
        200,
        {"pod": "default/web", "nodes": {}},
    )
    assert api.calls[-1] == (PROXY, {FORWARDED_AUTHORIZATION_HEADER: "Bearer t0k"})


def test_the_operator_namespace_comes_from_the_flag_then_helm_then_the_context() -> None:
    helm = FakeAPI({PEERING: (200, peering_body({"meta.helm.sh/release-namespace": "h"}))})
    with pytest.raises(RemoteExplainError, match="'ks-1' is not a pod in namespace 'h'"):
        target_of(helm)
    bare = FakeAPI({PEERING: (200, peering_body())})
    with pytest.raises(RemoteExplainError, match="'ks-1' is not a pod in namespace 'ctx'"):
        target_of(bare, fallback_namespace="ctx")
    assert target_of(healthy_api(), operator_namespace="sched", port=9000).port == 9000


def test_a_missing_peering_object_says_so() -> None:
    with pytest.raises(RemoteExplainError, match=r"there is no ClusterKopfPeering 'kopf-scheduler'.*--peering-name"):
        target_of(FakeAPI({}))


def test_a_forbidden_peering_object_names_the_missing_permissions() -> None:
    denied = {"kind": "Status", "code": 403, "message": 'clusterkopfpeerings.kopf.dev "kopf-scheduler" is forbidden'}
    with pytest.raises(RemoteExplainError) as raised:
        target_of(healthy_api(**{PEERING: (403, denied)}))
    message = str(raised.value)
    assert message.startswith("reading ClusterKopfPeering 'kopf-scheduler': clusterkopfpeerings.kopf.dev \"kopf")
    assert "needs get on clusterkopfpeerings.kopf.dev 'kopf-scheduler'" in message
    assert "pods/proxy" in message
    assert "metrics-reader" in message


def test_a_forbidden_proxy_is_the_api_servers_refusal_with_the_hint() -> None:
    api = healthy_api(**{PROXY: (403, FORBIDDEN_PROXY)})
    with pytest.raises(RemoteExplainError, match=r'cannot get resource "pods/proxy".*; explain through the API'):
        fetch_explanation(api, target_of(api), token="t", peering_name="kopf-scheduler")


def test_the_operators_own_refusal_says_who_refused_and_why() -> None:
    operator_403 = {"kind": "Status", "code": 403, "details": {}, "message": 'forbidden: User "system:anonymous"'}
    api = healthy_api(**{PROXY: (403, operator_403)})
    with pytest.raises(RemoteExplainError, match=r"replica ks-1 refused: .*no bearer token to forward"):
        fetch_explanation(api, target_of(api), token=None, peering_name="kopf-scheduler")
    with pytest.raises(RemoteExplainError, match=r"replica ks-1 refused: .*get on /explain/\*"):
        fetch_explanation(api, target_of(api), token="t", peering_name="kopf-scheduler")
    assert api.calls[-2][1] == {}  # no token, no forwarded header


def test_nothing_recorded_is_the_operators_404_and_a_bad_gateway_is_an_error() -> None:
    nothing = {"pod": "default/web", "message": "no failed scheduling attempt recorded for pod default/web"}
    api = healthy_api(**{PROXY: (404, nothing)})
    assert fetch_explanation(api, target_of(api), token="t", peering_name="kopf-scheduler") == (404, nothing)
    unreachable = {"kind": "Status", "code": 503, "message": "error trying to reach service: dial tcp: refused"}
    api = healthy_api(**{PROXY: (503, unreachable)})
    with pytest.raises(RemoteExplainError) as raised:
        fetch_explanation(api, target_of(api), token="t", peering_name="kopf-scheduler")
    assert str(raised.value) == (
        "replica ks-1, the active peer (last seen 2026-11-25T11:59:59+00:00), does not answer: error trying to "
        "reach service: dial tcp: refused; if it just died, a standby takes over once its record expires "
        "(lifetime 15 s): try again"
    )
    api = healthy_api(**{PROXY: (500, {"kind": "Status", "code": 500, "message": "boom"})})
    with pytest.raises(RemoteExplainError, match=f"^replica ks-1 via {PROXY}: HTTP 500: boom$"):
        fetch_explanation(api, target_of(api), token="t", peering_name="kopf-scheduler")


# ---- credentials -----------------------------------------------------------------------------------------


def write_kubeconfig(path: Path, *, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "ns1"}}],
                "clusters": [{"name": "k", "cluster": cluster or {"server": "https://127.0.0.1:6443/"}}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


def test_a_token_and_a_relative_token_file(tmp_path: Path) -> None:
    creds = load_credentials(kubeconfig=str(write_kubeconfig(tmp_path / "a", user={"token": "abc"})))
    assert (creds.server, creds.token, creds.namespace) == ("https://127.0.0.1:6443", "abc", "ns1")
    assert creds.auth_headers() == {"Authorization": "Bearer abc"}
    (tmp_path / "tok").write_text("from-file\n")
    creds = load_credentials(kubeconfig=str(write_kubeconfig(tmp_path / "b", user={"tokenFile": "tok"})))
    assert creds.token == "from-file"


def test_kubeconfig_files_merge_first_one_wins(tmp_path: Path) -> None:
    first = write_kubeconfig(tmp_path / "first", user={"token": "one"})
    second = tmp_path / "second"
    second.write_text(
        yaml.safe_dump(
            {
                "current-context": "other",
                "contexts": [{"name": "other", "context": {"cluster": "k", "user": "v"}}],
                "users": [{"name": "u", "user": {"token": "shadowed"}}, {"name": "v", "user": {"token": "two"}}],
            }
        )
    )
    env = {"KUBECONFIG": f"{first}:{second}:{tmp_path / 'missing'}"}
    assert load_credentials(environ=env).token == "one"
    other = load_credentials(context="other", environ=env)
    assert (other.token, other.namespace) == ("two", "default")
    merged = merge_kubeconfigs(
        [(first, yaml.safe_load(first.read_text())), (second, yaml.safe_load(second.read_text()))]
    )
    assert merged["current-context"] == "c"


def test_unusable_kubeconfigs_say_why(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="does not exist"):
        load_credentials(kubeconfig=str(tmp_path / "nope"))
    with pytest.raises(KubeconfigError, match="context 'x' is not in the kubeconfig"):
        load_credentials(kubeconfig=str(write_kubeconfig(tmp_path / "a", user={})), context="x")
    provider = {"auth-provider": {"name": "gcp"}}
    with pytest.raises(KubeconfigError, match="auth-provider 'gcp' is not supported"):
        load_credentials(kubeconfig=str(write_kubeconfig(tmp_path / "b", user=provider)))
    with pytest.raises(KubeconfigError, match="not in a cluster"):
        load_credentials(environ={"HOME": str(tmp_path)})


def test_in_cluster_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kopf_scheduler.kube import kubeconfig

    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(b"CA")
    (tmp_path / "namespace").write_text("kube-system")
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT_DIR", tmp_path)
    env = {"HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = load_credentials(environ=env)
    assert (creds.server, creds.token, creds.ca_pem, creds.namespace) == (
        "https://10.96.0.1:443",
        "sa-token",
        b"CA",
        "kube-system",
    )


def test_an_exec_plugin_gets_exec_info_and_returns_a_token(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os, sys\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['spec']['interactive'] is False and info['spec']['cluster']['server'], info\n"
        "token = os.environ['SECRET'] + sys.argv[1]\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential', 'status': {'token': token}}))\n"
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin), "-x"],
            "env": [{"name": "SECRET", "value": "s3"}],
            "provideClusterInfo": True,
        }
    }
    assert load_credentials(kubeconfig=str(write_kubeconfig(tmp_path / "c", user=user))).token == "s3-x"
    failing = {"exec": {"command": sys.executable, "args": ["-c", "import sys; sys.exit('no login')"]}}
    with pytest.raises(KubeconfigError, match="exited 1: no login"):
        load_credentials(kubeconfig=str(write_kubeconfig(tmp_path / "d", user=failing)))


# ---- the credentials on the wire: a TLS server that wants the client certificate -------------------------


def client_certificate(directory: Path) -> tuple[bytes, bytes]:
    """A self-signed clientAuth certificate (web.certs makes server certificates only), by the openssl CLI."""
    cert, key = directory / "client.crt", directory / "client.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=jane",
            "-addext",
            "extendedKeyUsage=clientAuth",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert.read_bytes(), key.read_bytes()


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, bytes]]:
    return {
        "server": self_signed_certificate(["localhost", "127.0.0.1"]),
        "client": client_certificate(tmp_path_factory.mktemp("client")),
    }


@pytest.fixture
def tls_server(pairs: dict[str, tuple[bytes, bytes]], tmp_path: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An HTTPS server on 127.0.0.1 that requires the client certificate and records what it saw."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "cert": bool(peer)})
            body = json.dumps({"ok": True}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    (tmp_path / "s.crt").write_bytes(pairs["server"][0])
    (tmp_path / "s.key").write_bytes(pairs["server"][1])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "s.crt", tmp_path / "s.key")
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=pairs["client"][0].decode())
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_client_certificate_data_is_presented_and_the_ca_data_checks_the_server(
    pairs: dict[str, tuple[bytes, bytes]], tls_server: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, seen = tls_server
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    kubeconfig = write_kubeconfig(
        tmp_path / "certs",
        user={"client-certificate-data": b64(pairs["client"][0]), "client-key-data": b64(pairs["client"][1])},
        cluster={"server": url, "certificate-authority-data": b64(pairs["server"][0])},
    )
    creds = load_credentials(kubeconfig=str(kubeconfig))
    assert creds.token is None
    assert creds.client_certificate == ClientCertificate(*pairs["client"])
    assert APIServer(creds)("/api", {}) == (200, b'{"ok": true}')
    assert seen == [{"path": "/api", "auth": None, "cert": True}]


def test_certificate_files_and_a_token_together(
    pairs: dict[str, tuple[bytes, bytes]], tls_server: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, seen = tls_server
    for name, data in (("c.crt", pairs["client"][0]), ("c.key", pairs["client"][1]), ("ca.crt", pairs["server"][0])):
        (tmp_path / name).write_bytes(data)
    kubeconfig = write_kubeconfig(
        tmp_path / "files",
        user={"client-certificate": "c.crt", "client-key": "c.key", "token": "tk"},
        cluster={"server": url, "certificate-authority": "ca.crt"},
    )
    assert APIServer(load_credentials(kubeconfig=str(kubeconfig)))("/x", {"H": "v"})[0] == 200
    assert seen == [{"path": "/x", "auth": "Bearer tk", "cert": True}]


def test_without_the_client_certificate_the_handshake_fails(
    pairs: dict[str, tuple[bytes, bytes]], tls_server: tuple[str, list[dict[str, Any]]]
) -> None:
    url, _ = tls_server
    with pytest.raises(RemoteExplainError, match="cannot reach the API server"):
        APIServer(Credentials(server=url, token="t", ca_pem=pairs["server"][0]))("/x", {})


def test_a_key_that_does_not_match_its_certificate_is_refused(pairs: dict[str, tuple[bytes, bytes]]) -> None:
    mismatched = ClientCertificate(pairs["client"][0], pairs["server"][1])
    with pytest.raises(KubeconfigError, match="do not load"):
        Credentials(server="https://x", client_certificate=mismatched).ssl_context()


# ---- the command line ------------------------------------------------------------------------------------


def test_explain_without_url_goes_through_the_api_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kopf_scheduler.kube import remote_explain

    now = datetime.datetime.now(datetime.UTC)  # the CLI reads the clock
    api = healthy_api(**{PEERING: (200, peering_body({"kopf-scheduler.io/namespace": "sched"}, now))})
    monkeypatch.setattr(remote_explain, "APIServer", lambda credentials: api)
    kubeconfig = write_kubeconfig(tmp_path / "k", user={"token": "user-token"})
    args = ["explain", "default/web", "--kubeconfig", str(kubeconfig), "--json", "--operator-namespace", "sched"]
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out) == {"pod": "default/web", "nodes": {}}
    assert api.calls[-1] == (PROXY, {FORWARDED_AUTHORIZATION_HEADER: "Bearer user-token"})
    assert cli.main([*args, "--token", "flag-token"]) == 0
    assert api.calls[-1][1] == {FORWARDED_AUTHORIZATION_HEADER: "Bearer flag-token"}
    api.responses[PEERING] = (404, {})
    assert cli.main(["explain", "default/web", "--kubeconfig", str(kubeconfig)]) == 1
    assert "there is no ClusterKopfPeering 'kopf-scheduler'" in capsys.readouterr().err
    assert cli.main(["explain", "nopod", "--kubeconfig", str(kubeconfig)]) == 2


def test_the_kubectl_plugin_is_a_console_script_of_the_same_main() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    scripts = project["project"]["scripts"]
    assert scripts["kubectl-kopf_scheduler"] == scripts["kopf-scheduler"] == "kopf_scheduler.cli:main"


def test_the_kubectl_plugin_shows_its_kubectl_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kubectl-kopf_scheduler", "explain"])
    assert cli.build_parser().prog == "kubectl kopf-scheduler"
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kopf-scheduler"])
    assert cli.build_parser().prog == "kopf-scheduler"


def test_url_mode_takes_the_context_users_token_even_from_an_exec_plugin(tmp_path: Path) -> None:
    """--url talks to the operator: the kubeconfig gives only the token (no cluster entry needed)."""
    from kopf_scheduler.kube.kubeconfig import user_token

    exec_user = {"exec": {"command": sys.executable, "args": ["-c", EXEC_PRINTING_TOKEN]}}
    kubeconfig = tmp_path / "k"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "current-context": "a",
                "contexts": [{"name": "a", "context": {"user": "ua"}}, {"name": "b", "context": {"user": "ub"}}],
                "users": [{"name": "ua", "user": {"token": "token-a"}}, {"name": "ub", "user": exec_user}],
            }
        )
    )
    assert user_token(kubeconfig=str(kubeconfig)) == "token-a"
    assert user_token(kubeconfig=str(kubeconfig), context="b") == "from-exec"
    token, _ = cli._explain_credentials({"kubeconfig": str(kubeconfig), "context": "b"})
    assert token == "from-exec"
    assert user_token(environ={"HOME": str(tmp_path / "nowhere")}) is None


EXEC_PRINTING_TOKEN = (
    "import json; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
    "'status': {'token': 'from-exec'}}))"
)
