"""The metrics port's secure serving: delegated authentication/authorization (web/delegated.py), the
self-signed certificate (web/certs.py), and the HTTPS app refusing and serving as kube-scheduler does."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter

from kopf_scheduler import web
from kopf_scheduler.web.certs import CertificateInChild, certificate_names, self_signed_certificate, server_context
from kopf_scheduler.web.delegated import (
    ANONYMOUS,
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    DelegatedAuth,
    ReviewFailed,
    Unauthenticated,
    UserInfo,
)

ALICE = {"username": "alice", "uid": "u-1", "groups": ["devs", "system:authenticated"], "extra": {"k": ["v"]}}


class FakeAPIServer:
    """Answers TokenReviews from a token table and SubjectAccessReviews from (user, verb, path) grants."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {
            "alice-token": ALICE,
            "root-token": {"username": "root", "groups": ["system:masters"]},
        }
        self.grants: set[tuple[str, str, str]] = {("alice", "get", "/metrics")}
        self.calls: list[tuple[str, Mapping[str, Any]]] = []
        self.down = False

    async def post(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append((path, body))
        if self.down:
            raise ConnectionError("connection refused")
        spec = body["spec"]
        if path == TOKEN_REVIEWS:
            user = self.users.get(spec["token"])
            return {"status": {"authenticated": True, "user": user} if user else {"authenticated": False}}
        attrs = spec["nonResourceAttributes"]
        return {"status": {"allowed": (spec["user"], attrs["verb"], attrs["path"]) in self.grants}}

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---- authentication ------------------------------------------------------------------------------------------


def test_no_bearer_token_is_the_anonymous_user_and_asks_nothing() -> None:
    api = FakeAPIServer()
    auth = DelegatedAuth(api.post)
    assert run(auth.authenticate(None)) == ANONYMOUS
    assert run(auth.authenticate("Basic dXNlcjpwdw==")) == ANONYMOUS
    assert ANONYMOUS.name == "system:anonymous"
    assert ANONYMOUS.groups == ("system:unauthenticated",)
    assert api.calls == []


def test_a_token_is_reviewed_once_per_ttl_and_its_user_kept() -> None:
    api, clock = FakeAPIServer(), Clock()
    auth = DelegatedAuth(api.post, clock=clock)
    user = run(auth.authenticate("Bearer alice-token"))
    assert user == UserInfo("alice", "u-1", ("devs", "system:authenticated"), (("k", ("v",)),))
    assert api.calls[0][1] == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "alice-token"},
    }
    clock.now += 9.9
    assert run(auth.authenticate("bearer alice-token")) == user  # the scheme is case-insensitive
    assert api.count(TOKEN_REVIEWS) == 1
    clock.now += 0.2  # past upstream's 10 s CacheTTL
    run(auth.authenticate("Bearer alice-token"))
    assert api.count(TOKEN_REVIEWS) == 2


def test_a_rejected_token_is_a_401_and_the_rejection_is_cached_too() -> None:
    api, clock = FakeAPIServer(), Clock()
    auth = DelegatedAuth(api.post, clock=clock)
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            run(auth.authenticate("Bearer stolen"))
    assert api.count(TOKEN_REVIEWS) == 1
    with pytest.raises(Unauthenticated):
        run(auth.authenticate("Bearer "))  # a bearer header without a token is not anonymous


def test_an_unreachable_api_server_refuses_and_is_not_cached() -> None:
    api = FakeAPIServer()
    auth = DelegatedAuth(api.post)
    api.down = True
    with pytest.raises(Unauthenticated, match="token review failed"):
        run(auth.authenticate("Bearer alice-token"))
    api.down = False
    assert run(auth.authenticate("Bearer alice-token")).name == "alice"


# ---- authorization ---------------------------------------------------------------------------------------------


def test_subject_access_review_of_the_non_resource_url() -> None:
    api, clock = FakeAPIServer(), Clock()
    auth = DelegatedAuth(api.post, clock=clock)
    alice = run(auth.authenticate("Bearer alice-token"))
    assert run(auth.authorize(alice, "get", "/metrics")).allowed
    assert api.calls[-1][1] == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "alice",
            "groups": ["devs", "system:authenticated"],
            "uid": "u-1",
            "extra": {"k": ["v"]},
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    }
    assert not run(auth.authorize(alice, "get", "/explain/ns/pod")).allowed
    assert not run(auth.authorize(ANONYMOUS, "get", "/metrics")).allowed
    asked = api.count(SUBJECT_ACCESS_REVIEWS)
    api.grants.add(("alice", "get", "/explain/ns/pod"))
    assert not run(auth.authorize(alice, "get", "/explain/ns/pod")).allowed  # the denial is cached (10 s)
    assert api.count(SUBJECT_ACCESS_REVIEWS) == asked
    clock.now += 10.5
    assert run(auth.authorize(alice, "get", "/explain/ns/pod")).allowed


def test_always_allowed_paths_and_system_masters_skip_the_review() -> None:
    api = FakeAPIServer()
    auth = DelegatedAuth(api.post, always_allow_paths=["/healthz", "/debug/*"])
    for path in ("/healthz", "/debug/", "/debug/pprof/heap"):
        assert run(auth.authorize(ANONYMOUS, "get", path)).allowed
    root = run(auth.authenticate("Bearer root-token"))
    assert run(auth.authorize(root, "get", "/metrics")).allowed
    assert api.count(SUBJECT_ACCESS_REVIEWS) == 0
    assert not run(auth.authorize(ANONYMOUS, "get", "/healthz/extra")).allowed  # exact unless it ends in *


def test_a_failed_access_review_is_an_error_not_an_allow() -> None:
    api = FakeAPIServer()
    auth = DelegatedAuth(api.post)
    alice = run(auth.authenticate("Bearer alice-token"))
    api.down = True
    with pytest.raises(ReviewFailed):
        run(auth.authorize(alice, "get", "/metrics"))


# ---- certificates ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    cert, key = self_signed_certificate(["localhost", "127.0.0.1", "::1", "kopf-scheduler-0"])
    tmp = tmp_path_factory.mktemp("tls")
    (tmp / "tls.crt").write_bytes(cert)
    (tmp / "tls.key").write_bytes(key)
    return tmp / "tls.crt", tmp / "tls.key"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_the_self_signed_certificate_is_a_valid_server_certificate(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    text = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-text"], capture_output=True, text=True, check=True
    ).stdout
    assert "Signature Algorithm: sha256WithRSAEncryption" in text
    assert "Public-Key: (2048 bit)" in text
    assert "TLS Web Server Authentication" in text
    assert "DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1, DNS:kopf-scheduler-0" in text
    assert "CA:FALSE" in text
    # Its signature checks out against its own key, and the key is consistent.
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(cert), str(cert)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    check = subprocess.run(["openssl", "rsa", "-in", str(key), "-check", "-noout"], capture_output=True, text=True)
    assert "RSA key ok" in check.stdout


def test_a_provided_certificate_is_loaded_and_a_client_can_verify_it(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    context = server_context(cert_file=str(cert), key_file=str(key))
    client = ssl.create_default_context(cafile=str(cert))
    assert _handshake(context, client, "localhost")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(context, client, "elsewhere.example")


def test_a_self_signed_certificate_made_in_a_child_process_serves_and_verifies(tmp_path: Path) -> None:
    """The metrics port's own certificate is made by a child interpreter (the prime search holds the GIL)."""
    child = CertificateInChild.start(certificate_names(["kopf-scheduler-0", "127.0.0.1", "0.0.0.0"]))
    cert, key = asyncio.run(child.pair())
    assert cert.startswith(b"-----BEGIN CERTIFICATE-----")
    assert cert.endswith(b"-----END CERTIFICATE-----\n")
    assert b"PRIVATE KEY-----" in key
    assert b"CERTIFICATE" not in key
    context = server_context(cert_file=None, key_file=None, pair=(cert, key))
    (tmp_path / "ca.crt").write_bytes(cert)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    assert _handshake(context, client, "kopf-scheduler-0")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(context, client, "elsewhere.example")


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> bool:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(incoming, outgoing, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(10):
        for name, side in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(outgoing.read())
        incoming.write(s_out.read())
        if all(done.values()):
            return True
    return False


# ---- the HTTPS app -----------------------------------------------------------------------------------------------


def test_the_metrics_port_serves_the_certificate_started_before_it() -> None:
    """``cli.run`` starts the key's child process first thing; the port serves what that child made."""
    child = CertificateInChild.start(["localhost", "127.0.0.1"])

    async def main() -> tuple[bytes, bytes]:
        runner = await web.serve(
            registry=CollectorRegistry(),
            explain=lambda key: None,
            port=0,
            address="127.0.0.1",
            auth=DelegatedAuth(FakeAPIServer().post),
            self_signed=child,
        )
        try:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            _, writer = await asyncio.open_connection("127.0.0.1", runner.addresses[0][1], ssl=context)
            served = bytes(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
            writer.close()
            return served, (await child.pair())[0]  # the child's output, read again
        finally:
            await runner.cleanup()

    served, made = run(main())
    assert served == ssl.PEM_cert_to_DER_cert(made.decode())


def test_the_metrics_port_refuses_and_serves_like_kube_scheduler() -> None:
    registry = CollectorRegistry()
    Counter("scheduler_schedule_attempts", "attempts", registry=registry).inc()
    api = FakeAPIServer()
    api.grants.add(("alice", "get", "/explain/ns/stuck"))
    accounts = {"ns/stuck": {"pod": "ns/stuck"}}

    async def main() -> dict[str, tuple[int, str]]:
        runner = await web.serve(
            registry=registry,
            explain=accounts.get,
            port=0,
            address="127.0.0.1",
            auth=DelegatedAuth(api.post),
            hosts=["localhost", "127.0.0.1", "0.0.0.0"],
        )
        port = runner.addresses[0][1]
        no_verify = ssl.create_default_context()
        no_verify.check_hostname, no_verify.verify_mode = False, ssl.CERT_NONE
        results = {}
        try:
            async with aiohttp.ClientSession() as session:
                for name, path, token in [
                    ("anonymous", "/metrics", None),
                    ("bad-token", "/metrics", "stolen"),
                    ("alice-metrics", "/metrics", "alice-token"),
                    ("alice-explain", "/explain/ns/stuck", "alice-token"),
                    ("alice-other-pod", "/explain/ns/other", "alice-token"),
                    ("healthz", "/healthz", None),
                    ("unknown-path", "/nothing", None),
                ]:
                    headers = {"Authorization": f"Bearer {token}"} if token else {}
                    url = f"https://127.0.0.1:{port}{path}"
                    async with session.get(url, headers=headers, ssl=no_verify) as response:
                        results[name] = (response.status, await response.text())
                with pytest.raises(aiohttp.ClientError):  # plain HTTP is not served
                    async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                        await response.text()
        finally:
            await runner.cleanup()
        return results

    results = run(main())
    status, body = results["anonymous"]
    assert body == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User '
        '\\"system:anonymous\\" cannot get path \\"/metrics\\"","reason":"Forbidden","details":{},"code":403}\n'
    )
    assert status == 403
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'forbidden: User "system:anonymous" cannot get path "/metrics"',
        "reason": "Forbidden",
        "details": {},
        "code": 403,
    }
    status, body = results["bad-token"]
    assert status == 401
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    assert results["alice-metrics"][0] == 200
    assert "scheduler_schedule_attempts_total 1.0" in results["alice-metrics"][1]
    assert results["alice-explain"] == (200, '{"pod": "ns/stuck"}')
    assert results["alice-other-pod"][0] == 403
    assert 'cannot get path \\"/explain/ns/other\\"' in results["alice-other-pod"][1]
    assert results["healthz"] == (200, "ok")
    assert results["unknown-path"][0] == 403  # authorization comes before routing, as upstream


# ---- flags and the explain client ------------------------------------------------------------------------------


def test_serving_flags_use_kube_scheduler_names_and_need_a_key_with_a_certificate(tmp_path: Path) -> None:
    from kopf_scheduler import cli
    from kopf_scheduler.settings import RunSettings

    out = tmp_path / "effective.yaml"
    argv = ["run", "--tls-cert-file=/c.pem", "--tls-private-key-file=/k.pem"]
    argv += ["--authorization-always-allow-paths=/healthz,/metrics", f"--write-config-to={out}"]
    assert cli.main(argv) == 0
    text = out.read_text()
    assert "tlsCertFile: /c.pem" in text
    assert "tlsPrivateKeyFile: /k.pem" in text
    assert "- /metrics" in text
    assert RunSettings().authorization_always_allow_paths == ["/healthz", "/readyz", "/livez"]
    assert cli.main(["run", "--tls-cert-file=/c.pem", f"--write-config-to={out}"]) == 2


def test_explain_takes_the_token_from_the_flag_the_kubeconfig_or_a_token_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kopf_scheduler import cli

    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "current-context": "b",
                "contexts": [{"name": "a", "context": {"user": "ua"}}, {"name": "b", "context": {"user": "ub"}}],
                "users": [
                    {"name": "ua", "user": {"token": "token-a"}},
                    {"name": "ub", "user": {"tokenFile": str(token_file)}},
                ],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    token, context = cli._explain_credentials({"insecure_skip_tls_verify": True})
    assert token == "from-file"
    assert context.verify_mode == ssl.CERT_NONE
    token, context = cli._explain_credentials({"token": "flag", "kubeconfig": str(kubeconfig)})
    assert token == "flag"
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert cli.build_parser().parse_args(["explain", "ns/p"]).url is None  # None: through the API server


def test_a_provided_certificate_is_reloaded_when_its_files_change(tmp_path: Path) -> None:
    """As kube-scheduler's dynamic serving certificate: new connections get the rotated pair."""
    import os

    first = self_signed_certificate(["localhost", "127.0.0.1"])
    second = self_signed_certificate(["localhost", "127.0.0.1"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"

    def install(pair: tuple[bytes, bytes], stamp: int) -> None:
        cert.write_bytes(pair[0])
        key.write_bytes(pair[1])
        for path in (cert, key):
            os.utime(path, ns=(stamp, stamp))

    install(first, 1_000_000_000)

    async def served_certificate(port: int) -> bytes:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return bytes(der)

    async def main() -> list[bytes]:
        runner = await web.serve(
            registry=CollectorRegistry(),
            explain=lambda key: None,
            port=0,
            address="127.0.0.1",
            auth=DelegatedAuth(FakeAPIServer().post),
            cert_file=str(cert),
            key_file=str(key),
            reload_period=0.05,
        )
        port = runner.addresses[0][1]
        try:
            seen = [await served_certificate(port)]
            cert.write_bytes(second[0])  # half rotated: the pair does not match, the old one keeps serving
            os.utime(cert, ns=(2_000_000_000, 2_000_000_000))
            await asyncio.sleep(0.2)
            seen.append(await served_certificate(port))
            install(second, 3_000_000_000)
            await asyncio.sleep(0.2)
            seen.append(await served_certificate(port))
        finally:
            await runner.cleanup()
        return seen

    def der(pem: bytes) -> bytes:
        return ssl.PEM_cert_to_DER_cert(pem.decode())

    before, half, after = run(main())
    assert before == der(first[0])
    assert half == der(first[0])
    assert after == der(second[0])


def test_the_token_forwarded_through_the_api_servers_proxy_is_reviewed_and_authorized() -> None:
    """pods/proxy drops Authorization; the CLI repeats the user's token in X-Kopf-Scheduler-Authorization
    (issue 14). It is reviewed and authorized like Authorization, which wins when both are there."""
    from aiohttp.test_utils import make_mocked_request

    from kopf_scheduler.kube.remote_explain import FORWARDED_AUTHORIZATION_HEADER
    from kopf_scheduler.web import _guard

    api = FakeAPIServer()
    api.grants.add(("alice", "get", "/explain/ns/p"))
    guard = _guard(DelegatedAuth(api.post))

    async def handler(request: Any) -> Any:
        return aiohttp.web.Response(text="served")

    def status(headers: dict[str, str]) -> tuple[int, str]:
        response = run(guard(make_mocked_request("GET", "/explain/ns/p", headers=headers), handler))
        return response.status, response.text

    assert status({FORWARDED_AUTHORIZATION_HEADER: "Bearer alice-token"}) == (200, "served")
    code, body = status({})
    assert code == 403
    assert 'User \\"system:anonymous\\"' in body
    assert status({FORWARDED_AUTHORIZATION_HEADER: "Bearer stolen"})[0] == 401
    code, body = status({"Authorization": "Bearer root-token", FORWARDED_AUTHORIZATION_HEADER: "Bearer stolen"})
    assert code == 200  # system:masters, from Authorization; the forwarded header is not looked at
    code, body = status({"Authorization": "Bearer stolen", FORWARDED_AUTHORIZATION_HEADER: "Bearer alice-token"})
    assert code == 401


def test_reviews_go_to_the_api_servers_of_the_authentication_and_authorization_kubeconfigs(tmp_path: Path) -> None:
    """kube-scheduler's --authentication-kubeconfig / --authorization-kubeconfig: TokenReviews to the first one's
    server, SubjectAccessReviews to the second's, each with its own credentials; the operator's client is unused."""
    from aiohttp import web as aioweb
    from aiohttp.test_utils import TestServer

    seen: list[tuple[str, str, str]] = []

    def fake_api_server(name: str) -> aioweb.Application:
        async def review(request: aioweb.Request) -> aioweb.Response:
            seen.append((name, request.path, request.headers.get("Authorization", "")))
            status = {"authenticated": True, "allowed": True, "user": {"username": "u"}}
            return aioweb.json_response({"status": status})

        fake = aioweb.Application()
        fake.router.add_post("/apis/{group}/v1/{kind}", review)
        return fake

    def kubeconfig(name: str, port: int) -> str:
        path = tmp_path / f"{name}.conf"
        cluster = {"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}
        user = {"name": "u", "user": {"token": f"{name}-token"}}
        context = {"name": "x", "context": {"cluster": "c", "user": "u"}}
        document = {"clusters": [cluster], "users": [user], "contexts": [context], "current-context": "x"}
        path.write_text(yaml.safe_dump(document))
        return str(path)

    async def main() -> None:
        async with TestServer(fake_api_server("authn")) as authn, TestServer(fake_api_server("authz")) as authz:
            post = web.review_poster(
                lambda: None,  # the operator is not logged in: only the kubeconfigs' servers can answer
                authentication_kubeconfig=kubeconfig("authn", authn.port or 0),
                authorization_kubeconfig=kubeconfig("authz", authz.port or 0),
            )
            auth = DelegatedAuth(post)
            user = await auth.authenticate("Bearer someone")
            assert (await auth.authorize(user, "get", "/metrics")).allowed

    run(main())
    assert seen == [
        ("authn", "/apis/authentication.k8s.io/v1/tokenreviews", "Bearer authn-token"),
        ("authz", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "Bearer authz-token"),
    ]
    with pytest.raises(RuntimeError, match="does not exist"):
        web.review_poster(lambda: None, authentication_kubeconfig=str(tmp_path / "missing.conf"))
