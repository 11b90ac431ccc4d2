"""Faults of one operator replica for the e2e tests: a frozen process, and a replica cut off from the API server.

- :func:`freeze` / :func:`thaw`: SIGSTOP and SIGCONT to the replica's process group (a paused VM, a long GC, a
  stopped container: the process keeps its sockets and its view, and resumes where it was).
- :class:`CuttableTcpProxy`: a plain TCP relay between one replica and the API server (the TLS stays end to end),
  which the test can cut and restore while the replica runs. Cut: every open connection is reset and new ones
  are accepted but never relayed, as a firewall that drops the replica's packets would leave them (the client
  waits for its own timeouts); restore: those held connections are reset and new ones are relayed again.
  :func:`kubeconfig_through` writes a kubeconfig that points a replica at the relay.
- :func:`bound_since`: which pods the API server bound after a moment (the PodScheduled condition's
  ``lastTransitionTime``, which the API server sets at the Binding).

A fault-injecting HTTP proxy for other scenarios lives elsewhere in the suite; this one only relays bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import client

from tests.e2e.operator_process import OperatorProcess


def freeze(process: OperatorProcess) -> None:
    """SIGSTOP the replica's process group: it neither reads nor writes until :func:`thaw`."""
    os.killpg(process.pid, signal.SIGSTOP)


def thaw(process: OperatorProcess) -> None:
    """SIGCONT the replica's process group (harmless if it is not stopped)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGCONT)


def bound_since(core: client.CoreV1Api, namespace: str, since: datetime.datetime) -> dict[str, str]:
    """name → node of the namespace's pods whose Binding the API server accepted at or after ``since`` (UTC; the
    condition has whole seconds, so pass a moment at least a second after the one to exclude)."""
    bound: dict[str, str] = {}
    for pod in core.list_namespaced_pod(namespace).items:
        if not pod.spec.node_name:
            continue
        for condition in pod.status.conditions or ():
            scheduled = condition.type == "PodScheduled" and condition.status == "True"
            if scheduled and condition.last_transition_time and condition.last_transition_time >= since:
                bound[pod.metadata.name] = pod.spec.node_name
    return bound


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CuttableTcpProxy:
    """A TCP relay on 127.0.0.1 (an asyncio loop in a thread) to ``target`` (host, port); cut and restore it."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cut_now = False
        #: Connections accepted (relayed or held) since the start: a sign the replica really goes through here.
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-cut-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> CuttableTcpProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def cut(self) -> None:
        """Reset every open connection; accept new ones but relay nothing."""
        asyncio.run_coroutine_threadsafe(self._set_cut(True), self._loop).result(timeout=10)

    def restore(self) -> None:
        """Reset the connections held while cut; relay new ones again."""
        asyncio.run_coroutine_threadsafe(self._set_cut(False), self._loop).result(timeout=10)

    async def _serve(self) -> asyncio.AbstractServer:
        return await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        self._reset_all()

    async def _set_cut(self, cut: bool) -> None:
        self.cut_now = cut
        self._reset_all()

    def _reset_all(self) -> None:
        for writer in list(self._writers):
            _reset(writer)
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        if self.cut_now:
            return  # held: nothing relayed; reset at the restore
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        self._writers.add(up_writer)
        pipes = [_pipe(reader, up_writer), _pipe(up_reader, writer)]
        await asyncio.gather(*pipes, return_exceptions=True)
        for each in (writer, up_writer):
            self._writers.discard(each)
            _reset(each)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    _reset(writer)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close at once, with an RST rather than a FIN where the socket allows it (SO_LINGER 0)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            import socket
            import struct

            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def api_server_address(kubeconfig: str | os.PathLike[str]) -> tuple[str, int]:
    """(host, port) of the current context's API server."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    server = _current_cluster(config)["server"]
    parts = urlsplit(server)
    return parts.hostname or "127.0.0.1", parts.port or 443


def kubeconfig_through(kubeconfig: str | os.PathLike[str], port: int, path: Path) -> Path:
    """A copy of ``kubeconfig`` whose current cluster is reached at 127.0.0.1:``port`` (the relay); the serving
    certificate is still checked against 127.0.0.1, which the local API server's certificate names."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = _current_cluster(config)
    parts = urlsplit(cluster["server"])
    cluster["server"] = f"{parts.scheme}://127.0.0.1:{port}{parts.path}"
    path.write_text(yaml.safe_dump(config))
    return path


def _current_cluster(config: Mapping[str, Any]) -> dict[str, Any]:
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or ()}
    context = contexts[config["current-context"]]
    for entry in config.get("clusters") or ():
        if entry["name"] == context["cluster"]:
            return entry["cluster"]  # type: ignore[no-any-return]
    raise LookupError(f"cluster {context['cluster']} not in the kubeconfig")
