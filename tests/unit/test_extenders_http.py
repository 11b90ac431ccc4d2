"""The extender transport over a real local aiohttp server: JSON POSTs, upstream's errors, timeout, TLS."""

from __future__ import annotations

import asyncio
import base64
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kopf_scheduler.api.profile import Extender as ExtenderSpec
from kopf_scheduler.framework.extender import ExtenderConfig, ExtenderError, extender_config
from kopf_scheduler.kube.extender_http import HTTPExtenderTransport, ssl_context

Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(routes: dict[str, Route], context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, int]:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


def config(url: str, **fields: Any) -> ExtenderConfig:
    return extender_config(ExtenderSpec.model_validate({"urlPrefix": url, **fields}))


async def call(cfg: ExtenderConfig, verb: str, body: dict[str, Any]) -> Any:
    transport = HTTPExtenderTransport()
    try:
        transport.prepare(cfg)
        return await transport.post(cfg, verb, body)
    finally:
        await transport.close()


def test_posts_json_to_prefix_slash_verb_and_decodes_the_answer() -> None:
    seen: list[tuple[str, str, Any]] = []

    async def filter_(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers["Content-Type"], await request.json()))
        return web.json_response({"NodeNames": ["n1"]})

    async def go() -> Any:
        runner, port = await serve({"/ext/filter": filter_})
        try:
            return await call(config(f"http://127.0.0.1:{port}/ext/"), "filter", {"Pod": {}, "NodeNames": ["n1"]})
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) == {"NodeNames": ["n1"]}
    assert seen == [("/ext/filter", "application/json", {"Pod": {}, "NodeNames": ["n1"]})]


def test_non_200_timeout_refused_and_garbage_are_extender_errors() -> None:
    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500, text="oops")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.5)
        return web.json_response([])

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="not json")

    async def go() -> list[str]:
        runner, port = await serve({"/broken": broken, "/slow": slow, "/garbage": garbage})
        url = f"http://127.0.0.1:{port}"
        messages = []
        try:
            for verb, fields in (("broken", {}), ("slow", {"httpTimeout": "100ms"}), ("garbage", {})):
                with pytest.raises(ExtenderError) as caught:
                    await call(config(url, **fields), verb, {})
                messages.append(str(caught.value))
        finally:
            await runner.cleanup()
        with pytest.raises(ExtenderError) as caught:
            await call(config(url), "filter", {})  # the server is gone
        messages.append(str(caught.value))
        return messages

    broken_msg, slow_msg, garbage_msg, refused_msg = asyncio.run(go())
    assert broken_msg.startswith("failed broken with extender at URL http://127.0.0.1:")
    assert broken_msg.endswith("/broken, code 500")
    assert "context deadline exceeded" in slow_msg
    assert "decoding the answer" in garbage_msg
    assert refused_msg.startswith('Post "http://127.0.0.1:')


def test_tls_material_is_checked_when_the_profile_is_applied() -> None:
    with pytest.raises(ValueError, match="caData: not valid base64"):
        ssl_context(config("https://x", tlsConfig={"caData": "%%%"}))
    with pytest.raises(ValueError, match="insecure flag is not allowed"):
        ssl_context(config("https://x", tlsConfig={"insecure": True, "caData": base64.b64encode(b"x").decode()}))
    with pytest.raises(ValueError, match="tlsConfig"):
        ssl_context(config("https://x", tlsConfig={"caFile": "/nonexistent/ca.pem"}))
    assert ssl_context(config("http://x")) is None
    # enableHTTPS without a CA: upstream makes the client insecure.
    context = ssl_context(config("https://x", enableHTTPS=True))
    assert context is not None
    assert context.verify_mode is ssl.CERT_NONE


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=extender.test"),
            *("-addext", "subjectAltName=DNS:extender.test"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_with_ca_data_and_server_name(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    ca = base64.b64encode(cert.read_bytes()).decode()

    async def prioritize(request: web.Request) -> web.Response:
        return web.json_response([{"Host": "n1", "Score": 3}])

    async def go() -> tuple[Any, str]:
        runner, port = await serve({"/prioritize": prioritize}, server_context)
        url = f"https://127.0.0.1:{port}"
        try:
            good = await call(config(url, tlsConfig={"caData": ca, "serverName": "extender.test"}), "prioritize", {})
            with pytest.raises(ExtenderError) as caught:  # the certificate names extender.test, not 127.0.0.1
                await call(config(url, tlsConfig={"caData": ca}), "prioritize", {})
            return good, str(caught.value)
        finally:
            await runner.cleanup()

    good, mismatch = asyncio.run(go())
    assert good == [{"Host": "n1", "Score": 3}]
    assert "certificate" in mismatch.lower() or "ssl" in mismatch.lower()
