"""A fault-injecting HTTPS proxy between the operator and the real kube-apiserver (the e2e suite's, issue 39).

Why a proxy of our own: the faults that matter to a scheduler (a Binding answered 5xx or 429, a response that
never comes, a connection reset mid-request, a watch cut or answered ``410 Gone``) are HTTP-level, and no
established tool for them installs here. The proxy terminates TLS with a certificate of its own (the operator's
kubeconfig trusts it: :meth:`FaultProxy.kubeconfig_for`) and re-originates TLS to the API server with the
cluster's CA (and client certificate, if the kubeconfig has one; a bearer token passes through in the request's
``Authorization`` header). Everything else is forwarded as it is: no mock answers anything the API server would.

What it can do, per request (:class:`Faults`, swapped at any time from the test's thread with :meth:`inject`):

* latency and jitter on every request (``latency`` + uniform ``[0, jitter)``), before it is forwarded;
* :class:`Rule`\\ s matched against ``"METHOD /path?query"`` (a regex) and drawn with a rate, the first that fires
  applies: ``reset`` (the client's TCP connection is reset, before or after the request reached the API server),
  ``stall`` (forwarded, then no answer for ``seconds``, then a reset: the write happened, its client never
  learns), ``status`` (an error answer such as 500, 503 or 429, with ``Retry-After`` when given, before or
  after forwarding), ``gone`` (a watch answered with the API server's ``410 Expired`` ERROR event);
* ``cut_watches_after``: every watch stream is reset after that many seconds; :meth:`cut_watches` resets the
  open ones at once.

The proxy runs its own event loop in a daemon thread of the test process; :attr:`FaultProxy.counts` says how
often each fault fired, so a test can assert it was exercised at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import yaml
from aiohttp import web

from tools.localcluster import free_port

#: Headers that belong to one hop, or that aiohttp recomputes for the relayed message.
_HOP_HEADERS = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Connection",
        "Transfer-Encoding",
        "Upgrade",
        "TE",
        "Trailer",
        "Content-Length",
        "Host",
        "Date",
        "Server",
    )
)

FaultKind = Literal["reset", "stall", "status", "gone"]

#: Requests that bind a pod (DefaultBinder's POST of a Binding).
BIND = r"^POST /api/v1/namespaces/[^/]+/pods/[^/]+/binding"
#: Watch requests (kopf's, the operator's own).
WATCH = r"[?&]watch=(true|1)\b"


@dataclass(frozen=True)
class Rule:
    """One fault: ``kind`` on a ``rate`` of the requests whose ``"METHOD /path?query"`` matches ``match``.

    ``after_forward``: the request reached the API server first (it may have been applied) and only its answer is
    lost or replaced. ``status``/``retry_after``: the error answer of a ``status`` rule. ``seconds``: how long a
    ``stall`` holds the answer back before it resets the connection.
    """

    kind: FaultKind
    match: str = ""
    rate: float = 1.0
    after_forward: bool = False
    status: int = 503
    retry_after: int | None = None
    seconds: float = 45.0
    #: At most this many times (None: no limit).
    limit: int | None = None

    def applies(self, key: str, rng: random.Random) -> bool:
        return re.search(self.match, key) is not None and rng.random() < self.rate


@dataclass(frozen=True)
class Faults:
    """What the proxy does to requests from now on (immutable: swap the whole set)."""

    latency: float = 0.0
    jitter: float = 0.0
    rules: Sequence[Rule] = ()
    cut_watches_after: float | None = None

    def delay(self, rng: random.Random) -> float:
        return self.latency + (rng.random() * self.jitter if self.jitter else 0.0)


NO_FAULTS = Faults()


@dataclass(eq=False)
class _Watch:
    """An open watch stream: its client's connection and the API server's response."""

    transport: asyncio.BaseTransport
    upstream: aiohttp.ClientResponse


def _status_body(status: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": status,
    }


_REASONS = {
    409: ("Conflict", "Operation cannot be fulfilled on pods/binding: pod is already assigned to a node"),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
    500: ("InternalError", "Internal error occurred: injected by the fault proxy"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within requested timeout - context deadline exceeded"),
}


def _reset(transport: asyncio.BaseTransport | None) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0), not a FIN: what a dropped connection looks like."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()  # type: ignore[attr-defined]


class FaultProxy:
    """The proxy; ``with FaultProxy(kubeconfig, work_dir) as proxy:`` starts and stops it.

    Args:
        kubeconfig: the cluster's kubeconfig (its current context's server, CA and client credentials).
        work_dir: where the proxy's certificate and the operator's kubeconfig go.
        seed: the random draws of rates and jitter (reproducible runs).
    """

    def __init__(self, kubeconfig: str | Path, work_dir: str | Path | None = None, *, seed: int = 39) -> None:
        self.source_kubeconfig = Path(kubeconfig)
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="faultproxy-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._config = yaml.safe_load(self.source_kubeconfig.read_text())
        self.upstream = self._current("cluster")["server"].rstrip("/")
        self.port = 0
        self.cert_file = self.work_dir / "proxy.crt"
        self.key_file = self.work_dir / "proxy.key"
        self.faults: Faults = NO_FAULTS
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._watches: set[_Watch] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # ---- set-up ---------------------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _current(self, what: Literal["cluster", "user"]) -> dict[str, Any]:
        contexts = {c["name"]: c["context"] for c in self._config.get("contexts") or ()}
        context = contexts[self._config["current-context"]]
        entries = {e["name"]: e[what] for e in self._config.get(f"{what}s") or ()}
        return dict(entries.get(context[what]) or {})

    def kubeconfig_for(self, path: str | Path | None = None) -> Path:
        """A kubeconfig for the operator: the cluster's user, the proxy's server and certificate."""
        target = Path(path) if path else self.work_dir / "kubeconfig"
        user = {k: v for k, v in self._current("user").items() if not k.startswith("client-")}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "faultproxy", "cluster": {"server": self.server, "certificate-authority": str(self.cert_file)}}
            ],
            "users": [{"name": "faultproxy", "user": user}],
            "contexts": [{"name": "faultproxy", "context": {"cluster": "faultproxy", "user": "faultproxy"}}],
            "current-context": "faultproxy",
        }
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        target.chmod(0o600)
        return target

    def _write_certificate(self) -> None:
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-keyout", str(self.key_file), "-out", str(self.cert_file),
                "-subj", "/CN=faultproxy", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip

    def _upstream_ssl(self) -> ssl.SSLContext | bool:
        cluster, user = self._current("cluster"), self._current("user")
        if cluster.get("insecure-skip-tls-verify"):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority"):
            context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        elif cluster.get("certificate-authority-data"):
            import base64

            pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
            context = ssl.create_default_context(cadata=pem)
        else:
            context = ssl.create_default_context()
        cert, key = self._client_files(user)
        if cert and key:
            context.load_cert_chain(cert, key)
        return context

    def _client_files(self, user: dict[str, Any]) -> tuple[str | None, str | None]:
        import base64

        files: list[str | None] = []
        for name in ("client-certificate", "client-key"):
            if user.get(name):
                files.append(str(user[name]))
            elif user.get(f"{name}-data"):
                path = self.work_dir / f"upstream-{name}.pem"
                path.write_bytes(base64.b64decode(user[f"{name}-data"]))
                path.chmod(0o600)
                files.append(str(path))
            else:
                files.append(None)
        return files[0], files[1]

    def start(self) -> FaultProxy:
        self._write_certificate()
        self.port = free_port()
        started = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as e:  # reported to start()
                errors.append(e)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="faultproxy", daemon=True)
        self._thread.start()
        started.wait(30)
        if errors:
            raise errors[0]
        return self

    async def _serve(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=self._upstream_ssl()),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        )
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        context.set_alpn_protocols(["http/1.1"])
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()

    async def _shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for watch in list(self._watches):
            _reset(watch.transport)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=15)
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- control (from the test's thread) -------------------------------------------------------------------

    def inject(self, faults: Faults) -> None:
        self.faults = faults

    def clear(self) -> None:
        self.faults = NO_FAULTS

    @contextlib.contextmanager
    def injecting(self, faults: Faults) -> Iterator[None]:
        self.inject(faults)
        try:
            yield
        finally:
            self.clear()

    def cut_watches(self) -> int:
        """Reset every open watch stream now; how many there were."""
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(self._cut_all(), self._loop)
        return future.result(10)

    async def _cut_all(self) -> int:
        watches = list(self._watches)
        for watch in watches:
            self._cut_one(watch)
        return len(watches)

    # ---- the proxy ----------------------------------------------------------------------------------------

    def _pick(self, faults: Faults, key: str) -> Rule | None:
        for rule in faults.rules:
            if rule.limit is not None and self.counts[self._count_key(rule)] >= rule.limit:
                continue
            if rule.applies(key, self._rng):
                return rule
        return None

    @staticmethod
    def _count_key(rule: Rule) -> str:
        what = str(rule.status) if rule.kind == "status" else rule.kind
        return f"{what}{'-after' if rule.after_forward else ''}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        faults = self.faults
        key = f"{request.method} {request.path_qs}"
        self.counts["requests"] += 1
        delay = faults.delay(self._rng)
        if delay:
            await asyncio.sleep(delay)
        body = await request.read()
        rule = self._pick(faults, key)
        if rule is not None:
            self.counts[self._count_key(rule)] += 1
            if not rule.after_forward:
                early = self._fault_before(request, rule)
                if early is not None:
                    return early
        is_watch = re.search(WATCH, key) is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        url = self.upstream + request.path_qs
        assert self._session is not None
        try:
            upstream = await self._session.request(request.method, url, data=body or None, headers=headers)
        except (aiohttp.ClientError, OSError):
            self.counts["upstream-error"] += 1
            _reset(request.transport)
            return web.Response(status=502)
        async with upstream:
            if rule is not None and rule.after_forward:
                await upstream.read()  # the API server has done it; its client will never hear so
                return await self._fault_after(request, rule)
            return await self._relay(request, upstream, is_watch, faults)

    def _fault_before(self, request: web.Request, rule: Rule) -> web.StreamResponse | None:
        if rule.kind == "reset":
            _reset(request.transport)
            return web.Response(status=502)  # never sent: the connection is gone
        if rule.kind == "status":
            return self._error(rule)
        if rule.kind == "gone":
            return self._gone()
        return None  # a stall always forwards first

    async def _fault_after(self, request: web.Request, rule: Rule) -> web.StreamResponse:
        if rule.kind == "stall":
            await asyncio.sleep(rule.seconds)
        if rule.kind in ("stall", "reset"):
            _reset(request.transport)
            return web.Response(status=502)
        if rule.kind == "gone":
            return self._gone()
        return self._error(rule)

    @staticmethod
    def _error(rule: Rule) -> web.Response:
        reason, message = _REASONS.get(rule.status, ("InternalError", f"injected HTTP {rule.status}"))
        headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
        return web.json_response(_status_body(rule.status, reason, message), status=rule.status, headers=headers)

    @staticmethod
    def _gone() -> web.Response:
        """The API server's answer to a watch from a compacted resourceVersion: 200 and one ERROR event."""
        status = _status_body(410, "Expired", "too old resource version: 1 (2)")
        return web.Response(
            status=200, content_type="application/json", text=json.dumps({"type": "ERROR", "object": status}) + "\n"
        )

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, is_watch: bool, faults: Faults
    ) -> web.StreamResponse:
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        await response.prepare(request)
        watch = _Watch(request.transport, upstream) if is_watch and request.transport else None
        if watch is not None:
            self._watches.add(watch)
        cutter = None
        if watch is not None and faults.cut_watches_after is not None:
            cutter = asyncio.get_running_loop().call_later(faults.cut_watches_after, self._cut_one, watch)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionError, aiohttp.ClientError, RuntimeError):
            _reset(request.transport)  # one side went away: so does the other
        finally:
            if watch is not None:
                self._watches.discard(watch)
            if cutter is not None:
                cutter.cancel()
        return response

    def _cut_one(self, watch: _Watch) -> None:
        if watch in self._watches:
            self._watches.discard(watch)
            self.counts["watch-cut"] += 1
            _reset(watch.transport)
            watch.upstream.close()  # the relay's read ends at once, not at the API server's timeout


__all__ = ["BIND", "NO_FAULTS", "WATCH", "FaultProxy", "Faults", "Rule"]
