"""The local control plane's aggregation layer: its certificates, and an operator outside the cluster registered
as the ``explain.kopf-scheduler.io`` aggregated API.

kube-apiserver serves an APIService by proxying to it over TLS, presenting the front-proxy client certificate
(``--proxy-client-cert-file``) and naming the user in ``X-Remote-*`` headers that the backend trusts because
that certificate verifies against ``--requestheader-client-ca-file`` and its name is allowed
(``--requestheader-allowed-names``); the API server publishes those settings in
``kube-system/extension-apiserver-authentication``. :func:`write_pki` makes the CAs and certificates with
``cryptography`` (ECDSA P-256: milliseconds, where RSA takes a good part of a second): the front proxy's CA and
client certificate, and a client CA (``--client-ca-file``) so that tests can log in with client certificates
(:func:`client_certificate_kubeconfig`), as kind's and kubeadm's admin kubeconfigs do.

Where the operator runs as a process on this machine (the demo, e2e tests) there are no pods and no cluster
network. The API server refuses loopback addresses in Endpoints and EndpointSlices, so an EndpointSlice to
127.0.0.1 (which ``--enable-aggregator-routing`` would dial) cannot be written; an ``ExternalName`` Service
naming ``localhost`` can, and the aggregator's default routing (to the Service's cluster IP, or for an
ExternalName Service to its name) dials ``localhost:<port>``. So :func:`register_operator` writes an ExternalName
Service and the APIService, and the control plane keeps the default routing.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: The front proxy's certificate name: the one name the backend accepts (``--requestheader-allowed-names``).
FRONT_PROXY_CLIENT = "front-proxy-client"
GROUP, VERSION = "explain.kopf-scheduler.io", "v1alpha1"
API_SERVICE = f"{VERSION}.{GROUP}"


@dataclass(frozen=True)
class Pki:
    """The files :func:`write_pki` wrote."""

    directory: Path

    @property
    def client_ca(self) -> Path:
        return self.directory / "client-ca.crt"

    @property
    def client_ca_key(self) -> Path:
        return self.directory / "client-ca.key"

    @property
    def front_proxy_ca(self) -> Path:
        return self.directory / "front-proxy-ca.crt"

    @property
    def front_proxy_client(self) -> tuple[Path, Path]:
        return self.directory / "front-proxy-client.crt", self.directory / "front-proxy-client.key"

    def apiserver_args(self) -> list[str]:
        """kube-apiserver's flags: client certificates, the requestheader authenticator, the proxy's identity."""
        cert, key = self.front_proxy_client
        return [
            f"--client-ca-file={self.client_ca}",
            f"--requestheader-client-ca-file={self.front_proxy_ca}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-username-headers=X-Remote-User",
            f"--proxy-client-cert-file={cert}",
            f"--proxy-client-key-file={key}",
        ]


def write_pki(directory: Path) -> Pki:
    """The client CA, the front proxy's CA and its client certificate, in ``directory``."""
    pki = Pki(directory)
    ca_cert, ca_key = new_ca("kopf-scheduler-local-client-ca")
    _write(pki.client_ca, ca_cert)
    _write(pki.client_ca_key, ca_key, private=True)
    proxy_ca_cert, proxy_ca_key = new_ca("kopf-scheduler-local-front-proxy-ca")
    _write(pki.front_proxy_ca, proxy_ca_cert)
    cert, key = issue(proxy_ca_cert, proxy_ca_key, FRONT_PROXY_CLIENT, client=True)
    _write(pki.front_proxy_client[0], cert)
    _write(pki.front_proxy_client[1], key, private=True)
    return pki


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def new_ca(name: str) -> tuple[bytes, bytes]:
    """A self-signed CA: (certificate PEM, key PEM), valid from an hour ago for ten days."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = _builder(subject, subject, key, ca=True).sign(key, hashes.SHA256())
    return certificate.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _builder(subject: Any, issuer: Any, key: Any, *, ca: bool) -> Any:
    """A certificate of ``key`` for ``subject`` by ``issuer``, valid from an hour ago for ten days."""
    from cryptography import x509

    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=10))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(_usage(ca=ca), critical=True)
    )


def issue(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    name: str,
    *,
    organizations: Sequence[str] = (),
    client: bool = False,
    hosts: Sequence[str] = (),
) -> tuple[bytes, bytes]:
    """A certificate signed by the CA: a client one (CN the user, O the groups, as the API server reads them)
    or a server one for ``hosts``. (certificate PEM, key PEM)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = _key()
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject = x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, name)])
    purpose = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = _builder(subject, ca_cert.subject, key, ca=False).add_extension(
        x509.ExtendedKeyUsage([purpose]), critical=False
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    return certificate.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _usage(*, ca: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        key_encipherment=False,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def client_certificate_kubeconfig(
    pki: Pki, *, server: str, server_ca: Path, user: str, groups: Sequence[str] = (), path: Path
) -> Path:
    """A kubeconfig that logs in as ``user`` (in ``groups``) with a client certificate of the client CA."""
    import base64

    cert, key = issue(
        pki.client_ca.read_bytes(), pki.client_ca_key.read_bytes(), user, organizations=groups, client=True
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(server_ca)}}],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": base64.b64encode(cert).decode(),
                    "client-key-data": base64.b64encode(key).decode(),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def registration(
    *, port: int, namespace: str = "kube-system", service: str = "kopf-scheduler-explain", ca_bundle: bytes = b""
) -> list[dict[str, Any]]:
    """The ExternalName Service to ``localhost:<port>`` and the APIService pointing at it.

    Without ``ca_bundle`` the aggregator does not verify the operator's (self-signed) certificate, as
    metrics-server's default manifests do; with one, the operator's certificate must name
    ``<service>.<namespace>.svc``.
    """
    import base64

    tls: dict[str, Any] = (
        {"caBundle": base64.b64encode(ca_bundle).decode()} if ca_bundle else {"insecureSkipTLSVerify": True}
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"name": "https", "port": port}]},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": API_SERVICE},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "service": {"namespace": namespace, "name": service, "port": port},
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                **tls,
            },
        },
    ]


def register_operator(api: Any, *, port: int, namespace: str = "kube-system", ca_bundle: bytes = b"") -> None:
    """Create or replace :func:`registration`'s objects through a ``kubernetes`` ApiClient."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    service, api_service = registration(port=port, namespace=namespace, ca_bundle=ca_bundle)
    core = client.CoreV1Api(api)
    try:
        core.delete_namespaced_service(service["metadata"]["name"], namespace)
    except ApiException as e:
        if e.status != 404:
            raise
    core.create_namespaced_service(namespace, service)
    custom = client.CustomObjectsApi(api)
    try:
        custom.delete_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", API_SERVICE)
    except ApiException as e:
        if e.status != 404:
            raise
    custom.create_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", api_service)


def unregister_operator(api: Any, *, namespace: str = "kube-system", service: str = "kopf-scheduler-explain") -> None:
    """Remove :func:`register_operator`'s objects (those already gone are fine)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    with contextlib.suppress(ApiException):
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            "apiregistration.k8s.io", "v1", "apiservices", API_SERVICE
        )
    with contextlib.suppress(ApiException):
        client.CoreV1Api(api).delete_namespaced_service(service, namespace)


def wait_available(api: Any, *, timeout: float = 60.0) -> dict[str, Any]:
    """The APIService once its Available condition is True (the aggregator reached the operator's discovery)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    while True:
        found = custom.get_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", API_SERVICE)
        conditions = (found.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions):
            return dict(found)
        if time.monotonic() > deadline:
            raise TimeoutError(f"APIService {API_SERVICE} not Available after {timeout:.0f}s: {conditions}")
        time.sleep(0.5)
