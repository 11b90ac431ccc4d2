"""explain as an aggregated API (web/aggregated.py) and the front proxy's headers (web/requestheader.py): who is
trusted to name the user (a client certificate of the requestheader CA with an allowed name), how the headers
are read, the discovery documents the aggregator asks for, and the resource's SubjectAccessReview."""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from kopf_scheduler import web
from kopf_scheduler.web import aggregated
from kopf_scheduler.web.delegated import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS, DelegatedAuth, Unauthenticated
from kopf_scheduler.web.requestheader import (
    RequestHeaderConfig,
    authenticate_front_proxy,
    common_name,
    config_from_configmap,
)
from tools.aggregation import issue, new_ca

CONFIGMAP = {
    "client-ca-file": "ignored",
    "requestheader-allowed-names": '["front-proxy-client"]',
    "requestheader-client-ca-file": "-----BEGIN CERTIFICATE-----\n...",
    "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    "requestheader-group-headers": '["X-Remote-Group"]',
    "requestheader-username-headers": '["X-Remote-User"]',
}
CONFIG = config_from_configmap(CONFIGMAP)


# ---- the ConfigMap and the headers ------------------------------------------------------------------------------


def test_the_configmap_gives_the_ca_the_names_and_the_headers() -> None:
    assert (
        RequestHeaderConfig(
            client_ca_pem="-----BEGIN CERTIFICATE-----\n...",
            allowed_names=("front-proxy-client",),
            username_headers=("X-Remote-User",),
            uid_headers=(),
            group_headers=("X-Remote-Group",),
            extra_header_prefixes=("X-Remote-Extra-",),
        )
        == CONFIG
    )
    assert config_from_configmap({"client-ca-file": "x"}) is None  # no front proxy configured
    assert config_from_configmap(None) is None
    with pytest.raises(ValueError, match="requestheader-allowed-names is not a JSON list"):
        config_from_configmap({**CONFIGMAP, "requestheader-allowed-names": "front-proxy-client"})


def headers(*pairs: tuple[str, str]) -> CIMultiDict[str]:
    return CIMultiDict(pairs)


def test_the_front_proxys_headers_name_the_user_its_groups_and_extra() -> None:
    user = authenticate_front_proxy(
        CONFIG,
        "front-proxy-client",
        headers(
            ("X-Remote-User", "carol"),
            ("X-Remote-Group", "devs"),
            ("x-remote-group", "ops"),
            ("X-Remote-Extra-Scopes", "a"),
            ("X-Remote-Extra-Scopes", "b"),
            ("X-Remote-Extra-Acme.com%2fProject", "p1"),
        ),
    )
    assert user is not None
    assert user.name == "carol"
    assert user.groups == ("devs", "ops", "system:authenticated")  # upstream's AuthenticatedGroupAdder
    assert user.extra == (("acme.com/project", ("p1",)), ("scopes", ("a", "b")))


def test_without_a_verified_certificate_the_headers_mean_nothing() -> None:
    forged = headers(("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters"))
    assert authenticate_front_proxy(CONFIG, None, forged) is None  # no client certificate: bearer or anonymous
    assert authenticate_front_proxy(None, "front-proxy-client", forged) is None  # no requestheader config read


def test_a_certificate_with_a_name_not_allowed_is_refused_and_an_empty_list_allows_any() -> None:
    with pytest.raises(Unauthenticated, match="cn=someone-else is not in the allowed list"):
        authenticate_front_proxy(CONFIG, "someone-else", headers(("X-Remote-User", "carol")))
    assert CONFIG is not None
    anyone = RequestHeaderConfig(client_ca_pem="x", allowed_names=())
    user = authenticate_front_proxy(anyone, "someone-else", headers(("X-Remote-User", "carol")))
    assert user is not None
    assert user.name == "carol"


def test_no_user_header_does_not_authenticate() -> None:
    assert authenticate_front_proxy(CONFIG, "front-proxy-client", headers(("X-Remote-Group", "devs"))) is None
    assert authenticate_front_proxy(CONFIG, "front-proxy-client", headers(("X-Remote-User", ""))) is None


def test_the_common_name_of_a_decoded_certificate() -> None:
    subject = ((("organizationName", "devs"),), (("commonName", "front-proxy-client"),))
    assert common_name({"subject": subject}) == "front-proxy-client"
    assert common_name({}) is None


# ---- discovery and the resource's attributes -------------------------------------------------------------------


def test_discovery_documents_name_the_group_version_and_resource() -> None:
    version = {"groupVersion": "explain.kopf-scheduler.io/v1alpha1", "version": "v1alpha1"}
    assert aggregated.api_group_list() == {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [{"name": "explain.kopf-scheduler.io", "versions": [version], "preferredVersion": version}],
    }
    assert aggregated.api_group()["kind"] == "APIGroup"
    assert aggregated.api_resource_list() == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "explain.kopf-scheduler.io/v1alpha1",
        "resources": [
            {
                "name": "podexplanations",
                "singularName": "podexplanation",
                "namespaced": True,
                "kind": "PodExplanation",
                "verbs": ["get"],
            }
        ],
    }


def test_resource_requests_are_authorized_by_their_attributes_discovery_by_its_path() -> None:
    prefix = "/apis/explain.kopf-scheduler.io/v1alpha1"
    get = aggregated.resource_attributes("GET", f"{prefix}/namespaces/ns/podexplanations/web")
    assert get is not None
    assert (get.verb, get.group, get.resource, get.namespace, get.name) == (
        "get",
        "explain.kopf-scheduler.io",
        "podexplanations",
        "ns",
        "web",
    )
    listed = aggregated.resource_attributes("GET", f"{prefix}/namespaces/ns/podexplanations")
    assert listed is not None
    assert listed.verb == "list"
    for path in (prefix, "/apis", "/apis/explain.kopf-scheduler.io", "/metrics", "/explain/ns/web"):
        assert aggregated.resource_attributes("GET", path) is None


# ---- over TLS: the front proxy's certificate -------------------------------------------------------------------


class FakeAPIServer:
    """TokenReviews from a table; SubjectAccessReviews of resources from (user, verb, namespace, name) grants,
    of non-resource URLs from (user, verb, path) grants."""

    def __init__(self) -> None:
        self.grants: set[tuple[str, ...]] = {
            ("carol", "get", "ns", "stuck"),
            ("system:kube-aggregator", "get", "/apis/explain.kopf-scheduler.io/v1alpha1"),
        }
        self.reviews: list[Mapping[str, Any]] = []

    async def post(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        spec = body["spec"]
        if path == TOKEN_REVIEWS:
            known = spec["token"] == "dave-token"
            return {"status": {"authenticated": known, "user": {"username": "dave"}}}
        assert path == SUBJECT_ACCESS_REVIEWS
        self.reviews.append(spec)
        if "resourceAttributes" in spec:
            a = spec["resourceAttributes"]
            return {"status": {"allowed": (spec["user"], a["verb"], a["namespace"], a["name"]) in self.grants}}
        a = spec["nonResourceAttributes"]
        return {"status": {"allowed": (spec["user"], a["verb"], a["path"]) in self.grants}}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key = new_ca("front-proxy-ca")
    other_ca_cert, other_ca_key = new_ca("client-ca")
    files = {"ca": ca_cert}
    for name, pair in {
        "proxy": issue(ca_cert, ca_key, "front-proxy-client", client=True),
        "impostor": issue(ca_cert, ca_key, "someone-else", client=True),
        "other-ca": issue(other_ca_cert, other_ca_key, "front-proxy-client", client=True),
    }.items():
        files[f"{name}.crt"], files[f"{name}.key"] = pair
    paths = {}
    for name, data in files.items():
        paths[name] = directory / name
        paths[name].write_bytes(data)
    return paths


def test_through_the_front_proxy_only_with_its_certificate(pki: dict[str, Path]) -> None:
    api = FakeAPIServer()
    accounts = {"ns/stuck": {"pod": "ns/stuck", "result": "Unschedulable"}}
    config = RequestHeaderConfig(client_ca_pem=pki["ca"].read_text(), allowed_names=("front-proxy-client",))
    active = [True]
    prefix = "/apis/explain.kopf-scheduler.io/v1alpha1"

    async def read() -> RequestHeaderConfig:
        return config

    def client(cert: str | None) -> ssl.SSLContext:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        if cert:
            context.load_cert_chain(pki[f"{cert}.crt"], pki[f"{cert}.key"])
        return context

    async def main() -> dict[str, tuple[int, Any]]:
        runner = await web.serve(
            registry=CollectorRegistry(),
            explain=accounts.get,
            port=0,
            address="127.0.0.1",
            auth=DelegatedAuth(api.post),
            hosts=["127.0.0.1"],
            front_proxy=read,
            is_active=lambda: active[0],
            replica="sched-1",
        )
        port = runner.addresses[0][1]
        results: dict[str, tuple[int, Any]] = {}

        async def get(name: str, path: str, cert: str | None, **headers: str) -> None:
            async with aiohttp.ClientSession() as session:
                url = f"https://127.0.0.1:{port}{path}"
                async with session.get(url, headers=headers, ssl=client(cert)) as response:
                    results[name] = (response.status, json.loads(await response.text()))

        try:
            for _ in range(100):  # the config is read in the background, right after start
                await asyncio.sleep(0.02)
                await get(
                    "probe", f"{prefix}/namespaces/ns/podexplanations/stuck", "proxy", **{"X-Remote-User": "carol"}
                )
                if results["probe"][0] == 200:
                    break
            carol = {"X-Remote-User": "carol", "X-Remote-Group": "devs"}
            await get("carol", f"{prefix}/namespaces/ns/podexplanations/stuck", "proxy", **carol)
            await get("carol-other-pod", f"{prefix}/namespaces/ns/podexplanations/other", "proxy", **carol)
            await get("forged-no-cert", f"{prefix}/namespaces/ns/podexplanations/stuck", None, **carol)
            await get("impostor", f"{prefix}/namespaces/ns/podexplanations/stuck", "impostor", **carol)
            await get(
                "dave-token", f"{prefix}/namespaces/ns/podexplanations/stuck", None, Authorization="Bearer dave-token"
            )
            await get("discovery", prefix, "proxy", **{"X-Remote-User": "system:kube-aggregator"})
            await get(
                "unknown",
                f"{prefix}/namespaces/ns/podexplanations/gone",
                "proxy",
                **{"X-Remote-User": "root", "X-Remote-Group": "system:masters"},
            )
            root = {"X-Remote-User": "root", "X-Remote-Group": "system:masters"}
            await get("list", f"{prefix}/namespaces/ns/podexplanations", "proxy", **root)
            active[0] = False
            await get("standby", f"{prefix}/namespaces/ns/podexplanations/stuck", "proxy", **carol)
            try:
                await get("other-ca", prefix, "other-ca", **carol)
            except aiohttp.ClientError as e:  # Python's ssl verifies a presented certificate in the handshake
                results["other-ca"] = (0, str(e))
        finally:
            await runner.cleanup()
        return results

    results = asyncio.run(main())
    status, body = results["carol"]
    assert status == 200
    assert body == {
        "apiVersion": "explain.kopf-scheduler.io/v1alpha1",
        "kind": "PodExplanation",
        "metadata": {"name": "stuck", "namespace": "ns"},
        "account": {"pod": "ns/stuck", "result": "Unschedulable"},
    }
    carols = [r for r in api.reviews if r["user"] == "carol" and "devs" in r["groups"]]
    assert carols[0]["groups"] == ["devs", "system:authenticated"]
    assert carols[0]["resourceAttributes"] == {
        "verb": "get",
        "group": "explain.kopf-scheduler.io",
        "version": "v1alpha1",
        "resource": "podexplanations",
        "namespace": "ns",
        "name": "stuck",
    }
    status, body = results["carol-other-pod"]
    assert status == 403
    assert body["message"] == (
        'podexplanations.explain.kopf-scheduler.io "other" is forbidden: User "carol" cannot get resource '
        '"podexplanations" in API group "explain.kopf-scheduler.io" in the namespace "ns"'
    )
    assert body["details"] == {"name": "other", "group": "explain.kopf-scheduler.io", "kind": "podexplanations"}
    status, body = results["forged-no-cert"]  # the headers without the proxy's certificate: anonymous
    assert status == 403
    assert 'User "system:anonymous" cannot get resource' in body["message"]
    assert results["impostor"] == (401, results["impostor"][1])
    assert results["impostor"][1]["reason"] == "Unauthorized"
    assert results["dave-token"][0] == 403  # a bearer token still works without the proxy: reviewed, then refused
    assert 'User "dave"' in results["dave-token"][1]["message"]
    assert results["discovery"] == (200, aggregated.api_resource_list())
    status, body = results["unknown"]
    assert status == 404
    assert body["reason"] == "NotFound"
    assert body["message"].startswith('podexplanations.explain.kopf-scheduler.io "gone" not found: no failed')
    status, body = results["list"]
    assert (status, body["reason"]) == (405, "MethodNotAllowed")
    status, body = results["standby"]
    assert status == 503
    assert body["message"].startswith("replica sched-1 is a standby")
    assert results["other-ca"][0] == 0  # refused in the handshake


# ---- the CLI: the aggregated API first, pods/proxy where it is not served ------------------------------------


class FakeTransport:
    def __init__(self, responses: Mapping[str, tuple[int, Any]]) -> None:
        self.responses = dict(responses)
        self.calls: list[str] = []

    def __call__(self, path: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        self.calls.append(path)
        status, body = self.responses.get(path, (404, "404 page not found"))
        return status, (body if isinstance(body, str) else json.dumps(body)).encode()


EXPLANATION = "/apis/explain.kopf-scheduler.io/v1alpha1/namespaces/default/podexplanations/web"
OURS = {"group": "explain.kopf-scheduler.io", "kind": "podexplanations", "name": "web"}


def test_the_explanation_comes_from_the_api_service_or_says_why_not() -> None:
    from kopf_scheduler.kube.explain_api import Unserved, fetch_from_api_service
    from kopf_scheduler.kube.remote_explain import RemoteExplainError

    def fetch(status: int, body: Any) -> Any:
        return fetch_from_api_service(FakeTransport({EXPLANATION: (status, body)}), "default", "web")

    document = {"kind": "PodExplanation", "account": {"pod": "default/web"}}
    assert fetch(200, document) == (200, {"pod": "default/web"})
    assert fetch(404, {"kind": "Status", "message": "nothing recorded", "details": OURS}) == (
        404,
        {"pod": "default/web", "message": "nothing recorded"},
    )
    assert fetch(404, "404 page not found") == Unserved(
        "the API server does not serve explain.kopf-scheduler.io/v1alpha1 (no APIService "
        "v1alpha1.explain.kopf-scheduler.io)"
    )
    unserved = fetch(503, "service unavailable\n")
    assert isinstance(unserved, Unserved)
    assert unserved.reason == (
        "the APIService v1alpha1.explain.kopf-scheduler.io is not available (service unavailable)"
    )
    with pytest.raises(RemoteExplainError, match="is a standby"):  # the operator's own 503 is not a fallback
        fetch(503, {"kind": "Status", "message": "replica r is a standby", "details": OURS})
    forbidden = {  # the API server's and the operator's alike
        "kind": "Status",
        "message": 'podexplanations.explain.kopf-scheduler.io "web" is forbidden: ...',
        "details": OURS,
    }
    discovery = "/apis/explain.kopf-scheduler.io/v1alpha1"
    served = FakeTransport({EXPLANATION: (403, forbidden), discovery: (200, aggregated.api_resource_list())})
    with pytest.raises(RemoteExplainError, match=r"is forbidden: \.\.\.; explain through the API server needs get"):
        fetch_from_api_service(served, "default", "web")
    assert served.calls == [EXPLANATION, discovery]
    # The API server refuses a path of a group it does not serve too, before routing: discovery says it is not served.
    unregistered = FakeTransport({EXPLANATION: (403, forbidden)})
    assert isinstance(fetch_from_api_service(unregistered, "default", "web"), Unserved)


def test_the_cli_falls_back_to_pods_proxy_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kopf_scheduler import cli
    from kopf_scheduler.kube import remote_explain
    from tests.unit.test_remote_explain import PEERING, healthy_api, peering_body, write_kubeconfig

    kubeconfig = write_kubeconfig(tmp_path / "k", user={"token": "user-token"})
    args = ["explain", "default/web", "--kubeconfig", str(kubeconfig), "--json"]
    served = FakeTransport({EXPLANATION: (200, {"kind": "PodExplanation", "account": {"pod": "default/web"}})})
    monkeypatch.setattr(remote_explain, "APIServer", lambda credentials: served)
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out) == {"pod": "default/web"}
    assert served.calls == [EXPLANATION]  # one GET: no peering object, no pod, no proxy

    now = datetime.datetime.now(datetime.UTC)  # the CLI reads the clock
    fallback = healthy_api(**{PEERING: (200, peering_body({"kopf-scheduler.io/namespace": "sched"}, now))})
    monkeypatch.setattr(remote_explain, "APIServer", lambda credentials: fallback)
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"pod": "default/web", "nodes": {}}
    assert captured.err.startswith(
        "kopf-scheduler explain: the API server does not serve explain.kopf-scheduler.io/v1alpha1 (no APIService "
        "v1alpha1.explain.kopf-scheduler.io): asking the active replica through pods/proxy\n"
    )
    assert fallback.calls[0][0] == EXPLANATION
    assert fallback.calls[1][0] == "/apis/kopf.dev/v1/clusterkopfpeerings/kopf-scheduler"


def test_the_active_replica_labels_its_pod_for_the_service_and_the_standby_unlabels_it() -> None:
    class FakeClient:
        def __init__(self) -> None:
            self.patches: list[tuple[str, str, Any, str]] = []
            self.fail = 1  # the first patch fails: tried again at the next look

        async def request(self, method: str, path: str, *, body: Any, content_type: str) -> Any:
            if self.fail:
                self.fail -= 1
                raise ConnectionError("refused")
            self.patches.append((method, path, body, content_type))
            return {}

    fake = FakeClient()
    active = [False]
    pod = aggregated.OwnPod(namespace="sched", name="ks-0", client=lambda: fake)

    async def main() -> None:
        task = asyncio.ensure_future(aggregated.label_while_active(pod, lambda: active[0], period=0.01))
        await asyncio.sleep(0.1)
        active[0] = True
        await asyncio.sleep(0.1)
        active[0] = False
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(main())
    labels = [body["metadata"]["labels"]["kopf-scheduler.io/active"] for _, _, body, _ in fake.patches]
    assert labels == ["false", "true", "false"]  # once per change, not once per look
    assert fake.patches[0][::3] == ("PATCH", "application/merge-patch+json")
    assert fake.patches[0][1] == "/api/v1/namespaces/sched/pods/ks-0"


def test_kubectl_get_prints_a_table_of_result_node_profile_and_time() -> None:
    kubectl = (
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
        "application/json"
    )
    assert aggregated._wants_table(kubectl)
    assert not aggregated._wants_table("application/json")
    account = {"result": "Scheduled", "node": "n1", "profile": "sp", "time": "2026-11-28T09:00:00Z"}
    table = aggregated.table({"name": "web", "namespace": "ns"}, account)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Result", "Node", "Profile", "Time"]
    assert table["rows"][0]["cells"] == ["web", "Scheduled", "n1", "sp", "2026-11-28T09:00:00Z"]
    assert table["rows"][0]["object"]["metadata"] == {"name": "web", "namespace": "ns"}
    pending = aggregated.table({"name": "p", "namespace": "ns"}, {"result": "Unschedulable"})
    assert pending["rows"][0]["cells"] == ["p", "Unschedulable", "<none>", "<none>", "<none>"]


def test_the_requestheader_config_is_read_until_it_comes_and_trusted_from_then_on(pki: dict[str, Path]) -> None:
    """Before login (or with the API server away) the read fails and is tried again soon; a cluster without a
    requestheader CA trusts no front proxy, and the TLS context keeps asking no client for a certificate."""
    config = RequestHeaderConfig(client_ca_pem=pki["ca"].read_text(), allowed_names=("front-proxy-client",))
    answers: list[Any] = [RuntimeError("not logged in to the API server yet"), None, config]

    async def read() -> RequestHeaderConfig | None:
        answer = answers.pop(0) if answers else config
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    trusted = web.FrontProxy()
    seen: list[tuple[RequestHeaderConfig | None, ssl.VerifyMode]] = []

    async def main() -> None:
        task = asyncio.ensure_future(web.follow_front_proxy(read, context, trusted, period=0.05, retry=0.01))
        for _ in range(40):
            await asyncio.sleep(0.01)
            seen.append((trusted.config, context.verify_mode))
        task.cancel()

    asyncio.run(main())
    assert (None, ssl.CERT_NONE) in seen  # read, but no CA published: nothing trusted yet
    assert seen[-1] == (config, ssl.CERT_OPTIONAL)
    assert context.cert_store_stats()["x509_ca"] == 1  # loaded once, though read again every period
