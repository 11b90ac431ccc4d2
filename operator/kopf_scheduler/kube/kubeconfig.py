"""Who the CLI is to the API server: a kubeconfig context (or the pod's ServiceAccount), as kubectl reads it.

The operator logs in through kopf; the command line tools (``kopf-scheduler explain`` through the API server)
need the *user's* own credentials instead, so that RBAC applies to them. This module restates the parts of
client-go's ``clientcmd`` loading rules that matter here, with the standard library only (the CLI must
start fast and must not need the ``kubernetes`` package):

- files: ``--kubeconfig``, else every file of ``$KUBECONFIG`` merged (the first file to set a map entry or
  ``current-context`` wins, as ``clientcmd`` merges), else ``~/.kube/config``; with none of them, the
  in-cluster ServiceAccount (``KUBERNETES_SERVICE_HOST``/``_PORT``, its token and CA);
- the context: ``--context`` or ``current-context``; its cluster (``server``, ``certificate-authority[-data]``,
  ``insecure-skip-tls-verify``) and user (``token``, ``tokenFile``,
  ``client-certificate[-data]``/``client-key[-data]``, and ``exec`` credential plugins, which may return a
  token or a client certificate); relative file paths are relative to the kubeconfig that names them.

Not supported (a clear error, not a silent anonymous request): ``auth-provider`` plugins (removed from
client-go in 1.26) and basic auth (removed from the API server in 1.19).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: The ExecCredential versions we send (the plugin's ``apiVersion``, defaulting to v1).
EXEC_API_VERSION = "client.authentication.k8s.io/v1"


class KubeconfigError(Exception):
    """No usable kubeconfig or in-cluster account, or one this module cannot use (the message says why)."""


@dataclass(frozen=True)
class ClientCertificate:
    """A client certificate and key as PEM bytes (from files, ``*-data`` fields or an exec plugin)."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to prove who we are to it."""

    server: str
    token: str | None = None
    client_certificate: ClientCertificate | None = None
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    namespace: str = "default"
    #: Where they came from, for messages: ``context "kind-kind" of ~/.kube/config``, ``in-cluster``.
    source: str = ""

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context that checks the API server (unless told not to) and presents the client certificate."""
        context = ssl.create_default_context()
        if self.ca_pem:
            context.load_verify_locations(cadata=self.ca_pem.decode())
        if self.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_certificate is not None:
            _load_client_certificate(context, self.client_certificate)
        return context


def _load_client_certificate(context: ssl.SSLContext, certificate: ClientCertificate) -> None:
    """``ssl`` loads key pairs from files only: write them to a private temp dir, load, remove."""
    with tempfile.TemporaryDirectory(prefix="kopf-scheduler-") as directory:
        cert_path, key_path = Path(directory, "tls.crt"), Path(directory, "tls.key")
        for path, data in ((cert_path, certificate.cert_pem), (key_path, certificate.key_pem)):
            path.touch(mode=0o600)
            path.write_bytes(data)
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as e:
            raise KubeconfigError(f"the client certificate and key do not load: {e}") from e


def kubeconfig_paths(explicit: str | None, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """The files to merge, in precedence order (``--kubeconfig`` alone, else ``$KUBECONFIG``, else the default)."""
    if explicit:
        return [Path(explicit).expanduser()]
    listed = [Path(p).expanduser() for p in (environ.get("KUBECONFIG") or "").split(os.pathsep) if p]
    if listed:
        return [p for p in listed if p.exists()]
    default = Path(environ.get("HOME") or Path.home(), ".kube", "config")
    return [default] if default.exists() else []


def merge_kubeconfigs(documents: Sequence[tuple[Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """clientcmd's merge: the first file to define a cluster, user or context (or current-context) wins.

    Each named entry remembers the directory of the file it came from (``_dir``) for its relative paths.
    """
    merged: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": ""}
    for path, document in documents:
        if not merged["current-context"] and document.get("current-context"):
            merged["current-context"] = document["current-context"]
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in document.get(section) or []:
                name = entry.get("name")
                if name is not None and name not in merged[section]:
                    merged[section][name] = {**(entry.get(key) or {}), "_dir": str(path.parent)}
    return merged


def load_credentials(
    *, kubeconfig: str | None = None, context: str | None = None, environ: Mapping[str, str] = os.environ
) -> Credentials:
    """The credentials of ``context`` (or the current one); the in-cluster account when there is no kubeconfig."""
    paths = kubeconfig_paths(kubeconfig, environ)
    if kubeconfig and not paths[0].exists():
        raise KubeconfigError(f"kubeconfig {kubeconfig} does not exist")
    if not paths:
        if context:
            raise KubeconfigError(f"no kubeconfig found, so there is no context {context!r}")
        return in_cluster_credentials(environ)
    documents = []
    for path in paths:
        try:
            documents.append((path, yaml.safe_load(path.read_text()) or {}))
        except (OSError, yaml.YAMLError) as e:
            raise KubeconfigError(f"cannot read kubeconfig {path}: {e}") from e
    return credentials_from_config(merge_kubeconfigs(documents), context=context, environ=environ)


def user_token(
    *, kubeconfig: str | None = None, context: str | None = None, environ: Mapping[str, str] = os.environ
) -> str | None:
    """The bearer token of the context's user (``token``, ``tokenFile`` or an exec plugin's), else None.

    For ``explain --url``, which talks to the operator, not the API server: no cluster entry is needed.
    """
    paths = kubeconfig_paths(kubeconfig, environ)
    documents = []
    for path in paths:
        try:
            documents.append((path, yaml.safe_load(path.read_text()) or {}))
        except (OSError, yaml.YAMLError):
            continue
    if not documents:
        return None
    config = merge_kubeconfigs(documents)
    ctx = config["contexts"].get(context or config["current-context"]) or {}
    user = config["users"].get(ctx.get("user"), {}) if ctx.get("user") else {}
    cluster = config["clusters"].get(ctx.get("cluster")) or {}
    token, _ = user_credentials(user, cluster_server=str(cluster.get("server") or ""), environ=environ)
    return token


def credentials_from_config(
    config: Mapping[str, Any], *, context: str | None = None, environ: Mapping[str, str] = os.environ
) -> Credentials:
    name = context or config.get("current-context") or ""
    if not name:
        raise KubeconfigError("the kubeconfig has no current-context: pass --context")
    ctx = config["contexts"].get(name)
    if ctx is None:
        raise KubeconfigError(f"context {name!r} is not in the kubeconfig")
    cluster = config["clusters"].get(ctx.get("cluster"))
    if cluster is None or not cluster.get("server"):
        raise KubeconfigError(f"context {name!r} names cluster {ctx.get('cluster')!r}, which has no server")
    user = config["users"].get(ctx.get("user"), {}) if ctx.get("user") else {}
    token, certificate = user_credentials(user, cluster_server=cluster["server"], environ=environ)
    return Credentials(
        server=str(cluster["server"]).rstrip("/"),
        token=token,
        client_certificate=certificate,
        ca_pem=_data_or_file(cluster, "certificate-authority"),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify")),
        namespace=ctx.get("namespace") or "default",
        source=f"context {name!r}",
    )


def user_credentials(
    user: Mapping[str, Any], *, cluster_server: str = "", environ: Mapping[str, str] = os.environ
) -> tuple[str | None, ClientCertificate | None]:
    """The bearer token and client certificate of a kubeconfig ``users[].user`` entry."""
    if user.get("auth-provider"):
        name = (user["auth-provider"] or {}).get("name", "?")
        raise KubeconfigError(f"auth-provider {name!r} is not supported (client-go dropped them): use an exec plugin")
    if user.get("username") and not user.get("token"):
        raise KubeconfigError("basic auth (username/password) is not supported: use a token or a client certificate")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = _read(_resolve(user, user["tokenFile"])).decode().strip()
    cert, key = _data_or_file(user, "client-certificate"), _data_or_file(user, "client-key")
    if bool(cert) != bool(key):
        raise KubeconfigError("the kubeconfig user has a client certificate without its key, or a key without one")
    certificate = ClientCertificate(cert, key) if cert and key else None
    if user.get("exec"):
        exec_token, exec_certificate = run_exec_plugin(user["exec"], cluster_server=cluster_server, environ=environ)
        token = token or exec_token
        certificate = certificate or exec_certificate
    return (str(token) if token else None), certificate


def run_exec_plugin(
    spec: Mapping[str, Any], *, cluster_server: str = "", environ: Mapping[str, str] = os.environ
) -> tuple[str | None, ClientCertificate | None]:
    """Run a client-go exec credential plugin once and take ``status.token`` or the client certificate.

    The plugin gets ``KUBERNETES_EXEC_INFO`` (an ExecCredential with ``interactive: false``), its ``env``
    and ``args``; nothing is cached (one CLI call is one request or three).
    """
    command = spec.get("command")
    if not command:
        raise KubeconfigError("the kubeconfig's exec plugin has no command")
    api_version = spec.get("apiVersion") or EXEC_API_VERSION
    info: dict[str, Any] = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    if spec.get("provideClusterInfo"):
        info["spec"]["cluster"] = {"server": cluster_server}
    env = {**environ, **{e["name"]: e["value"] for e in spec.get("env") or []}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    try:
        done = subprocess.run(
            [command, *(spec.get("args") or [])], env=env, capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        hint = f" ({spec['installHint'].strip()})" if spec.get("installHint") else ""
        raise KubeconfigError(f"exec plugin {command!r} failed to run: {e}{hint}") from e
    if done.returncode != 0:
        raise KubeconfigError(f"exec plugin {command!r} exited {done.returncode}: {done.stderr.decode().strip()}")
    try:
        status = json.loads(done.stdout).get("status") or {}
    except (ValueError, AttributeError) as e:
        raise KubeconfigError(f"exec plugin {command!r} did not print an ExecCredential: {e}") from e
    certificate = None
    if status.get("clientCertificateData") and status.get("clientKeyData"):
        certificate = ClientCertificate(status["clientCertificateData"].encode(), status["clientKeyData"].encode())
    if not status.get("token") and certificate is None:
        raise KubeconfigError(f"exec plugin {command!r} returned neither a token nor a client certificate")
    return status.get("token"), certificate


def in_cluster_credentials(environ: Mapping[str, str] = os.environ) -> Credentials:
    """The pod's ServiceAccount, as client-go's ``rest.InClusterConfig``."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError("no kubeconfig ($KUBECONFIG, ~/.kube/config, --kubeconfig) and not in a cluster")
    try:
        token = _read(SERVICE_ACCOUNT_DIR / "token").decode().strip()
        ca = _read(SERVICE_ACCOUNT_DIR / "ca.crt")
    except KubeconfigError as e:
        raise KubeconfigError(f"in a cluster but without a ServiceAccount token: {e}") from e
    try:
        namespace = _read(SERVICE_ACCOUNT_DIR / "namespace").decode().strip() or "default"
    except KubeconfigError:
        namespace = "default"
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return Credentials(server=server, token=token, ca_pem=ca, namespace=namespace, source="in-cluster")


def _data_or_file(entry: Mapping[str, Any], key: str) -> bytes | None:
    """``<key>-data`` (base64) wins over the file ``<key>``, as in clientcmd."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(data, validate=True)
        except ValueError as e:
            raise KubeconfigError(f"{key}-data is not base64: {e}") from e
    path = entry.get(key)
    return _read(_resolve(entry, path)) if path else None


def _resolve(entry: Mapping[str, Any], path: str) -> Path:
    resolved = Path(path).expanduser()
    return resolved if resolved.is_absolute() else Path(entry.get("_dir") or ".", resolved)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise KubeconfigError(f"cannot read {path}: {e.strerror or e}") from e
