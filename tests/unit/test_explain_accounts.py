"""Success accounts (winner and runners-up, plugin by plugin) and the history of pending pods, for /explain.

The expected scores are computed by hand from upstream's formulas, not by the code under test:

- NodeResourcesFit, LeastAllocated, cpu and memory weighted 1 each: per resource
  ``(allocatable - requested) * 100 // allocatable``, then the weighted mean (integer division).
- NodeAffinity, preferred terms: the sum of the matching terms' weights, normalised as upstream's
  DefaultNormalizeScore (``score * 100 // highest``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kopf_scheduler.algorithm import ScheduleResult
from kopf_scheduler.explain import (
    MAX_CHANGED_NODES,
    Explanations,
    ScoreCapture,
    attempt_changes,
    capture_scores,
    format_account,
    success_account,
)
from kopf_scheduler.framework.verdicts import ScoreOutcome
from tests.unit.app_harness import FakeClient, drive, new_app, pending
from tests.unit.factories import make_node

#: Score only with NodeResourcesFit (weight 1) and NodeAffinity (weight 2); success accounts on.
PROFILE: dict[str, Any] = {
    "plugins": {
        "score": {
            "disabled": [{"name": "*"}],
            "enabled": [{"name": "NodeResourcesFit", "weight": 1}, {"name": "NodeAffinity", "weight": 2}],
        }
    },
    "explain": {"successes": True},
}

PREFERRED = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 30, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
            {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
        ]
    }
}

# Pod: 1 CPU, 1Gi.
#   n1: 4 CPU, 8Gi, disk=ssd      fit (3000*100//4000=75 + 7*100//8=87) // 2 = 81; affinity 30
#   n2: 2 CPU, 4Gi, zone=a        fit (1000*100//2000=50 + 3*100//4=75) // 2 = 62; affinity 10
#   n3: 8 CPU, 2Gi, both labels   fit (7000*100//8000=87 + 1*100//2=50) // 2 = 68; affinity 40
# NodeAffinity normalised (highest 40): n1 75, n2 25, n3 100; weighted ×2: 150, 50, 200.
# Totals: n1 81 + 150 = 231, n2 62 + 50 = 112, n3 68 + 200 = 268: n3 wins, then n1, then n2.
EXPECTED = {
    "n3": (268, {"NodeResourcesFit": (68, 68, 1, 68), "NodeAffinity": (40, 100, 2, 200)}),
    "n1": (231, {"NodeResourcesFit": (81, 81, 1, 81), "NodeAffinity": (30, 75, 2, 150)}),
    "n2": (112, {"NodeResourcesFit": (62, 62, 1, 62), "NodeAffinity": (10, 25, 2, 50)}),
}


def three_node_app(profile: dict[str, Any] = PROFILE) -> tuple[Any, FakeClient]:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1", cpu="4", memory="8Gi", labels={"disk": "ssd"}))
    app.on_node_event(None, make_node("n2", cpu="2", memory="4Gi", labels={"zone": "a"}))
    app.on_node_event(None, make_node("n3", cpu="8", memory="2Gi", labels={"disk": "ssd", "zone": "a"}))
    app.apply_profile(name="sp", spec=profile, generation=1)
    return app, client


def schedule_web(app: Any) -> None:
    app.on_pod_event("ADDED", pending("web", requests={"cpu": "1", "memory": "1Gi"}, spec={"affinity": PREFERRED}))
    drive(app)


def test_a_bound_pod_is_explained_by_its_winner_and_runners_up_with_upstreams_numbers() -> None:
    app, client = three_node_app()
    schedule_web(app)
    assert client.bindings == [("default", "web", "n3")]
    account = app.explanations.get("default/web")
    assert account is not None
    assert (account["result"], account["node"], account["profile"]) == ("Scheduled", "n3", "sp")
    assert (account["evaluatedNodes"], account["feasibleNodes"]) == (3, 3)
    assert account["scorePlugins"] == [{"name": "NodeResourcesFit", "weight": 1}, {"name": "NodeAffinity", "weight": 2}]
    assert [c["node"] for c in account["candidates"]] == ["n3", "n1", "n2"]
    assert [c["chosen"] for c in account["candidates"]] == [True, False, False]
    for candidate in account["candidates"]:
        total, plugins = EXPECTED[candidate["node"]]
        assert candidate["total"] == total
        scores = candidate["plugins"].items()
        got = {name: (s["raw"], s["normalized"], s["weight"], s["weighted"]) for name, s in scores}
        assert got == plugins
        assert sum(s["weighted"] for s in candidate["plugins"].values()) == candidate["total"]
    assert "tie" not in account


def test_the_account_survives_the_bound_pods_watch_event() -> None:
    app, _ = three_node_app()
    schedule_web(app)
    bound = pending("web", requests={"cpu": "1", "memory": "1Gi"}, node_name="n3", spec={"affinity": PREFERRED})
    app.on_pod_event("MODIFIED", bound)  # the eventhandlers forget the pod's failures, not its success
    account = app.explanations.get("default/web")
    assert account is not None
    assert account["node"] == "n3"


def test_without_spec_explain_successes_nothing_is_kept_for_bound_pods() -> None:
    app, client = three_node_app({**PROFILE, "explain": {}})
    schedule_web(app)
    assert client.bindings
    assert app.explanations.get("default/web") is None
    assert app.explanations.bound_count == 0


def test_a_bound_pods_text_lists_every_plugins_four_numbers_and_the_totals() -> None:
    app, _ = three_node_app()
    schedule_web(app)
    account = app.explanations.get("default/web")
    assert account is not None
    text = format_account(account).splitlines()
    assert text[0].startswith("Pod default/web: Scheduled on n3 (profile sp, at ")
    assert text[1] == "3 feasible node(s) of 3 evaluated."
    header = text.index(next(line for line in text if line.startswith("NODE")))
    assert text[header].split() == ["NODE", "PLUGIN", "RAW", "NORMALIZED", "WEIGHT", "WEIGHTED"]
    rows = [line.split() for line in text[header + 1 :]]
    assert rows == [
        ["n3", "(chosen)", "NodeResourcesFit", "68", "68", "1", "68"],
        ["NodeAffinity", "40", "100", "2", "200"],
        ["total", "268"],
        ["n1", "NodeResourcesFit", "81", "81", "1", "81"],
        ["NodeAffinity", "30", "75", "2", "150"],
        ["total", "231"],
        ["n2", "NodeResourcesFit", "62", "62", "1", "62"],
        ["NodeAffinity", "10", "25", "2", "50"],
        ["total", "112"],
    ]


def outcome(totals: list[int], plugin_rows: list[list[int]], weights: tuple[int, ...]) -> ScoreOutcome:
    nodes = np.arange(len(totals), dtype=np.int64) + 10  # slots need not be positions
    weighted = tuple(np.asarray(row, dtype=np.int64) * w for row, w in zip(plugin_rows, weights, strict=True))
    raw = tuple(np.asarray(row, dtype=np.int64) + 1000 for row in plugin_rows)  # distinguishable from normalised
    names = tuple(f"P{i}" for i in range(len(plugin_rows)))
    return ScoreOutcome(nodes, names, weights, weighted, np.asarray(totals, dtype=np.int64), raw)


def names_for(count: int) -> list[str | None]:
    return [None] * 10 + [f"node-{i}" for i in range(count)]


def test_capture_keeps_the_winner_first_and_the_three_best_others_by_total() -> None:
    rows = [[10, 50, 30, 90, 70, 0], [5, 5, 5, 5, 5, 5]]
    totals = [10 * 1 + 5 * 2 + 0, 50 + 10, 30 + 10, 90 + 10, 70 + 10, 10]
    scores = outcome(totals, rows, (1, 2))
    winner_slot = 10 + 3
    result = ScheduleResult("node-3", 6, 6, winner_slot, None, scores)  # type: ignore[arg-type]
    capture = capture_scores(result, names_for(6), at=0.0)
    assert capture.nodes == ("node-3", "node-4", "node-1", "node-2")
    assert capture.totals == (100, 80, 60, 40)
    assert capture.raw == ([1090, 1070, 1050, 1030], [1005, 1005, 1005, 1005])
    account = success_account("ns/p", "sp", capture)
    first = account["candidates"][0]["plugins"]
    assert first == {
        "P0": {"raw": 1090, "normalized": 90, "weight": 1, "weighted": 90},
        "P1": {"raw": 1005, "normalized": 5, "weight": 2, "weighted": 10},
    }


def test_a_tie_names_how_many_shared_the_highest_total_and_the_winner_stays_first() -> None:
    scores = outcome([7, 9, 9, 9], [[7, 9, 9, 9]], (1,))
    result = ScheduleResult("node-2", 4, 4, 12, None, scores)  # type: ignore[arg-type]
    capture = capture_scores(result, names_for(4), at=0.0)
    assert capture.nodes == ("node-2", "node-1", "node-3", "node-0")  # other tied nodes in node order
    account = success_account("ns/p", "sp", capture)
    assert account["tie"].startswith("3 nodes share the highest total")


def test_without_scoring_the_account_says_why() -> None:
    result = ScheduleResult("only", 5, 1, 0, None, None)  # type: ignore[arg-type]
    account = success_account("ns/p", "sp", capture_scores(result, ["only"], at=0.0))
    assert (account["node"], account["feasibleNodes"], account["evaluatedNodes"]) == ("only", 1, 5)
    assert "candidates" not in account
    assert account["message"].startswith("Score did not run")
    assert "Scheduled on only" in format_account(account)


def capture(node: str) -> ScoreCapture:
    return ScoreCapture(node, 0.0, 1, 1)


def test_the_success_ring_keeps_the_last_n_bound_pods() -> None:
    store = Explanations(max_bound=2)
    for key in ("ns/a", "ns/b", "ns/a", "ns/c"):
        store.record_success(key, "sp", capture(key))
    assert store.bound_count == 2
    assert store.get("ns/b") is None  # "a" was bound again after "b"
    assert (store.get("ns/a") or {})["node"] == "ns/a"
    assert (store.get("ns/c") or {})["node"] == "ns/c"

    none_kept = Explanations(max_bound=0)
    none_kept.record_success("ns/a", "sp", capture("n"))
    assert none_kept.get("ns/a") is None


def test_a_success_ends_the_pending_history_and_a_new_failure_ends_the_success() -> None:
    store = Explanations()
    store.record("ns/a", {"pod": "ns/a", "result": "Unschedulable", "message": "no", "time": "t0"})
    store.record_success("ns/a", "sp", capture("n1"))
    assert (store.get("ns/a") or {})["result"] == "Scheduled"
    assert len(store) == 0
    store.record("ns/a", {"pod": "ns/a", "result": "Unschedulable", "message": "again", "time": "t1"})
    account = store.get("ns/a") or {}
    assert account["result"] == "Unschedulable"
    assert [h["message"] for h in account["history"]] == ["again"]
    store.forget("ns/a")
    assert store.get("ns/a") is None  # the success was replaced, the failure forgotten


def fit_account(nodes: dict[str, tuple[str, list[str]]], num_nodes: int, message: str = "m") -> dict[str, Any]:
    counts: dict[str, int] = {}
    for plugin, _ in nodes.values():
        counts[plugin] = counts.get(plugin, 0) + 1
    return {
        "pod": "ns/p",
        "profile": "sp",
        "time": "t",
        "result": "Unschedulable",
        "message": message,
        "numNodes": num_nodes,
        "rejectedByPlugin": counts,
        "nodes": {name: {"plugin": plugin, "reasons": reasons} for name, (plugin, reasons) in nodes.items()},
    }


def test_consecutive_attempts_are_compared_node_by_node() -> None:
    before = fit_account({"a": ("NodeResourcesFit", ["Insufficient cpu"]), "b": ("TaintToleration", ["taint"])}, 2)
    after = fit_account(
        {"a": ("NodeResourcesFit", ["Insufficient memory"]), "c": ("NodeResourcesFit", ["Insufficient cpu"])}, 3
    )
    assert attempt_changes(before, after) == {
        "numNodes": {"from": 2, "to": 3},
        "rejectedByPlugin": {"NodeResourcesFit": {"from": 1, "to": 2}, "TaintToleration": {"from": 1, "to": 0}},
        "nodesAdded": ["c"],
        "nodesGone": ["b"],
        "nodesChanged": [
            {"node": "a", "from": "NodeResourcesFit: Insufficient cpu", "to": "NodeResourcesFit: Insufficient memory"}
        ],
    }
    assert attempt_changes(before, before) == {}
    assert attempt_changes(before, {**before, "message": "other"}) == {"message": "changed"}


def test_the_store_gives_back_the_account_it_was_given() -> None:
    """Kept packed (names in order, an index per node into the distinct verdicts), served whole."""
    nodes = {"b": ("TaintToleration", ["taint"]), "a": ("NodeResourcesFit", ["Insufficient cpu"]), "c": ("X", [])}
    account = fit_account(nodes, 3)
    store = Explanations()
    store.record("ns/p", account)
    served = store.get("ns/p") or {}
    assert list(served["nodes"].items()) == list(account["nodes"].items())
    assert {k: v for k, v in served.items() if k != "history"} == account


def test_a_change_list_names_at_most_the_cap_and_counts_the_rest() -> None:
    many = {f"n{i:02}": ("NodeResourcesFit", ["Insufficient cpu"]) for i in range(MAX_CHANGED_NODES + 5)}
    changes = attempt_changes(fit_account({}, 0), fit_account(many, len(many)))
    assert changes["nodesAdded"] == sorted(many)[:MAX_CHANGED_NODES]
    assert changes["nodesAddedMore"] == 5


def test_history_keeps_the_last_n_attempts_with_their_changes() -> None:
    store = Explanations(history=3)
    for count in range(1, 6):
        nodes = {f"n{i}": ("NodeResourcesFit", ["Insufficient cpu"]) for i in range(count)}
        store.record("ns/p", fit_account(nodes, count, message=f"attempt {count}"))
    account = store.get("ns/p") or {}
    assert account["message"] == "attempt 5"  # the latest in full
    history = account["history"]
    assert [h["message"] for h in history] == ["attempt 3", "attempt 4", "attempt 5"]
    assert [h["changes"]["numNodes"] for h in history] == [{"from": n - 1, "to": n} for n in (3, 4, 5)]
    assert [h["changes"]["nodesAdded"] for h in history] == [["n2"], ["n3"], ["n4"]]


def test_an_error_joins_the_history_and_the_next_failure_is_compared_with_the_last_fit_error() -> None:
    store = Explanations()
    store.record("ns/p", fit_account({"a": ("NodeResourcesFit", ["Insufficient cpu"])}, 1))
    store.record("ns/p", {"pod": "ns/p", "time": "t", "result": "SchedulerError", "message": "boom"})
    assert (store.get("ns/p") or {})["result"] == "SchedulerError"
    store.record("ns/p", fit_account({"a": ("NodeResourcesFit", ["Insufficient cpu"]), "b": ("X", ["y"])}, 2))
    history = (store.get("ns/p") or {})["history"]
    assert [h["result"] for h in history] == ["Unschedulable", "SchedulerError", "Unschedulable"]
    assert "changes" not in history[0]
    assert "changes" not in history[1]  # an error is not compared node by node
    assert history[2]["changes"]["nodesAdded"] == ["b"]
    text = format_account(store.get("ns/p") or {})
    assert "  t  SchedulerError: boom\n  t  Unschedulable: m\n      nodes: 1 → 2\n" in text


def test_an_error_account_prints_its_reason_message_and_history() -> None:
    store = Explanations()
    store.record("ns/p", {"pod": "ns/p", "profile": "sp", "time": "t", "result": "SchedulerError", "message": "boom"})
    text = format_account(store.get("ns/p") or {}).splitlines()
    assert text[:2] == ["Pod ns/p: SchedulerError (profile sp, attempt at t)", "boom"]
    assert text[-2:] == ["History (last 1 attempt(s), oldest first):", "  t  SchedulerError: boom"]


def test_a_pending_pods_history_follows_the_cluster_and_is_printed() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("small", cpu="1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "2"}))
    drive(app)
    app.on_node_event(None, make_node("tainted", cpu="8", taints=[{"key": "k", "effect": "NoSchedule"}]))
    drive(app)  # the new node moved the pod back; it fails again, on both nodes
    account = app.explanations.get("default/big")
    assert account is not None
    history = account["history"]
    assert len(history) == 2
    assert "changes" not in history[0]
    assert history[-1]["changes"]["numNodes"] == {"from": 1, "to": 2}
    assert history[-1]["changes"]["nodesAdded"] == ["tainted"]
    text = format_account(account)
    assert "History (last 2 attempt(s), oldest first):" in text
    assert "nodes: 1 → 2" in text
    assert "newly rejected: tainted" in text


def test_the_benchmark_cycle_with_accounts_keeps_one_per_bound_pod_within_the_ring() -> None:
    from bench.algo import measure
    from bench.explain_cost import capture_alone_us

    accounts = Explanations(max_bound=5)
    measure("plain", 20, cycles=10, warmup=2, accounts=accounts)
    assert accounts.bound_count == 5
    assert capture_alone_us("plain", 20, cycles=5, passes=1) > 0


def test_a_prioritize_extender_is_one_more_column_of_the_account() -> None:
    """Upstream adds an extender's score × weight × (MaxNodeScore / MaxExtenderPriority) to the total: 10 × 5 × 10."""
    from tests.unit.test_extenders import URL, FakeTransport, names_of
    from tests.unit.test_extenders import drive as drive_awaiting
    from tests.unit.test_extenders import new_app as new_extender_app

    transport = FakeTransport(
        {(URL, "prioritize"): lambda _, body: [{"Host": n, "Score": 10 if n == "n2" else 0} for n in names_of(body)]}
    )
    client = FakeClient()
    app = new_extender_app(transport, client)
    for name in ("n1", "n2", "n3"):
        app.on_node_event(None, make_node(name))
    extenders = [{"urlPrefix": URL, "prioritizeVerb": "prioritize", "weight": 5}]
    assert app.apply_profile(name="sp", spec={"extenders": extenders, **PROFILE}, generation=1).ready
    app.on_pod_event("ADDED", pending("p"))
    drive_awaiting(app)
    account = app.explanations.get("default/p")
    assert account is not None
    assert account["node"] == "n2"
    winner = account["candidates"][0]
    assert winner["plugins"][URL] == {"raw": 500, "normalized": 500, "weight": 1, "weighted": 500}
    assert sum(s["weighted"] for s in winner["plugins"].values()) == winner["total"]
    assert {"name": URL, "weight": 1} in account["scorePlugins"]
