"""Keep-alive HTTP/1.1 connections for the writes whose responses nobody reads (Bindings, Events).

Why not aiohttp for these: every scheduled pod costs two such requests (the Binding and the ``Scheduled`` event,
as kube-scheduler posts them), and aiohttp spent ≈ 220 µs of CPU on each against the local API server
(request and response objects, header multidicts, timers, tracing hooks, cookie and redirect handling), where a
request written as one buffer and a response read as status line, headers and body over asyncio streams
costs ≈ 90 µs (docs/benchmarks.md). The operator is one Python thread, so that difference is scheduling
throughput. aiohttp keeps serving every call whose response is parsed (LISTs, PUTs), and kopf's own watches.

What this speaks, and nothing more: HTTP/1.1 over TCP or TLS (the same SSL context and headers as the aiohttp
session, so the same credentials), one request at a time per connection, connections kept alive and reused;
responses framed by ``Content-Length``, ``chunked`` transfer coding, or the end of the connection. A connection
the server closes (``Connection: close``, EOF while idle) is dropped, and any failure mid-exchange drops the
connection and raises, as aiohttp would: nothing is retried here (the binding cycle handles a failed Binding,
and events are best effort). The pool also tells when its writes queue for a connection (``backlogged``,
``room``): the scheduling loop's backpressure.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

from kopf_scheduler.framework import StandingLostError

#: The most of a response's head (status line and headers) we accept; the API server's are well below 1 KiB.
MAX_HEAD = 64 * 1024

#: Statuses that never carry a body (RFC 9112 §6.3).
_NO_BODY = frozenset({204, 304})


class ConnectionPool:
    """Up to ``limit`` keep-alive connections to one API server; :meth:`exchange` sends one request on one."""

    def __init__(
        self,
        server: str,
        *,
        headers: Mapping[str, str],
        ssl_context: ssl.SSLContext | bool | None = None,
        limit: int = 100,
        timeout: float = 30.0,
    ) -> None:
        parts = urlsplit(server)
        secure = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if secure else 80)
        self._prefix = parts.path.rstrip("/")
        self._ssl = _client_ssl_context(ssl_context) if secure else None
        lines = [f"Host: {parts.netloc}", *(f"{name}: {value}" for name, value in headers.items())]
        self._common_head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._timeout = timeout
        self._limit = limit
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._closed = False
        #: Requests waiting for a free connection, and who waits for that queue to shrink (:meth:`room`).
        self._queued = 0
        self._room_waiters: list[asyncio.Future[None]] = []

    @property
    def backlogged(self) -> bool:
        """As many requests wait for a connection as the pool has connections (all of them busy)."""
        return self._queued >= self._limit and not self._closed

    async def room(self) -> None:
        """Return once the pool is no longer :attr:`backlogged`.

        The scheduling loop waits here before its next cycle: every cycle ends in writes (a Binding and an
        event, or a status patch and an event), and a loop that outruns the API server would otherwise pile up
        binding cycles, each holding its pod's cycle state, behind these connections.
        """
        while self.backlogged:
            waiter = asyncio.get_running_loop().create_future()
            self._room_waiters.append(waiter)
            await waiter

    async def exchange(
        self,
        method: str,
        path: str,
        body: bytes,
        content_type: str,
        *,
        precondition: Callable[[], bool] | None = None,
    ) -> Response:
        """Send one request; returns the response's status, body and ``Retry-After``. Raises ``OSError``
        (``ConnectionError`` when the server hangs up mid-response) or ``TimeoutError`` on transport failures,
        dropping the connection.

        ``precondition`` is asked once a connection is at hand, right before the request is written (a request may
        wait for a slot or a connection): if it says no, nothing is written and :class:`StandingLostError` is raised
        (the renew-deadline gate of Bindings, ``standing.py``)."""
        if self._closed:
            raise ConnectionError("the connection pool is closed")
        request = b"%s %s%s HTTP/1.1\r\n%sContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
            method.encode("ascii"),
            self._prefix.encode("ascii"),
            path.encode("ascii"),
            self._common_head,
            content_type.encode("ascii"),
            len(body),
            body,
        )
        await self._acquire_slot()
        try:
            connection = self._take_idle()
            try:
                if connection is None:
                    async with asyncio.timeout(self._timeout):
                        connection = await self._connect()
                if precondition is not None and not precondition():
                    self._idle.append(connection)  # unused: kept for the next request
                    connection = None
                    raise StandingLostError(f"{method} {path}: not written, this replica's standing is not confirmed")
                response, keep_alive = await connection.exchange(request, self._timeout)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as e:
                if connection is not None:
                    connection.close()
                    if connection.timed_out:
                        raise TimeoutError(f"{method} {path}: no response within {self._timeout} s") from e
                if isinstance(e, ConnectionError):
                    raise
                raise ConnectionError(f"{method} {path}: the server ended the response early ({e})") from e
            except BaseException:
                if connection is not None:
                    connection.close()
                raise
            if keep_alive and not self._closed:
                self._idle.append(connection)
            else:
                connection.close()
            return response
        finally:
            self._slots.release()

    async def _acquire_slot(self) -> None:
        self._queued += 1
        try:
            await self._slots.acquire()
        finally:
            self._queued -= 1
            self._wake_room_waiters()

    def _wake_room_waiters(self) -> None:
        if self._room_waiters and not self.backlogged:
            waiters, self._room_waiters = self._room_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def close(self) -> None:
        """Close the idle connections; those in use close as their exchanges end."""
        self._closed = True
        self._wake_room_waiters()
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            await connection.wait_closed()

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable:
                return connection
            connection.close()  # the server closed it while it was idle
        return None

    async def _connect(self) -> _Connection:
        reader, writer = await asyncio.open_connection(self._host, self._port, ssl=self._ssl, limit=MAX_HEAD)
        return _Connection(reader, writer)


class _Connection:
    """One keep-alive connection: writes a request, reads one response (status, body, whether to keep it).

    An exchange that outlives its timeout has its transport aborted by a timer (one ``call_later`` per
    exchange: ``asyncio.timeout`` cost twice its CPU, for two requests per scheduled pod); the pending read
    then fails and :attr:`timed_out` tells the pool why.
    """

    __slots__ = ("_reader", "_writer", "timed_out")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.timed_out = False

    @property
    def usable(self) -> bool:
        return not self._reader.at_eof() and not self._writer.is_closing()

    async def exchange(self, request: bytes, seconds: float) -> tuple[Response, bool]:
        """Send ``request`` and read its response, aborting the connection after ``seconds``."""
        timer = asyncio.get_running_loop().call_later(seconds, self._time_out)
        try:
            return await self._exchange(request)
        finally:
            timer.cancel()

    def _time_out(self) -> None:
        self.timed_out = True
        self._writer.transport.abort()

    async def _exchange(self, request: bytes) -> tuple[Response, bool]:
        self._writer.write(request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status, framing, http10 = _parse_head(head)
        retry_after = (
            retry_after_seconds(_header(head.lower(), b"\r\nretry-after:")) if status == 429 or status >= 500 else None
        )
        keep_alive = not http10 and framing.connection != b"close"
        if status in _NO_BODY or 100 <= status < 200:
            body = b""
        elif framing.transfer_encoding.endswith(b"chunked"):
            body = await self._read_chunked()
        elif framing.content_length is None:
            body, keep_alive = await self._reader.read(), False  # framed by the end of the connection
        else:
            body = await self._reader.readexactly(framing.content_length)
        return Response(status, body, retry_after), keep_alive

    async def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size_line = await self._reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while await self._reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailer fields
                return b"".join(chunks)
            chunks.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)  # the CRLF after the chunk

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


class Response(NamedTuple):
    """A response: its status, its body, and the seconds of its ``Retry-After`` (429 and 5xx answers only; None
    without one)."""

    status: int
    body: bytes
    retry_after: float | None = None


def retry_after_seconds(value: bytes | str | None) -> float | None:
    """client-go's ``retryAfterSeconds``: a whole number of seconds (negative counts as 0); None otherwise."""
    if value is None:
        return None
    try:
        return float(max(0, int(value)))
    except ValueError:
        return None


class _Framing(NamedTuple):
    """What of a response's headers frames its body and says whether the connection stays (lower-cased values)."""

    content_length: int | None
    transfer_encoding: bytes
    connection: bytes


def _parse_head(head: bytes) -> tuple[int, _Framing, bool]:
    """(status, framing headers, whether the server spoke HTTP/1.0) of a response head.

    Only the three framing headers are looked up, in the lower-cased head (one C call), instead of splitting
    every header into a dict: the API server sends half a dozen a response, two responses a scheduled pod.
    """
    first, _, _ = head.partition(b"\r\n")
    version, _, rest = first.partition(b" ")
    status = rest[:3]
    if not version.startswith(b"HTTP/1.") or not status.isdigit():
        raise ConnectionError(f"not an HTTP/1.x response: {first[:80]!r}")
    lowered = head.lower()
    length = _header(lowered, b"\r\ncontent-length:")
    framing = _Framing(
        None if length is None else int(length),
        _header(lowered, b"\r\ntransfer-encoding:") or b"",
        _header(lowered, b"\r\nconnection:") or b"",
    )
    return int(status), framing, version == b"HTTP/1.0"


def _header(lowered_head: bytes, prefix: bytes) -> bytes | None:
    """The (last) value of the header ``prefix`` names (``\\r\\nname:``), stripped; None when absent."""
    at = lowered_head.rfind(prefix)
    if at < 0:
        return None
    start = at + len(prefix)
    end = lowered_head.find(b"\r\n", start)
    return lowered_head[start : len(lowered_head) if end < 0 else end].strip()


def _client_ssl_context(ssl_context: ssl.SSLContext | bool | None) -> ssl.SSLContext:
    """The context aiohttp would use for ``ssl=``: the given one; False: no verification; else the defaults."""
    if isinstance(ssl_context, ssl.SSLContext):
        return ssl_context
    if ssl_context is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context()
