"""A pod's last scheduling attempt written onto the pod itself, so that it outlives the replica that made it.

The accounts of ``explain.py`` live in the active replica's memory: lost on failover and bounded to recent pods.
A profile with ``spec.explain.annotations`` also writes the last attempt onto the pod, after the convention of
kube-scheduler-simulator's debuggable scheduler (``kube-scheduler-simulator.sigs.k8s.io/filter-result``,
``score-result``, ``finalscore-result``, ``selected-node``: JSON objects in pod annotations, node → plugin →
result), under our own prefix (:data:`PREFIX`), so that ``kubectl get pod -o yaml`` shows it and a replica that
never saw the attempt can still explain it (:func:`account_from_annotations`). There is no upstream
counterpart in kube-scheduler itself.

What is written (each value a JSON document; the shapes are the simulator's, restated):

- ``kopf-scheduler.io/result``: the attempt: ``profile``, ``time``, ``result`` (Scheduled, Unschedulable,
  SchedulerError), ``message``, node counts, per-plugin rejection counts, the score plugins' ``weights``, and
  the bound it was cut to: ``listedNodes`` (nodes named in the other annotations) and ``omittedNodes`` (nodes
  the attempt judged but that are left out);
- ``kopf-scheduler.io/filter-result`` (a failure): node → {rejecting plugin → its message}, for at most
  :data:`MAX_FILTER_NODES` nodes (by name), the rest counted;
- ``kopf-scheduler.io/score-result`` and ``kopf-scheduler.io/finalscore-result`` (a success): node →
  {plugin → score as a decimal string}, raw (Score's) and final (normalized × weight), for the winner and the
  best runners-up (``explain.RUNNERS_UP``);
- ``kopf-scheduler.io/selected-node`` (a success): the node.

Every value together stays under :data:`MAX_BYTES` (fewer nodes are listed until it does). Where they are written
(the Binding's own annotations for a bound pod, one merge patch for a failure) is ``reporting.py``'s part.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

from kopf_scheduler import json_codec
from kopf_scheduler.explain import ScoreCapture, rfc3339

PREFIX = "kopf-scheduler.io/"
RESULT = PREFIX + "result"
FILTER_RESULT = PREFIX + "filter-result"
SCORE_RESULT = PREFIX + "score-result"
FINALSCORE_RESULT = PREFIX + "finalscore-result"
SELECTED_NODE = PREFIX + "selected-node"
#: Every key this module writes.
KEYS = (RESULT, FILTER_RESULT, SCORE_RESULT, FINALSCORE_RESULT, SELECTED_NODE)
#: Rejected nodes named in ``filter-result`` at most (the rest are counted in ``result``'s ``omittedNodes``).
MAX_FILTER_NODES = 10
#: The sum of the values' lengths (bytes of UTF-8) never exceeds this (the API server allows 256 KiB in all).
MAX_BYTES = 8192

_SUMMARY_KEYS = ("message", "numNodes", "rejectedByPlugin", "nominatedNode", "preFilter", "postFilter")


def _dumps(value: Any) -> str:
    """Compact JSON, keys in insertion order (plugins as the profile lists them); orjson where installed: the
    standard library's encoder was most of a bound pod's annotations' cost (docs/benchmarks.md)."""
    return json_codec.dumps(value).decode()


def _size(annotations: Mapping[str, str]) -> int:
    """The values' bytes in UTF-8; counted exactly only when they could be over :data:`MAX_BYTES` (4 bytes a
    character at most): node and plugin names are ASCII, so the common case is one sum of lengths."""
    characters = sum(len(value) for value in annotations.values())
    if 4 * characters <= MAX_BYTES:
        return characters
    return sum(len(value.encode()) for value in annotations.values())


def success_annotations(profile: str, capture: ScoreCapture) -> dict[str, str]:
    """The annotations of a bound pod: the chosen node and the listed candidates' raw and final scores."""
    listed = len(capture.nodes)
    while True:
        annotations = _success(profile, capture, listed)
        if _size(annotations) <= MAX_BYTES or listed <= 1:
            return annotations
        listed -= 1


def _success(profile: str, capture: ScoreCapture, listed: int) -> dict[str, str]:
    nodes = capture.nodes[:listed]
    result: dict[str, Any] = {
        "profile": profile,
        "time": rfc3339(capture.at),
        "result": "Scheduled",
        "evaluatedNodes": capture.evaluated_nodes,
        "feasibleNodes": capture.feasible_nodes,
        "weights": dict(zip(capture.plugins, capture.weights, strict=True)),
        "listedNodes": len(nodes),
        "omittedNodes": max(capture.feasible_nodes - len(nodes), 0) if nodes else 0,
    }
    raw = {n: {p: str(capture.raw[i][j]) for i, p in enumerate(capture.plugins)} for j, n in enumerate(nodes)}
    final = {n: {p: str(capture.weighted[i][j]) for i, p in enumerate(capture.plugins)} for j, n in enumerate(nodes)}
    return {
        RESULT: _dumps(result),
        SELECTED_NODE: capture.node,
        SCORE_RESULT: _dumps(raw),
        FINALSCORE_RESULT: _dumps(final),
    }


def failure_annotations(account: Mapping[str, Any]) -> dict[str, str]:
    """The annotations of a failed attempt, from its ``explain`` account (a FitError's or any failure's)."""
    nodes: Mapping[str, Mapping[str, Any]] = account.get("nodes") or {}
    # The first by name: an account lists its nodes sorted (explain_fit_error), so no sort of 5000 names here.
    names = list(itertools.islice(nodes, MAX_FILTER_NODES))
    listed = len(names)
    while True:
        annotations = _failure(account, nodes, names[:listed])
        if _size(annotations) <= MAX_BYTES or listed == 0:
            return annotations
        listed //= 2


def _failure(account: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], names: list[str]) -> dict[str, str]:
    result: dict[str, Any] = {key: account[key] for key in ("profile", "time", "result") if key in account}
    result.update({key: account[key] for key in _SUMMARY_KEYS if key in account})
    judged = int(account.get("numNodes") or len(nodes))
    result["listedNodes"] = len(names)
    result["omittedNodes"] = max(judged - len(names), 0) if "numNodes" in account else 0
    others = account.get("otherNodes")
    if others:
        result["otherNodes"] = {key: others[key] for key in ("count", "plugin", "reasons") if key in others}
    if len(_dumps(result).encode()) > MAX_BYTES // 2 and "message" in result:
        result["message"] = result["message"][: MAX_BYTES // 4]
    filters = {name: {str(nodes[name]["plugin"] or "-"): ", ".join(nodes[name]["reasons"])} for name in names}
    return {RESULT: _dumps(result), FILTER_RESULT: _dumps(filters)}


def with_stale_cleared(annotations: dict[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """``annotations`` plus an empty value for each of our keys ``current`` has and they do not set: a Binding can
    only add or change annotations, so a success after a failure empties the failure's ``filter-result``."""
    stale = {key: "{}" for key in KEYS if key in current and key not in annotations and key != SELECTED_NODE}
    return {**annotations, **stale}


def unchanged(annotations: Mapping[str, str], current: Mapping[str, str]) -> bool:
    """Whether the pod already carries this attempt's annotations, but for its time (nothing to write then)."""
    if any(current.get(key) != value for key, value in annotations.items() if key != RESULT):
        return False
    try:
        before, after = json.loads(current.get(RESULT) or "null"), json.loads(annotations[RESULT])
    except ValueError:
        return False
    return isinstance(before, dict) and {**before, "time": None} == {**after, "time": None}


def account_from_annotations(key: str, annotations: Mapping[str, str]) -> dict[str, Any] | None:
    """The ``explain`` account the annotations still tell (``source: annotations``), or None if they hold none."""
    try:
        result = json.loads(annotations[RESULT])
    except (KeyError, ValueError):
        return None
    if not isinstance(result, dict):
        return None
    try:
        if result.get("result") == "Scheduled":
            return _success_account(key, result, annotations)
        return _failure_account(key, result, annotations)
    except (KeyError, ValueError, TypeError, AttributeError):  # written by someone else, or cut: not an account
        return None


def _loads(annotations: Mapping[str, str], key: str) -> dict[str, Any]:
    value = json.loads(annotations.get(key) or "{}")
    return value if isinstance(value, dict) else {}


def _success_account(key: str, result: dict[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    weights: dict[str, int] = {p: int(w) for p, w in (result.get("weights") or {}).items()}
    account: dict[str, Any] = {"pod": key, "source": "annotations"}
    account.update({k: v for k, v in result.items() if k not in ("weights",)})
    account["node"] = annotations.get(SELECTED_NODE, "")
    raw, final = _loads(annotations, SCORE_RESULT), _loads(annotations, FINALSCORE_RESULT)
    candidates = []
    for node, plugins in final.items():
        scores = {
            plugin: {
                "raw": int(raw.get(node, {}).get(plugin, 0)),
                "normalized": int(value) // weights[plugin] if weights.get(plugin) else 0,
                "weight": weights.get(plugin, 0),
                "weighted": int(value),
            }
            for plugin, value in plugins.items()
        }
        total = sum(score["weighted"] for score in scores.values())
        candidates.append({"node": node, "chosen": node == account["node"], "total": total, "plugins": scores})
    if candidates:
        candidates.sort(key=lambda c: (not c["chosen"], -c["total"]))
        account["scorePlugins"] = [{"name": p, "weight": w} for p, w in weights.items()]
        account["candidates"] = candidates
    return account


def _failure_account(key: str, result: dict[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    account: dict[str, Any] = {"pod": key, "source": "annotations", **result}
    filters = _loads(annotations, FILTER_RESULT)
    if filters or "numNodes" in result:
        account["nodes"] = {
            node: {"plugin": plugin if plugin != "-" else None, "reasons": [message] if message else []}
            for node, verdict in sorted(filters.items())
            for plugin, message in list(verdict.items())[:1]
        }
    return account
