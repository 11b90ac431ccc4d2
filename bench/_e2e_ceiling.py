"""The ceiling of the end-to-end benchmark: a binder that does no scheduling at all.

``python -m bench._e2e_ceiling --kubeconfig K --namespace NS --scheduler-name S`` lists the nodes and the
pending pods of ``S`` in ``NS``, then POSTs a Binding for each pod, round-robin over the nodes, with many
requests in flight (asyncio + aiohttp, one keep-alive connection per in-flight request). No cache, no
filtering, no events. It measures how fast this API server (and a Python client on this machine) accepts
Bindings, i.e. the best any scheduler talking to it could do. After the last bind it stays alive until
SIGTERM so the harness can read its peak RSS and CPU time from /proc, as for the real schedulers.

With ``--gangs`` it makes, instead, every write a gang scheduler makes (kube-scheduler with the workload-aware
gates and ours write the same: docs/benchmarks.md), still deciding nothing: for each PodGroup (the pods'
``spec.schedulingGroup``) the nominatedNodeName of every member but the last (a strategic-merge patch of
``pods/status``), the PodGroupScheduled condition (``podgroups/status``), then a Binding and a ``Scheduled`` Event
(events.k8s.io/v1) for each member: 3.0 writes per pod, sent through kopf-scheduler's own client (its keep-alive
connections and request bodies), so that they cost this machine what ours cost. A gang's members go round-robin
over the nodes of one value of ``--topology-key`` (one rack), so it passes the topology-constrained workload's
check too. It also holds the watches every gang scheduler holds while it binds (all pods, and the v1alpha2 PodGroups
where they are served), from the resourceVersion of its LIST, reading and decoding each event and doing nothing
with it: the API server encodes every pod write once more for such a watcher (≈ 0.3 ms of its CPU per event, the
write probe in docs/benchmarks.md), and a scheduler cannot learn of pods or see its Bindings land without it. For
gangs, where the writes beyond the Binding are most of the API server's work, this is the ceiling a scheduler can
reach: what is left between it and ours is our own work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

from kopf_scheduler.json_codec import loads
from kopf_scheduler.kube.client import APIError, KubeClient
from kopf_scheduler.kube.events import event_body
from kopf_scheduler.kube.kubeconfig import load_credentials
from kopf_scheduler.reporting import now_rfc3339


def load_kubeconfig(path: Path) -> tuple[str, dict[str, str], ssl.SSLContext]:
    """(server, auth headers, ssl context) of the current context: token auth and a CA file, as ours has."""
    config = yaml.safe_load(path.read_text())
    context_name = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    ctx = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
    headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
    return cluster["server"].rstrip("/"), headers, ctx


async def list_all(session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> list[dict[str, Any]]:
    items, _ = await list_with_version(session, url, params)
    return items


async def list_with_version(
    session: aiohttp.ClientSession, url: str, params: dict[str, str]
) -> tuple[list[dict[str, Any]], str]:
    """Every item of a paged LIST, and the resourceVersion of its first page (where a watch of it starts)."""
    items: list[dict[str, Any]] = []
    query = {"limit": "1000", **params}
    version = ""
    while True:
        async with session.get(url, params=query) as resp:
            resp.raise_for_status()
            page = await resp.json()
        items.extend(page.get("items") or ())
        metadata = page.get("metadata") or {}
        version = version or metadata.get("resourceVersion", "")
        token = metadata.get("continue")
        if not token:
            return items, version
        query["continue"] = token


#: The collections every gang scheduler watches while it binds (the v1alpha2 PodGroups only where served).
GANG_WATCHES = ("/api/v1/pods", "/apis/scheduling.k8s.io/v1alpha2/podgroups")


async def follow(session: aiohttp.ClientSession, url: str, resource_version: str, seen: list[int]) -> None:
    """Watch ``url`` from ``resource_version`` until cancelled, decoding every event (counted in ``seen[0]``) and
    doing nothing with it; a collection the API server does not serve (404) is not followed."""
    params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with session.get(url, params=params, timeout=timeout) as resp:
        if resp.status == 404:
            return
        resp.raise_for_status()
        async for line in resp.content:
            if line.strip():
                loads(line)
                seen[0] += 1


async def run(
    kubeconfig: Path,
    namespace: str,
    scheduler_name: str,
    concurrency: int,
    *,
    gangs: bool = False,
    topology_key: str = "",
) -> int:
    server, headers, ctx = load_kubeconfig(kubeconfig)
    connector = aiohttp.TCPConnector(ssl=ctx, limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        nodes = await list_all(session, f"{server}/api/v1/nodes", {})
        pods, version = await list_with_version(
            session,
            f"{server}/api/v1/namespaces/{quote(namespace)}/pods",
            {"fieldSelector": f"spec.schedulerName={scheduler_name},spec.nodeName="},
        )
        seen = [0]  # a gang scheduler's watches (the module's docstring); the plain ceiling holds none
        paths = GANG_WATCHES if gangs else ()
        watches = [asyncio.create_task(follow(session, f"{server}{path}", version, seen)) for path in paths]
        try:
            if gangs:
                writer = GangWriter(kubeconfig, namespace, scheduler_name, concurrency)
                try:
                    await write_gangs(writer, pods, nodes, concurrency, topology_key)
                finally:
                    await writer.close()
                failures = writer.failures
            else:
                failures = await bind_all(
                    session, server, namespace, pods, [n["metadata"]["name"] for n in nodes], concurrency
                )
            print(f"ceiling: bound {len(pods) - failures}/{len(pods)} pods onto {len(nodes)} nodes", flush=True)
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            await stop.wait()
        finally:
            for watch in watches:
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
    if gangs:
        print(f"ceiling: {seen[0]} watch events decoded", flush=True)
    return 0 if failures == 0 else 1


async def bind_all(
    session: aiohttp.ClientSession,
    server: str,
    namespace: str,
    pods: list[dict[str, Any]],
    nodes: list[str],
    concurrency: int,
) -> int:
    """A Binding for each pod, round-robin over the nodes, ``concurrency`` in flight; the Bindings refused."""
    queue: asyncio.Queue[tuple[dict[str, Any], str]] = asyncio.Queue()
    for i, pod in enumerate(pods):
        queue.put_nowait((pod, nodes[i % len(nodes)]))
    failures = 0

    async def worker() -> None:
        nonlocal failures
        while not queue.empty():
            pod, node = queue.get_nowait()
            meta = pod["metadata"]
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": namespace, "uid": meta["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            url = f"{server}/api/v1/namespaces/{quote(namespace)}/pods/{quote(meta['name'])}/binding"
            async with session.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"}) as r:
                await r.read()
                if r.status >= 300:
                    failures += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failures


class GangWriter:
    """A gang scheduler's writes, through kopf-scheduler's own client (:mod:`kopf_scheduler.kube`: the same lean
    keep-alive connections and request bodies as ours), so that what the ceiling costs the machine is what our
    writes cost it. ``failures`` counts the pods whose Binding the API server refused."""

    def __init__(self, kubeconfig: Path, namespace: str, scheduler_name: str, concurrency: int) -> None:
        credentials = load_credentials(kubeconfig=str(kubeconfig))
        self.client = KubeClient(
            server=credentials.server,
            headers=credentials.auth_headers(),
            ssl_context=credentials.ssl_context(),
            connection_limit=concurrency,
        )
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.failures = 0

    async def close(self) -> None:
        await self.client.close()

    async def bind(self, pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        try:
            await self.client.bind(namespace=self.namespace, name=meta["name"], uid=meta["uid"], node_name=node)
        except APIError:
            self.failures += 1

    async def nominate(self, pod: dict[str, Any], node: str) -> None:
        patch = {"status": {"nominatedNodeName": node}}
        await self.client.patch_pod_status(namespace=self.namespace, name=pod["metadata"]["name"], patch=patch)

    async def scheduled_event(self, pod: dict[str, Any], node: str) -> None:
        body = event_body(
            regarding=pod,
            event_type="Normal",
            reason="Scheduled",
            action="Binding",
            note=f"Successfully assigned {self.namespace}/{pod['metadata']['name']} to {node}",
            reporting_controller=self.scheduler_name,
            reporting_instance=f"{self.scheduler_name}-ceiling",
        )
        await self.client.create_event(namespace=self.namespace, body=body)

    async def pod_group_scheduled(self, name: str) -> None:
        condition = {
            "type": "PodGroupScheduled",
            "status": "True",
            "reason": "Scheduled",
            "message": "",
            "observedGeneration": 1,
            "lastTransitionTime": now_rfc3339(),
        }
        patch = {"status": {"conditions": [condition]}}
        await self.client.patch_pod_group_status(namespace=self.namespace, name=name, patch=patch)


def gangs_of(pods: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The pods by the PodGroup their ``spec.schedulingGroup`` names, in the order they were listed; a pod of no
    group is a group of its own, named ""."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    alone: list[tuple[str, list[dict[str, Any]]]] = []
    for pod in pods:
        name = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
        if name:
            groups[name].append(pod)
        else:
            alone.append(("", [pod]))
    return [*groups.items(), *alone]


def domains_of(nodes: list[dict[str, Any]], topology_key: str) -> list[list[str]]:
    """The node names by their ``topology_key`` label (one domain of all nodes without a key)."""
    domains: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        domains[labels.get(topology_key, "") if topology_key else ""].append(node["metadata"]["name"])
    return list(domains.values())


async def write_gangs(
    writer: GangWriter, pods: list[dict[str, Any]], nodes: list[dict[str, Any]], concurrency: int, topology_key: str
) -> None:
    """A gang scheduler's writes for each PodGroup, ``concurrency`` requests in flight (a gang's members at once)."""
    domains = domains_of(nodes, topology_key)
    gangs = gangs_of(pods)
    queue: asyncio.Queue[tuple[int, str, list[dict[str, Any]]]] = asyncio.Queue()
    for i, (name, members) in enumerate(gangs):
        queue.put_nowait((i, name, members))

    async def one(pod: dict[str, Any], node: str) -> None:
        await writer.bind(pod, node)
        await writer.scheduled_event(pod, node)

    async def worker() -> None:
        while not queue.empty():
            i, name, members = queue.get_nowait()
            domain = domains[i % len(domains)]
            placed = [(pod, domain[(i * len(members) + k) % len(domain)]) for k, pod in enumerate(members)]
            await asyncio.gather(*(writer.nominate(pod, node) for pod, node in placed[:-1]))
            if name:
                await writer.pod_group_scheduled(name)
            await asyncio.gather(*(one(pod, node) for pod, node in placed))

    largest = max((len(members) for _, members in gangs), default=1)
    await asyncio.gather(*(worker() for _ in range(max(1, concurrency // largest))))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--scheduler-name", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--gangs", action="store_true", help="make a gang scheduler's writes (the module's docstring)")
    parser.add_argument("--topology-key", default="", help="with --gangs: keep each gang on nodes of one value of it")
    args = parser.parse_args(argv)
    return asyncio.run(
        run(
            args.kubeconfig,
            args.namespace,
            args.scheduler_name,
            args.concurrency,
            gangs=args.gangs,
            topology_key=args.topology_key,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
