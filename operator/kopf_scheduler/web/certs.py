"""The serving certificate of the metrics port: the files given (reloaded when they change), or a self-signed
one made at start-up.

kube-scheduler serves 10259 over HTTPS whether or not it was given a certificate: without
``--tls-cert-file``/``--tls-private-key-file`` it generates a self-signed one in memory
(``k8s.io/apiserver`` ``SecureServingOptions.MaybeDefaultWithSelfSignedCerts``), and clients such as
Prometheus skip verification or pin it. We do the same. The image carries no ``openssl`` binary and the
project no crypto library, so the key pair and the X.509 DER are built here: an RSA-2048 key from
:mod:`secrets` (Miller-Rabin primes), a v3 certificate signed with PKCS#1 v1.5 / SHA-256. Python's ssl module
loads a certificate only from files, so the PEMs live for an instant in a private temporary directory (the
chart's /tmp emptyDir: the root filesystem is read-only) and are removed once the context holds them.

Nothing verifies a self-signed certificate, so its key guards no more than the TLS session itself; give the
operator a real certificate (cert-manager, the cluster CA) when clients must verify it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import ipaddress
import math
import os
import secrets
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

_SMALL_PRIMES = [p for p in range(3, 2000, 2) if all(p % d for d in range(3, math.isqrt(p) + 1, 2))]
_PUBLIC_EXPONENT = 65537
#: DER prefix of a PKCS#1 v1.5 DigestInfo for SHA-256 (RFC 8017 §9.2, note 1).
_SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")
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

    The key's prime search is ≈ 0.2-1.5 s of big-integer arithmetic that holds the GIL: in a thread it took
    turns with the event loop while the operator started (its LISTs), in a child it runs on another core. The
    file needs the standard library only, so the child starts isolated (``-I``) and imports nothing else.
    ``start`` only spawns the child, so the operator starts it first thing (``cli.run``) and collects the
    pair (:meth:`pair`) when the metrics port is set up, after its own imports and kopf's start.
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
    """(certificate PEM, PKCS#1 private key PEM) for ``hosts`` (DNS names and IP addresses, the first is the CN)."""
    hosts = list(dict.fromkeys(hosts)) or ["localhost"]
    key = _RsaKey.generate(bits)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    name = _seq(_set(_seq(_oid("2.5.4.3"), _tlv(0x0C, f"{hosts[0]}@{int(now.timestamp())}".encode()))))
    sig_alg = _seq(_oid("1.2.840.113549.1.1.11"), _tlv(0x05, b""))
    spki = _seq(
        _seq(_oid("1.2.840.113549.1.1.1"), _tlv(0x05, b"")),
        _bit_string(_seq(_int(key.n), _int(key.e))),
    )
    extensions = _seq(
        _extension("2.5.29.15", _tlv(0x03, b"\x05\xa0"), critical=True),  # digitalSignature, keyEncipherment
        _extension("2.5.29.37", _seq(_oid("1.3.6.1.5.5.7.3.1"))),  # serverAuth
        _extension("2.5.29.19", _seq(), critical=True),  # not a CA
        _extension("2.5.29.17", _seq(*(_general_name(h) for h in hosts))),
    )
    tbs = _seq(
        _tlv(0xA0, _int(2)),  # v3
        _int(secrets.randbits(63) | 1),
        sig_alg,
        name,
        _seq(_time(now - datetime.timedelta(hours=1)), _time(now + _VALIDITY)),
        name,
        spki,
        _tlv(0xA3, extensions),
    )
    certificate = _seq(tbs, sig_alg, _bit_string(key.sign_sha256(tbs)))
    return _pem("CERTIFICATE", certificate), _pem("RSA PRIVATE KEY", key.pkcs1_der())


class _RsaKey:
    __slots__ = ("d", "e", "n", "p", "q")

    def __init__(self, p: int, q: int, e: int) -> None:
        self.p, self.q, self.e, self.n = p, q, e, p * q
        self.d = pow(e, -1, math.lcm(p - 1, q - 1))

    @classmethod
    def generate(cls, bits: int) -> _RsaKey:
        while True:
            p, q = _prime(bits // 2), _prime(bits - bits // 2)
            if p != q and (p * q).bit_length() == bits:
                return cls(p, q, _PUBLIC_EXPONENT)

    def sign_sha256(self, message: bytes) -> bytes:
        """RSASSA-PKCS1-v1_5 with SHA-256 (RFC 8017 §8.2)."""
        size = (self.n.bit_length() + 7) // 8
        digest_info = _SHA256_DIGEST_INFO + hashlib.sha256(message).digest()
        encoded = b"\x00\x01" + b"\xff" * (size - len(digest_info) - 3) + b"\x00" + digest_info
        # CRT: two half-size exponentiations instead of one full-size.
        m = int.from_bytes(encoded, "big")
        s1, s2 = pow(m, self.d % (self.p - 1), self.p), pow(m, self.d % (self.q - 1), self.q)
        s = s2 + self.q * ((pow(self.q, -1, self.p) * (s1 - s2)) % self.p)
        return s.to_bytes(size, "big")

    def pkcs1_der(self) -> bytes:
        p, q, d = self.p, self.q, self.d
        return _seq(*map(_int, (0, self.n, self.e, d, p, q, d % (p - 1), d % (q - 1), pow(q, -1, p))))


def _prime(bits: int) -> int:
    while True:
        candidate = secrets.randbits(bits) | (3 << (bits - 2)) | 1  # top two bits set: p·q has all the bits
        if (candidate - 1) % _PUBLIC_EXPONENT and _probably_prime(candidate):
            return candidate


def _probably_prime(n: int, rounds: int = 16) -> bool:
    if any(n % p == 0 for p in _SMALL_PRIMES):
        return n in _SMALL_PRIMES
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for _ in range(rounds):
        x = pow(secrets.randbelow(n - 3) + 2, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


# -- DER (X.690) ------------------------------------------------------------------------------------------------
def _tlv(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def _seq(*items: bytes) -> bytes:
    return _tlv(0x30, b"".join(items))


def _set(*items: bytes) -> bytes:
    return _tlv(0x31, b"".join(sorted(items)))


def _int(value: int) -> bytes:
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True))


def _bit_string(content: bytes) -> bytes:
    return _tlv(0x03, b"\x00" + content)


def _oid(dotted: str) -> bytes:
    first, second, *rest = (int(part) for part in dotted.split("."))
    out = bytearray([40 * first + second])
    for arc in rest:
        chunk = [arc & 0x7F]
        while arc := arc >> 7:
            chunk.append(0x80 | (arc & 0x7F))
        out += bytes(reversed(chunk))
    return _tlv(0x06, bytes(out))


def _time(moment: datetime.datetime) -> bytes:
    return _tlv(0x17, moment.strftime("%y%m%d%H%M%SZ").encode())  # UTCTime: valid until 2049


def _extension(oid: str, value: bytes, *, critical: bool = False) -> bytes:
    return _seq(_oid(oid), *([_tlv(0x01, b"\xff")] if critical else []), _tlv(0x04, value))


def _general_name(host: str) -> bytes:
    try:
        return _tlv(0x87, ipaddress.ip_address(host).packed)  # [7] iPAddress
    except ValueError:
        return _tlv(0x82, host.encode("ascii"))  # [2] dNSName


def _pem(label: str, der: bytes) -> bytes:
    body = base64.encodebytes(der).decode().replace("\n", "")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return ("\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"]) + "\n").encode()


if __name__ == "__main__":  # CertificateInChild: certificate and key PEM on stdout
    sys.stdout.buffer.write(b"".join(self_signed_certificate(sys.argv[1:])))
