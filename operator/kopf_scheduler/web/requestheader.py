"""Who the API server says the caller is: the front proxy's ``X-Remote-*`` headers, trusted only over a
connection authenticated by the front-proxy client certificate.

When the operator is reached as an aggregated API (``web/aggregated.py``), kube-apiserver authenticates the
user itself (client certificates, tokens, OIDC, whatever it is configured with) and forwards the request with
the user's name, uid, groups and extra in headers, on a TLS connection where it presents its
``--proxy-client-cert-file``. Upstream's counterpart is ``k8s.io/apiserver``'s ``headerrequest`` authenticator
behind the ``x509request`` verifier, configured from the ``kube-system/extension-apiserver-authentication``
ConfigMap the API server publishes (``requestheader-client-ca-file``, ``requestheader-allowed-names``,
``requestheader-username-headers`` and so on), as ``DelegatingAuthenticationOptions`` reads it:

- the client certificate must verify against the requestheader CA (here: the TLS handshake does it, the CA being
  the server context's only trust anchor, :func:`trust_front_proxy`), and its common name must be one of the
  allowed names (any name when the list is empty); a certificate with another name is refused (401), never
  ignored;
- without a client certificate the headers mean nothing: the request is authenticated by its bearer token
  or is anonymous, and the headers are not read;
- the user name is the first non-empty of the username headers (none: the headers do not authenticate); the
  uid likewise; groups are every value of every group header; extra keys are the rest of a header's name after
  a prefix, lower-cased and percent-decoded, with every value.

Differences from upstream, by Python's ``ssl``: a client certificate from another CA fails the handshake (Go's
server requests a certificate without verifying it and lets the request fall through to other authenticators),
and a rotated CA is added to the trust store, not swapped for the old one.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import KeysView, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

from kopf_scheduler.web.delegated import Unauthenticated, UserInfo

#: Where kube-apiserver publishes the front proxy's CA and header names.
AUTHENTICATION_CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
AUTHENTICATED_GROUP = "system:authenticated"


@dataclass(frozen=True)
class RequestHeaderConfig:
    """The front proxy's CA and header names, as the ConfigMap's ``requestheader-*`` keys give them."""

    client_ca_pem: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    uid_headers: tuple[str, ...] = ()
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_header_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)


def config_from_configmap(data: Mapping[str, str] | None) -> RequestHeaderConfig | None:
    """The config in the ConfigMap's ``data``; None when it has no ``requestheader-client-ca-file``.

    Every list is a JSON array of strings (the API server writes them so); a missing key is an empty list.
    """
    data = data or {}
    ca = data.get("requestheader-client-ca-file", "")
    if not ca.strip():
        return None

    def names(key: str) -> tuple[str, ...]:
        raw = data.get(key) or "[]"
        try:
            values = json.loads(raw)
        except ValueError as e:
            raise ValueError(f"{key} is not a JSON list: {raw!r}") from e
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"{key} is not a JSON list of strings: {raw!r}")
        return tuple(values)

    return RequestHeaderConfig(
        client_ca_pem=ca,
        allowed_names=names("requestheader-allowed-names"),
        username_headers=names("requestheader-username-headers"),
        uid_headers=names("requestheader-uid-headers"),
        group_headers=names("requestheader-group-headers"),
        extra_header_prefixes=names("requestheader-extra-headers-prefix"),
    )


def trust_front_proxy(context: ssl.SSLContext, config: RequestHeaderConfig) -> None:
    """Ask every client for a certificate and verify one if given against the requestheader CA alone.

    ``CERT_OPTIONAL``: clients without one (Prometheus with a token, probes) still connect. A live context
    takes the change for new connections; the CA is added to those already loaded.
    """
    context.load_verify_locations(cadata=config.client_ca_pem)
    context.verify_mode = ssl.CERT_OPTIONAL


def common_name(peercert: Mapping[str, Any] | None) -> str | None:
    """The subject's common name of a certificate as ``SSLSocket.getpeercert()`` decodes it (verified ones only)."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class Headers(Protocol):
    """A case-insensitive multi-valued header map (aiohttp's ``CIMultiDictProxy``, ``multidict.CIMultiDict``)."""

    def getall(self, key: str, default: list[str]) -> list[str]: ...

    def keys(self) -> KeysView[str]: ...


def authenticate_front_proxy(
    config: RequestHeaderConfig | None, peer_common_name: str | None, headers: Headers
) -> UserInfo | None:
    """The user the front proxy names; None when the request did not come through it (no verified client
    certificate, or no user header); :class:`Unauthenticated` for a certificate whose name is not allowed."""
    if config is None or peer_common_name is None:
        return None
    if config.allowed_names and peer_common_name not in config.allowed_names:
        raise Unauthenticated(f"x509: subject with cn={peer_common_name} is not in the allowed list")
    name = _first(headers, config.username_headers)
    if not name:
        return None
    groups = [v for header in config.group_headers for v in headers.getall(header, []) if v]
    if AUTHENTICATED_GROUP not in groups:  # upstream's AuthenticatedGroupAdder
        groups.append(AUTHENTICATED_GROUP)
    extra: dict[str, list[str]] = {}
    for header in dict.fromkeys(headers.keys()):
        for prefix in config.extra_header_prefixes:
            if prefix and header.lower().startswith(prefix.lower()):
                key = unquote(header[len(prefix) :].lower())
                extra.setdefault(key, []).extend(headers.getall(header, []))
    return UserInfo(
        name=name,
        uid=_first(headers, config.uid_headers),
        groups=tuple(groups),
        extra=tuple(sorted((k, tuple(v)) for k, v in extra.items())),
    )


def _first(headers: Headers, names: Sequence[str]) -> str:
    """The first non-empty value of the first of ``names`` that has one."""
    for name in names:
        for value in headers.getall(name, []):
            if value:
                return str(value)
    return ""
