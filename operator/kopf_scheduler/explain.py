"""Why a pending pod fits nowhere, node by node and plugin by plugin: what kube-scheduler cannot tell you.

kube-scheduler's FailedScheduling text is a histogram ("0/3 nodes are available: 1 node(s) had untolerated
taint ..., 2 Insufficient cpu."): it says how many nodes failed for which reason, never which node failed for
which. The cycle knows (its Diagnosis holds every rejected node's Status with the plugin that returned it), so
after each failed attempt the operator keeps that account for the pod, and serves it at
``/explain/<namespace>/<pod>`` beside ``/metrics`` (``kopf-scheduler explain`` prints it).

The account is built when the attempt fails, because node names are read from the live node table (slots are
reused when nodes come and go); that costs one pass over the rejected nodes, the same order of work as the
FitError histogram itself. Only failed attempts are kept, only the latest per pod, only while the pod is
pending, and at most :data:`MAX_PODS` pods (the oldest are forgotten first), so memory stays bounded however
many pods are stuck.

When PostFilter ran (DefaultPreemption), its :class:`PostFilterResult` says per node why preemption did or
did not help there (``node_messages``) and which node it nominated; the account carries both, so a user sees
not only why the pod fits nowhere but also why evicting lower-priority pods would (or would not) change that.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from kopf_scheduler.framework import PostFilterResult
from kopf_scheduler.scheduler import FitError

#: Pods whose last failed attempt is kept; beyond this the oldest accounts are dropped.
MAX_PODS = 1000


def explain_fit_error(
    fit: FitError, *, profile: str, at: str, post_filter: PostFilterResult | None = None
) -> dict[str, Any]:
    """A JSON-ready account of one failed attempt: the FitError text, then each node's verdict.

    ``nodes`` maps every node the cycle judged to the plugin that rejected it and that plugin's reasons;
    nodes it never judged individually (a PreFilter rejected the pod, or a PreFilterResult narrowed the
    candidates) share ``otherNodes``. With a PostFilter result, each node gets what PostFilter said of it
    (``preemption``), and ``nominatedNode`` names the node preemption made room on.
    """
    diagnosis = fit.diagnosis
    by_node = diagnosis.node_to_status
    nodes = {name: {"plugin": status.plugin, "reasons": list(status.reasons)} for name, status in by_node.items()}
    account: dict[str, Any] = {
        "pod": fit.pod.key,
        "profile": profile,
        "time": at,
        "result": "Unschedulable",
        "message": fit.message,
        "numNodes": fit.num_all_nodes,
        "rejectedByPlugin": dict(sorted(diagnosis.statuses.counts_by_plugin().items())),
        "nodes": dict(sorted(nodes.items())),
    }
    others = fit.num_all_nodes - len(nodes)
    if others > 0:
        absent = diagnosis.absent_nodes_status
        account["otherNodes"] = {"count": others, "plugin": absent.plugin, "reasons": list(absent.reasons)}
    if diagnosis.pre_filter_msg:
        account["preFilter"] = diagnosis.pre_filter_msg
    if diagnosis.post_filter_msg:
        account["postFilter"] = diagnosis.post_filter_msg
    if post_filter is not None:
        _add_post_filter(account, post_filter)
    return account


def _add_post_filter(account: dict[str, Any], result: PostFilterResult) -> None:
    """Each judged node gets its ``preemption`` message; the nodes judged together share theirs in
    ``otherNodes`` (the distinct messages only, so the account stays small however many nodes there are)."""
    nodes: dict[str, Any] = account["nodes"]
    unjudged: set[str] = set()
    for name, message in (result.node_messages or {}).items():
        if name in nodes:
            nodes[name]["preemption"] = message
        else:
            unjudged.add(message)
    others = account.get("otherNodes")
    if others is not None and unjudged:
        others["preemption"] = sorted(unjudged)
    if result.nominated_node_name:
        account["nominatedNode"] = result.nominated_node_name


class Explanations:
    """The latest failed-attempt account per pending pod, keyed by ``namespace/name``; bounded."""

    def __init__(self, *, max_pods: int = MAX_PODS) -> None:
        self._accounts: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._max_pods = max_pods

    def record(self, key: str, account: dict[str, Any]) -> None:
        self._accounts[key] = account
        self._accounts.move_to_end(key)
        while len(self._accounts) > self._max_pods:
            self._accounts.popitem(last=False)

    def forget(self, key: str) -> None:
        """The pod was bound or deleted: its last failure no longer explains anything."""
        self._accounts.pop(key, None)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._accounts.get(key)

    def __len__(self) -> int:
        return len(self._accounts)


def format_account(account: dict[str, Any]) -> str:
    """The account as ``kopf-scheduler explain`` prints it: the upstream message, then a table per node."""
    lines = [
        f"Pod {account['pod']}: {account['result']} (profile {account['profile']}, attempt at {account['time']})",
        account["message"],
    ]
    if account.get("preFilter"):
        lines.append(f"PreFilter: {account['preFilter']}")
    if account.get("postFilter"):
        lines.append(f"PostFilter: {account['postFilter']}")
    if account.get("nominatedNode"):
        lines.append(f"Nominated node (preemption): {account['nominatedNode']}")
    counts = account.get("rejectedByPlugin") or {}
    if counts:
        lines += ["", "Nodes rejected, by plugin:"]
        width = max(len(plugin) for plugin in counts)
        lines += [f"  {plugin:<{width}}  {count}" for plugin, count in counts.items()]
    nodes = account.get("nodes") or {}
    if nodes:
        name_width = max(len("NODE"), *(len(name) for name in nodes))
        plugin_width = max(len("PLUGIN"), *(len(v["plugin"] or "-") for v in nodes.values()))
        lines += ["", f"{'NODE':<{name_width}}  {'PLUGIN':<{plugin_width}}  REASONS"]
        for name, verdict in nodes.items():
            reasons = "; ".join(verdict["reasons"]) or "-"
            lines.append(f"{name:<{name_width}}  {verdict['plugin'] or '-':<{plugin_width}}  {reasons}")
            if verdict.get("preemption"):
                lines.append(f"{'':<{name_width}}  preemption: {verdict['preemption']}")
    others = account.get("otherNodes")
    if others:
        reasons = "; ".join(others["reasons"]) or "not considered"
        by = f"{others['plugin']}: " if others.get("plugin") else ""
        lines += ["", f"{others['count']} other node(s): {by}{reasons}"]
        lines += [f"  preemption: {message}" for message in others.get("preemption") or ()]
    return "\n".join(lines)
