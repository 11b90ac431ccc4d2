"""KubeClient: the handful of API calls the scheduler makes, over one aiohttp session and lean keep-alive
connections for the writes whose responses are not read (Bindings, Events, status patches; ``kube/http1.py``).

Credentials come from kopf's login (``kopf.ConnectionInfo``), so the operator authenticates exactly as
kopf does (service account in-cluster, kubeconfig outside). Errors surface as
:class:`kopf_scheduler.framework.APIError` with the HTTP status, which is what callers branch on
(409 = already bound or a failed precondition, 404 = gone).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from kopf_scheduler import json_codec
from kopf_scheduler._version import __version__
from kopf_scheduler.framework import APIError
from kopf_scheduler.kube.http1 import ConnectionPool

#: Objects per LIST page (ours and kopf's initial listing): one page of pods is ≈ 3.4 MiB of JSON and ≈ 15 MiB of
#: dicts at most. The API server spends ≈ 10 ms per page beyond its per-object work: at 50000 pods, pages of 500
#: took 1.8–2.5 s to serve against 1.3–1.5 s for pages of 2000, and the operator's reconciling LIST 4.8–5.4 s
#: against 3.0–3.5 s, for 16 MiB more peak RSS (docs/benchmarks.md). client-go's reflector lists from the
#: watch cache in one response.
LIST_PAGE_SIZE = 2000

JSON = dict[str, Any]

#: Sent with every request. The API server names field managers after the User-Agent up to its first "/",
#: so the PodScheduled condition we patch shows up in managedFields as manager "kopf-scheduler" (as
#: kube-scheduler's shows "kube-scheduler"), not aiohttp's default "Python".
USER_AGENT = f"kopf-scheduler/{__version__}"


class KubeClient:
    """Async API calls. One instance per operator process; ``close()`` on shutdown."""

    def __init__(
        self,
        *,
        server: str,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | bool | None = None,
        session: aiohttp.ClientSession | None = None,  # injected in tests
        timeout: float = 30.0,
        connection_limit: int = 100,
    ) -> None:
        self.server = server.rstrip("/")
        self._headers = {"User-Agent": USER_AGENT, **dict(headers or {})}
        self._ssl = ssl_context
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._connection_limit = connection_limit
        #: Keep-alive connections for :meth:`send` (created on first use, like the session).
        self._connections: ConnectionPool | None = None

    @classmethod
    def from_connection_info(cls, info: Any, **kwargs: Any) -> KubeClient:
        """Build from a ``kopf.ConnectionInfo`` (kept untyped so this module does not import kopf)."""
        headers = dict(info.as_http_headers())
        ssl_context: ssl.SSLContext | bool = info.as_ssl_context()
        if info.insecure:
            ssl_context = False
        return cls(server=info.server, headers=headers, ssl_context=ssl_context, **kwargs)

    def _get_connections(self) -> ConnectionPool:
        if self._connections is None:
            self._connections = ConnectionPool(
                self.server,
                headers={**self._headers, "Accept": "application/json"},
                ssl_context=self._ssl,
                limit=self._connection_limit,
                timeout=self._timeout.total or 30.0,
            )
        return self._connections

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._connection_limit, ssl=self._ssl)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=self._timeout,
                json_serialize=json.dumps,
                # The API server sets no cookies; a real jar would still parse and filter every response.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        if self._connections is not None:
            await self._connections.close()
            self._connections = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JSON | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        """One API call; the response body parsed. Raises :class:`APIError` on HTTP errors."""
        return self._decode(await self._call(method, path, body=body, params=params, content_type=content_type))

    async def send(self, method: str, path: str, *, body: JSON, content_type: str = "application/json") -> None:
        """One API call whose response body nobody reads (a Binding, an Event): it is not parsed.

        The API server answers a created Event with the whole object; parsing it for nothing, once per
        scheduled pod, was a measurable share of the operator's CPU. These calls go over the lean keep-alive
        connections of :mod:`kopf_scheduler.kube.http1` rather than aiohttp (two of them per scheduled pod).
        """
        data = json_codec.dumps(body)
        status, raw = await self._get_connections().exchange(method, path, data, content_type)
        if status >= 400:
            raise _api_error(status, raw)

    def writes_backlogged(self) -> bool:
        """Whether the writes of :meth:`send` queue for a connection (``ConnectionPool.backlogged``)."""
        return self._connections is not None and self._connections.backlogged

    async def write_room(self) -> None:
        """Return once they no longer do."""
        if self._connections is not None:
            await self._connections.room()

    async def _call(
        self, method: str, path: str, *, body: JSON | None, params: Mapping[str, str] | None, content_type: str
    ) -> bytes:
        url = self.server + path + ("?" + urlencode(params) if params else "")
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        async with self._get_session().request(method, url, data=data, headers=headers) as response:
            raw = await response.read()
            if response.status >= 400:
                raise _api_error(response.status, raw)
            return raw

    # -- the calls the scheduler makes ---------------------------------------------------------------
    async def bind(self, *, namespace: str, name: str, uid: str, node_name: str) -> None:
        """POST a Binding (what DefaultBinder does); 409 means the pod is already bound."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        await self.send("POST", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding", body=body)

    async def replace_persistent_volume(self, *, body: JSON) -> JSON:
        """PUT a PersistentVolume (VolumeBinding writes a claimRef); the stored object. 409 if ``body`` is stale."""
        name = (body.get("metadata") or {}).get("name") or ""
        full = {**body, "apiVersion": "v1", "kind": "PersistentVolume"}
        return await self.request("PUT", f"/api/v1/persistentvolumes/{quote(name)}", body=full)

    async def replace_persistent_volume_claim(self, *, namespace: str, body: JSON) -> JSON:
        """PUT a PersistentVolumeClaim (VolumeBinding sets the selected-node annotation); the stored object."""
        name = (body.get("metadata") or {}).get("name") or ""
        full = {**body, "apiVersion": "v1", "kind": "PersistentVolumeClaim"}
        path = f"/api/v1/namespaces/{quote(namespace)}/persistentvolumeclaims/{quote(name)}"
        return await self.request("PUT", path, body=full)

    async def patch_pod_status(self, *, namespace: str, name: str, patch: JSON) -> None:
        """Strategic-merge patch of ``pods/status`` (conditions merge by type, as kube-scheduler's do)."""
        await self.send(
            "PATCH",
            f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/status",
            body=patch,
            content_type="application/strategic-merge-patch+json",
        )

    async def get_resource_claim(self, *, namespace: str, name: str) -> JSON:
        """GET of a ResourceClaim (DynamicResources' PreBind after a conflict)."""
        return await self.request("GET", _claim_path(namespace, name))

    async def update_resource_claim(self, *, namespace: str, name: str, claim: JSON) -> JSON:
        """PUT of a ResourceClaim (DynamicResources' PreBind adds its finalizer, upstream's Update)."""
        return await self.request("PUT", _claim_path(namespace, name), body=claim)

    async def update_resource_claim_status(self, *, namespace: str, name: str, claim: JSON) -> JSON:
        """PUT of ``resourceclaims/status`` (DynamicResources' PreBind, upstream's UpdateStatus)."""
        return await self.request("PUT", _claim_path(namespace, name) + "/status", body=claim)

    async def patch_resource_claim_status(self, *, namespace: str, name: str, patch: JSON) -> JSON:
        """Strategic-merge patch of ``resourceclaims/status`` (DynamicResources' rollback and deallocation)."""
        path = _claim_path(namespace, name) + "/status"
        return await self.request("PATCH", path, body=patch, content_type="application/strategic-merge-patch+json")

    async def create_resource_claim(self, *, namespace: str, claim: JSON) -> JSON:
        """POST of a ResourceClaim (DynamicResources' claim for DRA-backed extended resources, upstream's Create)."""
        path = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace)}/resourceclaims"
        return await self.request("POST", path, body=claim)

    async def delete_resource_claim(self, *, namespace: str, name: str) -> None:
        """DELETE of a ResourceClaim (DynamicResources drops its extended-resource claim, upstream's Delete)."""
        await self.request("DELETE", _claim_path(namespace, name))

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        """DELETE a pod with a UID precondition (DefaultPreemption's victims, as upstream's executor deletes
        them): a pod recreated under the same name is spared (409), and one already gone (404) is no error."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            await self.send("DELETE", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", body=body)
        except APIError as e:
            if e.status != 404:
                raise

    async def create_event(self, *, namespace: str, body: JSON) -> None:
        """Create an events.k8s.io/v1 Event."""
        await self.send("POST", f"/apis/events.k8s.io/v1/namespaces/{quote(namespace)}/events", body=body)

    async def patch_merge(self, path: str, patch: JSON) -> JSON:
        return await self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    async def ensure_cluster_peering(self, name: str) -> bool:
        """Create the ClusterKopfPeering object if it is missing; True if this call created it.

        kopf pauses a replica whose mandatory peering object does not exist, and resumes when it appears;
        creating it here saves users a manual step outside Helm (the chart also ships it).
        """
        body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
        try:
            await self.request("POST", "/apis/kopf.dev/v1/clusterkopfpeerings", body=body)
        except APIError as e:
            if e.status == 409:
                return False
            raise
        return True

    async def list_pages(
        self,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        limit: int = LIST_PAGE_SIZE,
        on_version: Callable[[str], None] | None = None,
        slim_items: bool = False,
    ) -> AsyncIterator[list[JSON]]:
        """A paginated LIST (authoritative: served from etcd-consistent reads by default), page by page.

        The caller applies each page before the next is handed over, so at most one page of decoded objects is
        in memory: a cluster's pods as Python dicts are the largest thing this process ever holds. The next
        page is requested as soon as a page's bytes are in, its continue token read from their first bytes,
        so the API server encodes it on another core while this one decodes and applies the page before: the
        reconciling LIST of 5000 nodes and 50000 pods went from ≈ 6.0 to ≈ 5.0 s in pages of 500 (docs/benchmarks.md).
        ``on_version`` is told the LIST's resourceVersion (one snapshot for all pages) before the first page.
        With ``slim_items`` the items are objects of ``metadata``, ``spec`` and ``status`` alone (pods, nodes),
        decoded without their ``metadata.managedFields`` (:func:`json_codec.loads_object_list`).
        """
        decode = self._decode_slim if slim_items else self._decode
        query = {"limit": str(limit), **(params or {})}
        fetching: asyncio.Task[bytes] | None = asyncio.ensure_future(self._call_get(path, query))
        try:
            while fetching is not None:
                raw = await fetching
                fetching = None
                page: JSON | None = None
                metadata = _list_metadata(raw)
                if metadata is None:  # not the API server's shape: decode it whole first
                    page = decode(raw)
                    metadata = page.get("metadata") or {}
                if on_version is not None and "continue" not in query:
                    on_version(str(metadata.get("resourceVersion") or ""))
                token = metadata.get("continue")
                if token:
                    query = {**query, "continue": token}
                    fetching = asyncio.ensure_future(self._call_get(path, query))
                if page is None:
                    page = decode(raw)
                del raw
                yield page.get("items") or []
        finally:
            if fetching is not None:  # the caller stopped early: nobody awaits the next page
                fetching.cancel()  # (also marks a failure it may have had as seen: asyncio logs none)

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncGenerator[JSON, None]:
        """A watch stream of ``path`` from ``resource_version``, bookmarks included: each event as the API server
        sends it (``type``, ``object``), until the server ends the stream after ``timeout_seconds``.

        An HTTP error raises :class:`APIError`; an ``ERROR`` event (410 Gone: the version is compacted) is
        yielded as it is, for the caller to decide."""
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        url = self.server + path + "?" + urlencode(params)
        timeout = aiohttp.ClientTimeout(sock_connect=self._timeout.total, sock_read=timeout_seconds + 30)
        headers = {"Accept": "application/json"}
        async with self._get_session().get(url, headers=headers, timeout=timeout) as response:
            if response.status >= 400:
                raise _api_error(response.status, await response.read())
            async for line in _json_lines(response.content.iter_any()):
                yield self._decode(line)

    async def _call_get(self, path: str, params: Mapping[str, str]) -> bytes:
        return await self._call("GET", path, body=None, params=params, content_type="application/json")

    @staticmethod
    def _decode(raw: bytes) -> JSON:
        return json_codec.loads(raw) if raw else {}

    @staticmethod
    def _decode_slim(raw: bytes) -> JSON:
        return json_codec.loads_object_list(raw) if raw else {}

    async def list_all(
        self, path: str, *, params: Mapping[str, str] | None = None, limit: int = LIST_PAGE_SIZE
    ) -> list[JSON]:
        """A paginated LIST collected into one list (for small kinds and tools)."""
        return [item async for page in self.list_pages(path, params=params, limit=limit) for item in page]


#: Where a LIST's metadata ends: the API server writes ``kind``, ``apiVersion`` and ``metadata`` before
#: ``items`` (the fields' order in every ``*List`` type), with no spaces.
_ITEMS_KEY = b',"items":'


def _list_metadata(raw: bytes) -> JSON | None:
    """A LIST response's ``metadata`` read from its first bytes, without decoding the items; None when the
    response does not have that shape (then the caller decodes it whole)."""
    end = raw.find(_ITEMS_KEY, 0, 4096)
    if end < 0:
        return None
    try:
        head = json_codec.loads(raw[:end] + b"}")
    except ValueError:
        return None
    metadata = head.get("metadata") if isinstance(head, dict) else None
    return metadata if isinstance(metadata, dict) else None


async def _json_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A watch stream's events, one JSON document per line, however the bytes arrive (an event can be larger
    than any read buffer: a ResourceSlice of many devices)."""
    pending = b""
    async for chunk in chunks:
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def _api_error(status: int, raw: bytes) -> APIError:
    """An error answer: the API server's Status message, else the body as text, else the code."""
    text = raw.decode("utf-8", errors="replace")
    try:
        message = str(json.loads(text).get("message") or text)
    except (ValueError, AttributeError):
        message = text or f"HTTP {status}"
    return APIError(status, message)


def _claim_path(namespace: str, name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
