"""The end-to-end benchmark's ceiling binder in its gang mode: the writes a gang scheduler makes, per gang, no more,
and the watches it holds meanwhile.

The API server is replaced by a recording writer: what matters here is which writes the ceiling makes for which
pods and nodes (the gang workloads' 3.0 writes per pod, each gang on the nodes of one rack), not how they travel;
and by a small HTTP server for the watch, whose events the ceiling must read from its LIST's version on.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web

from bench._e2e_ceiling import GANG_WATCHES, domains_of, follow, gangs_of, write_gangs
from bench._e2e_gangs import GANG_SIZE, RACK_KEY, rack_of
from bench.e2e import DEFAULT_WORKLOADS, ceiling_gang_args


def _pod(name: str, group: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": group}} if group else {}
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


def _node(index: int) -> dict[str, Any]:
    return {"metadata": {"name": f"node-{index}", "labels": {RACK_KEY: rack_of(index)}}}


class RecordingWriter:
    """The ceiling's :class:`~bench._e2e_ceiling.GangWriter`, recording instead of sending."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.failures = 0

    async def bind(self, pod: dict[str, Any], node: str) -> None:
        self.calls.append(("bind", pod["metadata"]["name"], node))

    async def nominate(self, pod: dict[str, Any], node: str) -> None:
        self.calls.append(("nominate", pod["metadata"]["name"], node))

    async def scheduled_event(self, pod: dict[str, Any], node: str) -> None:
        self.calls.append(("event", pod["metadata"]["name"], node))

    async def pod_group_scheduled(self, name: str) -> None:
        self.calls.append(("podgroup", name, ""))


def _gang_pods(gangs: int, size: int) -> list[dict[str, Any]]:
    return [_pod(f"gang-{g}-{k}", f"gang-{g}") for g in range(gangs) for k in range(size)]


def test_gangs_of_groups_members_by_their_pod_group_and_keeps_loose_pods_alone() -> None:
    pods = [_pod("a-0", "a"), _pod("loose", None), _pod("b-0", "b"), _pod("a-1", "a")]
    assert [(name, [p["metadata"]["name"] for p in members]) for name, members in gangs_of(pods)] == [
        ("a", ["a-0", "a-1"]),
        ("b", ["b-0"]),
        ("", ["loose"]),
    ]


def test_domains_of_splits_nodes_by_the_key_or_keeps_them_together() -> None:
    nodes = [_node(i) for i in range(120)]
    assert [len(d) for d in domains_of(nodes, RACK_KEY)] == [50, 50, 20]
    assert [len(d) for d in domains_of(nodes, "")] == [120]


def test_write_gangs_makes_a_gang_schedulers_writes_three_per_pod() -> None:
    writer = RecordingWriter()
    nodes = [_node(i) for i in range(100)]
    asyncio.run(write_gangs(writer, _gang_pods(5, GANG_SIZE), nodes, 64, ""))  # type: ignore[arg-type]
    kinds = Counter(kind for kind, _, _ in writer.calls)
    assert kinds == {"bind": 40, "event": 40, "nominate": 35, "podgroup": 5}  # as both schedulers' runs count
    assert sum(kinds.values()) / 40 == 3.0
    for g in range(5):
        names = {f"gang-{g}-{k}" for k in range(GANG_SIZE)}
        nominated = {name for kind, name, _ in writer.calls if kind == "nominate" and name in names}
        assert nominated == names - {f"gang-{g}-{GANG_SIZE - 1}"}  # every member but the last
        order = [kind for kind, name, _ in writer.calls if name in names or name == f"gang-{g}"]
        assert order.index("podgroup") > max(i for i, kind in enumerate(order) if kind == "nominate")
        assert order.index("podgroup") < min(i for i, kind in enumerate(order) if kind == "bind")


def test_write_gangs_keeps_each_gang_in_one_domain_and_spreads_the_gangs() -> None:
    writer = RecordingWriter()
    nodes = [_node(i) for i in range(200)]  # four racks of 50
    asyncio.run(write_gangs(writer, _gang_pods(8, GANG_SIZE), nodes, 16, RACK_KEY))  # type: ignore[arg-type]
    racks: dict[str, set[str]] = {}
    for kind, name, node in writer.calls:
        if kind == "bind":
            racks.setdefault(name.rsplit("-", 1)[0], set()).add(rack_of(int(node.rsplit("-", 1)[1])))
    assert len(racks) == 8
    assert all(len(used) == 1 for used in racks.values())
    assert len(set().union(*racks.values())) == 4


def test_the_harness_asks_the_ceiling_for_gang_writes_only_in_gang_workloads() -> None:
    by_id = {w.id: w for w in DEFAULT_WORKLOADS}
    assert ceiling_gang_args(None) == []
    assert ceiling_gang_args(by_id["basic-5000"]) == []
    assert ceiling_gang_args(by_id["gangs"]) == ["--gangs"]
    assert ceiling_gang_args(by_id["gangs-topology"]) == ["--gangs", "--topology-key", RACK_KEY]


def _served_watch(events: list[dict[str, Any]], closing: asyncio.Event) -> tuple[web.Application, list[dict[str, str]]]:
    """An HTTP server answering a watch of pods with ``events`` (one JSON line each, then the stream stays open
    until ``closing``) and 404 to anything else; records the query of every watch asked for."""
    asked: list[dict[str, str]] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        asked.append(dict(request.query))
        response = web.StreamResponse()
        await response.prepare(request)
        for event in events:
            await response.write(json.dumps(event).encode() + b"\n")
        await closing.wait()  # a watch stays open until the client goes
        return response

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    return app, asked


def test_follow_decodes_every_event_from_the_lists_version_and_skips_what_is_not_served() -> None:
    events = [{"type": "MODIFIED", "object": {"metadata": {"name": f"p{i}"}}} for i in range(5)]
    seen = [0]
    asked: list[dict[str, str]] = []

    async def scenario() -> None:
        closing = asyncio.Event()
        app, queries = _served_watch(events, closing)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        server = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                await follow(session, f"{server}{GANG_WATCHES[1]}", "42", seen)  # not served: returns at once
                watch = asyncio.create_task(follow(session, f"{server}{GANG_WATCHES[0]}", "42", seen))
                for _ in range(200):
                    if seen[0] == len(events):
                        break
                    await asyncio.sleep(0.01)
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
        finally:
            closing.set()
            await runner.cleanup()
        asked.extend(queries)

    asyncio.run(scenario())
    assert seen == [5]
    assert asked == [{"watch": "1", "resourceVersion": "42", "allowWatchBookmarks": "true"}]
