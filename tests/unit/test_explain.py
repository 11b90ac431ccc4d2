"""Per-node explanations of failed attempts: built in the cycle, kept while the pod is pending, served on /explain."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from kopf_scheduler.explain import Explanations, format_account
from kopf_scheduler.framework import PostFilterResult
from kopf_scheduler.web import build_app
from tests.unit.app_harness import FakeClient, drive, new_app, pending
from tests.unit.factories import make_node
from tests.unit.test_schedule_one import NO_POST_FILTER, preempting_app

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def stuck_app() -> tuple[Any, FakeClient]:
    """Three nodes, each rejecting the pod through a different plugin."""
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("small", cpu="1"))
    app.on_node_event(None, make_node("tainted", cpu="8", taints=[TAINT]))
    app.on_node_event(None, make_node("cordoned", cpu="8", unschedulable=True))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "2"}))
    drive(app)
    return app, client


def test_a_failed_attempt_is_explained_node_by_node() -> None:
    app, client = stuck_app()
    account = app.explanations.get("default/big")
    assert account is not None
    [event] = client.events
    assert account["message"] == event["note"]  # the upstream text, unchanged
    assert account["result"] == "Unschedulable"
    assert account["profile"] == "sp"
    assert account["numNodes"] == 3
    cannot_help = "UnschedulableAndUnresolvable: preemption cannot help"  # DefaultPreemption, node by node
    assert account["nodes"] == {
        "cordoned": {
            "plugin": "NodeUnschedulable",
            "reasons": ["node(s) were unschedulable"],
            "preemption": cannot_help,
        },
        "small": {"plugin": "NodeResourcesFit", "reasons": ["Insufficient cpu"], "preemption": cannot_help},
        "tainted": {
            "plugin": "TaintToleration",
            "reasons": ["node(s) had untolerated taint(s)"],
            "preemption": cannot_help,
        },
    }
    assert account["rejectedByPlugin"] == {"NodeResourcesFit": 1, "NodeUnschedulable": 1, "TaintToleration": 1}
    assert "otherNodes" not in account


def test_the_explanation_goes_when_the_pod_is_bound_or_deleted() -> None:
    app, _ = stuck_app()
    app.on_node_event(None, make_node("roomy", cpu="8"))
    drive(app)  # the node event moved the pod back; it fits now and is bound
    assert app.explanations.get("default/big") is not None  # bound only once its watch event says so
    pod = pending("big", requests={"cpu": "2"}, node_name="roomy")
    app.on_pod_event("MODIFIED", pod)
    assert app.explanations.get("default/big") is None

    app, _ = stuck_app()
    app.on_pod_event("DELETED", pending("big", requests={"cpu": "2"}))
    assert app.explanations.get("default/big") is None


def test_nodes_not_judged_one_by_one_share_one_line() -> None:
    """A PreFilterResult that names no existing node judges none individually: all share its status."""
    app = new_app()
    for name in ("a", "b"):
        app.on_node_event(None, make_node(name))
    app.apply_profile(name="sp", spec={}, generation=1)
    pod = pending("pinned")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}]
            }
        }
    }
    app.on_pod_event("ADDED", pod)
    drive(app)
    account = app.explanations.get("default/pinned")
    assert account is not None
    assert account["message"] == (
        "0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [NodeAffinity]. "
        "no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    assert account["nodes"] == {}
    assert account["otherNodes"] == {
        "count": 2,
        "plugin": "",
        "reasons": ["node(s) didn't satisfy plugin(s) [NodeAffinity]"],
        "preemption": ["UnschedulableAndUnresolvable: preemption cannot help"],
    }
    assert (
        "2 other node(s): node(s) didn't satisfy plugin(s) [NodeAffinity]\n"
        "  preemption: UnschedulableAndUnresolvable: preemption cannot help\n\nHistory"
    ) in format_account(account)


def test_the_text_form_lists_every_node_with_its_plugin() -> None:
    app, _ = stuck_app()
    account = app.explanations.get("default/big")
    assert account is not None
    text = format_account(account).splitlines()
    assert text[0].startswith("Pod default/big: Unschedulable (profile sp, attempt at ")
    assert text[1] == account["message"]
    header = next(i for i, line in enumerate(text) if line.startswith("NODE"))
    end = text.index("", header)  # the history follows after a blank line
    rows = [line.split(None, 2) for line in text[header + 1 : end] if not line.lstrip().startswith("preemption: ")]
    assert rows == [
        ["cordoned", "NodeUnschedulable", "node(s) were unschedulable"],
        ["small", "NodeResourcesFit", "Insufficient cpu"],
        ["tainted", "TaintToleration", "node(s) had untolerated taint(s)"],
    ]


def test_nodes_failing_alike_share_one_verdict_and_the_kept_account_is_small() -> None:
    """Up to MAX_PODS accounts of every node are kept: at 5000 nodes a dict and a list per node were 1.4 MB
    per account. Nodes failing alike share one verdict, and the store keeps the nodes packed."""
    client = FakeClient()
    app = new_app(client)
    for i in range(2000):
        app.on_node_event(None, make_node(f"node-{i:04}", cpu="1"))
    app.on_node_event(None, make_node("tainted", cpu="8", taints=[TAINT]))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("first", requests={"cpu": "2"}))  # what the first cycle sets up
    drive(app)
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(5):
            app.on_pod_event("ADDED", pending(f"big-{i}", requests={"cpu": "2"}))
        drive(app)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # Five more pending pods with their accounts of 2001 nodes: 2.9 MB kept with a dict of dicts, 0.17 MB packed.
    assert kept < 500_000
    account = app.explanations.get("default/big-0")
    assert account is not None
    nodes = account["nodes"]
    assert list(nodes) == sorted(nodes)  # every node, in order, as before
    assert len(nodes) == 2001
    assert {(v["plugin"], *v["reasons"]) for v in nodes.values()} == {
        ("NodeResourcesFit", "Insufficient cpu"),
        ("TaintToleration", "node(s) had untolerated taint(s)"),
    }
    assert len({id(verdict) for verdict in nodes.values()}) == 2  # one per distinct verdict


def test_the_store_is_bounded_and_forgets_the_oldest_first() -> None:
    store = Explanations(max_pods=2)
    for key in ("ns/a", "ns/b", "ns/a", "ns/c"):
        store.record(key, {"pod": key})
    assert len(store) == 2
    assert store.get("ns/b") is None  # "a" was refreshed after "b", so "b" is the oldest
    assert (store.get("ns/a") or {}).get("pod") == "ns/a"
    assert (store.get("ns/c") or {}).get("pod") == "ns/c"


def test_the_endpoints_serve_metrics_and_explanations() -> None:
    registry = CollectorRegistry()
    Counter("scheduler_schedule_attempts", "attempts", registry=registry).inc()
    accounts = {"ns/stuck": {"pod": "ns/stuck", "message": "0/1 nodes are available: 1 Insufficient cpu."}}

    async def main() -> list[tuple[int, str, Any]]:
        runner = web.AppRunner(build_app(registry=registry, explain=accounts.get))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        import aiohttp

        results = []
        try:
            async with aiohttp.ClientSession() as session:
                for path in ("/metrics", "/explain/ns/stuck", "/explain/ns/other"):
                    async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                        body = await response.text()
                        results.append((response.status, response.headers["Content-Type"], body))
        finally:
            await runner.cleanup()
        return results

    (m_status, m_type, m_body), (e_status, _, e_body), (missing, _, missing_body) = asyncio.run(main())
    assert m_status == 200
    assert m_type.startswith("text/plain")
    assert "scheduler_schedule_attempts_total 1.0" in m_body
    assert e_status == 200
    assert '"0/1 nodes are available: 1 Insufficient cpu."' in e_body
    assert missing == 404
    assert "no failed scheduling attempt recorded for pod ns/other" in missing_body


def test_the_account_shows_what_preemption_found_on_each_node() -> None:
    messages = {"n1": "preemption would make room: victims default/low", "gone": "a node deleted meanwhile"}
    client = FakeClient()
    app = preempting_app(client, PostFilterResult(nominated_node_name="n1", node_messages=messages))
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "2"}))
    drive(app)
    account = app.explanations.get("default/big")
    assert account is not None
    assert account["postFilter"] == "preemption: fake"
    assert account["nominatedNode"] == "n1"
    assert account["nodes"]["n1"] == {
        "plugin": "NodeResourcesFit",
        "reasons": ["Insufficient cpu"],
        "preemption": "preemption would make room: victims default/low",
    }
    assert set(account["nodes"]) == {"n1"}  # a node the cycle did not judge gets no row of its own
    text = format_account(account).splitlines()
    assert "Nominated node (preemption): n1" in text
    row = next(i for i, line in enumerate(text) if line.startswith("n1 "))
    assert text[row + 1].strip() == "preemption: preemption would make room: victims default/low"


def test_without_postfilter_the_account_has_no_preemption_part() -> None:
    app = preempting_app(FakeClient(), None, NO_POST_FILTER)
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "2"}))
    drive(app)
    account = app.explanations.get("default/big")
    assert account is not None
    assert "nominatedNode" not in account
    assert all("preemption" not in verdict for verdict in account["nodes"].values())
