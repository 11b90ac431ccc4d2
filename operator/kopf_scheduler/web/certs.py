"""The serving certificate of the metrics port: the files given (reloaded when they change), or a self-signed
one made at start-up.

kube-scheduler serves 10259 over HTTPS whether or not it was given a certificate: without
``--tls-cert-file``/``--tls-private-key-file`` it generates a self-signed one in memory
(``k8s.io/apiserver`` ``SecureServingOptions.MaybeDefaultWithSelfSignedCerts``), and clients such as
Prometheus skip verification or pin it. We do the same, with the ``cryptography`` library, in a child
interpreter (:class:`CertificateInChild`): importing the library costs ≈ 19 MiB of resident memory for the
life of a process (measured: cryptography 50.0.2, CPython 3.11), a fifth of the operator's footprint, for a
certificate made once. Python's ssl module loads a certificate only from files, so the PEMs live for an
instant in a private temporary directory (the chart's /tmp emptyDir: the root filesystem is read-only) and
are removed once the context holds them.

Nothing verifies a self-signed certificate, so its key guards no more than the TLS session itself; give the
operator a real certificate (cert-manager, the cluster CA) when clients must verify it.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_VALIDITY = datetime.timedelta(days=365)


def server_context(
    *, cert_file: str | None, key_file: str | None, pair: tuple[bytes, bytes] | None = None
) -> ssl.SSLContext:
    """A TLS server context: the given files, else ``pair`` (certificate and key PEM, e.g. from
    :class:`CertificateInChild`)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file and key_file:
        context.load_cert_chain(cert_file, key_file)
    elif pair is not None:
        load_pem_pair(context, *pair)
    else:
        raise ValueError("a serving certificate needs files or a pair")
    return context


def serving_hosts(hostname: str, address: str) -> list[str]:
    """What clients may call the metrics port: localhost, the pod's hostname, loopback, the bind address."""
    return ["localhost", hostname, "127.0.0.1", "::1", address]


def certificate_names(hosts: Iterable[str]) -> list[str]:
    """The names a self-signed certificate is made for: ``hosts`` without wildcard addresses."""
    return [h for h in dict.fromkeys(hosts) if h not in ("0.0.0.0", "::", "")]


class CertificateInChild:
    """:func:`self_signed_certificate`, made by a child interpreter running this file.

    The child keeps ``cryptography``'s memory out of the operator (see the module's docstring) and its ≈ 0.1 s
    of key generation off the event loop. ``start`` only spawns it, so the operator starts it first thing
    (``cli.run``) and collects the pair (:meth:`pair`) when the metrics port is set up.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process

    @classmethod
    def start(cls, hosts: Iterable[str]) -> CertificateInChild:
        command = [sys.executable, "-I", __file__, *hosts]
        return cls(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))

    async def pair(self) -> tuple[bytes, bytes]:
        """(certificate PEM, private key PEM), once the child is done."""
        out, err = await asyncio.to_thread(self._process.communicate)
        end = b"-----END CERTIFICATE-----\n"
        if self._process.returncode != 0 or end not in out:
            raise RuntimeError(f"making a self-signed certificate failed: {err.decode(errors='replace').strip()}")
        cert, _, key = out.partition(end)
        return cert + end, key


def load_pem_pair(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``load_cert_chain`` from memory: through a private temporary directory, removed at once."""
    with tempfile.TemporaryDirectory(prefix="kopf-scheduler-tls-") as tmp:
        cert_path, key_path = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_path.write_bytes(cert_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
        context.load_cert_chain(cert_path, key_path)


def reload_pair(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    """Load the pair into a live ``context`` only if it loads on its own (one snapshot of both files)."""
    cert_pem, key_pem = Path(cert_file).read_bytes(), Path(key_file).read_bytes()
    load_pem_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert_pem, key_pem)  # raises if it does not fit
    load_pem_pair(context, cert_pem, key_pem)


def self_signed_certificate(hosts: Iterable[str], *, bits: int = 2048) -> tuple[bytes, bytes]:
    """(certificate PEM, PKCS#1 private key PEM) for ``hosts`` (DNS names and IP addresses, the first is the CN).

    As client-go's ``GenerateSelfSignedCertKey``: RSA, a CN of ``host@unix-time``, serverAuth, not a CA, valid
    from an hour ago for a year.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    hosts = list(dict.fromkeys(hosts)) or ["localhost"]
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{hosts[0]}@{int(now.timestamp())}")])
    usage = x509.KeyUsage(
        digital_signature=True,
        key_encipherment=True,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_general_name(host) for host in hosts]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def _general_name(host: str) -> Any:
    """An iPAddress name for an address, else a dNSName."""
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


if __name__ == "__main__":  # CertificateInChild: certificate and key PEM on stdout
    sys.stdout.buffer.write(b"".join(self_signed_certificate(sys.argv[1:])))
