"""The ceiling of the end-to-end benchmark: a binder that does no scheduling at all.

``python -m bench._e2e_ceiling --kubeconfig K --namespace NS --scheduler-name S`` lists the nodes and the
pending pods of ``S`` in ``NS``, then POSTs a Binding for each pod, round-robin over the nodes, with many
requests in flight (asyncio + aiohttp, one keep-alive connection per in-flight request). No cache, no
filtering, no events. It measures how fast this API server (and a Python client on this machine) accepts
Bindings, i.e. the best any scheduler talking to it could do. After the last bind it stays alive until
SIGTERM so the harness can read its peak RSS and CPU time from /proc, as for the real schedulers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml


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
    items: list[dict[str, Any]] = []
    query = {"limit": "1000", **params}
    while True:
        async with session.get(url, params=query) as resp:
            resp.raise_for_status()
            page = await resp.json()
        items.extend(page.get("items") or ())
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        query["continue"] = token


async def run(kubeconfig: Path, namespace: str, scheduler_name: str, concurrency: int) -> int:
    server, headers, ctx = load_kubeconfig(kubeconfig)
    connector = aiohttp.TCPConnector(ssl=ctx, limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        nodes = [n["metadata"]["name"] for n in await list_all(session, f"{server}/api/v1/nodes", {})]
        pods = await list_all(
            session,
            f"{server}/api/v1/namespaces/{quote(namespace)}/pods",
            {"fieldSelector": f"spec.schedulerName={scheduler_name},spec.nodeName="},
        )
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
    print(f"ceiling: bound {len(pods) - failures}/{len(pods)} pods onto {len(nodes)} nodes", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    return 0 if failures == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--scheduler-name", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args(argv)
    return asyncio.run(run(args.kubeconfig, args.namespace, args.scheduler_name, args.concurrency))


if __name__ == "__main__":
    sys.exit(main())
