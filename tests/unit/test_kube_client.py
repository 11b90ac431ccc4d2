"""KubeClient against a tiny local HTTP server: the paths, bodies and error mapping the operator relies on.

The e2e tests drive the same client through the real process against a real API server; these pin the
details that are cheap to get wrong and expensive to notice there (pagination, which calls parse their
response, how an API error reads).
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from kopf_scheduler.framework import APIError
from kopf_scheduler.kube import KubeClient
from kopf_scheduler.kube.http1 import _parse_head, retry_after_seconds

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def serve(routes: dict[tuple[str, str], Handler], scenario: Callable[[KubeClient], Awaitable[Any]]) -> Any:
    """Run ``scenario(client)`` against an HTTP server on 127.0.0.1 answering ``routes``."""

    async def main() -> Any:
        app = web.Application()
        for (method, path), handler in routes.items():
            app.router.add_route(method, path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        client = KubeClient(server=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer t"})
        try:
            return await scenario(client)
        finally:
            await client.close()
            await runner.cleanup()

    return asyncio.run(main())


def test_bind_posts_a_binding_and_reads_no_body() -> None:
    seen: list[tuple[str, dict[str, Any], str]] = []

    async def binding(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, await request.json(), request.headers["Authorization"]))
        return web.Response(status=201, text="not json: a send() must not parse it")

    routes = {("POST", "/api/v1/namespaces/ns/pods/p/binding"): binding}
    assert serve(routes, lambda c: c.bind(namespace="ns", name="p", uid="u1", node_name="n1")) is None
    assert seen == [
        (
            "/api/v1/namespaces/ns/pods/p/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
            },
            "Bearer t",
        )
    ]


def test_an_api_error_carries_the_status_and_the_servers_message() -> None:
    async def conflict(request: web.Request) -> web.StreamResponse:
        status = {"kind": "Status", "message": 'pods "p" is already assigned to node "n0"', "code": 409}
        return web.json_response(status, status=409)

    routes = {("POST", "/api/v1/namespaces/ns/pods/p/binding"): conflict}
    with pytest.raises(APIError) as raised:
        serve(routes, lambda c: c.bind(namespace="ns", name="p", uid="u1", node_name="n1"))
    assert raised.value.status == 409
    assert str(raised.value) == 'pods "p" is already assigned to node "n0"'


def test_events_and_status_patches_use_their_content_types() -> None:
    seen: dict[str, str] = {}

    async def record(request: web.Request) -> web.StreamResponse:
        seen[request.path] = request.headers["Content-Type"]
        return web.json_response({"kind": "Whatever"})

    routes = {
        ("POST", "/apis/events.k8s.io/v1/namespaces/ns/events"): record,
        ("PATCH", "/api/v1/namespaces/ns/pods/p/status"): record,
    }

    async def scenario(client: KubeClient) -> None:
        await client.create_event(namespace="ns", body={"reason": "Scheduled"})
        await client.patch_pod_status(namespace="ns", name="p", patch={"status": {}})

    serve(routes, scenario)
    assert seen == {
        "/apis/events.k8s.io/v1/namespaces/ns/events": "application/json",
        "/api/v1/namespaces/ns/pods/p/status": "application/strategic-merge-patch+json",
    }


def test_a_coscheduling_status_patch_answers_the_version_it_made() -> None:
    """The status keeper tells the watch events from before its write by the version the write made; an answer
    that is no object (or has no version) gives "", never an error (the write itself stood)."""
    seen: list[tuple[str, dict[str, Any]]] = []

    async def patch(request: web.Request) -> web.StreamResponse:
        seen.append((request.headers["Content-Type"], await request.json()))
        name = request.match_info["name"]
        if name == "odd":
            return web.Response(text="not json")
        return web.json_response({"kind": "PodGroup", "metadata": {"name": name, "resourceVersion": "42"}})

    routes = {("PATCH", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/{name}/status"): patch}
    body = {"status": {"phase": "Pending"}}

    async def scenario(client: KubeClient) -> list[str]:
        return [
            await client.patch_coscheduling_pod_group_status(namespace="ns", name=name, patch=body)
            for name in ("pg", "odd")
        ]

    assert serve(routes, scenario) == ["42", ""]
    assert seen == [("application/merge-patch+json", body)] * 2


def test_delete_pod_sends_a_uid_precondition_and_ignores_only_404() -> None:
    seen: list[dict[str, Any]] = []

    async def delete(request: web.Request) -> web.StreamResponse:
        seen.append(await request.json())
        name = request.match_info["name"]
        codes = {"gone": 404, "recreated": 409}
        status = codes.get(name, 200)
        return web.json_response({"kind": "Status", "message": f"{name}", "code": status}, status=status)

    routes = {("DELETE", "/api/v1/namespaces/ns/pods/{name}"): delete}

    async def scenario(client: KubeClient) -> None:
        await client.delete_pod(namespace="ns", name="victim", uid="u1")
        await client.delete_pod(namespace="ns", name="gone", uid="u2")
        with pytest.raises(APIError) as raised:
            await client.delete_pod(namespace="ns", name="recreated", uid="u3")
        assert raised.value.status == 409

    serve(routes, scenario)
    assert [body["preconditions"] for body in seen] == [{"uid": "u1"}, {"uid": "u2"}, {"uid": "u3"}]
    assert seen[0]["kind"] == "DeleteOptions"


def test_volume_binding_puts_pvs_and_claims_and_gets_the_stored_objects() -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []

    async def echo(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append((request.method, request.path, body))
        return web.json_response({**body, "metadata": {**body["metadata"], "resourceVersion": "8"}})

    routes = {
        ("PUT", "/api/v1/persistentvolumes/pv1"): echo,
        ("PUT", "/api/v1/namespaces/ns/persistentvolumeclaims/data"): echo,
    }

    async def scenario(client: KubeClient) -> tuple[Any, Any]:
        pv = await client.replace_persistent_volume(body={"metadata": {"name": "pv1", "resourceVersion": "7"}})
        claim = {"metadata": {"name": "data", "namespace": "ns", "resourceVersion": "7"}}
        return pv, await client.replace_persistent_volume_claim(namespace="ns", body=claim)

    pv, claim = serve(routes, scenario)
    assert [(m, p, b["kind"], b["apiVersion"]) for m, p, b in seen] == [
        ("PUT", "/api/v1/persistentvolumes/pv1", "PersistentVolume", "v1"),
        ("PUT", "/api/v1/namespaces/ns/persistentvolumeclaims/data", "PersistentVolumeClaim", "v1"),
    ]
    assert seen[0][2]["metadata"]["resourceVersion"] == "7"  # the update is conditional on the version read
    assert (pv["metadata"]["resourceVersion"], claim["metadata"]["resourceVersion"]) == ("8", "8")


def test_list_pages_follows_continue_tokens_one_page_at_a_time() -> None:
    queries: list[dict[str, str]] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        queries.append(dict(request.query))
        if "continue" not in request.query:
            metadata = {"continue": "tok", "resourceVersion": "41"}
            return web.json_response({"items": [{"n": 1}, {"n": 2}], "metadata": metadata})
        return web.json_response({"items": [{"n": 3}], "metadata": {"continue": "", "resourceVersion": "41"}})

    versions: list[str] = []

    async def scenario(client: KubeClient) -> list[list[Any]]:
        return [page async for page in client.list_pages("/api/v1/pods", limit=2, on_version=versions.append)]

    pages = serve({("GET", "/api/v1/pods"): pods}, scenario)
    assert pages == [[{"n": 1}, {"n": 2}], [{"n": 3}]]
    assert versions == ["41"]  # the LIST's one snapshot, told once
    assert queries[:2] == [{"limit": "2"}, {"limit": "2", "continue": "tok"}]


def _api_server_list(items: list[Any], continue_token: str) -> web.Response:
    """A LIST page as the API server writes it: compact, ``metadata`` before ``items``."""
    metadata = {"resourceVersion": "41", "continue": continue_token}
    body = {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items}
    return web.Response(body=json.dumps(body, separators=(",", ":")), content_type="application/json")


def test_list_pages_requests_the_next_page_before_the_caller_applies_this_one() -> None:
    requested = asyncio.Event()
    tokens = {"": "p2", "p2": "p3", "p3": ""}
    queries: list[str] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        token = request.query.get("continue", "")
        queries.append(token)
        if token:
            requested.set()
        return _api_server_list([{"page": token or "p1"}], tokens[token])

    async def scenario(client: KubeClient) -> list[Any]:
        pages = []
        async for page in client.list_pages("/api/v1/pods", limit=1):
            # The next page's request reaches the server while this page is still the caller's.
            if page != [{"page": "p3"}]:
                await asyncio.wait_for(requested.wait(), timeout=5)
                requested.clear()
            pages.append(page)
        return pages

    pages = serve({("GET", "/api/v1/pods"): pods}, scenario)
    assert pages == [[{"page": "p1"}], [{"page": "p2"}], [{"page": "p3"}]]
    assert queries == ["", "p2", "p3"]


def test_list_pages_requests_the_next_page_while_this_page_still_arrives() -> None:
    """The API server writes a page's metadata (its continue token) first: the next page is asked for then, so
    the server works on it while it still sends this one (here it sends the rest only once asked for it)."""
    second_asked = asyncio.Event()

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("continue") == "p2":
            second_asked.set()
            return _api_server_list([{"page": 2}], "")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        head = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"41","continue":"p2"},"items":['
        await response.write(head)
        await asyncio.wait_for(second_asked.wait(), timeout=5)  # the old client waited for the whole page: stuck
        await response.write(b'{"page":1}]}')
        await response.write_eof()
        return response

    versions: list[str] = []

    async def scenario(client: KubeClient) -> list[Any]:
        return [page async for page in client.list_pages("/api/v1/pods", limit=1, on_version=versions.append)]

    assert serve({("GET", "/api/v1/pods"): pods}, scenario) == [[{"page": 1}], [{"page": 2}]]
    assert versions == ["41"]


def test_list_pages_asks_for_at_most_two_pages_ahead_of_the_caller() -> None:
    asked: list[int] = []
    handed: list[int] = []
    ahead: list[int] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        number = int(request.query.get("continue") or 1)
        asked.append(number)
        ahead.append(number - (handed[-1] if handed else 0))  # pages asked for beyond the caller's latest
        return _api_server_list([{"page": number}], str(number + 1) if number < 6 else "")

    async def scenario(client: KubeClient) -> list[Any]:
        pages = []
        async for page in client.list_pages("/api/v1/pods", limit=1):
            handed.append(page[0]["page"])
            await asyncio.sleep(0.05)  # the caller applies the page: the requests ahead run meanwhile
            pages.append(page)
        return pages

    pages = serve({("GET", "/api/v1/pods"): pods}, scenario)
    assert pages == [[{"page": n}] for n in range(1, 7)]
    assert asked == list(range(1, 7))
    assert max(ahead) == 2  # the one arriving and the next, never more


def test_list_pages_stopped_early_cancels_the_next_page_quietly(caplog: pytest.LogCaptureFixture) -> None:
    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("continue"):
            raise web.HTTPForbidden(text='{"message": "no second page"}')
        return _api_server_list([{"n": 1}], "more")

    async def scenario(client: KubeClient) -> list[Any]:
        pages = client.list_pages("/api/v1/pods")
        async for page in pages:
            await asyncio.sleep(0.2)  # the second page's request fails meanwhile
            await pages.aclose()
            gc.collect()  # the abandoned request's task is gone: asyncio would log its failure now
            return page
        return []

    assert serve({("GET", "/api/v1/pods"): pods}, scenario) == [{"n": 1}]
    assert "never retrieved" not in caplog.text


def test_ensure_cluster_peering_reports_that_it_created_the_object() -> None:
    async def peering(request: web.Request) -> web.StreamResponse:
        return web.Response(status=201, body=json.dumps({"metadata": {"name": "x"}}), content_type="application/json")

    routes = {("POST", "/apis/kopf.dev/v1/clusterkopfpeerings"): peering}
    assert serve(routes, lambda c: c.ensure_cluster_peering("x")) is True


def test_api_resources_reads_the_discovery_document_and_none_for_an_unserved_group_version() -> None:
    async def served(request: web.Request) -> web.StreamResponse:
        document = {"kind": "APIResourceList", "resources": [{"name": "podgroups"}, {"name": "podgroups/status"}]}
        return web.Response(body=json.dumps(document), content_type="application/json")

    async def forbidden(request: web.Request) -> web.StreamResponse:
        raise web.HTTPForbidden(text='{"message": "no discovery for you"}')

    routes = {("GET", "/apis/scheduling.k8s.io/v1alpha2"): served, ("GET", "/apis/x.example/v1"): forbidden}

    async def scenario(client: KubeClient) -> tuple[Any, Any, str]:
        with pytest.raises(APIError) as refused:
            await client.api_resources("/apis/x.example/v1")
        return (
            await client.api_resources("/apis/scheduling.k8s.io/v1alpha2"),
            await client.api_resources("/apis/nope.example/v1"),
            f"{refused.value.status} {refused.value}",
        )

    found, missing, refused = serve(routes, scenario)
    assert (found, missing) == ({"podgroups", "podgroups/status"}, None)
    assert refused.startswith("403")


def test_claim_status_writes_put_and_patch_the_status_subresource_and_return_the_claim() -> None:
    seen: list[tuple[str, str]] = []
    path = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status"

    async def record(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.headers["Content-Type"]))
        return web.json_response({"kind": "ResourceClaim", "metadata": {"resourceVersion": "7"}})

    results: list[dict[str, Any]] = []

    async def scenario(client: KubeClient) -> None:
        results.append(await client.update_resource_claim_status(namespace="ns", name="c", claim={"status": {}}))
        results.append(await client.patch_resource_claim_status(namespace="ns", name="c", patch={"status": {}}))

    serve({("PUT", path): record, ("PATCH", path): record}, scenario)
    assert seen == [("PUT", "application/json"), ("PATCH", "application/strategic-merge-patch+json")]
    assert [r["metadata"]["resourceVersion"] for r in results] == ["7", "7"]


# -- the keep-alive connections of send() (kube/http1.py) ------------------------------------------------------
def test_sends_reuse_one_connection_and_read_chunked_and_closing_responses() -> None:
    peers: list[Any] = []

    async def event(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        body = await request.json()
        if body["reason"] == "chunked":  # a streamed answer, as the API server gives for large objects
            response = web.StreamResponse(status=201)
            response.enable_chunked_encoding()
            await response.prepare(request)
            await response.write(b'{"kind":')
            await response.write(b'"Event"}')
            await response.write_eof()
            return response
        if body["reason"] == "close":
            return web.json_response({"kind": "Event"}, status=201, headers={"Connection": "close"})
        return web.json_response({"kind": "Event"}, status=201)

    routes = {("POST", "/apis/events.k8s.io/v1/namespaces/ns/events"): event}

    async def scenario(client: KubeClient) -> None:
        for reason in ("a", "chunked", "b", "close", "c", "d"):
            await client.create_event(namespace="ns", body={"reason": reason})

    serve(routes, scenario)
    assert len(peers) == 6
    assert len(set(peers[:4])) == 1  # one connection until the server closed it
    assert len(set(peers[4:])) == 1
    assert peers[4] != peers[0]


def test_a_failed_send_carries_the_status_and_the_message_of_a_chunked_error() -> None:
    async def binding(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=422)
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(json.dumps({"kind": "Status", "message": "invalid binding"}).encode())
        await response.write_eof()
        return response

    routes = {("POST", "/api/v1/namespaces/ns/pods/p/binding"): binding}

    async def scenario(client: KubeClient) -> None:
        for _ in range(2):  # the connection stays usable after an error response
            with pytest.raises(APIError) as raised:
                await client.bind(namespace="ns", name="p", uid="u1", node_name="n1")
            assert (raised.value.status, str(raised.value)) == (422, "invalid binding")

    serve(routes, scenario)


def test_a_response_framed_by_the_end_of_the_connection_and_a_server_that_hangs_up() -> None:
    """An HTTP/1.0 answer without Content-Length ends with the connection; a server that closes without an
    answer is a connection error (the caller's failure handling decides, nothing is retried)."""
    answers = [b"HTTP/1.0 409 Conflict\r\n\r\n" + json.dumps({"message": "already bound"}).encode(), b""]

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answers.pop(0))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = KubeClient(server=f"http://127.0.0.1:{port}")
        try:
            with pytest.raises(APIError) as raised:
                await client.bind(namespace="ns", name="p", uid="u1", node_name="n1")
            assert (raised.value.status, str(raised.value)) == (409, "already bound")
            with pytest.raises(ConnectionError):
                await client.bind(namespace="ns", name="p", uid="u1", node_name="n1")
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_a_write_without_an_answer_times_out_and_its_connection_is_dropped() -> None:
    """A server that never answers: the exchange ends in ``TimeoutError`` after the client's timeout, and the next
    request opens a new connection (the silent one is not reused)."""
    connections: list[asyncio.StreamWriter] = []

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connections.append(writer)
            await reader.readuntil(b"\r\n\r\n")
            if len(connections) > 1:  # the second connection gets an answer
                body = b'{"kind":"Event"}'
                writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
            await reader.read()  # until the client hangs up

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = KubeClient(server=f"http://127.0.0.1:{port}", timeout=0.3)
        try:
            started = asyncio.get_running_loop().time()
            with pytest.raises(TimeoutError):  # wait_for's own (after 5 s) fails the duration check below
                await asyncio.wait_for(client.create_event(namespace="ns", body={"n": 1}), 5)
            assert 0.25 < asyncio.get_running_loop().time() - started < 2
            await client.create_event(namespace="ns", body={"n": 2})
            assert len(connections) == 2
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_write_room_waits_while_writes_queue_for_a_connection() -> None:
    """The scheduling loop's backpressure: with every connection busy and as many writes queued behind them,
    ``writes_backlogged`` says so and ``write_room`` waits until the queue shrinks below the pool's size."""
    gate = asyncio.Event()

    async def event(request: web.Request) -> web.StreamResponse:
        await gate.wait()
        return web.json_response({"kind": "Event"}, status=201)

    async def main() -> None:
        app = web.Application()
        app.router.add_route("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", event)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        client = KubeClient(server=f"http://127.0.0.1:{port}", connection_limit=2)
        try:
            assert not client.writes_backlogged()  # nothing written yet
            await asyncio.wait_for(client.write_room(), 1)
            sends = [asyncio.create_task(client.create_event(namespace="ns", body={"n": i})) for i in range(4)]
            await asyncio.sleep(0.2)  # two on the wire, two queued behind them
            assert client.writes_backlogged()
            room = asyncio.create_task(client.write_room())
            await asyncio.sleep(0.1)
            assert not room.done()
            gate.set()  # answers flow: the queue drains
            await asyncio.wait_for(room, 2)
            assert not client.writes_backlogged()
            await asyncio.gather(*sends)
        finally:
            await client.close()
            await runner.cleanup()

    asyncio.run(main())


def test_watch_streams_events_split_anywhere_and_raises_http_errors() -> None:
    """A watch from a resourceVersion, bookmarks asked for: one event per line, however the bytes are split (an
    event larger than a read buffer too), an ERROR event passed on as it is; an HTTP error raises APIError."""
    queries: list[dict[str, str]] = []
    large = {"type": "ADDED", "object": {"metadata": {"name": "big", "resourceVersion": "12"}, "data": "x" * 300_000}}
    lines = [
        large,
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
        {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}},
    ]

    async def pods(request: web.Request) -> web.StreamResponse:
        queries.append(dict(request.query))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        stream = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        for start in range(0, len(stream), 7000):  # chunks that cut lines and JSON anywhere
            await response.write(stream[start : start + 7000])
        await response.write_eof()
        return response

    async def nodes(request: web.Request) -> web.StreamResponse:
        return web.json_response({"kind": "Status", "message": "nodes is forbidden", "code": 403}, status=403)

    async def scenario(client: KubeClient) -> tuple[list[Any], APIError]:
        events = [event async for event in client.watch("/api/v1/pods", resource_version="11")]
        with pytest.raises(APIError) as error:
            async for _ in client.watch("/api/v1/nodes", resource_version="1"):
                pass
        return events, error.value

    events, error = serve({("GET", "/api/v1/pods"): pods, ("GET", "/api/v1/nodes"): nodes}, scenario)
    assert events == lines
    assert queries == [
        {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": "11", "timeoutSeconds": "300"}
    ]
    assert (error.status, str(error)) == (403, "nodes is forbidden")


def test_list_pages_of_slim_items_leave_managed_fields_out_and_keep_the_rest() -> None:
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:nodeName": {}}}}]
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"a": "b"}, "managedFields": managed},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Pending"},
    }

    async def pods(request: web.Request) -> web.StreamResponse:
        return _api_server_list([pod], "")

    async def scenario(client: KubeClient) -> tuple[list[Any], list[Any]]:
        slim = [page async for page in client.list_pages("/api/v1/pods", slim_items=True)]
        whole = [page async for page in client.list_pages("/api/v1/pods")]
        return slim, whole

    slim, whole = serve({("GET", "/api/v1/pods"): pods}, scenario)
    kept_metadata = {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"a": "b"}}
    assert slim == [[{**pod, "metadata": kept_metadata}]]
    assert whole == [[pod]]  # without slim_items the items come as they are


@pytest.mark.parametrize(
    ("head", "want"),
    [
        (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n", (201, 12, b"", b"")),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nConnection: Close\r\n\r\n",
            (200, None, b"chunked", b"close"),
        ),
        (b"HTTP/1.0 409 Conflict\r\ncontent-length:  7 \r\n\r\n", (409, 7, b"", b"")),
        (b"HTTP/1.1 204 No Content\r\nX-Content-Length: 5\r\n\r\n", (204, None, b"", b"")),
    ],
)
def test_response_heads_are_read_for_their_framing_headers(head: bytes, want: tuple[Any, ...]) -> None:
    """Header names in any case, values stripped; a header whose name merely ends like one is not it."""
    status, framing, http10 = _parse_head(head)
    assert (status, framing.content_length, framing.transfer_encoding, framing.connection) == want
    assert http10 is head.startswith(b"HTTP/1.0")


@pytest.mark.parametrize("transport", ["send", "request"])
def test_a_429_or_5xx_with_retry_after_is_sent_again_after_waiting_and_one_without_is_final(transport: str) -> None:
    """client-go's REST client: an answer 429 or 5xx carrying ``Retry-After`` (API Priority and Fairness sends it with
    every 429) is retried after that many seconds, up to ten times; without the header it is the answer."""
    answers = [(429, "0"), (503, "0"), (201, None), (500, None)]
    seen: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        status, retry_after = answers.pop(0)
        seen.append(status)
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return web.json_response({"kind": "Status", "message": f"HTTP {status}"}, status=status, headers=headers)

    routes = {("POST", "/apis/kopf.dev/v1/clusterkopfpeerings"): handler}
    if transport == "send":
        routes = {("POST", "/apis/events.k8s.io/v1/namespaces/ns/events"): handler}

    async def scenario(client: KubeClient) -> None:
        async def call() -> None:
            if transport == "send":
                await client.create_event(namespace="ns", body={"kind": "Event"})
            else:
                await client.request("POST", "/apis/kopf.dev/v1/clusterkopfpeerings", body={})

        await call()  # 429, 503, then 201
        assert seen == [429, 503, 201]
        with pytest.raises(APIError) as raised:
            await call()
        assert raised.value.status == 500

    serve(routes, scenario)


def test_retry_after_is_read_as_client_go_reads_it() -> None:
    assert [retry_after_seconds(v) for v in (b"2", "0", "-3", b"soon", None)] == [2.0, 0.0, 0.0, None, None]
