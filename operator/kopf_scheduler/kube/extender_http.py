"""HTTPExtenderTransport: the I/O half of HTTP scheduler extenders (aiohttp, TLS, per-call timeout).

Upstream's counterpart is the transport side of ``pkg/scheduler/extender.go`` (``makeTransport``,
``NewHTTPExtender``'s client, ``send``): a JSON POST to ``<urlPrefix>/<verb>``, any status but 200 an error
(``failed <verb> with extender at URL <url>, code <code>``), the answer decoded as JSON. The wire format and the
semantics live in the I/O-free core (``framework/extender.py``), which sees this class only through its
``ExtenderTransport`` protocol; the CLI hands one instance to the app. It lives in ``kube/`` because that
package (and ``web.py``) is where the layers contract allows HTTP.

TLS as upstream's rest config: ``caData``/``caFile`` (PEM, data wins) verify the extender, ``certData``/
``keyData`` or ``certFile``/``keyFile`` present a client certificate, ``serverName`` overrides the name checked
and sent for SNI, ``insecure`` skips verification, and ``enableHTTPS`` without any CA means insecure (upstream's
rule). The file variants are paths inside the scheduler's container (a mounted Secret, say). Bad material
fails :meth:`prepare`, so the profile is refused and its previous pipeline keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

import aiohttp

from kopf_scheduler._version import __version__
from kopf_scheduler.api.profile import ExtenderTLSConfig
from kopf_scheduler.framework.extender import ExtenderConfig, ExtenderError

_USER_AGENT = f"kopf-scheduler/{__version__}"


def _pem(data: str, what: str) -> bytes:
    """A ``[]byte`` field as upstream's JSON carries it: base64."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"tlsConfig.{what}: not valid base64: {exc}") from exc


def _load_client_cert(context: ssl.SSLContext, tls: ExtenderTLSConfig) -> None:
    if tls.cert_data or tls.key_data:
        # ssl loads a certificate chain from files only: write the PEM to private temporary files.
        with tempfile.TemporaryDirectory() as folder:
            cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
            with open(cert, "wb") as out:
                out.write(_pem(tls.cert_data, "certData"))
            with open(key, "wb") as out:
                out.write(_pem(tls.key_data, "keyData"))
            context.load_cert_chain(cert, key)
    elif tls.cert_file or tls.key_file:
        context.load_cert_chain(tls.cert_file, tls.key_file or None)


def ssl_context(config: ExtenderConfig) -> ssl.SSLContext | None:
    """The client TLS context for ``config``, or None when nothing about TLS was configured."""
    tls = config.tls
    has_ca = bool(tls.ca_data or tls.ca_file)
    configured = config.enable_https or tls != ExtenderTLSConfig()
    if not configured:
        return None
    insecure = tls.insecure or (config.enable_https and not has_ca)
    if tls.insecure and has_ca:
        raise ValueError("tlsConfig: specifying a root certificates file with the insecure flag is not allowed")
    try:
        if tls.ca_data:
            context = ssl.create_default_context(cadata=_pem(tls.ca_data, "caData").decode("ascii", "replace"))
        elif tls.ca_file:
            context = ssl.create_default_context(cafile=tls.ca_file)
        else:
            context = ssl.create_default_context()
        if insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        _load_client_cert(context, tls)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"tlsConfig: {exc}") from exc
    return context


class HTTPExtenderTransport:
    """Posts extender calls over one aiohttp session (created on first use, inside the running loop)."""

    def __init__(self, *, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        #: TLS contexts by what they are made of (built once per distinct configuration).
        self._contexts: dict[tuple[bool, str], ssl.SSLContext | None] = {}

    def prepare(self, config: ExtenderConfig) -> None:
        self._context(config)

    def _context(self, config: ExtenderConfig) -> ssl.SSLContext | None:
        key = (config.enable_https, config.tls.model_dump_json())
        if key not in self._contexts:
            self._contexts[key] = ssl_context(config)
        return self._contexts[key]

    async def post(self, config: ExtenderConfig, verb: str, body: Mapping[str, Any]) -> Any:
        context = self._context(config)
        url = config.url(verb)
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers={"User-Agent": _USER_AGENT})
        try:
            async with self._session.post(
                url,
                data=json.dumps(body, separators=(",", ":")),
                headers={"Content-Type": "application/json"},
                ssl=context if context is not None else True,
                server_hostname=config.tls.server_name or None,
                timeout=aiohttp.ClientTimeout(total=config.timeout_seconds),
            ) as response:
                if response.status != 200:
                    raise ExtenderError(f"failed {verb} with extender at URL {url}, code {response.status}")
                payload = await response.read()
        except TimeoutError as exc:
            raise ExtenderError(f'Post "{url}": context deadline exceeded (Client.Timeout exceeded)') from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ExtenderError(f'Post "{url}": {exc}') from exc
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise ExtenderError(f"decoding the answer of {url}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        await asyncio.sleep(0)


__all__ = ["HTTPExtenderTransport", "ssl_context"]
