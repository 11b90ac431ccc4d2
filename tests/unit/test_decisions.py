"""The last attempt written onto the pod (decisions.py, spec.explain.annotations): what is written, its bound,
that a profile without the opt-in writes nothing, and that explain answers from the annotations alone."""

from __future__ import annotations

import copy
import json
from typing import Any

from kopf_scheduler.decisions import (
    FILTER_RESULT,
    FINALSCORE_RESULT,
    MAX_BYTES,
    MAX_FILTER_NODES,
    RESULT,
    SCORE_RESULT,
    SELECTED_NODE,
    account_from_annotations,
    failure_annotations,
    success_annotations,
    unchanged,
    with_stale_cleared,
)
from kopf_scheduler.explain import ScoreCapture, format_account
from tests.unit.app_harness import drive, new_app, pending
from tests.unit.factories import make_node
from tests.unit.test_explain_accounts import EXPECTED, PROFILE, schedule_web, three_node_app

ANNOTATED: dict[str, Any] = {**PROFILE, "explain": {"annotations": True}}


def test_a_bound_pods_binding_carries_the_simulators_shapes_and_nothing_else_is_written() -> None:
    app, client = three_node_app(ANNOTATED)
    schedule_web(app)
    assert client.bindings == [("default", "web", "n3")]
    annotations = client.binding_annotations["web"]
    assert set(annotations) == {RESULT, SELECTED_NODE, SCORE_RESULT, FINALSCORE_RESULT}
    assert annotations[SELECTED_NODE] == "n3"
    raw, final = json.loads(annotations[SCORE_RESULT]), json.loads(annotations[FINALSCORE_RESULT])
    for node, (_, plugins) in EXPECTED.items():
        assert raw[node] == {plugin: str(numbers[0]) for plugin, numbers in plugins.items()}
        assert final[node] == {plugin: str(numbers[3]) for plugin, numbers in plugins.items()}
    result = json.loads(annotations[RESULT])
    assert (result["result"], result["profile"], result["listedNodes"], result["omittedNodes"]) == (
        "Scheduled",
        "sp",
        3,
        0,
    )
    assert result["weights"] == {"NodeResourcesFit": 1, "NodeAffinity": 2}
    assert client.annotation_patches == []  # the Binding is the only write


def test_a_profile_without_the_opt_in_binds_and_fails_without_annotations() -> None:
    app, client = three_node_app(PROFILE)
    schedule_web(app)
    app.on_pod_event("ADDED", pending("huge", requests={"cpu": "64"}))
    drive(app)
    assert client.bindings == [("default", "web", "n3")]
    assert client.binding_annotations == {}
    assert client.annotation_patches == []


def test_a_failure_is_one_patch_and_an_unchanged_failure_is_not_written_again() -> None:
    app, client = three_node_app(ANNOTATED)
    app.on_pod_event("ADDED", pending("huge", requests={"cpu": "64"}))
    drive(app)
    [(name, annotations)] = client.annotation_patches
    assert name == "huge"
    assert set(annotations) == {RESULT, FILTER_RESULT}
    filters = json.loads(annotations[FILTER_RESULT])
    assert filters == {node: {"NodeResourcesFit": "Insufficient cpu"} for node in ("n1", "n2", "n3")}
    result = json.loads(annotations[RESULT])
    assert (result["result"], result["numNodes"], result["omittedNodes"]) == ("Unschedulable", 3, 0)
    assert result["message"].startswith("0/3 nodes are available: 3 Insufficient cpu.")
    # The watch shows the pod with them; the next attempt fails alike: nothing more is written.
    pod = pending("huge", requests={"cpu": "64"})
    pod["metadata"]["annotations"] = annotations
    assert unchanged(failure_annotations({**result, "time": "later", "nodes": _nodes(filters)}), annotations)


def _nodes(filters: dict[str, dict[str, str]]) -> dict[str, Any]:
    return {n: {"plugin": p, "reasons": [m]} for n, v in filters.items() for p, m in v.items()}


def test_a_failure_on_many_nodes_names_a_bounded_few_and_counts_the_rest() -> None:
    verdict = {"plugin": "NodeResourcesFit", "reasons": ["Insufficient cpu" + " (long reason)" * 40]}
    account = {
        "pod": "ns/p",
        "profile": "sp",
        "time": "t",
        "result": "Unschedulable",
        "message": "0/5000 nodes are available: 5000 Insufficient cpu.",
        "numNodes": 5000,
        "rejectedByPlugin": {"NodeResourcesFit": 5000},
        "nodes": {f"node-{i:05d}": verdict for i in range(5000)},
    }
    annotations = failure_annotations(account)
    assert sum(len(v.encode()) for v in annotations.values()) <= MAX_BYTES
    filters = json.loads(annotations[FILTER_RESULT])
    result = json.loads(annotations[RESULT])
    assert 0 < len(filters) <= MAX_FILTER_NODES
    assert result["listedNodes"] == len(filters)
    assert result["omittedNodes"] == 5000 - len(filters)
    assert sorted(filters) == [f"node-{i:05d}" for i in range(len(filters))]


def test_success_annotations_stay_bounded_with_many_plugins() -> None:
    plugins = tuple(f"Plugin{i:03d}WithAVeryLongName" for i in range(60))
    nodes = tuple(f"a-node-with-a-rather-long-name-{i}" for i in range(4))
    capture = ScoreCapture(
        node=nodes[0],
        at=0.0,
        evaluated_nodes=100,
        feasible_nodes=100,
        nodes=nodes,
        plugins=plugins,
        weights=(1,) * 60,
        raw=tuple([100, 90, 80, 70] for _ in plugins),
        weighted=tuple([100, 90, 80, 70] for _ in plugins),
        totals=(6000, 5400, 4800, 4200),
    )
    annotations = success_annotations("sp", capture)
    assert sum(len(v.encode()) for v in annotations.values()) <= MAX_BYTES
    result = json.loads(annotations[RESULT])
    listed = json.loads(annotations[FINALSCORE_RESULT])
    assert result["listedNodes"] == len(listed) < 4
    assert result["omittedNodes"] == 100 - len(listed)
    assert nodes[0] in listed


def test_a_success_after_failures_empties_the_failures_filter_result() -> None:
    current = {FILTER_RESULT: '{"n1":{"NodeResourcesFit":"Insufficient cpu"}}', RESULT: "{}", "other": "x"}
    cleared = with_stale_cleared({RESULT: "{}", SELECTED_NODE: "n1"}, current)
    assert cleared == {RESULT: "{}", SELECTED_NODE: "n1", FILTER_RESULT: "{}"}


def test_explain_answers_from_the_annotations_when_the_replica_kept_no_account() -> None:
    """A replica that never saw the attempt (the standby, after a failover) reads the pod's annotations."""
    first, client = three_node_app(ANNOTATED)
    schedule_web(first)
    bound = pending("web", requests={"cpu": "1", "memory": "1Gi"}, node_name="n3")
    bound["metadata"]["annotations"] = client.binding_annotations["web"]
    other = new_app(client)
    other.on_node_event(None, make_node("n3", cpu="8", memory="2Gi"))
    other.on_pod_event("ADDED", bound)
    account = other.explain("default/web")
    assert account is not None
    assert account["source"] == "annotations"
    original = first.explain("default/web")
    assert original is not None
    for key in ("result", "node", "profile", "evaluatedNodes", "feasibleNodes", "scorePlugins", "candidates"):
        assert account[key] == original[key], key
    assert "n3 (chosen)" in format_account(account)  # it prints as any success account
    assert other.explain("default/nobody") is None


def test_a_failure_read_back_formats_as_a_failure_account() -> None:
    app, client = three_node_app(ANNOTATED)
    app.on_pod_event("ADDED", pending("huge", requests={"cpu": "64"}))
    drive(app)
    [(_, annotations)] = client.annotation_patches
    account = account_from_annotations("default/huge", annotations)
    assert account is not None
    original = app.explain("default/huge")
    assert original is not None
    assert account["nodes"] == {
        n: {"plugin": "NodeResourcesFit", "reasons": ["Insufficient cpu"]} for n in original["nodes"]
    }
    assert (account["message"], account["rejectedByPlugin"]) == (original["message"], original["rejectedByPlugin"])
    assert "Insufficient cpu" in format_account(account)


def test_annotations_written_by_someone_else_are_no_account() -> None:
    assert account_from_annotations("ns/p", {}) is None
    assert account_from_annotations("ns/p", {RESULT: "not json"}) is None
    assert account_from_annotations("ns/p", {RESULT: "[1]"}) is None
    assert account_from_annotations("ns/p", {RESULT: '{"result":"Scheduled","weights":3}'}) is None


def test_the_failures_patch_does_not_requeue_the_pod_and_its_later_binding_empties_filter_result() -> None:
    app, client = three_node_app(ANNOTATED)
    late = pending("late", requests={"cpu": "10"})
    app.on_pod_event("ADDED", late)
    drive(app)
    [(_, annotations)] = client.annotation_patches
    # The watch brings the pod back with them: no new attempt for that alone (nothing else changed).
    annotated = copy.deepcopy(late)
    annotated["metadata"]["annotations"] = annotations
    annotated["metadata"]["resourceVersion"] = "2"
    app.on_pod_event("MODIFIED", annotated)
    assert app.profiles["sp"].queue.pending_pods()["unschedulable"] == 1  # still parked, not moved by its update
    drive(app)
    assert client.bindings == []
    assert len(client.annotation_patches) == 1
    # A node where it fits: bound, and the Binding empties the failure's filter-result.
    app.on_node_event(None, make_node("big", cpu="16", memory="16Gi"))
    app.profiles["sp"].queue.flush_backoff_completed()
    drive(app)
    assert client.bindings == [("default", "late", "big")]
    carried = client.binding_annotations["late"]
    assert carried[FILTER_RESULT] == "{}"
    assert carried[SELECTED_NODE] == "big"
    assert json.loads(carried[RESULT])["result"] == "Scheduled"
