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
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from kopf_scheduler import json_codec
from kopf_scheduler._version import __version__
from kopf_scheduler.framework import APIError
from kopf_scheduler.kube.http1 import ConnectionPool, retry_after_seconds

#: Objects per LIST page (ours and kopf's initial listing): one page of pods is ≈ 3.4 MiB of JSON and ≈ 15 MiB of
#: dicts at most. The API server spends ≈ 10 ms per page beyond its per-object work: at 50000 pods, pages of 500
#: took 1.8–2.5 s to serve against 1.3–1.5 s for pages of 2000, and the operator's reconciling LIST 4.8–5.4 s
#: against 3.0–3.5 s, for 16 MiB more peak RSS (docs/benchmarks.md). client-go's reflector lists from the
#: watch cache in one response.
LIST_PAGE_SIZE = 2000

JSON = dict[str, Any]

#: How often a request answered 429 or 5xx with a ``Retry-After`` is sent again after waiting that long: client-go's
#: REST client does so for every request (its ``maxRetries``, 10); an answer without the header is final. API Priority
#: and Fairness sends it with every 429, so a throttled Binding or status patch lands instead of failing.
MAX_RETRIES = 10

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
        #: Asked right before a Binding is written (the renew-deadline gate, ``standing.py``): a Binding that waited
        #: for a connection across a lapse of the replica's standing is not written (StandingLostError).
        self.bind_guard: Callable[[], bool] | None = None
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
            # None: aiohttp's default verification (its ``ssl=True``).
            connector = aiohttp.TCPConnector(limit=self._connection_limit, ssl=True if self._ssl is None else self._ssl)
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

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: JSON,
        content_type: str = "application/json",
        precondition: Callable[[], bool] | None = None,
    ) -> None:
        """One API call whose response body nobody reads (a Binding, an Event): it is not parsed.

        The API server answers a created Event with the whole object; parsing it for nothing, once per
        scheduled pod, was a measurable share of the operator's CPU. These calls go over the lean keep-alive
        connections of :mod:`kopf_scheduler.kube.http1` rather than aiohttp (two of them per scheduled pod).
        """
        await self._exchange(method, path, body=body, content_type=content_type, precondition=precondition)

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        body: JSON,
        content_type: str,
        precondition: Callable[[], bool] | None = None,
    ) -> bytes:
        """:meth:`send`'s one call over the keep-alive connections; the raw response body."""
        data = json_codec.dumps(body)
        return await _retried(
            lambda: self._get_connections().exchange(method, path, data, content_type, precondition=precondition)
        )

    def writes_backlogged(self) -> bool:
        """Whether the writes of :meth:`send` queue for a connection (``ConnectionPool.backlogged``)."""
        return self._connections is not None and self._connections.backlogged

    async def write_room(self) -> None:
        """Return once they no longer do."""
        if self._connections is not None:
            await self._connections.room()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: JSON | list[JSON] | None,
        params: Mapping[str, str] | None,
        content_type: str,
    ) -> bytes:
        url = self.server + path + ("?" + urlencode(params) if params else "")
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        headers = {"Content-Type": content_type, "Accept": "application/json"}

        async def request() -> tuple[int, bytes, float | None]:
            async with self._get_session().request(method, url, data=data, headers=headers) as response:
                raw = await response.read()
                status = response.status
                retry_after = (
                    retry_after_seconds(response.headers.get("Retry-After")) if status == 429 or status >= 500 else None
                )
            return status, raw, retry_after

        return await _retried(request)

    # -- the calls the scheduler makes ---------------------------------------------------------------
    async def bind(
        self, *, namespace: str, name: str, uid: str, node_name: str, annotations: dict[str, str] | None = None
    ) -> None:
        """POST a Binding (what DefaultBinder does); 409 means the pod is already bound. The API server merges
        the Binding's ``annotations`` into the pod's in the same write (``BindingREST.setPodNodeAndMetadata``)."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            metadata["annotations"] = annotations
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding"
        await self.send("POST", path, body=body, precondition=self.bind_guard)

    async def get_pod(self, *, namespace: str, name: str) -> JSON:
        """GET a pod (DefaultBinder, after a Binding whose answer was lost or an error)."""
        return await self.request("GET", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}")

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

    async def patch_pod_annotations(self, *, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """JSON merge patch of a pod's ``metadata.annotations`` (the explain annotations of a failed attempt)."""
        await self.send(
            "PATCH",
            f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}",
            body={"metadata": {"annotations": annotations}},
            content_type="application/merge-patch+json",
        )

    async def patch_pod_group_status(self, *, namespace: str, name: str, patch: JSON) -> None:
        """Strategic-merge patch of ``podgroups/status`` (the pod-group cycle's PodGroupScheduled condition; its
        conditions merge by type, as upstream's ``PatchPodGroupStatus`` sends them)."""
        await self.send(
            "PATCH",
            f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{quote(namespace)}/podgroups/{quote(name)}/status",
            body=patch,
            content_type="application/strategic-merge-patch+json",
        )

    async def patch_coscheduling_pod_group_status(self, *, namespace: str, name: str, patch: JSON) -> str:
        """JSON merge patch of a Coscheduling PodGroup's ``status`` subresource (scheduler-plugins' controller
        patches it so; a custom resource takes no strategic merge); the resourceVersion the patch made ("" if
        the answer has none), so that the status keeper knows which watch events come before its write."""
        raw = await self._exchange(
            "PATCH",
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{quote(namespace)}/podgroups/{quote(name)}/status",
            body=patch,
            content_type="application/merge-patch+json",
        )
        return _resource_version(raw)

    async def list_labelled_pods(self, *, namespace: str, selector: str) -> list[JSON]:
        """The pods of ``namespace`` matching the label ``selector`` (one LIST, every page)."""
        pods: list[JSON] = []
        async for page in self.list_pages(
            f"/api/v1/namespaces/{quote(namespace)}/pods", params={"labelSelector": selector}
        ):
            pods.extend(page)
        return pods

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

    async def renew_peering_record(self, *, name: str, identity: str, lastseen: str) -> JSON:
        """Set ``status[identity].lastseen`` of the ClusterKopfPeering ``name`` (what kopf's keep-alive writes) and
        return the object as written: the renew-deadline gate's write and read in one call (``standing.py``).

        A JSON patch ``replace`` fails (422) where the record is missing, so this never re-creates a record kopf has
        not written yet or removed at a graceful exit."""
        pointer = "/status/" + identity.replace("~", "~0").replace("/", "~1") + "/lastseen"
        patch = [{"op": "replace", "path": pointer, "value": lastseen}]
        path = f"/apis/kopf.dev/v1/clusterkopfpeerings/{quote(name)}"
        raw = await self._call("PATCH", path, body=patch, params=None, content_type="application/json-patch+json")
        return self._decode(raw)

    async def api_resources(self, api_prefix: str) -> set[str] | None:
        """The resource names of the API group version's discovery document (``GET /apis/<group>/<version>``);
        None when the API server does not serve it (404)."""
        try:
            document = await self.request("GET", api_prefix)
        except APIError as e:
            if e.status == 404:
                return None
            raise
        resources = document.get("resources") if isinstance(document, dict) else None
        return {str(item.get("name")) for item in resources or () if isinstance(item, dict)}

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
        page is requested as soon as this page's first bytes name its continue token (:class:`_PagePrefetch`),
        so the API server works on it while this page still arrives and while this process decodes and applies
        it: the reconciling LIST of 50000 pods waited ≈ 1.5 s of its ≈ 3.3 s for pages requested once the page
        before was all in (docs/benchmarks.md). ``on_version`` is told the LIST's resourceVersion (one snapshot
        for all pages) before the first page. With ``slim_items`` the items are objects of ``metadata``,
        ``spec`` and ``status`` alone (pods, nodes), decoded without their ``metadata.managedFields``
        (:func:`json_codec.loads_object_list`).
        """
        decode = self._decode_slim if slim_items else self._decode
        query = {"limit": str(limit), **(params or {})}
        pages = _PagePrefetch(lambda page_query, on_head: self._get_list_page(path, page_query, on_head), query)
        told_version = False
        try:
            while (fetched := await pages.next()) is not None:
                page_query, raw = fetched
                page: JSON | None = None
                metadata = _list_metadata(raw)
                if metadata is None:  # not the API server's shape: decode it whole first
                    page = decode(raw)
                    metadata = page.get("metadata") or {}
                    pages.follow(page_query, metadata)
                if on_version is not None and not told_version:
                    on_version(str(metadata.get("resourceVersion") or ""))
                    told_version = True
                if page is None:
                    page = decode(raw)
                del raw
                yield page.get("items") or []
        finally:
            pages.cancel()  # the caller stopped early: nobody awaits the pages requested ahead

    async def _get_list_page(
        self, path: str, params: Mapping[str, str], on_head: Callable[[JSON | None], None]
    ) -> bytes:
        """GET one LIST page; ``on_head`` is told its ``metadata`` as soon as the first bytes carry it (None
        when they do not have the API server's shape), before the rest of the page has arrived."""
        url = self.server + path + "?" + urlencode(params)
        async with self._get_session().get(url, headers={"Accept": "application/json"}) as response:
            if response.status >= 400:
                raise _api_error(response.status, await response.read())
            chunks: list[bytes] = []
            start = b""
            told = False
            async for chunk in response.content.iter_any():
                chunks.append(chunk)
                if not told:
                    start += chunk
                    metadata = _list_metadata(start)
                    if metadata is not None or len(start) >= _HEAD_BYTES:
                        on_head(metadata)
                        told = True
            if not told:
                on_head(_list_metadata(start))
            return b"".join(chunks)

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

    @staticmethod
    def _decode(raw: bytes) -> JSON:
        return json_codec.loads(raw) if raw else {}

    @staticmethod
    def _decode_slim(raw: bytes) -> JSON:
        return json_codec.loads_object_list(raw) if raw else {}


#: How many pages of a LIST may be requested and not yet handed over (the one arriving and the next): a page's
#: bytes are a few MB at most (2000 pods), so this bounds what the prefetching holds.
PAGES_AHEAD = 2


class _PagePrefetch:
    """The pages of one LIST in order, each requested as soon as the page before it names its continue token.

    ``fetch(query, on_head)`` GETs one page and calls ``on_head`` with its metadata as soon as the first bytes
    carry it (:meth:`KubeClient._get_list_page`); a page whose first bytes could not tell is followed once its
    reader has decoded it (:meth:`follow`). At most :data:`PAGES_AHEAD` pages are requested and not yet
    handed over; a token found while that many are has its page requested as soon as one is handed over.
    """

    def __init__(
        self, fetch: Callable[[dict[str, str], Callable[[JSON | None], None]], Awaitable[bytes]], query: dict[str, str]
    ) -> None:
        self._fetch = fetch
        self._requested: deque[tuple[dict[str, str], asyncio.Task[bytes]]] = deque()
        self._deferred: dict[str, str] | None = None
        self._cancelled = False
        self._request(query)

    def _request(self, query: dict[str, str]) -> None:
        task = asyncio.ensure_future(self._fetch(query, lambda metadata: self._on_head(query, metadata)))
        self._requested.append((query, task))

    def _on_head(self, query: dict[str, str], metadata: JSON | None) -> None:
        if metadata is not None:
            self.follow(query, metadata)

    def follow(self, query: dict[str, str], metadata: JSON) -> None:
        """The page of ``query`` has ``metadata``: request the page after it, if it names one."""
        token = metadata.get("continue")
        if not token or self._cancelled:
            return
        following = {**query, "continue": str(token)}
        if len(self._requested) < PAGES_AHEAD:
            self._request(following)
        else:
            self._deferred = following

    async def next(self) -> tuple[dict[str, str], bytes] | None:
        """The next page's query and bytes (raising its request's error); None after the last page."""
        if not self._requested:
            return None
        query, task = self._requested[0]
        raw = await task
        self._requested.popleft()
        if self._deferred is not None:
            deferred, self._deferred = self._deferred, None
            self._request(deferred)
        return query, raw

    def cancel(self) -> None:
        """Cancel the pages requested and not handed over (also marks a failure one had as seen: asyncio logs none)."""
        self._cancelled = True
        for _, task in self._requested:
            task.cancel()
        self._requested.clear()


#: How much of a LIST response's start is searched for its ``metadata`` (the API server's is well below).
_HEAD_BYTES = 4096


#: Where a LIST's metadata ends: the API server writes ``kind``, ``apiVersion`` and ``metadata`` before
#: ``items`` (the fields' order in every ``*List`` type), with no spaces.
_ITEMS_KEY = b',"items":'


def _list_metadata(raw: bytes) -> JSON | None:
    """A LIST response's ``metadata`` read from its first bytes, without decoding the items; None when the
    response does not have that shape (then the caller decodes it whole)."""
    end = raw.find(_ITEMS_KEY, 0, _HEAD_BYTES)
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


def _resource_version(raw: bytes) -> str:
    """``metadata.resourceVersion`` of an answered object; "" when the answer is not one (the write stands)."""
    try:
        answer = json_codec.loads(raw) if raw else None
    except ValueError:
        return ""
    meta = answer.get("metadata") if isinstance(answer, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return version if isinstance(version, str) else ""


async def _retried(call: Callable[[], Awaitable[tuple[int, bytes, float | None]]]) -> bytes:
    """``call`` (one request: its status, body and the Retry-After to honour, None when none), made again after that
    many seconds up to :data:`MAX_RETRIES` times; the last answer's body, or its :class:`APIError`."""
    for attempt in range(MAX_RETRIES + 1):
        status, raw, retry_after = await call()
        if retry_after is None or attempt == MAX_RETRIES:
            break
        await asyncio.sleep(retry_after)
    if status >= 400:
        raise _api_error(status, raw)
    return raw


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
