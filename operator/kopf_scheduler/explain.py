"""Why a pod is where it is, or why it fits nowhere: node by node and plugin by plugin, beyond kube-scheduler.

kube-scheduler's FailedScheduling text is a histogram ("0/3 nodes are available: 1 node(s) had untolerated
taint ..., 2 Insufficient cpu."): it says how many nodes failed for which reason, never which node failed for
which; and its Scheduled event names the node, never why that one. The cycle knows both, so the operator keeps
accounts per pod and serves them at ``/explain/<namespace>/<pod>`` beside ``/metrics`` (``kopf-scheduler
explain`` prints them with :func:`format_account`; docs/explain.md shows them).

Failures (always kept). The account is built when the attempt fails (its Diagnosis holds every rejected node's
Status with the plugin that returned it), because node names are read from the live node table (slots are reused
when nodes come and go); that costs one pass over the rejected nodes, the same order of work as the FitError
histogram itself; nodes failing alike share one verdict, and the store keeps an account's nodes packed
(:class:`_PackedNodes`: 1.4 MB → ≈ 60 KB at 5000 nodes). The latest attempt of each pending pod is kept in full, and
the last :data:`HISTORY_LENGTH` attempts as summaries with what changed between consecutive ones
(:func:`attempt_changes`); only while the pod is pending, and at most :data:`MAX_PODS` pods (the least recently
failed are forgotten first). When PostFilter ran (DefaultPreemption), its :class:`PostFilterResult` says per node
why preemption did or did not help there (``node_messages``) and which node it nominated; the account carries both.

Successes (per profile, ``spec.explain.successes``). Upstream's ``prioritizeNodes`` computes, per feasible node,
each Score plugin's score, normalises it (NormalizeScore), weights it, and sums the weighted scores into the
total that ``selectHost`` compares. :func:`capture_scores` takes the winner's and the best
:data:`RUNNERS_UP` other nodes' numbers from the cycle's own :class:`ScoreOutcome` (nothing is scored again),
in the synchronous cycle while slots still name those nodes; :func:`success_account` turns that into JSON when
asked. The last :data:`MAX_BOUND_PODS` bound pods' captures are kept in a ring. The capture costs a measurable
share of a cycle (docs/benchmarks.md), hence the opt-in.

Pods of a pod group. A pod waiting at PreEnqueue for its gang has no account (no cycle ran); the app adds the
group's live state when asked (``SchedulerApp.explain``, :func:`pod_group_section`): nothing is stored for it,
but what the group's last pod-group cycle tried (the placements, each with how its members fared: the pod-group
cycle keeps that, ``pod_group_placement.PlacementHistory``) and the victims of the group's last preemption
(workload-aware preemption), which DefaultPreemption remembers.
"""

from __future__ import annotations

import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kopf_scheduler.algorithm import FitError, ScheduleResult
from kopf_scheduler.framework import PodGroupPreemption, PostFilterResult
from kopf_scheduler.framework.status import Status
from kopf_scheduler.framework.waiting_pods import WaitingPod
from kopf_scheduler.go_format import go_duration
from kopf_scheduler.plugins.gang_scheduling import gang_min_count
from kopf_scheduler.state.pod_group_state import PodGroupStateData

#: Pending pods whose failed attempts are kept; beyond this the least recently failed are dropped.
MAX_PODS = 1000
#: Bound pods whose success account is kept (the ``explainBoundPods`` run setting).
MAX_BOUND_PODS = 256
#: Failed attempts kept per pending pod (the ``explainHistory`` run setting).
HISTORY_LENGTH = 5
#: Nodes listed beside the winner in a success account.
RUNNERS_UP = 3
#: Nodes named per kind of change in a history entry (the rest are counted).
MAX_CHANGED_NODES = 10
#: Member pods named per kind in a pod group section (the rest are counted).
MAX_GROUP_NAMES = 5


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
    verdicts = _Verdicts()
    nodes = {name: verdicts.of(status.plugin, status.reasons) for name, status in diagnosis.node_to_status.items()}
    account: dict[str, Any] = {
        "pod": fit.pod.key,
        "profile": profile,
        "time": at,
        "result": "Unschedulable",
        "message": fit.message,
        "numNodes": fit.num_all_nodes,
        "rejectedByPlugin": dict(sorted(diagnosis.statuses.counts_by_plugin().items())),
        "nodes": {name: nodes[name] for name in sorted(nodes)},  # names only: no tuple per node to sort
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
        _add_post_filter(account, post_filter, verdicts)
    return account


class _Verdicts:
    """One verdict dict per distinct verdict of an account, shared by every node that has it: at 5000 nodes a
    dict and a list per node would be 1.4 MB per failed attempt (built and kept for up to :data:`MAX_PODS` pods), and
    a cluster's nodes mostly fail for a handful of reasons. Shared, so never changed once made."""

    def __init__(self) -> None:
        self._made: dict[tuple[Any, ...], dict[str, Any]] = {}

    def of(self, plugin: str | None, reasons: Sequence[str], preemption: str | None = None) -> dict[str, Any]:
        key = (plugin, tuple(reasons), preemption)
        verdict = self._made.get(key)
        if verdict is None:
            verdict = {"plugin": plugin, "reasons": list(reasons)}
            if preemption is not None:
                verdict["preemption"] = preemption
            self._made[key] = verdict
        return verdict


def _add_post_filter(account: dict[str, Any], result: PostFilterResult, verdicts: _Verdicts) -> None:
    """Each judged node gets its ``preemption`` message; the nodes judged together share theirs in
    ``otherNodes`` (the distinct messages only, so the account stays small however many nodes there are)."""
    nodes: dict[str, Any] = account["nodes"]
    unjudged: set[str] = set()
    for name, message in (result.node_messages or {}).items():
        verdict = nodes.get(name)
        if verdict is not None:
            nodes[name] = verdicts.of(verdict["plugin"], verdict["reasons"], message)
        else:
            unjudged.add(message)
    others = account.get("otherNodes")
    if others is not None and unjudged:
        others["preemption"] = sorted(unjudged)
    if result.nominated_node_name:
        account["nominatedNode"] = result.nominated_node_name


@dataclass(slots=True)
class ScoreCapture:
    """The scoring step of one successful cycle, cut down to the winner and the runners-up.

    Taken in the scheduling cycle from the :class:`ScoreOutcome` that host selection compared (nothing is
    scored again), with node names read while the slots still mean those nodes; turned into JSON only when
    someone asks (:meth:`Explanations.get`). ``raw`` and ``weighted`` hold one row per plugin, one column per
    listed node (the winner first).
    """

    node: str
    at: float
    evaluated_nodes: int
    feasible_nodes: int
    nodes: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    weights: tuple[int, ...] = ()
    raw: tuple[list[int], ...] = ()
    weighted: tuple[list[int], ...] = ()
    totals: tuple[int, ...] = ()


def capture_scores(
    result: ScheduleResult, names: Sequence[str | None], *, at: float, runners_up: int = RUNNERS_UP
) -> ScoreCapture:
    """The winner's and the best ``runners_up`` other nodes' per-plugin scores, from the cycle's own arrays.

    ``names`` is the node table's name column (``result.scores.nodes`` are its slots). When scoring did not
    run (one feasible node, or the nominated node fit) only the counts are kept.
    """
    scores = result.scores
    if scores is None or not len(scores.nodes):
        return ScoreCapture(result.suggested_host, at, result.evaluated_nodes, result.feasible_nodes)
    totals = scores.totals
    best = _best_positions(totals, runners_up + 1)
    slots = scores.nodes[best].tolist()
    if result.slot in slots:  # the winner has the highest total: it is there unless more nodes tie with it
        winner = best[slots.index(result.slot)]
    else:
        winner = int(np.flatnonzero(scores.nodes == result.slot)[0])
    positions = np.asarray([winner, *[p for p in best if p != winner][:runners_up]], dtype=np.int64)
    slots = scores.nodes[positions].tolist()
    raw_rows = scores.raw or scores.scores
    return ScoreCapture(
        node=result.suggested_host,
        at=at,
        evaluated_nodes=result.evaluated_nodes,
        feasible_nodes=result.feasible_nodes,
        nodes=tuple(str(names[slot]) for slot in slots),
        plugins=scores.plugins,
        weights=scores.weights,
        raw=tuple([row[positions].tolist() for row in raw_rows]),
        weighted=tuple([row[positions].tolist() for row in scores.scores]),
        totals=tuple(totals[positions].tolist()),
    )


def _best_positions(totals: np.ndarray, k: int) -> list[int]:
    """Positions of ``k`` highest totals, best first (among equal totals, in node order)."""
    count = len(totals)
    positions = np.argpartition(totals, count - k)[count - k :].tolist() if count > k else list(range(count))
    return [p for _, p in sorted(zip([-v for v in totals[positions].tolist()], positions, strict=True))]


def success_account(key: str, profile: str, capture: ScoreCapture) -> dict[str, Any]:
    """A JSON-ready account of a successful placement: the winner and runners-up, plugin by plugin.

    Each candidate has, per Score plugin, upstream's four numbers: ``raw`` (what Score returned),
    ``normalized`` (after NormalizeScore, 0-100), ``weight`` and ``weighted`` (normalized × weight), and the
    node's ``total`` (the sum of the weighted scores: what selectHost compared).
    """
    account: dict[str, Any] = {
        "pod": key,
        "profile": profile,
        "time": rfc3339(capture.at),
        "result": "Scheduled",
        "node": capture.node,
        "evaluatedNodes": capture.evaluated_nodes,
        "feasibleNodes": capture.feasible_nodes,
    }
    if not capture.nodes:
        account["message"] = (
            "Score did not run: the only feasible node found (one feasible node, the pod's nominated node, or a "
            "profile without Score plugins, which stops the search at the first feasible node)"
        )
        return account
    candidates = []
    for j, node in enumerate(capture.nodes):
        plugins = {
            name: {
                "raw": capture.raw[i][j],
                "normalized": capture.weighted[i][j] // weight if weight else 0,
                "weight": weight,
                "weighted": capture.weighted[i][j],
            }
            for i, (name, weight) in enumerate(zip(capture.plugins, capture.weights, strict=True))
        }
        candidates.append({"node": node, "chosen": j == 0, "total": capture.totals[j], "plugins": plugins})
    account["scorePlugins"] = [{"name": n, "weight": w} for n, w in zip(capture.plugins, capture.weights, strict=True)]
    account["candidates"] = candidates
    ties = sum(1 for total in capture.totals[1:] if total == capture.totals[0])
    if ties:
        account["tie"] = f"{ties + 1} nodes share the highest total; the winner was picked at random among them"
    return account


# -- history of a pending pod ---------------------------------------------------------------------------
def attempt_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What changed between two failed attempts' accounts: the node count, the per-plugin rejection counts,
    and which nodes were judged differently (at most :data:`MAX_CHANGED_NODES` named per kind, all counted)."""
    changes: dict[str, Any] = {}
    if before.get("numNodes") != after.get("numNodes"):
        changes["numNodes"] = {"from": before.get("numNodes"), "to": after.get("numNodes")}
    counts_before, counts_after = before.get("rejectedByPlugin") or {}, after.get("rejectedByPlugin") or {}
    by_plugin = {
        plugin: {"from": counts_before.get(plugin, 0), "to": counts_after.get(plugin, 0)}
        for plugin in sorted(counts_before.keys() | counts_after.keys())
        if counts_before.get(plugin, 0) != counts_after.get(plugin, 0)
    }
    if by_plugin:
        changes["rejectedByPlugin"] = by_plugin
    old, new = before.get("nodes") or {}, after.get("nodes") or {}
    _named(changes, "nodesAdded", sorted(new.keys() - old.keys()))
    _named(changes, "nodesGone", sorted(old.keys() - new.keys()))
    changed = [
        {"node": name, "from": _verdict(old[name]), "to": _verdict(new[name])}
        for name in sorted(old.keys() & new.keys())
        if (old[name]["plugin"], old[name]["reasons"]) != (new[name]["plugin"], new[name]["reasons"])
    ]
    _named(changes, "nodesChanged", changed)
    if before.get("message") != after.get("message") and not changes:
        changes["message"] = "changed"
    return changes


def _named(changes: dict[str, Any], kind: str, items: list[Any]) -> None:
    if items:
        changes[kind] = items[:MAX_CHANGED_NODES]
        if len(items) > MAX_CHANGED_NODES:
            changes[kind + "More"] = len(items) - MAX_CHANGED_NODES


def _verdict(node: dict[str, Any]) -> str:
    return f"{node['plugin'] or '-'}: {'; '.join(node['reasons']) or '-'}"


def _history_entry(account: dict[str, Any], changes: dict[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {key: account[key] for key in ("time", "result", "message") if key in account}
    for key in ("numNodes", "nominatedNode"):
        if key in account:
            entry[key] = account[key]
    if changes is not None:
        entry["changes"] = changes
    return entry


@dataclass(frozen=True, slots=True)
class _PackedNodes:
    """An account's ``nodes`` as kept: the node names in their order, and for each the index of its verdict
    among the distinct ones. Up to :data:`MAX_PODS` accounts of every node are kept; at 5000 nodes one took
    1.4 MB as a dict of dicts, ≈ 60 KB packed (the names are the node table's own strings)."""

    names: tuple[str, ...]
    verdicts: tuple[dict[str, Any], ...]
    index: array[int]

    @classmethod
    def pack(cls, nodes: dict[str, dict[str, Any]]) -> _PackedNodes:
        """Packs ``nodes``; verdicts are told apart by identity (:func:`explain_fit_error` shares equal ones)."""
        position: dict[int, int] = {}
        verdicts: list[dict[str, Any]] = []
        index = array("I")
        for verdict in nodes.values():
            at = position.get(id(verdict))
            if at is None:
                at = position[id(verdict)] = len(verdicts)
                verdicts.append(verdict)
            index.append(at)
        return cls(tuple(nodes), tuple(verdicts), index)

    def unpack(self) -> dict[str, dict[str, Any]]:
        verdicts = self.verdicts
        return {name: verdicts[at] for name, at in zip(self.names, self.index, strict=True)}


def _packed(account: dict[str, Any]) -> dict[str, Any]:
    nodes = account.get("nodes")
    return account if not nodes else {**account, "nodes": _PackedNodes.pack(nodes)}


def _unpacked(account: dict[str, Any]) -> dict[str, Any]:
    nodes = account.get("nodes")
    return {**account, "nodes": nodes.unpack()} if isinstance(nodes, _PackedNodes) else account


@dataclass(slots=True)
class _Pending:
    """A pending pod: its latest failed attempt in full, the latest FitError account (what the next one is
    compared with) and the last attempts' summaries, oldest first. Accounts are kept packed (``_packed``)."""

    account: dict[str, Any]
    fit: dict[str, Any] | None
    history: deque[dict[str, Any]]


class Explanations:
    """Accounts per pod, keyed by ``namespace/name``; every part bounded.

    - pending pods: the latest failed attempt in full and the last ``history`` attempts summarised, with what
      changed between consecutive ones; at most ``max_pods`` pods (least recently failed forgotten first);
    - bound pods: the success account (winner, runners-up, per-plugin scores) of the last ``max_bound`` pods
      bound by this replica (a ring; 0 keeps none).
    """

    def __init__(self, *, max_pods: int = MAX_PODS, max_bound: int = MAX_BOUND_PODS, history: int = HISTORY_LENGTH):
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._bound: OrderedDict[str, tuple[str, ScoreCapture]] = OrderedDict()
        self._max_pods = max_pods
        self.max_bound = max_bound
        self._history = max(history, 1)

    def record(self, key: str, account: dict[str, Any]) -> None:
        """A failed attempt's account (:func:`explain_fit_error`'s, or any failure's with ``time``,
        ``result`` and ``message``): it becomes the latest, and joins the pod's history."""
        self._bound.pop(key, None)
        pending = self._pending.pop(key, None)
        is_fit = "nodes" in account
        if pending is None:
            pending = _Pending(account, None, deque(maxlen=self._history))
            changes: dict[str, Any] | None = None
        else:
            # Only two FitErrors compare node by node; an error, or a FitError after only errors, has no diff.
            before = _unpacked(pending.fit) if is_fit and pending.fit is not None else None
            changes = attempt_changes(before, account) if before is not None else None
        kept = _packed(account)
        pending.account = kept
        if is_fit:
            pending.fit = kept
        pending.history.append(_history_entry(account, changes))
        self._pending[key] = pending
        while len(self._pending) > self._max_pods:
            self._pending.popitem(last=False)

    def record_success(self, key: str, profile: str, capture: ScoreCapture) -> None:
        """The pod was bound where ``capture`` says: its failures are over, its success is kept (ring)."""
        self._pending.pop(key, None)
        if self.max_bound <= 0:
            return
        self._bound.pop(key, None)
        self._bound[key] = (profile, capture)
        while len(self._bound) > self.max_bound:
            self._bound.popitem(last=False)

    def forget(self, key: str) -> None:
        """The pod was bound or deleted: its last failures no longer explain anything (a success account
        stays in its ring: where a pod went stays true after it is gone)."""
        self._pending.pop(key, None)

    def get(self, key: str) -> dict[str, Any] | None:
        """The pod's account: a pending pod's latest failure with ``history``, or a bound pod's success."""
        pending = self._pending.get(key)
        if pending is not None:
            return {**_unpacked(pending.account), "history": list(pending.history)}
        bound = self._bound.get(key)
        if bound is not None:
            return success_account(key, *bound)
        return None

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def bound_count(self) -> int:
        return len(self._bound)


# -- the pod group of a pod (computed when asked, never stored) ---------------------------------------
def pod_group_section(
    name: str,
    pod_group: dict[str, Any] | None,
    state: PodGroupStateData | None,
    *,
    waiting: Sequence[WaitingPod] = (),
    pre_enqueue: Status | None = None,
    placements: dict[str, Any] | None = None,
    preemption: PodGroupPreemption | None = None,
    victim_states: Sequence[str] = (),
) -> dict[str, Any]:
    """A JSON-ready account of the pod group a pod names: its policy, its members as the cache splits them
    (counts, and at most :data:`MAX_GROUP_NAMES` names each), the members waiting at Permit with the time left
    to each waited-for plugin, the PreEnqueue verdict that holds the pod (``pre_enqueue``, if it is held), and the
    victims of the group's last preemption (``preemption``; ``victim_states``: where each is now, in its order).

    ``pod_group`` is the PodGroup object (None when the API server has none), ``state`` the cache's live state
    of the group (None when no member is known), ``placements`` what the group's last pod-group cycle tried
    (``PlacementsTried.to_json``; None before its first cycle)."""
    section: dict[str, Any] = {"name": name}
    if pod_group is None:
        section["policy"] = None
        section["message"] = "PodGroup not found"
    else:
        min_count = gang_min_count(pod_group)
        if min_count is None:
            section["policy"] = "basic"
        else:
            section["policy"] = "gang"
            section["minCount"] = min_count
    section["members"] = _group_members(state)
    section["waitingAtPermit"] = _waiting_at_permit(waiting)
    if pre_enqueue is not None and not pre_enqueue.is_success:
        section["preEnqueue"] = {"plugin": pre_enqueue.plugin, "message": pre_enqueue.message}
    if placements is not None:
        section["placements"] = placements
    if preemption is not None:
        victims = [
            {"pod": key, "state": state}
            for (key, _), state in zip(preemption.victims[:MAX_GROUP_NAMES], victim_states, strict=False)
        ]
        section["preemption"] = {"at": rfc3339(preemption.at), "count": len(preemption.victims), "victims": victims}
    return section


def coscheduling_group_section(
    name: str,
    pod_group: dict[str, Any] | None,
    state: PodGroupStateData | None,
    *,
    waiting: Sequence[WaitingPod] = (),
    min_resources: str | None = None,
    backed_off_seconds: float = 0.0,
) -> dict[str, Any]:
    """The same account for a pod of a Coscheduling PodGroup (the ``scheduling.x-k8s.io/pod-group`` label): the
    group's pods against minMember, the minResources verdict (``min_resources``: "fits", or the "resource gap"
    text PreFilter gives; None without minResources), the PodGroup's Permit timeout and status, a backoff left
    after a failure, its members and those waiting at Permit with the time left."""
    section: dict[str, Any] = {"name": name, "api": "scheduling.x-k8s.io/v1alpha1"}
    if pod_group is None:
        section["policy"] = None
        section["message"] = "PodGroup not found"
    else:
        spec = pod_group.get("spec") or {}
        section["policy"] = "coscheduling"
        section["minMember"] = int(spec.get("minMember") or 0)
        if spec.get("scheduleTimeoutSeconds") is not None:
            section["scheduleTimeoutSeconds"] = spec["scheduleTimeoutSeconds"]
        section["phase"] = (pod_group.get("status") or {}).get("phase") or ""
    if min_resources is not None:
        section["minResources"] = min_resources
    if backed_off_seconds > 0:
        section["backoffSecondsLeft"] = int(backed_off_seconds)
    section["members"] = _group_members(state)
    section["waitingAtPermit"] = _waiting_at_permit(waiting)
    return section


def _group_members(state: PodGroupStateData | None) -> dict[str, Any]:
    members: dict[str, Any] = {"known": 0 if state is None else state.all_pods_count()}
    if state is not None:
        pods = state.all_pods
        kinds = (("unscheduled", state.unscheduled), ("assumed", state.assumed), ("assigned", state.assigned))
        for kind, uids in kinds:
            names = sorted(pods[uid].name for uid in uids if uid in pods)
            members[kind] = {"count": len(uids), "pods": names[:MAX_GROUP_NAMES]}
    else:
        members.update({kind: {"count": 0, "pods": []} for kind in ("unscheduled", "assumed", "assigned")})
    return members


def _waiting_at_permit(waiting: Sequence[WaitingPod]) -> dict[str, Any]:
    now, wall = time.monotonic(), time.time()
    waits = []
    for waiting_pod in sorted(waiting, key=lambda w: w.pod.name)[:MAX_GROUP_NAMES]:
        plugins = [
            {"plugin": plugin, "deadline": rfc3339(wall + deadline - now), "secondsLeft": max(0, int(deadline - now))}
            for plugin, deadline in sorted(waiting_pod.deadlines.items())
        ]
        waits.append({"pod": waiting_pod.pod.name, "since": rfc3339(waiting_pod.since), "plugins": plugins})
    return {"count": len(waiting), "pods": waits}


def format_pod_group(section: dict[str, Any]) -> str:
    """The pod group section as ``kopf-scheduler explain`` prints it: a few lines under the pod's account."""
    policy = section.get("policy")
    if policy is None:
        title = section.get("message") or "PodGroup not found"
    elif policy == "gang":
        title = f"gang, minCount {section.get('minCount')}"
    elif policy == "coscheduling":
        title = f"Coscheduling ({section.get('api')}), minMember {section.get('minMember')}"
        if section.get("phase"):
            title += f", phase {section['phase']}"
    else:
        title = str(policy)
    lines = [f"Pod group {section['name']}: {title}"]
    members = section.get("members") or {}
    known = f"{members.get('known', 0)} known"
    if policy == "coscheduling":
        known += f" of minMember {section.get('minMember')}"
    counts = [known]
    for kind in ("unscheduled", "assumed", "assigned"):
        part = members.get(kind) or {}
        count, names = part.get("count", 0), part.get("pods") or []
        named = ""
        if names:
            more = f", +{count - len(names)} more" if count > len(names) else ""
            named = f" ({', '.join(names)}{more})"
        counts.append(f"{count} {kind}{named}")
    lines.append(f"  Members: {', '.join(counts)}")
    if section.get("minResources") is not None:
        lines.append(f"  minResources: {section['minResources']}")
    if section.get("backoffSecondsLeft"):
        lines.append(f"  Backed off after a failure: {go_duration(section['backoffSecondsLeft'])} left")
    if section.get("scheduleTimeoutSeconds") is not None:
        lines.append(f"  Permit timeout: {go_duration(section['scheduleTimeoutSeconds'])} (scheduleTimeoutSeconds)")
    pre_enqueue = section.get("preEnqueue")
    if pre_enqueue:
        lines.append(f"  Held at PreEnqueue by {pre_enqueue.get('plugin') or '-'}: {pre_enqueue.get('message', '')}")
    waiting = section.get("waitingAtPermit") or {}
    if waiting.get("count"):
        lines.append(f"  Waiting at Permit: {waiting['count']} pod(s)")
        for entry in waiting.get("pods") or ():
            plugins = "; ".join(
                f"{p['plugin']} {go_duration(p['secondsLeft'])} left (until {p['deadline']})"
                for p in entry.get("plugins") or ()
            )
            lines.append(f"    {entry['pod']} since {entry['since']}: {plugins or '-'}")
        if waiting["count"] > len(waiting.get("pods") or ()):
            lines.append(f"    (+{waiting['count'] - len(waiting.get('pods') or ())} more)")
    placements = section.get("placements")
    if placements:
        lines += format_placements(placements)
    preemption = section.get("preemption")
    if preemption:
        victims = preemption.get("victims") or []
        named = ", ".join(f"{v['pod']} ({v['state']})" for v in victims)
        more = preemption["count"] - len(victims)
        named += f", +{more} more" if more > 0 else ""
        lines.append(f"  Last preemption for the group at {preemption['at']}: {preemption['count']} victim(s): {named}")
    return "\n".join(lines)


def format_placements(placements: dict[str, Any]) -> list[str]:
    """The placements the group's last cycle tried: the verdict, then each placement with its members."""
    generator = placements.get("generator") or "no PlacementGenerate plugin: one placement of every node"
    lines = [f"  Placements tried at {placements.get('time')} ({generator}): {placements.get('count', 0)}"]
    generate = placements.get("generateStatus")
    if generate:
        lines.append(f"    PlacementGenerate: {generate['code']}: {generate['message']}")
    for entry in placements.get("tried") or ():
        name = entry.get("name") or "(every node)"
        verdict = entry["code"] + (f": {entry['message']}" if entry.get("message") else "")
        extra = f", score {entry['score']}" if entry.get("score") is not None else ""
        chosen = " (chosen)" if entry.get("chosen") else ""
        lines.append(f"    {name}, {entry['nodes']} node(s): {verdict}{extra}{chosen}")
        for member in entry.get("members") or ():
            where = f"on {member['node']}" if "node" in member else member.get("message", "")
            lines.append(f"      {member['pod']}: {where}")
        if entry.get("moreMembers"):
            lines.append(f"      (+{entry['moreMembers']} more)")
    if placements.get("notTried"):
        lines.append(
            f"    ({placements['notTried']} not tried: none could score above the chosen one, which holds every"
            " member; tried best first, equals in a random order)"
        )
    status = placements.get("status")
    if status and status.get("code") != "Success":
        lines.append(f"    Result: {status['code']}: {status['message']}")
    return lines


def rfc3339(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def format_account(account: dict[str, Any]) -> str:
    """The account as ``kopf-scheduler explain`` prints it: a bound pod's scores (:func:`format_success`), or a
    pending pod's latest failure (:func:`format_failure`) followed by its history; a pod of a pod group gets its
    group's section (:func:`format_pod_group`) after the account (before the history)."""
    group = account.get("podGroup")
    if "result" not in account:  # a pod of a pod group that no cycle has tried yet: its group is all there is
        text = f"Pod {account['pod']}: no scheduling attempt recorded"
        return text + "\n\n" + format_pod_group(group) if group is not None else text
    if account.get("result") == "Scheduled":
        text = format_success(account)
        return text + "\n\n" + format_pod_group(group) if group is not None else text
    text = format_failure(account)
    if group is not None:
        text += "\n\n" + format_pod_group(group)
    history = account.get("history") or []
    return text + "\n\n" + format_history(history) if history else text


def format_success(account: dict[str, Any]) -> str:
    """The winner and runners-up, one row per node and Score plugin, each node's total last."""
    lines = [
        f"Pod {account['pod']}: Scheduled on {account['node']} (profile {account['profile']}, at {account['time']})",
        f"{account['feasibleNodes']} feasible node(s) of {account['evaluatedNodes']} evaluated.",
    ]
    if account.get("message"):
        lines.append(account["message"])
    candidates = account.get("candidates") or []
    if not candidates:
        return "\n".join(lines)
    if account.get("tie"):
        lines.append(f"Tie: {account['tie']}.")
    labels = [c["node"] + (" (chosen)" if c["chosen"] else "") for c in candidates]
    node_width = max(len("NODE"), *(len(label) for label in labels))
    plugin_width = max(len("PLUGIN"), len("total"), *(len(p["name"]) for p in account["scorePlugins"]))
    header = f"{'NODE':<{node_width}}  {'PLUGIN':<{plugin_width}}  {'RAW':>5}  {'NORMALIZED':>10}  {'WEIGHT':>6}  "
    lines += ["", header + f"{'WEIGHTED':>8}"]
    for label, candidate in zip(labels, candidates, strict=True):
        first = True
        for name, score in candidate["plugins"].items():
            node = label if first else ""
            first = False
            lines.append(
                f"{node:<{node_width}}  {name:<{plugin_width}}  {score['raw']:>5}  {score['normalized']:>10}  "
                f"{score['weight']:>6}  {score['weighted']:>8}"
            )
        total_label = label if first else ""
        lines.append(f"{total_label:<{node_width}}  {'total':<{plugin_width}}  {'':>5}  {'':>10}  {'':>6}  ")
        lines[-1] += f"{candidate['total']:>8}"
    return "\n".join(lines)


def format_history(history: list[dict[str, Any]]) -> str:
    """The last attempts, oldest first, each with what changed since the one before."""
    lines = [f"History (last {len(history)} attempt(s), oldest first):"]
    for entry in history:
        lines.append(f"  {entry.get('time', '?')}  {entry.get('result', '?')}: {entry.get('message', '')}")
        changes = entry.get("changes")
        if changes is None:
            continue
        lines += [f"      {line}" for line in _change_lines(changes)] or ["      no change in the verdicts"]
    return "\n".join(lines)


def _change_lines(changes: dict[str, Any]) -> list[str]:
    lines = []
    if "numNodes" in changes:
        lines.append(f"nodes: {changes['numNodes']['from']} → {changes['numNodes']['to']}")
    for plugin, counts in (changes.get("rejectedByPlugin") or {}).items():
        lines.append(f"rejected by {plugin}: {counts['from']} → {counts['to']}")
    for kind, label in (("nodesAdded", "newly rejected"), ("nodesGone", "no longer rejected")):
        if changes.get(kind):
            more = f" (+{changes[kind + 'More']} more)" if changes.get(kind + "More") else ""
            lines.append(f"{label}: {', '.join(changes[kind])}{more}")
    for change in changes.get("nodesChanged") or ():
        lines.append(f"{change['node']}: {change['from']} → {change['to']}")
    if changes.get("nodesChangedMore"):
        lines.append(f"(+{changes['nodesChangedMore']} more nodes changed)")
    if changes.get("message"):
        lines.append("the message changed")
    return lines


def format_failure(account: dict[str, Any]) -> str:
    """A failed attempt: the upstream message, then a table per node."""
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
